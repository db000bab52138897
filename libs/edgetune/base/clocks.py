"""The clocks devices run on: real time, or a virtual time that only a simulation advances.

Real devices live on :class:`RealClock`. Simulated and replayed devices keep a :class:`VirtualClock`
that ``run`` and ``settle`` advance, so a 40-minibatch profile of a 2-second minibatch costs
microseconds and power samples are taken at the virtual instants a 1 Hz sensor would see.
"""

from __future__ import annotations

import threading
import time
from abc import ABC, abstractmethod


class Clock(ABC):
    @abstractmethod
    def now_s(self) -> float: ...

    @abstractmethod
    def sleep(self, seconds: float) -> None: ...


class RealClock(Clock):
    def now_s(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            time.sleep(seconds)


class VirtualClock(Clock):
    """Time that passes only when the simulation says so. ``sleep`` advances it."""

    def __init__(self, start_s: float = 0.0) -> None:
        self._now = start_s
        self._lock = threading.Lock()

    def now_s(self) -> float:
        return self._now

    def sleep(self, seconds: float) -> None:
        self.advance(seconds)

    def advance(self, seconds: float) -> float:
        if seconds < 0:
            raise ValueError("a clock cannot go backwards")
        with self._lock:
            self._now += seconds
            return self._now
