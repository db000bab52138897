"""τ_tr and β from measured minibatch times and the budgets, the way Fulcrum picks them.

The formulas and the decision rule are :class:`~edgetune.optimization.problems.ConcurrentProblem`'s
(not re-derived here): peak latency λ = (β−1)/α + t_in(β); keep-up t_in ≤ β/α;
τ = ⌊(β/α − t_in) / t_tr⌋ training minibatches fit in the window between inference
minibatches; training throughput θ = τ·α/β minibatches/s; maximise θ s.t. λ ≤ L̂, keep-up,
τ ≥ 1 (and power ≤ P̂ when powers are given), the smaller β on a tie.

:func:`plan_interleaving` answers for one power mode's measured times; :func:`interleaving_formulas`
gives λ, τ, θ and keep-up for any β (the experiment compares runs against them).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from edgetune.base.mode import PowerMode
from edgetune.errors import InvalidArgument
from edgetune.optimization.problems import (
    INFER_BATCH_SIZES,
    ROLE_INFER,
    ROLE_TRAIN,
    TRAIN_BATCH_SIZE,
    ConcurrentProblem,
    Observations,
    Point,
)

#: Stand-in mode for observations that all come from one (the current) power mode.
_THIS_MODE = PowerMode(0, 0.0, 0.0, 0.0)
#: ConcurrentProblem wants a finite power budget; without powers nothing is power-limited.
_NO_POWER_LIMIT_W = 1e12


@dataclass(frozen=True)
class InterleavingPlan:
    """What the scheduler runs: τ_tr training minibatches, then one inference minibatch of up to β."""

    feasible: bool
    tau_train: int
    beta: int
    arrival_rps: float
    latency_ms: float | None = None  # λ = (β−1)/α + t_in(β)
    train_minibatches_per_s: float | None = None  # θ = τ·α/β
    train_time_ms: float | None = None
    infer_time_ms: float | None = None  # t_in(β)
    power_w: float | None = None  # max(p_tr, p_in) when powers were given
    reason: str = ""

    @property
    def max_wait_ms(self) -> float:
        """(β−1)/α: the queueing part of λ, the longest the oldest request should wait for its minibatch."""
        return (self.beta - 1) / self.arrival_rps * 1000.0


@dataclass(frozen=True)
class Formulas:
    """Seed 004's closed forms for one (α, β, t_tr, t_in)."""

    latency_ms: float
    keeps_up: bool
    tau_train: int
    train_minibatches_per_s: float
    window_ms: float  # β/α


def _problem(arrival_rps: float, latency_budget_ms: float | None, power_budget_w: float | None,
             train_batch_size: int) -> ConcurrentProblem:
    return ConcurrentProblem(power_budget_w if power_budget_w is not None else _NO_POWER_LIMIT_W,
                             latency_budget_ms if latency_budget_ms is not None else _NO_POWER_LIMIT_W,
                             arrival_rps, train_batch_size=train_batch_size)


def interleaving_formulas(arrival_rps: float, beta: int, train_time_ms: float, infer_time_ms: float) -> Formulas:
    """λ, keep-up, τ and θ for inference minibatch ``beta`` (ConcurrentProblem's formulas)."""
    p = _problem(arrival_rps, None, None, TRAIN_BATCH_SIZE)
    up = p.keeps_up(beta, infer_time_ms)
    tau = p.tau(beta, train_time_ms, infer_time_ms) if up else 0
    return Formulas(p.peak_latency_ms(beta, infer_time_ms), up, tau, p.throughput(beta, tau), p.window_ms(beta))


def plan_interleaving(train_time_ms: float, infer_time_ms: Mapping[int, float], arrival_rps: float,
                      latency_budget_ms: float, *, batch_sizes: tuple[int, ...] | None = None,
                      train_power_w: float | None = None, infer_power_w: Mapping[int, float] | None = None,
                      power_budget_w: float | None = None, train_batch_size: int = TRAIN_BATCH_SIZE) -> InterleavingPlan:
    """The best (τ_tr, β) for measured t_tr and t_in(β) (ms) at arrival rate α and latency budget L̂.

    ``batch_sizes``: the candidate β (default: those in ``infer_time_ms``; Fulcrum uses
    {1, 4, 16, 32, 64}). Infeasible → ``feasible=False`` with the reason (τ and β are 0).
    """
    if not infer_time_ms:
        raise InvalidArgument("infer_time_ms", "no inference minibatch times given", "{batch size: ms}")
    sizes = tuple(batch_sizes) if batch_sizes is not None else tuple(sorted(infer_time_ms))
    missing = [b for b in sizes if b not in infer_time_ms]
    if missing:
        raise InvalidArgument("batch_sizes", f"no inference time for {missing}", ", ".join(map(str, sorted(infer_time_ms))))
    if (train_power_w is None) != (infer_power_w is None):
        raise InvalidArgument("train_power_w", "give both training and inference powers, or neither", "both or none")
    problem = _problem(arrival_rps, latency_budget_ms, power_budget_w, train_batch_size)
    obs = Observations()
    obs.add(_THIS_MODE, ROLE_TRAIN, train_batch_size, Point(float(train_time_ms), float(train_power_w or 0.0)))
    for b in sizes:
        p_in = float(infer_power_w[b]) if infer_power_w is not None else 0.0
        obs.add(_THIS_MODE, ROLE_INFER, b, Point(float(infer_time_ms[b]), p_in))
    decision = problem.solve(obs)
    if not decision.feasible or decision.evaluation is None:
        return InterleavingPlan(False, 0, 0, problem.arrival_rps, train_time_ms=float(train_time_ms),
                                reason=decision.reason)
    ev = decision.evaluation
    return InterleavingPlan(
        True, int(ev.tau_train or 0), ev.batch_size, problem.arrival_rps, latency_ms=ev.latency_ms,
        train_minibatches_per_s=ev.train_minibatches_per_s, train_time_ms=float(train_time_ms),
        infer_time_ms=float(infer_time_ms[ev.batch_size]),
        power_w=ev.power_w if train_power_w is not None else None)


__all__ = ["INFER_BATCH_SIZES", "Formulas", "InterleavingPlan", "interleaving_formulas", "plan_interleaving"]
