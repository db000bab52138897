"""The Redis backends of :class:`~.base.Store`: every Redis command edgetune sends is here.

:class:`RedisBase` holds a ``redis.Redis`` client (``decode_responses=False``: blobs are
bytes) and a namespace (``edgetune`` by default); :class:`RedisStore` connects to a server
by URL (the cluster case), :class:`~.embedded.EmbeddedStore` to its own redis-server.
Every key is ``<namespace>:<part>:<part>...``; parts are percent-escaped for ``%`` and ``:``
so any string (a node id with colons, say) is one part.

Key layout (``ns`` = namespace)::

    ns:meas:<id>                                  hash: doc (MeasurementRecord JSON), seq, device_model, ...
    ns:meas-index:<device>:<workload>:<role>      zset: measurement ids scored by write sequence
    ns:meas-index:<device>:<workload>:<role>:<node>   same, per node
    ns:meas-seq                                   counter behind the scores
    ns:blob:<kind>:<part>...:<version>            hash: data (bytes), meta (JSON), created_s
    ns:blob-latest:<kind>:<part>...               latest version number (int)
    ns:blob-index:<kind>                          set of the escaped, joined key parts
    ns:doc:<kind>:<key>                           hash: doc (JSON), rev
    ns:doc-index:<kind>                           set of doc keys
    ns:doc-rev                                    counter that hands out revisions
    ns:kv:<part>...                               JSON values, optionally with a TTL (heartbeats)
    ns:jobs:<node_id>                             stream: job_id, job (JSON); consumer group ``agents``
    ns:jobs-ids:<node_id>                         hash job_id -> entry id (idempotent submit)
    ns:jobs-dead:<node_id>                        stream of jobs given up (job_id, job, deliveries)
    ns:config:<node_id>                           hash: config (NodeConfig JSON), rev, digest
    ns:config-log:<node_id>                       stream of new revisions: rev, config (capped)
    ns:config-epoch                               the config epoch (ms timestamp of the first publish)
    ns:config-feed                                stream of changes: node, rev (capped; one reader per process)
    ns:leader:<name>                              lease: value = holder id, PX = the lease
    ns:round:last                                 hash: state (RoundState JSON), options (npz)
    ns:incarnation                                <random hex>@<ms>: set by the first caller into an empty store

Multi-key scripts assume one Redis node (or a Sentinel-managed primary), not Redis Cluster.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar, cast

import redis
from redis.backoff import ExponentialWithJitterBackoff
from redis.retry import Retry

from edgetune.errors import FailedPrecondition, InvalidArgument, NotFound

from .base import (
    DEFAULT_NAMESPACE,
    BlobRef,
    ConfigChanges,
    DocWrite,
    Fence,
    KeyLike,
    LeaseLost,
    RevisionConflict,
    VersionedDoc,
    check_expected_revision,
    check_node_id,
    check_role,
    check_ttl,
    check_version,
    escape_part,
    parts_of,
    redact_url,
    stamp_config_revisions,
    unescape_part,
)
from .records import AuditRecord, DeadJob, Job, MeasurementRecord, NodeConfig, Published, RoundState, dumps

#: Errors that mean "cannot talk to the store now" (a restart, a failover): retry later.
UNAVAILABLE: tuple[type[BaseException], ...] = (
    redis.ConnectionError, redis.TimeoutError, redis.BusyLoadingError, OSError)
#: The store's server cannot be reached (as gRPC: UNAVAILABLE, the client retries).
CONNECTION_ERRORS: tuple[type[Exception], ...] = (redis.ConnectionError, redis.TimeoutError)
#: A refused login (wrong user or password): a ConnectionError to redis-py, which no retry fixes.
LOGIN_ERRORS: tuple[type[Exception], ...] = (redis.AuthenticationError,)
#: Every error a Redis-backed store call may raise besides edgetune's own.
STORE_ERRORS: tuple[type[BaseException], ...] = (redis.RedisError, OSError)

GROUP = "agents"
#: Connections a store keeps at most. Every call but two holds one only for one command: the
#: config change feed (one blocking read per process, however many watches) and job claims
#: (one per agent process). So a coordinator with thousands of WatchConfig streams needs few.
DEFAULT_POOL_SIZE = 64
#: How long a call waits for a free connection before failing (as unavailable: retried).
DEFAULT_POOL_TIMEOUT_S = 10.0
#: Connections of the leases' own pool (RedisBase.lease_client).
LEASE_CONNECTIONS = 2
T = TypeVar("T")
ROUND_KEY = ("round", "last")
#: What a lease without an expiry (never set by this code) reports as its TTL.
_NO_EXPIRY_MS = 2**31

# Write the measurement only when its hash does not exist yet, and index it in the same
# atomic step, so a retried or duplicated write can never index twice or half-write.
_PUT_MEASUREMENT = """
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
local seq = redis.call('INCR', KEYS[2])
redis.call('HSET', KEYS[1], 'doc', ARGV[1], 'seq', seq, 'device_model', ARGV[2],
           'workload', ARGV[3], 'role', ARGV[4], 'node_id', ARGV[5])
