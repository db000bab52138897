"""Least round makespan under node and site power budgets — exact.

For a candidate makespan M every node should run its least-power option finishing by M;
the plan is feasible when those powers sum to at most the site budget. That least power
never rises as M grows, so feasibility is monotone in M and a binary search over the
candidate makespans (the distinct option round times, from the slowest node's fastest time
up) finds the least feasible one exactly. Only each node's (time, power) Pareto front
matters (the least-power option finishing by M is the last front point with time <= M), so
one evaluation is a single ``searchsorted`` over all nodes.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from edgetune.planning.fleet import FlatOptions
from edgetune.planning.segments import dense_rank, segmented_front

#: Relative slack on power sums, so float summation order never flips feasibility.
POWER_RTOL = 1e-9


def power_slack(budget_w: float) -> float:
    return POWER_RTOL * max(1.0, abs(budget_w))


@dataclass(frozen=True)
class MakespanResult:
    feasible: bool
    makespan_s: float | None = None
    #: summed least power of the nodes at that makespan
    total_power_w: float | None = None
    reason: str | None = None


def least_makespan(flat: FlatOptions, site_power_budget_w: float | None) -> MakespanResult:
    """The least makespan over ``flat`` (every node has at least one option)."""
    front = segmented_front(flat.node, flat.time_s, flat.power_w)
    node, t, p = flat.node[front], flat.time_s[front], flat.power_w[front]
    starts = np.searchsorted(node, np.arange(flat.n_nodes), side="left")
    lower = float(t[starts].max())  # the slowest node at its fastest option
    rank, n_ranks = dense_rank(t)
    key = node.astype(np.int64) * (n_ranks + 1) + rank  # sorted: front is sorted by (node, time)
    node_base = np.arange(flat.n_nodes, dtype=np.int64) * (n_ranks + 1)
    values = np.unique(t)

    def total_power(r: int) -> float:
        # last front point with time rank <= r in each node's run = its least power by values[r]
        pos = np.searchsorted(key, node_base + r, side="right") - 1
        return float(p[pos].sum())

    candidates = np.flatnonzero(values >= lower)  # ranks of admissible makespans
    if site_power_budget_w is None:
        return MakespanResult(True, lower, total_power(int(candidates[0])))
    budget = site_power_budget_w + power_slack(site_power_budget_w)

    top = total_power(int(candidates[-1]))
    if top > budget:
        return MakespanResult(False, reason=(
            f"site power budget {site_power_budget_w:g} W is below the least total power of the nodes, "
            f"{top:g} W (every node at its least-power option)"))
    lo, hi = 0, candidates.size - 1  # hi is feasible
    while lo < hi:
        mid = (lo + hi) // 2
        if total_power(int(candidates[mid])) <= budget:
            hi = mid
        else:
            lo = mid + 1
    r = int(candidates[hi])
    return MakespanResult(True, float(values[r]), total_power(r))

