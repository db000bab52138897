"""Dynamic arrival rates: re-solve an inference (or concurrent) problem per window as the rate
moves, reusing every profile taken so far (Fulcrum, §5.4 "Dynamic Rates" and §7.4).

The paper replays rate traces that change every 5 minutes with a fixed power and latency
budget and re-solves per window:

- **GMD** "leverage[s] historical profiling data ... and perform[s] additional profiling only
  when the existing optimal solutions do not satisfy latency"; when the rate rises past what the
  current batch size can serve "it quickly backtracks to a higher batch size". Here each window
  runs GMD again at the window's rate, warm-started with every point profiled so far
  (:meth:`SearchStrategy.warm_start`): its walk over power modes is driven by power, which does
  not depend on the rate, so it retraces profiled points for free, reuses any earlier decision
  that still meets the budgets, and backtracks to larger β only through new points.
- **ALS** samples once for a whole range of rates and latencies, then "the profiled samples can
  be used as is"; "if the rate goes well beyond the range on which ALS was run, it can
  incrementally run to sample a few more points on the additional range". Here the first window
  runs ALS (≤ 145), later windows only re-solve over its observations, and a window whose rate
  leaves the sampled rate range runs ``extension_rounds`` more ALS rounds over the new part of
  the range — warm-started with all samples and no new random phase.
- Any other strategy (random, exhaustive) is re-run warm: with the same seed it asks the same
  configurations, so after the first window it costs nothing. ``reuse=False`` runs every window
  from a cold start instead (what the reuse saves).

Each window's rate is *estimated* from the arrivals in it (count / window length) and the
problem is solved at that estimate (times ``1 + headroom``); the decision is then judged at the
window's *true* mean rate (and, for bursty traces, at the highest rate inside the window) against
the noise-free truth table, next to that window's oracle (exhaustive at the true rate).

Public API: :class:`DynamicSolver` (``solve_at(rate_rps)``, ``replay(trace, horizon_s)``),
:class:`WindowResult`, :func:`with_arrival_rate`, :func:`window_rates`, :func:`estimate_rates`,
:func:`excess_pct`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from edgetune.errors import InvalidArgument
from edgetune.optimization.interleaving.arrivals import (
    MMPP,
    ArrivalProcess,
    Deterministic,
    PiecewisePoisson,
    Poisson,
    _poisson_between,
    counts_per_window,
)
from edgetune.optimization.problem_registry import problem_from_dict
from edgetune.optimization.problems import Evaluation, LatencyProblem, Observations, Problem, Solution
from edgetune.optimization.strategies import make_strategy, run_search, search_space

#: Strategies that sample once for every rate and are only re-solved afterwards.
SAMPLE_ONCE = ("als",)


# --------------------------------------------------------------------------- helpers


def with_arrival_rate(problem: Problem, rate_rps: float) -> Problem:
    """``problem`` with its arrival rate replaced (inference, concurrent, two-inference problems)."""
    d = problem.to_dict()
    if "arrival_rps" not in d:
        raise InvalidArgument("problem", f"a {d.get('problem')} problem has no arrival rate",
                              "infer, concurrent, urgent_batch")
    d["arrival_rps"] = float(rate_rps)
    return problem_from_dict(d)


def excess_pct(decision_ev: Evaluation, oracle_ev: Evaluation) -> float:
    """Excess over the oracle in %: peak latency over optimal (inference), throughput loss
    (concurrent and two-inference problems, whose objective is maximised)."""
    if decision_ev.train_minibatches_per_s is not None:  # maximised objective
        return 100.0 * (1.0 - decision_ev.objective / oracle_ev.objective)
    return 100.0 * (decision_ev.objective / oracle_ev.objective - 1.0)


def _segments(trace: ArrivalProcess, horizon_s: float) -> list[tuple[float, float, float]] | None:
    """(start_s, end_s, rate_rps) pieces of the trace's intensity, or ``None`` when unknown."""
    if isinstance(trace, (Poisson, Deterministic)):
        return [(0.0, horizon_s, trace.rate_rps)]
    if isinstance(trace, PiecewisePoisson):
        out, i = [], 0
        while i * trace.window_s < horizon_s:
            t0 = i * trace.window_s
            out.append((t0, min(t0 + trace.window_s, horizon_s), trace.rate_at(t0)))
            i += 1
        return out
    if isinstance(trace, MMPP):
        return _mmpp_segments(trace, horizon_s)
    return None


