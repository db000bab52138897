"""How accurate any predictor can be on a measured table: its measurement-noise floor.

A measurement ``y = f(x) + ε`` is judged against the held-out *measurement*, so even a
predictor that knows ``f`` exactly shows an error ``E|ε|/|y|``. Where a from-scratch GP is
already near that floor, no transfer can be 0.7× better than it; :func:`floor_mape_pct`
says how far down a MAPE can go, and ``floor / GP MAPE`` is the best ratio any predictor
could reach on the same held-out rows.

The noise sd ``s`` is estimated in the space the predictors learn in (``log`` for time, so
``s`` is relative noise; watts for power), two independent ways:

* :func:`gp_noise_sd`: the white-noise level of a Matérn GP fitted on the *whole* table
  (structure the GP cannot fit is counted as noise: an over-estimate where ``f`` is rough);
* :func:`difference_noise_sd`: Gasser–Sargent–Sengupta pseudo-residuals of consecutive
  triples along one feature axis, the other features held fixed (``f`` locally linear; a kink
  inflates a triple, so the robust median-of-squares version is used).

Both over-estimate rather than under-estimate the noise where ``f`` has structure, so
:func:`noise_sd` takes the smaller of the two: the floor it implies is then a conservative
(low) bound, and a claim "the 0.7× target is out of reach here" made from it is safe.
"""

from __future__ import annotations

from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

from edgetune.estimation.features import Standardizer, forward_transform
from edgetune.estimation.gp import GaussianProcess

#: median of chi-square(1): turns a median of squared N(0, s²) draws into s².
_MEDIAN_CHI2_1 = 0.4549364231195724


@dataclass(frozen=True)
class NoiseEstimate:
    """Noise sd in the learning space of a target (``log``: relative; ``identity``: target units)."""

    transform: str
    gp_sd: float
    difference_sd: float

    @property
    def sd(self) -> float:
        finite = [s for s in (self.gp_sd, self.difference_sd) if np.isfinite(s)]
        return min(finite) if finite else float("nan")


def gp_noise_sd(x: np.ndarray, z: np.ndarray, restarts: int = 3, seed: int = 0) -> float:
    """White-noise sd (units of ``z``) of a Matérn-2.5 ARD GP fitted on all rows of ``(x, z)``."""
    x = np.asarray(x, float).reshape(len(z), -1)
    xs, zs = Standardizer.fit(x), Standardizer.fit(np.asarray(z, float))
    gp = GaussianProcess(restarts, seed).fit(xs.transform(x), zs.transform(z).ravel())
    return gp.noise_sd() * float(zs.std[0])


def difference_noise_sd(x: np.ndarray, z: np.ndarray, axis: int = 0) -> float:
    """Noise sd from pseudo-residuals of consecutive triples along feature ``axis`` (others fixed).

    For ``x₁ < x₂ < x₃`` with weights ``a = (x₃−x₂)/(x₃−x₁)``, ``b = 1 − a``, the residual
    ``(z₂ − a·z₁ − b·z₃) / sqrt(1 + a² + b²)`` has variance ``s²`` where ``f`` is linear over the
    triple. NaN when no group has three points.
    """
    x = np.asarray(x, float).reshape(len(z), -1)
    z = np.asarray(z, float)
    groups: dict[tuple[float, ...], list[int]] = {}
    for i, key in enumerate(map(tuple, np.delete(x, axis, axis=1))):
        groups.setdefault(key, []).append(i)
    res: list[float] = []
    for members in groups.values():
        rows = np.asarray(members)
        order = rows[np.argsort(x[rows, axis])]
        t, v = x[order, axis], z[order]
        for i in range(1, len(order) - 1):
            span = t[i + 1] - t[i - 1]
            if span <= 0:
                continue
            a = (t[i + 1] - t[i]) / span
            b = 1.0 - a
            res.append((v[i] - a * v[i - 1] - b * v[i + 1]) / np.sqrt(1.0 + a * a + b * b))
    if not res:
        return float("nan")
    return float(np.sqrt(np.median(np.square(res)) / _MEDIAN_CHI2_1))


def estimate_noise(x: np.ndarray, y: np.ndarray, transform: str, axis: int = 0, seed: int = 0) -> NoiseEstimate:
    """Both estimates for a table's target ``y`` (original units) learned in ``transform`` space."""
    z = forward_transform(transform, y)
    return NoiseEstimate(transform, gp_noise_sd(x, z, seed=seed), difference_noise_sd(x, z, axis))


def noise_sd(x: np.ndarray, y: np.ndarray, transform: str, axis: int = 0, seed: int = 0) -> float:
    """The smaller of the two noise estimates (the conservative floor; module docs)."""
    return estimate_noise(x, y, transform, axis, seed).sd


def floor_mape_pct(sd: float, transform: str, y: np.ndarray) -> float:
    """Expected MAPE (%) of a predictor that knows ``f`` exactly, on measurements ``y``.

    ``log``: ``y = e^{f+ε}``, error ``|e^{−ε} − 1|``, whose mean is ``e^{s²/2}(2Φ(s) − 1)``.
    ``identity``: ``E|ε| / |y| = s·sqrt(2/π) / |y|``, averaged over the rows.
    """
    if not np.isfinite(sd):
        return float("nan")
    if transform == "log":
        return 100.0 * float(np.exp(sd * sd / 2.0) * (2.0 * NormalDist().cdf(sd) - 1.0))
    return 100.0 * float(np.mean(sd * np.sqrt(2.0 / np.pi) / np.abs(np.asarray(y, float))))
