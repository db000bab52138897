"""Random-N: profile N configurations drawn uniformly, decide on the observed front (Fulcrum's RND).

Training draws N modes. Inference and concurrent draw whole modes and profile every inference
batch size of each (the paper's RND150 = 30 modes × 5 batch sizes), ⌈N / |B|⌉ modes; the
budget counts profiling runs, so a concurrent mode (5 inference points and its training point)
costs 6 and RND150 there profiles 25 whole modes.
"""

from __future__ import annotations

import math

import numpy as np

from edgetune.base.mode import PowerMode
from edgetune.optimization.strategies.base import SearchGen, SearchStrategy

#: Default N per problem (the paper's RND50 for training, RND150 for inference / concurrent).
RANDOM_BUDGETS = {"train": 50, "infer": 150, "concurrent": 150}


def random_configurations(strategy: SearchStrategy, n: int) -> list[tuple[PowerMode, int]]:
    """``n`` configurations of whole random modes (every batch size of a drawn mode), seeded."""
    rng = np.random.default_rng(strategy.seed)
    modes = list(strategy.space.modes)
    sizes = strategy.space.batch_sizes(strategy.problem)
    n_modes = min(len(modes), math.ceil(n / len(sizes)))
    picked = rng.choice(len(modes), size=n_modes, replace=False)
    return [(modes[i], b) for i in picked for b in sizes][:n]


class RandomSearch(SearchStrategy):
    """Random-N (``budget`` = N)."""

    name = "random"

    def default_budget(self) -> int:
        return RANDOM_BUDGETS[self.problem.kind]

    def _search(self) -> SearchGen:
        yield from self.measure(random_configurations(self, self.budget))
