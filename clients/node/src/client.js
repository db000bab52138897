// A small promise-based client for the edgetune Coordinator (gRPC package edgetune.v1).
//
// Stubs are built at run time by @grpc/proto-loader from the repository's own .proto files
// (protos/edgetune/v1/), so the .proto files stay the single source of truth: there is no
// generation step and nothing generated to commit or to let go stale.
//
//   import { connect } from 'edgetune-client';
//   const client = connect('127.0.0.1:50054');
//   await client.registerNode({ nodeId: 'jetson-7', device: 'orin-agx', powerBudgetW: 25 });
//   const cfg = await client.getNodeConfig('jetson-7');
//   client.close();
//
// Messages come back as plain objects shaped like the .proto (see LOADER_OPTIONS): field
// names as written (snake_case), int64 as decimal strings, enums as their names.

import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';
import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';

/** The repository's protos/ directory: the include root every edgetune import is relative to. */
export const PROTO_ROOT = fileURLToPath(new URL('../../../protos/', import.meta.url));

// The standard grpc.health.v1 definition as shipped by the official grpc-health-check
// package (a dependency), so no copy of it lives in this repository. Resolved as a file,
// not imported: importing that package would load a second proto-loader for nothing.
const HEALTH_PROTO = createRequire(import.meta.url).resolve('grpc-health-check/proto/health/v1/health.proto');

export const LOADER_OPTIONS = Object.freeze({
  keepCase: true, // field names exactly as in the .proto, like every other edgetune client
  longs: String, // int64 (revision, samples) as strings: no silent precision loss, and it is proto3's JSON mapping
  enums: String, // "ROLE_TRAIN", not 1: readable, and stable if values are ever renumbered
  defaults: true, // proto3 has no presence for plain scalars: show 0 / "" instead of omitting them
  oneofs: true, // proto3 `optional` fields are synthetic oneofs: this is how their presence shows
  includeDirs: [PROTO_ROOT], // resolves "edgetune/v1/common.proto"; google/protobuf/* are bundled
});

/** Default per-call deadline: a coordinator that does not answer within it is treated as down. */
export const DEFAULT_TIMEOUT_MS = 10_000;

let loaded = null;

/** Load (once) the Coordinator and Health service definitions. */
export function loadServices() {
  if (loaded === null) {
    const coordinator = protoLoader.loadSync('edgetune/v1/coordinator.proto', LOADER_OPTIONS);
    const health = protoLoader.loadSync(HEALTH_PROTO, LOADER_OPTIONS);
    loaded = {
      Coordinator: grpc.loadPackageDefinition(coordinator).edgetune.v1.Coordinator,
      Health: grpc.loadPackageDefinition(health).grpc.health.v1.Health,
    };
  }
  return loaded;
}

/** The gRPC status code's name ("INVALID_ARGUMENT") for an error from an RPC. */
export function statusName(code) {
  return grpc.status[code] ?? `UNKNOWN_STATUS_${code}`;
}

/**
 * A message as plain JSON data: Timestamps become RFC 3339 strings (proto3's JSON mapping)
 * and proto-loader's synthetic-oneof markers (`_power_budget_w: "power_budget_w"`) are
 * dropped, since the field itself being present already says it was set.
 */
export function toPlain(message) {
  if (Array.isArray(message)) return message.map(toPlain);
  if (message === null || typeof message !== 'object') return message;
  const keys = Object.keys(message);
  if (keys.length === 2 && 'seconds' in message && 'nanos' in message) {
    const ms = Number(message.seconds) * 1000 + Math.floor(message.nanos / 1e6);
    return new Date(ms).toISOString();
  }
  const out = {};
  for (const key of keys) {
    if (key.startsWith('_') && typeof message[key] === 'string') continue; // synthetic oneof marker
    out[key] = toPlain(message[key]);
  }
  return out;
}

/** Node-style callback RPC -> promise, with a deadline on every call. */
function unary(stub, method, request, timeoutMs) {
  return new Promise((resolve, reject) => {
    const deadline = new Date(Date.now() + timeoutMs);
    stub[method](request, { deadline }, (err, response) => (err ? reject(err) : resolve(response)));
  });
}

/**
 * Channel credentials for a coordinator that serves TLS (`ca`: PEM that verifies it; `cert` +
 * `key`: a client certificate for mTLS) and/or takes a bearer token (sent as
 * `authorization: Bearer TOKEN` on every call). No TLS material: a plain channel (the token,
 * if any, is still sent; keep that to loopback).
 * @param {{ca?: Buffer, cert?: Buffer, key?: Buffer, token?: string}} [security]
 * @returns {grpc.ChannelCredentials}
 */
export function channelCredentials({ ca, cert, key, token } = {}) {
  if (Boolean(cert) !== Boolean(key)) throw new Error('a client certificate needs both cert and key');
  const tls = ca || cert;
  const base = tls ? grpc.credentials.createSsl(ca ?? null, key ?? null, cert ?? null) : grpc.credentials.createInsecure();
  if (!token) return base;
  const bearer = (_params, callback) => {
    const md = new grpc.Metadata();
    md.set('authorization', `Bearer ${token}`);
    callback(null, md);
  };
  if (tls) return grpc.credentials.combineChannelCredentials(base, grpc.credentials.createFromMetadataGenerator(bearer));
  // grpc-js refuses call credentials on an insecure channel: attach the header with an interceptor instead.
  return base;
}

/** A client interceptor that adds the bearer token (plain channels; TLS ones use call credentials). */
function bearerInterceptor(token) {
  return (options, nextCall) => new grpc.InterceptingCall(nextCall(options), {
    start(metadata, listener, next) {
      metadata.set('authorization', `Bearer ${token}`);
      next(metadata, listener);
    },
  });
}

