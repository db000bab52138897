"""Strategy names → classes (``edgetune search --strategy``)."""

from __future__ import annotations

from typing import Any

from edgetune.errors import InvalidArgument
from edgetune.optimization.problems import Problem
from edgetune.optimization.strategies.als import ALS
from edgetune.optimization.strategies.base import SearchSpace, SearchStrategy
from edgetune.optimization.strategies.exhaustive import Exhaustive
from edgetune.optimization.strategies.fixed import MaxN, Preset
from edgetune.optimization.strategies.gmd import GMD
from edgetune.optimization.strategies.nn import NNSearch
from edgetune.optimization.strategies.random import RandomSearch

STRATEGIES: dict[str, type[SearchStrategy]] = {
    cls.name: cls for cls in (GMD, ALS, RandomSearch, NNSearch, Exhaustive, MaxN, Preset)
}


def strategy_class(name: str) -> type[SearchStrategy]:
    try:
        return STRATEGIES[name]
    except KeyError:
        raise InvalidArgument("strategy", f"unknown strategy {name!r}", ", ".join(STRATEGIES)) from None


def make_strategy(name: str, problem: Problem, space: SearchSpace, *, budget: int | None = None, seed: int = 0,
                  **options: Any) -> SearchStrategy:
    """A fresh strategy called ``name`` (``random-50`` / ``nn-250`` set the budget N as well)."""
    base, _, n = name.partition("-")
    if n:
        if not n.isdigit() or base not in ("random", "nn"):
            raise InvalidArgument("strategy", f"unknown strategy {name!r}", ", ".join(STRATEGIES) + ", random-N, nn-N")
        budget = int(n) + (1 if base == "nn" else 0)
    return strategy_class(base)(problem, space, budget=budget, seed=seed, **options)
