#!/usr/bin/env node
// edgetune-node-client: talk to an edgetune Coordinator from Node.js; prints JSON.
//
// Exit codes follow the edgetune CLI: 0 ok, 2 bad arguments (nothing was sent),
// 1 the RPC failed (stderr names the gRPC status code and the server's message).

import { readFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { connect, statusName, toPlain } from '../src/client.js';

const USAGE = `usage: edgetune-node-client [--address HOST:PORT] [--timeout-s S] [--token TOKEN]
                            [--tls-ca CA.pem [--tls-cert CERT.pem --tls-key KEY.pem]] COMMAND [options]

commands:
  register --node-id ID [--device MODEL] [--power-budget-w W] [--hostname H]
           [--node-address HOST:PORT] [--label KEY=VALUE ...] [--state STATE]
                        register (or re-register) a node; prints the RegisterNodeResponse
  config --node-id ID   print the node's current NodeConfig (NOT_FOUND before any)
  watch --node-id ID [--after-revision N] [--count N]
                        print each NodeConfig as it is pushed, one JSON object per line,
                        until --count configs were printed or Ctrl-C
  nodes                 print every registered node
  job-submit --spec FILE.json
                        submit a TuningJobSpec (JSON shaped like the .proto: snake_case,
                        enums by name); prints the TuningJob
  job-get --name NAME   print a TuningJob (NOT_FOUND when there is none)
  jobs                  print every TuningJob
  job-cancel --name NAME
                        cancel a TuningJob; prints it
  job-delete --name NAME
                        cancel a TuningJob and remove it (its name is free again); prints it as it was
  health [--service NAME]
                        grpc.health.v1 Check ("" = the whole server); prints {"status": ...}

--address defaults to $EDGETUNE_COORDINATOR or 127.0.0.1:50054 (the coordinator's default port).
--token (default $EDGETUNE_TOKEN) is sent as 'authorization: Bearer TOKEN'; --tls-ca (default
$EDGETUNE_TLS_CA) turns TLS on, --tls-cert / --tls-key add a client certificate (mTLS).
Numbers are checked for syntax here; their ranges are checked by the coordinator, which
answers INVALID_ARGUMENT naming the field. A negative value needs '=': --power-budget-w=-5.`;

const OPTIONS = {
  address: { type: 'string' },
  token: { type: 'string' },
  'tls-ca': { type: 'string' },
  'tls-cert': { type: 'string' },
  'tls-key': { type: 'string' },
  'timeout-s': { type: 'string' },
  help: { type: 'boolean', short: 'h' },
  'node-id': { type: 'string' },
  device: { type: 'string' },
  'power-budget-w': { type: 'string' },
  hostname: { type: 'string' },
  'node-address': { type: 'string' },
  label: { type: 'string', multiple: true },
  state: { type: 'string' },
  'after-revision': { type: 'string' },
  count: { type: 'string' },
  service: { type: 'string' },
  spec: { type: 'string' },
  name: { type: 'string' },
};

// Which command-specific options each command accepts (--address, --timeout-s, --help: all).
const COMMANDS = {
  register: ['node-id', 'device', 'power-budget-w', 'hostname', 'node-address', 'label', 'state'],
  config: ['node-id'],
  watch: ['node-id', 'after-revision', 'count'],
  nodes: [],
  'job-submit': ['spec'],
  'job-get': ['name'],
  jobs: [],
  'job-cancel': ['name'],
  'job-delete': ['name'],
  health: ['service'],
};
const GLOBAL = new Set(['address', 'timeout-s', 'help', 'token', 'tls-ca', 'tls-cert', 'tls-key']);

class UsageError extends Error {}

function number(values, name, { integer = false } = {}) {
  const raw = values[name];
  if (raw === undefined) return undefined;
  const value = Number(raw);
  if (raw.trim() === '' || !Number.isFinite(value) || (integer && !Number.isInteger(value))) {
    throw new UsageError(`--${name}: ${JSON.stringify(raw)} is not ${integer ? 'an integer' : 'a number'}`);
  }
  return value;
}

function required(values, name) {
  if (!values[name]) throw new UsageError(`--${name} is required`);
  return values[name];
}

function parse(argv) {
  let parsed;
  try {
    parsed = parseArgs({ args: argv, options: OPTIONS, allowPositionals: true, strict: true });
  } catch (err) {
    throw new UsageError(err.message);
  }
  const { values, positionals } = parsed;
  if (values.help) return { help: true };
  if (positionals.length !== 1) {
    throw new UsageError(positionals.length ? `one command expected, got: ${positionals.join(' ')}` : 'a command is required');
  }
  const command = positionals[0];
  if (!(command in COMMANDS)) {
    throw new UsageError(`unknown command ${JSON.stringify(command)}; allowed: ${Object.keys(COMMANDS).join(', ')}`);
  }
  for (const name of Object.keys(values)) {
    if (!GLOBAL.has(name) && !COMMANDS[command].includes(name)) {
      throw new UsageError(`--${name} does not apply to ${command}`);
    }
  }
  const timeoutS = number(values, 'timeout-s');
  if (timeoutS !== undefined && timeoutS <= 0) throw new UsageError('--timeout-s must be > 0');
  return { command, values, timeoutS };
}

function labels(pairs = []) {
  const out = {};
  for (const pair of pairs) {
    const eq = pair.indexOf('=');
    if (eq <= 0) throw new UsageError(`--label: ${JSON.stringify(pair)} is not KEY=VALUE`);
    out[pair.slice(0, eq)] = pair.slice(eq + 1);
  }
  return out;
}

function print(message) {
  process.stdout.write(`${JSON.stringify(toPlain(message), null, 2)}\n`);
}

// Parse everything a command needs before connecting, so bad arguments never reach the server.
function prepare(command, values) {
  switch (command) {
    case 'register': {
      const request = {
        nodeId: required(values, 'node-id'),
        device: values.device,
        powerBudgetW: number(values, 'power-budget-w'),
        hostname: values.hostname,
        address: values['node-address'],
        labels: labels(values.label),
        state: values.state,
      };
      return async (client) => print(await client.registerNode(request));
    }
    case 'config': {
      const nodeId = required(values, 'node-id');
      return async (client) => print(await client.getNodeConfig(nodeId));
    }
    case 'nodes':
      return async (client) => print({ nodes: await client.listNodes() });
    case 'job-submit': {
      const path = required(values, 'spec');
      let spec;
      try {
        spec = JSON.parse(readFileSync(path, 'utf8'));
      } catch (err) {
        throw new UsageError(`--spec: ${path}: ${err.message}`);
      }
      if (spec === null || typeof spec !== 'object' || Array.isArray(spec)) {
        throw new UsageError(`--spec: ${path} is not a JSON object (a TuningJobSpec)`);
      }
      return async (client) => print(await client.submitTuningJob(spec));
    }
    case 'job-get': {
      const name = required(values, 'name');
      return async (client) => print(await client.getTuningJob(name));
    }
    case 'jobs':
      return async (client) => print({ jobs: await client.listTuningJobs() });
    case 'job-cancel': {
      const name = required(values, 'name');
      return async (client) => print(await client.cancelTuningJob(name));
    }
    case 'job-delete': {
      const name = required(values, 'name');
      return async (client) => print(await client.deleteTuningJob(name));
    }
    case 'health': {
      const service = values.service ?? '';
      return async (client) => print({ service, status: await client.health(service) });
    }
    case 'watch': {
      const nodeId = required(values, 'node-id');
      const afterRevision = number(values, 'after-revision', { integer: true }) ?? 0;
      const count = number(values, 'count', { integer: true });
      if (count !== undefined && count < 1) throw new UsageError('--count must be >= 1');
      return async (client) => {
        let seen = 0;
        const watch = client.watchConfig(
          nodeId,
          (cfg) => {
            // One line per config (JSON Lines), so a pipe can act on each as it arrives.
            process.stdout.write(`${JSON.stringify(toPlain(cfg))}\n`);
            seen += 1;
            if (count !== undefined && seen >= count) watch.cancel();
          },
          { afterRevision },
        );
        process.once('SIGINT', () => watch.cancel());
        await watch.done;
      };
    }
    default:
      throw new UsageError(`unknown command ${command}`);
  }
}

/** --token (or $EDGETUNE_TOKEN) and the TLS files (or $EDGETUNE_TLS_CA / _CERT / _KEY), read here. */
function readSecurity(values) {
  const file = (flag, env) => {
    const path = values[flag] ?? process.env[env];
    if (!path) return undefined;
    try {
      return readFileSync(path);
    } catch (err) {
      throw new UsageError(`--${flag}: ${path}: ${err.message}`);
    }
  };
  const security = {
    token: values.token ?? process.env.EDGETUNE_TOKEN ?? undefined,
    ca: file('tls-ca', 'EDGETUNE_TLS_CA'),
    cert: file('tls-cert', 'EDGETUNE_TLS_CERT'),
    key: file('tls-key', 'EDGETUNE_TLS_KEY'),
  };
  if (Boolean(security.cert) !== Boolean(security.key)) throw new UsageError('--tls-cert and --tls-key go together');
  return security;
}

async function main(argv) {
  let run;
  let args;
  try {
    args = parse(argv);
    if (args.help) {
      process.stdout.write(`${USAGE}\n`);
      return 0;
    }
    run = prepare(args.command, args.values);
  } catch (err) {
    if (!(err instanceof UsageError)) throw err;
    process.stderr.write(`error: ${err.message}\n(edgetune-node-client --help lists the commands and options)\n`);
    return 2;
  }
  const address = args.values.address ?? process.env.EDGETUNE_COORDINATOR ?? '127.0.0.1:50054';
  const timeoutMs = args.timeoutS !== undefined ? args.timeoutS * 1000 : undefined;
  let security;
  try {
    security = readSecurity(args.values);
  } catch (err) {
    process.stderr.write(`error: ${err.message}\n`);
    return 2;
  }
  const client = connect(address, { timeoutMs, ...security });
  try {
    await run(client);
    return 0;
  } catch (err) {
    if (typeof err?.code !== 'number') throw err; // not a gRPC status: a bug, keep the stack
    process.stderr.write(`error: ${statusName(err.code)}: ${err.details || err.message}\n`);
    return 1;
  } finally {
    client.close();
  }
}

// exitCode, not exit(): lets stdout drain when it is a pipe.
process.exitCode = await main(process.argv.slice(2));
