"""The Fulcrum scheduler: managed interleaving of training and inference minibatches (Fulcrum §3, §4).

One model runs on the device at a time, at minibatch granularity. The loop, until the
horizon ends:

1. run τ_tr training minibatches;
2. run one inference minibatch of up to β queued requests (oldest first), when the
   policy says it is due — the device idles while it waits;
3. repeat.

When the inference minibatch is due (``policy``):

``"fulcrum"`` (default; the paper's policy)
    Seed 004 (§4, Fig. 3–4): "inference is idle, waiting for a minibatch size of β to
    accumulate", requests arriving at α, so the first request of a minibatch waits
    (β−1)/α and λ = (β−1)/α + t_in. After the τ_tr training minibatches the scheduler
    serves at once if β requests are already queued, else it idles until the β-th arrives.
    The paper assumes a constant α; for arrivals that are not, the wait is also cut off
    when the oldest queued request has waited ``max_wait_ms`` (default (β−1)/α at the
    planned α) and then whatever is queued (< β) is served. Under constant arrivals both
    triggers fire at the same instant, so this is exactly the paper's schedule; under
    Poisson or bursty arrivals it keeps the queueing part of λ at the paper's (β−1)/α instead
    of letting a lull stretch it without bound. With an empty queue it idles until a request
    comes.
``"strict"``
    Only the count trigger: idle until β requests are queued, however long that takes.
``"eager"``
    Work-conserving: serve whatever is queued (≤ β) right after the τ_tr training
    minibatches, and go straight back to training when nothing is (no idling, smaller
    minibatches, no λ guarantee). For comparison only.

``guard=True`` (an extension, off by default) ends a τ_tr block early when the inference
minibatch is already due (β queued, or the oldest request has waited ``max_wait_ms``): a
static τ_tr planned from measured times overruns the window whenever training minibatches
run slower than measured (a shared CPU, thermal throttling), and the guard turns that
overrun into fewer training minibatches instead of a growing queue. Under the paper's
conditions (constant α, exact times) the guard never fires, so the schedule is unchanged.

Without the guard the τ_tr block is never cut short: when the device cannot keep up
(t_in > β/α, or τ_tr too large for the window) the queue grows, as Fulcrum's keep-up condition predicts. After the
horizon no new work starts but the requests still queued are flushed in minibatches of ≤ β
(no training, no waiting) for at most ``flush_s``; what is left after that is reported as
unserved.

The backend decides whether this runs in real time (``TorchBackend``: a feeder thread fills
the queue while models run) or on a virtual clock (``TimedBackend``: exact and fast).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from edgetune import validation
from edgetune.errors import InvalidArgument
from edgetune.optimization.interleaving.arrivals import ArrivalProcess
from edgetune.optimization.interleaving.backends import Backend
from edgetune.optimization.interleaving.metrics import IDLE, TRAIN, RunResult, Segment
from edgetune.optimization.interleaving.plan import InterleavingPlan
from edgetune.optimization.interleaving.requests import RequestSource
from edgetune.optimization.interleaving.serving import (
    RunRecorder,
    arrival_times,
    flush,
    request_source,
    serve,
)

POLICIES = ("fulcrum", "strict", "eager")


class FulcrumScheduler:
    """Managed interleaving: ``tau_train`` training minibatches, then one inference minibatch of ≤ ``beta``.

    ``arrival_rps`` (the planned α) sets the fulcrum policy's wait cut-off (β−1)/α unless
    ``max_wait_ms`` is given; without either, the arrival process's mean rate is used.
    """

    def __init__(self, backend: Backend, tau_train: int, beta: int, *, policy: str = "fulcrum",
                 arrival_rps: float | None = None, max_wait_ms: float | None = None, flush_s: float = 5.0,
                 guard: bool = False) -> None:
        if isinstance(tau_train, bool) or not isinstance(tau_train, int) or tau_train < 0:
            raise InvalidArgument("tau_train", f"{tau_train!r} must be a non-negative integer", ">= 0")
        if isinstance(beta, bool) or not isinstance(beta, int) or beta < 1:
            raise InvalidArgument("beta", f"{beta!r} must be a positive integer", ">= 1")
        if policy not in POLICIES:
            raise InvalidArgument("policy", f"unknown policy {policy!r}", ", ".join(POLICIES))
        validation.optional(validation.arrival_rps, arrival_rps, "arrival_rps")
        if max_wait_ms is not None and not max_wait_ms >= 0:
            raise InvalidArgument("max_wait_ms", f"{max_wait_ms!r} must not be negative", ">= 0")
        if not flush_s >= 0:
            raise InvalidArgument("flush_s", f"{flush_s!r} must not be negative", ">= 0")
        self.backend = backend
        self.tau_train, self.beta, self.policy = tau_train, beta, policy
        self.arrival_rps, self.max_wait_ms, self.flush_s = arrival_rps, max_wait_ms, flush_s
        self.guard = guard

    @classmethod
    def from_plan(cls, backend: Backend, plan: InterleavingPlan, **kwargs) -> FulcrumScheduler:
        if not plan.feasible:
            raise InvalidArgument("plan", f"the plan is infeasible: {plan.reason}", "a feasible plan")
        return cls(backend, plan.tau_train, plan.beta, arrival_rps=plan.arrival_rps, **kwargs)

    def _max_wait_s(self, arrivals) -> float:
        if self.max_wait_ms is not None:
            return self.max_wait_ms / 1000.0
        rate = self.arrival_rps
        if rate is None and isinstance(arrivals, ArrivalProcess):
            rate = arrivals.mean_rate_rps
        if rate is None:
            if self.policy == "fulcrum":
                raise InvalidArgument("arrival_rps", "the fulcrum policy needs the planned arrival rate "
                                      "(or max_wait_ms) when arrivals are plain instants", "> 0")
            return math.inf
        return (self.beta - 1) / rate

    # --- when the inference minibatch is due ------------------------------------------------
    def _due(self, source: RequestSource, max_wait_s: float) -> bool:
        """The guard's test: β queued, or the oldest queued request has waited its share of λ."""
        n = source.poll()
        return n >= self.beta or (n > 0 and source.now_s() - source.queue[0].arrival_s >= max_wait_s)

    def _await_batch(self, source: RequestSource, horizon_s: float, max_wait_s: float) -> int:
        """Idle until the policy says serve; the number of queued requests then (0: serve nothing)."""
        n = source.poll()
        if self.policy == "eager":
            if n == 0 and self.tau_train == 0:  # nothing else to run: idle until a request comes
                n = source.wait(1, horizon_s)
            return n
        if n >= self.beta:
            return n
        if self.policy == "strict":
            return source.wait(self.beta, horizon_s)
        if n == 0:
            n = source.wait(1, horizon_s)
            if n == 0:
                return 0
        deadline = source.queue[0].arrival_s + max_wait_s
        return source.wait(self.beta, min(deadline, horizon_s))

    def run(self, arrivals: ArrivalProcess | Sequence[float] | np.ndarray, horizon_s: float) -> RunResult:
        """Run until ``horizon_s`` (seconds) with requests from ``arrivals``; every metric recorded."""
        if not horizon_s > 0:
            raise InvalidArgument("horizon_s", f"{horizon_s!r} must be positive", "> 0")
        times = arrival_times(arrivals, horizon_s)
        max_wait_s = self._max_wait_s(arrivals)
        source = request_source(self.backend, times)
        rec = RunRecorder(times.size)
        source.start()
        try:
            while source.now_s() < horizon_s:
                for _ in range(self.tau_train):
                    if source.now_s() >= horizon_s or (self.guard and self._due(source, max_wait_s)):
                        break
                    t0 = source.now_s()
                    self.backend.train_step()
                    rec.segments.append(Segment(TRAIN, t0, source.now_s(), self.backend.train_batch_size))
                if source.now_s() >= horizon_s:
                    break
                t0 = source.now_s()
                n = self._await_batch(source, horizon_s, max_wait_s)
                if source.now_s() > t0:
                    rec.segments.append(Segment(IDLE, t0, source.now_s()))
                if n > 0 and source.now_s() < horizon_s:
                    serve(self.backend, source, rec, self.beta)
            flush(self.backend, source, rec, self.beta, horizon_s + self.flush_s)
        finally:
            source.stop()
        return RunResult(
            method=("interleaved" if self.policy == "fulcrum" else f"interleaved-{self.policy}")
            + ("+guard" if self.guard else ""),
            horizon_s=float(horizon_s), arrival_s=source.stamped_s, service_start_s=rec.start_s, completion_s=rec.completion_s,
            segments=rec.segments, end_s=source.now_s(), train_batch_size=self.backend.train_batch_size,
            params={"tau_train": self.tau_train, "beta": self.beta, "policy": self.policy, "guard": int(self.guard),
                    "max_wait_ms": max_wait_s * 1000.0 if math.isfinite(max_wait_s) else float("nan")},
            losses=list(self.backend.losses))


def run_interleaved(backend: Backend, arrivals: ArrivalProcess | Sequence[float] | np.ndarray, horizon_s: float,
                    tau_train: int, beta: int, **kwargs) -> RunResult:
    """One managed-interleaving run (see :class:`FulcrumScheduler` for the keyword arguments)."""
    return FulcrumScheduler(backend, tau_train, beta, **kwargs).run(arrivals, horizon_s)
