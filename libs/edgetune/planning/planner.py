"""Planning one federated round: the ``makespan`` and ``energy`` objectives of docs/contract.md.

- ``makespan``: the least round time of the slowest node (exact, :mod:`.makespan`), each
  node within its power budget and the nodes' summed power within the site budget; among
  the plans with that makespan, the one of least summed energy.
- ``energy``: the least summed energy with every node done by the deadline (default: the
  least makespan) and within the budgets (exact multiple-choice knapsack, :mod:`.knapsack`).

Both end in the same step, least energy by a deadline, which is why the makespan objective
ties to least energy. The result also reports the energy saved against every node running
its fastest option (least time, then least power).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from edgetune.base.mode import PowerMode
from edgetune.planning.fleet import FlatOptions, Fleet, flatten
from edgetune.planning.knapsack import min_energy_choice
from edgetune.planning.makespan import least_makespan
from edgetune.planning.segments import segmented_front


@dataclass(frozen=True)
class NodePlan:
    id: str
    row: int  # the option's row in the node's table
    batch_size: int
    time_s: float
    power_w: float
    energy_j: float
    mode: PowerMode | None = None

    def to_json(self) -> dict:
        mode = None if self.mode is None else self.mode.as_dict()
        return {"id": self.id, "mode": mode, "batch_size": self.batch_size, "time_s": self.time_s,
                "power_w": self.power_w, "energy_j": self.energy_j}


@dataclass(frozen=True)
class RoundPlan:
    feasible: bool
    objective: str
    reason: str | None = None
    makespan_s: float | None = None
    energy_j: float | None = None
    total_power_w: float | None = None
    nodes: list[NodePlan] = field(default_factory=list)
    deadline_s: float | None = None
    #: every node at its fastest option (within its own power budget; may break the site budget)
    fastest_energy_j: float | None = None
    fastest_makespan_s: float | None = None
    #: true when the energy is optimal (always without a site budget; see knapsack's guarantee)
    exact: bool = True
    energy_lower_bound_j: float | None = None

    @property
    def energy_saved_j(self) -> float | None:
        if self.energy_j is None or self.fastest_energy_j is None:
            return None
        return self.fastest_energy_j - self.energy_j

    def to_json(self) -> dict:
        """The docs/contract.md object of ``edgetune plan --json``."""
        if not self.feasible:
            return {"feasible": False, "reason": self.reason}
        return {"feasible": True, "makespan_s": self.makespan_s, "energy_j": self.energy_j,
                "nodes": [n.to_json() for n in self.nodes]}


def _infeasible(fleet: Fleet, reason: str) -> RoundPlan:
    return RoundPlan(False, fleet.objective, reason, deadline_s=fleet.deadline_s)


def _fastest(flat: FlatOptions) -> np.ndarray:
    """Per node, the flat index of its fastest option (ties: less power, then table order)."""
    front = segmented_front(flat.node, flat.time_s, flat.power_w, flat.row)
    starts = np.searchsorted(flat.node[front], np.arange(flat.n_nodes), side="left")
    return front[starts]


def plan_round(fleet: Fleet) -> RoundPlan:
    """Plan the round for ``fleet.objective``; infeasible plans carry a reason naming the cause."""
    if fleet.objective not in ("makespan", "energy"):
        return _infeasible(fleet, f"unknown objective {fleet.objective!r}")
    if not fleet.nodes:
        return _infeasible(fleet, "the fleet has no nodes")
    flat = flatten(fleet)
    missing = flat.nodes_without_options()
    if missing.size:
        return _infeasible(fleet, _no_option_reason(fleet.nodes[int(missing[0])]))
    site = fleet.site_power_budget_w
    ms = least_makespan(flat, site)
    if not ms.feasible or ms.makespan_s is None:
        return _infeasible(fleet, ms.reason or "no plan fits the site power budget")

    deadline = ms.makespan_s
    if fleet.deadline_s is not None:
        if fleet.deadline_s < ms.makespan_s:
            return _infeasible(fleet, _deadline_reason(fleet, flat, ms.makespan_s))
        if fleet.objective == "energy":
            deadline = fleet.deadline_s
    by_deadline = flat.subset(flat.time_s <= deadline)
    # tie order among equal (power, energy): less time, then table order
    tie = np.lexsort((by_deadline.row, by_deadline.time_s))
    tie_rank = np.empty_like(tie)
    tie_rank[tie] = np.arange(tie.size)
    ks = min_energy_choice(by_deadline.node, by_deadline.power_w, by_deadline.energy_j, flat.n_nodes,
                           site, tie=tie_rank)
    if not ks.feasible or ks.choice is None:  # cannot happen after a feasible makespan, kept for safety
        return _infeasible(fleet, f"no plan meets the deadline {deadline:g} s within the site power budget")

    chosen = ks.choice
    nodes = [_node_plan(fleet, by_deadline, int(k)) for k in chosen]
    fast = _fastest(flat)
    return RoundPlan(
        True, fleet.objective, None,
        makespan_s=float(by_deadline.time_s[chosen].max()),
        energy_j=float(by_deadline.energy_j[chosen].sum()),
        total_power_w=float(by_deadline.power_w[chosen].sum()),
        nodes=nodes, deadline_s=deadline,
        fastest_energy_j=float(flat.energy_j[fast].sum()),
        fastest_makespan_s=float(flat.time_s[fast].max()),
        exact=ks.exact, energy_lower_bound_j=ks.lower_bound_j,
    )


def _no_option_reason(n) -> str:
    allowed = n.admissible() if len(n) else np.zeros(0, bool)
    if not allowed.any():
        what = []
        if n.batch_sizes is not None:
            what.append(f"batch sizes {', '.join(map(str, n.batch_sizes))}")
        if n.batch_efficiency is not None:
            reach = sorted(b for b, r in n.batch_efficiency.items() if math.isfinite(r))
            what.append(f"batch sizes that reach the target ({', '.join(map(str, reach)) or 'none'})")
        have = ", ".join(map(str, sorted(set(n.batch_size.tolist()))))
        return f"node {n.id!r} has no option with its allowed {' and '.join(what)} (its table has {have})"
    least = float(n.power_w[allowed].min())
    return (f"node {n.id!r} has no option within its power budget {n.power_budget_w:g} W "
            f"(its least power is {least:g} W)")


def _deadline_reason(fleet: Fleet, flat: FlatOptions, least_makespan_s: float) -> str:
    fast = _fastest(flat)
    slow = int(np.argmax(flat.time_s[fast]))
    if flat.time_s[fast[slow]] > fleet.deadline_s:
        return (f"deadline {fleet.deadline_s:g} s is shorter than node {fleet.nodes[slow].id!r}'s fastest "
                f"round time within its power budget, {flat.time_s[fast[slow]]:g} s")
    return (f"deadline {fleet.deadline_s:g} s is shorter than the least makespan within the site power "
            f"budget, {least_makespan_s:g} s")


def _node_plan(fleet: Fleet, flat: FlatOptions, k: int) -> NodePlan:
    node = fleet.nodes[int(flat.node[k])]
    row = int(flat.row[k])
    mode = None
    if node.modes is not None:
        c, cpu, gpu, emc = node.modes[row]
        mode = PowerMode(int(c), float(cpu), float(gpu), float(emc))
    return NodePlan(node.id, row, int(node.batch_size[row]), float(flat.time_s[k]), float(flat.power_w[k]),
                    float(flat.energy_j[k]), mode)
