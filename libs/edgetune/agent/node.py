"""The node agent: one device, the keeper of its mode, profiles, mode changes and power readings.

:class:`NodeAgent` is what the Profiler service serves (:mod:`edgetune.services.profiler`) and
what the coordinator link drives (:mod:`edgetune.agent.link`): typed values in and out
(:class:`~edgetune.store.ProfileJob`, :class:`~edgetune.base.mode.PowerMode`, the profile's
:data:`~edgetune.profiling.ProfileEvent` records), never wire messages.

Concurrency: one device, one writer. ``_device_busy`` is held by a running profile (from its
first point until the mode is restored) and briefly by :meth:`NodeAgent.apply_mode` /
:meth:`NodeAgent.restore_mode`; whoever finds it taken gets FailedPrecondition.
:meth:`~NodeAgent.describe`, :meth:`~NodeAgent.power_modes` and :meth:`~NodeAgent.stream_power`
only read and never wait for it.

A profile runs in a worker thread (:class:`ProfileRun`) that measures point after point and
queues its events; the caller follows them. So a cancel (client gone, deadline passed, agent
stopping) reaches the worker wherever the caller is waiting, the worker stops between points,
and the worker itself restores the mode and releases the device: nothing depends on when the
caller stops reading.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from edgetune import stopping, validation
from edgetune.agent import metrics
from edgetune.agent.safety import ModeKeeper
from edgetune.base.mode import PowerMode
from edgetune.base.roles import Role
from edgetune.devices.base import DeviceInfo, PowerSample
from edgetune.devices.workloads import resolve_workload
from edgetune.errors import EdgetuneError, FailedPrecondition, InvalidArgument
from edgetune.powermodes.grids import named_grid
from edgetune.profiling import (
    Measurement,
    PointSkipped,
    PowerLimitExceeded,
    ProfileConfig,
    ProfileEvent,
    ProfileProgress,
    Profiler,
    descending_order,
)
from edgetune.store import MeasurementRecord, ProfileJob, Store
from edgetune.telemetry.sample import TelemetrySample
from edgetune.telemetry.sampler import TelemetrySampler

log = logging.getLogger(__name__)

BUSY = "a profile is running on this device"
#: A power stream's rate when the caller gives none, and its most: above 100 Hz a stream would
#: mostly measure the sensor's own I2C traffic.
DEFAULT_STREAM_RATE_HZ = 1.0
MAX_STREAM_RATE_HZ = 100.0
#: How often a caller following a profile gets a chance to look at its own cancellation.
POLL_S = 0.2


@dataclass(frozen=True)
class ProfilePlan:
    """A profile checked against the device: what to measure, in which order, with which protocol knobs."""

    workload: str
    role: Role
    points: tuple[tuple[PowerMode, int], ...]
    config: ProfileConfig


# --- the worker ------------------------------------------------------------------------------
class ProfileRun:
    """Measures a plan's points in a thread; :meth:`events` follows what it reports."""

    def __init__(self, agent: NodeAgent, plan: ProfilePlan) -> None:
        self.agent = agent
        self.plan = plan
        #: Events, then the run's error if it failed, then None (the end).
        self._events: queue.Queue[ProfileEvent | BaseException | None] = queue.Queue()
        self.outcome = "failed"
        self.at = 0  # index of the point being measured, for error messages
        self.restored = False
        self._cancel = threading.Event()
        self.thread = threading.Thread(target=self._run, name="profiler-job", daemon=True)

    def cancel(self) -> None:
        self._cancel.set()

    def events(self, poll_s: float = POLL_S) -> Iterator[ProfileEvent | None]:
        """The run's events as they come, and None each ``poll_s`` without one (the caller's chance
        to cancel); raises the run's error where it happened; ends when the run has restored the mode."""
        while True:
            try:
                item = self._events.get(timeout=poll_s)
            except queue.Empty:
                yield None
                continue
            if item is None:
                return
            if isinstance(item, BaseException):
                raise item
            yield item

    def _run(self) -> None:
        agent, plan = self.agent, self.plan
        total = len(plan.points)
        try:
            was_active = agent.keeper.active  # an apply_mode is in force: return to it, not past it
            original = agent.device.current_mode()
            try:
                # The cancel reaches into a point too: the runner stops between minibatches.
                with stopping.stop_when(self._cancel.is_set):
                    self._measure_all(Profiler(agent.keeper.guarded, plan.config), total)
            except stopping.Stopped:
                self.outcome = "cancelled"
            finally:
                self._restore(was_active, original)
                self.restored = True
        except BaseException as exc:  # noqa: BLE001 - reported to the caller, never lost
            if not isinstance(exc, EdgetuneError):
                log.exception("profile failed")  # the traceback (and any chained cause) for operators
            self._events.put(self._explain(exc))
        finally:
            agent._device_busy.release()
            metrics.PROFILES.labels(self.outcome).inc()
            log.info("profile ended", extra={"outcome": self.outcome, "points": total,
                                             "workload": plan.workload})
            self._events.put(None)

    def _measure_all(self, profiler: Profiler, total: int) -> None:
        plan = self.plan
        for i, (mode, batch_size) in enumerate(plan.points):
            if self._cancel.is_set():  # between points only: a point is never cut in half
                self.outcome = "cancelled"
                return
            self.at = i
            self._events.put(ProfileProgress("measuring", i, total, f"{mode.label()} batch {batch_size}"))
            try:
                m = profiler.measure(mode, plan.workload, plan.role, batch_size)
            except PowerLimitExceeded as exc:  # the protocol already went back to the previous mode
                metrics.POINTS.labels("skipped").inc()
                self._events.put(PointSkipped(mode, batch_size, str(exc)))
                continue
            metrics.POINTS.labels("measured").inc()
            metrics.POWER_W.set(m.power_w)
            metrics.MEASURED_POWER_W.set(m.power_w)
            metrics.MEASURED_TIME_MS.set(m.time_ms)
            if m.remeasured or m.throttled:
                metrics.THROTTLED_POINTS.inc(m.remeasured + int(m.throttled))
            self.agent._store_measurement(m)
            self._events.put(m)
        self.outcome = "completed"
        self._events.put(ProfileProgress("done", total, total, f"{total} points"))

    def _restore(self, was_active: bool, original: PowerMode) -> None:
        keeper = self.agent.keeper
        if not was_active:
            keeper.restore()  # the profile made the first change: undo it exactly, clear the record
        elif keeper.device.current_mode() != original:
            keeper.guarded.apply(original)  # back to the mode an earlier apply_mode set

    def _explain(self, exc: BaseException) -> BaseException:
        if isinstance(exc, EdgetuneError):
            return exc
        mode, batch_size = self.plan.points[self.at]
        after = ("the previous power mode was restored" if self.restored
                 else "restoring the previous power mode failed too: see the agent's log")
        return EdgetuneError(f"profiling failed at point {self.at + 1} of {len(self.plan.points)} "
                             f"({mode.label()}, batch {batch_size}): {type(exc).__name__}: {exc}; {after}")


