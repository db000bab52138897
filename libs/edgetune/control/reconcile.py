"""The reconcile loop: the leader drives every TuningJob's target nodes to an applied configuration.

Only the replica holding the leader lease runs it (:meth:`Reconciler.run_once` does nothing on a
standby). Each pass reads the jobs (:mod:`edgetune.control.tuningjobs`), resolves their target
nodes from the registry and starts one worker per (job, node) that is not Applied / Failed:

1. **Profiling**: the shared :class:`~edgetune.tuning.NodeTuner` measures through a
   :class:`QueueMeasurer`: every point is a job on the node's stream (``JobQueue``) with a
   deterministic job id (job, node, mode, batch size, purpose); the agent runs it with the job id
   as run key, so the measurement's id is known before it lands. A point already stored is read
   back, not profiled again: a new leader re-running the tuner replays to where the old one stopped.
2. **Estimating**: Transfer / Predict on the Estimator service from the spec's
   ``reference_model_id``, else the estimator's reference of the device model and role
   (``reference-orin-agx-train``: what ``edgetune up`` fits), else the reference shipped with the
   package for that device model and role (``reference:orin-agx``), else a reference fitted from the
   stored measurements of the device model and workload (other nodes'), else the node fails saying
   so. The node's events name the reference used and where it came from.
3. **Selecting / Verifying**: ``Optimizer.Select`` at the job's risk, the choice measured on the node.
4. **Applied**: the choice is written to the status (Verifying), then published as the node's config
   together with the status Applied, in one atomic write fenced by the lease; the store writes the revision it gives
   the config into the status (never guessed). A config whose digest is unchanged adds no revision, and a resumed node
   that already has its decision publishes that one, so a new leader never adds a second revision.

A ``method: cap-search`` node skips steps 2-3: :class:`~edgetune.profiling.order.CapSearch` (Ahmed et
al.'s order) under the node's budget as the cap, over the GPU clocks and the job's batch sizes, each point
a job on the node's stream; the measured point with the least time per sample whose peak power is strictly
under the cap is applied (:func:`~edgetune.profiling.order.fastest_under_cap`), its measured time and peak
power in the status.

Triggers: a pass runs at once on :meth:`Reconciler.wake` (a job submitted, a node registered, a node's
worker ended), and every ``interval_s`` besides (heartbeats lost, drift checks due, backoffs passed); wakes
that come faster than passes end are taken together, passes keeping to :data:`PASS_SHARE` of the time; a pass
starts at most :data:`MAX_STARTS_PER_PASS` workers (a 1,000-node job starts over ten passes, not at once). A
worker waiting for its node's points is woken when this process acknowledges one of the node's jobs (the
agents' NodeJobs calls), else reads the store at a poll that backs off to :data:`MAX_POLL_S` while nothing
lands. Level-triggered: a node's status follows its spec and budget, never a past failure. A node whose
budget changed after it was Applied **or Failed** (``UpdateBudget``; e.g. Failed because no mode fits
1 W) is selected again from its stored predictions (the tuner kept in memory, or replayed from the
store: no new profiling). A job submitted again after a cancel has a new generation: its nodes start
again (a Failed one after a backoff, :func:`~edgetune.control.tuningjobs.retry_backoff_s`).

Conditions (:class:`~edgetune.tuning.jobs.ConditionType`): each pass sets the job's ``NoMatchingNodes``
(the target ids that match no registered node, or a selector matching none); a node carries
``Infeasible`` (no option fits its budget, and what would), ``Verified`` (its applied configuration
measured within budget), ``Drifted`` and ``Failed`` (any other failure, saying why). Each node's
events say what happened (profiled, the reference transferred from, selected, verified, drifted,
re-tuned, failed), with a reason word.

Drift (:class:`DriftPolicy`): every ``check_s`` an Applied node's configuration is measured again on
its agent (a ``check`` point). Measured over the budget, or its time off the prediction by more than
the tolerance beyond what verification accepted (:func:`drift_reason`), the node is re-tuned: its
``drift_epoch`` goes up (its new points get new job ids, so they are measured, not read back), the
applied mode counts as a miss when it was over budget (the library's rule: it and every mode
dominating it are ruled out, σ widened), the candidates nearest the choice are profiled again and
replace their stale points, the model is transferred again and the node selected and verified
anew. At most ``max_retunes`` re-tunes per node and job; then it is Failed saying why.

The leader's caches (tuners, status writers, check times, workers) are pruned each pass of the
jobs that are gone or cancelled and of the nodes no longer targeted.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import threading
import time
import zlib
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np
from prometheus_client import Counter

from edgetune import validation
from edgetune.base.mode import PowerMode
from edgetune.base.objective import Objective
from edgetune.base.records import Choice, Decision, Points, Predictions
from edgetune.base.roles import Role
from edgetune.base.workload import WorkloadRef
from edgetune.clients.calls import CallFailed, Status
from edgetune.clients.tuning import OptimizerSelector, ServiceEstimator
from edgetune.control.configs import ConfigStore
from edgetune.control.jobs import COMPLETIONS, JobQueue
from edgetune.control.leader import LeaderLease, NotLeader
from edgetune.control.registry import NodeRegistry
from edgetune.control.tuningjobs import JobGone, StatusWriter, TuningJobs
from edgetune.errors import EdgetuneError, FailedPrecondition, InvalidArgument
from edgetune.estimation.methods import TRANSFER_METHODS
from edgetune.estimation.references import PREFIX, shipped_for
from edgetune.identity import ClientSecurity, open_channel
from edgetune.optimization.frontier import N_INITIAL, PER_ROUND, ROUNDS
from edgetune.powermodes.grids import named_grid
from edgetune.powermodes.specs import get_spec
from edgetune.profiling.order import CapPoint, CapSearch, fastest_under_cap, gpu_levels
from edgetune.profiling.protocol import measurement_id
from edgetune.stopping import Stopped
from edgetune.store import (
    CONNECTION_ERRORS,
    LeaseLost,
    MeasurementRecord,
    NodeConfig,
    NodeRecord,
    ProfileJob,
    Store,
)
from edgetune.tuning.fleet import FLEET_TRANSFER_EPOCHS, FleetPool, fleet_model_id
from edgetune.tuning.jobs import (
    ConditionType,
    NodePhase,
    NodeStatus,
    TuningJobSpec,
    TuningJobView,
    TuningMethod,
)
from edgetune.tuning.policy import TuningPolicy, default_policy
from edgetune.tuning.protocols import Estimator, ModelRef, Selector, reference_model_id
from edgetune.tuning.tuner import NodeTuner

log = logging.getLogger("edgetune.reconcile")
T = TypeVar("T")
V = TypeVar("V")

STEPS = Counter("edgetune_reconcile_steps_total", "Reconcile steps by kind.", ["step"])
POINTS = Counter("edgetune_reconcile_points_total", "Points the loop needed, by source (queued / stored).",
                 ["source"])
CALLS = Counter("edgetune_reconcile_calls_total", "Estimator / Optimizer calls of the loop, by outcome.",
                ["service", "rpc", "outcome"])
#: Reference measurements needed to fit a reference model when the job names none.
MIN_REFERENCE_POINTS = 20
#: The candidate grid a node is tuned over (small enough to predict every mode each round).
CANDIDATE_GRID = "fulcrum"
#: Minibatches per profiled point (the simulated agents are quick; a real board takes seconds a point).
N_MINIBATCHES = 10
#: Longest wait between two reads of a node's outstanding points when no completion woke the waiter.
MAX_POLL_S = 0.8


def point_job_id(job: str, node_id: str, mode: np.ndarray, batch_size: int, purpose: str, epoch: int = 0) -> str:
    """The job-stream id of one point: the same point of the same job (and drift epoch) always gets the same id."""
    key = f"{job}|{node_id}|{int(mode[0])}/{float(mode[1]):g}/{float(mode[2]):g}/{float(mode[3]):g}|" \
          f"{int(batch_size)}|{purpose}"
    if epoch:  # epoch 0 keeps the ids of jobs tuned before drift re-tunes existed
        key += f"|drift{int(epoch)}"
    return f"tune-{job}-{hashlib.sha256(key.encode()).hexdigest()[:16]}"


@dataclass(frozen=True)
class DriftPolicy:
    """How often an Applied node's configuration is measured again, and how far off counts as drift."""

    #: Seconds between checks of an Applied node (0: no checks).
    check_s: float = 0.0
    #: Relative time miss tolerated beyond the miss verification accepted (0.25: 25 % of the predicted time).
    time_tolerance: float = 0.25
    #: Candidates nearest the choice profiled again on a re-tune.
    near_points: int = 5
    #: Re-tunes per node and job before the node is Failed.
    max_retunes: int = 3

    def __post_init__(self) -> None:
        validation.count(self.near_points, "drift.near_points", minimum=1, maximum=1000)
        validation.count(self.max_retunes, "drift.max_retunes", minimum=0, maximum=1000)
        if not (np.isfinite(self.check_s) and self.check_s >= 0):
            raise InvalidArgument("drift.check_s", f"{self.check_s!r}", ">= 0 seconds (0: no checks)")
        if not (np.isfinite(self.time_tolerance) and self.time_tolerance > 0):
            raise InvalidArgument("drift.time_tolerance", f"{self.time_tolerance!r}", "> 0 (a fraction, e.g. 0.25)")