redis.call('ZADD', KEYS[3], seq, ARGV[6])
if #KEYS >= 4 then redis.call('ZADD', KEYS[4], seq, ARGV[6]) end
return seq
"""

# Allocate the next version and write it in one step: readers never see a version
# number whose data is missing. The versioned key is derived here, hence one Redis node.
_PUT_BLOB = """
local v = redis.call('INCR', KEYS[1])
local t = redis.call('TIME')
redis.call('HSET', ARGV[1] .. ':' .. v, 'data', ARGV[2], 'meta', ARGV[3],
           'created_s', t[1] .. '.' .. string.format('%06d', tonumber(t[2])))
redis.call('SADD', KEYS[2], ARGV[4])
return v
"""

# Idempotent submit: a job id seen before returns its entry instead of adding a second one,
# so a coordinator that retries XADD after a lost reply does not queue the job twice.
_SUBMIT_JOB = """
local existing = redis.call('HGET', KEYS[2], ARGV[1])
if existing then return existing end
local entry = redis.call('XADD', KEYS[1], 'MAXLEN', '~', ARGV[3], '*', 'job_id', ARGV[1], 'job', ARGV[2])
redis.call('HSET', KEYS[2], ARGV[1], entry)
return entry
"""

# Publish configs with the docs, values and round they go with, all or nothing: every check
# (the fence, each doc's expected revision) runs before the first write. A config gets a new
# revision only when its digest (what to run) changed. The first publish into an empty store
# sets the epoch (ARGV[2], the caller's clock in ms), so revisions after a data loss are told
# apart from the old ones. KEYS / ARGV layout: see RedisBase._publish_call.
_PUBLISH = """
local nd, nv, nc = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
if ARGV[1] ~= '' and redis.call('GET', KEYS[1]) ~= ARGV[1] then return {-1} end
local dk, da = 6, 9
for i = 0, nd - 1 do
  local expected = ARGV[da + 4 * i + 1]
  if expected ~= '' then
    local cur = tonumber(redis.call('HGET', KEYS[dk + 2 * i], 'rev') or '0')
    if cur ~= tonumber(expected) then return {-2, i, cur} end
  end
end
local k, a = dk + 2 * nd, da + 4 * nd
for i = 0, nv - 1 do
  local px = ARGV[a + 2 * i + 1]
  if px == '' then redis.call('SET', KEYS[k + i], ARGV[a + 2 * i])
  else redis.call('SET', KEYS[k + i], ARGV[a + 2 * i], 'PX', px) end
end
k, a = k + nv, a + 2 * nv
if ARGV[7] == '1' then
  redis.call('DEL', KEYS[5])
  redis.call('HSET', KEYS[5], 'state', ARGV[a], 'options', ARGV[a + 1])
  a = a + 2
end
local epoch = redis.call('GET', KEYS[2])
if nc > 0 and not epoch then
  epoch = ARGV[2]
  redis.call('SET', KEYS[2], epoch)
end
local out, revs = {1, tonumber(epoch or '0')}, {}
for i = 0, nc - 1 do
  local key, log = KEYS[k + 2 * i], KEYS[k + 2 * i + 1]
  local cur = redis.call('HMGET', key, 'rev', 'digest')
  local rev = tonumber(cur[1] or '0')
  if cur[2] == ARGV[a + 3 * i + 1] then
    table.insert(out, rev)
    table.insert(out, 0)
  else
    rev = rev + 1
    redis.call('HSET', key, 'config', ARGV[a + 3 * i], 'rev', rev, 'digest', ARGV[a + 3 * i + 1])
    redis.call('XADD', log, 'MAXLEN', '~', ARGV[3], '*', 'rev', rev, 'config', ARGV[a + 3 * i])
    redis.call('XADD', KEYS[3], 'MAXLEN', '~', 10000, '*', 'node', ARGV[a + 3 * i + 2], 'rev', rev)
    table.insert(out, rev)
    table.insert(out, 1)
  end
  revs[i] = rev
end
-- the docs after the configs: each placeholder "<ARGV[8]>-<i>" becomes config i's revision
for i = 0, nd - 1 do
  local doc = ARGV[da + 4 * i]
  for idx in string.gmatch(ARGV[da + 4 * i + 3], '%d+') do
    local s, e = string.find(doc, '"' .. ARGV[8] .. '-' .. idx .. '"', 1, true)
    doc = string.sub(doc, 1, s - 1) .. string.format('%d', revs[tonumber(idx)]) .. string.sub(doc, e + 1)
  end
  local rev = redis.call('INCR', KEYS[4])
  redis.call('HSET', KEYS[dk + 2 * i], 'doc', doc, 'rev', rev)
  redis.call('SADD', KEYS[dk + 2 * i + 1], ARGV[da + 4 * i + 2])
end
return out
"""

_RENEW_LEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
"""

