"""Pareto fronts over two objectives to minimise, exact and vectorised.

The front of (time, power) is what every selection in edgetune walks: a mode off the front is
slower *and* hungrier than some other mode, so no budget ever prefers it. Throughput fronts
are the same computation on (-throughput, power); :func:`nondominated` is the front over any
number of objectives (ALS's concurrent quadrants add latency). :func:`pick_far` spreads picks along a front
by power (ALS and frontier sampling profile the front points farthest from what was profiled).
"""

from __future__ import annotations

import numpy as np


def pareto_mask(cost_a: np.ndarray, cost_b: np.ndarray) -> np.ndarray:
    """Boolean mask of the points no other point dominates (both costs minimised).

    A point is dominated when another is ≤ in both costs and < in at least one. Among exact
    duplicates on the front, the first occurrence is kept. O(n log n): sort by ``cost_a``
    (ties by ``cost_b``), then keep the points that strictly lower the running minimum of
    ``cost_b``.
    """
    a = np.asarray(cost_a, dtype=float).ravel()
    b = np.asarray(cost_b, dtype=float).ravel()
    if a.shape != b.shape:
        raise ValueError(f"cost arrays differ in length: {a.size} vs {b.size}")
    mask = np.zeros(a.size, dtype=bool)
    if a.size == 0:
        return mask
    order = np.lexsort((b, a))  # by a, then b
    b_sorted = b[order]
    running_min = np.minimum.accumulate(b_sorted)
    # strictly better than everything before it in b (first element always kept)
    keep = np.empty(a.size, dtype=bool)
    keep[0] = True
    keep[1:] = b_sorted[1:] < running_min[:-1]
    mask[order[keep]] = True
    return mask


def pareto_front(time_ms: np.ndarray, power_w: np.ndarray) -> np.ndarray:
    """Indices of the (time, power) front, ordered by increasing time (decreasing power)."""
    t = np.asarray(time_ms, dtype=float)
    idx = np.flatnonzero(pareto_mask(t, power_w))
    return idx[np.argsort(t[idx], kind="stable")]


def throughput_front(throughput: np.ndarray, power_w: np.ndarray) -> np.ndarray:
    """Indices of the (throughput ↑, power ↓) front, ordered by increasing throughput."""
    thr = np.asarray(throughput, dtype=float)
    idx = np.flatnonzero(pareto_mask(-thr, power_w))
    return idx[np.argsort(thr[idx], kind="stable")]


def nondominated(costs: np.ndarray) -> np.ndarray:
    """Boolean mask of the rows no other row dominates (every column a cost to minimise)."""
    c = np.asarray(costs, dtype=np.float64)
    if c.ndim != 2 or c.shape[0] == 0:
        return np.zeros(c.shape[0] if c.ndim else 0, dtype=bool)
    dominated = np.zeros(c.shape[0], dtype=bool)
    for start in range(0, c.shape[0], 512):  # bounded memory: 512 × n × columns at a time
        blk = c[start:start + 512]
        le = np.all(c[None, :, :] <= blk[:, None, :], axis=2)
        lt = np.any(c[None, :, :] < blk[:, None, :], axis=2)
        dominated[start:start + 512] = np.any(le & lt, axis=1)
    return ~dominated


def pick_far(pred_power_w: np.ndarray, observed_power_w: np.ndarray, k: int) -> np.ndarray:
    """Positions of the ``k`` candidates whose power is farthest from every observed power
    (largest minimum distance; stable order; all equally far when nothing was observed)."""
    pred = np.asarray(pred_power_w, dtype=float).ravel()
    seen = np.asarray(observed_power_w, dtype=float).ravel()
    if seen.size == 0:
        dist = np.full(pred.size, np.inf)
    else:
        dist = np.abs(pred[:, None] - seen[None, :]).min(axis=1)
    return np.argsort(-dist, kind="stable")[:k]
