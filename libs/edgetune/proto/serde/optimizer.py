"""``edgetune.v1.Optimizer`` messages <-> the optimizer's records (:mod:`edgetune.optimization.records`).

Both directions of every message: the servicer reads requests and writes responses, the typed
client (:mod:`edgetune.clients.optimizer`) writes requests and reads responses. Readers check what
belongs to the message and raise :class:`~edgetune.errors.InvalidArgument` naming the request
field: candidate tables column by column (``candidates.table.power_w[3]``, through
:mod:`.tables`), budgets by their :mod:`edgetune.validation` rule (``budgets.arrival_rps``), enum
values, modes, ``risk``, the batch-efficiency rows (``efficiency[1].r``), a Tell's measurements.
The library checks the rest (a LUT's rows, a search's space) and names the same fields.

``risk`` is the probability that the chosen row's power exceeds the budget under the predictive
distribution, as in the library and on the CLI; 0 on the wire means "means only" (None).
Objectives are ``OBJECTIVE_MIN_TIME`` … on the wire and the selectors' ``time`` … in the records.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from edgetune import validation
from edgetune.base.mode import PowerMode
from edgetune.base.objective import Objective
from edgetune.base.records import BatchEfficiency, Predictions
from edgetune.errors import FailedPrecondition, InvalidArgument
from edgetune.estimation.records import PredictSpec
from edgetune.optimization.records import (
    Asked,
    Best,
    BudgetSweep,
    ConcurrentQuery,
    JointQuery,
    LutRow,
    NextProfilesQuery,
    SearchPoint,
    SearchRequest,
    SelectQuery,
    Started,
    Subset,
    TellResult,
    Told,
    Verdict,
)
from edgetune.proto.serde.common import (
    GRID,
    OBJECTIVE,
    PROBLEM,
    STRATEGY,
    mode_from_proto,
    mode_to_proto,
    optional_value,
    role_from_proto,
    role_to_proto,
)
from edgetune.proto.serde.tables import table_from_proto, table_to_proto
from edgetune.proto.v1 import common_pb2, optimizer_pb2

ESTIMATOR_MISSING = ("fetching predictions from a model needs the estimator service, which this optimizer "
                     "is not connected to; send the candidates inline (candidates.table)")
GUIDE_MISSING = ("guide_model_id: an estimator model as the guide needs the estimator service, which this optimizer "
                 "is not connected to; leave it empty (the nn strategy then fits its own guide on the profiled points)")
#: The wire's objectives (``OBJECTIVE``'s names) and the library's.
OBJECTIVES = {"min_time": Objective.MIN_TIME, "min_power": Objective.MIN_POWER, "min_energy": Objective.MIN_ENERGY}
_WIRE_OBJECTIVES = {v: k for k, v in OBJECTIVES.items()}


# --- scalars ------------------------------------------------------------------------------------------
def risk_from_proto(risk: float, field: str = "risk") -> float | None:
    """The request's risk as the library takes it: a probability, or None (0 on the wire: means only)."""
    if risk == 0:
        return None
    return validation.risk(risk, field)


def risk_to_proto(risk: float | None) -> float:
    return 0.0 if risk is None else float(risk)


def objective_from_proto(value: int, field: str = "objective") -> Objective:
    """The objective (unset: least time)."""
    return OBJECTIVES[OBJECTIVE.from_proto(value, field)]


def objective_to_proto(objective: Objective | str) -> optimizer_pb2.Objective.ValueType:
    return optimizer_pb2.Objective.ValueType(OBJECTIVE.to_proto(_WIRE_OBJECTIVES[Objective.parse(objective)]))


#: Each budget field's rule (edgetune.validation) and what it allows.
_BUDGET_RULES: dict[str, tuple[Callable[[object, str], float], str]] = {
    "power_budget_w": (validation.power_budget_w, validation.POWER_BUDGET_ALLOWED),
    "time_budget_ms": (validation.time_budget_ms, validation.TIME_BUDGET_ALLOWED),
    "latency_budget_ms": (validation.latency_budget_ms, validation.TIME_BUDGET_ALLOWED),
    "arrival_rps": (validation.arrival_rps, validation.ARRIVAL_RATE_ALLOWED),
}