def _mmpp_segments(trace: MMPP, horizon_s: float) -> list[tuple[float, float, float]]:
    """The MMPP's hidden state path, by replaying its generator's draws (checked against its arrivals)."""
    rng = np.random.default_rng(trace.seed)
    d0, d1 = trace.mean_dwell_s
    state = 0 if rng.random() < d0 / (d0 + d1) else 1
    t, segs, parts = 0.0, [], []
    while t < horizon_s:
        end = min(t + rng.exponential(trace.mean_dwell_s[state]), horizon_s)
        parts.append(_poisson_between(rng, trace.rates_rps[state], t, end))
        segs.append((t, end, trace.rates_rps[state]))
        t, state = end, 1 - state
    times = np.concatenate(parts) if parts else np.empty(0)
    if not np.array_equal(times, trace.times_s(horizon_s)):
        raise InvalidArgument("trace", "could not recover the MMPP's state path (its generator changed)")
    return segs


def window_rates(trace: ArrivalProcess, horizon_s: float, window_s: float) -> tuple[np.ndarray, np.ndarray] | None:
    """Per window: the true mean intensity and the highest intensity inside it (rps); ``None``
    for a trace whose intensity is unknown (a recorded replay)."""
    segs = _segments(trace, horizon_s)
    if segs is None:
        return None
    n = int(math.floor(horizon_s / window_s))
    mean, peak = np.zeros(n), np.zeros(n)
    for k in range(n):
        w0, w1 = k * window_s, (k + 1) * window_s
        for s0, s1, r in segs:
            overlap = min(s1, w1) - max(s0, w0)
            if overlap > 0:
                mean[k] += r * overlap / window_s
                peak[k] = max(peak[k], r)
    return mean, peak


def estimate_rates(times_s: np.ndarray, horizon_s: float, window_s: float) -> np.ndarray:
    """Arrivals per window / window length (rps): what an online controller can measure."""
    return counts_per_window(times_s, horizon_s, window_s) / window_s


# --------------------------------------------------------------------------- results


@dataclass
class WindowResult:
    """One window of a replay."""

    index: int
    start_s: float
    estimated_rate_rps: float
    solved_rate_rps: float  # the rate the problem was solved at (estimate × (1 + headroom))
    decision: Solution  # from the solver's observations at ``solved_rate_rps``
    new_profiles: int
    cumulative_profiles: int
    action: str  # what the solver did: "search", "reuse", "extend", "idle"
    true_rate_rps: float | None = None
    peak_rate_rps: float | None = None
    at_true: Evaluation | None = None  # the decision judged at the true rate (truth table)
    oracle: Solution | None = None  # exhaustive at the true rate
    meets_at_peak: bool | None = None

    @property
    def meets_budgets(self) -> bool:
        return self.at_true is not None and self.at_true.feasible

    @property
    def excess_pct(self) -> float:
        if not self.meets_budgets or self.oracle is None or not self.oracle.feasible:
            return float("nan")
        if self.at_true is None or self.oracle.evaluation is None:  # implied by the line above
            return float("nan")
        return excess_pct(self.at_true, self.oracle.evaluation)

    def as_row(self) -> dict[str, Any]:
        d, ev = self.decision, self.at_true
        row: dict[str, Any] = {
            "window": self.index, "start_s": self.start_s, "true_rate_rps": self.true_rate_rps,
            "peak_rate_rps": self.peak_rate_rps, "estimated_rate_rps": self.estimated_rate_rps,
            "solved_rate_rps": self.solved_rate_rps, "action": self.action, "found": d.feasible,
            "mode": str(d.mode) if d.feasible else "", "batch_size": d.batch_size if d.feasible else None,
            "latency_ms": ev.latency_ms if ev is not None else None,
            "power_w": ev.power_w if ev is not None else None,
            "objective": ev.objective if ev is not None else None,
            "meets_budgets": self.meets_budgets, "meets_at_peak": self.meets_at_peak,
            "new_profiles": self.new_profiles, "cumulative_profiles": self.cumulative_profiles,
            "oracle_objective": (self.oracle.evaluation.objective
                                 if self.oracle is not None and self.oracle.evaluation is not None
                                 and self.oracle.feasible else None),
            "oracle_batch_size": (self.oracle.batch_size if self.oracle is not None and self.oracle.feasible
                                  else None),
            "excess_pct": self.excess_pct,
        }
        return row