_RELEASE_LEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
"""


def _glob_escape(text: str) -> str:
    # SCAN MATCH patterns treat * ? [ ] \ specially; prefixes come from user-given parts.
    return "".join("\\" + c if c in "*?[]\\" else c for c in text)


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _loads(raw: bytes | None) -> Any | None:
    return json.loads(raw) if raw is not None else None


class RedisBase:
    """The Store on one Redis server through ``client``. See the module docstring for the layout.

    Subclasses only decide how the client is made and what ``close()`` releases.
    """

    backend = "redis"

    def __init__(self, client: redis.Redis, *, namespace: str = DEFAULT_NAMESPACE, url: str = "",
                 lease_client: redis.Redis | None = None) -> None:
        self.client = client
        #: Leases on connections of their own (``client`` when none is given): a renewal queued behind a
        #: leader's own thousand workers for the pool's connections came too late, and the leader lost its lease
        #: (and stopped every worker) in the first 30 s of a 1,000-node job.
        self.lease_client = lease_client or client
        self.namespace = escape_part(namespace)
        self.url = url
        self._put_measurement = client.register_script(_PUT_MEASUREMENT)
        self._put_blob = client.register_script(_PUT_BLOB)
        self._submit_job = client.register_script(_SUBMIT_JOB)
        self._publish = client.register_script(_PUBLISH)
        self._renew_lease = self.lease_client.register_script(_RENEW_LEASE)
        self._release_lease = self.lease_client.register_script(_RELEASE_LEASE)
        self._groups: set[str] = set()

    # -- keys -------------------------------------------------------------------------------

    def key(self, *parts: str | int) -> str:
        """``<namespace>:<part>:...`` with each part escaped."""
        if not parts:
            raise InvalidArgument("key", "at least one key part is needed")
        return ":".join((self.namespace, *(escape_part(p) for p in parts)))

    def split_key(self, key: str | bytes) -> tuple[str, ...]:
        """Inverse of :meth:`key`: the parts after the namespace."""
        text = _text(key)
        head, _, rest = text.partition(":")
        if head != self.namespace or not rest:
            raise InvalidArgument("key", f"{text!r} is not in namespace {self.namespace!r}")
        return tuple(unescape_part(p) for p in rest.split(":"))

    # -- health -----------------------------------------------------------------------------

    def ping(self) -> bool:
        return bool(self.client.ping())

    def info(self) -> dict[str, Any]:
        server = self.client.info("server")
        persistence = self.client.info("persistence")
        memory = self.client.info("memory")
        clients = self.client.info("clients")
        return {
            "backend": self.backend,
            "url": redact_url(self.url),
            "namespace": self.namespace,
            "redis_version": server.get("redis_version"),
            "uptime_s": server.get("uptime_in_seconds"),
            "aof_enabled": bool(persistence.get("aof_enabled")),
            "used_memory_bytes": memory.get("used_memory"),
            "connected_clients": clients.get("connected_clients"),
        }

    def close(self) -> None:
        self.client.close()
        if self.lease_client is not self.client:
            self.lease_client.close()

    def __enter__(self) -> RedisBase:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({redact_url(self.url)!r}, namespace={self.namespace!r})"

    # -- measurements -----------------------------------------------------------------------

    def _measurement_index(self, device_model: str, workload: str, role: str, node_id: str | None = None) -> str:
        parts: tuple[str, ...] = (device_model, workload, role) + ((node_id,) if node_id else ())
        return self.key("meas-index", *parts)

    def _measurement_call(self, m: MeasurementRecord, client: Any = None) -> Any:
        if not isinstance(m, MeasurementRecord):
            raise InvalidArgument("measurement", f"must be a MeasurementRecord, got {type(m).__name__}")
        keys = [self.key("meas", m.id), self.key("meas-seq"), self._measurement_index(m.device_model, m.workload,
                                                                                        m.role)]
        if m.node_id:
            keys.append(self._measurement_index(m.device_model, m.workload, m.role, m.node_id))
        args: list[bytes | str] = [m.to_json(), m.device_model, m.workload, m.role, m.node_id or "", m.id]
        return self._put_measurement(keys=keys, args=args, client=client)

    def put_measurement(self, m: MeasurementRecord) -> bool:
        return int(self._measurement_call(m)) > 0

    def put_measurements(self, ms: Iterable[MeasurementRecord]) -> int:
        records = list(ms)
        for m in records:  # check all before writing any
            if not isinstance(m, MeasurementRecord):
                raise InvalidArgument("measurement", f"must be a MeasurementRecord, got {type(m).__name__}")
        if not records:
            return 0
        pipe = self.client.pipeline(transaction=False)
        for m in records:
            self._measurement_call(m, client=pipe)
        return sum(1 for seq in pipe.execute() if int(seq) > 0)

    def get_measurement(self, measurement_id: str) -> MeasurementRecord | None:
        raw = cast("bytes | None", self.client.hget(self.key("meas", measurement_id), "doc"))
        return MeasurementRecord.from_json(raw) if raw is not None else None

    def get_measurements_by_id(self, measurement_ids: Sequence[str]) -> list[MeasurementRecord | None]:
        if not measurement_ids:
            return []
        pipe = self.client.pipeline(transaction=False)
        for mid in measurement_ids:
            pipe.hget(self.key("meas", mid), "doc")
        return [MeasurementRecord.from_json(raw) if raw is not None else None
                for raw in cast("list[bytes | None]", pipe.execute())]

    def get_measurements(self, device_model: str, workload: str, role: str,
                         node_id: str | None = None) -> list[MeasurementRecord]:
        check_role(role)
        ids = cast("list[bytes]", self.client.zrange(self._measurement_index(device_model, workload, role, node_id),
                                                     0, -1))
        if not ids:
            return []
        pipe = self.client.pipeline(transaction=False)
        for mid in ids:
            pipe.hget(self.key("meas", _text(mid)), "doc")
        return [MeasurementRecord.from_json(raw) for raw in pipe.execute() if raw is not None]

    def count_measurements(self, device_model: str, workload: str, role: str, node_id: str | None = None) -> int:
        check_role(role)
        return int(self.client.zcard(self._measurement_index(device_model, workload, role, node_id)))

    # -- versioned blobs --------------------------------------------------------------------

    def put_blob(self, kind: str, key_parts: KeyLike, data: bytes, meta: dict[str, Any] | None = None) -> int:
        if not isinstance(data, bytes | bytearray | memoryview):
            raise InvalidArgument("data", f"must be bytes, got {type(data).__name__}")
        parts = (kind, *parts_of(key_parts))
        member = ":".join(escape_part(p) for p in parts[1:])
        version = self._put_blob(
            keys=[self.key("blob-latest", *parts), self.key("blob-index", kind)],
            args=[self.key("blob", *parts), bytes(data), dumps(meta or {}, "meta"), member],
        )
        return int(version)

    def latest_blob_version(self, kind: str, key_parts: KeyLike) -> int | None:
        raw = self.client.get(self.key("blob-latest", kind, *parts_of(key_parts)))
        return int(cast(bytes, raw)) if raw is not None else None

    def get_blob(self, kind: str, key_parts: KeyLike,
                 version: int | None = None) -> tuple[bytes, dict[str, Any], int]:
        parts = (kind, *parts_of(key_parts))
        shown = "/".join(str(p) for p in parts)
        check_version(version)
        if version is None:
            version = self.latest_blob_version(kind, parts[1:])
            if version is None:
                raise NotFound(f"blob {shown} does not exist")
        data, meta = cast("list[bytes | None]",
                          self.client.hmget(self.key("blob", *parts, version), ["data", "meta"]))
        if data is None or meta is None:
            raise NotFound(f"blob {shown} has no version {version}")
        return data, json.loads(meta), version

    def list_blobs(self, kind: str) -> list[BlobRef]:
        members = sorted(_text(m) for m in cast("set[bytes]", self.client.smembers(self.key("blob-index", kind))))
        if not members:
            return []
        split = [tuple(unescape_part(p) for p in m.split(":")) for m in members]
        pipe = self.client.pipeline(transaction=False)
        for parts in split:
            pipe.get(self.key("blob-latest", kind, *parts))
        return [BlobRef(parts, int(v)) for parts, v in zip(split, pipe.execute(), strict=True) if v is not None]

    # -- JSON docs with compare-and-set -----------------------------------------------------

    def _cas(self, kind: str, key: str, expected_revision: int | None, fence: Fence | None,
             write: Callable[[Any], None]) -> list[Any]:
        """Run ``write(pipe)`` in MULTI once ``kind/key`` is at ``expected_revision`` and, with a
        fence, the lease is the writer's (both WATCHed, so neither can change before EXEC)."""
        doc_key = self.key("doc", kind, key)
        lease_key = self.key("leader", fence.name) if fence is not None else None
        with self.client.pipeline(transaction=True) as pipe:
            while True:
                try:
                    pipe.watch(doc_key, *([lease_key] if lease_key else []))  # type: ignore[no-untyped-call]
                    if fence is not None and lease_key is not None:
                        holder = pipe.get(lease_key)
                        if holder is None or _text(holder) != fence.holder:
                            raise LeaseLost(fence.name, _text(holder) if holder is not None else None)
                    raw = pipe.hget(doc_key, "rev")
                    current = int(raw) if raw is not None else 0
                    if expected_revision is not None and current != expected_revision:
                        raise RevisionConflict(kind, key, expected_revision, current)
                    write(pipe)
                    return pipe.execute()
                except redis.WatchError:
                    # The doc changed (a conflict when a revision was expected; else last writer
                    # wins) or the lease was touched (a renewal: check it again): try again.
                    continue

    def put_doc(self, kind: str, key: str, doc: Any, expected_revision: int | None = None, *,
                fence: Fence | None = None) -> int:
        check_expected_revision(expected_revision)
        payload = dumps(doc, "doc")
        revision = 0

        def write(pipe: Any) -> None:
            nonlocal revision
            revision = self._next_revision(pipe)
            pipe.multi()
            pipe.hset(self.key("doc", kind, key), mapping={"doc": payload, "rev": revision})
            pipe.sadd(self.key("doc-index", kind), escape_part(key))

        self._cas(kind, key, expected_revision, fence, write)
        return revision

    def _next_revision(self, pipe: Any) -> int:
        """A new doc revision, taken between WATCH and MULTI so the value is known (a lost race wastes a
        number, nothing else); on the pipe's own connection: one more taken from the pool while the pipe holds
        one deadlocks once as many writers as the pool has connections each hold one and wait for another."""
        return int(pipe.incr(self.key("doc-rev")))

    def get_doc(self, kind: str, key: str, *, missing_ok: bool = False) -> VersionedDoc | None:
        raw, rev = cast("list[bytes | None]", self.client.hmget(self.key("doc", kind, key), ["doc", "rev"]))
        if raw is None or rev is None:
            if missing_ok:
                return None
            raise NotFound(f"doc {kind}/{key} does not exist")
        return VersionedDoc(json.loads(raw), int(rev))

    def get_docs(self, kind: str, keys: Sequence[str]) -> list[VersionedDoc | None]:
        pipe = self.client.pipeline(transaction=False)
        for key in keys:
            pipe.hmget(self.key("doc", kind, key), ["doc", "rev"])
        return [None if raw is None or rev is None else VersionedDoc(json.loads(raw), int(rev))
                for raw, rev in cast("list[list[bytes | None]]", pipe.execute())]

    def delete_doc(self, kind: str, key: str, expected_revision: int | None = None, *,
                   fence: Fence | None = None) -> bool:
        check_expected_revision(expected_revision)

        def write(pipe: Any) -> None:
            pipe.multi()
            pipe.delete(self.key("doc", kind, key))
            pipe.srem(self.key("doc-index", kind), escape_part(key))

        deleted, _ = self._cas(kind, key, expected_revision, fence, write)
        return bool(deleted)

    def list_docs(self, kind: str) -> list[str]:
        members = cast("set[bytes]", self.client.smembers(self.key("doc-index", kind)))
        return sorted(unescape_part(_text(m)) for m in members)

    # -- small JSON values ------------------------------------------------------------------

    def _kv(self, key: KeyLike) -> str:
        return self.key("kv", *parts_of(key))

    def set_with_ttl(self, key: KeyLike, value: Any, ttl_s: float) -> None:
        self.set_many([(key, value, check_ttl(ttl_s))])

    def set(self, key: KeyLike, value: Any) -> None:
        self.set_many([(key, value, None)])

    def set_many(self, items: Sequence[tuple[KeyLike, Any, float | None]]) -> None:
        prepared = [(self._kv(k), dumps(v, "value"), None if t is None else max(1, round(check_ttl(t) * 1000)))
                    for k, v, t in items]
        pipe = self.client.pipeline(transaction=True)
        for key, raw, px in prepared:
            pipe.set(key, raw, px=px)
        pipe.execute()

    def get(self, key: KeyLike) -> Any | None:
        return _loads(cast("bytes | None", self.client.get(self._kv(key))))

    def get_many(self, keys: Sequence[KeyLike]) -> list[Any | None]:
        if not keys:
            return []
        return [_loads(raw) for raw in cast("list[bytes | None]", self.client.mget([self._kv(k) for k in keys]))]

    def ttl(self, key: KeyLike) -> float | None:
        ms = int(self.client.pttl(self._kv(key)))
        return ms / 1000.0 if ms >= 0 else None

    def delete(self, key: KeyLike) -> bool:
        return bool(self.client.delete(self._kv(key)))

    def list_keys(self, *prefix: str | int) -> list[tuple[str, ...]]:
        base = self.key("kv", *prefix)
        found = {self.split_key(raw)[1:] for raw in self.client.scan_iter(match=_glob_escape(base) + ":*", count=500)}
        return sorted(found)

    # -- job queues -------------------------------------------------------------------------

    def _stream(self, node_id: str) -> str:
        key = self.key("jobs", check_node_id(node_id))
        if key not in self._groups:
            try:
                self.client.xgroup_create(key, GROUP, id="0", mkstream=True)
            except redis.ResponseError as exc:
                if "BUSYGROUP" not in str(exc):
                    raise
            self._groups.add(key)
        return key

    def _on_stream(self, node_id: str, call: Callable[[str], T]) -> T:
        """``call(stream key)``; a group lost with its stream (a Redis restart without AOF, a
        flush) is created again once, instead of every later read failing with NOGROUP."""
        key = self._stream(node_id)
        try:
            return call(key)
        except redis.ResponseError as exc:
            if "NOGROUP" not in str(exc):
                raise
            self._groups.discard(key)
            return call(self._stream(node_id))

    @staticmethod
    def _job(node_id: str, entry_id: bytes | str, fields: Mapping[bytes, bytes], consumer: str,
             deliveries: int) -> Job:
        return Job(node_id=node_id, job_id=_text(fields[b"job_id"]), entry_id=_text(entry_id),
                   payload=json.loads(fields[b"job"]), consumer=consumer, deliveries=deliveries)

    def submit_job(self, node_id: str, job_id: str, payload: dict[str, Any], *, max_len: int) -> str:
        key = self._stream(node_id)
        entry = self._submit_job(keys=[key, self.key("jobs-ids", node_id)],
                                 args=[job_id, dumps(dict(payload), "job"), max_len])
        return _text(entry)

    def read_jobs(self, node_id: str, consumer: str, *, count: int, block_ms: int) -> list[Job]:
        reply = self._on_stream(node_id, lambda key: cast("list[Any]", self.client.xreadgroup(
            GROUP, consumer, {key: ">"}, count=count, block=block_ms if block_ms > 0 else None)))
        return [self._job(node_id, entry_id, fields, consumer, 1)
                for _stream, entries in reply or [] for entry_id, fields in entries
                if fields]  # a trimmed entry comes back empty: nothing to run

    def reclaim_jobs(self, node_id: str, consumer: str, *, idle_ms: int, count: int) -> list[Job]:
        key = self._stream(node_id)
        _next, claimed, *_deleted = self._on_stream(node_id, lambda key: self.client.xautoclaim(
            key, GROUP, consumer, idle_ms, start_id="0-0", count=count))
        jobs = []
        for entry_id, fields in claimed:
            entry = _text(entry_id)
            if not fields:  # trimmed away while pending
                self.client.xack(key, GROUP, entry)
                continue
            info = cast("list[Any]", self.client.xpending_range(key, GROUP, min=entry, max=entry, count=1))
            deliveries = int(info[0]["times_delivered"]) if info else 1
            jobs.append(self._job(node_id, entry, fields, consumer, deliveries))
        return jobs

    def ack_job(self, node_id: str, entry_id: str) -> bool:
        return bool(self.client.xack(self.key("jobs", check_node_id(node_id)), GROUP, entry_id))

    def bury_job(self, job: Job) -> None:
        pipe = self.client.pipeline(transaction=True)
        pipe.xadd(self.key("jobs-dead", job.node_id),
                  {"job_id": job.job_id, "job": dumps(dict(job.payload), "job"), "deliveries": job.deliveries})
        pipe.xack(self.key("jobs", job.node_id), GROUP, job.entry_id)
        pipe.execute()

    def pending_jobs(self, node_id: str) -> int:
        return int(self._on_stream(node_id, lambda key: self.client.xpending(key, GROUP))["pending"])

    def job_backlog(self, node_id: str) -> int:
        key = self._stream(node_id)
        for group in self.client.xinfo_groups(key):
            if _text(group["name"]) == GROUP:
                lag = group.get("lag")
                if lag is not None:
                    return int(lag)
                last = _text(group["last-delivered-id"])
                # Redis 6.2 has no lag: count what lies after the last delivered entry.
                after = cast("list[Any]", self.client.xrange(key, min=f"({last}" if last != "0-0" else "-"))
                return len(after)
        return 0

    def dead_jobs(self, node_id: str) -> list[DeadJob]:
        entries = cast("list[Any]", self.client.xrange(self.key("jobs-dead", check_node_id(node_id))))
        return [DeadJob(_text(f[b"job_id"]), json.loads(f[b"job"]), int(f.get(b"deliveries") or 0))
                for _id, f in entries]

    # -- audit ------------------------------------------------------------------------------

    def append_audit(self, record: AuditRecord, *, max_len: int) -> None:
        if max_len < 1:
            raise InvalidArgument("max_len", f"{max_len} is below 1", ">= 1")
        # Exact trim: the stream never holds more than max_len records.
        self.client.xadd(self.key("audit"), {"record": record.to_json()}, maxlen=max_len, approximate=False)

    def audit_records(self, count: int) -> list[AuditRecord]:
        if count <= 0:
            return []
        entries = cast("list[Any]", self.client.xrevrange(self.key("audit"), count=count))
        return [AuditRecord.from_json(f[b"record"]) for _id, f in reversed(entries)]

    # -- node configs -----------------------------------------------------------------------

    def _config_keys(self, node_id: str) -> tuple[str, str]:
        check_node_id(node_id)
        return self.key("config", node_id), self.key("config-log", node_id)

    def publish_configs(self, configs: Sequence[NodeConfig], *, fence: Fence | None = None,
                        log_len: int = 100, docs: Sequence[DocWrite] = (),
                        values: Sequence[tuple[KeyLike, Any, float | None]] = (),
                        round_state: RoundState | None = None) -> list[Published]:
        configs, docs = list(configs), list(docs)
        if not (configs or docs or values or round_state is not None):
            return []
        # KEYS: lease, epoch, feed, doc-rev, round, then per doc (doc, doc-index), per value
        # (kv), per config (config, config-log). ARGV: holder, epoch candidate, log_len, counts,
        # has-round, placeholder prefix, then per doc (doc, expected, index member, the config
        # indexes of its placeholders), per value (raw, px), the round (state, options), per
        # config (config, digest, node id).
        keys: list[str] = [self.key("leader", fence.name) if fence is not None else self.key("leader", "-"),
                           self.key("config-epoch"), self.key("config-feed"), self.key("doc-rev"),
                           self.key(*ROUND_KEY)]
        # A doc's config revisions are known inside the script only: the doc goes with a unique
        # string at each place, which the script replaces with the revision it wrote.
        prefix = f"edgetune-config-revision-{uuid.uuid4().hex}"
        args: list[Any] = [fence.holder if fence is not None else "", int(time.time() * 1000), log_len,
                           len(docs), len(values), len(configs), "1" if round_state is not None else "0", prefix]
        node_ids = [cfg.node_id for cfg in configs]
        for d in docs:
            check_expected_revision(d.expected_revision)
            keys += [self.key("doc", d.kind, d.key), self.key("doc-index", d.kind)]
            placed: list[int] = []

            def place(i: int, placed: list[int] = placed) -> str:
                placed.append(i)
                return f"{prefix}-{i}"

            raw = dumps(stamp_config_revisions(d, node_ids, place), "doc")
            args += [raw, "" if d.expected_revision is None else d.expected_revision, escape_part(d.key),
                     " ".join(map(str, placed))]
        for k, v, t in values:
            keys.append(self._kv(k))
            args += [dumps(v, "value"), "" if t is None else max(1, round(check_ttl(t) * 1000))]
        if round_state is not None:
            args += [round_state.to_json(), round_state.options_npz]
        for cfg in configs:
            keys += list(self._config_keys(cfg.node_id))
            args += [cfg.with_revision(0).to_json(), cfg.digest(), cfg.node_id]
        reply = cast("list[Any]", self._publish(keys=keys, args=args))
        if int(reply[0]) == -1:
            assert fence is not None
            raise LeaseLost(fence.name, self.lease_holder(fence.name))
        if int(reply[0]) == -2:
            d = docs[int(reply[1])]
            raise RevisionConflict(d.kind, d.key, int(d.expected_revision or 0), int(reply[2]))
        epoch = int(reply[1])
        return [Published(cfg.node_id, int(reply[2 + 2 * i]), bool(int(reply[3 + 2 * i])), epoch)
                for i, cfg in enumerate(configs)]

    def get_config(self, node_id: str) -> NodeConfig | None:
        key, _ = self._config_keys(node_id)
        pipe = self.client.pipeline(transaction=True)
        pipe.hmget(key, ["config", "rev"])
        pipe.get(self.key("config-epoch"))
        (raw, rev), epoch = pipe.execute()
        return NodeConfig.from_json(raw).with_revision(int(rev), int(epoch or 0)) if raw is not None else None

    def get_configs(self, node_ids: Sequence[str]) -> dict[str, NodeConfig]:
        ids = list(node_ids)
        if not ids:
            return {}
        pipe = self.client.pipeline(transaction=True)  # the configs and the epoch agree (publish is atomic)
        for node_id in ids:
            pipe.hmget(self._config_keys(node_id)[0], ["config", "rev"])
        pipe.get(self.key("config-epoch"))
        *found, raw_epoch = pipe.execute()
        epoch = int(raw_epoch or 0)
        return {n: NodeConfig.from_json(raw).with_revision(int(rev), epoch)
                for n, (raw, rev) in zip(ids, found, strict=True) if raw is not None}

    def config_revisions(self, node_ids: Sequence[str]) -> dict[str, int]:
        ids = list(node_ids)
        pipe = self.client.pipeline(transaction=False)
        for node_id in ids:
            pipe.hget(self._config_keys(node_id)[0], "rev")
        return {n: int(r) if r is not None else 0 for n, r in zip(ids, pipe.execute(), strict=True)}

    def config_epoch(self) -> int:
        return int(cast("bytes | None", self.client.get(self.key("config-epoch"))) or 0)

    def wait_configs(self, node_id: str, after_revision: int, *, block_ms: int,
                     epoch: int = 0) -> list[NodeConfig]:
        key, log_key = self._config_keys(node_id)
        # The current config, the epoch and the log's tail in one transaction (publish is atomic:
        # they agree), then a blocking XREAD from that tail: nothing published in between is missed.
        pipe = self.client.pipeline(transaction=True)
        pipe.hmget(key, ["config", "rev"])
        pipe.get(self.key("config-epoch"))
        pipe.xrevrange(log_key, count=1)
        (raw, rev), raw_epoch, tail = pipe.execute()
        current_epoch = int(raw_epoch or 0)
        after = 0 if epoch and epoch != current_epoch else after_revision
        if raw is not None and int(rev) > after:
            current = NodeConfig.from_json(raw).with_revision(int(rev), current_epoch)
            if after != after_revision or int(rev) == after + 1:  # another epoch, or nothing in between
                return [current]
            older = cast("list[Any]", self.client.xrevrange(log_key, count=min(int(rev) - after, 1000)))
            found = {int(f[b"rev"]): f[b"config"] for _id, f in older if after < int(f[b"rev"]) < int(rev)}
            return [NodeConfig.from_json(found[r]).with_revision(r, current_epoch) for r in sorted(found)] + [current]
        if block_ms <= 0:
            return []
        cursor = _text(tail[0][0]) if tail else "0-0"
        reply = cast("list[Any]", self.client.xread({log_key: cursor}, count=1000, block=block_ms))
        return [NodeConfig.from_json(f[b"config"]).with_revision(int(f[b"rev"]), self.config_epoch())
                for _stream, entries in reply or [] for _id, f in entries if int(f[b"rev"]) > after]

    def wait_config_changes(self, cursor: str, *, block_ms: int) -> ConfigChanges:
        feed = self.key("config-feed")
        if not cursor:
            tail = cast("list[Any]", self.client.xrevrange(feed, count=1))
            return ConfigChanges(_text(tail[0][0]) if tail else "0-0", (), True)
        reply = cast("list[Any]", self.client.xread({feed: cursor}, count=10_000,
                                                    block=block_ms if block_ms > 0 else None))
        entries = [(_text(entry_id), _text(f[b"node"])) for _stream, batch in reply or [] for entry_id, f in batch]
        if not entries:
            return ConfigChanges(cursor, ())
        return ConfigChanges(entries[-1][0], tuple(dict.fromkeys(n for _id, n in entries)))

    # -- incarnation ------------------------------------------------------------------------

    def incarnation(self) -> str:
        key = self.key("incarnation")
        raw = cast("bytes | None", self.client.get(key))
        if raw is None:  # an empty store: whoever asks first names its incarnation, the others read it
            self.client.set(key, f"{uuid.uuid4().hex}@{int(time.time() * 1000)}", nx=True)
            raw = cast("bytes | None", self.client.get(key))
        return _text(raw) if raw is not None else ""

    # -- leases -----------------------------------------------------------------------------

    def acquire_lease(self, name: str, holder: str, ttl_ms: int) -> bool:
        return bool(self.lease_client.set(self.key("leader", name), holder, nx=True, px=int(ttl_ms)))

    def renew_lease(self, name: str, holder: str, ttl_ms: int) -> bool:
        return bool(self._renew_lease(keys=[self.key("leader", name)], args=[holder, int(ttl_ms)]))

    def release_lease(self, name: str, holder: str) -> bool:
        return bool(self._release_lease(keys=[self.key("leader", name)], args=[holder]))

    def lease_holder(self, name: str) -> str | None:
        raw = cast("bytes | None", self.lease_client.get(self.key("leader", name)))
        return _text(raw) if raw is not None else None

    def lease_ttl_ms(self, name: str) -> int | None:
        ms = int(self.lease_client.pttl(self.key("leader", name)))
        return None if ms == -2 else (_NO_EXPIRY_MS if ms == -1 else ms)

    # -- the last applied round -------------------------------------------------------------

    def put_round(self, state: RoundState) -> None:
        self.publish_configs([], round_state=state)  # DEL + HSET: drops a legacy (pre-record) round's fields

    def get_round(self) -> RoundState | None:
        raw, options, request, scope, members = cast("list[bytes | None]", self.client.hmget(
            self.key(*ROUND_KEY), ["state", "options", "request", "scope", "members"]))
        if raw is not None:
            return RoundState.from_json(raw).with_options(options or b"")
        if request is not None and scope is not None and members is not None:  # written before records
            return RoundState(json.loads(request), tuple(json.loads(scope)), tuple(json.loads(members)),
                              options or b"")
        return None

    def set_round_members(self, members: Sequence[str]) -> bool:
        # Only the leader writes the round (under its re-plan lock): read-modify-write suffices.
        state = self.get_round()
        if state is None:
            return False
        self.put_round(state.with_members(members))
        return True


