"""Typed records of the tuning workflow: measured points, predictions, decisions, the option table
(a node's options for round planning), batch efficiency.

Plain numpy-backed dataclasses (no protobuf): the wire tables (:mod:`edgetune.proto.serde.tables`) decode
into :class:`Predictions` and the gRPC clients (:mod:`edgetune.clients`) convert at the edge. Modes are
``(n, 4)`` float arrays of ``cores, cpu_mhz, gpu_mhz, emc_mhz``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from edgetune.base.mode import MODE_FIELDS, PowerMode
from edgetune.errors import InvalidArgument

ModeKey = tuple[int, float, float, float]


def mode_key(mode: Sequence[float] | np.ndarray) -> ModeKey:
    """A hashable key of one mode (clocks rounded to the kHz)."""
    return (int(mode[0]), round(float(mode[1]), 3), round(float(mode[2]), 3), round(float(mode[3]), 3))


def mode_label(mode: Sequence[float] | np.ndarray) -> str:
    return f"{int(mode[0])}c/{float(mode[1]):g}/{float(mode[2]):g}/{float(mode[3]):g}"


def _modes(a: np.ndarray | Sequence[Sequence[float]]) -> np.ndarray:
    return np.asarray(a, dtype=float).reshape(-1, len(MODE_FIELDS))


@dataclass(frozen=True)
class Points:
    """Measured points of one (device, workload, role): a mode, batch size, time and power each."""

    modes: np.ndarray
    batch_size: np.ndarray
    time_ms: np.ndarray
    power_w: np.ndarray
    device: str = ""
    workload: str = ""
    role: str = "train"

    def __post_init__(self) -> None:
        object.__setattr__(self, "modes", _modes(self.modes))
        n = len(self.modes)
        for name, dtype in (("batch_size", np.int64), ("time_ms", float), ("power_w", float)):
            arr = np.asarray(getattr(self, name), dtype=dtype).reshape(-1)
            if arr.size != n:
                raise ValueError(f"{name} has {arr.size} values for {n} modes")
            object.__setattr__(self, name, arr)

    def __len__(self) -> int:
        return int(len(self.modes))

    @classmethod
    def empty(cls, device: str = "", workload: str = "", role: str = "train") -> Points:
        return cls(np.empty((0, 4)), np.empty(0), np.empty(0), np.empty(0), device, workload, role)

    def __add__(self, other: Points) -> Points:
        return Points(np.vstack([self.modes, other.modes]), np.concatenate([self.batch_size, other.batch_size]),
                      np.concatenate([self.time_ms, other.time_ms]), np.concatenate([self.power_w, other.power_w]),
                      self.device or other.device, self.workload or other.workload, self.role)

    def subset(self, index: np.ndarray | Sequence[int]) -> Points:
        i = np.asarray(index, dtype=int)
        return Points(self.modes[i], self.batch_size[i], self.time_ms[i], self.power_w[i], self.device,
                      self.workload, self.role)

    def by_key(self) -> dict[ModeKey, int]:
        """Row of each mode (the last one when a mode was measured twice)."""
        return {mode_key(m): i for i, m in enumerate(self.modes)}


@dataclass(frozen=True)
class Predictions:
    """Predicted time and power of candidate options (a mode and a batch size each), stds optional."""

    modes: np.ndarray
    batch_size: np.ndarray
    time_ms: np.ndarray
    power_w: np.ndarray
    time_std_ms: np.ndarray | None = None
    power_std_w: np.ndarray | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "modes", _modes(self.modes))
        n = len(self.modes)
        for name in ("batch_size", "time_ms", "power_w", "time_std_ms", "power_std_w"):
            value = getattr(self, name)
            if value is None:
                continue
            arr = np.asarray(value, dtype=np.int64 if name == "batch_size" else float).reshape(-1)
            if arr.size != n:
                raise ValueError(f"{name} has {arr.size} values for {n} options")
            object.__setattr__(self, name, arr)

    def __len__(self) -> int:
        return int(len(self.modes))

    def mode(self, i: int) -> PowerMode:
        c, cpu, gpu, emc = self.modes[i].tolist()
        return PowerMode(int(c), float(cpu), float(gpu), float(emc))

    @classmethod
    def from_rows(cls, rows: Sequence[Mapping[str, Any]]) -> Predictions:
        """Columns of row dicts (profile-table keys: cores ... emc_mhz, batch_size, time_ms, power_w,
        optional time_std_ms / power_std_w, a std column only when every row has it)."""
        def col(name: str, dtype: Any = float) -> np.ndarray:
            return np.fromiter((r[name] for r in rows), dtype, len(rows))

        def std(name: str) -> np.ndarray | None:
            return col(name) if rows and all(r.get(name) is not None for r in rows) else None

        modes = np.array([[r[c] for c in MODE_FIELDS] for r in rows], dtype=float).reshape(-1, 4)
        return cls(modes, col("batch_size", np.int64), col("time_ms"), col("power_w"), std("time_std_ms"),
                   std("power_std_w"))

    def subset(self, index: np.ndarray | Sequence[int]) -> Predictions:
        """The rows at ``index``, in that order."""
        i = np.asarray(index, dtype=np.int64)
        return Predictions(self.modes[i], self.batch_size[i], self.time_ms[i], self.power_w[i],
                           None if self.time_std_ms is None else self.time_std_ms[i],
                           None if self.power_std_w is None else self.power_std_w[i])

    def slice(self, start: int, stop: int) -> Predictions:
        """Rows ``start:stop`` (views, no copy): one streamed chunk."""
        s = slice(start, stop)
        return Predictions(self.modes[s], self.batch_size[s], self.time_ms[s], self.power_w[s],
                           None if self.time_std_ms is None else self.time_std_ms[s],
                           None if self.power_std_w is None else self.power_std_w[s])

    @staticmethod
    def concat(parts: Sequence[Predictions]) -> Predictions:
        """Chunks joined in order (a std column only when every chunk has it)."""
        if not parts:
            return Predictions(np.empty((0, 4)), np.empty(0, np.int64), np.empty(0), np.empty(0))

        def std(name: str) -> np.ndarray | None:
            cols = [getattr(p, name) for p in parts]
            return None if any(c is None for c in cols) else np.concatenate(cols)

        return Predictions(np.concatenate([p.modes for p in parts]), np.concatenate([p.batch_size for p in parts]),
                           np.concatenate([p.time_ms for p in parts]), np.concatenate([p.power_w for p in parts]),
                           std("time_std_ms"), std("power_std_w"))

    def with_power_std(self, power_std_w: np.ndarray) -> Predictions:
        return Predictions(self.modes, self.batch_size, self.time_ms, self.power_w, self.time_std_ms, power_std_w)

    def power_at(self, points: Points) -> tuple[np.ndarray, np.ndarray]:
        """(predicted, measured) power of the measured points whose mode is predicted here."""
        at = {mode_key(m): i for i, m in enumerate(self.modes)}
        pairs = [(at[mode_key(m)], j) for j, m in enumerate(points.modes) if mode_key(m) in at]
        return (np.asarray([self.power_w[i] for i, _ in pairs], dtype=float),
                np.asarray([points.power_w[j] for _, j in pairs], dtype=float))


@dataclass(frozen=True)
class Choice:
    """A selector's answer over a pool of options: the row chosen, or why none fits."""

    feasible: bool
    index: int | None = None
    power_bound_w: float | None = None
    reason: str = ""