def optional_budget(budgets: common_pb2.Budgets, name: str) -> float | None:
    """``budgets.<name>`` by its :mod:`edgetune.validation` rule (> 0); absent is None."""
    rule, _ = _BUDGET_RULES[name]
    value = optional_value(budgets, name)
    return None if value is None else rule(value, f"budgets.{name}")


def required_budget(budgets: common_pb2.Budgets, name: str) -> float:
    """:func:`optional_budget` that must be present."""
    value = optional_budget(budgets, name)
    if value is None:
        raise InvalidArgument(f"budgets.{name}", "is required", _BUDGET_RULES[name][1])
    return value


def budgets_to_proto(**values: float | None) -> common_pb2.Budgets:
    """Budgets by field name; None values are left unset."""
    return common_pb2.Budgets(**{k: float(v) for k, v in values.items() if v is not None})


def _raw_mode(msg: common_pb2.PowerMode) -> PowerMode:
    """A mode as sent, unchecked (a mode that only has to match another, or an answer's echo)."""
    return PowerMode(int(msg.cores), msg.cpu_mhz, msg.gpu_mhz, msg.emc_mhz)


# --- candidates and picked rows -----------------------------------------------------------------------
def pool_from_proto(candidates: optimizer_pb2.Candidates, field: str = "candidates") -> Predictions:
    """The inline table of ``candidates``, checked column-wise (``candidates.table.time_ms[3]``); a model
    reference is FAILED_PRECONDITION (only Select reads one: :func:`select_pool_from_proto`)."""
    pool = select_pool_from_proto(candidates, field)
    if isinstance(pool, PredictSpec):
        raise FailedPrecondition(f"{field}.model: {ESTIMATOR_MISSING}")
    return pool


def select_pool_from_proto(candidates: optimizer_pb2.Candidates, field: str = "candidates") -> Predictions | PredictSpec:
    """The inline table of ``candidates``, or the model whose grid predictions they are (a PredictSpec: the
    optimizer asks its estimator for them; an empty ``model_id`` is refused here)."""
    source = candidates.WhichOneof("source")
    if source is None:
        raise InvalidArgument(field, "no candidates given", f"{field}.table, or {field}.model")
    if source == "model":
        m = candidates.model
        if not m.model_id:
            raise InvalidArgument(f"{field}.model.model_id", "is empty", "a model id (id@version to cache it)")
        return PredictSpec(m.model_id, m.device, grid=GRID.from_proto(m.grid, f"{field}.model.grid"),
                           batch_sizes=tuple(int(b) for b in m.batch_sizes))
    return table_from_proto(candidates.table, f"{field}.table")


def pool_to_proto(pool: Predictions | PredictSpec) -> optimizer_pb2.Candidates:
    if isinstance(pool, PredictSpec):
        return optimizer_pb2.Candidates(model=optimizer_pb2.ModelCandidates(
            model_id=pool.model_id, device=pool.device, grid=common_pb2.Grid.ValueType(GRID.to_proto(pool.grid)),
            batch_sizes=[int(b) for b in pool.batch_sizes]))
    return optimizer_pb2.Candidates(table=table_to_proto(pool))


def subset_from_proto(table: common_pb2.PredictionTable, indices: Sequence[int], field: str) -> Subset:
    return Subset(tuple(int(i) for i in indices), table_from_proto(table, field, allow_empty=True))


def front_to_proto(front: Subset) -> optimizer_pb2.ParetoFrontResponse:
    return optimizer_pb2.ParetoFrontResponse(front=table_to_proto(front.rows), indices=list(front.indices))


def front_from_proto(msg: optimizer_pb2.ParetoFrontResponse) -> Subset:
    return subset_from_proto(msg.front, msg.indices, "front")


