"""Optimizer messages <-> the optimization library's types (the servicer's edges only).

Every reader validates what the library would otherwise reject without a row number, and
raises :class:`~edgetune.errors.InvalidArgument` naming the request field
(``candidates.table.power_w[3]``, ``budgets.arrival_rps``, ``lut[2].mode_id``).

``risk`` means what it means in the library and on the CLI: the probability that the chosen
row's power exceeds the budget under the predictive distribution (0 on the wire: means only).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from edgetune import validation
from edgetune.base.mode import PowerMode
from edgetune.base.records import BatchEfficiency, Predictions
from edgetune.errors import FailedPrecondition, InvalidArgument
from edgetune.optimization import problems as P
from edgetune.optimization.joint import JointChoice, JointLUT
from edgetune.optimization.select import Candidates, Selection
from edgetune.optimization.sessions import Told, space_ref
from edgetune.powermodes.grids import named_grid
from edgetune.powermodes.specs import get_spec
from edgetune.proto.serde.common import (
    GRID,
    PROBLEM,
    STRATEGY,
    mode_from_proto,
    mode_to_proto,
    optional_value,
    role_from_proto,
)
from edgetune.proto.serde.tables import table_from_proto, table_to_proto
from edgetune.proto.v1 import common_pb2, optimizer_pb2
from edgetune.services.common.errors import field_prefix

ESTIMATOR_MISSING = ("fetching predictions from a model needs the estimator service, which this optimizer "
                     "is not connected to; send the candidates inline (candidates.table)")


# --- scalars ----------------------------------------------------------------------------------------
def finite(value: float, field: str, allowed: str, *, positive: bool = False) -> float:
    """``value`` when finite and >= 0 (> 0 with ``positive``); else InvalidArgument naming ``field``."""
    ok = math.isfinite(value) and (value > 0 if positive else value >= 0)
    if not ok:
        raise InvalidArgument(field, f"{value:g} is out of range", allowed)
    return float(value)


def risk_from_proto(risk: float, field: str = "risk") -> float | None:
    """The request's risk as the library takes it: a probability, or None (0 on the wire: means only)."""
    if risk == 0:
        return None
    return validation.risk(risk, field)


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


# --- candidate tables -------------------------------------------------------------------------------
@dataclass(frozen=True)
class Rows:
    """Inline candidate rows, checked: the table's arrays (echoed back by ParetoFront and
    NextProfiles) and the library's candidates."""

    arrays: Predictions
    cands: Candidates

    @property
    def mode_array(self) -> np.ndarray:
        """(n, 4): cores, cpu_mhz, gpu_mhz, emc_mhz."""
        return self.arrays.modes

    @property
    def batch_size(self) -> np.ndarray:
        return self.arrays.batch_size

    def mode(self, i: int) -> PowerMode:
        return self.arrays.mode(i)

    def table(self, index: Sequence[int] | np.ndarray) -> common_pb2.PredictionTable:
        """The rows at ``index`` (in that order) as a table message."""
        return table_to_proto(self.arrays.subset(index))


def rows_from_proto(candidates: optimizer_pb2.Candidates, field: str = "candidates") -> Rows:
    """The inline table of ``candidates``; a model reference is FAILED_PRECONDITION (no estimator).

    Checked column-wise by :func:`edgetune.proto.serde.tables.table_from_proto`, which names the bad
    column and row (``candidates.table.time_ms[3]``). Rows without a std use their mean.
    """
    source = candidates.WhichOneof("source")
    if source is None:
        raise InvalidArgument(field, "no candidates given", f"{field}.table, or {field}.model")
    if source == "model":
        raise FailedPrecondition(f"{field}.model: {ESTIMATOR_MISSING}")
    arrays = table_from_proto(candidates.table, f"{field}.table")
    return Rows(arrays, Candidates(arrays.time_ms, arrays.power_w, arrays.time_std_ms, arrays.power_std_w))


