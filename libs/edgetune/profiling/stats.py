"""Numbers from raw measurements: energy by the trapezoid rule, power statistics, repetitions.

- :func:`integrate_energy_j` integrates power samples over a run window (trapezoid rule,
  the sample values held flat out to the window's edges so a 2.4 s run sampled at 0, 1 and
  2 s still counts 2.4 s of energy).
- :func:`power_stats` gives mean / std / peak power and energy of one window.
- :func:`repetitions` is NeuralPower's round-up of a timed count (NeuralPower §4.3.2).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise

from edgetune.devices.sampling import PowerSample
from edgetune.errors import FailedPrecondition, InvalidArgument

#: Samples this far outside the window (clock jitter of a threaded sampler) still count as inside.
EDGE_SLACK_S = 1e-6


def window_points(samples: Sequence[PowerSample], t_start_s: float, t_end_s: float) -> list[tuple[float, float]]:
    """(t_s, power_w) points covering exactly [t_start_s, t_end_s] for trapezoid integration.

    Samples outside the window are dropped; the first and last kept samples are held flat to
    the window edges (a sampler's first sample is at the start instant, its last one up to a
    period before the end).
    """
    if t_end_s < t_start_s:
        raise InvalidArgument("t_end_s", f"window ends ({t_end_s}) before it starts ({t_start_s})")
    inside = sorted(
        ((s.t_s, s.power_w) for s in samples
         if t_start_s - EDGE_SLACK_S <= s.t_s <= t_end_s + EDGE_SLACK_S),
        key=lambda p: p[0],
    )
    if not inside:
        raise FailedPrecondition(
            f"no power samples in the run window [{t_start_s:.3f}, {t_end_s:.3f}] s; "
            "raise sample_rate_hz or run more minibatches")
    points = [(min(max(t, t_start_s), t_end_s), p) for t, p in inside]
    if points[0][0] > t_start_s:
        points.insert(0, (t_start_s, points[0][1]))
    if points[-1][0] < t_end_s:
        points.append((t_end_s, points[-1][1]))
    return points


def trapezoid_j(points: Sequence[tuple[float, float]]) -> float:
    """∫P dt over (t_s, power_w) points by the trapezoid rule (joules)."""
    return sum((t1 - t0) * (p0 + p1) / 2.0 for (t0, p0), (t1, p1) in pairwise(points))


def integrate_energy_j(samples: Sequence[PowerSample], t_start_s: float, t_end_s: float) -> float:
    """Energy (J) drawn over [t_start_s, t_end_s] from the power samples (trapezoid rule)."""
    return trapezoid_j(window_points(samples, t_start_s, t_end_s))


@dataclass(frozen=True)
class PowerStats:
    """Power over one window. ``power_w`` is time-weighted (energy / duration), so that
    ``energy_j == power_w * duration_s`` holds exactly; ``power_std_w`` and ``peak_power_w``
    are over the samples themselves."""

    power_w: float
    power_std_w: float
    peak_power_w: float
    energy_j: float
    duration_s: float
    samples: int


def power_stats(samples: Sequence[PowerSample], t_start_s: float, t_end_s: float) -> PowerStats:
    points = window_points(samples, t_start_s, t_end_s)
    energy_j = trapezoid_j(points)
    values = [s.power_w for s in samples if t_start_s - EDGE_SLACK_S <= s.t_s <= t_end_s + EDGE_SLACK_S]
    duration_s = t_end_s - t_start_s
    mean_sample_w = sum(values) / len(values)
    power_w = energy_j / duration_s if duration_s > 0 else mean_sample_w
    std_w = math.sqrt(sum((v - mean_sample_w) ** 2 for v in values) / len(values))
    return PowerStats(power_w, std_w, max(values), energy_j, duration_s, len(values))


def mean_std(values: Sequence[float]) -> tuple[float, float]:
    """Mean and population standard deviation (0 for one value)."""
    if not values:
        raise InvalidArgument("values", "no values to average")
    mean = sum(values) / len(values)
    return mean, math.sqrt(sum((v - mean) ** 2 for v in values) / len(values))


def repetitions(count_in_window: int) -> int:
    """Seed 001's repetition count n̂ from a count n timed over a window (NeuralPower §4.3.2).

    n̂ = (first digit of n + 1) · 10^(number of digits of n − 1): n rounded *up* at its
    leading digit, so a measured session lasts at least as long as the counting window
    (37 → 40, 99 → 100, 120 → 200, 5 → 6). A count of 0 (one run longer than the window)
    gives 1.
    """
    n = int(count_in_window)
    if n != count_in_window or n < 0:
        raise InvalidArgument("count_in_window", f"{count_in_window!r} must be a non-negative integer")
    if n == 0:
        return 1
    digits = len(str(n))
    first = int(str(n)[0])
    return (first + 1) * 10 ** (digits - 1)
