"""Input checks of the predictors: enough rows, finite numbers, modes inside the trained ranges.

Row minimums: fitting from scratch needs at least :data:`MIN_FIT_ROWS` rows (a held-out
split must leave something to learn from), transferring at least :data:`MIN_TRANSFER_ROWS`.

Ranges (the "mode of the wrong device" check). A predictor remembers, per feature, the range
of every table it has learned from. At predict time, for each feature with span
``hi - lo``:

* a value outside ``[lo - HARD * span, hi + HARD * span]`` (``HARD`` = 1) is refused with
  :class:`InvalidArgument` naming the column — such inputs are almost always the wrong unit
  (kHz or Hz instead of MHz) or a mode table of another device, and any prediction would be
  a meaningless extrapolation;
* a value outside ``[lo - SOFT * span, hi + SOFT * span]`` (``SOFT`` = 0.1) gives an
  :class:`ExtrapolationWarning` (a Python warning) saying how many rows extrapolate — a
  related device (Orin → Xavier) legitimately reaches a little past the reference tables.

A feature that was constant in training (span 0) uses 10 % of its value as span.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import overload

import numpy as np

from edgetune.errors import InvalidArgument

MIN_FIT_ROWS = 10
MIN_TRANSFER_ROWS = 5
HARD_RANGE_FACTOR = 1.0
SOFT_RANGE_FACTOR = 0.1


class ExtrapolationWarning(UserWarning):
    """Some rows lie outside the feature ranges a predictor was trained on."""


@overload
def check_xy(x: np.ndarray, y: np.ndarray, columns: Sequence[str], *, min_rows: int, what: str,
             target: str = "target") -> tuple[np.ndarray, np.ndarray]: ...
@overload
def check_xy(x: np.ndarray, y: None, columns: Sequence[str], *, min_rows: int, what: str,
             target: str = "target") -> tuple[np.ndarray, None]: ...
def check_xy(x: np.ndarray, y: np.ndarray | None, columns: Sequence[str], *, min_rows: int, what: str,
             target: str = "target") -> tuple[np.ndarray, np.ndarray | None]:
    """Shape, size and finiteness checks; returns float arrays."""
    x = np.asarray(x, dtype=float)
    if x.ndim != 2 or x.shape[1] != len(columns):
        raise InvalidArgument("features", f"expected an (n, {len(columns)}) array, got shape {x.shape}",
                              ",".join(columns))
    if x.shape[0] < min_rows:
        raise InvalidArgument("rows", f"{what} needs at least {min_rows} rows, got {x.shape[0]}",
                              f">= {min_rows}")
    bad = ~np.isfinite(x)
    if bad.any():
        row, col = map(int, np.argwhere(bad)[0])
        raise InvalidArgument(columns[col], f"row {row + 1} is not a finite number ({x[row, col]!r})",
                              "finite numbers")
    if y is None:
        return x, None
    y = np.asarray(y, dtype=float).ravel()
    if y.shape[0] != x.shape[0]:
        raise InvalidArgument(target, f"{y.shape[0]} values for {x.shape[0]} rows of features")
    bad_y = ~np.isfinite(y)
    if bad_y.any():
        row = int(np.argmax(bad_y))
        raise InvalidArgument(target, f"row {row + 1} is not a finite number ({y[row]!r})", "finite numbers")
    return x, y


def merge_ranges(lo: np.ndarray | None, hi: np.ndarray | None, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-feature ranges that also cover ``x``."""
    xlo, xhi = x.min(axis=0), x.max(axis=0)
    if lo is None or hi is None:
        return xlo, xhi
    return np.minimum(lo, xlo), np.maximum(hi, xhi)


def check_range(x: np.ndarray, lo: np.ndarray, hi: np.ndarray, columns: Sequence[str]) -> int:
    """Refuse wildly out-of-range rows, warn on mild extrapolation; return the extrapolating count."""
    lo, hi = np.asarray(lo, dtype=float), np.asarray(hi, dtype=float)
    span = hi - lo
    span = np.where(span > 0, span, 0.1 * np.maximum(np.abs(hi), 1.0))
    # every feature (cores, clocks, batch size) is positive, so the hard floor never goes below 0
    hard_lo = np.maximum(lo - HARD_RANGE_FACTOR * span, 0.0)
    hard_hi = hi + HARD_RANGE_FACTOR * span
    for j, col in enumerate(columns):
        out = (x[:, j] < hard_lo[j]) | (x[:, j] > hard_hi[j])
        if out.any():
            row = int(np.argmax(out))
            raise InvalidArgument(
                col, f"row {row + 1}: {x[row, j]:g} is far outside the range the model was trained on "
                     f"({lo[j]:g} … {hi[j]:g}); wrong unit, or modes of another device? "
                     f"Transfer the model to that device first",
                f"{hard_lo[j]:g} … {hard_hi[j]:g}")
    soft = ((x < lo - SOFT_RANGE_FACTOR * span) | (x > hi + SOFT_RANGE_FACTOR * span)).any(axis=1)
    n_soft = int(soft.sum())
    if n_soft:
        warnings.warn(f"{n_soft} of {x.shape[0]} rows lie outside the feature ranges the model was trained on; "
                      f"their predictions extrapolate", ExtrapolationWarning, stacklevel=3)
    return n_soft