def drift_reason(status: NodeStatus, time_ms: float, power_w: float, budget_w: float, tolerance: float) -> str:
    """Why a check's measurement of the applied configuration is drift ("" when it is not): power over
    the budget, or the time off the prediction by more than ``tolerance`` beyond the miss that
    verification measured (a model error accepted at apply time does not count again)."""
    if power_w > budget_w:
        return f"measured {power_w:.2f} W > budget {budget_w:g} W"
    predicted = status.predicted_time_ms
    if predicted is None or predicted <= 0:
        return ""
    accepted = abs((status.measured_time_ms or predicted) - predicted) / predicted
    miss = abs(time_ms - predicted) / predicted
    if miss > accepted + tolerance:
        return (f"measured {time_ms:.1f} ms vs predicted {predicted:.1f} ms ({100 * miss:.0f} % off; "
                f"{100 * (accepted + tolerance):.0f} % tolerated)")
    return ""


def policy_for(spec: TuningJobSpec, base: TuningPolicy | None = None) -> TuningPolicy:
    """The tuning policy of a job: its risk, objective and profiling budget (frontier or random)."""
    base = base or default_policy()
    risk = spec.risk if spec.risk is not None else base.risk
    objective = spec.objective
    if spec.method == TuningMethod.RANDOM:
        return base.with_(risk=risk, objective=objective, n_initial=spec.profiles, rounds=0)
    # the frontier schedule's shape (N_INITIAL random, then rounds of PER_ROUND) scaled to the budget:
    # each round costs a Transfer + Predict, so a small budget gets few, larger rounds
    n_initial = max(3, min(N_INITIAL, spec.profiles // 2))
    rounds = max(1, min(ROUNDS, (spec.profiles - n_initial) // PER_ROUND))
    per_round = max(1, (spec.profiles - n_initial) // rounds)
    return base.with_(risk=risk, objective=objective, n_initial=n_initial, per_round=per_round, rounds=rounds)


#: Why a worker's :class:`~edgetune.stopping.Stopped` was raised (the one stop exception of the library)
TOLD_TO_STOP = "the worker was told to stop (lease lost, job cancelled or changed, shutdown)"


class NodeLost(Exception):
    """The node stopped heartbeating while points were outstanding: its worker waits for it to return."""


class QueueMeasurer:
    """A :class:`~edgetune.tuning.Measurer` over a node's job stream (module docstring, step 1).

    :attr:`workload` is a :class:`~edgetune.base.workload.WorkloadRef`: points are asked for and keyed
    by its name; a ``MODULE:FUNCTION``'s id (only the node imports its code) is pending until the
    node's first measurement reports it, and a later one reporting another id fails the node.
    """

    def __init__(self, store: Store, queue: JobQueue, job: str, node_id: str, device_model: str,
                 workload: WorkloadRef, role: str, *, should_stop: Callable[[], bool], on_purpose: Callable[[str], None],
                 on_points: Callable[[int], None], timeout_s: float = 300.0, poll_s: float = 0.1,
                 epoch: int = 0, node_live: Callable[[], bool] = lambda: True, live_check_s: float = 1.0) -> None:
        self.store, self.queue, self.job, self.node_id = store, queue, job, node_id
        self.device_model, self.workload, self.role = device_model, workload, role
        self.should_stop, self.on_purpose, self.on_points = should_stop, on_purpose, on_points
        self.timeout_s, self.poll_s = timeout_s, poll_s
        self.epoch = epoch  # the node's drift epoch: part of every point's job id
        self.node_live, self.live_check_s = node_live, live_check_s
        self.queued = 0  # points this measurer sent to the agent (not found in the store)

    def measure(self, modes: np.ndarray, batch_size: int, *, seed: int = 0, purpose: str = "profile") -> Points:
        rows = self.records(modes, batch_size, seed=seed, purpose=purpose)
        return Points(np.asarray([list(r.mode.as_tuple()) for r in rows], dtype=float).reshape(-1, 4),
                      np.asarray([r.batch_size for r in rows]), np.asarray([r.time_ms for r in rows]),
                      np.asarray([r.power_w for r in rows]), self.device_model, self.workload.recorded_as, self.role)

    def records(self, modes: np.ndarray, batch_size: int, *, seed: int = 0,
                purpose: str = "profile") -> list[MeasurementRecord]:
        """The points' stored measurements, in order (a point the device skipped is left out)."""
        modes = np.asarray(modes, dtype=float).reshape(-1, 4)
        self.on_purpose(purpose)
        wanted: list[tuple[str, str]] = []  # (job id, measurement id)
        for mode in modes:
            job_id = point_job_id(self.job, self.node_id, mode, batch_size, purpose, self.epoch)
            pm = PowerMode(int(mode[0]), float(mode[1]), float(mode[2]), float(mode[3]))
            # keyed by the name asked for (the agent keys a MODULE:FUNCTION's rows by it too), so the
            # id of a point is known before it is measured
            mid = measurement_id(self.device_model, self.node_id, self.workload.name, self.role, pm, batch_size,
                                 job_id)
            wanted.append((job_id, mid))
            if self.store.get_measurement(mid) is not None:
                POINTS.labels("stored").inc()
                continue
            point = ProfileJob(self.workload.name, Role.parse(self.role), modes=(pm,), batch_sizes=(int(batch_size),),
                               n_minibatches=N_MINIBATCHES, seed=int(seed))
            self.queue.submit(self.node_id, point.to_dict(), job_id=job_id)
            self.queued += 1
            POINTS.labels("queued").inc()
        found = self._wait([mid for _, mid in wanted])
        rows = [found[mid] for _, mid in wanted if mid in found]
        if len(rows) < len(wanted):
            for job_id, mid in wanted:
                reason = None if mid in found else self.queue.refusal(self.node_id, job_id)
                if reason is not None:  # e.g. a MODULE:FUNCTION the node cannot load: fail with its words
                    raise InvalidArgument("workload", f"node {self.node_id} refused {self.workload.name}: {reason}")
        # a user workload's rows carry its id (the agent loaded it): resolved by the first row, then
        # every later row must carry the same (the models learn under that one id)
        try:
            for r in rows:
                self.workload = self.workload.resolve(r.workload)
        except InvalidArgument as exc:
            raise InvalidArgument("workload", f"node {self.node_id}: {exc.message}", exc.allowed) from None
        self.on_points(len(rows))
        return rows

    def _wait(self, ids: list[str]) -> dict[str, MeasurementRecord]:
        """The measurements as they land; a point still missing once the node's queue is drained
        (acknowledged without a measurement: the device skipped it) is left out."""
        found: dict[str, MeasurementRecord] = {}
        deadline = time.monotonic() + self.timeout_s
        drained_since: float | None = None
        live_checked = time.monotonic()
        seen = COMPLETIONS.seen(self.node_id)
        wait_s = self.poll_s
        while True:
            missing = [mid for mid in ids if mid not in found]  # one round trip a poll, not one per point
            found.update((mid, m) for mid, m in zip(missing, self.store.get_measurements_by_id(missing), strict=True)
                         if m is not None)
            if len(found) == len(ids):
                return found
            if self.should_stop():
                raise Stopped(TOLD_TO_STOP)
            if time.monotonic() - live_checked >= self.live_check_s:  # the heartbeat, not every poll
                live_checked = time.monotonic()
                if not self.node_live():
                    raise NodeLost(f"node {self.node_id} stopped heartbeating with {len(ids) - len(found)} "
                                   "points outstanding")
            drained = self.queue.backlog(self.node_id) == 0 and self.queue.pending_count(self.node_id) == 0
            drained_since = (drained_since or time.monotonic()) if drained else None
            if drained_since is not None and time.monotonic() - drained_since > 1.0:
                return found
            if time.monotonic() > deadline:
                raise TimeoutError(f"node {self.node_id}: {len(ids) - len(found)} points not measured "
                                   f"within {self.timeout_s:g} s")
            # woken by a completion of the node's jobs in this process; else the next poll, backing off while
            # nothing lands (a fleet's thousand waiters polling every 0.1 s would keep a core busy)
            if COMPLETIONS.wait(self.node_id, seen, wait_s):
                wait_s = self.poll_s
            else:
                wait_s = min(wait_s * 2, MAX_POLL_S)
            seen = COMPLETIONS.seen(self.node_id)


def _bind(measurer: QueueMeasurer, writer: StatusWriter, should_stop: Callable[[], bool], *,
          profiled: int | None) -> None:
    """Point ``measurer`` at a node worker: its stop (a measurement of a stopped worker raises
    :class:`Stopped`), its status writer (the phase a purpose means; the points measured counted from
    ``profiled``, None: not counted — a resumed tuner's profiles were counted by the worker that made them)."""
    node_id = measurer.node_id
    phases = {"profile": NodePhase.PROFILING, "verify": NodePhase.VERIFYING}

    def on_purpose(purpose: str) -> None:
        if should_stop():
            raise Stopped(TOLD_TO_STOP)
        writer.update(node_id, lambda s: s if s.phase == phases[purpose] else
                      s.with_event(f"{purpose} on the node", phase=phases[purpose]))

    measurer.should_stop, measurer.on_purpose = should_stop, on_purpose
    measurer.on_points = lambda _n: None
    if profiled is None:
        return
    count = {"n": profiled}

    def on_points(n: int) -> None:
        count["n"] += n
        ref = measurer.workload
        of = f" of {ref.id}" if ref.is_user and ref.resolved else ""  # a user workload's id
        writer.update(node_id, lambda s: s.with_event(f"{count['n']} points measured{of}", profiled=count["n"],
                                                      event_reason="Profiled"))

    measurer.on_points = on_points


def _drop_where(cache: dict[Any, Any], gone: Callable[[Any], bool]) -> None:
    """Remove the entries of ``cache`` whose key is ``gone`` (the per-job caches' keys start with the job)."""
    for key in [k for k in cache if gone(k)]:
        del cache[key]


def _counted(service: str, rpc: str, call: Callable[[], T]) -> T:
    try:
        out = call()
    except Exception:
        CALLS.labels(service, rpc, "error").inc()
        raise
    CALLS.labels(service, rpc, "ok").inc()
    return out


class CountedEstimator:
    """An :class:`~edgetune.tuning.Estimator` whose calls show in :data:`CALLS`."""

    def __init__(self, inner: Estimator) -> None:
        self.inner = inner
        self.where = inner.where

    def fit(self, points: Points, *, model_id: str, method: str = "nn", seed: int = 0,
            epochs: int | None = None) -> ModelRef:
        return _counted("estimator", "Fit", lambda: self.inner.fit(points, model_id=model_id, method=method,
                                                                   seed=seed, epochs=epochs))

    def transfer(self, base: ModelRef, points: Points, *, model_id: str, method: str, seed: int = 0,
                 transfer_epochs: int | None = None, params: dict[str, str] | None = None) -> ModelRef:
        return _counted("estimator", "Transfer", lambda: self.inner.transfer(
            base, points, model_id=model_id, method=method, seed=seed, transfer_epochs=transfer_epochs,
            params=params))

    def predict(self, model: ModelRef, modes: np.ndarray, batch_size: int) -> Predictions:
        return _counted("estimator", "Predict", lambda: self.inner.predict(model, modes, batch_size))

    def find(self, model_id: str) -> ModelRef | None:
        return _counted("estimator", "ListModels", lambda: self.inner.find(model_id))


class LimitedEstimator:
    """At most ``slots`` calls in flight to the Estimator: the rest wait here, not in the service's queue,
    where their deadlines would run out behind each other (100 nodes' transfers at once)."""

    def __init__(self, inner: Estimator, slots: int) -> None:
        self.inner = inner
        self.where = inner.where
        self._slots = threading.BoundedSemaphore(validation.count(slots, "estimator_slots", minimum=1, maximum=1024))

    def fit(self, points: Points, *, model_id: str, method: str = "nn", seed: int = 0,
            epochs: int | None = None) -> ModelRef:
        with self._slots:
            return self.inner.fit(points, model_id=model_id, method=method, seed=seed, epochs=epochs)

    def transfer(self, base: ModelRef, points: Points, *, model_id: str, method: str, seed: int = 0,
                 transfer_epochs: int | None = None, params: dict[str, str] | None = None) -> ModelRef:
        with self._slots:
            return self.inner.transfer(base, points, model_id=model_id, method=method, seed=seed,
                                       transfer_epochs=transfer_epochs, params=params)

    def predict(self, model: ModelRef, modes: np.ndarray, batch_size: int) -> Predictions:
        with self._slots:
            return self.inner.predict(model, modes, batch_size)

    def find(self, model_id: str) -> ModelRef | None:
        return self.inner.find(model_id)


#: Estimator / Optimizer errors the loop retries (the service busy or away), at most this many times a node.
TRANSIENT_CODES = (Status.UNAVAILABLE, Status.DEADLINE_EXCEEDED, Status.RESOURCE_EXHAUSTED)
MAX_TRANSIENT_RETRIES = 5
#: Estimator calls in flight at once (:class:`LimitedEstimator`): enough for a fleet's transfers to reach the
#: estimator together, which runs those arriving together as one batch.
ESTIMATOR_SLOTS = 64


def _transient(exc: Exception) -> bool:
    return isinstance(exc, CallFailed) and exc.code in TRANSIENT_CODES


class CountedSelector:
    """A :class:`~edgetune.tuning.Selector` whose calls show in :data:`CALLS`."""

    def __init__(self, inner: Selector) -> None:
        self.inner = inner

    def select(self, pool: Predictions, power_budget_w: float, *, risk: float, objective: Objective) -> Choice:
        return _counted("optimizer", "Select", lambda: self.inner.select(pool, power_budget_w, risk=risk,
                                                                         objective=objective))


def remote_services(estimator_address: str, optimizer_address: str,
                    security: ClientSecurity | None = None) -> tuple[Estimator | None, Selector | None]:
    """The Estimator and the Optimizer over gRPC (empty address: none), counted; ``security``: TLS and token."""
    estimator = (CountedEstimator(ServiceEstimator(open_channel(estimator_address, security), estimator_address))
                 if estimator_address else None)
    selector = (CountedSelector(OptimizerSelector(open_channel(optimizer_address, security)))
                if optimizer_address else None)
    return estimator, selector


@dataclass
class _Worker:
    thread: threading.Thread
    stop: threading.Event


#: The most of the loop's time its passes take when wakes come faster than passes end (:meth:`Reconciler._run`):
#: a pass over 1,000 nodes (~0.2 s) at most every ~1.5 s (at 0.3, woken by one worker's end after another, the
#: passes could take ~40 % of the leader's CPU in the 1,000-node bench); and the longest a long pass defers the
#: next (a first pass over a new 1,000-node job takes seconds; the nodes lost meanwhile wait for the next one).
PASS_SHARE, MAX_PASS_DEFER_S = 0.15, 5.0
#: Workers one pass starts at most (the rest at the next pass, at once): a thousand started together all write
#: their status and queue their points at the same moment, ahead of the coordinator's own RPCs.
MAX_STARTS_PER_PASS = 100
#: How long the fleet a pass read answers the workers' "is my node still live?" (asked every second by each
#: worker waiting for points: two store reads each, a thousand a second at 1,000 nodes), as a fraction of the
#: heartbeat TTL, the time a node's liveness takes to change.
FLEET_READ_TTL_SHARE = 0.25


class Reconciler:
    """The leader's loop over TuningJobs (module docstring)."""

    def __init__(self, store: Store, registry: NodeRegistry, configs: ConfigStore, lease: LeaderLease,
                 estimator: Estimator | None, selector: Selector | None, *, interval_s: float = 1.0,
                 policy: TuningPolicy | None = None, point_timeout_s: float = 300.0,
                 transfer_epochs: int | None = None, drift: DriftPolicy | None = None,
                 lost_fail_s: float | None = None) -> None:
        self.store, self.registry, self.configs, self.lease = store, registry, configs, lease
        self.estimator = LimitedEstimator(estimator, ESTIMATOR_SLOTS) if estimator is not None else None
        self.selector = selector
        self.jobs = TuningJobs(store)
        self.queue = JobQueue(store)
        self.interval_s, self.policy, self.point_timeout_s = interval_s, policy, point_timeout_s
        self.transfer_epochs = transfer_epochs
        self.drift = drift or DriftPolicy()
        #: A node lost (no heartbeat) this long while being tuned is Failed (default: the point timeout).
        self.lost_fail_s = point_timeout_s if lost_fail_s is None else lost_fail_s
        self._workers: dict[tuple[str, str], _Worker] = {}
        self._tuners: dict[tuple[str, str], NodeTuner] = {}
        #: (job, device model) -> the pool its nodes' profiles join (tuning.fleet)
        self._pools: dict[tuple[str, str], FleetPool] = {}
        #: (job, device model) -> the reference its nodes transfer from, and where it came from
        self._references: dict[tuple[str, str], tuple[ModelRef, str]] = {}
        #: (job, device model, "pool" or "reference") -> the answer of the worker making that entry (_per_device);
        #: the kind is in the key because a pool and a reference of one (job, device model) are made at once
        self._making: dict[tuple[str, str, str], Future[Any]] = {}
        #: the registered nodes the last pass read (node id -> record), and when (monotonic)
        self._fleet: tuple[dict[str, NodeRecord], float] = ({}, -float("inf"))
        self._writers: dict[str, StatusWriter] = {}
        #: (job, node) -> monotonic time of its last drift check (or of when it was first seen Applied)
        self._checked: dict[tuple[str, str], float] = {}
        #: (job, node) -> the drift epoch its cached tuner was refreshed for
        self._refreshed: dict[tuple[str, str], int] = {}
        #: (job, node) -> Estimator / Optimizer calls that failed transiently (retried up to MAX_TRANSIENT_RETRIES)
        self._transient: dict[tuple[str, str], int] = {}
        #: job -> the (spec generation, creation time) the caches above are for
        self._generations: dict[str, tuple[int, float]] = {}
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- life cycle -----------------------------------------------------------------------------
    def start(self) -> Reconciler:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="reconcile", daemon=True)
            self._thread.start()
        return self

    def stop(self, timeout_s: float = 5.0) -> None:
        self._stop.set()
        self._wake.set()
        with self._lock:
            workers = list(self._workers.values())
        for w in workers:
            w.stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
        for w in workers:
            w.thread.join(timeout_s)

    def wake(self) -> None:
        """Run a pass now (a job submitted, a node registered, a budget changed)."""
        self._wake.set()

    def _run(self) -> None:
        while not self._stop.is_set():
            began = time.monotonic()
            try:
                self.run_once()
            except Exception:  # a store hiccup: the next pass retries
                log.exception("reconcile pass failed")
            spent = time.monotonic() - began
            self._wake.wait(self.interval_s)
            # a fleet's workers end one after another, each waking a pass: passes keep to PASS_SHARE of the time,
            # so a pass over 1,000 nodes does not take a core from the workers it is there to start
            self._stop.wait(max(0.0, min(spent / PASS_SHARE, spent + MAX_PASS_DEFER_S) - (time.monotonic() - began)))
            self._wake.clear()

    # -- one pass --------------------------------------------------------------------------------
    def run_once(self) -> None:
        """Start a worker for every (job, node) that needs one; stop them all on a standby."""
        if not self.lease.is_leader:
            self._stop_workers(lambda _key: True)
            return
        STEPS.labels("pass").inc()
        views = self.jobs.list(statuses=False)  # each job's status read once, by its writer's ensure
        # no job: no need to read the fleet (1,000 nodes' records a pass hold the GIL from the config pushes)
        live = {n.node_id: n for n in self.registry.nodes()} if views else {}
        if views:
            self._fleet = (live, time.monotonic())
        active: set[tuple[str, str]] = set()
        started = 0
        for view in views:
            name = view.spec.name
            if view.spec.cancelled:
                self._stop_workers(lambda key, name=name: key[0] == name)  # type: ignore[misc]
                continue
            # a job submitted again after a cancel (a new generation), or deleted and created anew (a new
            # creation time): what the leader cached was for the old spec
            incarnation = (view.generation, view.created_s)
            if self._generations.get(name, incarnation) != incarnation:
                self._forget_job(name)
            self._generations[name] = incarnation
            targets = self.targets(view.spec, live)
            writer = self._writer(name)
            status = writer.ensure([n.node_id for n in targets], {n.node_id: n.device_model for n in targets},
                                   view.generation, no_match(view.spec, live, targets))
            for node in targets:
                key = (name, node.node_id)
                active.add(key)
                st = status.nodes[node.node_id]
                if st.generation < view.generation:  # a Failed node of the old spec, waiting out its backoff
                    continue
                budget = view.spec.budget_for(node.node_id, node.power_budget_w)
                # a changed budget re-selects an Applied node and a Failed one alike (level-triggered)
                rebudget = (st.phase in (NodePhase.APPLIED, NodePhase.FAILED) and budget is not None
                            and st.power_budget_w != budget)
                if not node.live:
                    self._fail_if_lost_too_long(writer, st, node)
                    continue
                if st.phase == NodePhase.APPLIED and not rebudget and not self._check_due(key):
                    continue
                if st.terminal and not rebudget and st.phase != NodePhase.APPLIED:
                    continue
                if started >= MAX_STARTS_PER_PASS:  # the rest at the next pass, which comes at once
                    self._wake.set()
                    continue
                check = st.phase == NodePhase.APPLIED and not rebudget
                started += self._start_worker(view, node, rebudget, check=check)
        self._prune(active)

    def _fail_if_lost_too_long(self, writer: StatusWriter, st: NodeStatus, node: NodeRecord) -> None:
        """A node being tuned that has not heartbeated for ``lost_fail_s``: Failed, saying so (bounded wait)."""
        if st.terminal or st.phase == NodePhase.PENDING or node.last_seen_s is None:
            return
        gone_s = time.time() - node.last_seen_s
        if gone_s < self.lost_fail_s:
            return
        reason = f"node lost: no heartbeat for {gone_s:.0f} s while {st.phase.lower()}"
        writer.update(node.node_id, lambda s: s if s.terminal else s.with_event(
            reason, phase=NodePhase.FAILED, reason=reason, event_reason="NodeLost", warning=True).with_condition(
            ConditionType.FAILED, True, "NodeLost", f"{reason}; it is tuned again when its job or budget changes"))

    def _check_due(self, key: tuple[str, str]) -> bool:
        """A drift check of an Applied node is due (the first one ``check_s`` after it was seen Applied)."""
        if self.drift.check_s <= 0:
            return False
        now = time.monotonic()
        last = self._checked.setdefault(key, now)
        return now - last >= self.drift.check_s

    def _prune(self, active: set[tuple[str, str]]) -> None:
        """Forget the jobs that are gone or cancelled and the nodes no longer targeted (their workers stopped)."""
        with self._lock:
            for key in [k for k in self._workers if k not in active]:
                w = self._workers[key]
                w.stop.set()
                if not w.thread.is_alive():
                    del self._workers[key]
        for cache in (self._tuners, self._checked, self._refreshed, self._transient):
            _drop_where(cache, lambda key: key not in active)
        jobs = {name for name, _ in active}
        with self._lock:
            for per_job in (self._pools, self._references, self._making):
                _drop_where(per_job, lambda key: key[0] not in jobs)
        for name in [n for n in self._writers if n not in jobs]:
            del self._writers[name]
        for name in [n for n in self._generations if n not in jobs]:
            del self._generations[name]

    def _forget_job(self, name: str) -> None:
        """Stop a job's workers and drop what the leader cached for it (its spec changed). Its status
        writer goes too: a worker of the old job that still writes meets JobGone, not the new job."""
        self._stop_workers(lambda key: key[0] == name)
        self._writers.pop(name, None)
        with self._lock:
            for per_job in (self._pools, self._references, self._making):
                _drop_where(per_job, lambda key: key[0] == name)
        for cache in (self._tuners, self._checked, self._refreshed, self._transient):
            _drop_where(cache, lambda key: key[0] == name)

    def cached(self) -> dict[str, int]:
        """How many entries each of the leader's caches holds (what pruning bounds)."""
        with self._lock:
            workers, pools, references = len(self._workers), len(self._pools), len(self._references)
        return {"workers": workers, "tuners": len(self._tuners), "writers": len(self._writers), "pools": pools,
                "references": references,
                "checked": len(self._checked), "refreshed": len(self._refreshed)}

    def targets(self, spec: TuningJobSpec, live: dict[str, NodeRecord]) -> list[NodeRecord]:
        """The registered nodes the job names (by id) or selects (device model, labels)."""
        if spec.nodes:
            return [live[n] for n in spec.nodes if n in live]
        return [n for n in live.values()
                if (not spec.selector_device or n.device_model == spec.selector_device)
                and all(n.labels.get(k) == v for k, v in spec.selector_labels.items())]

    def _writer(self, name: str) -> StatusWriter:
        if name not in self._writers:
            self._writers[name] = StatusWriter(self.jobs, name, self.lease.fence)
        return self._writers[name]

    def _start_worker(self, view: TuningJobView, node: NodeRecord, rebudget: bool, *, check: bool = False) -> bool:
        """Start the (job, node)'s worker unless it runs; True when one was started."""
        key = (view.spec.name, node.node_id)
        with self._lock:
            w = self._workers.get(key)
            if w is not None and w.thread.is_alive():
                return False
            if check:
                self._checked[key] = time.monotonic()
            stop = threading.Event()
            thread = threading.Thread(target=self._work, args=(view.spec, node, stop, rebudget, check),
                                      name=f"tune-{view.spec.name}-{node.node_id}", daemon=True)
            self._workers[key] = _Worker(thread, stop)
            thread.start()
        return True

    def _stop_workers(self, which: Callable[[tuple[str, str]], bool]) -> None:
        with self._lock:
            for key, w in self._workers.items():
                if which(key):
                    w.stop.set()

    # -- one node ----------------------------------------------------------------------------------
    def _work(self, spec: TuningJobSpec, node: NodeRecord, stop: threading.Event, rebudget: bool,
              check: bool = False) -> None:
        try:
            self._work_on(spec, node, stop, rebudget, check)
        finally:
            self.wake()  # what the node's worker changed is looked at now, not at the next timed pass

    def _work_on(self, spec: TuningJobSpec, node: NodeRecord, stop: threading.Event, rebudget: bool,
                 check: bool) -> None:
        writer = self._writer(spec.name)
        should_stop = lambda: stop.is_set() or self._stop.is_set() or not self.lease.is_leader  # noqa: E731
        try:
            if check and not self._check(spec, node, writer, should_stop):
                return
            self._tune(spec, node, writer, should_stop, rebudget)
        except (Stopped, NotLeader, LeaseLost, JobGone):  # JobGone: the job was deleted meanwhile
            log.info("tuning of %s on %s stopped", spec.name, node.node_id)
        except NodeLost as exc:  # resumes when the node heartbeats again (a pass starts a worker), else Failed
            log.warning("tuning of %s paused: %s", spec.name, exc)
            lost = f"{exc}; waiting for it to return"
            try:
                writer.update(node.node_id, lambda s: s.with_event(lost, event_reason="NodeLost", warning=True))
            except Exception:
                log.exception("could not record the loss of %s", node.node_id)
        except CONNECTION_ERRORS as exc:  # the store away (a restart): the next pass resumes, nothing is lost
            log.warning("tuning of %s on %s paused: the store is unreachable (%s)", spec.name, node.node_id, exc)
        except Exception as exc:  # the node fails with the reason; the job goes on elsewhere
            key = (spec.name, node.node_id)
            if _transient(exc) and self._transient.get(key, 0) < MAX_TRANSIENT_RETRIES:
                self._transient[key] = self._transient.get(key, 0) + 1  # the next pass retries (replaying)
                log.warning("tuning of %s on %s: a service call failed (%s); retrying", spec.name, node.node_id,
                            exc)
                return
            log.exception("tuning of %s on %s failed", spec.name, node.node_id)
            STEPS.labels("failed").inc()
            try:
                reason = str(exc) if isinstance(exc, EdgetuneError | TimeoutError) else f"{type(exc).__name__}: {exc}"
                writer.update(node.node_id, lambda s: s.with_event(
                    f"failed: {reason}", phase=NodePhase.FAILED, reason=reason, event_reason="Failed",
                    warning=True).with_condition(ConditionType.FAILED, True, "TuningFailed",
                                                 f"{reason}; it is tuned again when its job or budget changes"))
            except Exception:
                log.exception("could not record the failure of %s on %s", spec.name, node.node_id)

    def _check(self, spec: TuningJobSpec, node: NodeRecord, writer: StatusWriter,
               should_stop: Callable[[], bool]) -> bool:
        """Measure an Applied node's configuration again; True when it drifted (the node is then marked
        for a re-tune: :func:`drift_reason`, module docstring)."""
        node_id = node.node_id
        st = writer.update(node_id, lambda s: s)
        budget = spec.budget_for(node_id, node.power_budget_w)
        if st.phase != NodePhase.APPLIED or st.mode is None or budget is None:
            return False
        STEPS.labels("drift_check").inc()
        window = int(time.time() // max(self.drift.check_s, 1e-3))  # one check point per window, any leader
        measurer = QueueMeasurer(self.store, self.queue, spec.name, node_id, node.device_model,
                                 WorkloadRef.parse(spec.workload), spec.role, should_stop=should_stop,
                                 on_purpose=lambda _p: None, on_points=lambda _n: None,
                                 timeout_s=self.point_timeout_s, epoch=st.drift_epoch,
                                 node_live=lambda: self._live(node_id))
        got = measurer.measure(np.asarray([st.mode], dtype=float), st.batch_size or spec.batch_sizes[0],
                               purpose=f"check-{window}")
        if not len(got):
            return False
        time_ms, power_w = float(got.time_ms[0]), float(got.power_w[0])
        reason = drift_reason(st, time_ms, power_w, budget, self.drift.time_tolerance)
        if not reason:
            return False
        STEPS.labels("drift").inc()
        if st.drift_epoch >= self.drift.max_retunes:
            why = f"drift persists after {st.drift_epoch} re-tunes: {reason}"
            writer.update(node_id, lambda s: s.with_event(
                why, phase=NodePhase.FAILED, reason=why, measured_time_ms=time_ms, measured_power_w=power_w,
                event_reason="Failed", warning=True).with_condition(ConditionType.DRIFTED, True, "DriftPersists", why)
                .with_condition(ConditionType.VERIFIED, False, "Drifted", reason))
            return False
        writer.update(node_id, lambda s: s.with_event(
            f"drift: {reason}; re-tuning near the choice", phase=NodePhase.PROFILING, reason="",
            drift_epoch=s.drift_epoch + 1, measured_time_ms=time_ms, measured_power_w=power_w,
            event_reason="Drifted", warning=True).with_condition(ConditionType.DRIFTED, True, "Drifted",
                                                                 f"{reason}; re-tuning near the choice")
            .with_condition(ConditionType.VERIFIED, False, "Drifted", reason))
        return True

    def _refresh(self, tuner: NodeTuner, status: NodeStatus, budget: float) -> None:
        """A drift re-tune (module docstring): learn from the over-budget choice, profile near it again."""
        assert status.mode is not None
        measurer = tuner.measurer
        assert isinstance(measurer, QueueMeasurer)
        measurer.epoch = status.drift_epoch
        if status.measured_power_w is not None and status.measured_power_w > budget:
            tuner.learn_from_miss_at(status.mode, status.measured_power_w)
        tuner.refresh(status.mode, self.drift.near_points, seed=tuner.policy.seed + 1000 * status.drift_epoch)

    def _tune(self, spec: TuningJobSpec, node: NodeRecord, writer: StatusWriter, should_stop: Callable[[], bool],
              rebudget: bool) -> None:
        node_id = node.node_id
        budget = spec.budget_for(node_id, node.power_budget_w)

        def phase(name: NodePhase, message: str, **changes: Any) -> None:
            if should_stop():
                raise Stopped(TOLD_TO_STOP)
            STEPS.labels(name.lower()).inc()
            writer.update(node_id, lambda s: s.with_event(message, phase=name, **changes))

        if budget is None:
            why = "no power budget: the job gives none and the node registered none"
            writer.update(node_id, lambda s: s.with_event(
                "no power budget", phase=NodePhase.FAILED, reason=why, event_reason="NoBudget", warning=True)
                .with_condition(ConditionType.FAILED, True, "NoBudget",
                                f"{why}; `edgetune node budget {node_id} WATTS` tunes it"))
            return
        if rebudget:
            writer.update(node_id, lambda s: s.with_event(
                f"budget {'none' if s.power_budget_w is None else format(s.power_budget_w, 'g')} -> {budget:g} W: "
                "selecting again from the stored predictions", event_reason="BudgetChanged"))
        if spec.method == TuningMethod.CAP_SEARCH:  # needs no estimator / optimizer: the measured points are the table
            self._cap_search(spec, node, writer, should_stop, budget, phase)
            return
        if self.estimator is None or self.selector is None:
            why = "the coordinator has no --estimator / --optimizer"
            writer.update(node_id, lambda s: s if s.reason == why else s.with_event(  # once, not every pass
                "no estimator / optimizer", phase=NodePhase.PENDING, reason=why, event_reason="NoEstimator",
                warning=True))
            return
        current = writer.update(node_id, lambda s: s)
        if not rebudget and current.phase == NodePhase.VERIFYING and current.mode is not None \
                and current.power_budget_w == budget and current.measured_power_w is not None \
                and current.measured_power_w <= budget:
            self._publish(spec, node, writer, current, budget)  # the old leader decided: publish that
            return
        key = (spec.name, node_id)
        tuner = self._tuners.get(key)
        if tuner is None:
            phase(NodePhase.PROFILING, f"tuning for {budget:g} W", power_budget_w=budget, device=node.device_model,
                  reason="")
            tuner = self._new_tuner(spec, node, budget, writer, should_stop)
            if tuner is None:
                return
            tuner.profile_initial()
            self._join_fleet(spec, node, tuner, writer, should_stop)
            phase(NodePhase.ESTIMATING, f"{len(tuner.points)} points profiled; transferring {tuner.base.model_id}"
                  if tuner.base else "estimating")
            tuner.explore()
            self._tuners[key] = tuner
        else:  # a tuner kept from an earlier worker measures for this one (its stop)
            assert isinstance(tuner.measurer, QueueMeasurer)
            _bind(tuner.measurer, writer, should_stop, profiled=None)
        if current.drift_epoch > self._refreshed.get(key, 0) and current.mode is not None:
            self._refresh(tuner, current, budget)
            self._refreshed[key] = current.drift_epoch
        phase(NodePhase.SELECTING, f"selecting for {budget:g} W at risk {tuner.policy.risk:g}", power_budget_w=budget,
              reason="", event_reason="Selecting")
        decision = tuner.select_and_verify(budget)
        if not decision.feasible or not decision.within_budget:
            reason = decision.reason or (decision.notes[-1] if decision.notes else "no verified mode within budget")
            hint = infeasible_hint(budget_command(spec, node_id), tuner.predictions)
            writer.update(node_id, lambda s: s.with_event(
                f"failed: {reason}", phase=NodePhase.FAILED, reason=reason, event_reason="Infeasible", warning=True,
                **_decision_fields(decision)).with_condition(ConditionType.INFEASIBLE, True, "NoFeasibleMode",
                                                             f"{reason}; {hint}")
                .with_condition(ConditionType.VERIFIED, False, "NoFeasibleMode", reason))
            return
        decided = writer.update(node_id, lambda s: s.with_event(
            f"measured {decision.measured_power_w:.2f} W, {decision.measured_time_ms:.1f} ms", phase=NodePhase.VERIFYING,
            event_reason="Verified", **_decision_fields(decision)))
        self._publish(spec, node, writer, decided, budget)

    def _join_fleet(self, spec: TuningJobSpec, node: NodeRecord, tuner: NodeTuner, writer: StatusWriter,
                    should_stop: Callable[[], bool]) -> None:
        """Pool the node's profiles with its peers' (the job's nodes of its device model) and transfer from the
        fleet model they give (:mod:`edgetune.tuning.fleet`); a node without peers keeps its reference."""
        pool = self._per_device(self._pools, "pool", (spec.name, node.device_model),
                                lambda: FleetPool(self._peers(spec, node.device_model) | {node.node_id}))
        assert pool is not None  # made whenever missing
        if not pool.pools or tuner.base is None or self.estimator is None or tuner.method not in TRANSFER_METHODS:
            return  # alone, or a policy whose method fine-tunes nothing: each node from the reference
        base, estimator, seed = tuner.base, self.estimator, policy_for(spec, self.policy).seed  # the job's
        fleet_id = fleet_model_id(spec.name, node.device_model)

        def fit(points: Points) -> ModelRef:
            STEPS.labels("fit_fleet").inc()
            return estimator.transfer(base, points, model_id=fleet_id, method="transfer", seed=seed,
                                      transfer_epochs=FLEET_TRANSFER_EPOCHS)

        model = pool.join(node.node_id, tuner.points, fit, should_stop, seed=seed)
        if model is None:
            raise Stopped(TOLD_TO_STOP)
        tuner.use_fleet(model)
        nodes, rows = pool.fitted_from
        writer.update(node.node_id, lambda s: s.with_event(
            f"fleet model {model.model_id}: {base.model_id} fine-tuned on {rows} points of {nodes} "
            f"{node.device_model} nodes; this node fits its own residual", event_reason="FleetModel"))

    def _peers(self, spec: TuningJobSpec, device: str) -> set[str]:
        """The job's live targets of ``device`` still to be tuned (not Applied or Failed): who pools."""
        status, _ = self.jobs.status(spec.name)
        done = {n.node_id for n in status.nodes.values() if n.terminal} if status is not None else set()
        fleet = self._recent_fleet()
        live = {n.node_id: n for n in (fleet.values() if fleet is not None else self.registry.nodes()) if n.live}
        return {n.node_id for n in self.targets(spec, live) if n.device_model == device and n.node_id not in done}

    def _cap_search(self, spec: TuningJobSpec, node: NodeRecord, writer: StatusWriter,
                    should_stop: Callable[[], bool], budget: float, phase: Callable[..., None]) -> None:
        """A ``method: cap-search`` node (module docstring): CapSearch's order under the budget as the cap,
        one point at a time on the node (each peak power decides the next point); the fastest measured
        point (per sample) whose peak power is strictly under the cap is applied. A resumed or re-budgeted search reads
        its points back from the store (same job ids); a drift re-tune measures anew (its epoch)."""
        node_id = node.node_id
        epoch = writer.update(node_id, lambda s: s).drift_epoch
        phase(NodePhase.PROFILING, f"cap search under {budget:g} W", power_budget_w=budget, device=node.device_model,
              reason="")
        measurer = QueueMeasurer(self.store, self.queue, spec.name, node_id, node.device_model,
                                 WorkloadRef.parse(spec.workload), spec.role, should_stop=should_stop,
                                 on_purpose=lambda _p: None, on_points=lambda _n: None,
                                 timeout_s=self.point_timeout_s, epoch=epoch,
                                 node_live=lambda: self._live(node_id))
        search = CapSearch(gpu_levels(get_spec(node.device_model)), spec.batch_sizes, budget)
        measured: list[CapPoint] = []
        while (point := search.ask()) is not None:
            if should_stop():
                raise Stopped(TOLD_TO_STOP)
            b, mode = point
            rows = measurer.records(np.asarray([mode.as_tuple()], dtype=float), b, purpose="cap-search")
            peak_w = _peak_power_w(rows[0]) if rows else float("inf")  # a skipped point counts as over the cap
            search.tell(peak_w)
            if rows:
                measured.append(CapPoint(b, mode, rows[0].time_ms, peak_w))
            n = search.result().profiled
            note = f"{n} points measured (bs={b}, GPU {mode.gpu_mhz:g} MHz: peak {peak_w:.2f} W)"
            writer.update(node_id, functools.partial(NodeStatus.with_event, message=note, profiled=n))
        n = search.result().profiled
        best = fastest_under_cap(measured, budget)
        if best is None:
            reason = f"no measured point has a peak power under the {budget:g} W cap ({n} profiled)"
            writer.update(node_id, lambda s: s.with_event(
                f"failed: {reason}", phase=NodePhase.FAILED, reason=reason, event_reason="Infeasible", warning=True)
                .with_condition(ConditionType.INFEASIBLE, True, "NoPointUnderCap",
                                f"{reason}; a higher budget ({budget_command(spec, node_id)}) searches again"))
            return
        decided = writer.update(node_id, lambda s: s.with_event(
            f"fastest under the cap: {best.time_ms:.1f} ms at peak {best.peak_power_w:.2f} W of {n} points",
            phase=NodePhase.VERIFYING, mode=tuple(float(v) for v in best.mode.as_tuple()), batch_size=best.batch_size,
            predicted_time_ms=None, predicted_power_w=None, predicted_power_upper_w=None,
            measured_time_ms=best.time_ms, measured_power_w=best.peak_power_w))
        self._publish(spec, node, writer, decided, budget)

    def _publish(self, spec: TuningJobSpec, node: NodeRecord, writer: StatusWriter, status: NodeStatus,
                 budget: float) -> None:
        assert status.mode is not None
        m = status.mode
        cfg = NodeConfig(node.node_id, PowerMode(int(m[0]), m[1], m[2], m[3]), status.batch_size,
                         {"name": spec.workload}, spec.role, round_id=f"tuning/{spec.name}", power_budget_w=budget,
                         reason=f"tuning job {spec.name}")
        # The status says Applied and goes in the same atomic write, with the revision the store
        # gives the config stamped in by the store: a crash never leaves the config published and
        # the node not Applied, and a publish to the node in between never leaves a wrong revision.
        (published,) = writer.update_with(
            node.node_id, lambda s: _applied(s.with_event("config published", phase=NodePhase.APPLIED, reason="",
                                                          event_reason="Published"), budget),
            lambda doc: self.configs.publish_many([cfg], fence=self.lease, docs=[doc]))
        STEPS.labels("publish" if published.changed else "publish_unchanged").inc()

    def _new_tuner(self, spec: TuningJobSpec, node: NodeRecord, budget: float, writer: StatusWriter,
                   should_stop: Callable[[], bool]) -> NodeTuner | None:
        assert self.estimator is not None and self.selector is not None
        device = node.device_model
        node_id = node.node_id
        measurer = QueueMeasurer(self.store, self.queue, spec.name, node_id, device,
                                 WorkloadRef.parse(spec.workload), spec.role, should_stop=should_stop,
                                 on_purpose=lambda _p: None, on_points=lambda _n: None,
                                 timeout_s=self.point_timeout_s, node_live=lambda: self._live(node_id))
        _bind(measurer, writer, should_stop, profiled=0)
        found = self._reference(spec, node)
        if found is None:
            reason = (f"no reference model: the job names none, none is shipped for {device} ({spec.role}) and the "
                      f"store holds fewer than {MIN_REFERENCE_POINTS} measurements of {spec.workload} ({spec.role}) "
                      f"on {device} to fit one")
            writer.update(node_id, lambda s: s.with_event(
                reason, phase=NodePhase.FAILED, reason=reason, event_reason="NoReference", warning=True)
                .with_condition(ConditionType.FAILED, True, "NoReference",
                                f"{reason}; submit the job again (after `edgetune job cancel`) with reference_model"))
            return None
        base, which = found
        writer.update(node_id, lambda s: s.with_event(f"reference model {base.model_id}: {which}",
                                                      event_reason="Reference"))
        candidates = named_grid(get_spec(device), CANDIDATE_GRID).array()
        policy = policy_for(spec, self.policy)
        # each node draws its own random modes (the same ones again under a new leader): a fleet pool covers
        # nodes x profiles modes, not the same few many times over
        policy = policy.with_(seed=policy.seed + node_seed(node_id))
        return NodeTuner(policy, measurer, self.estimator, self.selector, base=base,
                         candidates=candidates, batch_size=spec.batch_sizes[0], device=device,
                         # a MODULE:FUNCTION's id is known once the node measured it: the points then carry it
                         workload=measurer.workload.id or "", role=spec.role,
                         model_id=f"tuning-{spec.name}-{node_id}",
                         power_range_w=(0.7 * budget, budget), transfer_epochs=self.transfer_epochs)

    def _recent_fleet(self) -> dict[str, NodeRecord] | None:
        """The registered nodes with their liveness as the last pass read them, while that is recent
        (:data:`FLEET_READ_TTL_SHARE`); None: read them anew."""
        nodes, at = self._fleet
        return nodes if time.monotonic() - at <= FLEET_READ_TTL_SHARE * self.registry.heartbeat_ttl_s else None

    def _live(self, node_id: str) -> bool:
        fleet = self._recent_fleet()
        if fleet is not None:
            return node_id in fleet and fleet[node_id].live  # absent: deregistered
        try:
            return self.registry.get(node_id).live
        except EdgetuneError:  # deregistered
            return False

    def _reference(self, spec: TuningJobSpec, node: NodeRecord) -> tuple[ModelRef, str] | None:
        """The model the node's tuner transfers from, and where it came from (the node's events say it): looked
        up once per (job, device model), so a job's nodes of one model transfer from one version of it, and the
        estimator's models are not listed once per node (1,000 nodes' models, listed for each of 1,000 nodes)."""
        return self._per_device(self._references, "reference", (spec.name, node.device_model),
                                lambda: self._find_reference(spec, node))

    def _per_device(self, cache: dict[tuple[str, str], V], kind: str, key: tuple[str, str],
                    make: Callable[[], V | None]) -> V | None:
        """``cache[key]`` for a (job, device model), made by one worker while the others asking wait for its answer
        (a pass starts 100 workers at once: each would otherwise list the estimator's models, or read the fleet,
        itself). Its error is theirs too, at once (not each trying in turn after it: a hung estimator would hold
        the last of 100 for 100 timeouts); None (nothing to cache), or an error, is asked again next time.
        ``kind`` names the cache: a pool and a reference of one (job, device model) may be made at once."""
        with self._lock:
            held = cache.get(key)
            if held is not None:
                return held
            making = (*key, kind)
            answer = self._making.get(making)
            mine = answer is None
            if answer is None:
                answer = self._making[making] = Future()
        if not mine:
            return answer.result()
        try:
            made = make()
            if made is not None:
                with self._lock:
                    made = cache.setdefault(key, made)
            answer.set_result(made)
            return made
        except BaseException as exc:
            answer.set_exception(exc)
            raise
        finally:
            with self._lock:
                self._making.pop(making, None)

    def _find_reference(self, spec: TuningJobSpec, node: NodeRecord) -> tuple[ModelRef, str] | None:
        device = node.device_model
        if spec.reference_model_id:
            return ModelRef(spec.reference_model_id, "", device, spec.workload), "the job's reference_model"
        assert self.estimator is not None
        # the estimator's reference for the node's device and role (edgetune up fits one per device)
        held = self.estimator.find(reference_model_id(device, spec.role))
        if held is not None:
            return held, f"the estimator's reference for {device} ({spec.role})"
        shipped = shipped_for(device, spec.role)
        if shipped is not None:
            return (ModelRef(PREFIX + shipped.device, shipped.method, shipped.device, shipped.workload),
                    f"shipped with edgetune ({shipped.filename}: {shipped.workload} {shipped.role}, batch size "
                    f"{shipped.batch_size}, fitted on the simulator's {shipped.grid} grid)")
        rows = [m for m in self.store.get_measurements(device, spec.workload, spec.role)
                if m.node_id != node.node_id]
        if len(rows) < MIN_REFERENCE_POINTS:
            return None
        STEPS.labels("fit_reference").inc()
        points = Points(np.asarray([list(r.mode.as_tuple()) for r in rows], dtype=float),
                        np.asarray([r.batch_size for r in rows]), np.asarray([r.time_ms for r in rows]),
                        np.asarray([r.power_w for r in rows]), node.device_model, spec.workload, spec.role)
        fitted = self.estimator.fit(points, model_id=f"reference-{device}-{spec.workload}-{spec.role}", method="nn")
        return fitted, f"fitted on {len(rows)} stored measurements of {spec.workload} ({spec.role}) on other {device} nodes"


def no_match(spec: TuningJobSpec, registered: dict[str, NodeRecord],
             targets: list[NodeRecord]) -> tuple[str, str] | None:
    """The job's ``NoMatchingNodes`` condition (reason, message), or None when every target matched."""
    known = ", ".join(sorted(registered)[:10]) + (", ..." if len(registered) > 10 else "") or "none"
    if spec.nodes:
        missing = [n for n in spec.nodes if n not in registered]
        if not missing:
            return None
        return "NodesNotRegistered", (f"{', '.join(missing)} matched no registered node (registered: {known}); "
                                      "the job waits for them")
    if targets:
        return None
    wanted = ", ".join([*([f"device={spec.selector_device}"] if spec.selector_device else []),
                        *(f"{k}={v}" for k, v in sorted(spec.selector_labels.items()))])
    return "SelectorMatchesNothing", f"the selector {wanted} matches no registered node (registered: {known})"


def node_seed(node_id: str) -> int:
    """A node's offset to its job's seed: stable across processes (not ``hash``), distinct per node."""
    return zlib.crc32(node_id.encode()) % 100_000


def budget_command(spec: TuningJobSpec, node_id: str) -> str:
    """How an operator changes the budget a job's node is tuned for: the node's own (``edgetune node
    budget``), unless the job sets one, which then wins (the job submitted again with another)."""
    if node_id in spec.node_power_budget_w or spec.power_budget_w is not None:
        return f"the job's power_budget_w: `edgetune job cancel {spec.name}`, then submit it with another"
    return f"`edgetune node budget {node_id} WATTS`"


def infeasible_hint(how: str, predictions: Predictions | None) -> str:
    """What would make an infeasible node feasible: a budget above the least predicted power (``how``: where
    that budget is set, :func:`budget_command`)."""
    if predictions is None or not len(predictions):
        return f"a higher budget ({how}) selects again"
    lowest = float(np.min(predictions.power_w))
    return (f"the least predicted power of its modes is {lowest:.2f} W: a budget above it ({how}) selects again "
            "from the stored predictions, without profiling")


def _applied(s: NodeStatus, budget: float) -> NodeStatus:
    """A node just Applied: Verified, and no longer Infeasible / Failed / Drifted (those it carries turn False)."""
    measured = "" if s.measured_power_w is None else f"measured {s.measured_power_w:.2f} W <= budget {budget:g} W"
    s = s.with_condition(ConditionType.VERIFIED, True, "MeasuredWithinBudget", measured)
    for kind in (ConditionType.INFEASIBLE, ConditionType.FAILED, ConditionType.DRIFTED):
        if s.condition(kind) is not None:
            s = s.with_condition(kind, False, "Applied", "")
    return s


def _peak_power_w(row: MeasurementRecord) -> float:
    """A measurement's peak power (the agent stores it with every point), which the cap rule is on."""
    peak = row.extra.get("peak_power_w")
    if isinstance(peak, bool) or not isinstance(peak, int | float):
        raise FailedPrecondition(f"measurement {row.id} carries no peak_power_w: cap-search needs the peak power")
    return float(peak)


def _decision_fields(d: Decision) -> dict[str, Any]:
    return {"mode": None if d.mode is None else tuple(float(v) for v in d.mode), "batch_size": d.batch_size,
            "predicted_time_ms": d.predicted_time_ms, "predicted_power_w": d.predicted_power_w,
            "predicted_power_upper_w": d.power_upper_w, "measured_time_ms": d.measured_time_ms,
            "measured_power_w": d.measured_power_w}
