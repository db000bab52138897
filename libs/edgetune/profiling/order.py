"""Profiling orders: which point to measure next.

- :func:`descending_order` — PowerTrain: on some JetPack versions a Jetson accepts only
  high→low CPU and GPU frequency changes without a reboot. The modes are split into as
  few *chains* as practical (each chain steps down or stays level in every watched
  dimension) and the chains are concatenated, highest first; an upward step (a reboot or
  reset on such devices) happens only between chains.
- :class:`CapSearch` — Ahmed et al.'s efficient order under a power cap: largest batch size
  first, frequency upward from the lowest until the measured peak power reaches the cap;
  the next (smaller) batch size resumes from the previous one's highest feasible
  frequency. It is an ask/tell iterator: each measured peak power decides the next point.
  The result is each batch size's highest feasible level and how many points it profiled.
  :func:`gpu_levels` gives its default levels; :func:`fastest_under_cap` picks from the measured
  points (a TuningJob ``method: cap-search`` applies that pick).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from itertools import pairwise

from edgetune import validation
from edgetune.base.mode import PowerMode
from edgetune.errors import InvalidArgument
from edgetune.optimization.joint import under_cap
from edgetune.powermodes.spec import DeviceSpec

#: Dimensions whose upward changes some JetPack versions refuse (PowerTrain, footnote 7).
DOWNWARD_ONLY_DIMS: tuple[str, ...] = ("cpu_mhz", "gpu_mhz")
_ALL_DIMS = ("cores", "cpu_mhz", "gpu_mhz", "emc_mhz")


def _key(mode: PowerMode, dims: Sequence[str]) -> tuple[float, ...]:
    return tuple(float(getattr(mode, d)) for d in dims)


def _dominates(a: tuple[float, ...], b: tuple[float, ...]) -> bool:
    return all(x >= y for x, y in zip(a, b, strict=True))


def descending_chains(modes: Sequence[PowerMode], dims: Sequence[str] = DOWNWARD_ONLY_DIMS) -> list[list[PowerMode]]:
    """Split ``modes`` into chains that never step up in ``dims`` (greedy best-fit cover).

    Modes are taken from the highest down (lexicographic in ``dims``, then the other
    knobs, descending); each joins the chain whose tail dominates it most tightly, or
    starts a new one. With two dimensions this greedy gives the fewest chains.
    """
    for d in dims:
        if d not in _ALL_DIMS:
            raise InvalidArgument("dims", f"unknown dimension {d!r}", ", ".join(_ALL_DIMS))
    rest = [d for d in _ALL_DIMS if d not in dims]
    ordered = sorted(modes, key=lambda m: (_key(m, dims), _key(m, rest)), reverse=True)
    chains: list[list[PowerMode]] = []
    tails: list[tuple[float, ...]] = []
    for mode in ordered:
        k = _key(mode, dims)
        best, best_gap = -1, float("inf")
        for i, tail in enumerate(tails):
            if _dominates(tail, k):
                gap = sum(t - x for t, x in zip(tail, k, strict=True))
                if gap < best_gap:
                    best, best_gap = i, gap
        if best < 0:
            chains.append([mode])
            tails.append(k)
        else:
            chains[best].append(mode)
            tails[best] = k
    return chains


def descending_order(modes: Sequence[PowerMode], dims: Sequence[str] = DOWNWARD_ONLY_DIMS) -> list[PowerMode]:
    """``modes`` reordered so successive points step down in ``dims`` as much as possible."""
    return [m for chain in descending_chains(modes, dims) for m in chain]


def upward_steps(order: Sequence[PowerMode], dims: Sequence[str] = DOWNWARD_ONLY_DIMS) -> int:
    """How many successive pairs raise at least one of ``dims`` (each needs a reset)."""
    return sum(1 for a, b in pairwise(order) if not _dominates(_key(a, dims), _key(b, dims)))


# --- Ahmed et al.: efficient order under a power cap ----------------------------------------------
@dataclass
class CapSearchResult:
    #: Per batch size, the index into ``levels`` of the highest level under the cap (None: none is).
    best_level: dict[int, int | None]
    #: Per batch size, that level itself.
    best: dict[int, PowerMode | None]
    #: Points profiled, in order: (batch_size, level index, peak power).
    profiled_points: list[tuple[int, int, float]] = field(default_factory=list)

    @property
    def profiled(self) -> int:
        return len(self.profiled_points)


class CapSearch:
    """Seed 000's profiling order for a power cap, as an ask/tell iterator.

    ``levels`` are modes in ascending power order (typically the GPU frequency table with
    the other knobs fixed). ``ask()`` gives the next (batch_size, mode) or ``None`` when
    done; ``tell(peak_power_w)`` reports that point's measured peak power.

    If a smaller batch size exceeds the cap already at the level it resumes from (power
    not monotone in batch size after all), the search walks down from there instead of
    trusting the assumption, so the answer stays right, only dearer.
    """

    def __init__(self, levels: Sequence[PowerMode], batch_sizes: Sequence[int], power_cap_w: float) -> None:
        if not levels:
            raise InvalidArgument("levels", "no levels to search")
        validation.batch_sizes(batch_sizes)
        validation.power_budget_w(power_cap_w, "power_cap_w")
        self.levels = list(levels)
        self.batch_sizes = sorted({int(b) for b in batch_sizes}, reverse=True)  # largest first
        self.power_cap_w = float(power_cap_w)
        self._b_index = 0
        self._level = 0
        self._direction = +1  # +1: climbing from feasible; -1: walking down from infeasible
        self._pending: tuple[int, int] | None = None
        self._best: dict[int, int | None] = {}
        self._points: list[tuple[int, int, float]] = []
        self._done = False

    def ask(self) -> tuple[int, PowerMode] | None:
        if self._done:
            return None
        if self._pending is None:
            self._pending = (self.batch_sizes[self._b_index], self._level)
        b, lvl = self._pending
        return b, self.levels[lvl]

    def tell(self, peak_power_w: float) -> None:
        if self._pending is None:
            raise InvalidArgument("tell", "tell() without a pending ask()")
        b, lvl = self._pending
        self._pending = None
        self._points.append((b, lvl, float(peak_power_w)))
        feasible = bool(under_cap(peak_power_w, self.power_cap_w))  # the joint method's rule: strictly under
        first_at_b = b not in self._best
        if first_at_b:
            self._best[b] = None
            self._direction = +1 if feasible else -1
        if self._direction > 0:
            if feasible:
                self._best[b] = lvl
                if lvl + 1 < len(self.levels):
                    self._level = lvl + 1
                    return
            self._next_batch()
        else:  # walking down: stop at the first feasible level or at the bottom
            if feasible:
                self._best[b] = lvl
                self._next_batch()
            elif lvl > 0:
                self._level = lvl - 1
            else:
                self._next_batch()

    def _next_batch(self) -> None:
        prev_best = self._best[self.batch_sizes[self._b_index]]
        self._b_index += 1
        if self._b_index >= len(self.batch_sizes):
            self._done = True
            return
        self._level = prev_best if prev_best is not None else 0

    @property
    def done(self) -> bool:
        return self._done

    def result(self) -> CapSearchResult:
        best_level = {b: self._best.get(b) for b in self.batch_sizes}
        best = {b: (self.levels[i] if i is not None else None) for b, i in best_level.items()}
        return CapSearchResult(best_level, best, list(self._points))


def run_cap_search(search: CapSearch, peak_power_w: Callable[[int, PowerMode], float]) -> CapSearchResult:
    """Drive ``search`` to the end with ``peak_power_w(batch_size, mode)`` (a profiler call)."""
    while (point := search.ask()) is not None:
        search.tell(peak_power_w(*point))
    return search.result()


def gpu_levels(spec: DeviceSpec) -> list[PowerMode]:
    """The default levels of :class:`CapSearch`: the GPU clocks from the lowest up, with the cores,
    CPU and EMC clocks at their highest (the GPU clock dominates a training step's power)."""
    return [PowerMode(max(spec.core_counts), max(spec.cpu_mhz), float(f), max(spec.emc_mhz))
            for f in sorted(spec.gpu_mhz)]


@dataclass(frozen=True)
class CapPoint:
    """One measured point of a cap search: its time per minibatch and its peak power."""

    batch_size: int
    mode: PowerMode
    time_ms: float
    peak_power_w: float


def fastest_under_cap(points: Sequence[CapPoint], power_cap_w: float) -> CapPoint | None:
    """The fastest measured point whose peak power is strictly under the cap
    (:func:`~edgetune.optimization.joint.under_cap`); None when none is. Fastest: least time per sample
    (time per minibatch / batch size), the joint LUT's time for the same samples with no batch-efficiency
    table (every batch size taken to need as many samples); the larger batch on a tie."""
    feasible = [p for p in points if under_cap(p.peak_power_w, power_cap_w)]
    return min(feasible, key=lambda p: (p.time_ms / p.batch_size, -p.batch_size), default=None)
