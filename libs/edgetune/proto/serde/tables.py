"""``PredictionTable`` (the columnar wire form of prediction rows) <-> :class:`~edgetune.base.records.Predictions`:
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

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from edgetune.base.records import Predictions
from edgetune.errors import InvalidArgument
from edgetune.proto.v1 import common_pb2

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
    modes = np.asarray(rows.modes, dtype=float).reshape(-1, 4)
    columns: dict[str, np.ndarray] = {
        "cores": modes[:, 0].astype(np.int64), "cpu_mhz": modes[:, 1], "gpu_mhz": modes[:, 2], "emc_mhz": modes[:, 3],
        "batch_size": np.asarray(rows.batch_size, dtype=np.int64), "time_ms": np.asarray(rows.time_ms, dtype=float),
        "power_w": np.asarray(rows.power_w, dtype=float)}
    for name in STD_COLUMNS:
        values = getattr(rows, name)
        if values is not None:
            columns[name] = np.asarray(values, dtype=float)
    wire = _wire_table(columns)
    if wire is not None:
        return common_pb2.PredictionTable.FromString(wire)
    msg = common_pb2.PredictionTable()  # integers beyond the fast path's range: the message checks them
    for name, values in columns.items():
        getattr(msg, name).extend(values.tolist())
    return msg


# --- the wire form of a table --------------------------------------------------------------------------
# Copying 18,096 rows into or out of repeated fields one Python number at a time costs tens of ms a
# table; the packed wire form of a column is its values' bytes (little-endian doubles; small varints),
# so numpy writes and reads it whole and protobuf's C code does the rest.
_FIELD_NUMBERS = {"cores": 1, "cpu_mhz": 2, "gpu_mhz": 3, "emc_mhz": 4, "batch_size": 5, "time_ms": 6, "power_w": 7,
                  "time_std_ms": 8, "power_std_w": 9}
_INT_COLUMNS = ("cores", "batch_size")
_NAMES = {v: k for k, v in _FIELD_NUMBERS.items()}
_SMALL_INT = 1 << 14  # at most two varint bytes


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _read_varint(data: bytes, i: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if i >= len(data) or shift > 63:
            raise ValueError("truncated varint")
        byte = data[i]
        i += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, i
        shift += 7


def _wire_table(columns: Mapping[str, np.ndarray]) -> bytes | None:
    """The serialized PredictionTable of ``columns``; None when an integer is outside [0, 2^14)."""
    parts = []
    for name, values in columns.items():
        if not values.size:
            continue
        if name in _INT_COLUMNS:
            if values.min() < 0 or values.max() >= _SMALL_INT:
                return None
            one = values < 0x80
            if one.all():
                payload = values.astype(np.uint8).tobytes()
            else:  # one or two bytes per value: both written, the unused second bytes dropped
                pairs = np.stack([(values & 0x7F) | np.where(one, 0, 0x80), values >> 7], axis=1).astype(np.uint8)
                payload = pairs.ravel()[np.stack([np.ones_like(one), ~one], axis=1).ravel()].tobytes()
        else:
            payload = np.ascontiguousarray(values, dtype="<f8").tobytes()
        parts += [_varint(_FIELD_NUMBERS[name] << 3 | 2), _varint(len(payload)), payload]
    return b"".join(parts)


def _wire_columns(msg: common_pb2.PredictionTable) -> dict[str, np.ndarray] | None:
    """Every column of ``msg`` as an array, read from its packed wire form; None when the form is not
    the expected one (then the caller reads the fields)."""
    data = msg.SerializeToString()
    out: dict[str, np.ndarray] = {}
    i = 0
    try:
        while i < len(data):
            tag, i = _read_varint(data, i)
            name = _NAMES.get(tag >> 3)
            if name is None or tag & 7 != 2 or name in out:
                return None
            length, i = _read_varint(data, i)
            payload = np.frombuffer(data, np.uint8, length, i)
            i += length
            if name not in _INT_COLUMNS:
                if length % 8:
                    return None
                out[name] = payload.view("<f8").astype(float)
                continue
            ends = np.flatnonzero(payload < 0x80)
            if ends.size == length:
                out[name] = payload.astype(np.int64)
                continue
            if not ends.size or ends[-1] != length - 1:
                return None
            starts = np.concatenate([[0], ends[:-1] + 1])
            widths = ends - starts + 1
            if widths.max() > 4:  # a negative int32 takes 10 bytes: the fields' own reading handles it
                return None
            value = np.zeros(ends.size, np.int64)
            for k in range(int(widths.max())):
                has = widths > k
                value[has] |= (payload[starts[has] + k].astype(np.int64) & 0x7F) << (7 * k)
            out[name] = value
    except ValueError:
        return None
    return out


def table_from_proto(msg: common_pb2.PredictionTable, field: str = "table", *,
                     allow_empty: bool = False) -> Predictions:
    """The rows of ``msg`` as the tuning workflow's predictions, checked (see the module doc); errors name ``field.column[row]``."""
    cols = _wire_columns(msg)
    if cols is None:
        cols = {name: _column(getattr(msg, name), np.int64 if name in _INT_COLUMNS else float, -1)
                for name in _FIELD_NUMBERS}
    empty = np.empty(0)

    def col(name: str) -> np.ndarray:
        return cols.get(name, empty)

    n = len(col("time_ms"))
    for name in REQUIRED_COLUMNS:
        got = len(col(name))
        if got != n:
            raise InvalidArgument(f"{field}.{name}", f"has {got} values where {field}.time_ms has {n}",
                                  "one value per row in every column")
    if n == 0 and not allow_empty:
        raise InvalidArgument(field, "is empty", "at least one row")
    stds: dict[str, np.ndarray | None] = {}
    for name in STD_COLUMNS:
        got = len(col(name))
        if got not in (0, n):
            raise InvalidArgument(f"{field}.{name}", f"has {got} values for {n} rows",
                                  "empty (no std) or one value per row")
        stds[name] = col(name).astype(float) if got else None
    cores = col("cores").astype(np.int64)
    _check_int(cores, f"{field}.cores", least=1, allowed="an integer >= 1")
    batch = col("batch_size").astype(np.int64)
    _check_int(batch, f"{field}.batch_size", least=0, allowed=">= 1, or 0 when not applicable")
    modes = np.empty((n, 4))
    modes[:, 0] = cores
    columns: dict[str, np.ndarray] = {}
    for j, name in enumerate(MODE_COLUMNS[1:], start=1):
        modes[:, j] = col(name)
        _check_real(modes[:, j], field, name)
    for name in ("time_ms", "power_w"):
        columns[name] = col(name).astype(float)
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