def picks_to_proto(picks: Subset) -> optimizer_pb2.NextProfilesResponse:
    return optimizer_pb2.NextProfilesResponse(picks=table_to_proto(picks.rows), indices=list(picks.indices))


def picks_from_proto(msg: optimizer_pb2.NextProfilesResponse) -> Subset:
    return subset_from_proto(msg.picks, msg.indices, "picks")


# --- verdicts -----------------------------------------------------------------------------------------
_OPTIONAL_VERDICT_FIELDS = ("latency_ms", "infer_batch_size", "tau_train", "train_minibatches_per_s",
                            "time_to_target_s", "time_upper_ms", "power_upper_w")
_VERDICT_BUDGETS = ("power_budget_w", "time_budget_ms", "latency_budget_ms", "arrival_rps")


def verdict_to_proto(v: Verdict) -> common_pb2.Decision:
    msg = common_pb2.Decision(feasible=v.feasible, reason=v.reason, batch_size=int(v.batch_size), time_ms=v.time_ms,
                              power_w=v.power_w, energy_j=v.energy_j, profiled=int(v.profiled), mode_id=v.mode_id,
                              budgets=budgets_to_proto(**{n: getattr(v, n) for n in _VERDICT_BUDGETS}))
    if v.mode is not None:
        msg.mode.CopyFrom(mode_to_proto(v.mode))
    for name in _OPTIONAL_VERDICT_FIELDS:
        value = getattr(v, name)
        if value is not None:
            setattr(msg, name, value)
    return msg


def verdict_from_proto(msg: common_pb2.Decision) -> Verdict:
    return Verdict(msg.feasible, msg.reason, _raw_mode(msg.mode) if msg.HasField("mode") else None, msg.batch_size,
                   msg.time_ms, msg.power_w, msg.energy_j, profiled=msg.profiled, mode_id=msg.mode_id,
                   **{n: optional_value(msg, n) for n in _OPTIONAL_VERDICT_FIELDS},
                   **{n: optional_value(msg.budgets, n) for n in _VERDICT_BUDGETS})


# --- ParetoFront / Select / NextProfiles ----------------------------------------------------------------
def pareto_to_proto(pool: Predictions, risk: float | None = None) -> optimizer_pb2.ParetoFrontRequest:
    return optimizer_pb2.ParetoFrontRequest(candidates=pool_to_proto(pool), risk=risk_to_proto(risk))


def pareto_from_proto(msg: optimizer_pb2.ParetoFrontRequest) -> tuple[Predictions, float | None]:
    return pool_from_proto(msg.candidates), risk_from_proto(msg.risk)


def select_to_proto(query: SelectQuery) -> optimizer_pb2.SelectRequest:
    msg = optimizer_pb2.SelectRequest(candidates=pool_to_proto(query.pool),
                                      objective=objective_to_proto(query.objective),
                                      budgets=budgets_to_proto(power_budget_w=query.power_budget_w,
                                                               time_budget_ms=query.time_budget_ms),
                                      risk=risk_to_proto(query.risk))
    if query.sweep is not None:
        msg.sweep.CopyFrom(optimizer_pb2.BudgetSweep(start=query.sweep.start, stop=query.sweep.stop,
                                                     step=query.sweep.step))
    return msg


def select_from_proto(msg: optimizer_pb2.SelectRequest) -> SelectQuery:
    pool = select_pool_from_proto(msg.candidates)
    objective = objective_from_proto(msg.objective)
    risk = risk_from_proto(msg.risk)
    power = optional_budget(msg.budgets, "power_budget_w")
    time_ms = optional_budget(msg.budgets, "time_budget_ms")
    sweep = BudgetSweep(msg.sweep.start, msg.sweep.stop, msg.sweep.step) if msg.HasField("sweep") else None
    return SelectQuery(pool, objective, power, time_ms, risk, sweep)


