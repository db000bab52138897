"""Mode grids: the sets of power modes that profiling and search walk over.

A :class:`ModeGrid` is a Cartesian product of per-dimension values (cores, cpu_mhz, gpu_mhz,
emc_mhz), each ascending. It enumerates its modes (as :class:`PowerMode` objects or, fast, as an
``(n, 4)`` float array in row-major order: cores outermost, emc_mhz innermost), maps a mode to its
flat index and back, and gives the one-dimension neighbours and the midpoint that search
strategies (GMD, ALS) step through.

Named grids of a :class:`DeviceSpec` (``GRID_NAMES``):

``full``
    Every table entry of every dimension (Orin AGX: 12 × 29 × 13 × 4 = 18,096).
``powertrain``
    PowerTrain's profiled subset (PowerTrain): every GPU and EMC entry; every other core count
    counted down from the maximum (12, 10, …, 2); every other CPU entry counted down from the
    highest, over the table without its two slowest entries (Orin: 2201.6, 2112, …, 268.8 = 14 of
    the 27 fastest). Orin AGX: 6 × 14 × 13 × 4 = 4,368.
``fulcrum``
    Fulcrum's grid (Fulcrum): ``k`` values per dimension at evenly spaced table indices (index
    ``floor(lo + j·(hi−lo)/(k−1) + ½)``), all of a table that has no more than ``k`` entries:
    cores k=3 at ``round(max·j/3)``, j = 1..3 (4, 8, 12); CPU k=7 from the first entry
    ≥ 400 MHz to the top (422.4 … 2201.6: slower CPU clocks starve the input pipeline);
    GPU k=7 over the whole table (114.75 … 1300.5); EMC k=3 over the table without its slowest
    entry (665.6, 2133, 3199: 204 MHz is a slow tier of its own). Orin AGX: 3 × 7 × 7 × 3 = 441,
    and its :func:`midpoint` is GMD's start 8c/1344/726.75/2133.

The same rules give every built-in device a ``powertrain`` and ``fulcrum`` grid. A grid can also
be built from the distinct values of a measured table (:meth:`ModeGrid.from_modes`, for replay
devices).
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from edgetune.base.mode import MODE_FIELDS, PowerMode
from edgetune.errors import InvalidArgument
from edgetune.powermodes.spec import FREQ_MATCH_REL_TOL, DeviceSpec

#: Grid names accepted by :func:`named_grid` and ``edgetune modes --grid``.
GRID_NAMES: tuple[str, ...] = ("full", "powertrain", "fulcrum")

#: Fulcrum's CPU grid starts at the first table entry at or above this (Orin: 422.4 MHz).
FULCRUM_CPU_FLOOR_MHZ = 400.0


@dataclass(frozen=True)
class ModeGrid:
    """A Cartesian product of ascending per-dimension values, with enumeration and index lookup."""

    cores: tuple[int, ...]
    cpu_mhz: tuple[float, ...]
    gpu_mhz: tuple[float, ...]
    emc_mhz: tuple[float, ...]
    name: str = ""  # "full", "powertrain", "fulcrum", "table"
    device: str = ""  # spec name, when built from one

    def __post_init__(self) -> None:
        for dim in MODE_FIELDS:
            vals = getattr(self, dim)
            if not vals:
                raise InvalidArgument(dim, "a grid needs at least one value per dimension")
            if any(b <= a for a, b in zip(vals, vals[1:], strict=False)):
                raise InvalidArgument(dim, "grid values must be strictly ascending",
                                      " ".join(f"{v:g}" for v in vals))

    # -- construction ----------------------------------------------------------------------
    @classmethod
    def from_values(cls, cores: Iterable[float], cpu_mhz: Iterable[float], gpu_mhz: Iterable[float],
                    emc_mhz: Iterable[float], name: str = "", device: str = "") -> ModeGrid:
        """A grid from any iterables of values (deduplicated and sorted)."""
        core_vals = sorted({float(c) for c in cores})
        if any(c != int(c) or c < 1 for c in core_vals):
            raise InvalidArgument("cores", "core counts must be positive integers",
                                  " ".join(f"{c:g}" for c in core_vals))
        return cls(
            tuple(int(c) for c in core_vals),
            tuple(sorted({float(v) for v in cpu_mhz})),
            tuple(sorted({float(v) for v in gpu_mhz})),
            tuple(sorted({float(v) for v in emc_mhz})),
            name, device,
        )

    @classmethod
    def from_spec(cls, spec: DeviceSpec) -> ModeGrid:
        """The ``full`` grid: every table entry of ``spec``."""
        return cls(tuple(spec.core_counts), spec.cpu_mhz, spec.gpu_mhz, spec.emc_mhz, "full", spec.name)

    @classmethod
    def from_modes(cls, modes: Iterable[PowerMode | Mapping] | np.ndarray, name: str = "table",
                   device: str = "") -> ModeGrid:
        """The grid spanned by the distinct values per dimension of a mode table.

        ``modes`` is an ``(n, 4)`` array, or PowerModes, or rows with the four mode columns
        (docs/contract.md). The grid is the product of those values; it may hold modes the table lacks
        (:meth:`contains_all` tells whether the table is the whole product).
        """
        arr = _as_array(modes)
        if arr.shape[0] == 0:
            raise InvalidArgument("modes", "cannot build a grid from an empty mode table")
        return cls.from_values(arr[:, 0], arr[:, 1], arr[:, 2], arr[:, 3], name, device)

    # -- sizes -----------------------------------------------------------------------------
    def values(self, dim: str) -> tuple[float, ...]:
        """The grid's values of one dimension (``cores`` as floats, like ``DeviceSpec.table``)."""
        if dim == "cores":
            return tuple(float(c) for c in self.cores)
        if dim in ("cpu_mhz", "gpu_mhz", "emc_mhz"):
            return getattr(self, dim)
        raise InvalidArgument("dimension", f"unknown dimension {dim!r}", ", ".join(MODE_FIELDS))

    @property
    def shape(self) -> tuple[int, int, int, int]:
        return (len(self.cores), len(self.cpu_mhz), len(self.gpu_mhz), len(self.emc_mhz))

    @property
    def n_modes(self) -> int:
        return math.prod(self.shape)

    def __len__(self) -> int:
        return self.n_modes

    # -- enumeration -----------------------------------------------------------------------
    def array(self) -> np.ndarray:
        """All modes as an ``(n, 4)`` float64 array, rows in :meth:`index` order (fast path)."""
        axes = [np.asarray(self.values(d), dtype=np.float64) for d in MODE_FIELDS]
        mesh = np.meshgrid(*axes, indexing="ij")
        return np.stack([m.reshape(-1) for m in mesh], axis=1)

    def modes(self) -> list[PowerMode]:
        """All modes as PowerMode objects, in :meth:`index` order."""
        return list(iter(self))

    def __iter__(self) -> Iterator[PowerMode]:
        for c in self.cores:
            for cpu in self.cpu_mhz:
                for gpu in self.gpu_mhz:
                    for emc in self.emc_mhz:
                        yield PowerMode(c, cpu, gpu, emc)

    # -- lookup ----------------------------------------------------------------------------
    def position(self, dim: str, value: float) -> int:
        """Index of ``value`` among the grid's ``dim`` values (within rounding); raises naming the field."""
        vals = self.values(dim)
        i = bisect_left(vals, value)
        for j in (i - 1, i):
            if 0 <= j < len(vals) and abs(vals[j] - value) <= FREQ_MATCH_REL_TOL * max(vals[j], 1.0):
                return j
        raise InvalidArgument(dim, f"{value:g} is not in the {self._label()} grid", _describe(vals))

    def indices(self, mode: PowerMode) -> tuple[int, int, int, int]:
        """Per-dimension positions of ``mode``."""
        return tuple(self.position(d, float(v)) for d, v in zip(MODE_FIELDS, mode.as_tuple(), strict=True))  # type: ignore[return-value]

    def index(self, mode: PowerMode) -> int:
        """Flat index of ``mode`` in :meth:`array` / :meth:`modes` order."""
        return int(np.ravel_multi_index(self.indices(mode), self.shape))

    def mode_at(self, index: int) -> PowerMode:
        """The mode at flat ``index``."""
        if not 0 <= index < self.n_modes:
            raise InvalidArgument("index", f"{index} is outside the {self._label()} grid", f"0 … {self.n_modes - 1}")
        i, j, k, m = np.unravel_index(index, self.shape)
        return PowerMode(self.cores[i], self.cpu_mhz[j], self.gpu_mhz[k], self.emc_mhz[m])

    def snap(self, mode: PowerMode) -> PowerMode:
        """``mode`` with the grid's exact values (raises naming the first field not in the grid)."""
        i, j, k, m = self.indices(mode)
        return PowerMode(self.cores[i], self.cpu_mhz[j], self.gpu_mhz[k], self.emc_mhz[m])

    def __contains__(self, mode: object) -> bool:
        if not isinstance(mode, PowerMode):
            return False
        try:
            self.indices(mode)
        except InvalidArgument:
            return False
        return True

    def contains_all(self, modes: Iterable[PowerMode] | np.ndarray) -> bool:
        """Whether ``modes`` covers every grid point (a table that is the whole product)."""
        arr = _as_array(modes)
        rows = {tuple(r) for r in arr.tolist()}
        return all(tuple(r) in rows for r in self.array().tolist())

    # -- special modes ---------------------------------------------------------------------
    def maxn(self) -> PowerMode:
        """Every dimension at its highest grid value."""
        return PowerMode(self.cores[-1], self.cpu_mhz[-1], self.gpu_mhz[-1], self.emc_mhz[-1])

    def minimum(self) -> PowerMode:
        return PowerMode(self.cores[0], self.cpu_mhz[0], self.gpu_mhz[0], self.emc_mhz[0])

    def midpoint(self) -> PowerMode:
        """The middle value of each dimension (the lower middle when a dimension has an even count)."""
        def mid(vals: Sequence[float]) -> float:
            return vals[(len(vals) - 1) // 2]

        return PowerMode(int(mid(self.cores)), mid(self.cpu_mhz), mid(self.gpu_mhz), mid(self.emc_mhz))

    def neighbours(self, mode: PowerMode, dim: str) -> tuple[PowerMode | None, PowerMode | None]:
        """The modes one step lower and one step higher along ``dim`` (``None`` at an edge)."""
        if dim not in MODE_FIELDS:
            raise InvalidArgument("dimension", f"unknown dimension {dim!r}", ", ".join(MODE_FIELDS))
        idx = list(self.indices(mode))
        axis = MODE_FIELDS.index(dim)
        out: list[PowerMode | None] = []
        for step in (-1, 1):
            j = idx[axis] + step
            if 0 <= j < self.shape[axis]:
                moved = list(idx)
                moved[axis] = j
                out.append(self.mode_at(int(np.ravel_multi_index(tuple(moved), self.shape))))
            else:
                out.append(None)
        return out[0], out[1]

    def _label(self) -> str:
        return " ".join(p for p in (self.device, self.name) if p) or "mode"


# -- named grids of a spec -------------------------------------------------------------------
def full_grid(spec: DeviceSpec) -> ModeGrid:
    """Every table entry of every dimension."""
    return ModeGrid.from_spec(spec)


def powertrain_grid(spec: DeviceSpec) -> ModeGrid:
    """PowerTrain's uniform subset (module docstring); Orin AGX: 4,368 modes."""
    top = spec.max_cores
    cores = [c for c in range(top, 0, -2) if c in spec.core_counts]
    cpu_candidates = spec.cpu_mhz[2:] if len(spec.cpu_mhz) > 2 else spec.cpu_mhz
    cpu = cpu_candidates[::-1][::2]
    return ModeGrid.from_values(cores, cpu, spec.gpu_mhz, spec.emc_mhz, "powertrain", spec.name)


def fulcrum_grid(spec: DeviceSpec) -> ModeGrid:
    """Fulcrum's coarse grid (module docstring); Orin AGX: 441 modes."""
    top = spec.max_cores
    cores = {_nearest(spec.core_counts, top * j / 3) for j in (1, 2, 3)}
    cpu_start = next((i for i, f in enumerate(spec.cpu_mhz) if f >= FULCRUM_CPU_FLOOR_MHZ), 0)
    cpu = _evenly(spec.cpu_mhz[cpu_start:], 7)
    gpu = _evenly(spec.gpu_mhz, 7)
    emc = _evenly(spec.emc_mhz[1:] if len(spec.emc_mhz) > 1 else spec.emc_mhz, 3)
    return ModeGrid.from_values(cores, cpu, gpu, emc, "fulcrum", spec.name)


_GRID_BUILDERS = {"full": full_grid, "powertrain": powertrain_grid, "fulcrum": fulcrum_grid}


def named_grid(spec: DeviceSpec, name: str = "full") -> ModeGrid:
    """The grid called ``name`` (``full``, ``powertrain``, ``fulcrum``) of ``spec``."""
    try:
        builder = _GRID_BUILDERS[name]
    except KeyError:
        raise InvalidArgument("grid", f"unknown grid {name!r}", ", ".join(GRID_NAMES)) from None
    return builder(spec)


def enumerate_modes(spec: DeviceSpec, name: str = "full") -> list[PowerMode]:
    """The modes of grid ``name`` of ``spec`` as PowerMode objects."""
    return named_grid(spec, name).modes()


def modes_array(spec: DeviceSpec, name: str = "full") -> np.ndarray:
    """The modes of grid ``name`` of ``spec`` as an ``(n, 4)`` float array (cores, cpu, gpu, emc)."""
    return named_grid(spec, name).array()


# -- free functions over a spec or a grid ------------------------------------------------------
def as_grid(spec_or_grid: DeviceSpec | ModeGrid) -> ModeGrid:
    return spec_or_grid if isinstance(spec_or_grid, ModeGrid) else ModeGrid.from_spec(spec_or_grid)


def neighbours(spec_or_grid: DeviceSpec | ModeGrid, mode: PowerMode,
               dim: str) -> tuple[PowerMode | None, PowerMode | None]:
    """Next lower and next higher mode along ``dim`` within the grid (``None`` at an edge)."""
    return as_grid(spec_or_grid).neighbours(mode, dim)


def midpoint(spec_or_grid: DeviceSpec | ModeGrid) -> PowerMode:
    """The grid's middle mode (GMD's starting point; Orin fulcrum grid: 8c/1344/726.75/2133)."""
    return as_grid(spec_or_grid).midpoint()


def maxn(spec_or_grid: DeviceSpec | ModeGrid) -> PowerMode:
    """Every core online and every clock at its highest value."""
    return as_grid(spec_or_grid).maxn()


# -- helpers ---------------------------------------------------------------------------------
def _evenly(table: tuple[float, ...], k: int) -> tuple[float, ...]:
    """``k`` entries of ``table`` at evenly spaced indices, both ends included (all if ≤ k)."""
    n = len(table)
    if n <= k:
        return tuple(table)
    # round half up, not numpy's half-to-even, so the rule reads the same by hand
    return tuple(table[int(math.floor(j * (n - 1) / (k - 1) + 0.5))] for j in range(k))


def _nearest(values: tuple[int, ...], target: float) -> int:
    return min(values, key=lambda v: (abs(v - target), -v))


def _as_array(modes: Iterable[PowerMode | Mapping] | np.ndarray) -> np.ndarray:
    if isinstance(modes, np.ndarray):
        arr = np.asarray(modes, dtype=np.float64)
    else:
        rows = []
        for m in modes:
            if isinstance(m, PowerMode):
                rows.append(m.as_tuple())
            else:
                rows.append(PowerMode.from_mapping(m).as_tuple())
        arr = np.asarray(rows, dtype=np.float64).reshape(-1, 4)
    if arr.ndim != 2 or arr.shape[1] != 4:
        raise InvalidArgument("modes", f"expected an (n, 4) mode array, got shape {arr.shape}",
                              ", ".join(MODE_FIELDS))
    return arr


def _describe(vals: tuple[float, ...]) -> str:
    txt = [f"{v:g}" for v in vals]
    if len(txt) > 8:
        return f"{len(txt)} values: " + " ".join(txt[:3]) + " … " + " ".join(txt[-3:])
    return " ".join(txt)
