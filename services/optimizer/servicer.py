"""OptimizerServicer: the ``edgetune.v1.Optimizer`` RPCs. Wiring only.

Each RPC turns its request into library calls (``edgetune.optimization``: Pareto fronts,
selectors, Ahmed et al.'s joint selection, Fulcrum's problems and search strategies) and the
results into messages; bad input raises InvalidArgument naming the request field and
:func:`~edgetune.services.common.errors.map_errors` turns it into INVALID_ARGUMENT. Nothing
feasible is an answer (``Decision.feasible = false`` with the reason and the closest option),
never an error. Search sessions live in the store (:mod:`.sessions`), so every replica, and a
restarted one, serves them.
"""

from __future__ import annotations

import logging

from edgetune import validation
from edgetune.base.risk import z_score
from edgetune.errors import InvalidArgument
from edgetune.optimization.frontier import PER_ROUND, next_frontier_modes
from edgetune.optimization.joint import joint_select
from edgetune.optimization.pareto import pareto_front
from edgetune.optimization.select import make_selector
from edgetune.optimization.sessions import Session, SessionStore, Told, build_space
from edgetune.optimization.strategies import make_strategy
from edgetune.proto.serde.common import OBJECTIVE, optional_value
from edgetune.proto.v1 import common_pb2, optimizer_pb2, optimizer_pb2_grpc
from edgetune.services.common import map_errors
from edgetune.services.optimizer import convert, metrics
from edgetune.validation import budget_range

log = logging.getLogger(__name__)

#: The library's selector names of the proto objectives.
_SELECTOR = {"min_time": "time", "min_power": "power", "min_energy": "energy"}