export class EdgetuneClient {
  /**
   * @param {string} address host:port of a Coordinator replica
   * @param {{credentials?: grpc.ChannelCredentials, timeoutMs?: number, token?: string,
   *          ca?: Buffer, cert?: Buffer, key?: Buffer}} [options]
   *   `credentials` wins over `ca` / `cert` / `key` / `token` (see channelCredentials).
   */
  constructor(address, { credentials, timeoutMs = DEFAULT_TIMEOUT_MS, token, ca, cert, key } = {}) {
    const { Coordinator, Health } = loadServices();
    this.address = address;
    this.timeoutMs = timeoutMs;
    /** The raw Coordinator stub, for the RPCs this wrapper does not cover (PlanRound, ...). */
    const creds = credentials ?? channelCredentials({ ca, cert, key, token });
    const plainToken = !credentials && token && !(ca || cert);
    const options = plainToken ? { interceptors: [bearerInterceptor(token)] } : {};
    this.coordinator = new Coordinator(address, creds, options);
    // Same channel for health checks: a SERVING answer then says something about *this* connection.
    this.healthStub = new Health(address, creds, { ...options, channelOverride: this.coordinator.getChannel() });
  }

  /**
   * Register (or re-register) a node. `device` is a device model name ("orin-agx"): the
   * coordinator then uses its built-in frequency tables. Ranges (budget > 0, ...) are
   * checked by the coordinator, which answers INVALID_ARGUMENT naming the field.
   * @returns {Promise<{node_id: string, heartbeat_interval_s: number, config_revision: string}>}
   */
  registerNode({ nodeId = '', hostname = '', address = '', device = '', powerBudgetW, labels = {}, state = '' } = {}) {
    const node = { node_id: nodeId, hostname, address, labels, state };
    if (device) node.device = { name: device };
    // `optional double` in the proto: leave it out for "no budget" (re-registering keeps the stored one).
    if (powerBudgetW !== undefined && powerBudgetW !== null) node.power_budget_w = powerBudgetW;
    return unary(this.coordinator, 'RegisterNode', { node }, this.timeoutMs);
  }

  /** The node's current NodeConfig (rejects with NOT_FOUND before the node has any). */
  getNodeConfig(nodeId) {
    return unary(this.coordinator, 'GetNodeConfig', { node_id: nodeId }, this.timeoutMs);
  }

  /** Every registered node (NodeInfo list). */
  async listNodes() {
    return (await unary(this.coordinator, 'ListNodes', {}, this.timeoutMs)).nodes;
  }

  /**
   * Stream the node's configs: the current one (when above `afterRevision`), then each new
   * one, calling `onConfig(config)` for every one. No deadline: a watch is meant to stay open.
   * @returns {{cancel: () => void, done: Promise<void>}} `done` resolves when the stream ends
   *   or is cancelled, and rejects with the gRPC error otherwise.
   */
  watchConfig(nodeId, onConfig, { afterRevision = 0 } = {}) {
    const call = this.coordinator.WatchConfig({ node_id: nodeId, after_revision: afterRevision });
    let cancelled = false;
    const done = new Promise((resolve, reject) => {
      call.on('data', onConfig);
      call.on('end', resolve);
      call.on('error', (err) => (cancelled && err.code === grpc.status.CANCELLED ? resolve() : reject(err)));
    });
    return {
      cancel: () => {
        cancelled = true;
        call.cancel();
      },
      done,
    };
  }

  /**
   * Submit a TuningJob: `spec` is a TuningJobSpec as a plain object shaped like the .proto
   * (snake_case, enums by name), e.g. `{ name: 'mnv3-train', workload: { name: 'mobilenetv3',
   * role: 'ROLE_TRAIN' }, batch_sizes: [16], nodes: ['orin-agx-1'], profiles: 12 }`. The
   * coordinator checks it (INVALID_ARGUMENT naming the field) and its leader reconciles it.
   * @returns {Promise<object>} the TuningJob (phase, per-node status)
   */
  submitTuningJob(spec) {
    return unary(this.coordinator, 'SubmitTuningJob', { spec }, this.timeoutMs);
  }

  /** A TuningJob by name (rejects with NOT_FOUND when there is none). */
  getTuningJob(name) {
    return unary(this.coordinator, 'GetTuningJob', { name }, this.timeoutMs);
  }

  /** Every TuningJob. */
  async listTuningJobs() {
    return (await unary(this.coordinator, 'ListTuningJobs', {}, this.timeoutMs)).jobs;
  }

  /** Cancel a TuningJob; resolves to the job as it is now. */
  cancelTuningJob(name) {
    return unary(this.coordinator, 'CancelTuningJob', { name }, this.timeoutMs);
  }

  /** Cancel a TuningJob and remove it, so its name is free again; resolves to the job as it was. */
  deleteTuningJob(name) {
    return unary(this.coordinator, 'DeleteTuningJob', { name }, this.timeoutMs);
  }

  /**
   * grpc.health.v1 Check: "SERVING", "NOT_SERVING", ... for `service`
   * ("" = the server as a whole, "edgetune.v1.Coordinator" = the API).
   */
  async health(service = '') {
    return (await unary(this.healthStub, 'Check', { service }, this.timeoutMs)).status;
  }

  close() {
    this.coordinator.close();
  }
}

/** A client for the Coordinator at `address` ("127.0.0.1:50054"). Connects lazily, on the first call. */
export function connect(address, options) {
  return new EdgetuneClient(address, options);
}
