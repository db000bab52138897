"""OptimizerServicer: the ``edgetune.v1.Optimizer`` RPCs. Wiring only.

Each RPC reads its request into a record (:mod:`edgetune.proto.serde.optimizer`), has the library
answer it — :mod:`edgetune.optimization.answers` (Pareto fronts, selections, Ahmed et al.'s joint
selection, Fulcrum's concurrent problem, the next modes to profile) and the search sessions of
:class:`~edgetune.optimization.sessions.SessionStore` — and writes the answer back; bad input
raises InvalidArgument naming the request field and
:func:`~edgetune.services.common.errors.map_errors` turns it into INVALID_ARGUMENT. Nothing
feasible is an answer (``Decision.feasible = false`` with the reason), never an error. Sessions
live in the store, so every replica, and a restarted one, serves them. A Select may name its candidates
by model (:class:`ModelPools`: read from the estimator given with ``--estimator``, kept per model version).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import replace

from edgetune.base.records import Predictions
from edgetune.errors import FailedPrecondition
from edgetune.estimation.records import PredictSpec
from edgetune.optimization import answers
from edgetune.optimization.sessions import SessionStore
from edgetune.proto.serde import optimizer as serde
from edgetune.proto.v1 import optimizer_pb2, optimizer_pb2_grpc
from edgetune.services.common import map_errors
from edgetune.services.optimizer.metrics import decided


class ModelPools:
    """A Select's candidates named by model (``candidates.model``): the grid predictions read from the
    estimator (``fetch``: its Predict), kept per model version (``id@version``: a version never changes),
    so a re-select of the same model sends no table over the wire. Without an estimator: FAILED_PRECONDITION."""

    def __init__(self, fetch: Callable[[PredictSpec], Predictions] | None, size: int = 32) -> None:
        self.fetch, self.size = fetch, size
        self._kept: OrderedDict[PredictSpec, Predictions] = OrderedDict()
        self._lock = threading.Lock()

    def __call__(self, spec: PredictSpec) -> Predictions:
        if self.fetch is None:
            raise FailedPrecondition(f"candidates.model: {serde.ESTIMATOR_MISSING}")
        with self._lock:
            if spec in self._kept:
                self._kept.move_to_end(spec)
                return self._kept[spec]
        rows = self.fetch(spec)
        if "@" in spec.model_id:  # an unversioned id names the latest version: read again each time
            with self._lock:
                self._kept[spec] = rows
                while len(self._kept) > self.size:
                    self._kept.popitem(last=False)
        return rows


class OptimizerServicer(optimizer_pb2_grpc.OptimizerServicer):
    def __init__(self, sessions: SessionStore, pools: ModelPools | None = None) -> None:
        self.sessions = sessions
        self.pools = pools or ModelPools(None)

    # -- stateless -----------------------------------------------------------------------------------
    @map_errors
    def ParetoFront(self, request, context):
        return serde.front_to_proto(answers.front_at_risk(*serde.pareto_from_proto(request)))

    @map_errors
    def Select(self, request, context):
        query = serde.select_from_proto(request)
        if isinstance(query.pool, PredictSpec):
            query = replace(query, pool=self.pools(query.pool))
        verdicts = answers.select(query)
        for v in verdicts:
            decided("Select", v.feasible)
        return optimizer_pb2.SelectResponse(decisions=[serde.verdict_to_proto(v) for v in verdicts])

    @map_errors
    def SelectJoint(self, request, context):
        verdict = answers.select_joint(serde.joint_from_proto(request))
        decided("SelectJoint", verdict.feasible)
        return optimizer_pb2.SelectJointResponse(decision=serde.verdict_to_proto(verdict))

    @map_errors
    def SelectConcurrent(self, request, context):
        verdict = answers.select_concurrent(serde.concurrent_from_proto(request))
        decided("SelectConcurrent", verdict.feasible)
        return optimizer_pb2.SelectConcurrentResponse(decision=serde.verdict_to_proto(verdict))

    @map_errors
    def NextProfiles(self, request, context):
        return serde.picks_to_proto(answers.next_profiles(serde.next_profiles_from_proto(request)))

    # -- search sessions --------------------------------------------------------------------------------
    @map_errors
    def StartSearch(self, request, context):
        return serde.started_to_proto(self.sessions.start(serde.search_from_proto(request)))

    @map_errors
    def Ask(self, request, context):
        return serde.asked_to_proto(self.sessions.ask(*serde.ask_from_proto(request)))

    @map_errors
    def Tell(self, request, context):
        return serde.tell_result_to_proto(self.sessions.tell(*serde.tell_from_proto(request)))

    @map_errors
    def Best(self, request, context):
        return serde.best_to_proto(self.sessions.best(request.session_id))

    @map_errors
    def EndSearch(self, request, context):
        verdict = self.sessions.end_search(request.session_id)
        decided("EndSearch", verdict.feasible)
        return optimizer_pb2.EndSearchResponse(decision=serde.verdict_to_proto(verdict))
