"""Power stabilisation after a mode change: sliding-window detection on the power sensor.

Seed 002 (PowerTrain) saw board power take 2–3 s to settle after a power-mode change and
detected it with a sliding window. Here the sensor is polled at ``poll_hz``; once two full
consecutive windows exist, the window is slid one reading at a time and power counts as
settled as soon as the mean of the latest window differs from the mean of the window
before it by no more than ``max(tolerance · mean, tolerance_w)``. A timeout stops the wait
and the caller records that settling was not detected.

:class:`SettleDetector` is the rule fed one reading at a time: :func:`wait_for_settle` drives
it against a sensor and a clock (real or virtual) for the profiler, and the online tuner
(:mod:`edgetune.online`) feeds it the power samples of the user's own steps after a switch;
:func:`detect_settle` runs it over a list of readings (an index out).
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


class SettleDetector:
    """The settling rule fed one reading at a time: :meth:`add` answers whether the latest two
    windows of ``per_window`` readings agree (and keeps answering yes once they did)."""

    def __init__(self, per_window: int, tolerance: float, tolerance_w: float = 0.0) -> None:
        if per_window < 1:
            raise InvalidArgument("per_window", f"{per_window} readings", ">= 1")
        self.per_window, self.tolerance, self.tolerance_w = per_window, tolerance, tolerance_w
        self._values: list[float] = []
        self.settled = False

    def add(self, power_w: float) -> bool:
        if not self.settled:
            values, n = self._values, self.per_window
            values.append(float(power_w))
            if len(values) >= 2 * n:
                self.settled = windows_agree(values[-2 * n:-n], values[-n:], self.tolerance, self.tolerance_w)
                del values[:-2 * n]  # only the two latest windows matter
        return self.settled

    def last_mean_w(self) -> float:
        """Mean of the latest window (of what there is, before one is full)."""
        tail = self._values[-self.per_window:]
        return sum(tail) / len(tail) if tail else float("nan")


def detect_settle(power_w: Sequence[float], per_window: int, tolerance: float, tolerance_w: float = 0.0) -> int | None:
    """Index of the first reading at which two consecutive windows agree, or ``None``."""
    detector = SettleDetector(per_window, tolerance, tolerance_w)
    for i, value in enumerate(power_w):
        if detector.add(value):
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
    detector = SettleDetector(window_size(window_s, poll_hz), tolerance, tolerance_w)
    period_s = 1.0 / poll_hz
    t0 = clock.now_s()
    readings: list[PowerSample] = []
    while True:
        now = clock.now_s()
        sample = PowerSample(now, sensor.read_w())
        readings.append(sample)
        if on_reading is not None:
            on_reading(sample)
        if detector.add(sample.power_w):
            return SettleResult(True, now - t0, detector.last_mean_w(), tuple(readings))
        if now - t0 >= timeout_s:
            return SettleResult(False, now - t0, detector.last_mean_w(), tuple(readings))
        clock.sleep(period_s)