def next_profiles_to_proto(query: NextProfilesQuery) -> optimizer_pb2.NextProfilesRequest:
    return optimizer_pb2.NextProfilesRequest(candidates=pool_to_proto(query.pool),
                                             profiled=[mode_to_proto(m) for m in query.profiled],
                                             count=int(query.count), power_low_w=query.power_low_w,
                                             power_high_w=query.power_high_w)


def next_profiles_from_proto(msg: optimizer_pb2.NextProfilesRequest) -> NextProfilesQuery:
    """``profiled`` modes are matched against the table's, not checked (one that is not there is no match)."""
    return NextProfilesQuery(pool_from_proto(msg.candidates), tuple(_raw_mode(m) for m in msg.profiled), msg.count,
                             msg.power_low_w, msg.power_high_w)


# --- SelectJoint / SelectConcurrent -------------------------------------------------------------------
def efficiency_to_proto(efficiency: BatchEfficiency) -> list[common_pb2.BatchEfficiency]:
    """Passes per batch size, ascending (absent: never reaches the target)."""
    out = []
    for b in sorted(efficiency.passes_by_batch):
        msg = common_pb2.BatchEfficiency(batch_size=int(b))
        if math.isfinite(efficiency.passes_by_batch[b]):
            msg.passes_to_target = efficiency.passes_by_batch[b]
        out.append(msg)
    return out


def efficiency_from_proto(rows: Sequence[common_pb2.BatchEfficiency]) -> BatchEfficiency:
    """Passes per batch size; a row with only ``r`` uses r (same argmin: r ∝ passes), but the two are
    not mixed; a row with neither never reaches the target."""
    if not rows:
        raise InvalidArgument("efficiency", "is empty", "one row per batch size of the LUT")
    kinds = {("passes" if r.HasField("passes_to_target") else "r") for r in rows
             if r.HasField("passes_to_target") or r.HasField("r")}
    if len(kinds) > 1:
        raise InvalidArgument("efficiency", "mixes passes_to_target and r across rows",
                              "passes_to_target on every row, or r on every row")
    pairs: dict[int, float] = {}
    for i, r in enumerate(rows):
        at = f"efficiency[{i}]"
        if r.batch_size <= 0:
            raise InvalidArgument(f"{at}.batch_size", f"{r.batch_size} must be positive", ">= 1")
        if r.batch_size in pairs:
            raise InvalidArgument(f"{at}.batch_size", f"batch size {r.batch_size} is listed twice", "one row each")
        name = "passes_to_target" if r.HasField("passes_to_target") else "r"
        value = optional_value(r, name)
        if value is None or math.isinf(value):
            pairs[int(r.batch_size)] = math.inf  # never reaches the target
        elif not (value > 0):  # also NaN
            raise InvalidArgument(f"{at}.{name}", f"{value:g} must be positive", "> 0, or absent / inf for never")
        else:
            pairs[int(r.batch_size)] = float(value)
    return BatchEfficiency.from_pairs(pairs)


def lut_row_to_proto(row: LutRow) -> optimizer_pb2.LutRow:
    msg = optimizer_pb2.LutRow(batch_size=int(row.batch_size), mode_id=row.mode_id, time_s=row.time_s,
                               power_w=row.power_w)
    if row.mode is not None:
        msg.mode.CopyFrom(mode_to_proto(row.mode))
    return msg


def lut_row_from_proto(msg: optimizer_pb2.LutRow) -> LutRow:
    """A LUT row as sent (the library checks the LUT); its optional mode is echoed, not checked."""
    return LutRow(msg.batch_size, msg.mode_id, msg.time_s, msg.power_w,
                  _raw_mode(msg.mode) if msg.HasField("mode") else None)


def joint_to_proto(query: JointQuery) -> optimizer_pb2.SelectJointRequest:
    msg = optimizer_pb2.SelectJointRequest(lut=[lut_row_to_proto(r) for r in query.lut],
                                           efficiency=efficiency_to_proto(query.efficiency))
    if query.power_cap_w is not None:
        msg.power_cap_w = query.power_cap_w
    return msg


