"""Profiling jobs: one Redis stream per node, consumed by that node's agent(s), at least once.

Layout (``ns`` = the store's namespace)::

    ns:jobs:<node_id>          stream; entry fields ``job_id`` and ``job`` (JSON)
                               consumer group ``agents`` (created at id 0 with MKSTREAM)
    ns:jobs-ids:<node_id>      hash job_id -> stream entry id: makes submit idempotent
    ns:jobs-dead:<node_id>     stream of jobs given up after ``max_deliveries`` (poison jobs)

Delivery: :meth:`JobQueue.claim` first takes over entries another consumer of the group
read but never acknowledged for ``idle_timeout_ms`` (``XAUTOCLAIM``: the agent died or hung),
then reads new ones (``XREADGROUP >``, blocking up to ``block_ms``). An agent profiles, writes
its measurements (:meth:`JobQueue.complete`: idempotent ids, then ``XACK``). A job whose agent
died is re-delivered; its measurements carry the same ids, so the re-run duplicates nothing.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, cast

import redis

from edgetune.coordination.store import Store
from edgetune.errors import InvalidArgument

log = logging.getLogger(__name__)

GROUP = "agents"
DEFAULT_IDLE_TIMEOUT_MS = 60_000
DEFAULT_MAX_DELIVERIES = 5
#: Approximate cap on a node's stream length (acknowledged entries are only history).
DEFAULT_STREAM_MAXLEN = 10_000

# Idempotent submit: a job id seen before returns its entry instead of adding a second one,
# so a coordinator that retries XADD after a lost reply does not queue the job twice.
_SUBMIT = """
local existing = redis.call('HGET', KEYS[2], ARGV[1])
if existing then return existing end
local entry = redis.call('XADD', KEYS[1], 'MAXLEN', '~', ARGV[3], '*', 'job_id', ARGV[1], 'job', ARGV[2])
redis.call('HSET', KEYS[2], ARGV[1], entry)
return entry
"""


@dataclass(frozen=True)
class Job:
    """One delivered job: ``entry_id`` is the stream id to acknowledge, ``payload`` the job dict."""

    node_id: str
    job_id: str
    entry_id: str
    payload: dict
    consumer: str
    deliveries: int = 1


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


class JobQueue:
    """Per-node job streams with one consumer group (see module doc)."""

    def __init__(self, store: Store, *, idle_timeout_ms: int = DEFAULT_IDLE_TIMEOUT_MS,
                 max_deliveries: int = DEFAULT_MAX_DELIVERIES, stream_maxlen: int = DEFAULT_STREAM_MAXLEN) -> None:
        if idle_timeout_ms <= 0:
            raise InvalidArgument("idle_timeout_ms", f"{idle_timeout_ms!r}", "> 0")
        if max_deliveries < 1:
            raise InvalidArgument("max_deliveries", f"{max_deliveries!r}", ">= 1")
        self.store = store
        self.idle_timeout_ms = int(idle_timeout_ms)
        self.max_deliveries = int(max_deliveries)
        self.stream_maxlen = int(stream_maxlen)
        self._submit = store.client.register_script(_SUBMIT)
        self._groups: set[str] = set()

    def stream_key(self, node_id: str) -> str:
        return self.store.key("jobs", node_id)

    def _ensure_group(self, node_id: str) -> str:
        key = self.stream_key(node_id)
        if key not in self._groups:
            try:
                self.store.client.xgroup_create(key, GROUP, id="0", mkstream=True)
            except redis.ResponseError as exc:
                if "BUSYGROUP" not in str(exc):
                    raise
            self._groups.add(key)
        return key

    # -- coordinator side ---------------------------------------------------------------

    def submit(self, node_id: str, job: Mapping[str, Any], job_id: str | None = None) -> str:
        """Queue ``job`` for the node; returns its job id. The same ``job_id`` twice queues it once."""
        if not isinstance(node_id, str) or not node_id:
            raise InvalidArgument("node_id", f"{node_id!r}", "a non-empty string")
        if not isinstance(job, Mapping):
            raise InvalidArgument("job", f"must be a mapping, got {type(job).__name__}")
        job_id = job_id or uuid.uuid4().hex
        try:
            payload = json.dumps(dict(job), separators=(",", ":"))
        except (TypeError, ValueError) as exc:
            raise InvalidArgument("job", f"not JSON-serialisable: {exc}") from None
        key = self._ensure_group(node_id)
        self._submit(keys=[key, self.store.key("jobs-ids", node_id)], args=[job_id, payload, self.stream_maxlen])
        return job_id

    def pending_count(self, node_id: str) -> int:
        """Jobs delivered but not acknowledged."""
        key = self._ensure_group(node_id)
        return int(self.store.client.xpending(key, GROUP)["pending"])

    def backlog(self, node_id: str) -> int:
        """Jobs not yet delivered to any consumer (Redis >= 7 reports it as the group's lag)."""
        key = self._ensure_group(node_id)
        for group in self.store.client.xinfo_groups(key):
            if _text(group["name"]) == GROUP:
                lag = group.get("lag")
                if lag is not None:
                    return int(lag)
                last = _text(group["last-delivered-id"])
                # Redis 6.2 has no lag: count what lies after the last delivered entry.
                after = cast("list[Any]", self.store.client.xrange(key, min=f"({last}" if last != "0-0" else "-"))
                return len(after)
        return 0

    def dead_jobs(self, node_id: str) -> list[dict]:
        entries = cast("list[Any]", self.store.client.xrange(self.store.key("jobs-dead", node_id)))
        return [json.loads(fields[b"job"]) | {"job_id": _text(fields[b"job_id"])} for _id, fields in entries]

    # -- agent side ---------------------------------------------------------------------

    def claim(self, node_id: str, consumer: str, *, block_ms: int = 1000, count: int = 1) -> list[Job]:
        """Up to ``count`` jobs for ``consumer``: stale ones of dead consumers first, then new ones.

        Blocks up to ``block_ms`` (0: do not block) when there is nothing; [] then. Keep
        ``block_ms`` below the client's socket timeout.
        """
        if not consumer:
            raise InvalidArgument("consumer", "empty consumer name", "a name unique per agent process")
        if block_ms < 0 or count < 1:
            raise InvalidArgument("block_ms" if block_ms < 0 else "count", "out of range", "block_ms >= 0, count >= 1")
        key = self._ensure_group(node_id)
        jobs = self._reclaim(node_id, key, consumer, count)
        if jobs:
            return jobs
        reply = cast("list[Any]", self.store.client.xreadgroup(GROUP, consumer, {key: ">"}, count=count,
                                                               block=block_ms if block_ms > 0 else None))
        out = []
        for _stream, entries in reply or []:
            for entry_id, fields in entries:
                if fields:  # a trimmed entry comes back empty: nothing to run
                    out.append(self._job(node_id, entry_id, fields, consumer, 1))
        return out

    def _reclaim(self, node_id: str, key: str, consumer: str, count: int) -> list[Job]:
        client = self.store.client
        _next, claimed, *_deleted = client.xautoclaim(key, GROUP, consumer, self.idle_timeout_ms,
                                                      start_id="0-0", count=count)
        jobs = []
        for entry_id, fields in claimed:
            entry = _text(entry_id)
            info = client.xpending_range(key, GROUP, min=entry, max=entry, count=1)
            deliveries = int(info[0]["times_delivered"]) if info else 1
            if not fields:  # trimmed away while pending
                client.xack(key, GROUP, entry)
                continue
            job = self._job(node_id, entry_id, fields, consumer, deliveries)
            if deliveries > self.max_deliveries:
                self._bury(job)
                continue
            log.info("job re-delivered", extra={"node_id": node_id, "job_id": job.job_id, "deliveries": deliveries})
            jobs.append(job)
        return jobs

    def _bury(self, job: Job) -> None:
        # A job that killed (or hung) its agent max_deliveries times would loop forever: park it.
        pipe = self.store.client.pipeline(transaction=True)
        pipe.xadd(self.store.key("jobs-dead", job.node_id),
                  {"job_id": job.job_id, "job": json.dumps(job.payload), "deliveries": job.deliveries})
        pipe.xack(self.stream_key(job.node_id), GROUP, job.entry_id)
        pipe.execute()
        log.warning("job given up", extra={"node_id": job.node_id, "job_id": job.job_id,
                                           "deliveries": job.deliveries})

    @staticmethod
    def _job(node_id: str, entry_id: bytes | str, fields: Mapping, consumer: str, deliveries: int) -> Job:
        return Job(node_id=node_id, job_id=_text(fields[b"job_id"]), entry_id=_text(entry_id),
                   payload=json.loads(fields[b"job"]), consumer=consumer, deliveries=deliveries)

    def ack(self, job: Job) -> bool:
        """Mark the job done; False when it was already acknowledged (or claimed away and acked)."""
        return bool(self.store.client.xack(self.stream_key(job.node_id), GROUP, job.entry_id))

    def complete(self, job: Job, measurements: Iterable[Mapping[str, Any]]) -> int:
        """Write the job's measurements (idempotent by id), then acknowledge; returns how many were new.

        Written before the ack on purpose: a crash in between re-delivers the job, whose re-run
        writes the same ids again, which the store ignores.
        """
        docs = [measurement_doc(m, job.node_id) for m in measurements]
        new = self.store.put_measurements(docs) if docs else 0
        self.ack(job)
        return new


def measurement_doc(m: Mapping[str, Any] | Any, node_id: str) -> dict:
    """A store document from a profiling ``Measurement`` (or its ``to_row()`` dict).

    The store indexes by ``device_model`` and ``node_id``; profile rows call them ``device``
    and ``node``, so both names are filled in.
    """
    row = dict(m.to_row()) if hasattr(m, "to_row") else dict(m)
    if not row.get("id"):
        raise InvalidArgument("measurement.id", "is missing: ids make re-delivered writes idempotent",
                              "edgetune.profiling.measurement_id(...)")
    row.setdefault("device_model", row.get("device", ""))
    row.setdefault("node_id", row.get("node") or node_id)
    return row
