"""Profile and mode tables: the CSV files of docs/contract.md, read strictly and written plainly.

A *profile table* has one measured (or predicted) point per row: the mode columns, the batch
size, ``time_ms`` and ``power_w``, plus optional columns. A *mode table* has the mode columns
only (``batch_size`` optional). Unknown columns are carried through untouched.

Reading refuses bad files with :class:`~edgetune.errors.InvalidArgument` whose field is
``FILE:LINE:COLUMN`` (line 1 is the header), so the CLI can exit 2 with a message that points
at the cell to fix.
"""

from __future__ import annotations

import csv
import io
import math
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TextIO

import numpy as np

from edgetune.base.mode import MODE_FIELDS, PowerMode
from edgetune.base.records import Points
from edgetune.errors import InvalidArgument

PROFILE_COLUMNS: tuple[str, ...] = (*MODE_FIELDS, "batch_size", "time_ms", "power_w")
MODE_COLUMNS: tuple[str, ...] = MODE_FIELDS
#: Columns parsed as numbers when present; every other column stays a string.
INT_COLUMNS = frozenset({"cores", "batch_size", "samples"})
FLOAT_COLUMNS = frozenset({
    "cpu_mhz", "gpu_mhz", "emc_mhz", "time_ms", "power_w", "peak_power_w", "energy_j",
    "time_std_ms", "power_std_w", "idle_power_w", "latency_ms",
    "time_s",  # Ahmed et al. LUTs (edgetune optimize joint)
})
#: Quantities that cannot be negative.
NON_NEGATIVE = frozenset({"time_ms", "power_w", "peak_power_w", "energy_j", "time_std_ms", "power_std_w",
                          "idle_power_w", "latency_ms", "samples", "time_s"})
#: Quantities that must be strictly positive.
POSITIVE = frozenset({"cores", "batch_size", "cpu_mhz", "gpu_mhz", "emc_mhz"})
ROLES = ("train", "infer")


@dataclass
class Table:
    """Rows of a CSV table with typed values; ``columns`` keeps the file's column order."""

    columns: list[str]
    rows: list[dict[str, Any]] = field(default_factory=list)
    path: str | None = None

    def __len__(self) -> int:
        return len(self.rows)

    def __iter__(self):
        return iter(self.rows)

    def has(self, column: str) -> bool:
        return column in self.columns

    def column(self, name: str, dtype: Any = float) -> np.ndarray:
        if name not in self.columns:
            raise InvalidArgument(f"{self.path or 'table'}:{name}", "column is missing")
        return np.asarray([r[name] for r in self.rows], dtype=dtype)

    def mode_array(self) -> np.ndarray:
        """Modes as an (n, 4) float array: cores, cpu_mhz, gpu_mhz, emc_mhz."""
        return np.asarray([[r[c] for c in MODE_FIELDS] for r in self.rows], dtype=float).reshape(-1, 4)

    def modes(self) -> list[PowerMode]:
        return [PowerMode.from_mapping(r) for r in self.rows]

    def where(self, **equals: Any) -> Table:
        """Rows whose columns equal the given values (``workload="resnet18", role="train"``)."""
        rows = [r for r in self.rows if all(r.get(k) == v for k, v in equals.items())]
        return Table(list(self.columns), rows, self.path)


def _fail(path: str, line: int, column: str, message: str, allowed: str | None = None) -> InvalidArgument:
    return InvalidArgument(f"{path}:{line}:{column}", message, allowed)


def _parse_cell(path: str, line: int, column: str, text: str) -> Any:
    raw = text.strip()
    if column in INT_COLUMNS or column in FLOAT_COLUMNS:
        try:
            value = float(raw)
        except ValueError:
            raise _fail(path, line, column, f"{raw!r} is not a number") from None
        if not math.isfinite(value):
            raise _fail(path, line, column, f"{raw!r} is not a finite number")
        if column in INT_COLUMNS:
            if value != int(value):
                raise _fail(path, line, column, f"{raw!r} is not an integer")
            value = int(value)
        if column in NON_NEGATIVE and value < 0:
            raise _fail(path, line, column, f"{raw} is negative", ">= 0")
        if column in POSITIVE and value <= 0:
            raise _fail(path, line, column, f"{raw} must be positive", "> 0")
        return value
    if column == "role" and raw not in ROLES:
        raise _fail(path, line, column, f"unknown role {raw!r}", ", ".join(ROLES))
    return raw