def joint_from_proto(msg: optimizer_pb2.SelectJointRequest) -> JointQuery:
    """Absent ``power_cap_w``: no cap."""
    lut = tuple(lut_row_from_proto(r) for r in msg.lut)
    efficiency = efficiency_from_proto(msg.efficiency)
    cap = optional_value(msg, "power_cap_w")
    return JointQuery(lut, efficiency, None if cap is None else validation.power_budget_w(cap, "power_cap_w"))


def concurrent_to_proto(query: ConcurrentQuery) -> optimizer_pb2.SelectConcurrentRequest:
    return optimizer_pb2.SelectConcurrentRequest(
        train=pool_to_proto(query.train), infer=pool_to_proto(query.infer),
        budgets=budgets_to_proto(power_budget_w=query.power_budget_w, latency_budget_ms=query.latency_budget_ms,
                                 arrival_rps=query.arrival_rps))


def concurrent_from_proto(msg: optimizer_pb2.SelectConcurrentRequest) -> ConcurrentQuery:
    train = pool_from_proto(msg.train, "train")
    infer = pool_from_proto(msg.infer, "infer")
    b = msg.budgets
    return ConcurrentQuery(train, infer, required_budget(b, "power_budget_w"), required_budget(b, "latency_budget_ms"),
                           required_budget(b, "arrival_rps"))


# --- search sessions ----------------------------------------------------------------------------------
def search_to_proto(request: SearchRequest) -> optimizer_pb2.StartSearchRequest:
    msg = optimizer_pb2.StartSearchRequest(
        strategy=optimizer_pb2.Strategy.ValueType(STRATEGY.to_proto(request.strategy)),
        problem=optimizer_pb2.Problem.ValueType(PROBLEM.to_proto(request.problem)),
        budgets=budgets_to_proto(power_budget_w=request.power_budget_w, latency_budget_ms=request.latency_budget_ms,
                                 arrival_rps=request.arrival_rps),
        device=request.device, grid=common_pb2.Grid.ValueType(GRID.to_proto(request.grid)),
        modes=[mode_to_proto(m) for m in request.modes], batch_sizes=[int(b) for b in request.batch_sizes],
        infer_batch_sizes=[int(b) for b in request.infer_batch_sizes], train_workload=request.train_workload,
        infer_workload=request.infer_workload, max_profiles=int(request.max_profiles))
    if request.seed is not None:
        msg.seed = int(request.seed)
    return msg


def search_from_proto(msg: optimizer_pb2.StartSearchRequest) -> SearchRequest:
    """The request's strategy, problem, budgets (each by its rule, where given), grid and modes; a guide
    model is FAILED_PRECONDITION (this optimizer has no estimator)."""
    strategy = STRATEGY.from_proto(msg.strategy, "strategy")
    problem = PROBLEM.from_proto(msg.problem, "problem")
    if msg.guide_model_id:
        raise FailedPrecondition(GUIDE_MISSING)
    b = msg.budgets
    budgets = {n: optional_budget(b, n) for n in ("power_budget_w", "latency_budget_ms", "arrival_rps")}
    grid = GRID.from_proto(msg.grid, "grid")
    modes = tuple(mode_from_proto(m, f"modes[{i}]") for i, m in enumerate(msg.modes))
    return SearchRequest(strategy, problem, device=msg.device, grid=grid, modes=modes,
                         batch_sizes=tuple(msg.batch_sizes), infer_batch_sizes=tuple(msg.infer_batch_sizes),
                         train_workload=msg.train_workload, infer_workload=msg.infer_workload,
                         max_profiles=msg.max_profiles, seed=optional_value(msg, "seed"), **budgets)


def started_to_proto(started: Started) -> optimizer_pb2.StartSearchResponse:
    return optimizer_pb2.StartSearchResponse(session_id=started.session_id, max_profiles=int(started.max_profiles))


def started_from_proto(msg: optimizer_pb2.StartSearchResponse) -> Started:
    return Started(msg.session_id, msg.max_profiles)


