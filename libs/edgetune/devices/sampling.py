"""Power samples, sensors and samplers: a polling thread for real devices, instant replay for virtual-clock devices.

``ThreadedSampler`` polls a sensor from a daemon thread at a fixed rate on a real clock. Its
schedule is drift-free: sample *k* is due at ``t0 + k / rate_hz`` (not "previous + period"),
so a slow read delays one sample, never the ones after it; deadlines already missed are
skipped rather than bunched. The first sample is taken in ``start()`` itself, at the start
instant. The loop does nothing but one sensor read and an ``Event.wait`` per sample, so its
cost stays far below the 2 % overhead budget of a minibatch.

``VirtualSampler`` serves devices on a :class:`~edgetune.base.clocks.VirtualClock`: no
thread; ``stop()`` produces the samples a sensor would have given at ``t0 + k / rate_hz`` for
every instant up to now, asking the device what its power was at each one.
"""

from __future__ import annotations

import math
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass

from edgetune.base.clocks import Clock
from edgetune.errors import FailedPrecondition, InvalidArgument


# --- power ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class PowerSample:
    t_s: float  # on the device's clock
    power_w: float  # total board / module power
    rails_w: dict[str, float] | None = None  # per rail (VDD_GPU_SOC, VDD_CPU_CV, ...) when known


class PowerSensor(ABC):
    """Instantaneous power, as INA3221 / jtop report it."""

    @abstractmethod
    def read_w(self) -> float:
        """Total power now (W)."""

    def rails_w(self) -> dict[str, float]:
        """Per-rail power now (W); empty when the sensor has only a total."""
        return {}


class PowerSampler(ABC):
    """Collects power samples at a fixed rate while a workload runs.

    ``start()`` before the minibatches, ``stop()`` after; ``stop`` returns the samples taken
    in between (the first at the start instant). Real devices sample from a thread
    (:class:`ThreadedSampler`); virtual-clock devices produce the
    samples their sensor would have given at those instants.
    """

    def __init__(self, rate_hz: float) -> None:
        if rate_hz <= 0:
            raise InvalidArgument("sample_rate_hz", f"{rate_hz} must be positive", "> 0")
        self.rate_hz = rate_hz

    @abstractmethod
    def start(self) -> None: ...

    @abstractmethod
    def stop(self) -> list[PowerSample]: ...

    def poll(self) -> list[PowerSample]:
        """The samples taken since the last ``poll`` (or ``start``), while sampling goes on; ``stop``
        still returns them all. A sampler that cannot tell before ``stop`` gives none (the online
        tuner then waits its full ``settle_s`` after a switch)."""
        return []


def _reader(sensor: PowerSensor, with_rails: bool) -> Callable[[], tuple[float, dict[str, float] | None]]:
    """One call that gives total and rails; one pass over the files when the sensor supports it."""
    both = getattr(sensor, "read_total_and_rails", None)
    if with_rails and callable(both):
        return both
    if with_rails:
        return lambda: (sensor.read_w(), sensor.rails_w() or None)
    return lambda: (sensor.read_w(), None)


def next_deadline(t0_s: float, period_s: float, k: int, now_s: float) -> tuple[int, float]:
    """The sampling schedule: the ``k``-th deadline ``t0 + k·period``, or the first one still ahead of
    ``now_s`` when a slow read passed it. Deadlines never shift (``previous + period`` would drift by
    every read's duration); a late reader skips samples instead."""
    due = t0_s + k * period_s
    if due < now_s:
        k = math.floor((now_s - t0_s) / period_s) + 1
        due = t0_s + k * period_s
    return k, due


class ThreadedSampler(PowerSampler):
    """Samples ``sensor`` every ``1 / rate_hz`` seconds of ``clock`` from a daemon thread."""

    def __init__(self, sensor: PowerSensor, clock: Clock, rate_hz: float = 1.0, with_rails: bool = True) -> None:
        super().__init__(rate_hz)
        self.sensor = sensor
        self.clock = clock
        self._read = _reader(sensor, with_rails)
        self._samples: list[PowerSample] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._t0 = 0.0
        self._polled = 0
        #: Reads that raised (a busy I2C bus, say); the sample is skipped, the schedule kept.
        self.errors = 0
        self.last_error: BaseException | None = None

    def _take(self) -> None:
        t = self.clock.now_s()
        try:
            power_w, rails = self._read()
        except Exception as exc:  # noqa: BLE001 - keep sampling; reported by stop()
            self.errors += 1
            self.last_error = exc
            return
        self._samples.append(PowerSample(t, power_w, rails))

    def start(self) -> None:
        if self._thread is not None:
            raise FailedPrecondition("sampler already started; a sampler runs once")
        self._t0 = self.clock.now_s()
        self._take()  # the first sample is at the start instant
        self._thread = threading.Thread(target=self._loop, name="edgetune-power-sampler", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        period_s = 1.0 / self.rate_hz
        k = 1
        while True:
            now = self.clock.now_s()
            k, due = next_deadline(self._t0, period_s, k, now)
            if self._stop.wait(due - now):
                return
            self._take()
            k += 1

    def poll(self) -> list[PowerSample]:
        new = self._samples[self._polled:]  # the thread only appends: a slice is a consistent copy
        self._polled += len(new)
        return new

    def stop(self) -> list[PowerSample]:
        """Stop the thread, wait for it, and return every sample (first one at the start instant)."""
        if self._thread is None:
            raise FailedPrecondition("sampler was not started")
        self._stop.set()
        self._thread.join()
        if not self._samples and self.last_error is not None:
            raise FailedPrecondition(f"power sensor gave no sample: {self.last_error}") from self.last_error
        return list(self._samples)


class VirtualSampler(PowerSampler):
    """Samples ``power_at(t)`` at ``t0 + k / rate_hz`` for all instants in [start, stop] of a virtual clock."""

    def __init__(self, power_at: Callable[[float], tuple[float, dict[str, float] | None]], clock: Clock,
                 rate_hz: float = 1.0) -> None:
        super().__init__(rate_hz)
        self.power_at = power_at
        self.clock = clock
        self._t0: float | None = None
        self._samples: list[PowerSample] = []  # produced so far (each instant asked once)

    def start(self) -> None:
        if self._t0 is not None:
            raise FailedPrecondition("sampler already started; a sampler runs once")
        self._t0 = self.clock.now_s()

    def poll(self) -> list[PowerSample]:
        if self._t0 is None:
            raise FailedPrecondition("sampler was not started")
        period_s = 1.0 / self.rate_hz
        n = int(math.floor((self.clock.now_s() - self._t0) / period_s + 1e-9)) + 1
        new = []
        for k in range(len(self._samples), n):
            t = self._t0 + k * period_s
            power_w, rails = self.power_at(t)
            new.append(PowerSample(t, power_w, rails))
        self._samples.extend(new)
        return new

    def stop(self) -> list[PowerSample]:
        self.poll()
        return list(self._samples)
