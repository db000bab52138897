"""Selecting one option (mode × batch size) from predicted or measured candidates.

A *candidate set* is the flattened cross product of power modes and batch sizes: one
``time_ms`` and one ``power_w`` per option, optionally with ``time_std_ms`` /
``power_std_w`` when a predictor gives uncertainty. Selection is one of three
objectives behind one interface (:class:`Selector`, in the spirit of Zeus's
``OptimumSelector``):

- :class:`MinTime`   least time with power within a budget (PowerTrain, Fulcrum training),
- :class:`MinPower`  least power with time within a budget,
- :class:`MinEnergy` least energy (time × power) within optional budgets.

Each takes an optional ``risk``: the *safe* variant checks the power budget against the
upper confidence bound ``power_w + z(1 - risk) · power_std_w`` (z the standard normal
quantile) instead of the mean, so that a prediction that is right on average exceeds the
budget with probability about ``risk`` at most. Without ``power_std_w`` the bound is the mean.

Per-option coverage is not selection coverage: the least-time choice favours options whose
power is under-predicted. :func:`selection_margin` calibrates a constant power margin (W) on the
selection itself, replayed over held-out predictions of profiled options (e.g. an ``nn+gp``
predictor's ``calibration_means`` with ``calibration="cv"``); select on ``power_w + margin``.

Everything is vectorised: one selection is a few O(n) passes; a sweep over k budgets buckets
the options by the least budget each fits (``searchsorted``) and takes running minima over
the buckets, O(n log k) with no full sort — the answers are the points of the
(objective, power) Pareto front.

Ties are broken deterministically: lower (bounded) power, then table order (for
:class:`MinPower`: lower time, then table order). Nothing feasible gives a
:class:`Selection` with ``feasible=False``, a reason, and the closest option: the one nearest
to meeting the budgets that failed (least summed relative excess; a power budget alone: the
least bounded power; a time budget alone: the least time).
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from edgetune import validation
from edgetune.base.objective import Objective
from edgetune.base.risk import upper_bound
from edgetune.errors import InvalidArgument

# --------------------------------------------------------------------------- candidates


@dataclass(frozen=True)
class Candidates:
    """Options as parallel float arrays (index = row of the source table)."""

    time_ms: np.ndarray
    power_w: np.ndarray
    time_std_ms: np.ndarray | None = None
    power_std_w: np.ndarray | None = None

    def __post_init__(self) -> None:
        t = _as_vector("time_ms", self.time_ms)
        n = t.size
        object.__setattr__(self, "time_ms", t)
        object.__setattr__(self, "power_w", _as_vector("power_w", self.power_w, n))
        for name in ("time_std_ms", "power_std_w"):
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, _as_vector(name, value, n))

    def __len__(self) -> int:
        return int(self.time_ms.size)

    @classmethod
    def from_table(cls, table) -> Candidates:
        """From a profile table (:class:`edgetune.tables.Table`); std columns when present."""
        return cls(
            table.column("time_ms"),
            table.column("power_w"),
            table.column("time_std_ms") if table.has("time_std_ms") else None,
            table.column("power_std_w") if table.has("power_std_w") else None,
        )

    def power_bound_w(self, risk: float | None) -> np.ndarray:
        """Power the budget is checked against: the mean, or its upper bound at ``risk``."""
        if risk is None or self.power_std_w is None:
            return self.power_w
        return upper_bound(self.power_w, self.power_std_w, risk)

    def time_bound_ms(self, risk: float | None) -> np.ndarray:
        """Time at ``risk``: the mean, or its upper bound when the options have a time std."""
        if risk is None or self.time_std_ms is None:
            return self.time_ms
        return upper_bound(self.time_ms, self.time_std_ms, risk)


def _as_vector(name: str, values, n: int | None = None) -> np.ndarray:
    arr = np.asarray(values, dtype=float).ravel()
    if n is not None and arr.size != n:
        raise InvalidArgument(name, f"has {arr.size} values, expected {n} (one per option)")
    if arr.size and not np.isfinite(arr).all():
        raise InvalidArgument(name, "contains NaN or infinite values", "finite numbers")
    if arr.size and (arr < 0).any():
        raise InvalidArgument(name, "contains negative values", ">= 0")
    return arr


# --------------------------------------------------------------------------- result


@dataclass(frozen=True)
class Selection:
    """Outcome of one selection. ``index`` is the chosen row; ``closest`` when infeasible."""

    feasible: bool
    index: int | None
    time_ms: float | None = None
    power_w: float | None = None
    power_bound_w: float | None = None
    reason: str | None = None
    closest: int | None = None
    power_budget_w: float | None = None
    time_budget_ms: float | None = None

    @property
    def energy_j(self) -> float | None:
        """Energy of one minibatch of the chosen option (time × power)."""
        if self.time_ms is None or self.power_w is None:
            return None
        return self.time_ms * self.power_w / 1000.0


# --------------------------------------------------------------------------- selectors


class Selector(ABC):
    """Picks one option from :class:`Candidates` under optional power / time budgets."""

    #: What it minimises (its value is the CLI's ``--objective``).
    name: ClassVar[Objective]

    def __init__(self, risk: float | None = None) -> None:
        self.risk = validation.optional(validation.risk, risk, "risk")

    @abstractmethod
    def objective(self, cands: Candidates, power_bound_w: np.ndarray) -> np.ndarray:
        """Value to minimise per option."""

    def tie_break(self, cands: Candidates, power_bound_w: np.ndarray) -> np.ndarray:
        """Second key on equal objective (then table order)."""
        return power_bound_w

    # -- one budget --------------------------------------------------------------------

    def select(self, cands: Candidates, power_budget_w: float | None = None,
               time_budget_ms: float | None = None) -> Selection:
        power_budget_w = validation.optional(validation.power_budget_w, power_budget_w, "power_budget_w")
        time_budget_ms = validation.optional(validation.time_budget_ms, time_budget_ms, "time_budget_ms")
        if len(cands) == 0:
            return Selection(False, None, reason="no options to choose from",
                             power_budget_w=power_budget_w, time_budget_ms=time_budget_ms)
        p_bound = cands.power_bound_w(self.risk)
        ok = np.ones(len(cands), dtype=bool)
        if power_budget_w is not None:
            ok &= p_bound <= power_budget_w
        if time_budget_ms is not None:
            ok &= cands.time_ms <= time_budget_ms
        if not ok.any():
            return self._infeasible(cands, p_bound, power_budget_w, time_budget_ms)
        i = _lex_argmin(self.objective(cands, p_bound), self.tie_break(cands, p_bound), ok)
        return self._chosen(cands, p_bound, i, power_budget_w, time_budget_ms)

    # -- many power budgets --------------------------------------------------------------

    def sweep(self, cands: Candidates, power_budgets_w: Sequence[float],
              time_budget_ms: float | None = None) -> list[Selection]:
        """One selection per power budget, equal to calling :meth:`select` for each.

        No full sort: each option goes to the bucket of the least budget it fits
        (``searchsorted`` over the k sorted budgets), each bucket keeps its best option
        (``minimum.at``), and a running best over the buckets answers every budget. The
        answers walk the (objective, power) Pareto front; O(n log k).
        """
        budgets = [validation.power_budget_w(b, f"power_budgets_w[{i}]") for i, b in enumerate(power_budgets_w)]
        time_budget_ms = validation.optional(validation.time_budget_ms, time_budget_ms, "time_budget_ms")
        if len(cands) == 0 or not budgets:
            return [self.select(cands, b, time_budget_ms) for b in budgets]
        p_bound = cands.power_bound_w(self.risk)
        key = self.objective(cands, p_bound)
        tie = self.tie_break(cands, p_bound)
        by_budget = np.argsort(np.asarray(budgets), kind="stable")
        sorted_budgets = np.asarray(budgets)[by_budget]
        k = sorted_budgets.size
        bucket = np.searchsorted(sorted_budgets, p_bound, side="left")  # fits budgets bucket..k-1
        valid = bucket < k
        if time_budget_ms is not None:
            valid &= cands.time_ms <= time_budget_ms
        vi = np.flatnonzero(valid)
        best_in_bucket = np.full(k, np.inf)
        np.minimum.at(best_in_bucket, bucket[vi], key[vi])
        cand = vi[key[vi] == best_in_bucket[bucket[vi]]]
        cand = cand[np.lexsort((cand, tie[cand], bucket[cand]))]
        firsts = np.unique(bucket[cand], return_index=True)[1]
        winner = {int(bucket[cand[f]]): int(cand[f]) for f in firsts}
        chosen: list[int | None] = [None] * k
        best: int | None = None
        for j in range(k):
            i = winner.get(j)
            if i is not None and (best is None or (key[i], tie[i], i) < (key[best], tie[best], best)):
                best = i
            chosen[int(by_budget[j])] = best
        out = []
        for budget, i in zip(budgets, chosen, strict=True):
            if i is None:
                out.append(self._infeasible(cands, p_bound, budget, time_budget_ms))
            else:
                out.append(self._chosen(cands, p_bound, i, budget, time_budget_ms))
        return out

    # -- helpers -------------------------------------------------------------------------

    def _chosen(self, cands, p_bound, i, power_budget_w, time_budget_ms) -> Selection:
        return Selection(True, int(i), float(cands.time_ms[i]), float(cands.power_w[i]),
                         float(p_bound[i]), power_budget_w=power_budget_w, time_budget_ms=time_budget_ms)

    def _infeasible(self, cands, p_bound, power_budget_w, time_budget_ms) -> Selection:
        closest = _closest(cands, p_bound, power_budget_w, time_budget_ms)
        what = "power upper bound" if (self.risk is not None and cands.power_std_w is not None) else "power"
        parts = []
        if power_budget_w is not None:
            parts.append(f"{what} <= {power_budget_w:g} W")
        if time_budget_ms is not None:
            parts.append(f"time <= {time_budget_ms:g} ms")
        reason = (f"no option has {' and '.join(parts)}; closest is row {closest} (0-based) with "
                  f"{cands.time_ms[closest]:g} ms at {cands.power_w[closest]:g} W")
        if what != "power":
            reason += f" (bound {p_bound[closest]:g} W at risk {self.risk:g})"
        fastest = int(np.argmin(cands.time_ms))
        if time_budget_ms is not None and cands.time_ms[fastest] > time_budget_ms:
            reason += f"; the fastest option takes {cands.time_ms[fastest]:g} ms"
        return Selection(False, None, reason=reason, closest=closest,
                         power_budget_w=power_budget_w, time_budget_ms=time_budget_ms)


class MinTime(Selector):
    """Least time with (bounded) power within the budget."""

    name = Objective.MIN_TIME

    def objective(self, cands, power_bound_w):
        return cands.time_ms


class MinPower(Selector):
    """Least (bounded) power with time within the budget; ties: less time, then table order."""

    name = Objective.MIN_POWER

    def objective(self, cands, power_bound_w):
        return power_bound_w

    def tie_break(self, cands, power_bound_w):
        return cands.time_ms


class MinEnergy(Selector):
    """Least energy per minibatch (mean time × mean power) within the budgets."""

    name = Objective.MIN_ENERGY

    def objective(self, cands, power_bound_w):
        return cands.time_ms * cands.power_w


SELECTORS: dict[Objective, type[Selector]] = {cls.name: cls for cls in (MinTime, MinPower, MinEnergy)}


def make_selector(objective: Objective | str = Objective.MIN_TIME, risk: float | None = None) -> Selector:
    """The selector for ``objective`` (an :class:`Objective`, or its name: ``time``, ``power``, ``energy``)."""
    return SELECTORS[Objective.parse(objective)](risk)


# Functional shorthands ---------------------------------------------------------------


def least_time(cands: Candidates, power_budget_w: float | None, time_budget_ms: float | None = None,
               risk: float | None = None) -> Selection:
    return MinTime(risk).select(cands, power_budget_w, time_budget_ms)


def least_power(cands: Candidates, time_budget_ms: float | None, power_budget_w: float | None = None,
                risk: float | None = None) -> Selection:
    return MinPower(risk).select(cands, power_budget_w, time_budget_ms)


def least_energy(cands: Candidates, power_budget_w: float | None = None, time_budget_ms: float | None = None,
                 risk: float | None = None) -> Selection:
    return MinEnergy(risk).select(cands, power_budget_w, time_budget_ms)


def safe_least_time(cands: Candidates, power_budget_w: float, risk: float = 0.05,
                    time_budget_ms: float | None = None) -> Selection:
    """Least time with ``power_w + z(1-risk)·power_std_w <= power_budget_w``."""
    return MinTime(risk).select(cands, power_budget_w, time_budget_ms)


# --------------------------------------------------------------------------- selection-aware margin

#: Budgets :func:`selection_margin` replays by default (evenly spaced over the observed powers).
MARGIN_BUDGETS = 64


def selection_margin(time_ms, power_pred_w, power_obs_w, risk: float, *, tolerance_w: float = 0.0,
                     budgets_w: Sequence[float] | None = None, step_w: float = 0.05,
                     max_margin_w: float | None = None) -> float:
    """Least constant power margin (W) that keeps a *replayed* least-time selection within budget.

    Per-mode coverage is not selection coverage: :class:`MinTime` picks the fastest of many
    options near the budget, so it prefers the ones whose power is *under*-predicted (the
    winner's curse), and the fast, efficient modes it picks can be biased as a group. This
    calibrates on the selection itself: given held-out (out-of-fold) power predictions
    ``power_pred_w`` of profiled options with their observed ``time_ms`` and ``power_obs_w``
    (e.g. ``NNGPPredictor.calibration_means`` with ``calibration="cv"``), it replays
    ``MinTime`` over those options on ``budgets_w`` (default: :data:`MARGIN_BUDGETS` budgets
    spread over the observed powers) with the predicted power shifted by a margin ``m``, and
    returns the least ``m`` on a ``step_w`` grid for which at most a fraction ``risk`` of the
    feasible replayed choices has observed power > budget + ``tolerance_w``. Select with
    ``power_w + m`` (the full model's prediction shifted by the margin) to use it.

    The replay uses the observed times (the best times known for profiled options) and the
    held-out powers; with few options the replayed choices are few and the margin coarse.
    ``max_margin_w`` (default: the observed power range) is returned when no margin suffices.
    """
    validation.risk(risk)
    t = _as_vector("time_ms", time_ms)
    pred = np.asarray(power_pred_w, dtype=float).ravel()
    if pred.size != t.size or not np.isfinite(pred).all():
        raise InvalidArgument("power_pred_w", f"has {pred.size} values (finite ones expected), expected {t.size}",
                              "one finite prediction per option")
    obs = _as_vector("power_obs_w", power_obs_w, t.size)
    if t.size < 5:
        raise InvalidArgument("time_ms", f"{t.size} options are too few to replay a selection", ">= 5 options")
    if not (isinstance(tolerance_w, (int, float)) and math.isfinite(tolerance_w) and tolerance_w >= 0):
        raise InvalidArgument("tolerance_w", f"{tolerance_w!r} is not a non-negative number", ">= 0")
    if not (isinstance(step_w, (int, float)) and math.isfinite(step_w) and step_w > 0):
        raise InvalidArgument("step_w", f"{step_w!r} is not a positive number", "> 0")
    span = float(obs.max() - obs.min())
    top = float(max_margin_w) if max_margin_w is not None else max(span, step_w)
    if not (math.isfinite(top) and top >= 0):
        raise InvalidArgument("max_margin_w", f"{max_margin_w!r} is not a non-negative number", ">= 0")
    if budgets_w is None:
        budgets = list(np.linspace(float(obs.min()), float(obs.max()), MARGIN_BUDGETS))
    else:
        budgets = [validation.power_budget_w(b, f"budgets_w[{i}]") for i, b in enumerate(budgets_w)]
    selector = MinTime()
    for m in np.arange(0.0, top + 1e-9, step_w):
        cands = Candidates(t, np.maximum(pred + m, 0.0))
        over = [obs[s.index] > b + tolerance_w for b, s in zip(budgets, selector.sweep(cands, budgets), strict=True)
                if s.feasible]
        if over and float(np.mean(over)) <= risk:
            return float(m)
    return top


# --------------------------------------------------------------------------- numpy kernels


def _closest(cands: Candidates, p_bound: np.ndarray, power_budget_w: float | None,
             time_budget_ms: float | None) -> int:
    """The option nearest to meeting the budgets that failed: least summed relative excess over them
    (a power budget alone: least bounded power; a time budget alone: least time); ties by time, then row."""
    excess = np.zeros(len(cands))
    if power_budget_w is not None:
        excess += np.maximum(p_bound - power_budget_w, 0.0) / power_budget_w
    if time_budget_ms is not None:
        excess += np.maximum(cands.time_ms - time_budget_ms, 0.0) / time_budget_ms
    if power_budget_w is None and time_budget_ms is None:
        excess = p_bound
    return _lex_argmin(excess, cands.time_ms, np.ones(len(cands), dtype=bool))


def _lex_argmin(primary: np.ndarray, secondary: np.ndarray, mask: np.ndarray) -> int:
    """Index of the least ``primary`` among ``mask``, ties by ``secondary``, then index."""
    prim = np.where(mask, primary, np.inf)
    candidates = np.flatnonzero(prim == prim.min())
    if candidates.size > 1:
        sec = secondary[candidates]
        candidates = candidates[sec == sec.min()]
    return int(candidates[0])

