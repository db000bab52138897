"""Two concurrent inferences: an urgent one under a latency deadline, a non-urgent one maximising
throughput (Fulcrum, §5.4 "Concurrent Inference" and §7.5).

The paper extends managed interleaving to an *urgent* inference workload μ_u (requests at α,
peak-latency budget L̂) and a *non-urgent* one μ_nu (offline batch processing, QoS =
throughput) and says the problem "is conceptually similar to concurrent training and
inference, and therefore both GMD and ALS can be used as is". The formulation, with the
non-urgent minibatches taking the place of training minibatches:

    Given μ_u, μ_nu, α, select pm, β (urgent minibatch size) and τ (non-urgent minibatches per
    urgent minibatch):
        max θ_nu = τ · b_nu · α / β     samples/s of the non-urgent workload
        s.t. λ_u = (β−1)/α + t_u(pm, β) ≤ L̂          (peak urgent latency)
             t_u(pm, β) ≤ β/α                         (keep up with the urgent arrivals)
             max(p_u(pm, β), p_nu(pm, b_nu)) ≤ P̂      (power of whichever runs)
             τ = ⌊(β/α − t_u) / t_nu(pm, b_nu)⌋ ≥ 1   (non-urgent work fits in the gaps)
    ties (equal θ_nu) go to the lower λ_u, i.e. the smaller β.

b_nu, the non-urgent minibatch size, is fixed (like the training minibatch: the paper tunes only
the urgent β). Because it is fixed, ranking by samples/s equals ranking by minibatches/s.

:class:`UrgentPlusBatchProblem` is therefore a :class:`ConcurrentProblem` whose background slot
(observation role ``"train"``, :data:`ROLE_BACKGROUND`) holds the non-urgent workload, profiled
as an *inference* workload (:meth:`device_role`). ``kind`` stays ``"concurrent"``: it selects
the search algorithm and budget in every strategy (GMD15's branch and bound on β from 64 down,
ALS's ≤ 145 quadrant sampling with a θ-vs-power front, RND150, the exhaustive oracle), so they
all run unchanged through the same ask/tell interface. The problem's own name,
``"urgent_batch"``, is what :meth:`to_dict` and its decisions carry; its objective and decisions
report the non-urgent throughput in samples/s.
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

from edgetune.base.mode import PowerMode
from edgetune.optimization.problems import (
    ROLE_INFER,
    ROLE_TRAIN,
    TRAIN_BATCH_SIZE,
    ConcurrentProblem,
    Evaluation,
    Observations,
    Solution,
)

#: The problem role holding the non-urgent workload (the training slot of managed interleaving).
ROLE_BACKGROUND = ROLE_TRAIN
#: The problem role of the urgent, deadline-bound workload.
ROLE_URGENT = ROLE_INFER


class UrgentPlusBatchProblem(ConcurrentProblem):
    """Most non-urgent samples/s while the urgent inference meets its deadline and power (module docstring)."""

    name: ClassVar[str] = "urgent_batch"
    fixed_batch_field: ClassVar[str] = "nonurgent_batch_size"

    def __init__(self, power_budget_w: float, latency_budget_ms: float, arrival_rps: float,
                 urgent_workload: str | None = None, nonurgent_workload: str | None = None,
                 nonurgent_batch_size: int | None = None) -> None:
        super().__init__(power_budget_w, latency_budget_ms, arrival_rps, train_workload=nonurgent_workload,
                         infer_workload=urgent_workload, train_batch_size=nonurgent_batch_size)

    # -- names of the two slots -----------------------------------------------------------------
    @property
    def urgent_workload(self) -> str | None:
        return self.infer_workload

    @property
    def nonurgent_workload(self) -> str | None:
        return self.train_workload

    @property
    def nonurgent_batch_size(self) -> int | None:
        return self.train_batch_size

    def device_role(self, role: str) -> str:
        return ROLE_INFER  # both workloads were profiled as inference

    def workload_field(self, role: str) -> str:
        return "nonurgent_workload" if role == ROLE_BACKGROUND else "urgent_workload"

    # -- formulas -------------------------------------------------------------------------------
    def samples_per_s(self, batch_size: int, tau: int) -> float:
        """θ_nu = τ · b_nu · α / β non-urgent samples per second."""
        return self.throughput(batch_size, tau) * self._b_nu()

    def _b_nu(self) -> int:
        return self.train_batch_size or TRAIN_BATCH_SIZE

    def evaluate(self, mode: PowerMode, batch_size: int, obs: Observations) -> Evaluation | None:
        ev = super().evaluate(mode, batch_size, obs)
        if ev is None:
            return None
        # objective in samples/s; train_minibatches_per_s / tau_train keep the background slot's
        # minibatches per second and τ
        return dataclasses.replace(ev, objective=ev.objective * self._b_nu())

    # -- decisions --------------------------------------------------------------------------------
    def _named(self, decision: Solution) -> Solution:
        extras: dict[str, Any] = {}
        ev = decision.evaluation
        if decision.feasible and ev is not None:
            extras = {"nonurgent_samples_per_s": ev.objective,
                      "nonurgent_minibatches_per_s": ev.train_minibatches_per_s,
                      "tau_nonurgent": ev.tau_train, "latency_ms": ev.latency_ms}
        return dataclasses.replace(decision, problem=self.name, extras=extras)

    def solve(self, obs: Observations) -> Solution:
        return self._named(super().solve(obs))

    def decide(self, ev: Evaluation | None) -> Solution:
        return self._named(super().decide(ev))

    def _explain_extra(self, evs: list[Evaluation]) -> list[str]:
        return super(ConcurrentProblem, self)._explain_extra(evs) + [
            f"fit a non-urgent minibatch: {sum(e.trains for e in evs)}"]

    def _misses(self, ev: Evaluation) -> str:
        return super()._misses(ev).replace("no training minibatch fits", "no non-urgent minibatch fits")

    def to_dict(self) -> dict[str, Any]:
        return {"problem": self.name, "power_budget_w": self.power_budget_w,
                "latency_budget_ms": self.latency_budget_ms, "arrival_rps": self.arrival_rps,
                "urgent_workload": self.urgent_workload, "nonurgent_workload": self.nonurgent_workload,
                "nonurgent_batch_size": self.nonurgent_batch_size}
