"""The NodeJobs servicer: a node's profiling jobs through the coordinator, for its own agent.

An agent that holds no store credential (the chart's agents: ``--redis none``) claims its node's
jobs here, and reports their measurements here; the coordinator reads and writes the store for it
(:class:`~edgetune.control.jobs.JobQueue`, the same queue as an agent on the store uses). The
policy (``services/common/auth.py``) lets an agent call these for its own node only, so the node of
every job and measurement is the caller's: a measurement's own node field is overwritten.

ClaimJobs waits for a job up to ``wait_ms`` (at most :data:`MAX_WAIT_MS`) by polling the queue
without blocking (every :data:`POLL_S`), so a waiting claim holds a handler thread but no store
connection; it ends early when the caller goes away or the server stops.
"""

from __future__ import annotations

import threading

from edgetune import validation
from edgetune.control.jobs import DEFAULT_IDLE_TIMEOUT_MS, JobQueue
from edgetune.errors import InvalidArgument
from edgetune.proto.serde.nodejobs import acknowledged, job_to_proto, measurements_from_proto
from edgetune.proto.v1 import nodejobs_pb2, nodejobs_pb2_grpc
from edgetune.services.common import map_errors
from edgetune.store import Store

MAX_WAIT_MS = 10_000
POLL_S = 0.25
MAX_CONSUMER_CHARS = 200
MAX_REASON_CHARS = 2_000


def _node(node_id: str) -> str:
    if not node_id:
        raise InvalidArgument("node_id", "is empty", "the node's id (an agent of one node may leave it empty)")
    return validation.node_id(node_id, "node_id")


class NodeJobsServicer(nodejobs_pb2_grpc.NodeJobsServicer):
    def __init__(self, store: Store, stopping: threading.Event | None = None, *, poll_s: float = POLL_S) -> None:
        self.store = store
        self.stopping = stopping or threading.Event()
        self.poll_s = poll_s
        self._queues: dict[int, JobQueue] = {}

    def _queue(self, idle_timeout_ms: int) -> JobQueue:
        idle = int(idle_timeout_ms) or DEFAULT_IDLE_TIMEOUT_MS
        validation.count(idle, "idle_timeout_ms", minimum=1_000, maximum=3_600_000)
        if idle not in self._queues:
            self._queues[idle] = JobQueue(self.store, idle_timeout_ms=idle)
        return self._queues[idle]

    @map_errors
    def ClaimJobs(self, request, context):
        node = _node(request.node_id)
        consumer = validation.text(request.consumer, "consumer")
        if not consumer or len(consumer) > MAX_CONSUMER_CHARS:
            raise InvalidArgument("consumer", f"{len(consumer)} characters", f"1 to {MAX_CONSUMER_CHARS}")
        wait_s = validation.count(int(request.wait_ms), "wait_ms", minimum=0, maximum=MAX_WAIT_MS) / 1000.0
        queue = self._queue(request.idle_timeout_ms)
        waited = 0.0
        while True:
            jobs = queue.claim(node, consumer, block_ms=0)
            if jobs or waited >= wait_s or not context.is_active():
                return nodejobs_pb2.ClaimJobsResponse(jobs=[job_to_proto(j) for j in jobs])
            step = min(self.poll_s, wait_s - waited)
            if self.stopping.wait(step):
                return nodejobs_pb2.ClaimJobsResponse()
            waited += step

    @map_errors
    def CompleteJob(self, request, context):
        node = _node(request.node_id)
        job = acknowledged(node, request.job_id, request.entry_id)
        records = measurements_from_proto(request.measurements, node)
        written = self._queue(0).complete(job, records)
        return nodejobs_pb2.CompleteJobResponse(written=written)

    @map_errors
    def RefuseJob(self, request, context):
        node = _node(request.node_id)
        job = acknowledged(node, request.job_id, request.entry_id)
        self._queue(0).refuse(job, validation.text(request.reason, "reason")[:MAX_REASON_CHARS])
        return nodejobs_pb2.RefuseJobResponse()