@dataclass(frozen=True)
class Decision:
    """The workflow's answer for one budget: the configuration chosen and what the device measured."""

    budget_w: float
    feasible: bool
    index: int | None = None  # row of the node's candidate modes
    mode: tuple[float, ...] | None = None
    batch_size: int = 0
    predicted_time_ms: float | None = None
    predicted_power_w: float | None = None
    power_upper_w: float | None = None
    measured_time_ms: float | None = None
    measured_power_w: float | None = None
    attempts: int = 0
    reason: str = ""
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def verified(self) -> bool:
        """Measured on the device."""
        return self.measured_power_w is not None

    @property
    def within_budget(self) -> bool:
        return self.measured_power_w is not None and self.measured_power_w <= self.budget_w


#: An option table's columns (the stored round keeps them as arrays of these names).
OPTION_COLUMNS = ("batch_size", "time_ms", "power_w", "modes")


@dataclass(frozen=True)
class OptionTable:
    """A node's options for round planning: (mode × batch size) rows with their time and the power
    the planner holds to the node's budget; ``modes`` is ``(n, 4)``.

    ``power_w`` is whatever the source vouches for: a tuner's safe power for predicted options (the
    upper bound mean + z(1 - risk) · calibrated σ, :meth:`edgetune.tuning.safety.SafetyState.option_table`),
    the measured power for profiled points (the coordinator's stored measurements), or the larger of
    the two for a verified choice. The stored round keeps it as :meth:`to_json`'s lists.
    """

    batch_size: np.ndarray
    time_ms: np.ndarray
    power_w: np.ndarray
    modes: np.ndarray

    def __len__(self) -> int:
        return int(self.batch_size.size)

    @classmethod
    def from_rows(cls, rows: Sequence[tuple[PowerMode, int, float, float]]) -> OptionTable:
        """From ``(mode, batch_size, time_ms, power_w)`` rows."""
        return cls(np.asarray([r[1] for r in rows], dtype=np.int64), np.asarray([r[2] for r in rows], dtype=float),
                   np.asarray([r[3] for r in rows], dtype=float),
                   np.asarray([r[0].as_tuple() for r in rows], dtype=float).reshape(len(rows), 4))

    def to_json(self) -> dict[str, Any]:
        return {"batch_size": self.batch_size.tolist(), "time_ms": self.time_ms.tolist(),
                "power_w": self.power_w.tolist(), "modes": self.modes.tolist()}

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> OptionTable:
        """From :meth:`to_json`'s lists (or arrays of the same names)."""
        n = len(doc["batch_size"])
        return cls(np.asarray(doc["batch_size"], dtype=np.int64), np.asarray(doc["time_ms"], dtype=float),
                   np.asarray(doc["power_w"], dtype=float), np.asarray(doc["modes"], dtype=float).reshape(n, 4))


