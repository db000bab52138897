"""The optimizer's one-shot answers over typed questions (:mod:`.records`): Pareto fronts at a risk,
selections (one budget or a sweep), Ahmed et al.'s joint selection, Fulcrum's concurrent training
+ inference, the next modes to profile; and how each library result becomes a :class:`Verdict`.

Nothing feasible is an answer (``Verdict.feasible`` false, with the reason), never an error. Bad
input raises :class:`~edgetune.errors.InvalidArgument` naming the field as the optimizer's request
does (``lut[2].mode_id``, ``train.table.batch_size``). Search sessions: :mod:`.sessions`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from edgetune import validation
from edgetune.base.objective import Objective
from edgetune.base.records import Predictions
from edgetune.errors import FailedPrecondition, InvalidArgument
from edgetune.optimization import problems as P
from edgetune.optimization.frontier import PER_ROUND, next_frontier_modes
from edgetune.optimization.joint import JointChoice, JointLUT, joint_select
from edgetune.optimization.pareto import pareto_front
from edgetune.optimization.records import (
    ConcurrentQuery,
    JointQuery,
    LutRow,
    NextProfilesQuery,
    SelectQuery,
    Subset,
    Verdict,
)
from edgetune.optimization.select import Candidates, Selection, make_selector


def candidates(pool: Predictions) -> Candidates:
    """The selectors' view of a pool (rows without a std use their mean)."""
    return Candidates(pool.time_ms, pool.power_w, pool.time_std_ms, pool.power_std_w)


def _subset(pool: Predictions, index: Sequence[int] | np.ndarray) -> Subset:
    return Subset(tuple(int(i) for i in index), pool.subset(index))


# --- Pareto fronts and selections -----------------------------------------------------------------------
def front_at_risk(pool: Predictions, risk: float | None) -> Subset:
    """The (time, power) front by ascending power, compared on the upper bounds at ``risk`` (rows
    without a std count with their mean)."""
    c = candidates(pool)
    order = pareto_front(c.time_bound_ms(risk), c.power_bound_w(risk))[::-1]
    return _subset(pool, order)


def select(query: SelectQuery) -> list[Verdict]:
    """One verdict per budget of the query (one, or each of its sweep's, ascending); its pool is rows (a
    model reference is read into rows by the optimizer service first)."""
    if not isinstance(query.pool, Predictions):
        raise FailedPrecondition(f"candidates.model: {query.pool.model_id}: the rows of a model are read by the "
                                 "optimizer service from its estimator")
    pool = query.pool
    selector = make_selector(query.objective, query.risk)
    c = candidates(pool)
    if query.sweep is not None:
        budgets = query.sweep.budgets()
        if query.objective == Objective.MIN_POWER:  # least power sweeps the time budget
            picks = [selector.select(c, query.power_budget_w, b) for b in budgets]
        else:
            picks = selector.sweep(c, budgets, query.time_budget_ms)
    else:
        picks = [selector.select(c, query.power_budget_w, query.time_budget_ms)]
    return [verdict_of_selection(pool, s, query.risk) for s in picks]


def verdict_of_selection(pool: Predictions, sel: Selection, risk: float | None) -> Verdict:
    """A selection as a verdict; ``power_upper_w`` when the budget was checked on a bound."""
    budgets = Verdict(False, power_budget_w=sel.power_budget_w, time_budget_ms=sel.time_budget_ms)
    if not sel.feasible or sel.index is None:
        return replace(budgets, reason=sel.reason or "nothing is feasible")
    i = sel.index
    # a feasible selection carries its values
    assert sel.time_ms is not None and sel.power_w is not None and sel.energy_j is not None
    bounded = risk is not None and pool.power_std_w is not None and sel.power_bound_w is not None
    return replace(budgets, feasible=True, mode=pool.mode(i), batch_size=int(pool.batch_size[i]),
                   time_ms=float(sel.time_ms), power_w=float(sel.power_w), energy_j=float(sel.energy_j),
                   power_upper_w=float(sel.power_bound_w) if bounded and sel.power_bound_w is not None else None)


# --- Ahmed et al.'s joint selection ------------------------------------------------------------------
def joint_lut(rows: Sequence[LutRow]) -> JointLUT:
    """The LUT of ``rows``: each a batch size >= 1 and a mode id, once each, finite time and power >= 0."""
    if not rows:
        raise InvalidArgument("lut", "is empty", "at least one (batch size, mode) row")
    seen: dict[tuple[int, str], int] = {}
    for i, r in enumerate(rows):
        at = f"lut[{i}]"
        if r.batch_size <= 0:
            raise InvalidArgument(f"{at}.batch_size", f"{r.batch_size} must be positive", ">= 1")
        if not r.mode_id:
            raise InvalidArgument(f"{at}.mode_id", "is empty", "an opaque mode id, e.g. \"921.6\"")
        key = (int(r.batch_size), r.mode_id)
        if key in seen:
            raise InvalidArgument(f"{at}.mode_id",
                                  f"batch size {key[0]} at mode {r.mode_id!r} repeats lut[{seen[key]}]",
                                  "one row per (batch size, mode)")
        seen[key] = i
        validation.non_negative(r.time_s, f"{at}.time_s", ">= 0 s")
        validation.non_negative(r.power_w, f"{at}.power_w", ">= 0 W")
    return JointLUT.from_rows([(int(r.batch_size), r.mode_id, float(r.time_s), float(r.power_w)) for r in rows])


