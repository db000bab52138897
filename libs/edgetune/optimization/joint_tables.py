"""Reading the two CSV files of ``edgetune optimize joint`` (Ahmed et al.) strictly.

``lut.csv``: ``batch_size,mode,time_s,power_w`` (``mode`` an opaque, non-empty id; one row
per (batch size, mode)). ``eff.csv``: ``batch_size,passes_to_target`` (one row per batch
size; empty, NaN or inf = never reaches the target). Typed columns go through
:func:`edgetune.tables.parse_table` (header, duplicate, cell-count and number checks); the
checks it cannot do (ids, duplicates, the ``inf``-allowing passes column) report
``FILE:LINE:COLUMN`` the same way.
"""

from __future__ import annotations

import csv
import math
import os

import numpy as np

from edgetune.errors import InvalidArgument
from edgetune.optimization.joint import BatchEfficiency, JointLUT
from edgetune.tables import parse_table

LUT_COLUMNS = ("batch_size", "mode", "time_s", "power_w")
EFFICIENCY_COLUMNS = ("batch_size", "passes_to_target")
_NEVER = {"", "nan", "inf", "+inf", "infinity", "+infinity", "never"}


def _data_lines(path: str) -> list[int]:
    """File line of each data row, skipping blank rows exactly as ``parse_table`` does."""
    with open(path, newline="", encoding="utf-8") as fh:
        reader = csv.reader(fh)
        next(reader, None)
        return [reader.line_num for cells in reader if cells and any(c.strip() for c in cells)]


def read_lut(path: str | os.PathLike) -> JointLUT:
    path = os.fspath(path)
    table = parse_table(path, LUT_COLUMNS)
    lines = _data_lines(path)
    if not table.rows:
        raise InvalidArgument(f"{path}:2:batch_size", "the LUT has no data rows")
    seen: dict[tuple[int, str], int] = {}
    for row, line in zip(table.rows, lines, strict=True):
        mode = row["mode"]
        if not mode:
            raise InvalidArgument(f"{path}:{line}:mode", "empty mode id")
        key = (row["batch_size"], mode)
        if key in seen:
            raise InvalidArgument(f"{path}:{line}:mode",
                                  f"batch size {key[0]} at mode {mode!r} repeats line {seen[key]}")
        seen[key] = line
    return JointLUT(table.column("batch_size", int), np.asarray([r["mode"] for r in table.rows], dtype=object),
                    table.column("time_s"), table.column("power_w"))


def parse_passes(text: str, field: str) -> float:
    raw = text.strip()
    if raw.lower() in _NEVER:
        return math.inf
    try:
        value = float(raw)
    except ValueError:
        raise InvalidArgument(field, f"{raw!r} is not a number", "> 0, or empty / nan / inf for never") from None
    if math.isnan(value):
        return math.inf
    if value <= 0:
        raise InvalidArgument(field, f"{raw} must be positive", "> 0, or empty / nan / inf for never")
    return value


def read_efficiency(path: str | os.PathLike) -> BatchEfficiency:
    path = os.fspath(path)
    table = parse_table(path, EFFICIENCY_COLUMNS)
    lines = _data_lines(path)
    if not table.rows:
        raise InvalidArgument(f"{path}:2:batch_size", "the efficiency table has no data rows")
    passes: dict[int, float] = {}
    first_line: dict[int, int] = {}
    for row, line in zip(table.rows, lines, strict=True):
        b = row["batch_size"]
        if b in passes:
            raise InvalidArgument(f"{path}:{line}:batch_size", f"batch size {b} repeats line {first_line[b]}")
        passes[b] = parse_passes(row["passes_to_target"], f"{path}:{line}:passes_to_target")
        first_line[b] = line
    return BatchEfficiency(passes)