@dataclass(frozen=True)
class BatchEfficiency:
    """``passes_to_target`` per batch size; ``inf`` means the target is never reached."""

    passes_by_batch: Mapping[int, float]

    @classmethod
    def from_pairs(cls, pairs: Mapping[int, float] | Sequence[tuple[int, float]]) -> BatchEfficiency:
        items = pairs.items() if isinstance(pairs, Mapping) else pairs
        out: dict[int, float] = {}
        for b, n in items:
            n = math.inf if n is None or (isinstance(n, float) and math.isnan(n)) else float(n)
            if n <= 0:
                raise InvalidArgument(f"passes_to_target[{b}]", f"{n:g} must be positive", "> 0, or inf for never")
            out[int(b)] = n
        return cls(out)

    def passes(self, batch_size: np.ndarray) -> np.ndarray:
        """Passes for each batch size; batch sizes without data count as never reaching the target."""
        return np.asarray([self.passes_by_batch.get(int(b), math.inf) for b in batch_size], dtype=float)

    def ratio(self) -> dict[int, float]:
        """The paper's r_b = N(b) / max_b N(b) over the batch sizes that reach the target."""
        finite = [n for n in self.passes_by_batch.values() if math.isfinite(n)]
        top = max(finite) if finite else math.inf
        return {b: n / top for b, n in self.passes_by_batch.items()}
