"""Search strategies over power modes and batch sizes, behind one ask/tell interface.

- ``base``        :class:`SearchStrategy` (ask / tell / best / state_dict / from_state), Trial, SearchSpace
- ``gmd``         Fulcrum's gradient-descent multi-dimensional search (budget 10 / 11 / 15)
- ``als``         Fulcrum's active-learning sampling (50 / ≤ 145), NN-guided, decided on observations
- ``guide``       the NN guide (256-128-64-1, asymmetric MAPE) behind a small ``Guide`` interface
- ``random``      Random-N;  ``nn``  NN-N (predict, pick, profile the pick)
- ``exhaustive``  every configuration (the oracle);  ``fixed``  MAXN and nvpmodel-preset baselines
- ``registry``    names → classes;  ``driver``  :func:`run_search` against a ReplayDevice
"""

from edgetune.optimization.strategies.als import ALS
from edgetune.optimization.strategies.base import SearchSpace, SearchStrategy, Trial
from edgetune.optimization.strategies.driver import SearchResult, run_search, search_space
from edgetune.optimization.strategies.exhaustive import Exhaustive
from edgetune.optimization.strategies.fixed import MaxN, Preset
from edgetune.optimization.strategies.gmd import GMD
from edgetune.optimization.strategies.nn import NNSearch
from edgetune.optimization.strategies.random import RandomSearch
from edgetune.optimization.strategies.registry import STRATEGIES, make_strategy, strategy_class

__all__ = [
    "ALS", "GMD", "STRATEGIES", "Exhaustive", "MaxN", "NNSearch", "Preset", "RandomSearch", "SearchResult",
    "SearchSpace", "SearchStrategy", "Trial", "make_strategy", "run_search", "search_space", "strategy_class",
]