def parse_table(source: str | os.PathLike | TextIO, required: Sequence[str], name: str | None = None) -> Table:
    """Read a CSV with a header row, checking ``required`` columns and every known column's type."""
    if isinstance(source, (str, os.PathLike)):
        path = name or os.fspath(source)
        try:
            with open(source, newline="", encoding="utf-8") as fh:
                return _parse(fh, required, path)
        except FileNotFoundError:
            raise InvalidArgument(path, "no such file") from None
        except IsADirectoryError:
            raise InvalidArgument(path, "is a directory, not a CSV file") from None
    return _parse(source, required, name or str(getattr(source, "name", "<stdin>")))


def _parse(fh: TextIO, required: Sequence[str], path: str) -> Table:
    reader = csv.reader(fh)
    try:
        header = [h.strip() for h in next(reader)]
    except StopIteration:
        raise _fail(path, 1, "header", "file is empty; expected a header row",
                    ",".join(required)) from None
    seen: set[str] = set()
    for col in header:
        if col in seen:
            raise _fail(path, 1, col, "duplicate column in header")
        seen.add(col)
    missing = [c for c in required if c not in seen]
    if missing:
        raise _fail(path, 1, missing[0], f"required column missing (header has: {','.join(header)})",
                    ",".join(required))
    rows: list[dict[str, Any]] = []
    for cells in reader:
        line = reader.line_num
        if not cells or all(not c.strip() for c in cells):
            continue
        if [c.strip() for c in cells] == header:
            raise _fail(path, line, header[0], "duplicate header row inside the data")
        if len(cells) != len(header):
            raise _fail(path, line, "row", f"has {len(cells)} cells, the header has {len(header)}")
        rows.append({col: _parse_cell(path, line, col, cell) for col, cell in zip(header, cells, strict=True)})
    return Table(header, rows, path)


def read_profile_table(source: str | os.PathLike | TextIO, name: str | None = None) -> Table:
    """A profile table (mode columns, batch_size, time_ms, power_w, optional extras)."""
    return parse_table(source, PROFILE_COLUMNS, name)


def read_mode_table(source: str | os.PathLike | TextIO, name: str | None = None) -> Table:
    """A mode table (mode columns; batch_size and anything else optional)."""
    return parse_table(source, MODE_COLUMNS, name)


def _format(value: Any) -> str:
    if isinstance(value, float):
        return float.__repr__(value)  # shortest exact form; plain repr() of np.float64 adds "np.float64(...)"
    return str(value)


def write_table(rows: Iterable[Mapping[str, Any]], dest: str | os.PathLike | TextIO,
                columns: Sequence[str] | None = None) -> int:
    """Write rows as CSV (columns: given, else the keys of the first row); return the row count."""
    rows = list(rows)
    cols = list(columns) if columns is not None else (list(rows[0].keys()) if rows else list(PROFILE_COLUMNS))
    if isinstance(dest, (str, os.PathLike)):
        parent = os.path.dirname(os.fspath(dest))
        if parent:
            os.makedirs(parent, exist_ok=True)
        with open(dest, "w", newline="", encoding="utf-8") as fh:
            return _write(rows, fh, cols)
    return _write(rows, dest, cols)


def _write(rows: list[Mapping[str, Any]], fh: TextIO, cols: list[str]) -> int:
    writer = csv.writer(fh, lineterminator="\n")
    writer.writerow(cols)
    for r in rows:
        writer.writerow([_format(r.get(c, "")) for c in cols])
    return len(rows)


def table_to_csv(rows: Iterable[Mapping[str, Any]], columns: Sequence[str] | None = None) -> str:
    buf = io.StringIO()
    write_table(rows, buf, columns)
    return buf.getvalue()


def points_table(points: Points) -> Table:
    """The profile table of measured points: what the estimation pipeline learns from."""
    cols = [*MODE_FIELDS, "batch_size", "time_ms", "power_w", "device", "workload", "role"]
    return Table(cols, [{"cores": int(m[0]), "cpu_mhz": float(m[1]), "gpu_mhz": float(m[2]),
                         "emc_mhz": float(m[3]), "batch_size": int(b), "time_ms": float(t),
                         "power_w": float(p), "device": points.device, "workload": points.workload,
                         "role": points.role}
                        for m, b, t, p in zip(points.modes, points.batch_size, points.time_ms, points.power_w,
                                              strict=True)])
