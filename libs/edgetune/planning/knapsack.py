"""Least summed energy with one option per node and summed power within a site budget.

This is a multiple-choice knapsack (MCKP): pick one (power, energy) option per node,
minimise Σ energy subject to Σ power <= S. It is solved exactly, in four steps:

1. **Dominance.** Only each node's Pareto front on (power, energy) can be optimal (swap a
   dominated option for its dominator: no more power, no more energy).
2. **Lagrangian bound.** For λ >= 0 every node picks argmin(energy + λ·power); the summed
   power falls as λ rises, and bisection finds the least λ whose picks fit S. That gives a
   feasible plan (upper bound UB) and the bound ``L(λ) = Σ_i min_j(E_ij + λP_ij) − λS``
   which no feasible plan beats; the leftover power is then spent greedily (UB only falls).
3. **Reduced-cost fixing.** With ``rc_ij = E_ij + λP_ij − min_j(E_ij + λP_ij)`` every
   feasible plan x has ``E(x) >= L(λ) + Σ_i rc_i(x)``, so a plan better than UB uses only
   options with rc < UB − L; nodes left with one such option are fixed.
4. **Exact DP over the rest** (the *core*): partial plans as (power, energy) states, pruned
   by dominance, by the reduced-cost bound and by power (the remaining nodes' least power
   must still fit) — Nemhauser–Ullmann style, exact.

Guarantee: the returned plan's energy is within ``ENERGY_RTOL`` (1e-9, relative) of the
optimum whenever ``exact`` is true. If the core DP would exceed ``max_states`` partial
plans at once (or ``max_work`` in all), it stops and the greedy plan is returned with ``exact=False`` and the certified
lower bound, so ``energy − lower_bound_j`` bounds the loss. Ties: lower power, then the
caller's option order.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from edgetune.optimization.pareto import pareto_mask
from edgetune.planning.segments import segmented_first_argmin, segmented_front

ENERGY_RTOL = 1e-9
POWER_RTOL = 1e-9
MAX_STATES = 200_000
#: Cap on the partial plans the core DP may generate in all (about 1 s of work per 3 million).
MAX_WORK = 20_000_000


@dataclass(frozen=True)
class KnapsackResult:
    feasible: bool
    #: chosen flat option index per node (into the arrays passed in)
    choice: np.ndarray | None = None
    energy_j: float | None = None
    power_w: float | None = None
    lower_bound_j: float | None = None
    exact: bool = True
    #: least summed power of any plan (reported when infeasible)
    least_power_w: float | None = None
    core_nodes: int = 0


def min_energy_choice(node: np.ndarray, power_w: np.ndarray, energy_j: np.ndarray, n_nodes: int,
                      site_power_budget_w: float | None, tie: np.ndarray | None = None,
                      max_states: int = MAX_STATES, max_work: int = MAX_WORK) -> KnapsackResult:
    """One option per node (``node`` holds each option's node, every node has one) minimising Σ energy.

    ``tie`` orders otherwise equal options (lower first); default: input order.
    """
    tie = np.arange(node.size) if tie is None else tie
    # 1. per-node (power, energy) fronts, sorted by (node, power ↑); energy falls along each
    front = segmented_front(node, power_w, energy_j, tie)
    f_node, f_p, f_e = node[front], power_w[front], energy_j[front]
    starts = np.searchsorted(f_node, np.arange(n_nodes), side="left")
    ends = np.append(starts[1:], f_node.size) - 1
    least_power = float(f_p[starts].sum())
    if site_power_budget_w is None:
        return _result(front, ends, f_p, f_e, least_power, exact=True)
    budget = site_power_budget_w + POWER_RTOL * max(1.0, site_power_budget_w)
    if least_power > budget:
        return KnapsackResult(False, least_power_w=least_power)
    if f_p[ends].sum() <= budget:  # everyone at least energy fits: unconstrained optimum
        return _result(front, ends, f_p, f_e, least_power, exact=True)

    # 2. bisection on λ: picks(λ) fit for λ >= λ*, not for λ < λ*
    def picks(lam: float) -> np.ndarray:
        return segmented_first_argmin(f_e + lam * f_p, starts)

    lo, hi = 0.0, max(1e-12, float(np.abs(f_e).max()) / max(1e-12, float(f_p.max())))
    for _ in range(2000):
        if f_p[picks(hi)].sum() <= budget:
            break
        lo, hi = hi, hi * 2.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if mid <= lo or mid >= hi or hi - lo <= 1e-13 * hi:
            break
        if f_p[picks(mid)].sum() <= budget:
            hi = mid
        else:
            lo = mid
    lam = hi
    cur = picks(lam)
    v = f_e + lam * f_p
    v_min = v[cur]
    lower_bound = float(v_min.sum() - lam * site_power_budget_w)
    cur = _greedy_fill(cur, f_node, f_p, f_e, budget)
    upper = float(f_e[cur].sum())
    tol = ENERGY_RTOL * max(1.0, abs(upper))
    gap = upper - lower_bound
    if gap <= tol:
        return _finish(front, cur, f_p, f_e, lower_bound, exact=True, least_power=least_power)

    # 3. reduced-cost fixing
    rc = v - np.repeat(v_min, np.diff(np.append(starts, f_node.size)))
    alive = rc < gap - tol
    counts = np.bincount(f_node[alive], minlength=n_nodes)
    core = np.flatnonzero(counts >= 2)
    if core.size == 0:
        return _finish(front, cur, f_p, f_e, lower_bound, exact=True, least_power=least_power)
    fixed = np.setdiff1d(np.arange(n_nodes), core)
    # a fixed node's only option with rc < gap is its λ-pick (rc = 0)
    fixed_pick = picks(lam)[fixed]
    base_p = float(f_p[fixed_pick].sum())
    base_e = float(f_e[fixed_pick].sum())

    # 4. exact DP over the core nodes
    best = _core_dp(core, alive, f_node, f_p, f_e, rc, starts, ends, base_p, base_e,
                    budget, lower_bound, upper - tol, max_states, max_work)
    if best is None:  # state cap hit: keep the greedy plan, with its certified bound
        return _finish(front, cur, f_p, f_e, lower_bound, exact=False, least_power=least_power,
                       core_nodes=int(core.size))
    if best is not False:
        choice_core, _ = best
        cur = picks(lam)
        cur[core] = choice_core
    return _finish(front, cur, f_p, f_e, lower_bound, exact=True, least_power=least_power,
                   core_nodes=int(core.size))


def _result(front, ends, f_p, f_e, least_power, exact):
    # unconstrained: each node's last front point has its least energy (lowest power among equals)
    return _finish(front, ends, f_p, f_e, float(f_e[ends].sum()), exact, least_power)


def _finish(front, cur, f_p, f_e, lower_bound, exact, least_power, core_nodes=0) -> KnapsackResult:
    return KnapsackResult(True, front[cur], float(f_e[cur].sum()), float(f_p[cur].sum()),
                          float(lower_bound), exact, least_power, core_nodes)


def _greedy_fill(cur: np.ndarray, f_node, f_p, f_e, budget: float, rounds: int = 64) -> np.ndarray:
    """Spend leftover power: first each node's next front step in order of energy saved per
    watt (the LP's fill), then single switches that save the most energy."""
    cur = cur.copy()
    nxt = cur + 1
    has_next = (nxt < f_node.size)
    has_next[has_next] = f_node[nxt[has_next]] == f_node[cur[has_next]]
    nodes = np.flatnonzero(has_next)
    if nodes.size:
        d_p = f_p[nxt[nodes]] - f_p[cur[nodes]]
        d_e = f_e[nxt[nodes]] - f_e[cur[nodes]]
        by_rate = np.argsort(d_e / np.maximum(d_p, 1e-300), kind="stable")  # most saved per watt first
        left = budget - float(f_p[cur].sum())
        fits = np.cumsum(d_p[by_rate]) <= left
        take = nodes[by_rate[fits & (np.cumsum(~fits) == 0)]]  # the prefix that fits
        cur[take] = nxt[take]
    for _ in range(rounds):
        left = budget - float(f_p[cur].sum())
        d_p = f_p - f_p[cur][f_node]
        d_e = f_e - f_e[cur][f_node]
        ok = (d_p <= left) & (d_e < 0)
        if not ok.any():
            break
        j = int(np.argmin(np.where(ok, d_e, np.inf)))
        cur[f_node[j]] = j
    return cur


def _core_dp(core, alive, f_node, f_p, f_e, rc, starts, ends, base_p, base_e, budget,
             lower_bound, target_e, max_states, max_work):
    """Best core assignment with energy < target_e, None if the state cap was hit, False if none."""
    options = [np.flatnonzero(alive[starts[i]:ends[i] + 1]) + starts[i] for i in core]
    # nodes with near-free alternatives multiply the states: take them last, so the state
    # sets stay small for as long as possible (the final set does not depend on the order)
    second_rc = np.asarray([np.partition(rc[o], 1)[1] for o in options])
    order = np.argsort(-second_rc, kind="stable")
    options = [options[k] for k in order]
    min_p = np.asarray([f_p[o].min() for o in options])
    rest_min_p = np.append(np.cumsum(min_p[::-1])[::-1][1:], 0.0)  # least power of the nodes after k
    rc_room = target_e - lower_bound  # a better plan has Σ rc below this
    s_p = np.asarray([base_p])
    s_e = np.asarray([base_e])
    s_rc = np.zeros(1)
    parents: list[np.ndarray] = []
    picks: list[np.ndarray] = []
    work = 0
    for k, opts in enumerate(options):
        n_o = opts.size
        work += s_p.size * n_o
        if work > max_work:
            return None
        new_p = (s_p[:, None] + f_p[opts][None, :]).ravel()
        new_e = (s_e[:, None] + f_e[opts][None, :]).ravel()
        new_rc = (s_rc[:, None] + rc[opts][None, :]).ravel()
        keep = (new_rc < rc_room) & (new_p + rest_min_p[k] <= budget)
        idx = np.flatnonzero(keep)
        if idx.size == 0:
            return False
        idx = idx[pareto_mask(new_p[idx], new_e[idx])]
        if idx.size > max_states:
            return None
        parents.append(idx // n_o)
        picks.append(opts[idx % n_o])
        s_p, s_e, s_rc = new_p[idx], new_e[idx], new_rc[idx]
    final = np.flatnonzero(s_e < target_e)
    if final.size == 0:
        return False
    best = final[np.lexsort((s_p[final], s_e[final]))[0]]
    choice = np.empty(len(options), dtype=np.int64)
    state = best
    for k in range(len(options) - 1, -1, -1):
        choice[k] = picks[k][state]
        state = parents[k][state]
    out = np.empty(len(options), dtype=np.int64)
    out[order] = choice
    return out, float(s_e[best])
