"""Features and targets of the time / power predictors: columns, scaling, target transforms.

A predictor's input is a power mode — ``cores, cpu_mhz, gpu_mhz, emc_mhz`` — plus
``batch_size`` when the table it learns from has more than one batch size. Inputs are
standardised (mean 0, std 1 per column, PowerTrain's StandardScaler) with the statistics of
the table a predictor was first fitted on; the same scaling travels with the model file so
that a transferred or reloaded predictor sees its inputs exactly as at training time.

Targets: ``time_ms`` is learned as ``log(time_ms)`` (minibatch time spans 30× over a mode
space and errors are judged relative, MAPE); ``power_w`` as is. Either is then standardised.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from edgetune.base.mode import MODE_FIELDS
from edgetune.errors import InvalidArgument
from edgetune.tables import Table

BATCH_FEATURE = "batch_size"
#: The two quantities a TimePowerModel predicts, and the column names of their std.
TARGETS: tuple[str, ...] = ("time_ms", "power_w")
STD_COLUMNS: dict[str, str] = {"time_ms": "time_std_ms", "power_w": "power_std_w"}
#: Target transforms: ``log`` for quantities judged by relative error over a wide range.
TRANSFORMS: tuple[str, ...] = ("log", "identity")
DEFAULT_TRANSFORM: dict[str, str] = {"time_ms": "log", "power_w": "identity"}


def feature_columns(table: Table) -> tuple[str, ...]:
    """The mode columns, plus ``batch_size`` when ``table`` holds more than one batch size."""
    if table.has(BATCH_FEATURE) and len({r[BATCH_FEATURE] for r in table.rows}) > 1:
        return (*MODE_FIELDS, BATCH_FEATURE)
    return MODE_FIELDS


def mode_features(modes: np.ndarray, batch_size: np.ndarray | None, columns: Sequence[str]) -> np.ndarray:
    """``(n, len(columns))`` float array from an ``(n, 4)`` mode array and ``(n,)`` batch sizes."""
    modes = np.asarray(modes, dtype=float).reshape(-1, len(MODE_FIELDS))
    cols = []
    for c in columns:
        if c in MODE_FIELDS:
            cols.append(modes[:, MODE_FIELDS.index(c)])
        elif c == BATCH_FEATURE and batch_size is not None:
            cols.append(np.asarray(batch_size, dtype=float).reshape(-1))
        else:
            raise InvalidArgument(c, "is not a feature the modes provide", ",".join((*MODE_FIELDS, BATCH_FEATURE)))
    return np.column_stack(cols).astype(float) if cols else np.empty((len(modes), 0))


def table_features(table: Table, columns: Sequence[str]) -> np.ndarray:
    """``(n, len(columns))`` float array of ``table``; a missing column is an error naming it."""
    where = table.path or "table"
    for col in columns:
        if not table.has(col):
            raise InvalidArgument(f"{where}:{col}", "column is missing (the model uses it as a feature)",
                                  ",".join(columns))
    return np.asarray([[r[c] for c in columns] for r in table.rows], dtype=float).reshape(-1, len(columns))


def table_target(table: Table, target: str) -> np.ndarray:
    if target not in TARGETS:
        raise InvalidArgument("target", f"unknown target {target!r}", ", ".join(TARGETS))
    return table.column(target, float)


@dataclass
class Standardizer:
    """Per-column ``(x - mean) / std``; a constant column gets std 1 (it carries no information)."""

    mean: np.ndarray
    std: np.ndarray

    @classmethod
    def fit(cls, x: np.ndarray) -> Standardizer:
        x = np.asarray(x, dtype=float)
        if x.ndim == 1:
            x = x[:, None]
        std = x.std(axis=0)
        std = np.where(std > 1e-12 * np.maximum(np.abs(x.mean(axis=0)), 1.0), std, 1.0)
        return cls(x.mean(axis=0), std)

    def transform(self, x: np.ndarray) -> np.ndarray:
        return (np.asarray(x, dtype=float) - self.mean) / self.std

    def inverse(self, z: np.ndarray) -> np.ndarray:
        return np.asarray(z, dtype=float) * self.std + self.mean

    def to_dict(self) -> dict:
        return {"mean": [float(v) for v in np.ravel(self.mean)], "std": [float(v) for v in np.ravel(self.std)]}

    @classmethod
    def from_dict(cls, d: dict) -> Standardizer:
        return cls(np.asarray(d["mean"], dtype=float), np.asarray(d["std"], dtype=float))


def forward_transform(kind: str, y: np.ndarray) -> np.ndarray:
    """Target in original units → the space a method learns in (before standardising)."""
    y = np.asarray(y, dtype=float)
    if kind == "log":
        if np.any(y <= 0):
            raise InvalidArgument("target", "a log-transformed target must be positive", "> 0")
        return np.log(y)
    if kind == "identity":
        return y
    raise InvalidArgument("target_transform", f"unknown transform {kind!r}", ", ".join(TRANSFORMS))


def inverse_transform(kind: str, mu: np.ndarray, sd: np.ndarray | None) -> tuple[np.ndarray, np.ndarray | None]:
    """Mean and std in transformed space → prediction and std in original units.

    For ``log`` the prediction is ``exp(mu)`` (the median of the log-normal: the right point
    estimate for a relative-error metric) and the std that of the log-normal.
    """
    if kind == "log":
        mean = np.exp(mu)
        std = None if sd is None else mean * np.sqrt(np.expm1(np.minimum(sd**2, 50.0)))
        return mean, std
    return mu, sd
