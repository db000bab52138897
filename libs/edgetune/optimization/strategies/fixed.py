"""Fixed-mode baselines: MAXN, and the nvpmodel preset that matches the power budget.

Neither searches the modes: MAXN is what a Jetson runs by default; *preset* picks the preset
with the largest nominal budget within the power budget (MODE_15W / 30W / 50W on Orin, MAXN
when the budget covers the device's peak), the lowest preset otherwise, snapped down onto the
grid. Inference and concurrent still profile every batch size at that mode and decide among
them; the decision is infeasible when the mode itself misses a budget.
"""

from __future__ import annotations

from edgetune.base.mode import PowerMode
from edgetune.errors import FailedPrecondition
from edgetune.optimization.problems import Solution
from edgetune.optimization.strategies.base import SearchGen, SearchStrategy


class _FixedMode(SearchStrategy):
    def default_budget(self) -> int:
        return len(self.space.batch_sizes(self.problem))

    def chosen_mode(self) -> PowerMode:
        raise NotImplementedError

    def _search(self) -> SearchGen:
        mode = self.chosen_mode()
        yield from self.measure([(mode, b) for b in self.space.batch_sizes(self.problem)])

    def best(self) -> Solution:
        decision = self.problem.solve(self.obs)
        if decision.feasible or not self.obs:
            return decision
        mode = self.chosen_mode()
        evaluated = (self.problem.evaluate(mode, b, self.obs) for b in self.space.batch_sizes(self.problem))
        evs = [e for e in evaluated if e is not None]
        closest = min(evs, key=lambda e: e.power_w) if evs else None
        return self.problem.decide(closest)


class MaxN(_FixedMode):
    """Every core online, every clock at its top grid value."""

    name = "maxn"

    def chosen_mode(self) -> PowerMode:
        return self.space.grid.maxn()


class Preset(_FixedMode):
    """The nvpmodel preset for the power budget (module docstring)."""

    name = "preset"

    def chosen_mode(self) -> PowerMode:
        presets = self.space.presets
        if not presets:
            raise FailedPrecondition("the replayed device has no nvpmodel presets (name a known device "
                                     "in the table's 'device' column)")
        budget = self.problem.power_budget_w
        cap = self.space.max_power_w

        def nominal(p) -> float:
            return p.budget_w if p.budget_w is not None else (cap if cap is not None else float("inf"))

        within = [p for p in presets if nominal(p) <= budget]
        chosen = max(within, key=nominal) if within else min(presets, key=nominal)
        return _snap_down(self.space.grid, chosen.mode)


def _snap_down(grid, mode: PowerMode) -> PowerMode:
    """Each dimension at the largest grid value not above the preset's (the lowest if none)."""
    def down(values, v):
        below = [x for x in values if x <= v + 1e-6]
        return below[-1] if below else values[0]

    return PowerMode(int(down(grid.cores, mode.cores)), down(grid.cpu_mhz, mode.cpu_mhz),
                     down(grid.gpu_mhz, mode.gpu_mhz), down(grid.emc_mhz, mode.emc_mhz))