class RedisStore(RedisBase):
    """redis-py against ``redis://host:port/db`` (also ``rediss://`` and ``unix://``).

    Connection errors and timeouts are retried ``retries`` times with jittered exponential
    backoff (about 3 s in all with the defaults) so a Redis restart or a pod move does not
    fail callers — a refused login is not (:class:`LoginFailsFast`); idle connections are PINGed
    every ``health_check_interval_s`` before reuse.
    Keep blocking reads (job claims, config watches) shorter than ``socket_timeout_s``.

    Connections: at most ``pool_size``; a caller finding them all busy waits up to
    ``pool_timeout_s`` for one instead of failing (see :func:`blocking_pool`).
    """

    backend = "redis"

    def __init__(
        self,
        url: str,
        *,
        namespace: str = DEFAULT_NAMESPACE,
        retries: int = 5,
        health_check_interval_s: int = 15,
        socket_timeout_s: float = 30.0,
        connect_timeout_s: float = 5.0,
        pool_size: int = DEFAULT_POOL_SIZE,
        pool_timeout_s: float = DEFAULT_POOL_TIMEOUT_S,
    ) -> None:
        # Keepalive is a TCP option; redis-py refuses it for unix-socket connections.
        tcp: dict[str, Any] = {} if url.lower().startswith("unix://") else {"socket_keepalive": True}

        def client(connections: int) -> redis.Redis:
            return blocking_pool(redis.BlockingConnectionPool.from_url(
                url, max_connections=connections, timeout=pool_timeout_s, **tcp,
                retry=LoginFailsFast(ExponentialWithJitterBackoff(base=0.1, cap=2.0), retries),
                retry_on_error=[redis.ConnectionError, redis.TimeoutError],
                health_check_interval=health_check_interval_s,
                socket_timeout=socket_timeout_s,
                socket_connect_timeout=connect_timeout_s,
                client_name="edgetune",
            ))

        super().__init__(client(pool_size), namespace=namespace, url=url, lease_client=client(LEASE_CONNECTIONS))



