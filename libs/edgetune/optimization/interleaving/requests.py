"""The request queue a scheduler serves, fed from an arrival process on the backend's clock.

A :class:`RequestSource` holds the requests that have arrived and are not yet served
(``queue``, oldest first). The scheduler ``poll``\\ s it, ``wait``\\ s on it (until enough requests
are queued or a deadline passes — the device idles meanwhile) and ``take``\\ s a minibatch.

- :class:`ThreadedRequestSource` (real clock): a feeder thread sleeps until each arrival
  instant and puts a timestamped request on a thread-safe queue, as a front end receiving
  requests would; the arrival stamp is the instant it was enqueued.
- :class:`VirtualRequestSource` (virtual clock): arrivals are known in advance; waiting
  advances the clock straight to the next instant that matters, so runs are exact and fast.

All times are seconds since ``start()``.
"""

from __future__ import annotations

import queue
import threading
from abc import ABC, abstractmethod
from collections import deque
from dataclasses import dataclass

import numpy as np

from edgetune.base.clocks import Clock, VirtualClock

#: Slack when comparing virtual instants (float rounding of clock advances).
_EPS_S = 1e-9


@dataclass(frozen=True)
class Request:
    request_id: int  # index into the run's arrival list
    arrival_s: float  # when it was queued, seconds since the run started


class RequestSource(ABC):
    """Arrived-but-unserved requests, oldest first."""

    def __init__(self, arrival_times_s: np.ndarray, clock: Clock) -> None:
        self.arrival_times_s = np.asarray(arrival_times_s, dtype=float)
        self.clock = clock
        self.queue: deque[Request] = deque()
        #: when each request was actually queued (real time: the feeder's stamp; virtual: its instant)
        self.stamped_s = self.arrival_times_s.copy()
        self._t0 = 0.0

    @property
    def n_total(self) -> int:
        """How many requests the arrival process produces in the run."""
        return int(self.arrival_times_s.size)

    def now_s(self) -> float:
        return self.clock.now_s() - self._t0

    def start(self) -> None:
        self._t0 = self.clock.now_s()

    def stop(self) -> None:  # noqa: B027 - optional hook: only a feeder thread needs stopping
        """Stop feeding (idempotent)."""

    @abstractmethod
    def poll(self) -> int:
        """Move every request that has arrived by now into ``queue``; return the queue length."""

    @abstractmethod
    def wait(self, count: int, deadline_s: float) -> int:
        """Block until ``count`` requests are queued or ``deadline_s`` passes; return the queue length."""

    @abstractmethod
    def exhausted(self) -> bool:
        """True once every request of the run has been queued (no more will come)."""

    def take(self, k: int) -> list[Request]:
        """Pop the ``k`` oldest queued requests (fewer if fewer are queued)."""
        return [self.queue.popleft() for _ in range(min(k, len(self.queue)))]


class VirtualRequestSource(RequestSource):
    """Arrivals on a :class:`VirtualClock`: ``wait`` advances the clock instead of sleeping."""

    def __init__(self, arrival_times_s: np.ndarray, clock: VirtualClock) -> None:
        super().__init__(arrival_times_s, clock)
        self._next = 0  # index of the first request not yet queued

    def poll(self) -> int:
        now = self.now_s() + _EPS_S
        t = self.arrival_times_s
        while self._next < t.size and t[self._next] <= now:
            self.queue.append(Request(self._next, float(t[self._next])))
            self._next += 1
        return len(self.queue)

    def wait(self, count: int, deadline_s: float) -> int:
        if self.poll() >= count:
            return len(self.queue)
        idx = self._next + count - len(self.queue) - 1  # the arrival that brings the queue to `count`
        target = float(self.arrival_times_s[idx]) if idx < self.n_total else float("inf")
        target = min(target, deadline_s)
        now = self.now_s()
        if target > now:
            assert isinstance(self.clock, VirtualClock)
            self.clock.advance(target - now)
        return self.poll()

    def exhausted(self) -> bool:
        return self._next >= self.n_total


class ThreadedRequestSource(RequestSource):
    """Arrivals in real time: a feeder thread enqueues each request at its instant."""

    def __init__(self, arrival_times_s: np.ndarray, clock: Clock) -> None:
        super().__init__(arrival_times_s, clock)
        self._inbox: queue.Queue[Request] = queue.Queue()
        self._stop = threading.Event()
        self._fed = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        super().start()
        self._thread = threading.Thread(target=self._feed, name="request-feeder", daemon=True)
        self._thread.start()

    def _feed(self) -> None:
        for i, t in enumerate(self.arrival_times_s):
            delay = self._t0 + float(t) - self.clock.now_s()
            if delay > 0 and self._stop.wait(delay):  # Event.wait: a stop interrupts the sleep
                break
            stamp = self.now_s()
            self.stamped_s[i] = stamp
            self._inbox.put(Request(i, stamp))
        self._fed.set()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5.0)

    def poll(self) -> int:
        while True:
            try:
                self.queue.append(self._inbox.get_nowait())
            except queue.Empty:
                return len(self.queue)

    def wait(self, count: int, deadline_s: float) -> int:
        while self.poll() < count:
            remaining = deadline_s - self.now_s()
            if remaining <= 0:
                break
            try:  # the device idles here; with no more requests to come it idles to the deadline
                self.queue.append(self._inbox.get(timeout=remaining))
            except queue.Empty:
                continue
        return len(self.queue)

    def exhausted(self) -> bool:
        return self._fed.is_set() and self._inbox.empty()
