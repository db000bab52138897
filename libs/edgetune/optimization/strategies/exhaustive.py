"""Exhaustive: profile every configuration of the space — the oracle ("optimal" in Fulcrum)."""

from __future__ import annotations

from edgetune.optimization.strategies.base import SearchGen, SearchStrategy


class Exhaustive(SearchStrategy):
    """Every (mode, batch size); its decision is the nominal optimum of the replayed table."""

    name = "exhaustive"

    def default_budget(self) -> int:
        # every profiling run of the space: a concurrent mode's training point once, not per β
        return len({(m, *p) for m, b in self.space.configurations(self.problem)
                    for p in self.problem.points_for(b)})

    def _search(self) -> SearchGen:
        yield from self.measure(self.space.configurations(self.problem))