class LoginFailsFast(Retry):
    """redis-py's retry, except for a refused login: redis-py makes an AuthenticationError a kind of
    ConnectionError, so a wrong password or user was retried with backoff and failed after ~3.7 s; it
    fails at once now (a retry cannot fix it, and the caller's error says why)."""

    def call_with_retry(self, do: Callable[[], Any], fail: Callable[..., Any],
                        is_retryable: Callable[[Exception], bool] | None = None,
                        with_failure_count: bool = False) -> Any:
        def retryable(error: Exception) -> bool:
            return not isinstance(error, LOGIN_ERRORS) and (is_retryable is None or is_retryable(error))

        return super().call_with_retry(do, fail, retryable, with_failure_count)


def blocking_pool(pool: redis.ConnectionPool) -> redis.Redis:
    """A client over ``pool`` (a BlockingConnectionPool: callers wait for a connection rather
    than fail with "Too many connections" as redis-py's default pool of 100 does)."""
    client = redis.Redis(connection_pool=pool)
    client.auto_close_connection_pool = True
    return client


def wait_for_ping(client: redis.Redis, timeout_s: float, alive: Callable[[], bool] | None = None) -> None:
    """Poll PING until it answers (a server loading its AOF answers LOADING: keep waiting).

    ``alive`` lets a caller that owns the process stop early when it died.
    """
    deadline = time.monotonic() + timeout_s
    delay = 0.005
    last: Exception | None = None
    while time.monotonic() < deadline:
        if alive is not None and not alive():
            raise FailedPrecondition("redis-server exited during start-up")
        try:
            if client.ping():
                return
        except (redis.ConnectionError, redis.TimeoutError, redis.BusyLoadingError, FileNotFoundError) as exc:
            last = exc
        time.sleep(delay)
        delay = min(delay * 2, 0.1)
    raise FailedPrecondition(f"redis did not answer PING within {timeout_s:g} s ({last})")