class OptimizerServicer(optimizer_pb2_grpc.OptimizerServicer):
    def __init__(self, sessions: SessionStore) -> None:
        self.sessions = sessions

    # -- stateless -----------------------------------------------------------------------------------
    @map_errors
    def ParetoFront(self, request, context):
        rows = convert.rows_from_proto(request.candidates)
        risk = convert.risk_from_proto(request.risk)
        c = rows.cands
        # Std-aware front: compare the upper bounds at risk; rows without a std count with their mean.
        z = 0.0 if risk is None else z_score(risk)
        time_ms = c.time_ms + z * c.time_std_ms if (z and c.time_std_ms is not None) else c.time_ms
        power_w = c.power_bound_w(risk)
        order = pareto_front(time_ms, power_w)[::-1]  # by ascending power (descending time)
        return optimizer_pb2.ParetoFrontResponse(front=rows.table(order), indices=[int(i) for i in order])

    @map_errors
    def Select(self, request, context):
        rows = convert.rows_from_proto(request.candidates)
        objective = _SELECTOR[OBJECTIVE.from_proto(request.objective, "objective")]
        risk = convert.risk_from_proto(request.risk)
        selector = make_selector(objective, risk)
        power = convert.optional_budget(request.budgets, "power_budget_w")
        time_ms = convert.optional_budget(request.budgets, "time_budget_ms")
        if request.HasField("sweep"):
            sw = request.sweep
            budgets = budget_range(sw.start, sw.stop, sw.step, "sweep")
            if objective == "power":  # MIN_POWER sweeps the time budget
                picks = [selector.select(rows.cands, power, b) for b in budgets]
            else:
                picks = selector.sweep(rows.cands, budgets, time_ms)
        else:
            picks = [selector.select(rows.cands, power, time_ms)]
        decisions = [convert.selection_to_proto(rows, s, risk) for s in picks]
        for d in decisions:
            metrics.decided("Select", d.feasible)
        return optimizer_pb2.SelectResponse(decisions=decisions)

    @map_errors
    def SelectJoint(self, request, context):
        lut = convert.lut_from_proto(request.lut)
        efficiency = convert.efficiency_from_proto(request.efficiency)
        cap = optional_value(request, "power_cap_w")
        if cap is not None:
            cap = validation.power_budget_w(cap, "power_cap_w")  # absent: no cap
        decision = convert.joint_to_proto(request.lut, joint_select(lut, efficiency, cap), cap)
        metrics.decided("SelectJoint", decision.feasible)
        return optimizer_pb2.SelectJointResponse(decision=decision)

    @map_errors
    def SelectConcurrent(self, request, context):
        problem, obs = convert.concurrent_from_proto(request)
        decision = convert.problem_decision_to_proto(problem.solve(obs), problem)
        metrics.decided("SelectConcurrent", decision.feasible)
        return optimizer_pb2.SelectConcurrentResponse(decision=decision)

    @map_errors
    def NextProfiles(self, request, context):
        rows = convert.rows_from_proto(request.candidates)
        if len(set(rows.batch_size.tolist())) > 1:
            raise InvalidArgument("candidates.table.batch_size", "holds several batch sizes",
                                  "the predictions of one batch size")
        where = {tuple(m): i for i, m in enumerate(rows.mode_array.tolist())}
        done = [where[k] for k in {(m.cores, m.cpu_mhz, m.gpu_mhz, m.emc_mhz) for m in request.profiled}
                if k in where]
        low, high = request.power_low_w, request.power_high_w
        bounds = None if low == 0 and high == 0 else (low, high)
        try:
            picks = next_frontier_modes(rows.cands.time_ms, rows.cands.power_w, done, request.count or PER_ROUND,
                                        power_range_w=bounds)
        except InvalidArgument as exc:  # name the request's fields
            fields = {"k": "count", "power_range_w": "power_low_w, power_high_w"}
            raise exc.renamed(fields.get(exc.field, exc.field)) from None
        return optimizer_pb2.NextProfilesResponse(picks=rows.table(picks), indices=[int(i) for i in picks])

    # -- search sessions --------------------------------------------------------------------------------
    @map_errors
    def StartSearch(self, request, context):
        spec = convert.search_from_proto(request)
        space = build_space(spec.space)
        strategy = make_strategy(spec.strategy, spec.problem, space, budget=spec.budget, seed=spec.seed)
        session = self.sessions.create(strategy, spec.space)
        metrics.SESSIONS_STARTED.labels(spec.strategy, spec.problem.kind).inc()
        log.info("search started", extra={"session_id": session.session_id, "strategy": spec.strategy,
                                          "problem": spec.problem.describe(), "budget": strategy.budget})
        return optimizer_pb2.StartSearchResponse(session_id=session.session_id, max_profiles=strategy.budget)

    @map_errors
    def Ask(self, request, context):
        if request.max_points < 0:
            raise InvalidArgument("max_points", f"{request.max_points} is negative", "0 (all ready) or more")

        def ask(s: Session) -> optimizer_pb2.AskResponse:
            points = [convert.search_point(mode, role, b, s.strategy.problem.workload_for(role))
                      for mode, role, b in s.asked_points()]
            if request.max_points:
                points = points[:request.max_points]
            return optimizer_pb2.AskResponse(points=points, done=s.strategy.done)

        return self.sessions.read(request.session_id, ask)

    @map_errors
    def Tell(self, request, context):
        if not request.measurements:
            raise InvalidArgument("measurements", "is empty", "at least one measured point")
        told = [convert.told_from_proto(i, m) for i, m in enumerate(request.measurements)]
        return self.sessions.change(request.session_id, lambda s: _tell(s, told))

    @map_errors
    def Best(self, request, context):
        def best(s: Session) -> optimizer_pb2.BestResponse:
            return optimizer_pb2.BestResponse(decision=_decision(s), done=s.strategy.done)

        return self.sessions.read(request.session_id, best)

    @map_errors
    def EndSearch(self, request, context):
        decision = self.sessions.end(request.session_id, _decision)
        metrics.decided("EndSearch", decision.feasible)
        return optimizer_pb2.EndSearchResponse(decision=decision)


# --- session steps (run under the session's lock, on the revision read) ---------------------------------
def _tell(s: Session, told: list[Told]) -> tuple[optimizer_pb2.TellResponse, bool]:
    added = s.record(told)
    metrics.POINTS_TOLD.inc(added)
    return optimizer_pb2.TellResponse(profiled=s.profiled, done=s.strategy.done), added > 0


def _decision(s: Session) -> common_pb2.Decision:
    return convert.problem_decision_to_proto(s.strategy.best(), s.strategy.problem, s.profiled)
