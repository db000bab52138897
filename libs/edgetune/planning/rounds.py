"""What a federated round asks for and what planning it gives: the records the coordinator's
round planning (:mod:`edgetune.control.rounds`) takes and returns, and the wire maps
(:mod:`edgetune.proto.serde.coordinator`).

- :class:`RoundRequest` (its :class:`RoundNode` s, each with an optional
  :class:`~edgetune.base.records.OptionTable`):
  one round to plan; ``to_json`` / ``from_json`` is how the last applied round is stored.
- :class:`RoundOutcome`: the plan (:class:`~edgetune.planning.planner.RoundPlan`), the nodes
  planned around and the configs published.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from edgetune.base.records import OptionTable
from edgetune.planning.planner import RoundPlan
from edgetune.store.records import Published

#: The objectives a round is planned for (docs/contract.md).
OBJECTIVES = ("makespan", "energy")


@dataclass(frozen=True)
class RoundNode:
    node_id: str
    samples: int
    #: Overrides the node's registered budget for this round.
    power_budget_w: float | None = None
    #: None: the node's stored measurements for the round's workload and role.
    options: OptionTable | None = None
    #: Admissible batch sizes (None: the round's, else any; one entry: fixed by the FL job).
    batch_sizes: tuple[int, ...] | None = None
    #: r_b per batch size (None: the round's, else none); absent batch sizes never reach the target.
    batch_efficiency: dict[int, float] | None = None


@dataclass(frozen=True)
class RoundRequest:
    nodes: tuple[RoundNode, ...]
    round_id: str = ""
    objective: str = "makespan"
    deadline_s: float | None = None
    site_power_budget_w: float | None = None
    #: The Workload as a JSON dict (name, batch_size, dataset); the role is separate.
    workload: dict = field(default_factory=dict)
    role: str = "train"
    apply: bool = False
    #: Every node's default admissible batch sizes / batch-efficiency vector (see RoundNode).
    batch_sizes: tuple[int, ...] | None = None
    batch_efficiency: dict[int, float] | None = None

    def to_json(self) -> dict:
        return {"round_id": self.round_id, "objective": self.objective, "deadline_s": self.deadline_s,
                "site_power_budget_w": self.site_power_budget_w, "workload": self.workload, "role": self.role,
                "apply": self.apply, "batch_sizes": _list_or_none(self.batch_sizes),
                "batch_efficiency": _eff_to_json(self.batch_efficiency),
                "nodes": [{"node_id": n.node_id, "samples": n.samples, "power_budget_w": n.power_budget_w,
                           "options": n.options.to_json() if n.options is not None else None,
                           "batch_sizes": _list_or_none(n.batch_sizes),
                           "batch_efficiency": _eff_to_json(n.batch_efficiency)} for n in self.nodes]}

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> RoundRequest:
        nodes = tuple(RoundNode(n["node_id"], int(n["samples"]), n.get("power_budget_w"),
                                OptionTable.from_json(n["options"]) if n.get("options") else None,
                                _tuple_or_none(n.get("batch_sizes")), _eff_from_json(n.get("batch_efficiency")))
                      for n in doc["nodes"])
        return cls(nodes, doc.get("round_id", ""), doc.get("objective", "makespan"), doc.get("deadline_s"),
                   doc.get("site_power_budget_w"), dict(doc.get("workload") or {}), doc.get("role", "train"),
                   bool(doc.get("apply", False)), _tuple_or_none(doc.get("batch_sizes")),
                   _eff_from_json(doc.get("batch_efficiency")))


def _list_or_none(values) -> list[int] | None:
    return None if values is None else [int(v) for v in values]


def _tuple_or_none(values) -> tuple[int, ...] | None:
    return None if values is None else tuple(int(v) for v in values)


def _eff_to_json(eff: Mapping[int, float] | None) -> dict | None:
    # JSON has no inf: "never reaches the target" is stored as null
    return None if eff is None else {str(b): (float(r) if np.isfinite(r) else None) for b, r in eff.items()}


def _eff_from_json(doc: Mapping[str, Any] | None) -> dict[int, float] | None:
    return None if doc is None else {int(b): (float("inf") if r is None else float(r)) for b, r in doc.items()}


@dataclass(frozen=True)
class RoundOutcome:
    round_id: str
    plan: RoundPlan
    #: (node id, why) of requested nodes left out: lost heartbeat, unavailable in Kubernetes.
    planned_around: tuple[tuple[str, str], ...] = ()
    published: tuple[Published, ...] = ()

    @property
    def reason(self) -> str:
        parts = [self.plan.reason] if self.plan.reason else []
        if self.planned_around:
            parts.append("planned around " + ", ".join(f"{n} ({why})" for n, why in self.planned_around))
        return "; ".join(parts)