def search_point_to_proto(point: SearchPoint) -> optimizer_pb2.SearchPoint:
    return optimizer_pb2.SearchPoint(mode=mode_to_proto(point.mode), batch_size=int(point.batch_size),
                                     role=common_pb2.Role.ValueType(role_to_proto(point.role)),
                                     workload=point.workload)


def search_point_from_proto(msg: optimizer_pb2.SearchPoint, field: str = "points") -> SearchPoint:
    return SearchPoint(mode_from_proto(msg.mode, f"{field}.mode"), role_from_proto(msg.role, f"{field}.role").value,
                       msg.batch_size, msg.workload)


def asked_to_proto(asked: Asked) -> optimizer_pb2.AskResponse:
    return optimizer_pb2.AskResponse(points=[search_point_to_proto(p) for p in asked.points], done=asked.done)


def asked_from_proto(msg: optimizer_pb2.AskResponse) -> Asked:
    return Asked(tuple(search_point_from_proto(p, f"points[{i}]") for i, p in enumerate(msg.points)), msg.done)


def told_to_proto(told: Told) -> common_pb2.Measurement:
    role = common_pb2.Role.ValueType(role_to_proto(told.role)) if told.role else common_pb2.ROLE_UNSPECIFIED
    return common_pb2.Measurement(mode=mode_to_proto(told.mode), role=role, batch_size=int(told.batch_size),
                                  workload=told.workload, time_ms=told.time_ms, power_w=told.power_w)


def told_from_proto(i: int, m: common_pb2.Measurement, field: str = "measurements") -> Told:
    """``measurements[i]`` of a Tell, checked: a mode, a batch size, finite time > 0 and power >= 0."""
    at = f"{field}[{i}]"
    mode = mode_from_proto(m.mode, f"{at}.mode")
    role = role_from_proto(m.role, f"{at}.role").value if m.role else None
    if m.batch_size <= 0:
        raise InvalidArgument(f"{at}.batch_size", f"{m.batch_size} must be positive", "the asked point's batch size")
    t = validation.positive(m.time_ms, f"{at}.time_ms", "> 0 ms")
    p = validation.non_negative(m.power_w, f"{at}.power_w", ">= 0 W")
    return Told(at, mode, role, int(m.batch_size), m.workload, t, p)


def tell_to_proto(session_id: str, told: Sequence[Told]) -> optimizer_pb2.TellRequest:
    return optimizer_pb2.TellRequest(session_id=session_id, measurements=[told_to_proto(t) for t in told])


def tell_from_proto(msg: optimizer_pb2.TellRequest) -> tuple[str, list[Told]]:
    return msg.session_id, [told_from_proto(i, m) for i, m in enumerate(msg.measurements)]


def tell_result_to_proto(result: TellResult) -> optimizer_pb2.TellResponse:
    return optimizer_pb2.TellResponse(profiled=int(result.profiled), done=result.done)


def tell_result_from_proto(msg: optimizer_pb2.TellResponse) -> TellResult:
    return TellResult(msg.profiled, msg.done)


def best_to_proto(best: Best) -> optimizer_pb2.BestResponse:
    return optimizer_pb2.BestResponse(decision=verdict_to_proto(best.verdict), done=best.done)


def best_from_proto(msg: optimizer_pb2.BestResponse) -> Best:
    return Best(verdict_from_proto(msg.decision), msg.done)


def ask_to_proto(session_id: str, max_points: int = 0) -> optimizer_pb2.AskRequest:
    return optimizer_pb2.AskRequest(session_id=session_id, max_points=int(max_points))


def ask_from_proto(msg: optimizer_pb2.AskRequest) -> tuple[str, int]:
    """(session id, most points; 0: all)."""
    return msg.session_id, msg.max_points


def best_request_to_proto(session_id: str) -> optimizer_pb2.BestRequest:
    return optimizer_pb2.BestRequest(session_id=session_id)


def end_search_to_proto(session_id: str) -> optimizer_pb2.EndSearchRequest:
    return optimizer_pb2.EndSearchRequest(session_id=session_id)
