"""Segmented numpy kernels: one operation over every node's options at once.

A fleet's options are stored flat, sorted by node; a *segment* is one node's run. These
kernels replace per-node Python loops (10,000 nodes × hundreds of options) with a few
vectorised passes. Running minima are made to restart at each segment by offsetting
integer ranks, so results are exact (no float offsets).
"""

from __future__ import annotations

import numpy as np


def segment_starts(seg: np.ndarray, n_segments: int) -> np.ndarray:
    """Start offset of each segment in a flat array sorted by ``seg`` (every segment non-empty)."""
    return np.searchsorted(seg, np.arange(n_segments), side="left")


def dense_rank(values: np.ndarray) -> tuple[np.ndarray, int]:
    """Rank of each value among the distinct values (0 = smallest) and the count of distinct values."""
    uniq, inverse = np.unique(values, return_inverse=True)
    return inverse.astype(np.int64), int(uniq.size)


def segmented_front(seg: np.ndarray, cost_a: np.ndarray, cost_b: np.ndarray,
                    tie: np.ndarray | None = None) -> np.ndarray:
    """Indices of each segment's Pareto front (both costs minimised), sorted by (seg, cost_a).

    Per segment this is :func:`edgetune.optimization.pareto.pareto_mask`: sort by
    (cost_a, cost_b, tie, index) and keep the points that strictly lower the running minimum
    of cost_b; so along a segment's front cost_a rises strictly and cost_b falls strictly,
    and of exact duplicates the first in (tie, index) order stays.
    """
    n = seg.size
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    keys = [np.arange(n)]
    if tie is not None:
        keys.append(tie)
    order = np.lexsort((*keys, cost_b, cost_a, seg))
    rank_b, n_b = dense_rank(cost_b)
    # later segments get strictly smaller keys, so the running minimum restarts at each segment
    key = rank_b[order] - seg[order].astype(np.int64) * (n_b + 1)
    running = np.minimum.accumulate(key)
    keep = np.empty(n, dtype=bool)
    keep[0] = True
    keep[1:] = key[1:] < running[:-1]
    return order[keep]


def segmented_first_argmin(values: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Per segment, the flat index of the first minimum of ``values`` (segments contiguous)."""
    n = values.size
    mins = np.minimum.reduceat(values, starts)
    lengths = np.diff(np.append(starts, n))
    is_min = values == np.repeat(mins, lengths)
    return np.minimum.reduceat(np.where(is_min, np.arange(n), n), starts)
