"""``PredictionTable`` (the columnar wire form of prediction rows) <-> :class:`~edgetune.tuning.records.Predictions`:
the one place.

Every service and client that sends or reads prediction / candidate rows (``Estimator.Predict``
chunks, the optimizer's inline ``Candidates`` and its ``ParetoFront`` / ``NextProfiles``
answers, a round's node options) goes through :func:`table_to_proto` and
:func:`table_from_proto`. Both are vectorised: a column is one ``extend`` of a list or one
``np.array`` of a repeated field, never a Python loop over rows (18,096 Orin modes decode in a
few milliseconds where 18,096 nested ``Prediction`` messages took hundreds).

The reader checks what the wire cannot: equal column lengths, and values a selection could
trust (modes with >= 1 core and finite MHz > 0; batch sizes >= 0; time finite > 0; power and
stds finite >= 0). The first bad value raises :class:`~edgetune.errors.InvalidArgument` naming
the column and the row, e.g. ``candidates.table.time_ms[3]``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from edgetune.errors import InvalidArgument
from edgetune.proto.v1 import common_pb2
from edgetune.tuning.records import Predictions

#: The mode columns, in PowerMode's order (the ``modes`` array's columns).
MODE_COLUMNS = ("cores", "cpu_mhz", "gpu_mhz", "emc_mhz")
#: Every column that a table always has, then the optional std columns.
REQUIRED_COLUMNS = (*MODE_COLUMNS, "batch_size", "time_ms", "power_w")
STD_COLUMNS = ("time_std_ms", "power_std_w")

#: column -> (rule, allowed) for the value checks; "pos": finite > 0, "nonneg": finite >= 0.
_RULES: dict[str, tuple[str, str]] = {
    "cpu_mhz": ("pos", "a finite frequency in MHz > 0"),
    "gpu_mhz": ("pos", "a finite frequency in MHz > 0"),
    "emc_mhz": ("pos", "a finite frequency in MHz > 0"),
    "time_ms": ("pos", "a finite time in ms > 0"),
    "power_w": ("nonneg", "a finite power in W >= 0"),
    "time_std_ms": ("nonneg", "a finite std in ms >= 0"),
    "power_std_w": ("nonneg", "a finite std in W >= 0"),
}


def table_to_proto(rows: Predictions) -> common_pb2.PredictionTable:
    """The columnar message of ``rows`` (std columns only where ``rows`` has them)."""
    msg = common_pb2.PredictionTable()
    modes = np.asarray(rows.modes, dtype=float).reshape(-1, 4)
    msg.cores.extend(modes[:, 0].astype(np.int64).tolist())
    msg.cpu_mhz.extend(modes[:, 1].tolist())
    msg.gpu_mhz.extend(modes[:, 2].tolist())
    msg.emc_mhz.extend(modes[:, 3].tolist())
    msg.batch_size.extend(np.asarray(rows.batch_size, dtype=np.int64).tolist())
    msg.time_ms.extend(np.asarray(rows.time_ms, dtype=float).tolist())
    msg.power_w.extend(np.asarray(rows.power_w, dtype=float).tolist())
    if rows.time_std_ms is not None:
        msg.time_std_ms.extend(np.asarray(rows.time_std_ms, dtype=float).tolist())
    if rows.power_std_w is not None:
        msg.power_std_w.extend(np.asarray(rows.power_std_w, dtype=float).tolist())
    return msg


def table_from_proto(msg: common_pb2.PredictionTable, field: str = "table", *,
                     allow_empty: bool = False) -> Predictions:
    """The rows of ``msg`` as the tuning workflow's predictions, checked (see the module doc); errors name ``field.column[row]``."""
    n = len(msg.time_ms)
    for name in REQUIRED_COLUMNS:
        got = len(getattr(msg, name))
        if got != n:
            raise InvalidArgument(f"{field}.{name}", f"has {got} values where {field}.time_ms has {n}",
                                  "one value per row in every column")
    if n == 0 and not allow_empty:
        raise InvalidArgument(field, "is empty", "at least one row")
    stds: dict[str, np.ndarray | None] = {}
    for name in STD_COLUMNS:
        got = len(getattr(msg, name))
        if got not in (0, n):
            raise InvalidArgument(f"{field}.{name}", f"has {got} values for {n} rows",
                                  "empty (no std) or one value per row")
        stds[name] = _column(getattr(msg, name), float, n) if got else None
    cores = _column(msg.cores, np.int64, n)
    _check_int(cores, f"{field}.cores", least=1, allowed="an integer >= 1")
    batch = _column(msg.batch_size, np.int64, n)
    _check_int(batch, f"{field}.batch_size", least=0, allowed=">= 1, or 0 when not applicable")
    modes = np.empty((n, 4))
    modes[:, 0] = cores
    columns: dict[str, np.ndarray] = {}
    for j, name in enumerate(MODE_COLUMNS[1:], start=1):
        modes[:, j] = _column(getattr(msg, name), float, n)
        _check_real(modes[:, j], field, name)
    for name in ("time_ms", "power_w"):
        columns[name] = _column(getattr(msg, name), float, n)
        _check_real(columns[name], field, name)
    for name, values in stds.items():
        if values is not None:
            _check_real(values, field, name)
    return Predictions(modes, batch, columns["time_ms"], columns["power_w"], stds["time_std_ms"], stds["power_std_w"])


def _column(values: Iterable[float], dtype: Any, n: int) -> np.ndarray:
    # fromiter with a known count is the fastest copy out of a repeated field (about twice np.array's speed).
    return np.fromiter(values, dtype, n)


def merge_tables(tables: Iterable[common_pb2.PredictionTable]) -> common_pb2.PredictionTable:
    """One table of ``tables`` in order (Predict's chunks -> Select's candidates) without decoding:
    merging appends every repeated column in protobuf's C code. Unchecked: the receiver checks."""
    out = common_pb2.PredictionTable()
    for t in tables:
        out.MergeFrom(t)
    return out


def _check_int(values: np.ndarray, field: str, *, least: int, allowed: str) -> None:
    bad = np.flatnonzero(values < least)
    if bad.size:
        i = int(bad[0])
        raise InvalidArgument(f"{field}[{i}]", f"{int(values[i])} is out of range", allowed)


def _check_real(values: np.ndarray, field: str, name: str) -> None:
    rule, allowed = _RULES[name]
    with np.errstate(invalid="ignore"):
        ok = np.isfinite(values) & ((values > 0) if rule == "pos" else (values >= 0))
    bad = np.flatnonzero(~ok)
    if bad.size:
        i = int(bad[0])
        raise InvalidArgument(f"{field}.{name}[{i}]", f"{float(values[i])!r} is out of range", allowed)
