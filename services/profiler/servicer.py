"""ProfilerServicer: the ``edgetune.v1.Profiler`` RPCs over one device. Wiring only.

Each RPC turns its request into library calls (device, grids, measurement protocol, store)
and the results into messages; edgetune errors become gRPC statuses through
:func:`~edgetune.services.common.errors.map_errors`, naming the request field.

Concurrency: one device, one writer. ``_device_busy`` is held by a running profile (from
its first point until the mode is restored) and briefly by ApplyPowerMode /
RestorePowerMode; whoever finds it taken gets FAILED_PRECONDITION. GetDevice,
ListPowerModes and StreamPower only read and never wait for it.

A profile runs in a worker thread that measures point after point and queues events; the
RPC thread forwards them. So cancellation (client gone, deadline passed, server stopping)
reaches the worker through ``context.add_callback`` even while the RPC thread sits in a
yield, the worker stops between points, and the worker itself restores the mode and
releases the device: nothing depends on when gRPC closes the response generator.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import grpc
import numpy as np

from edgetune import stopping, validation
from edgetune.agent.safety import ModeKeeper
from edgetune.base.mode import PowerMode
from edgetune.base.roles import Role
from edgetune.devices.workloads import known_workloads, resolve_workload
from edgetune.errors import EdgetuneError, FailedPrecondition, InvalidArgument
from edgetune.powermodes.grids import named_grid
from edgetune.profiling import Measurement, PowerLimitExceeded, ProfileConfig, Profiler, descending_order
from edgetune.proto.serde import common as convert
from edgetune.proto.v1 import common_pb2, profiler_pb2, profiler_pb2_grpc
from edgetune.services.common.errors import field_named, field_prefix, map_errors
from edgetune.services.common.paging import paginate
from edgetune.services.profiler import metrics
from edgetune.store import MeasurementRecord, Store
from edgetune.telemetry.sampler import TelemetrySampler

log = logging.getLogger(__name__)

BUSY = "a profile is running on this device"
#: Server defaults for a request's zero values (see profiler.proto).
DEFAULT_BATCH_SIZE = 16
DEFAULT_N_MINIBATCHES = 40
DEFAULT_WARMUP_MINIBATCHES = 1
DEFAULT_SAMPLE_RATE_HZ = 1.0
#: StreamPower above this would mostly measure the sensor's own I2C traffic.
MAX_STREAM_RATE_HZ = 100.0
#: Request metadata key whose value becomes the run key of the measurement ids, so that a
#: client retrying the same request writes the same ids (the store ignores repeats).
RUN_KEY_METADATA = "edgetune-run-key"
#: How often the RPC thread looks at its context while waiting for the worker.
_POLL_S = 0.2


# --- request fields ------------------------------------------------------------------------
def _non_negative(value: int | float, field: str, allowed: str) -> None:
    if not value >= 0:  # also catches NaN
        raise InvalidArgument(field, f"{value} is negative", allowed)


@dataclass(frozen=True)
class ProfilePlan:
    """A validated Profile request: what to measure, in which order, with which protocol knobs."""

    workload: str
    role: Role
    points: list[tuple[PowerMode, int]]
    config: ProfileConfig


# --- the worker ------------------------------------------------------------------------------
class ProfileJob:
    """Measures a plan's points in a thread; events come out of ``events`` as
    ``("event", ProfileEvent)``, ``("error", exception)`` and finally ``("end", None)``."""

    def __init__(self, servicer: ProfilerServicer, plan: ProfilePlan) -> None:
        self.servicer = servicer
        self.plan = plan
        self.events: queue.Queue[tuple[str, Any]] = queue.Queue()
        self.outcome = "failed"
        self.at = 0  # index of the point being measured, for error messages
        self.restored = False
        self._cancel = threading.Event()
        self.thread = threading.Thread(target=self._run, name="profiler-job", daemon=True)

    def cancel(self) -> None:
        self._cancel.set()

    def _put(self, **event: Any) -> None:
        self.events.put(("event", profiler_pb2.ProfileEvent(**event)))

    def _run(self) -> None:
        s, plan = self.servicer, self.plan
        total = len(plan.points)
        try:
            was_active = s.keeper.active  # an ApplyPowerMode is in force: return to it, not past it
            original = s.keeper.device.current_mode()
            try:
                # The cancel reaches into a point too: the runner stops between minibatches.
                with stopping.stop_when(self._cancel.is_set):
                    self._measure_all(Profiler(s.keeper.guarded, plan.config), total)
            except stopping.Stopped:
                self.outcome = "cancelled"
            finally:
                self._restore(was_active, original)
                self.restored = True
        except BaseException as exc:  # noqa: BLE001 - reported to the client, never lost
            if not isinstance(exc, EdgetuneError):
                log.exception("profile failed")  # the traceback (and any chained cause) for operators
            self.events.put(("error", self._explain(exc)))
        finally:
            s._device_busy.release()
            metrics.PROFILES.labels(self.outcome).inc()
            log.info("profile ended", extra={"outcome": self.outcome, "points": total,
                                             "workload": plan.workload})
            self.events.put(("end", None))

    def _measure_all(self, profiler: Profiler, total: int) -> None:
        plan, s = self.plan, self.servicer
        for i, (mode, batch_size) in enumerate(plan.points):
            if self._cancel.is_set():  # between points only: a point is never cut in half
                self.outcome = "cancelled"
                return
            self.at = i
            self._put(progress=common_pb2.Progress(stage="measuring", done=i, total=total,
                                                   message=f"{mode.label()} batch {batch_size}"))
            try:
                m = profiler.measure(mode, plan.workload, plan.role, batch_size)
            except PowerLimitExceeded as exc:  # the protocol already went back to the previous mode
                metrics.POINTS.labels("skipped").inc()
                self._put(skipped=profiler_pb2.ProfileSkipped(mode=convert.mode_to_proto(mode),
                                                              batch_size=batch_size, reason=str(exc)))
                continue
            metrics.POINTS.labels("measured").inc()
            metrics.POWER_W.set(m.power_w)
            metrics.MEASURED_POWER_W.set(m.power_w)
            metrics.MEASURED_TIME_MS.set(m.time_ms)
            if m.remeasured or m.throttled:
                metrics.THROTTLED_POINTS.inc(m.remeasured + int(m.throttled))
            s._store_measurement(m)
            self._put(measurement=convert.measurement_to_proto(m, s.node_id, time.time()))
        self.outcome = "completed"
        self._put(progress=common_pb2.Progress(stage="done", done=total, total=total,
                                               message=f"{total} points"))

    def _restore(self, was_active: bool, original: PowerMode) -> None:
        keeper = self.servicer.keeper
        if not was_active:
            keeper.restore()  # the profile made the first change: undo it exactly, clear the record
        elif keeper.device.current_mode() != original:
            keeper.guarded.apply(original)  # back to the mode an earlier ApplyPowerMode set

    def _explain(self, exc: BaseException) -> BaseException:
        if isinstance(exc, EdgetuneError):
            return exc
        mode, batch_size = self.plan.points[self.at]
        after = ("the previous power mode was restored" if self.restored
                 else "restoring the previous power mode failed too: see the agent's log")
        return EdgetuneError(f"profiling failed at point {self.at + 1} of {len(self.plan.points)} "
                             f"({mode.label()}, batch {batch_size}): {type(exc).__name__}: {exc}; {after}")


# --- the servicer ----------------------------------------------------------------------------
class ProfilerServicer(profiler_pb2_grpc.ProfilerServicer):
    def __init__(self, keeper: ModeKeeper, store: Store | None = None, node_id: str = "",
                 job_join_s: float = 120.0, workload_path: Sequence[Path] = ()) -> None:
        self.keeper = keeper
        #: Directories a MODULE:FUNCTION workload may be imported from (the operator's
        #: --workload-path); empty: this agent runs zoo workloads only.
        self.workload_path = tuple(Path(p) for p in workload_path)
        self.device = keeper.device
        self.store = store
        self.node_id = node_id
        self.job_join_s = job_join_s
        self._device_busy = threading.Lock()
        self._jobs: set[ProfileJob] = set()
        self._jobs_lock = threading.Lock()
        self._closing = threading.Event()
        self._grids: dict[str, list[PowerMode]] = {}
        #: The agent's continuous telemetry sampler (set by the server; None when off).
        self.telemetry: TelemetrySampler | None = None
        metrics.set_mode(self.device.current_mode())

    # -- helpers -----------------------------------------------------------------------------
    @contextmanager
    def _exclusive(self) -> Iterator[None]:
        if not self._device_busy.acquire(blocking=False):
            raise FailedPrecondition(f"{BUSY}; try again when it is done")
        try:
            yield
        finally:
            self._device_busy.release()

    def apply_mode(self, mode: PowerMode) -> tuple[PowerMode, PowerMode]:
        """Validate and apply ``mode`` through the guard; (applied, previous). FailedPrecondition while
        a profile holds the device. ApplyPowerMode and the coordinator link's config push share it."""
        with self._exclusive():
            return self.keeper.apply(mode)

    def restore_mode(self) -> tuple[PowerMode, bool]:
        """Back to the mode found before the first change; (mode now, changed). FailedPrecondition while busy."""
        with self._exclusive():
            return self.keeper.restore()

    def _grid_modes(self, name: str) -> list[PowerMode]:
        if name not in self._grids:  # the full Orin grid is 18k modes: build each grid once
            self._grids[name] = named_grid(self.device.spec, name).modes()
        return self._grids[name]

    def _store_measurement(self, m: Measurement) -> None:
        if self.store is None:
            return
        record = MeasurementRecord.from_row(m.to_row())
        if self.node_id:
            record = replace(record, node_id=self.node_id)
        self.store.put_measurement(record)  # idempotent by id: a retried write is a no-op

    def _power_rails(self) -> list[str]:
        try:
            return sorted(self.device.power_sensor().rails_w())
        except (EdgetuneError, OSError):  # no sensor, or one that cannot be read right now
            return []

    # -- RPCs ----------------------------------------------------------------------------------
    @map_errors
    def GetDevice(self, request: profiler_pb2.GetDeviceRequest, context: grpc.ServicerContext):
        mode = self.device.current_mode()
        metrics.set_mode(mode)
        return profiler_pb2.GetDeviceResponse(
            spec=convert.spec_to_proto(self.device.spec), node_id=self.node_id, backend=self.device.backend,
            current_mode=convert.mode_to_proto(mode), workloads=self.device.workloads(),
            power_rails=self._power_rails())

    @map_errors
    def ListPowerModes(self, request: profiler_pb2.ListPowerModesRequest, context: grpc.ServicerContext):
        modes = self._grid_modes(convert.GRID.from_proto(request.grid, "grid"))
        page, token = paginate(modes, request.page_size, request.page_token)
        return profiler_pb2.ListPowerModesResponse(modes=[convert.mode_to_proto(m) for m in page],
                                                   next_page_token=token, total_size=len(modes))

    @map_errors
    def Profile(self, request: profiler_pb2.ProfileRequest, context: grpc.ServicerContext):
        plan = self.plan_profile(request, self._run_key(context))
        job = self.start_profile(plan)
        if not context.add_callback(job.cancel):  # the RPC already ended
            job.cancel()
        try:
            while True:
                try:
                    kind, item = job.events.get(timeout=_POLL_S)
                except queue.Empty:
                    if not context.is_active():
                        job.cancel()
                        return
                    continue
                if kind == "end":
                    return
                if kind == "error":
                    raise item
                yield item
        finally:
            job.cancel()  # no-op once finished; a stream closed early stops the worker

    @map_errors
    def ApplyPowerMode(self, request: profiler_pb2.ApplyPowerModeRequest, context: grpc.ServicerContext):
        target = request.WhichOneof("target")
        spec = self.device.spec
        if target is None:
            raise InvalidArgument("target", "no mode or preset given", "mode, preset_name or preset_id")
        if target == "mode":
            mode = convert.mode_from_proto(request.mode, "mode")
        else:
            with field_named(target):
                key = request.preset_name if target == "preset_name" else request.preset_id
                mode = spec.preset(key).mode()
        with field_prefix("mode"):
            applied, previous = self.apply_mode(mode)
        log.info("power mode applied", extra={"mode": applied.label(), "previous": previous.label()})
        return profiler_pb2.ApplyPowerModeResponse(applied=convert.mode_to_proto(applied),
                                                   previous=convert.mode_to_proto(previous))

    @map_errors
    def RestorePowerMode(self, request: profiler_pb2.RestorePowerModeRequest, context: grpc.ServicerContext):
        mode, changed = self.restore_mode()
        return profiler_pb2.RestorePowerModeResponse(restored=convert.mode_to_proto(mode), changed=changed)

    @map_errors
    def StreamPower(self, request: profiler_pb2.StreamPowerRequest, context: grpc.ServicerContext):
        rate_hz = validation.sample_rate_hz(request.sample_rate_hz or DEFAULT_SAMPLE_RATE_HZ, "sample_rate_hz",
                                            maximum=MAX_STREAM_RATE_HZ)  # 0: the default
        _non_negative(request.max_samples, "max_samples", "0 (until cancelled) or more")
        sensor = self.device.power_sensor()  # FailedPrecondition when the board has no monitor
        read_both = getattr(sensor, "read_total_and_rails", None)
        stop = threading.Event()
        if not context.add_callback(stop.set):
            return
        t0, k = time.monotonic(), 0
        while not (stop.is_set() or self._closing.is_set()):
            if request.include_rails:
                power_w, rails = read_both() if callable(read_both) else (sensor.read_w(), sensor.rails_w())
            else:
                power_w, rails = sensor.read_w(), {}
            metrics.POWER_W.set(power_w)
            sample = profiler_pb2.PowerSample(t_s=self.device.clock.now_s(), power_w=power_w, rails_w=rails)
            sample.timestamp.GetCurrentTime()
            yield sample
            k += 1
            if request.max_samples and k >= request.max_samples:
                return
            # Drift-free schedule (sample k due at t0 + k / rate); the wait ends at once on cancel.
            stop.wait(max(0.0, t0 + k / rate_hz - time.monotonic()))

    # -- Profile plumbing ------------------------------------------------------------------------
    @staticmethod
    def _run_key(context: grpc.ServicerContext) -> str:
        for key, value in context.invocation_metadata() or ():
            if key == RUN_KEY_METADATA and value:
                return str(value)
        return uuid.uuid4().hex  # a fresh profile: new ids, new rows in the store

    def plan_profile(self, request: profiler_pb2.ProfileRequest, run_key: str = "") -> ProfilePlan:
        """Validate every field before anything touches the device; InvalidArgument names the field."""
        spec, wl = self.device.spec, request.workload
        if not wl.name:
            raise InvalidArgument("workload.name", "is empty", ", ".join(known_workloads(self.device)))
        role = convert.role_from_proto(wl.role, "workload.role", default=Role.TRAIN)
        # a user's MODULE:FUNCTION is imported by name from the operator's directories only, never
        # from the request; it runs (and is recorded) under its id
        workload = resolve_workload(self.device, wl.name, role, allowed_path=self.workload_path,
                                    field="workload.name")

        convert.profile_knobs(request)  # counts, rate, seed, batch sizes: bounded before anything runs
        limit_w = validation.optional(validation.power_budget_w, convert.optional_value(request, "power_limit_w"),
                                      "power_limit_w")

        if request.modes and request.random_modes:
            raise InvalidArgument("random_modes", "give either modes or random_modes, not both",
                                  "0 when modes are listed")
        if request.modes:
            modes = []
            for i, msg in enumerate(request.modes):
                modes.append(validation.power_mode(spec, convert.mode_from_proto(msg, f"modes[{i}]"), f"modes[{i}]"))
        elif request.random_modes:
            grid_name = convert.GRID.from_proto(request.random_grid, "random_grid")
            grid = named_grid(spec, grid_name)
            if request.random_modes > grid.n_modes:
                raise InvalidArgument("random_modes", f"{request.random_modes} is more than the {grid.n_modes} "
                                      f"modes of the {grid_name} grid", f"1 to {grid.n_modes}")
            seed = validation.optional(validation.seed, convert.optional_value(request, "seed"), "seed") or 0
            picks = np.random.default_rng(seed).choice(grid.n_modes, size=request.random_modes, replace=False)
            modes = [grid.mode_at(int(i)) for i in picks]
        else:
            raise InvalidArgument("modes", "no modes to profile", "modes, or random_modes > 0")
        if request.descending_order:
            modes = descending_order(modes)

        if request.batch_sizes:
            sizes = list(validation.batch_sizes(request.batch_sizes, "batch_sizes"))
        else:
            sizes = [wl.batch_size or DEFAULT_BATCH_SIZE]  # 0: the default
        if len(modes) * len(sizes) > validation.MAX_PROFILE_POINTS:
            raise InvalidArgument("modes", f"{len(modes)} modes x {len(sizes)} batch sizes is "
                                  f"{len(modes) * len(sizes)} points", f"at most {validation.MAX_PROFILE_POINTS}")

        warmup = request.warmup_minibatches
        config = ProfileConfig(
            n_minibatches=request.n_minibatches or DEFAULT_N_MINIBATCHES,
            warmup_minibatches=0 if warmup == -1 else (warmup or DEFAULT_WARMUP_MINIBATCHES),
            sample_rate_hz=request.sample_rate_hz or DEFAULT_SAMPLE_RATE_HZ,
            hard_limit_w=limit_w, node=self.node_id, run_key=run_key,
            id_workload=wl.name if workload != wl.name else "",
        ).validate()
        return ProfilePlan(workload, role, [(m, b) for m in modes for b in sizes], config)

    def start_profile(self, plan: ProfilePlan) -> ProfileJob:
        """Run ``plan`` in a worker that owns the device until it restores the mode; its events come out
        of ``job.events``. FailedPrecondition while another profile runs or the agent is closing."""
        if self._closing.is_set():
            raise FailedPrecondition("the profiler agent is shutting down")
        if not self._device_busy.acquire(blocking=False):
            raise FailedPrecondition(BUSY)
        job = ProfileJob(self, plan)  # from here the job owns the lock and releases it when done
        with self._jobs_lock:
            self._jobs = {j for j in self._jobs if j.thread.is_alive()} | {job}
        log.info("profile started", extra={"points": len(plan.points), "workload": plan.workload,
                                           "role": plan.role.value})
        job.thread.start()
        return job

    # -- shutdown --------------------------------------------------------------------------------
    def shutdown(self, timeout_s: float | None = None) -> None:
        """Stop power streams, cancel profiles and wait (bounded) for their workers to restore the
        mode and let go of the device. Runs as a server shutdown hook, before the keeper's restore."""
        self._closing.set()
        with self._jobs_lock:
            jobs = list(self._jobs)
        for job in jobs:
            job.cancel()
        deadline = time.monotonic() + (self.job_join_s if timeout_s is None else timeout_s)
        for job in jobs:
            job.thread.join(max(0.0, deadline - time.monotonic()))
            if job.thread.is_alive():
                log.error("a profile worker did not stop in time; restoring the mode anyway")