# --------------------------------------------------------------------------- the solver


@dataclass
class _Store:
    obs: Observations = field(default_factory=Observations)
    profiled: int = 0


class DynamicSolver:
    """Re-solves ``base_problem`` per window of ``window_s`` seconds as the arrival rate moves.

    ``device``: a :class:`~edgetune.devices.replay.ReplayDevice` (profiles come from its
    ``lookup``). ``strategy_name``: any :func:`make_strategy` name. ``budget`` /
    ``strategy_options``: passed to every search. ``reuse``: warm-start each window with every
    earlier profile (``False``: a cold start per window). ``headroom``: solve at the estimated
    rate × (1 + headroom). ``extension_rounds``: ALS rounds when the rate leaves ALS's range.
    """

    def __init__(self, strategy_name: str, device: Any, base_problem: Problem, window_s: float, *,
                 seed: int = 0, budget: int | None = None, reuse: bool = True, headroom: float = 0.0,
                 extension_rounds: int = 1, strategy_options: dict[str, Any] | None = None) -> None:
        if not (isinstance(window_s, (int, float)) and window_s > 0 and math.isfinite(window_s)):
            raise InvalidArgument("window_s", f"{window_s!r} must be a positive number of seconds", "> 0")
        if not (isinstance(headroom, (int, float)) and 0 <= headroom < 1):
            raise InvalidArgument("headroom", f"{headroom!r} out of range", "0 <= headroom < 1")
        self.strategy_name = strategy_name
        self.device = device
        self.space, self.problem = search_space(device, base_problem)
        with_arrival_rate(self.problem, getattr(self.problem, "arrival_rps", 1.0))  # refuse train problems early
        self.window_s = float(window_s)
        self.seed, self.budget, self.reuse, self.headroom = int(seed), budget, bool(reuse), float(headroom)
        self.extension_rounds = int(extension_rounds)
        self.options = dict(strategy_options or {})
        self._store = _Store()
        #: ALS: the rate range its samples were drawn for (``None`` before the first window).
        self.covered_rate_rps: tuple[float, float] | None = None
        self.extensions = 0  # ALS range extensions run so far
        self._last: Solution | None = None

    # -- state --------------------------------------------------------------------------------
    @property
    def observations(self) -> Observations:
        """Every point profiled so far (the reuse store)."""
        return self._store.obs

    @property
    def profiled(self) -> int:
        """Profiles spent so far (distinct points; a cold-start solver re-counts re-profiled ones)."""
        return self._store.profiled

    # -- one window ---------------------------------------------------------------------------
    def solve_at(self, rate_rps: float) -> tuple[Solution, int, str]:
        """Re-solve at ``rate_rps``: (decision, new profiles, action)."""
        prob = with_arrival_rate(self.problem, rate_rps)
        if self.strategy_name in SAMPLE_ONCE and self.reuse:
            return self._sample_once(prob)
        strat = make_strategy(self.strategy_name, prob, self.space, budget=self.budget, seed=self.seed,
                              **self.options)
        if self.reuse:
            strat.warm_start(self._store.obs)
        res = run_search(strat, self.device, prob)
        self._store.obs.update(strat.obs)
        self._store.profiled += res.profiled
        return res.decision, res.profiled, "search" if res.profiled else "reuse"

    def _sample_once(self, prob: Problem) -> tuple[Solution, int, str]:
        if not isinstance(prob, LatencyProblem):
            raise TypeError(f"rate sampling needs an arrival rate; a {prob.kind} problem has none")
        rate = prob.arrival_rps
        if self.covered_rate_rps is None:
            strat = make_strategy(self.strategy_name, prob, self.space, budget=self.budget, seed=self.seed,
                                  **self.options)
            action = "search"
        else:
            lo, hi = self.covered_rate_rps
            if lo <= rate <= hi:
                return prob.solve(self._store.obs), 0, "reuse"
            # only the new part of the range: quadrants split it, the guides see every sample
            # (with a margin past the new rate, so a rate that keeps climbing does not extend every window)
            new_range = (hi, rate * 1.25) if rate > hi else (rate / 1.25, lo)
            strat = make_strategy(self.strategy_name, prob, self.space, seed=self.seed + 1 + self.extensions,
                                  initial=0, rounds=self.extension_rounds, rate_range_rps=list(new_range),
                                  **self.options)
            strat.warm_start(self._store.obs)
            action = "extend"
        res = run_search(strat, self.device, prob)
        self._store.obs.update(strat.obs)
        self._store.profiled += res.profiled
        r0, r1 = strat.rate_range_rps  # type: ignore[attr-defined]
        old = self.covered_rate_rps or (r0, r1)
        self.covered_rate_rps = (min(old[0], r0), max(old[1], r1))
        self.extensions += action == "extend"
        return prob.solve(self._store.obs), res.profiled, action

    # -- a whole trace ------------------------------------------------------------------------
    def replay(self, trace: ArrivalProcess, horizon_s: float, truth: Observations | None = None) -> list[WindowResult]:
        """Solve every window of ``trace`` over ``horizon_s``; judge each decision at the window's
        true rate against ``truth`` (default: every row of the replayed table)."""
        truth = truth if truth is not None else self.problem.observations_from_rows(self.device.table.rows)
        times = trace.times_s(horizon_s)
        est = estimate_rates(times, horizon_s, self.window_s)
        rates = window_rates(trace, horizon_s, self.window_s)
        out: list[WindowResult] = []
        for k, r_est in enumerate(est):
            true_r = float(rates[0][k]) if rates is not None else float(r_est)
            peak_r = float(rates[1][k]) if rates is not None else float(r_est)
            if r_est <= 0:  # no request this window: nothing to serve, keep the last decision
                dec = self._last or Solution(False, None, "no request yet", problem=self.problem.kind)
                res = WindowResult(k, k * self.window_s, 0.0, 0.0, dec, 0, self.profiled, "idle", true_r, peak_r)
                out.append(res)
                continue
            solved = float(r_est) * (1.0 + self.headroom)
            dec, new, action = self.solve_at(solved)
            self._last = dec
            res = WindowResult(k, k * self.window_s, float(r_est), solved, dec, new, self.profiled, action,
                               true_r, peak_r)
            if true_r > 0:
                at_true = with_arrival_rate(self.problem, true_r)
                res.oracle = at_true.solve(truth)
                if dec.feasible and dec.evaluation is not None:
                    mode, batch_size = dec.evaluation.mode, dec.evaluation.batch_size
                    res.at_true = at_true.evaluate(mode, batch_size, truth)
                    at_peak = with_arrival_rate(self.problem, peak_r).evaluate(mode, batch_size, truth)
                    res.meets_at_peak = bool(at_peak is not None and at_peak.feasible)
            out.append(res)
        return out