# --- decisions --------------------------------------------------------------------------------------
def selection_to_proto(rows: Rows, sel: Selection, risk: float | None) -> common_pb2.Decision:
    budgets = common_pb2.Budgets()
    if sel.power_budget_w is not None:
        budgets.power_budget_w = sel.power_budget_w
    if sel.time_budget_ms is not None:
        budgets.time_budget_ms = sel.time_budget_ms
    if not sel.feasible or sel.index is None:
        return common_pb2.Decision(feasible=False, reason=sel.reason or "nothing is feasible", budgets=budgets)
    i = sel.index
    # a feasible selection carries its values
    assert sel.time_ms is not None and sel.power_w is not None and sel.energy_j is not None
    msg = common_pb2.Decision(feasible=True, mode=mode_to_proto(rows.mode(i)), batch_size=int(rows.batch_size[i]),
                              time_ms=float(sel.time_ms), power_w=float(sel.power_w),
                              energy_j=float(sel.energy_j), budgets=budgets)
    if risk is not None and rows.cands.power_std_w is not None and sel.power_bound_w is not None:
        msg.power_upper_w = float(sel.power_bound_w)
    return msg


def joint_to_proto(lut_rows: Sequence[optimizer_pb2.LutRow], choice: JointChoice,
                   power_cap_w: float | None) -> common_pb2.Decision:
    budgets = common_pb2.Budgets()
    if power_cap_w is not None:
        budgets.power_budget_w = power_cap_w
    if not choice.feasible or choice.index is None:
        return common_pb2.Decision(feasible=False, reason=choice.reason or "nothing is feasible", budgets=budgets)
    row = lut_rows[choice.index]
    msg = common_pb2.Decision(feasible=True, batch_size=int(choice.batch_size or 0), mode_id=str(choice.mode),
                              power_w=float(choice.power_w or 0.0), time_to_target_s=float(choice.time_to_target_s or 0.0),
                              budgets=budgets)
    if row.HasField("mode") and row.mode.cores:
        msg.mode.CopyFrom(row.mode)
    return msg


def problem_decision_to_proto(decision: P.Decision, problem: P.Problem,
                              profiled: int | None = None) -> common_pb2.Decision:
    """A seed-004 problem's decision. Concurrent: ``batch_size`` is the training minibatch and
    ``infer_batch_size`` the inference one (β); inference: ``batch_size`` is β."""
    budgets = problem_budgets(problem)
    if not decision.feasible or decision.evaluation is None:
        msg = common_pb2.Decision(feasible=False, reason=decision.reason or "nothing is feasible", budgets=budgets)
    else:
        ev = decision.evaluation
        msg = common_pb2.Decision(feasible=True, mode=mode_to_proto(ev.mode), batch_size=int(ev.batch_size),
                                  time_ms=float(ev.time_ms), power_w=float(ev.power_w), budgets=budgets)
        if problem.kind == "concurrent":
            msg.batch_size = int(problem.train_batch_size or P.TRAIN_BATCH_SIZE)
            msg.infer_batch_size = int(ev.batch_size)
            msg.tau_train = int(ev.tau_train or 0)
            msg.train_minibatches_per_s = float(ev.train_minibatches_per_s or 0.0)
        else:
            # One workload, one minibatch: its energy is defined (concurrent mixes two).
            msg.energy_j = float(ev.time_ms * ev.power_w / 1000.0)
        if ev.latency_ms is not None:
            msg.latency_ms = float(ev.latency_ms)
    if profiled is not None:
        msg.profiled = int(profiled)
    return msg


def problem_budgets(problem: P.Problem) -> common_pb2.Budgets:
    out = common_pb2.Budgets(power_budget_w=problem.power_budget_w)
    for name in ("latency_budget_ms", "arrival_rps"):
        value = getattr(problem, name, None)
        if value is not None:
            setattr(out, name, value)
    return out


