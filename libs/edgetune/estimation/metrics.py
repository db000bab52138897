"""Error metrics of predictions against measurements (all relative errors in percent)."""

from __future__ import annotations

import numpy as np


def mape_pct(pred: np.ndarray, true: np.ndarray) -> float:
    """Mean absolute percentage error, in percent."""
    pred, true = np.asarray(pred, dtype=float), np.asarray(true, dtype=float)
    return float(100.0 * np.mean(np.abs(pred - true) / np.abs(true)))


def under_fraction(pred: np.ndarray, true: np.ndarray) -> float:
    """Share of predictions below the truth (for power: the ones that risk a budget)."""
    return float(np.mean(np.asarray(pred, dtype=float) < np.asarray(true, dtype=float)))