def select_joint(query: JointQuery) -> Verdict:
    return verdict_of_joint(query, joint_select(joint_lut(query.lut), query.efficiency, query.power_cap_w))


def verdict_of_joint(query: JointQuery, choice: JointChoice) -> Verdict:
    """A joint choice as a verdict: the LUT's mode id (and its mode, when the row has one)."""
    cap = query.power_cap_w
    if not choice.feasible or choice.index is None:
        return Verdict(False, reason=choice.reason or "nothing is feasible", power_budget_w=cap)
    row = query.lut[choice.index]
    return Verdict(True, mode=row.mode if row.mode is not None and row.mode.cores else None,
                   batch_size=int(choice.batch_size or 0), mode_id=str(choice.mode),
                   power_w=float(choice.power_w or 0.0), time_to_target_s=float(choice.time_to_target_s or 0.0),
                   power_budget_w=cap)


# --- Fulcrum's problems -------------------------------------------------------------------------------
def select_concurrent(query: ConcurrentQuery) -> Verdict:
    """The concurrent problem (its training batch size: the rows' only one) solved on the rows."""
    train_sizes = sorted({int(b) for b in query.train.batch_size})
    if len(train_sizes) > 1:
        sizes = ", ".join(map(str, train_sizes))
        raise InvalidArgument("train.table.batch_size", f"several training batch sizes ({sizes}); the training "
                              "minibatch size is the user's, not tuned", "one batch size")
    for name, rows in (("train", query.train), ("infer", query.infer)):
        if (rows.batch_size <= 0).any():
            i = int(np.flatnonzero(rows.batch_size <= 0)[0])
            raise InvalidArgument(f"{name}.table.batch_size[{i}]", "is not set", ">= 1")
    problem = P.ConcurrentProblem(query.power_budget_w, query.latency_budget_ms, query.arrival_rps,
                                  train_batch_size=train_sizes[0])
    obs = P.Observations()
    for role, name, rows in ((P.ROLE_TRAIN, "train", query.train), (P.ROLE_INFER, "infer", query.infer)):
        seen: dict[tuple, int] = {}
        for i, (mode, bs, t, p) in enumerate(zip(rows.modes.tolist(), rows.batch_size.tolist(), rows.time_ms.tolist(),
                                                  rows.power_w.tolist(), strict=True)):
            key = (tuple(mode), int(bs))
            if key in seen:
                raise InvalidArgument(f"{name}.table[{i}]", f"repeats {name}.table[{seen[key]}] "
                                      "(same mode and batch size)", "one row per (mode, batch size)")
            seen[key] = i
            obs.add(rows.mode(i), role, int(bs), P.Point(t, p))
    if not {tuple(m) for m in query.train.modes.tolist()} & {tuple(m) for m in query.infer.modes.tolist()}:
        raise InvalidArgument("infer.table", "no mode appears in both the training and the inference rows",
                              "rows of the same modes in train and infer")
    return verdict_of_problem(problem.solve(obs), problem)


def verdict_of_problem(decision: P.Solution, problem: P.Problem, profiled: int | None = None) -> Verdict:
    """A problem's decision as a verdict. Concurrent: ``batch_size`` is the training minibatch and
    ``infer_batch_size`` the inference one (β); inference: ``batch_size`` is β."""
    base = Verdict(False, profiled=profiled or 0, power_budget_w=problem.power_budget_w,
                   latency_budget_ms=getattr(problem, "latency_budget_ms", None),
                   arrival_rps=getattr(problem, "arrival_rps", None))
    if not decision.feasible or decision.evaluation is None:
        return replace(base, reason=decision.reason or "nothing is feasible")
    ev = decision.evaluation
    chosen = replace(base, feasible=True, mode=ev.mode, time_ms=float(ev.time_ms), power_w=float(ev.power_w),
                     latency_ms=float(ev.latency_ms) if ev.latency_ms is not None else None)
    if problem.kind == "concurrent":
        return replace(chosen, batch_size=int(problem.train_batch_size or P.TRAIN_BATCH_SIZE),
                       infer_batch_size=int(ev.batch_size), tau_train=int(ev.tau_train or 0),
                       train_minibatches_per_s=float(ev.train_minibatches_per_s or 0.0))
    # One workload, one minibatch: its energy is defined (concurrent mixes two).
    return replace(chosen, batch_size=int(ev.batch_size), energy_j=float(ev.time_ms * ev.power_w / 1000.0))


# --- where to profile next ----------------------------------------------------------------------------
def next_profiles(query: NextProfilesQuery) -> Subset:
    """Up to ``count`` unprofiled modes of the pool's predicted front worth profiling next."""
    pool = query.pool
    if len(set(pool.batch_size.tolist())) > 1:
        raise InvalidArgument("candidates.table.batch_size", "holds several batch sizes",
                              "the predictions of one batch size")
    where = {tuple(m): i for i, m in enumerate(pool.modes.tolist())}
    done = [where[k] for k in {m.as_tuple() for m in query.profiled} if k in where]
    low, high = query.power_low_w, query.power_high_w
    bounds = None if low == 0 and high == 0 else (low, high)
    try:
        picks = next_frontier_modes(pool.time_ms, pool.power_w, done, query.count or PER_ROUND, power_range_w=bounds)
    except InvalidArgument as exc:  # name the question's fields
        fields = {"k": "count", "power_range_w": "power_low_w, power_high_w"}
        raise exc.renamed(fields.get(exc.field, exc.field)) from None
    return _subset(pool, picks)