def concurrent_from_proto(
        request: optimizer_pb2.SelectConcurrentRequest) -> tuple[P.ConcurrentProblem, P.Observations]:
    """The concurrent problem (its training batch size: the rows' only one) and the rows as observations."""
    train = rows_from_proto(request.train, "train")
    infer = rows_from_proto(request.infer, "infer")
    train_sizes = sorted({int(b) for b in train.batch_size})
    if len(train_sizes) > 1:
        sizes = ", ".join(map(str, train_sizes))
        raise InvalidArgument("train.table.batch_size", f"several training batch sizes ({sizes}); the training "
                              "minibatch size is the user's, not tuned", "one batch size")
    for name, rows in (("train", train), ("infer", infer)):
        if (rows.batch_size <= 0).any():
            i = int(np.flatnonzero(rows.batch_size <= 0)[0])
            raise InvalidArgument(f"{name}.table.batch_size[{i}]", "is not set", ">= 1")
    b = request.budgets
    problem = P.ConcurrentProblem(
        required_budget(b, "power_budget_w"),
        required_budget(b, "latency_budget_ms"),
        required_budget(b, "arrival_rps"),
        train_batch_size=train_sizes[0])
    obs = P.Observations()
    for role, name, rows in ((P.ROLE_TRAIN, "train", train), (P.ROLE_INFER, "infer", infer)):
        seen: dict[tuple, int] = {}
        a = rows.arrays
        for i, (mode, bs, t, p) in enumerate(zip(a.modes.tolist(), a.batch_size.tolist(), a.time_ms.tolist(),
                                                  a.power_w.tolist(), strict=True)):
            key = (tuple(mode), int(bs))
            if key in seen:
                raise InvalidArgument(f"{name}.table[{i}]", f"repeats {name}.table[{seen[key]}] "
                                      "(same mode and batch size)", "one row per (mode, batch size)")
            seen[key] = i
            obs.add(a.mode(i), role, int(bs), P.Point(t, p))
    if not {tuple(m) for m in train.mode_array.tolist()} & {tuple(m) for m in infer.mode_array.tolist()}:
        raise InvalidArgument("infer.table", "no mode appears in both the training and the inference rows",
                              "rows of the same modes in train and infer")
    return problem, obs


# --- Ahmed et al. LUT -------------------------------------------------------------------------------------
def lut_from_proto(rows: Sequence[optimizer_pb2.LutRow]) -> JointLUT:
    if not rows:
        raise InvalidArgument("lut", "is empty", "at least one (batch size, mode) row")
    seen: dict[tuple[int, str], int] = {}
    tuples = []
    for i, r in enumerate(rows):
        at = f"lut[{i}]"
        if r.batch_size <= 0:
            raise InvalidArgument(f"{at}.batch_size", f"{r.batch_size} must be positive", ">= 1")
        if not r.mode_id:
            raise InvalidArgument(f"{at}.mode_id", "is empty", "an opaque mode id, e.g. \"921.6\"")
        key = (int(r.batch_size), r.mode_id)
        if key in seen:
            raise InvalidArgument(f"{at}.mode_id", f"batch size {key[0]} at mode {r.mode_id!r} repeats lut[{seen[key]}]",
                                  "one row per (batch size, mode)")
        seen[key] = i
        tuples.append((int(r.batch_size), r.mode_id, finite(r.time_s, f"{at}.time_s", ">= 0 s"),
                       finite(r.power_w, f"{at}.power_w", ">= 0 W")))
    return JointLUT.from_rows(tuples)


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


# --- search points ----------------------------------------------------------------------------------
ROLE_OF = {"train": common_pb2.ROLE_TRAIN, "infer": common_pb2.ROLE_INFER}


def search_point(mode: PowerMode, role: str, batch_size: int, workload: str | None) -> optimizer_pb2.SearchPoint:
    return optimizer_pb2.SearchPoint(mode=mode_to_proto(mode), batch_size=int(batch_size), role=ROLE_OF[role],
                                     workload=workload or "")



# --- search sessions ----------------------------------------------------------------------------
@dataclass(frozen=True)
class SearchSpec:
    """A checked StartSearch request."""

    strategy: str
    problem: P.Problem
    space: dict  # sessions.space_ref(...)
    budget: int | None
    seed: int


