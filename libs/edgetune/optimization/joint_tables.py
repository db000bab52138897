"""Reading the two CSV files of ``edgetune optimize joint`` (Ahmed et al.) strictly.

``lut.csv``: ``batch_size,mode,time_s,power_w`` (``mode`` an opaque, non-empty id; one row
per (batch size, mode)); or the LUT built from profile tables (:func:`lut_from_profiles`: the
tables ``edgetune profile`` writes, time per minibatch scaled to s samples and the PEAK power). ``eff.csv``: ``batch_size,passes_to_target`` (one row per batch
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

from edgetune.base.mode import MODE_FIELDS, PowerMode
from edgetune.base.records import BatchEfficiency, default_samples_per_pass
from edgetune.errors import InvalidArgument
from edgetune.optimization.joint import JointLUT
from edgetune.tables import parse_table

#: What a profile table must hold for the joint method's LUT.
PROFILE_LUT_COLUMNS = (*MODE_FIELDS, "batch_size", "time_ms", "peak_power_w")

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


def lut_from_profiles(paths: list[str | os.PathLike], samples_per_pass: int | None = None) -> JointLUT:
    """The joint method's LUT from profile tables (``edgetune profile``'s CSVs, e.g. a ``--order
    cap-search`` run): one row per profiled (batch size, mode), ``mode`` its label
    (``8c/1344/727/2133``), ``time_s`` = time per minibatch × s / batch size (the time to train
    **s** samples, ``samples_per_pass``; default 2 × the largest batch size profiled, as ``estimate
    efficiency`` counts its passes: :func:`~edgetune.base.records.default_samples_per_pass`) and ``power_w`` =
    the point's PEAK power (the paper's profiled peak, not the mean). A point profiled twice
    is an error naming both lines."""
    rows: list[tuple[int, str, float, float]] = []
    seen: dict[tuple[int, str], str] = {}
    for path in paths:
        path = os.fspath(path)
        table = parse_table(path, PROFILE_LUT_COLUMNS)
        for row, line in zip(table.rows, _data_lines(path), strict=True):
            at = f"{path}:{line}"
            mode = PowerMode.from_mapping(row).label()
            b = int(row["batch_size"])
            if b <= 0:
                raise InvalidArgument(f"{at}:batch_size", f"{b}", ">= 1")
            for name in ("time_ms", "peak_power_w"):
                if not (math.isfinite(row[name]) and row[name] > 0):
                    raise InvalidArgument(f"{at}:{name}", f"{row[name]!r}", "finite > 0")
            if (b, mode) in seen:
                raise InvalidArgument(f"{at}:batch_size", f"batch size {b} at mode {mode} repeats {seen[(b, mode)]}")
            seen[(b, mode)] = at
            rows.append((b, mode, float(row["time_ms"]), float(row["peak_power_w"])))
    if not rows:
        raise InvalidArgument("--profiles", "the profile tables have no data rows", "profiled points")
    s = samples_per_pass if samples_per_pass is not None else default_samples_per_pass([b for b, *_ in rows])
    if s < max(b for b, *_ in rows):
        raise InvalidArgument("--samples-per-pass", f"s={s} is below the largest batch size profiled",
                              f">= {max(b for b, *_ in rows)} (Ahmed et al.: b_max <= s)")
    return JointLUT.from_rows([(b, mode, t_ms / 1000.0 * s / b, peak) for b, mode, t_ms, peak in rows])


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
