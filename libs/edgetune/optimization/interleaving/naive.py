"""Naive time-sharing: training and inference on one device with no coordination (Fulcrum's "native").

Two threads share the device: a training loop that runs minibatches back to back until the
horizon, and an inference server that waits for at least one request and serves whatever is
queued (up to ``max_batch``) in one minibatch, again and again. Nothing decides who runs
when: on a Jetson the GPU's time-slicing does (Fulcrum §3.1, "native interleaving"); on a
CPU the OS scheduler and the interpreter lock do, so the two really contend (pin the process
to one core to make the CPU a single device). The same :class:`RunResult` is recorded; the
segments of the two threads overlap.

Needs a real-time backend (``TorchBackend``): there is no contention model on a virtual clock.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

import numpy as np

from edgetune.errors import InvalidArgument
from edgetune.optimization.interleaving.arrivals import ArrivalProcess
from edgetune.optimization.interleaving.backends import Backend
from edgetune.optimization.interleaving.metrics import TRAIN, RunResult, Segment
from edgetune.optimization.interleaving.serving import (
    RunRecorder,
    arrival_times,
    flush,
    request_source,
    serve,
)


def run_naive(backend: Backend, arrivals: ArrivalProcess | Sequence[float] | np.ndarray, horizon_s: float,
              max_batch: int, *, flush_s: float = 5.0, train: bool = True) -> RunResult:
    """Run the training thread and the inference-server thread side by side until ``horizon_s``.

    ``max_batch``: the most requests one inference minibatch takes (use the same β as the
    managed run). ``train=False`` runs the server alone (an inference-only reference).
    """
    if not backend.realtime:
        raise InvalidArgument("backend", "naive time-sharing needs a real-time backend (threads contend "
                              "for a real device)", "TorchBackend")
    if isinstance(max_batch, bool) or not isinstance(max_batch, int) or max_batch < 1:
        raise InvalidArgument("max_batch", f"{max_batch!r} must be a positive integer", ">= 1")
    if not horizon_s > 0:
        raise InvalidArgument("horizon_s", f"{horizon_s!r} must be positive", "> 0")
    times = arrival_times(arrivals, horizon_s)
    source = request_source(backend, times)
    rec = RunRecorder(times.size)
    train_segments: list[Segment] = []
    errors: list[BaseException] = []

    def training() -> None:
        try:
            while source.now_s() < horizon_s:
                t0 = source.now_s()
                backend.train_step()
                train_segments.append(Segment(TRAIN, t0, source.now_s(), backend.train_batch_size))
        except BaseException as exc:  # surfaced in the caller's thread below
            errors.append(exc)

    def server() -> None:
        try:
            while source.now_s() < horizon_s:
                if source.wait(1, horizon_s) > 0 and source.now_s() < horizon_s:
                    serve(backend, source, rec, max_batch)
            flush(backend, source, rec, max_batch, horizon_s + flush_s)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=server, name="naive-inference")]
    if train:
        threads.append(threading.Thread(target=training, name="naive-training"))
    source.start()
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        source.stop()
    if errors:
        raise errors[0]
    return RunResult(
        method="naive" if train else "inference-only", horizon_s=float(horizon_s), arrival_s=source.stamped_s,
        service_start_s=rec.start_s, completion_s=rec.completion_s,
        segments=sorted(rec.segments + train_segments, key=lambda s: s.start_s), end_s=source.now_s(),
        train_batch_size=backend.train_batch_size, params={"beta": max_batch, "policy": "naive"},
        losses=list(backend.losses))
