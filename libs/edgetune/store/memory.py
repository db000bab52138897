"""MemoryStore: the :class:`~.base.Store` in plain Python, for unit tests.

Same contract as the Redis backends (``tests/unit/test_store_contract.py`` runs one suite on
all of them), no server: one lock guards everything, a ``threading.Condition`` wakes
blocking reads (job claims, config watches), and TTLs (heartbeats, leases, job idle times)
run on ``clock`` — ``time.monotonic`` unless a test injects its own. Values go through
their JSON serialisers on the way in and out, as they would through Redis, so a value
Redis would refuse is refused here too and callers never share mutable state with the store.
State lives as long as the object: nothing persists, nothing is shared between processes.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from edgetune.errors import InvalidArgument, NotFound

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
    key_parts,
    stamp_config_revisions,
)
from .records import AuditRecord, DeadJob, Job, MeasurementRecord, NodeConfig, Published, RoundState, dumps

Key = tuple[str, ...]
#: Changes the config feed keeps (a watcher further behind re-reads everything).
FEED_LEN = 10_000


def _epoch_now() -> int:
    return int(time.time() * 1000)


def _key(key: KeyLike) -> Key:
    return tuple(str(p) for p in key_parts(key))


@dataclass
class _Entry:
    entry_id: str
    job_id: str
    payload: bytes
    delivered: bool = False
    consumer: str = ""
    deliveries: int = 0
    delivered_at: float = 0.0
    pending: bool = False


@dataclass
class _Queue:
    entries: dict[str, _Entry] = field(default_factory=dict)  # insertion order = stream order
    ids: dict[str, str] = field(default_factory=dict)  # job_id -> entry_id
    dead: list[DeadJob] = field(default_factory=list)


@dataclass
class _ConfigSlot:
    current: NodeConfig
    digest: str
    log: deque[NodeConfig]


class ManualClock:
    """A clock that moves only when told (``advance``): TTL tests without sleeping or timing races."""

    def __init__(self, start_s: float = 1_000.0) -> None:
        self.now_s = float(start_s)
        self._lock = threading.Lock()

    def __call__(self) -> float:
        with self._lock:
            return self.now_s

    def advance(self, seconds: float) -> None:
        with self._lock:
            self.now_s += seconds


class MemoryStore:
    """Everything :class:`~.base.Store` promises, in this process's memory (see module doc)."""

    backend = "memory"

    def __init__(self, *, namespace: str = DEFAULT_NAMESPACE, clock: Callable[[], float] = time.monotonic) -> None:
        self.namespace = escape_part(namespace)
        self.url = "memory://"
        self.clock = clock
        self._cond = threading.Condition(threading.RLock())
        self._closed = False
        self._seq = 0
        self._measurements: dict[str, tuple[int, bytes]] = {}
        self._meas_index: dict[tuple[str, str, str, str | None], list[str]] = {}
        self._blobs: dict[tuple[str, Key], list[tuple[bytes, bytes]]] = {}
        self._docs: dict[tuple[str, str], tuple[bytes, int]] = {}
        self._doc_rev = 0
        self._kv: dict[Key, tuple[bytes, float | None]] = {}
        self._queues: dict[str, _Queue] = {}
        self._entry_seq = 0
        self._configs: dict[str, _ConfigSlot] = {}
        self._leases: dict[str, tuple[str, float]] = {}
        self._round: RoundState | None = None
        self._epoch = 0
        #: The change feed: (sequence, node id), the last FEED_LEN changes.
        self._feed: deque[tuple[int, str]] = deque(maxlen=FEED_LEN)
        self._feed_seq = 0
        self._audit: deque[bytes] = deque()
        self._incarnation = f"{uuid.uuid4().hex}@{int(time.time() * 1000)}"

    # -- health -----------------------------------------------------------------------------

    def ping(self) -> bool:
        return not self._closed

    def info(self) -> dict[str, Any]:
        return {"backend": self.backend, "url": self.url, "namespace": self.namespace}

    def close(self) -> None:
        self._closed = True
        with self._cond:
            self._cond.notify_all()

    def __enter__(self) -> MemoryStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"MemoryStore(namespace={self.namespace!r})"

    def _wait(self, deadline: float) -> bool:
        """Wait (lock held) until notified or ``deadline`` (monotonic); False once it passed."""
        left = deadline - time.monotonic()
        if left <= 0 or self._closed:
            return False
        self._cond.wait(left)
        return True

    # -- measurements -----------------------------------------------------------------------

    def put_measurement(self, m: MeasurementRecord) -> bool:
        return self.put_measurements([m]) == 1

    def put_measurements(self, ms: Iterable[MeasurementRecord]) -> int:
        records = list(ms)
        for m in records:
            if not isinstance(m, MeasurementRecord):
                raise InvalidArgument("measurement", f"must be a MeasurementRecord, got {type(m).__name__}")
        new = 0
        with self._cond:
            for m in records:
                if m.id in self._measurements:
                    continue
                self._seq += 1
                self._measurements[m.id] = (self._seq, m.to_json())
                for node in (None, m.node_id) if m.node_id else (None,):
                    self._meas_index.setdefault((m.device_model, m.workload, m.role, node), []).append(m.id)
                new += 1
        return new

    def get_measurement(self, measurement_id: str) -> MeasurementRecord | None:
        return self.get_measurements_by_id([measurement_id])[0]

    def get_measurements_by_id(self, measurement_ids: Sequence[str]) -> list[MeasurementRecord | None]:
        with self._cond:
            found = [self._measurements.get(mid) for mid in measurement_ids]
        return [MeasurementRecord.from_json(f[1]) if f else None for f in found]

    def get_measurements(self, device_model: str, workload: str, role: str,
                         node_id: str | None = None) -> list[MeasurementRecord]:
        check_role(role)
        with self._cond:
            raws = [self._measurements[i][1] for i in self._meas_index.get((device_model, workload, role,
                                                                            node_id or None), [])]
        return [MeasurementRecord.from_json(raw) for raw in raws]

    def count_measurements(self, device_model: str, workload: str, role: str, node_id: str | None = None) -> int:
        check_role(role)
        with self._cond:
            return len(self._meas_index.get((device_model, workload, role, node_id or None), []))

    # -- versioned blobs --------------------------------------------------------------------

    def put_blob(self, kind: str, key_parts: KeyLike, data: bytes, meta: dict[str, Any] | None = None) -> int:
        if not isinstance(data, bytes | bytearray | memoryview):
            raise InvalidArgument("data", f"must be bytes, got {type(data).__name__}")
        escape_part(kind)
        raw_meta = dumps(meta or {}, "meta")
        with self._cond:
            versions = self._blobs.setdefault((kind, _key(key_parts)), [])
            versions.append((bytes(data), raw_meta))
            return len(versions)

    def latest_blob_version(self, kind: str, key_parts: KeyLike) -> int | None:
        with self._cond:
            versions = self._blobs.get((kind, _key(key_parts)))
            return len(versions) if versions else None

    def get_blob(self, kind: str, key_parts: KeyLike,
                 version: int | None = None) -> tuple[bytes, dict[str, Any], int]:
        parts = _key(key_parts)
        shown = "/".join((kind, *parts))
        check_version(version)
        with self._cond:
            versions = self._blobs.get((kind, parts))
        if not versions:
            raise NotFound(f"blob {shown} does not exist")
        version = len(versions) if version is None else version
        if version > len(versions):
            raise NotFound(f"blob {shown} has no version {version}")
        data, meta = versions[version - 1]
        return data, json.loads(meta), version

    def list_blobs(self, kind: str) -> list[BlobRef]:
        with self._cond:
            return sorted(BlobRef(parts, len(v)) for (k, parts), v in self._blobs.items() if k == kind)

    # -- JSON docs with compare-and-set -----------------------------------------------------

    def _check_write(self, kind: str, key: str, expected_revision: int | None, fence: Fence | None) -> None:
        if fence is not None:
            lease = self._lease(fence.name)
            if lease is None or lease[0] != fence.holder:
                raise LeaseLost(fence.name, lease[0] if lease else None)
        current = self._docs[(kind, key)][1] if (kind, key) in self._docs else 0
        if expected_revision is not None and current != expected_revision:
            raise RevisionConflict(kind, key, expected_revision, current)

    def put_doc(self, kind: str, key: str, doc: Any, expected_revision: int | None = None, *,
                fence: Fence | None = None) -> int:
        check_expected_revision(expected_revision)
        escape_part(kind)
        escape_part(key)
        payload = dumps(doc, "doc")
        with self._cond:
            self._check_write(kind, key, expected_revision, fence)
            self._doc_rev += 1
            self._docs[(kind, key)] = (payload, self._doc_rev)
            return self._doc_rev

    def get_doc(self, kind: str, key: str, *, missing_ok: bool = False) -> VersionedDoc | None:
        with self._cond:
            found = self._docs.get((kind, key))
        if found is None:
            if missing_ok:
                return None
            raise NotFound(f"doc {kind}/{key} does not exist")
        return VersionedDoc(json.loads(found[0]), found[1])

    def get_docs(self, kind: str, keys: Sequence[str]) -> list[VersionedDoc | None]:
        with self._cond:
            found = [self._docs.get((kind, key)) for key in keys]
        return [None if f is None else VersionedDoc(json.loads(f[0]), f[1]) for f in found]

    def delete_doc(self, kind: str, key: str, expected_revision: int | None = None, *,
                   fence: Fence | None = None) -> bool:
        check_expected_revision(expected_revision)
        with self._cond:
            self._check_write(kind, key, expected_revision, fence)
            return self._docs.pop((kind, key), None) is not None

    def list_docs(self, kind: str) -> list[str]:
        with self._cond:
            return sorted(key for k, key in self._docs if k == kind)

    # -- small JSON values ------------------------------------------------------------------

    def _live(self, key: Key) -> tuple[bytes, float | None] | None:
        found = self._kv.get(key)
        if found is not None and found[1] is not None and self.clock() >= found[1]:
            del self._kv[key]
            return None
        return found

    def set(self, key: KeyLike, value: Any) -> None:
        self.set_many([(key, value, None)])

    def set_with_ttl(self, key: KeyLike, value: Any, ttl_s: float) -> None:
        self.set_many([(key, value, check_ttl(ttl_s))])

    def set_many(self, items: Sequence[tuple[KeyLike, Any, float | None]]) -> None:
        prepared = [(_key(k), dumps(v, "value"), None if t is None else check_ttl(t)) for k, v, t in items]
        with self._cond:
            now = self.clock()
            for key, raw, ttl_s in prepared:
                # Millisecond precision, at least 1 ms, as Redis's PX.
                self._kv[key] = (raw, None if ttl_s is None else now + max(1, round(ttl_s * 1000)) / 1000.0)

    def get(self, key: KeyLike) -> Any | None:
        return self.get_many([key])[0]

    def get_many(self, keys: Sequence[KeyLike]) -> list[Any | None]:
        wanted = [_key(k) for k in keys]
        with self._cond:
            found = [self._live(k) for k in wanted]
        return [json.loads(f[0]) if f is not None else None for f in found]

    def ttl(self, key: KeyLike) -> float | None:
        with self._cond:
            found = self._live(_key(key))
            return None if found is None or found[1] is None else max(0.0, found[1] - self.clock())

    def delete(self, key: KeyLike) -> bool:
        k = _key(key)
        with self._cond:
            return self._live(k) is not None and self._kv.pop(k, None) is not None

    def list_keys(self, *prefix: str | int) -> list[tuple[str, ...]]:
        base = tuple(str(p) for p in prefix)
        with self._cond:
            return sorted(k for k in list(self._kv) if len(k) > len(base) and k[:len(base)] == base
                          and self._live(k) is not None)

    # -- job queues -------------------------------------------------------------------------

    def _queue(self, node_id: str) -> _Queue:
        return self._queues.setdefault(check_node_id(node_id), _Queue())

    @staticmethod
    def _job(node_id: str, e: _Entry) -> Job:
        return Job(node_id=node_id, job_id=e.job_id, entry_id=e.entry_id, payload=json.loads(e.payload),
                   consumer=e.consumer, deliveries=e.deliveries)

    def submit_job(self, node_id: str, job_id: str, payload: dict[str, Any], *, max_len: int) -> str:
        raw = dumps(dict(payload), "job")
        with self._cond:
            q = self._queue(node_id)
            if job_id in q.ids:
                return q.ids[job_id]
            self._entry_seq += 1
            entry = _Entry(f"{self._entry_seq}-0", job_id, raw)
            q.entries[entry.entry_id] = entry
            q.ids[job_id] = entry.entry_id
            # Keep the history bounded, as Redis's MAXLEN: only finished entries go.
            excess = len(q.entries) - max_len
            for old in [e for e in q.entries.values() if e.delivered and not e.pending][:max(excess, 0)]:
                del q.entries[old.entry_id]
            self._cond.notify_all()
            return entry.entry_id

    def read_jobs(self, node_id: str, consumer: str, *, count: int, block_ms: int) -> list[Job]:
        deadline = time.monotonic() + block_ms / 1000.0
        with self._cond:
            q = self._queue(node_id)
            while True:
                fresh = [e for e in q.entries.values() if not e.delivered][:count]
                if fresh or not self._wait(deadline):
                    break
            now = self.clock()
            for e in fresh:
                e.delivered, e.pending, e.consumer, e.deliveries, e.delivered_at = True, True, consumer, 1, now
            return [self._job(node_id, e) for e in fresh]

    def reclaim_jobs(self, node_id: str, consumer: str, *, idle_ms: int, count: int) -> list[Job]:
        with self._cond:
            q = self._queue(node_id)
            now = self.clock()
            stale = [e for e in q.entries.values() if e.pending and (now - e.delivered_at) * 1000.0 >= idle_ms]
            out = []
            for e in stale[:count]:
                e.consumer, e.deliveries, e.delivered_at = consumer, e.deliveries + 1, now
                out.append(self._job(node_id, e))
            return out

    def ack_job(self, node_id: str, entry_id: str) -> bool:
        with self._cond:
            e = self._queue(node_id).entries.get(entry_id)
            if e is None or not e.pending:
                return False
            e.pending = False
            return True

    def bury_job(self, job: Job) -> None:
        with self._cond:
            q = self._queue(job.node_id)
            q.dead.append(DeadJob(job.job_id, json.loads(dumps(dict(job.payload), "job")), job.deliveries))
            e = q.entries.get(job.entry_id)
            if e is not None:
                e.pending = False

    def pending_jobs(self, node_id: str) -> int:
        with self._cond:
            return sum(1 for e in self._queue(node_id).entries.values() if e.pending)

    def job_backlog(self, node_id: str) -> int:
        with self._cond:
            return sum(1 for e in self._queue(node_id).entries.values() if not e.delivered)

    def dead_jobs(self, node_id: str) -> list[DeadJob]:
        with self._cond:
            return list(self._queue(node_id).dead)

    # -- audit ------------------------------------------------------------------------------

    def append_audit(self, record: AuditRecord, *, max_len: int) -> None:
        if max_len < 1:
            raise InvalidArgument("max_len", f"{max_len} is below 1", ">= 1")
        data = record.to_json()  # stored serialised, like every other backend
        with self._cond:
            self._audit.append(data)
            while len(self._audit) > max_len:
                self._audit.popleft()

    def audit_records(self, count: int) -> list[AuditRecord]:
        with self._cond:
            newest = list(self._audit)[-count:] if count > 0 else []
        return [AuditRecord.from_json(d) for d in newest]

    # -- node configs -----------------------------------------------------------------------

    def _lease(self, name: str) -> tuple[str, float] | None:
        found = self._leases.get(name)
        if found is not None and self.clock() >= found[1]:
            del self._leases[name]
            return None
        return found

    def publish_configs(self, configs: Sequence[NodeConfig], *, fence: Fence | None = None,
                        log_len: int = 100, docs: Sequence[DocWrite] = (),
                        values: Sequence[tuple[KeyLike, Any, float | None]] = (),
                        round_state: RoundState | None = None) -> list[Published]:
        prepared = [(check_node_id(c.node_id), NodeConfig.from_json(c.with_revision(0).to_json()), c.digest())
                    for c in configs]
        node_ids = [node_id for node_id, _cfg, _digest in prepared]
        doc_writes = []
        for d in docs:
            check_expected_revision(d.expected_revision)
            escape_part(d.kind)
            escape_part(d.key)
            doc_writes.append((d, dumps(stamp_config_revisions(d, node_ids, lambda _i: 0), "doc")))
        kv = [(_key(k), dumps(v, "value"), None if t is None else check_ttl(t)) for k, v, t in values]
        new_round = (RoundState.from_json(round_state.to_json()).with_options(round_state.options_npz)
                     if round_state is not None else None)
        out = []
        with self._cond:
            # Every check before any write: all or nothing, as the Redis script.
            if fence is not None:
                lease = self._lease(fence.name)
                if lease is None or lease[0] != fence.holder:
                    raise LeaseLost(fence.name, lease[0] if lease else None)
            for d, _raw in doc_writes:
                self._check_write(d.kind, d.key, d.expected_revision, None)
            now = self.clock()
            for key, raw, ttl_s in kv:
                self._kv[key] = (raw, None if ttl_s is None else now + max(1, round(ttl_s * 1000)) / 1000.0)
            if new_round is not None:
                self._round = new_round
            if prepared and not self._epoch:
                self._epoch = _epoch_now()
            for node_id, cfg, digest in prepared:
                slot = self._configs.get(node_id)
                if slot is not None and slot.digest == digest:
                    out.append(Published(node_id, slot.current.revision, False, self._epoch))
                    continue
                current = cfg.with_revision(slot.current.revision + 1 if slot else 1, self._epoch)
                if slot is None:
                    slot = self._configs[node_id] = _ConfigSlot(current, digest, deque(maxlen=max(log_len, 1)))
                slot.current, slot.digest = current, digest
                slot.log.append(current)
                self._feed_seq += 1
                self._feed.append((self._feed_seq, node_id))
                out.append(Published(node_id, current.revision, True, self._epoch))
            for d, raw in doc_writes:  # after the configs: a doc's config_revisions are theirs
                if d.config_revisions:
                    raw = dumps(stamp_config_revisions(d, node_ids, lambda i: out[i].revision), "doc")
                self._doc_rev += 1
                self._docs[(d.kind, d.key)] = (raw, self._doc_rev)
            self._cond.notify_all()
        return out

    def get_config(self, node_id: str) -> NodeConfig | None:
        with self._cond:
            slot = self._configs.get(check_node_id(node_id))
            return slot.current if slot else None

    def get_configs(self, node_ids: Sequence[str]) -> dict[str, NodeConfig]:
        with self._cond:
            return {n: s.current for n in node_ids if (s := self._configs.get(check_node_id(n))) is not None}

    def config_revisions(self, node_ids: Sequence[str]) -> dict[str, int]:
        with self._cond:
            return {n: (s.current.revision if (s := self._configs.get(check_node_id(n))) else 0) for n in node_ids}

    def config_epoch(self) -> int:
        with self._cond:
            return self._epoch

    def incarnation(self) -> str:
        with self._cond:
            return self._incarnation

    def lose_everything(self) -> None:
        """Forget every record, as a Redis restarted without persistence would (for tests): a new incarnation."""
        with self._cond:
            fresh = MemoryStore(namespace=self.namespace, clock=self.clock)
            for name, value in vars(fresh).items():
                if name not in ("_cond", "namespace", "clock"):
                    setattr(self, name, value)
            self._cond.notify_all()

    def wait_configs(self, node_id: str, after_revision: int, *, block_ms: int,
                     epoch: int = 0) -> list[NodeConfig]:
        check_node_id(node_id)
        deadline = time.monotonic() + block_ms / 1000.0
        with self._cond:
            while True:
                slot = self._configs.get(node_id)
                after = 0 if epoch and epoch != self._epoch else after_revision
                if slot is not None and slot.current.revision > after:
                    if after != after_revision:  # another epoch: only the current config counts
                        return [slot.current]
                    older = [c for c in slot.log if after < c.revision < slot.current.revision]
                    return [*older, slot.current]
                if not self._wait(deadline):
                    return []

    def wait_config_changes(self, cursor: str, *, block_ms: int) -> ConfigChanges:
        deadline = time.monotonic() + block_ms / 1000.0
        with self._cond:
            if not cursor:
                return ConfigChanges(str(self._feed_seq), (), True)
            after = int(cursor)
            while self._feed_seq <= after:
                if not self._wait(deadline):
                    return ConfigChanges(cursor, ())
            lost = not self._feed or self._feed[0][0] > after + 1
            return ConfigChanges(str(self._feed_seq), tuple(dict.fromkeys(n for q, n in self._feed if q > after)),
                                 lost)

    # -- leases -----------------------------------------------------------------------------

    def acquire_lease(self, name: str, holder: str, ttl_ms: int) -> bool:
        with self._cond:
            if self._lease(name) is not None:
                return False
            self._leases[name] = (holder, self.clock() + ttl_ms / 1000.0)
            return True

    def renew_lease(self, name: str, holder: str, ttl_ms: int) -> bool:
        with self._cond:
            lease = self._lease(name)
            if lease is None or lease[0] != holder:
                return False
            self._leases[name] = (holder, self.clock() + ttl_ms / 1000.0)
            return True

    def release_lease(self, name: str, holder: str) -> bool:
        with self._cond:
            lease = self._lease(name)
            if lease is None or lease[0] != holder:
                return False
            del self._leases[name]
            return True

    def lease_holder(self, name: str) -> str | None:
        with self._cond:
            lease = self._lease(name)
            return lease[0] if lease else None

    def lease_ttl_ms(self, name: str) -> int | None:
        with self._cond:
            lease = self._lease(name)
            return None if lease is None else max(0, round((lease[1] - self.clock()) * 1000))

    # -- the last applied round -------------------------------------------------------------

    def put_round(self, state: RoundState) -> None:
        copy = RoundState.from_json(state.to_json()).with_options(state.options_npz)
        with self._cond:
            self._round = copy

    def get_round(self) -> RoundState | None:
        with self._cond:
            return self._round

    def set_round_members(self, members: Sequence[str]) -> bool:
        with self._cond:
            if self._round is None:
                return False
            self._round = self._round.with_members(members)
            return True