def _batch_sizes(values: Sequence[int], field: str) -> list[int]:
    """Distinct batch sizes (:func:`validation.batch_sizes`); none given is an empty list (the default)."""
    return list(validation.batch_sizes(values, field)) if values else []


def search_from_proto(request: optimizer_pb2.StartSearchRequest) -> SearchSpec:
    strategy = STRATEGY.from_proto(request.strategy, "strategy")
    kind = PROBLEM.from_proto(request.problem, "problem")
    if request.guide_model_id:
        raise FailedPrecondition("guide_model_id: an estimator model as the guide needs the estimator service, "
                                 "which this optimizer is not connected to; leave it empty (the nn strategy then "
                                 "fits its own guide on the profiled points)")
    if request.max_profiles < 0:
        raise InvalidArgument("max_profiles", f"{request.max_profiles} is negative", "0 (the strategy's default) or more")

    train_sizes = _batch_sizes(request.batch_sizes, "batch_sizes")
    if len(train_sizes) > 1:
        raise InvalidArgument("batch_sizes", f"{len(train_sizes)} training batch sizes given; a search keeps the "
                              "training minibatch size fixed (it is the user's, not tuned)", "one value, or none (16)")
    train_bs = train_sizes[0] if train_sizes else P.TRAIN_BATCH_SIZE
    infer_sizes = _batch_sizes(request.infer_batch_sizes, "infer_batch_sizes") or list(P.INFER_BATCH_SIZES)

    budgets = request.budgets
    power = required_budget(budgets, "power_budget_w")
    if kind == "train":
        problem: P.Problem = P.TrainProblem(power, train_bs, request.train_workload or None)
    else:
        latency = required_budget(budgets, "latency_budget_ms")
        rate = required_budget(budgets, "arrival_rps")
        if kind == "infer":
            problem = P.InferProblem(power, latency, rate, request.infer_workload or None)
        else:
            problem = P.ConcurrentProblem(power, latency, rate, request.train_workload or None,
                                          request.infer_workload or None, train_bs)

    device = request.device
    spec = None
    if device:
        with field_prefix("device"):
            spec = get_spec(device)
    grid = GRID.from_proto(request.grid, "grid")
    modes: list[PowerMode] | None = None
    if request.modes:
        modes = []
        seen: dict[tuple, int] = {}
        for i, msg in enumerate(request.modes):
            at = f"modes[{i}]"
            mode = mode_from_proto(msg, at)
            if spec is not None:
                mode = validation.power_mode(spec, mode, at)
            key = mode.as_tuple()
            if key in seen:
                raise InvalidArgument(at, f"{mode.label()} repeats modes[{seen[key]}]", "distinct modes")
            seen[key] = i
            modes.append(mode)
    elif spec is None:
        raise InvalidArgument("modes", "no search space: no modes and no device", "modes, or a device (and a grid)")
    else:
        named_grid(spec, grid)  # refuse an unknown grid now, not at the first Ask
    seed = optional_value(request, "seed")
    return SearchSpec(strategy, problem, space_ref(device, grid, modes, train_bs, infer_sizes),
                      request.max_profiles or None, 0 if seed is None else validation.seed(seed))


def told_from_proto(i: int, m: common_pb2.Measurement) -> Told:
    """``measurements[i]`` of a Tell, checked."""
    at = f"measurements[{i}]"
    mode = mode_from_proto(m.mode, f"{at}.mode")
    role = role_from_proto(m.role, f"{at}.role").value if m.role else None
    if m.batch_size <= 0:
        raise InvalidArgument(f"{at}.batch_size", f"{m.batch_size} must be positive", "the asked point's batch size")
    t = finite(m.time_ms, f"{at}.time_ms", "> 0 ms", positive=True)
    p = finite(m.power_w, f"{at}.power_w", ">= 0 W")
    return Told(at, mode, role, int(m.batch_size), m.workload, t, p)