# --- the agent -------------------------------------------------------------------------------
class NodeAgent:
    """One device's agent (see the module docstring). ``store``: where measurements go (None: only
    reported); ``workload_path``: directories a ``MODULE:FUNCTION`` workload may be imported from
    (the operator's ``--workload-path``; empty: zoo workloads only)."""

    def __init__(self, keeper: ModeKeeper, store: Store | None = None, node_id: str = "", *,
                 job_join_s: float = 120.0, workload_path: Sequence[Path] = ()) -> None:
        self.keeper = keeper
        self.device = keeper.device
        self.store = store
        #: The id measurements are recorded under (the coordinator link sets the one it registered).
        self.node_id = node_id
        self.workload_path = tuple(Path(p) for p in workload_path)
        self.job_join_s = job_join_s
        self._device_busy = threading.Lock()
        self._runs: set[ProfileRun] = set()
        self._runs_lock = threading.Lock()
        self._closing = threading.Event()
        self._grids: dict[str, list[PowerMode]] = {}
        metrics.set_mode(self.device.current_mode())

    # -- reading -------------------------------------------------------------------------------
    def describe(self) -> DeviceInfo:
        mode = self.device.current_mode()
        metrics.set_mode(mode)
        return DeviceInfo(self.device.spec, self.device.backend, mode, tuple(self.device.workloads()),
                          tuple(self._power_rails()), self.node_id)

    def _power_rails(self) -> list[str]:
        try:
            return sorted(self.device.power_sensor().rails_w())
        except (EdgetuneError, OSError):  # no sensor, or one that cannot be read right now
            return []

    def power_modes(self, grid: str) -> list[PowerMode]:
        """The modes of the device's ``grid`` (``full``, ``powertrain``, ``fulcrum``), in grid order."""
        if grid not in self._grids:  # the full Orin grid is 18k modes: build each grid once
            self._grids[grid] = named_grid(self.device.spec, grid).modes()
        return self._grids[grid]

    def heartbeat_power_w(self) -> float:
        """Power now for a heartbeat (0: no power monitor). From telemetry, not the power sensor: a
        background reading must not draw on the noise a simulated board's measurements use
        (heartbeats come when the wall clock says: runs would not repeat)."""
        try:
            return float(self.device.telemetry().power_w or 0.0)
        except (EdgetuneError, OSError):  # no power monitor: the heartbeat goes without
            return 0.0

    def stream_power(self, rate_hz: float, stop: threading.Event, *, max_samples: int = 0,
                     include_rails: bool = False) -> Iterator[PowerSample]:
        """Power sensor readings at ``rate_hz`` (checked by the caller) until ``stop`` is set, the agent
        closes or ``max_samples`` (0: no limit) were taken; per-rail power with ``include_rails``.
        FailedPrecondition when the board has no power monitor."""
        sensor = self.device.power_sensor()
        read_both = getattr(sensor, "read_total_and_rails", None)
        t0, k = time.monotonic(), 0
        while not (stop.is_set() or self._closing.is_set()):
            rails: dict[str, float] | None = None
            if include_rails:
                power_w, rails = read_both() if callable(read_both) else (sensor.read_w(), sensor.rails_w())
            else:
                power_w = sensor.read_w()
            metrics.POWER_W.set(power_w)
            yield PowerSample(self.device.clock.now_s(), power_w, rails)
            k += 1
            if max_samples and k >= max_samples:
                return
            # Drift-free schedule (sample k due at t0 + k / rate); the wait ends at once on stop.
            stop.wait(max(0.0, t0 + k / rate_hz - time.monotonic()))

    def start_telemetry(self, read: Callable[[], TelemetrySample], rate_hz: float) -> TelemetrySampler:
        """The continuous telemetry sampler behind the power / energy / temperature metrics, started."""
        sampler = TelemetrySampler(read, rate_hz, [metrics.TelemetryExporter()])
        sampler.start()
        return sampler

    # -- mode changes ----------------------------------------------------------------------------
    @contextmanager
    def _exclusive(self) -> Iterator[None]:
        if not self._device_busy.acquire(blocking=False):
            raise FailedPrecondition(f"{BUSY}; try again when it is done")
        try:
            yield
        finally:
            self._device_busy.release()

    def preset_mode(self, key: str | int) -> PowerMode:
        """The mode of the device's nvpmodel preset ``key`` (name or id); InvalidArgument when it has none."""
        return self.device.spec.preset(key).mode()

    def apply_mode(self, mode: PowerMode) -> tuple[PowerMode, PowerMode]:
        """Validate and apply ``mode`` through the guard; (applied, previous). FailedPrecondition while
        a profile holds the device."""
        with self._exclusive():
            return self.keeper.apply(mode)

    def restore_mode(self) -> tuple[PowerMode, bool]:
        """Back to the mode found before the first change; (mode now, changed). FailedPrecondition while busy."""
        with self._exclusive():
            return self.keeper.restore()

    # -- profiles --------------------------------------------------------------------------------
    def plan(self, job: ProfileJob, run_key: str = "") -> ProfilePlan:
        """``job`` against this device, before anything touches it: the workload it can run, modes in
        its tables (or drawn from its grid), at most ``MAX_PROFILE_POINTS`` points. InvalidArgument
        names the request's field. ``run_key`` goes into the measurement ids (a retried request, a
        re-delivered job writes the same ids)."""
        spec = self.device.spec
        # a user's MODULE:FUNCTION is imported by name from the operator's directories only, never
        # from the request; it runs (and is recorded) under its id
        workload = resolve_workload(self.device, job.workload, job.role, allowed_path=self.workload_path,
                                    field="workload.name")
        if job.modes:
            modes = [validation.power_mode(spec, m, f"modes[{i}]") for i, m in enumerate(job.modes)]
        else:
            grid = named_grid(spec, job.random_grid)
            if job.random_modes > grid.n_modes:
                raise InvalidArgument("random_modes", f"{job.random_modes} is more than the {grid.n_modes} "
                                      f"modes of the {job.random_grid} grid", f"1 to {grid.n_modes}")
            picks = np.random.default_rng(job.seed).choice(grid.n_modes, size=job.random_modes, replace=False)
            modes = [grid.mode_at(int(i)) for i in picks]
        if job.descending_order:
            modes = descending_order(modes)
        sizes = job.batch_sizes
        if len(modes) * len(sizes) > validation.MAX_PROFILE_POINTS:
            raise InvalidArgument("modes", f"{len(modes)} modes x {len(sizes)} batch sizes is "
                                  f"{len(modes) * len(sizes)} points", f"at most {validation.MAX_PROFILE_POINTS}")
        config = ProfileConfig(
            n_minibatches=job.n_minibatches, warmup_minibatches=job.warmup_minibatches,
            sample_rate_hz=job.sample_rate_hz, hard_limit_w=job.power_limit_w, node=self.node_id, run_key=run_key,
            id_workload=job.workload if workload != job.workload else "",
        ).validate()
        return ProfilePlan(workload, job.role, tuple((m, b) for m in modes for b in sizes), config)

    def start_profile(self, plan: ProfilePlan) -> ProfileRun:
        """Run ``plan`` in a worker that owns the device until it restores the mode. FailedPrecondition
        while another profile runs or the agent is closing."""
        if self._closing.is_set():
            raise FailedPrecondition("the profiler agent is shutting down")
        if not self._device_busy.acquire(blocking=False):
            raise FailedPrecondition(BUSY)
        run = ProfileRun(self, plan)  # from here the run owns the lock and releases it when done
        with self._runs_lock:
            self._runs = {r for r in self._runs if r.thread.is_alive()} | {run}
        log.info("profile started", extra={"points": len(plan.points), "workload": plan.workload,
                                           "role": plan.role.value})
        run.thread.start()
        return run

    def _store_measurement(self, m: Measurement) -> None:
        if self.store is None:
            return
        record = MeasurementRecord.from_row(m.to_row())
        if self.node_id:
            record = replace(record, node_id=self.node_id)
        self.store.put_measurement(record)  # idempotent by id: a retried write is a no-op

    # -- shutdown --------------------------------------------------------------------------------
    def shutdown(self, timeout_s: float | None = None) -> None:
        """Stop power streams, cancel profiles and wait (bounded) for their workers to restore the
        mode and let go of the device. Runs as a server shutdown hook, before the keeper's restore."""
        self._closing.set()
        with self._runs_lock:
            runs = list(self._runs)
        for run in runs:
            run.cancel()
        deadline = time.monotonic() + (self.job_join_s if timeout_s is None else timeout_s)
        for run in runs:
            run.thread.join(max(0.0, deadline - time.monotonic()))
            if run.thread.is_alive():
                log.error("a profile worker did not stop in time; restoring the mode anyway")
