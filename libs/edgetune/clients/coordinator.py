"""The Coordinator over gRPC, records in and records out (:mod:`edgetune.proto.serde.coordinator`,
:mod:`edgetune.proto.serde.tuning` map them).

A failed call raises :class:`~edgetune.clients.calls.CallFailed` with the server's status code: the
caller decides what a code means (the CLI exits 2 on INVALID_ARGUMENT, the demo retries a stream
that broke). A watch is a :class:`~edgetune.clients.calls.Stream`: open from the call on, its
records one by one, cancelled by ``close()`` (or a ``with``). A node's own calls (register,
heartbeat) are :class:`edgetune.clients.nodes.NodesClient`'s.
"""

from __future__ import annotations

import grpc

from edgetune.clients.calls import Stream, translated
from edgetune.identity import ClientSecurity, open_channel
from edgetune.planning.rounds import RoundOutcome, RoundRequest
from edgetune.proto.serde import coordinator as serde
from edgetune.proto.serde.tuning import job_from_proto, spec_to_proto
from edgetune.proto.v1 import coordinator_pb2, coordinator_pb2_grpc, tuning_pb2
from edgetune.store import NodeConfig, NodeRecord
from edgetune.tuning.jobs import TuningJobSpec, TuningJobView

#: Unary calls wait this long unless the client says otherwise.
CALL_TIMEOUT_S = 30.0


class CoordinatorClient:
    """The Coordinator's RPCs on ``channel`` (closed by :meth:`close` when this client opened it)."""

    def __init__(self, channel: grpc.Channel, *, timeout_s: float = CALL_TIMEOUT_S, owns_channel: bool = False) -> None:
        self.channel = channel
        self.timeout_s = timeout_s
        self._stub = coordinator_pb2_grpc.CoordinatorStub(channel)
        self._owns_channel = owns_channel

    @classmethod
    def connect(cls, address: str, security: ClientSecurity | None = None, *,
                timeout_s: float = CALL_TIMEOUT_S) -> CoordinatorClient:
        """A client on its own channel to ``address`` (TLS and a bearer token when ``security`` says so)."""
        return cls(open_channel(address, security), timeout_s=timeout_s, owns_channel=True)

    def close(self) -> None:
        if self._owns_channel:
            self.channel.close()

    def __enter__(self) -> CoordinatorClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- nodes ---------------------------------------------------------------------------------
    def nodes(self) -> list[NodeRecord]:
        """Every registered node with its liveness (ListNodes)."""
        with translated():
            reply = self._stub.ListNodes(coordinator_pb2.ListNodesRequest(), timeout=self.timeout_s)
        return [serde.node_from_proto(n) for n in reply.nodes]

    def update_node_budget(self, node_id: str, power_budget_w: float, *,
                           timeout_s: float | None = None) -> float | None:
        """Set a node's power budget (the leader re-plans what depends on it); the budget as registered."""
        with translated():
            reply = self._stub.UpdateBudget(serde.node_budget_request(node_id, power_budget_w),
                                            timeout=timeout_s or self.timeout_s)
        return serde.node_budget_from_response(reply)

    # -- configs -------------------------------------------------------------------------------
    def config(self, node_id: str) -> NodeConfig:
        """The node's current config (NOT_FOUND before one is published)."""
        with translated():
            reply = self._stub.GetNodeConfig(coordinator_pb2.GetNodeConfigRequest(node_id=node_id),
                                             timeout=self.timeout_s)
        return serde.config_from_proto(reply)

    def watch_config(self, node_id: str, after_revision: int = 0, *, after_epoch: int = 0,
                     timeout_s: float | None = None) -> Stream[NodeConfig]:
        """The node's config when newer than ``after_revision`` (of ``after_epoch``), then each newer one."""
        call = self._stub.WatchConfig(coordinator_pb2.WatchConfigRequest(
            node_id=node_id, after_revision=after_revision, after_epoch=after_epoch), timeout=timeout_s)
        return Stream(call, serde.config_from_proto)

    # -- rounds --------------------------------------------------------------------------------
    def plan_round(self, request: RoundRequest, *, timeout_s: float | None = None) -> RoundOutcome:
        """Plan ``request`` (with ``apply``: publish its configs); the plan as the coordinator answered."""
        with translated():
            reply = self._stub.PlanRound(serde.round_request_to_proto(request), timeout=timeout_s or self.timeout_s)
        return serde.round_outcome_from_proto(reply, request.objective)

    # -- tuning jobs ---------------------------------------------------------------------------
    def submit_job(self, spec: TuningJobSpec) -> TuningJobView:
        with translated():
            reply = self._stub.SubmitTuningJob(tuning_pb2.SubmitTuningJobRequest(spec=spec_to_proto(spec)),
                                               timeout=self.timeout_s)
        return job_from_proto(reply)

    def job(self, name: str) -> TuningJobView:
        with translated():
            reply = self._stub.GetTuningJob(tuning_pb2.GetTuningJobRequest(name=name), timeout=self.timeout_s)
        return job_from_proto(reply)

    def jobs(self) -> list[TuningJobView]:
        with translated():
            reply = self._stub.ListTuningJobs(tuning_pb2.ListTuningJobsRequest(), timeout=self.timeout_s)
        return [job_from_proto(j) for j in reply.jobs]

    def cancel_job(self, name: str) -> TuningJobView:
        with translated():
            reply = self._stub.CancelTuningJob(tuning_pb2.CancelTuningJobRequest(name=name), timeout=self.timeout_s)
        return job_from_proto(reply)

    def watch_job(self, name: str, after_revision: int = 0, *,
                  timeout_s: float | None = None) -> Stream[TuningJobView]:
        """Every change of the job after ``after_revision`` until the caller stops (or ``timeout_s``
        passes: DEADLINE_EXCEEDED)."""
        call = self._stub.WatchTuningJob(tuning_pb2.WatchTuningJobRequest(name=name, after_revision=after_revision),
                                         timeout=timeout_s)
        return Stream(call, job_from_proto)
