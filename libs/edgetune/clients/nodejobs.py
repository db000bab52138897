"""A node's profiling jobs through the coordinator (``NodeJobs``): the queue an agent without a
store credential uses, with :class:`~edgetune.control.jobs.JobQueue`'s agent-side methods
(``claim``, ``complete``, ``refuse``), so the agent's job loop runs either way. A failed call
raises :class:`~edgetune.clients.calls.CallFailed`, as every client's does."""

from __future__ import annotations

from collections.abc import Iterable

import grpc

from edgetune.clients.calls import translated
from edgetune.profiling import Measurement
from edgetune.proto.serde.common import measurement_to_proto
from edgetune.proto.serde.nodejobs import job_from_proto
from edgetune.proto.v1 import nodejobs_pb2, nodejobs_pb2_grpc
from edgetune.store import Job

#: A claim's RPC deadline beyond the time it may wait server-side.
RPC_SLACK_S = 10.0
#: How long a claim waits on the coordinator for a job (the server caps it at 10 s).
DEFAULT_WAIT_MS = 2_000


class RemoteJobQueue:
    """Claims, completes and refuses the node's jobs over ``channel`` (module doc)."""

    def __init__(self, channel: grpc.Channel, *, idle_timeout_ms: int, wait_ms: int = DEFAULT_WAIT_MS) -> None:
        """``idle_timeout_ms``: after how long a job another consumer holds unfinished is taken over
        (the agent's ``--job-idle-timeout-ms``)."""
        self.stub = nodejobs_pb2_grpc.NodeJobsStub(channel)
        self.idle_timeout_ms = int(idle_timeout_ms)
        self.wait_ms = int(wait_ms)

    def claim(self, node_id: str, consumer: str, *, block_ms: int = 1000, count: int = 1) -> list[Job]:
        """Up to the coordinator's count of jobs (``block_ms``: how long it may wait; this queue's
        ``wait_ms`` when larger, so an idle agent asks a few times a minute, not ten times a second)."""
        wait_ms = max(int(block_ms), self.wait_ms)
        with translated():
            reply = self.stub.ClaimJobs(nodejobs_pb2.ClaimJobsRequest(
                node_id=node_id, consumer=consumer, wait_ms=wait_ms, idle_timeout_ms=self.idle_timeout_ms),
                timeout=wait_ms / 1000.0 + RPC_SLACK_S)
        return [job_from_proto(j, node_id, consumer) for j in reply.jobs][:max(1, count)]

    def complete(self, job: Job, measurements: Iterable[Measurement]) -> int:
        """Report the job's measurements and acknowledge it; returns how many were new."""
        with translated():
            reply = self.stub.CompleteJob(nodejobs_pb2.CompleteJobRequest(
                node_id=job.node_id, job_id=job.job_id, entry_id=job.entry_id,
                measurements=[measurement_to_proto(m, node_id=job.node_id) for m in measurements]), timeout=60.0)
        return int(reply.written)

    def refuse(self, job: Job, reason: str) -> bool:
        with translated():
            self.stub.RefuseJob(nodejobs_pb2.RefuseJobRequest(
                node_id=job.node_id, job_id=job.job_id, entry_id=job.entry_id, reason=str(reason)[:2000]), timeout=30.0)
        return True
