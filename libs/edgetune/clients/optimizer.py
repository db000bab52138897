"""The Optimizer service over gRPC, typed: records in, records out (:mod:`edgetune.optimization.records`).

A failed call raises :class:`~edgetune.clients.calls.CallFailed` with the server's status and
message (INVALID_ARGUMENT naming the field, NOT_FOUND for an ended or expired session); nothing feasible is an answer, a
:class:`~edgetune.optimization.records.Verdict` with ``feasible`` false. ``timeout_s`` bounds each call.
"""

from __future__ import annotations

from collections.abc import Sequence

import grpc

from edgetune.base.records import Predictions
from edgetune.clients.calls import translated
from edgetune.optimization.records import (
    Asked,
    Best,
    ConcurrentQuery,
    JointQuery,
    NextProfilesQuery,
    SearchRequest,
    SelectQuery,
    Started,
    Subset,
    TellResult,
    Told,
    Verdict,
)
from edgetune.proto.serde import optimizer as serde
from edgetune.proto.v1 import optimizer_pb2_grpc

DEFAULT_TIMEOUT_S = 300.0


class OptimizerClient:
    """``edgetune.v1.Optimizer`` on ``channel``."""

    def __init__(self, channel: grpc.Channel, timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
        self.stub = optimizer_pb2_grpc.OptimizerStub(channel)
        self.timeout_s = timeout_s

    # -- one-shot questions ----------------------------------------------------------------------
    def pareto_front(self, pool: Predictions, risk: float | None = None) -> Subset:
        """The pool's (time, power) front by ascending power, on the upper bounds at ``risk``."""
        with translated():
            reply = self.stub.ParetoFront(serde.pareto_to_proto(pool, risk), timeout=self.timeout_s)
        return serde.front_from_proto(reply)

    def select(self, query: SelectQuery) -> list[Verdict]:
        """One verdict per budget (one, or each of the sweep's)."""
        with translated():
            reply = self.stub.Select(serde.select_to_proto(query), timeout=self.timeout_s)
        return [serde.verdict_from_proto(d) for d in reply.decisions]

    def select_joint(self, query: JointQuery) -> Verdict:
        with translated():
            reply = self.stub.SelectJoint(serde.joint_to_proto(query), timeout=self.timeout_s)
        return serde.verdict_from_proto(reply.decision)

    def select_concurrent(self, query: ConcurrentQuery) -> Verdict:
        with translated():
            reply = self.stub.SelectConcurrent(serde.concurrent_to_proto(query), timeout=self.timeout_s)
        return serde.verdict_from_proto(reply.decision)

    def next_profiles(self, query: NextProfilesQuery) -> Subset:
        with translated():
            reply = self.stub.NextProfiles(serde.next_profiles_to_proto(query), timeout=self.timeout_s)
        return serde.picks_from_proto(reply)

    # -- search sessions -------------------------------------------------------------------------
    def start_search(self, request: SearchRequest) -> Started:
        with translated():
            reply = self.stub.StartSearch(serde.search_to_proto(request), timeout=self.timeout_s)
        return serde.started_from_proto(reply)

    def ask(self, session_id: str, max_points: int = 0) -> Asked:
        """The points the session waits for (at most ``max_points``; 0: all)."""
        with translated():
            reply = self.stub.Ask(serde.ask_to_proto(session_id, max_points), timeout=self.timeout_s)
        return serde.asked_from_proto(reply)

    def tell(self, session_id: str, told: Sequence[Told]) -> TellResult:
        with translated():
            reply = self.stub.Tell(serde.tell_to_proto(session_id, told), timeout=self.timeout_s)
        return serde.tell_result_from_proto(reply)

    def best(self, session_id: str) -> Best:
        with translated():
            reply = self.stub.Best(serde.best_request_to_proto(session_id), timeout=self.timeout_s)
        return serde.best_from_proto(reply)

    def end_search(self, session_id: str) -> Verdict:
        """The session's best; the session is removed."""
        with translated():
            reply = self.stub.EndSearch(serde.end_search_to_proto(session_id), timeout=self.timeout_s)
        return serde.verdict_from_proto(reply.decision)
