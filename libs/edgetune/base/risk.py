"""Risk: the probability that a choice's power exceeds its budget, its z and its upper bound.

A choice fits a budget at risk ``r`` when ``power_w + z(1 - r) · σ <= budget``. The rule for ``r``
(``0 < r <= 0.5``) is :func:`edgetune.validation.risk`; :func:`z_score` is that z and :func:`upper_bound`
that bound (of power, or of time). The library computes z and the bound here only (a test holds
the rest of the source to it): a ``risk`` is a probability, a ``z`` a standard-normal quantile, a
``*_upper_w`` / ``*_bound_w`` a bound.
"""

from __future__ import annotations

import numpy as np

from edgetune import validation


def z_score(risk: float) -> float:
    """One-sided standard-normal quantile z with P(X > mean + z·std) = risk (risk checked by
    :func:`validation.risk`: 0.05 gives 1.645, 0.5 gives 0)."""
    p = validation.risk(risk)
    from scipy.special import ndtri  # scipy.special imports in ms, scipy.stats in ~0.5 s

    return float(ndtri(1.0 - p))


def upper_bound(mean: np.ndarray, std: np.ndarray, risk: float) -> np.ndarray:
    """``mean + z(risk) · std`` per option: the value exceeded with probability ``risk``."""
    return np.asarray(mean, dtype=float) + z_score(risk) * np.asarray(std, dtype=float)
