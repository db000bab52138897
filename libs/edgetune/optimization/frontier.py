"""Frontier sampling: which modes to profile so that power-budget selections hold.

PowerTrain (PowerTrain) profiles 50 *random* modes, transfers its predictors from them and
picks, per budget, the fastest mode whose predicted power fits. That choice singles out the
modes whose power is under-predicted (the winner's curse), and the modes it chooses from —
the (time, power) Pareto front within the budget range — are the ones random profiling rarely
sees: on the simulated Orin AGX 13–17 % of its choices exceed the budget by more than 1 W, and
no calibration of the predictive std fixes that without a time penalty above 3 %
(``experiments/safe_selection.py``).

Frontier sampling spends the same profiles where selections happen, after Fulcrum's ALS
(Fulcrum, §5.3) but guided by the *transferred* predictor instead of a network trained from
scratch: a few random modes, then rounds that predict every mode with the current transfer,
keep the unprofiled modes on the predicted front whose predicted power lies in the budget range
(widened by ``below_w`` / ``above_w``: a safe choice sits a little under its budget), and
profile the ``per_round`` of them farthest in predicted power from every profiled mode, so the
picks spread along the front. The last transfer has measured the front near every budget.

A round whose band holds no unprofiled mode of the front does not end the sampling: the band is
widened (doubled on both sides) until it holds one, so a transfer that predicts nothing near the
budget still gets measured there, and the sampling ends early only when every mode is profiled.

- :func:`next_frontier_modes` one round's picks from predictions (a pure function)
- :func:`run_frontier_sampling` drives a sampler to its end with the caller's ``measure`` and
  ``refit`` (``edgetune tune`` wires in a device's profiler and a transfer)
- :class:`FrontierSampler` the rounds as ask / tell-free asks: the caller profiles what
  :meth:`~FrontierSampler.ask` returns and refits before asking again::

      sampler = FrontierSampler(len(modes), power_range_w=(17, 50), seed=0)
      picks = sampler.ask()                              # n_initial random modes
      while not sampler.done:
          profile(modes[picks]); model = transfer(profiled so far)
          picks = sampler.ask(*model.predict(modes))     # the next round on the predicted front
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from edgetune import validation
from edgetune.errors import InvalidArgument
from edgetune.optimization.pareto import pareto_mask, pick_far

#: Defaults: 10 random modes + 8 rounds of 5 = PowerTrain's 50 profiles, ALS's schedule.
N_INITIAL, ROUNDS, PER_ROUND = 10, 8, 5
#: How far below the lowest / above the highest budget the front is still sampled (W).
BELOW_W, ABOVE_W = 2.0, 1.0


def _predictions(name: str, values, n: int | None) -> np.ndarray:
    a = np.asarray(values, dtype=float).ravel()
    if a.size == 0 or (n is not None and a.size != n) or not np.isfinite(a).all():
        raise InvalidArgument(name, f"has {a.size} values" + ("" if np.isfinite(a).all() else " (not all finite)"),
                              f"one finite prediction per mode ({n if n is not None else 'all modes'})")
    return a


def _power_range(power_range_w: Sequence[float] | None) -> tuple[float, float] | None:
    if power_range_w is None:
        return None
    try:
        lo, hi = power_range_w
    except (TypeError, ValueError):
        raise InvalidArgument("power_range_w", f"{power_range_w!r} is not a pair of numbers", "(low W, high W)") from None
    lo, hi = validation.power_budget_w(lo, "power_range_w[0]"), validation.power_budget_w(hi, "power_range_w[1]")
    if lo > hi:
        raise InvalidArgument("power_range_w", f"{power_range_w!r} is not a range", "0 < low <= high, in W")
    return lo, hi


def next_frontier_modes(pred_time_ms, pred_power_w, profiled: Sequence[int], k: int, *,
                        power_range_w: Sequence[float] | None = None, below_w: float = BELOW_W,
                        above_w: float = ABOVE_W) -> np.ndarray:
    """Indices of up to ``k`` unprofiled modes to profile next (module docstring).

    Candidates are the unprofiled modes on the predicted (time, power) front — of all modes, or,
    when those are used up, of the unprofiled ones — with predicted power within
    ``power_range_w`` widened by ``below_w`` / ``above_w`` (None: any power); of those, the ``k``
    farthest in predicted power from the profiled modes' predicted power.
    """
    t = _predictions("pred_time_ms", pred_time_ms, None)
    p = _predictions("pred_power_w", pred_power_w, t.size)
    k = validation.count(k, "k")
    seen = np.zeros(t.size, dtype=bool)
    done = np.asarray(list(profiled), dtype=int)
    if done.size and (done.min() < 0 or done.max() >= t.size):
        raise InvalidArgument("profiled", "holds an index outside the modes", f"0 … {t.size - 1}")
    seen[done] = True
    in_range = np.ones(t.size, dtype=bool)
    rng = _power_range(power_range_w)
    if rng is not None:
        for name, v in (("below_w", below_w), ("above_w", above_w)):
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v >= 0):
                raise InvalidArgument(name, f"{v!r} is not a non-negative number", ">= 0 W")
        in_range = (p >= rng[0] - below_w) & (p <= rng[1] + above_w)
    cands = np.flatnonzero(pareto_mask(t, p) & ~seen & in_range)
    if cands.size < k:  # the front in range is profiled: the next front of what is left
        rest = np.flatnonzero(~seen)
        more = rest[pareto_mask(t[rest], p[rest]) & in_range[rest]]
        cands = np.concatenate([cands, np.setdiff1d(more, cands)])
    picks = []
    anchors = list(p[seen])
    for _ in range(min(int(k), cands.size)):  # one at a time: each pick is an anchor for the next
        j = int(pick_far(p[cands], np.asarray(anchors), 1)[0])
        picks.append(int(cands[j]))
        anchors.append(p[cands[j]])
        cands = np.delete(cands, j)
    return np.asarray(picks, dtype=int)


class FrontierSampler:
    """``n_initial`` random modes, then ``rounds`` × ``per_round`` on the predicted front (module docstring).

    Indices refer to the caller's array of ``n_modes`` modes. :meth:`ask` without predictions
    gives the initial random modes; each later call takes the current predictions of every mode.
    What was asked counts as profiled.
    """

    def __init__(self, n_modes: int, *, n_initial: int = N_INITIAL, rounds: int = ROUNDS,
                 per_round: int = PER_ROUND, power_range_w: Sequence[float] | None = None,
                 below_w: float = BELOW_W, above_w: float = ABOVE_W, seed: int = 0) -> None:
        for name, v, least in (("n_modes", n_modes, 1), ("n_initial", n_initial, 1), ("rounds", rounds, 0),
                               ("per_round", per_round, 1)):
            validation.count(v, name, minimum=least)
        if n_initial > n_modes:
            raise InvalidArgument("n_initial", f"{n_initial} exceeds the {n_modes} modes", f"<= {n_modes}")
        self.n_modes, self.n_initial, self.rounds, self.per_round = int(n_modes), int(n_initial), int(rounds), int(per_round)
        self.power_range_w = _power_range(power_range_w)
        self.below_w, self.above_w = below_w, above_w
        self.seed = seed
        self.profiled: list[int] = []
        self.rounds_done = 0
        #: How many times the band was doubled to find a round's picks (0: never), for the caller's notes.
        self.widened = 0

    @property
    def budget(self) -> int:
        """Profiles in all (at most: a round may find fewer candidates)."""
        return min(self.n_modes, self.n_initial + self.rounds * self.per_round)

    @property
    def done(self) -> bool:
        return bool(self.profiled) and (self.rounds_done >= self.rounds or len(self.profiled) >= self.n_modes)

    def ask(self, pred_time_ms=None, pred_power_w=None) -> np.ndarray:
        """The modes to profile next: the initial random ones first, then one round per call."""
        if not self.profiled:
            picks = np.sort(np.random.default_rng(self.seed).choice(self.n_modes, self.n_initial, replace=False))
        elif self.done:
            return np.empty(0, dtype=int)
        else:
            if pred_time_ms is None or pred_power_w is None:
                raise InvalidArgument("pred_time_ms" if pred_time_ms is None else "pred_power_w",
                                      "a round needs the current predictions of every mode",
                                      f"{self.n_modes} predicted values")
            _predictions("pred_time_ms", pred_time_ms, self.n_modes)
            picks = self._widening_round(pred_time_ms, pred_power_w)
            self.rounds_done += 1
        self.profiled.extend(int(i) for i in picks)
        return picks

    def _widening_round(self, pred_time_ms, pred_power_w) -> np.ndarray:
        """One round's picks; an empty band is doubled on both sides until it holds a mode (module docstring)."""
        p = np.asarray(pred_power_w, dtype=float)
        below, above = self.below_w, self.above_w
        while True:
            picks = next_frontier_modes(pred_time_ms, pred_power_w, self.profiled, self.per_round,
                                        power_range_w=self.power_range_w, below_w=below, above_w=above)
            rng = self.power_range_w
            covers = rng is None or (rng[0] - below <= p.min() and rng[1] + above >= p.max())
            if picks.size or covers:
                return picks
            below, above = max(2 * below, 1.0), max(2 * above, 1.0)
            self.widened += 1


def run_frontier_sampling(sampler: FrontierSampler, measure: Callable[[np.ndarray], None],
                          refit: Callable[[], Mapping[str, np.ndarray]],
                          on_round: Callable[[int, np.ndarray], None] | None = None) -> Mapping[str, np.ndarray]:
    """Profile and refit until ``sampler`` is done; returns the last refit's predictions.

    ``measure(indices)`` profiles those modes (it may raise: what it measured is the caller's);
    ``refit()`` transfers from everything measured so far and predicts every mode, as
    ``{"time_ms": ..., "power_w": ...}`` (more keys are passed through, e.g. the stds).
    ``on_round(round, picks)`` after each refit (round 0: the initial random modes). The sampling
    ends early only when a round finds nothing (every mode profiled): an empty band is widened.
    """
    picks = sampler.ask()
    while True:
        measure(picks)
        pred = refit()
        if on_round is not None:
            on_round(sampler.rounds_done, picks)
        if sampler.done:
            return pred
        picks = sampler.ask(pred["time_ms"], pred["power_w"])
        if picks.size == 0:
            return pred
