"""Serving pieces shared by the managed scheduler and the naive baseline.

``arrival_times`` samples the run's arrivals, ``request_source`` picks the queue that fits the
backend's clock, ``serve`` runs one inference minibatch over the oldest queued requests,
``flush`` empties the queue after the horizon, and :class:`RunRecorder` keeps per-request
times and device segments.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from edgetune.optimization.interleaving.arrivals import ArrivalProcess
from edgetune.optimization.interleaving.backends import Backend
from edgetune.optimization.interleaving.metrics import INFER, Segment
from edgetune.optimization.interleaving.requests import (
    Request,
    RequestSource,
    ThreadedRequestSource,
    VirtualRequestSource,
)


def arrival_times(arrivals: ArrivalProcess | Sequence[float] | np.ndarray, horizon_s: float) -> np.ndarray:
    """The run's arrival instants: a process sampled over the horizon, or given instants cut at it."""
    if isinstance(arrivals, ArrivalProcess):
        return arrivals.times_s(horizon_s)
    t = np.sort(np.asarray(arrivals, dtype=float).ravel())
    return t[t < horizon_s]


def request_source(backend: Backend, times_s: np.ndarray) -> RequestSource:
    """A feeder thread for real-time backends, an exact virtual queue otherwise."""
    if backend.realtime:
        return ThreadedRequestSource(times_s, backend.clock)
    return VirtualRequestSource(times_s, backend.clock)  # type: ignore[arg-type]


class RunRecorder:
    """Per-request times and device segments of one run."""

    def __init__(self, n_requests: int) -> None:
        self.start_s = np.full(n_requests, np.nan)
        self.completion_s = np.full(n_requests, np.nan)
        self.segments: list[Segment] = []

    def served(self, requests: list[Request], start_s: float, end_s: float) -> None:
        for r in requests:
            self.start_s[r.request_id] = start_s
            self.completion_s[r.request_id] = end_s
        self.segments.append(Segment(INFER, start_s, end_s, len(requests)))


def serve(backend: Backend, source: RequestSource, rec: RunRecorder, k: int) -> None:
    """Run one inference minibatch over the ``k`` oldest queued requests."""
    batch = source.take(k)
    start = source.now_s()
    backend.infer_step(len(batch))
    rec.served(batch, start, source.now_s())


def flush(backend: Backend, source: RequestSource, rec: RunRecorder, max_batch: int, until_s: float) -> None:
    """Serve what is still queued after the horizon, in minibatches of ≤ ``max_batch``, until ``until_s``."""
    while source.poll() > 0 and source.now_s() < until_s:
        serve(backend, source, rec, max_batch)
