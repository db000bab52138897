"""Profiling jobs: one queue per node in the store, consumed by that node's agent(s), at least once.

The store keeps per node a queue of jobs (``job_id`` + a JSON payload; submit is idempotent
by ``job_id``), what each consumer holds unacknowledged, and the dead letters: jobs given up
after ``max_deliveries`` (poison jobs). On Redis these are a stream with the consumer group
``agents`` (:mod:`edgetune.store.redis_store` has the layout).

Delivery: :meth:`JobQueue.claim` first takes over jobs another consumer read but never
acknowledged for ``idle_timeout_ms`` (the agent died or hung), then reads new ones (blocking
up to ``block_ms``). An agent profiles, writes its measurements (:meth:`JobQueue.complete`:
idempotent ids, then the ack). A job whose agent died is re-delivered; its measurements
carry the same ids, so the re-run duplicates nothing.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from edgetune.errors import InvalidArgument
from edgetune.store import DeadJob, Job, MeasurementRecord, RevisionConflict, Store

log = logging.getLogger(__name__)

GROUP = "agents"
DEFAULT_IDLE_TIMEOUT_MS = 60_000
DEFAULT_MAX_DELIVERIES = 5
#: Approximate cap on a node's queue length (acknowledged entries are only history).
DEFAULT_STREAM_MAXLEN = 10_000
#: How long a refused job's reason is kept (the submitter looks once the queue is drained), and its length.
REFUSAL_TTL_S = 3600.0
MAX_REFUSAL_CHARS = 2000
#: Longest job id a client may choose.
MAX_JOB_ID_CHARS = 200
#: A consumer looks for its node's stale jobs (idle past ``idle_timeout_ms``) at most this often, as a share of
#: ``idle_timeout_ms``: a job is stale only after that long, and an agent asking every few milliseconds
#: otherwise paid two store calls a claim (the looks alone were 226 k of a 1,000-node bench's 1.63 M store calls).
RECLAIM_EVERY_SHARE = 0.1

__all__ = ["DeadJob", "Job", "JobQueue", "measurement_record"]


class Completions:
    """Wakes the waiters of a node's points when this process acknowledges one of its jobs (an agent's
    ``Complete`` through the coordinator's NodeJobs service lands here): a waiter then reads the store at
    once instead of at its next poll. Jobs acknowledged by other processes are seen at the next poll."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._count: dict[str, int] = {}

    def seen(self, node_id: str) -> int:
        with self._cond:
            return self._count.get(node_id, 0)

    def notify(self, node_id: str) -> None:
        with self._cond:
            self._count[node_id] = self._count.get(node_id, 0) + 1
            self._cond.notify_all()

    def wait(self, node_id: str, since: int, timeout_s: float) -> bool:
        """True when a job of the node was acknowledged here after count ``since``; False after ``timeout_s``."""
        with self._cond:
            return self._cond.wait_for(lambda: self._count.get(node_id, 0) != since, timeout_s)


#: This process's completions (what :class:`JobQueue` notifies and the reconcile loop's waiters wait on).
COMPLETIONS = Completions()


