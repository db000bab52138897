"""Power stabilisation after a mode change: sliding-window detection on the power sensor.

Seed 002 (PowerTrain) saw board power take 2–3 s to settle after a power-mode change and
detected it with a sliding window. Here the sensor is polled at ``poll_hz``; once two full
consecutive windows exist, the window is slid one reading at a time and power counts as
settled as soon as the mean of the latest window differs from the mean of the window
before it by no more than ``max(tolerance · mean, tolerance_w)``. A timeout stops the wait
and the caller records that settling was not detected.

:func:`detect_settle` is the pure rule (a list of readings in, an index out);
:func:`wait_for_settle` drives it against a sensor and a clock (real or virtual).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from edgetune.base.clocks import Clock
from edgetune.devices.sampling import PowerSample, PowerSensor
from edgetune.errors import InvalidArgument


@dataclass(frozen=True)
class SettleResult:
    settled: bool
    #: Seconds from the start of the wait to the reading that confirmed it (or to the timeout).
    settle_s: float
    #: Mean of the last window: the mode's idle power once settled (nothing runs meanwhile).
    power_w: float
    readings: tuple[PowerSample, ...]


def window_size(window_s: float, poll_hz: float) -> int:
    if window_s <= 0:
        raise InvalidArgument("settle_window_s", f"{window_s} must be positive", "> 0")
    if poll_hz <= 0:
        raise InvalidArgument("settle_poll_hz", f"{poll_hz} must be positive", "> 0")
    return max(2, round(window_s * poll_hz))


def windows_agree(prev: Sequence[float], last: Sequence[float], tolerance: float, tolerance_w: float) -> bool:
    prev_mean = sum(prev) / len(prev)
    last_mean = sum(last) / len(last)
    return abs(last_mean - prev_mean) <= max(tolerance * abs(prev_mean), tolerance_w)


def detect_settle(power_w: Sequence[float], per_window: int, tolerance: float, tolerance_w: float = 0.0) -> int | None:
    """Index of the first reading at which two consecutive windows agree, or ``None``."""
    for i in range(2 * per_window - 1, len(power_w)):
        last = power_w[i - per_window + 1:i + 1]
        prev = power_w[i - 2 * per_window + 1:i - per_window + 1]
        if windows_agree(prev, last, tolerance, tolerance_w):
            return i
    return None


def wait_for_settle(
    sensor: PowerSensor,
    clock: Clock,
    *,
    window_s: float,
    poll_hz: float,
    tolerance: float,
    tolerance_w: float,
    timeout_s: float,
    on_reading: Callable[[PowerSample], None] | None = None,
) -> SettleResult:
    """Poll ``sensor`` until power is stable or ``timeout_s`` passes.

    ``on_reading`` sees every reading (the protocol checks the hard power limit there).
    """
    n = window_size(window_s, poll_hz)
    period_s = 1.0 / poll_hz
    t0 = clock.now_s()
    readings: list[PowerSample] = []
    values: list[float] = []
    while True:
        now = clock.now_s()
        sample = PowerSample(now, sensor.read_w())
        readings.append(sample)
        values.append(sample.power_w)
        if on_reading is not None:
            on_reading(sample)
        if len(values) >= 2 * n and windows_agree(values[-2 * n:-n], values[-n:], tolerance, tolerance_w):
            return SettleResult(True, now - t0, sum(values[-n:]) / n, tuple(readings))
        if now - t0 >= timeout_s:
            tail = values[-n:]
            return SettleResult(False, now - t0, sum(tail) / len(tail), tuple(readings))
        clock.sleep(period_s)
