"""An inference node's placement: the load it is solved for and the (mode, β) solving gave.

:func:`edgetune.control.inference.solve_placement` re-solves one node; an ``UpdateBudget`` that
carries an arrival rate, a latency budget or a workload says what changes (:class:`InferenceUpdate`).
"""

from __future__ import annotations

from dataclasses import dataclass

from edgetune.optimization.problems import Solution
from edgetune.store.records import InferenceTarget, NodeConfig, Published


@dataclass(frozen=True)
class InferenceUpdate:
    """What an inference node's standing load changes to (None: keep the standing value)."""

    arrival_rps: float | None = None
    latency_budget_ms: float | None = None
    workload: str | None = None


@dataclass(frozen=True)
class InferencePlacement:
    """The outcome of re-solving one node's inference selection."""

    node_id: str
    workload: str
    arrival_rps: float
    latency_budget_ms: float
    #: The P̂ solved under (None: the node has no budget).
    power_budget_w: float | None
    decision: Solution
    #: None when the decision is infeasible (the previous config stays).
    published: Published | None = None
    #: What to write when the caller commits (``solve_placement(write=False)``): the config
    #: (None: infeasible, keep the previous) and the standing target.
    config: NodeConfig | None = None
    target: InferenceTarget | None = None

    @property
    def feasible(self) -> bool:
        return self.decision.feasible

    @property
    def reason(self) -> str:
        return self.decision.reason