class JobQueue:
    """Per-node job queues, delivered at least once (see module doc)."""

    def __init__(self, store: Store, *, idle_timeout_ms: int = DEFAULT_IDLE_TIMEOUT_MS,
                 max_deliveries: int = DEFAULT_MAX_DELIVERIES, stream_maxlen: int = DEFAULT_STREAM_MAXLEN,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if idle_timeout_ms <= 0:
            raise InvalidArgument("idle_timeout_ms", f"{idle_timeout_ms!r}", "> 0")
        if max_deliveries < 1:
            raise InvalidArgument("max_deliveries", f"{max_deliveries!r}", ">= 1")
        self.store = store
        self.idle_timeout_ms = int(idle_timeout_ms)
        self.max_deliveries = int(max_deliveries)
        self.stream_maxlen = int(stream_maxlen)
        self.clock = clock  # the store's TTL clock, when a test moves it by hand
        #: (node, consumer) -> when it last looked for stale jobs (on ``clock``)
        self._reclaimed: dict[tuple[str, str], float] = {}

    # -- coordinator side ---------------------------------------------------------------

    def submit(self, node_id: str, job: Mapping[str, Any], job_id: str | None = None) -> str:
        """Queue ``job`` for the node; returns its job id. The same ``job_id`` twice queues it once."""
        if not isinstance(node_id, str) or not node_id:
            raise InvalidArgument("node_id", f"{node_id!r}", "a non-empty string")
        if not isinstance(job, Mapping):
            raise InvalidArgument("job", f"must be a mapping, got {type(job).__name__}")
        job_id = job_id or uuid.uuid4().hex
        self.store.submit_job(node_id, job_id, dict(job), max_len=self.stream_maxlen)
        return job_id

    def submit_once(self, node_id: str, job: Mapping[str, Any], job_id: str = "") -> tuple[str, bool]:
        """Queue ``job`` under ``job_id`` (empty: a new one): the id, and whether that id was submitted
        before (then nothing new was queued; a marker doc remembers every id, for the caller to hear it)."""
        job_id = job_id or uuid.uuid4().hex
        if len(job_id) > MAX_JOB_ID_CHARS:
            raise InvalidArgument("job_id", f"{len(job_id)} characters", f"at most {MAX_JOB_ID_CHARS}")
        self.submit(node_id, job, job_id=job_id)
        try:  # the queue ignores a second submit of the id; the marker's create-only write says it was one
            self.store.put_doc("profiling-job", f"{node_id}:{job_id}", {"schema": 1}, expected_revision=0)
        except RevisionConflict:
            return job_id, True
        return job_id, False

    def pending_count(self, node_id: str) -> int:
        """Jobs delivered but not acknowledged."""
        return self.store.pending_jobs(node_id)

    def backlog(self, node_id: str) -> int:
        """Jobs not yet delivered to any consumer."""
        return self.store.job_backlog(node_id)

    def dead_jobs(self, node_id: str) -> list[DeadJob]:
        """Jobs given up after ``max_deliveries``."""
        return self.store.dead_jobs(node_id)

    # -- agent side ---------------------------------------------------------------------

    def claim(self, node_id: str, consumer: str, *, block_ms: int = 1000, count: int = 1) -> list[Job]:
        """Up to ``count`` jobs for ``consumer``: stale ones of dead consumers first (looked for at most every
        :data:`RECLAIM_EVERY_SHARE` of the idle timeout), then new ones.

        Blocks up to ``block_ms`` (0: do not block) when there is nothing; [] then. Keep
        ``block_ms`` below the client's socket timeout.
        """
        if not consumer:
            raise InvalidArgument("consumer", "empty consumer name", "a name unique per agent process")
        if block_ms < 0 or count < 1:
            raise InvalidArgument("block_ms" if block_ms < 0 else "count", "out of range", "block_ms >= 0, count >= 1")
        now, key = self.clock(), (node_id, consumer)
        if now - self._reclaimed.get(key, -float("inf")) >= RECLAIM_EVERY_SHARE * self.idle_timeout_ms / 1000:
            self._reclaimed[key] = now
            jobs = self._reclaim(node_id, consumer, count)
            if jobs:
                return jobs
        return self.store.read_jobs(node_id, consumer, count=count, block_ms=block_ms)

    def _reclaim(self, node_id: str, consumer: str, count: int) -> list[Job]:
        jobs = []
        for job in self.store.reclaim_jobs(node_id, consumer, idle_ms=self.idle_timeout_ms, count=count):
            if job.deliveries > self.max_deliveries:
                # A job that killed (or hung) its agent max_deliveries times would loop forever: park it.
                self.store.bury_job(job)
                log.warning("job given up", extra={"node_id": node_id, "job_id": job.job_id,
                                                   "deliveries": job.deliveries})
                continue
            log.info("job re-delivered", extra={"node_id": node_id, "job_id": job.job_id,
                                                "deliveries": job.deliveries})
            jobs.append(job)
        return jobs

    def refuse(self, job: Job, reason: str) -> bool:
        """Acknowledge a job that can never run (a bad field, a workload the node cannot load) and
        keep why for :data:`REFUSAL_TTL_S`, so the submitter can fail with the node's reason
        instead of waiting for a measurement that will not come."""
        self.store.set_with_ttl(("job-refused", job.node_id, job.job_id), str(reason)[:MAX_REFUSAL_CHARS],
                                REFUSAL_TTL_S)
        return self.ack(job)

    def refusal(self, node_id: str, job_id: str) -> str | None:
        """Why the node refused job ``job_id`` (:meth:`refuse`), or None."""
        value = self.store.get(("job-refused", node_id, job_id))
        return None if value is None else str(value)

    def ack(self, job: Job) -> bool:
        """Mark the job done; False when it was already acknowledged (or claimed away and acked)."""
        done = self.store.ack_job(job.node_id, job.entry_id)
        COMPLETIONS.notify(job.node_id)
        return done

    def complete(self, job: Job, measurements: Iterable[MeasurementRecord | Mapping[str, Any] | Any]) -> int:
        """Write the job's measurements (idempotent by id), then acknowledge; returns how many were new.

        Written before the ack on purpose: a crash in between re-delivers the job, whose re-run
        writes the same ids again, which the store ignores.
        """
        records = [measurement_record(m, job.node_id) for m in measurements]
        new = self.store.put_measurements(records) if records else 0
        self.ack(job)
        return new


def measurement_record(m: MeasurementRecord | Mapping[str, Any] | Any, node_id: str) -> MeasurementRecord:
    """The record of a profiling ``Measurement`` (or its ``to_row()`` dict) made on ``node_id``."""
    if isinstance(m, MeasurementRecord):
        return m
    row = m.to_row() if hasattr(m, "to_row") else m
    return MeasurementRecord.from_row(row, node_id)
