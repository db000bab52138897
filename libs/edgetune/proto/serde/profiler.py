"""``profiler.proto`` messages <-> the node agent's records, both ways: what the Profiler service
reads and answers, and what its client (:mod:`edgetune.clients.profiler`) sends and reads back.

- a ``ProfileRequest`` is a :class:`~edgetune.store.ProfileJob` (the coordinator's SubmitProfiling
  queues the same record): every check that needs no device is made here, naming the request's
  field; the agent checks the rest against its device. A request's zero values mean the
  record's defaults (``warmup_minibatches`` -1: none).
- a ``ProfileEvent`` is a :class:`~edgetune.profiling.ProfileProgress`, a
  :class:`~edgetune.profiling.PointSkipped` or a measurement (the agent's
  :class:`~edgetune.profiling.Measurement` out; a :class:`~edgetune.store.MeasurementRecord` back,
  as the message does not carry the protocol's run details).
- ``GetDeviceResponse`` <-> :class:`~edgetune.devices.base.DeviceInfo`, ``PowerSample`` <->
  :class:`~edgetune.devices.base.PowerSample`, and the mode changes (ApplyPowerMode's target and
  answer, RestorePowerMode's answer).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from edgetune import validation
from edgetune.base.mode import PowerMode
from edgetune.base.roles import Role
from edgetune.base.workload import WorkloadRef
from edgetune.devices.base import DeviceInfo, PowerSample
from edgetune.errors import InvalidArgument
from edgetune.profiling import Measurement, PointSkipped, ProfileEvent, ProfileProgress
from edgetune.proto.serde.common import (
    GRID,
    measurement_from_proto,
    measurement_to_proto,
    mode_from_proto,
    mode_to_proto,
    optional_value,
    role_from_proto,
    role_to_proto,
    spec_from_proto,
    spec_to_proto,
)
from edgetune.proto.v1 import common_pb2, profiler_pb2
from edgetune.store import MeasurementRecord, ProfileJob
from edgetune.store.records import (
    DEFAULT_N_MINIBATCHES,
    DEFAULT_PROFILE_BATCH_SIZE,
    DEFAULT_PROFILE_SAMPLE_RATE_HZ,
    DEFAULT_WARMUP_MINIBATCHES,
)

#: What an empty ``workload.name`` is told (the agent lists its own workloads for an unknown one).
WORKLOAD_ALLOWED = "a zoo workload or MODULE:FUNCTION"
#: Request metadata key of a Profile call whose value becomes the run key of the measurement ids, so
#: that a client retrying the same request writes the same ids (the store ignores repeats).
RUN_KEY_METADATA = "edgetune-run-key"

# --- profile requests ------------------------------------------------------------------------


def profile_knobs(msg: profiler_pb2.ProfileRequest, field: str = "") -> None:
    """The device-independent limits of a ProfileRequest: minibatch counts, sample rate, seed, batch
    sizes, random modes, power limit. ``field`` prefixes the names (``request.``). 0 means the
    default throughout."""
    validation.count(msg.n_minibatches, f"{field}n_minibatches", minimum=0, maximum=validation.MAX_MINIBATCHES)
    if not -1 <= msg.warmup_minibatches <= validation.MAX_MINIBATCHES:
        raise InvalidArgument(f"{field}warmup_minibatches", f"{msg.warmup_minibatches} is out of range",
                              f"-1 (none), 0 (the default) or up to {validation.MAX_MINIBATCHES}")
    if msg.sample_rate_hz != 0:
        validation.sample_rate_hz(msg.sample_rate_hz, f"{field}sample_rate_hz")
    if msg.HasField("seed"):
        validation.seed(msg.seed, f"{field}seed")
    if msg.batch_sizes:
        validation.batch_sizes(msg.batch_sizes, f"{field}batch_sizes")
    if msg.workload.batch_size:
        validation.batch_size(msg.workload.batch_size, f"{field}workload.batch_size")
    validation.count(msg.random_modes, f"{field}random_modes", minimum=0, maximum=validation.MAX_PROFILE_POINTS)
    if msg.HasField("power_limit_w"):
        validation.power_budget_w(msg.power_limit_w, f"{field}power_limit_w")


def profile_job_from_proto(msg: profiler_pb2.ProfileRequest, field: str = "") -> ProfileJob:
    """The job a ProfileRequest asks for; InvalidArgument naming ``<field><name>`` (``field``:
    ``request.`` inside a SubmitProfiling)."""
    name = msg.workload.name
    if not name:
        raise InvalidArgument(f"{field}workload.name", "is empty", WORKLOAD_ALLOWED)
    WorkloadRef.parse(name, f"{field}workload.name")  # a MODULE:FUNCTION's form only: the node imports it
    role = role_from_proto(msg.workload.role, f"{field}workload.role", default=Role.TRAIN)
    profile_knobs(msg, field)
    if msg.modes and msg.random_modes:
        raise InvalidArgument(f"{field}random_modes", "give either modes or random_modes, not both",
                              "0 when modes are listed")
    if not msg.modes and not msg.random_modes:
        raise InvalidArgument(f"{field}modes", "no modes to profile", "modes, or random_modes > 0")
    modes = tuple(mode_from_proto(m, f"{field}modes[{i}]") for i, m in enumerate(msg.modes))
    grid = GRID.from_proto(msg.random_grid, f"{field}random_grid")
    warmup = msg.warmup_minibatches
    return ProfileJob(
        workload=name, role=role, modes=modes, random_modes=int(msg.random_modes), random_grid=grid,
        seed=int(msg.seed) if msg.HasField("seed") else 0,
        batch_sizes=tuple(int(b) for b in msg.batch_sizes) or (int(msg.workload.batch_size or DEFAULT_PROFILE_BATCH_SIZE),),
        n_minibatches=int(msg.n_minibatches or DEFAULT_N_MINIBATCHES),
        warmup_minibatches=0 if warmup == -1 else int(warmup or DEFAULT_WARMUP_MINIBATCHES),
        sample_rate_hz=float(msg.sample_rate_hz or DEFAULT_PROFILE_SAMPLE_RATE_HZ),
        power_limit_w=optional_value(msg, "power_limit_w"), descending_order=bool(msg.descending_order))


def profile_job_to_proto(job: ProfileJob) -> profiler_pb2.ProfileRequest:
    msg = profiler_pb2.ProfileRequest(
        workload=common_pb2.Workload(name=job.workload, role=common_pb2.Role.ValueType(role_to_proto(job.role))),
        modes=[mode_to_proto(m) for m in job.modes], random_modes=job.random_modes,
        random_grid=common_pb2.Grid.ValueType(GRID.to_proto(job.random_grid)), batch_sizes=list(job.batch_sizes),
        n_minibatches=job.n_minibatches, warmup_minibatches=job.warmup_minibatches or -1,
        sample_rate_hz=job.sample_rate_hz, seed=job.seed, descending_order=job.descending_order)
    if job.power_limit_w is not None:
        msg.power_limit_w = job.power_limit_w
    return msg


# --- profile events --------------------------------------------------------------------------


def profile_event_to_proto(event: ProfileEvent, timestamp_s: float | None = None) -> profiler_pb2.ProfileEvent:
    """One event of a running profile; ``timestamp_s`` (Unix seconds) stamps a measurement."""
    if isinstance(event, ProfileProgress):
        return profiler_pb2.ProfileEvent(progress=common_pb2.Progress(stage=event.stage, done=event.done,
                                                                      total=event.total, message=event.message))
    if isinstance(event, PointSkipped):
        return profiler_pb2.ProfileEvent(skipped=profiler_pb2.ProfileSkipped(
            mode=mode_to_proto(event.mode), batch_size=event.batch_size, reason=event.reason))
    if isinstance(event, Measurement):
        return profiler_pb2.ProfileEvent(measurement=measurement_to_proto(event, timestamp_s=timestamp_s))
    raise TypeError(f"not a profile event: {type(event).__name__}")


def profile_event_from_proto(msg: profiler_pb2.ProfileEvent) -> ProfileProgress | PointSkipped | MeasurementRecord:
    """A streamed event as a record; a measurement comes back as the row it stores
    (:class:`~edgetune.store.MeasurementRecord`, its extra columns included)."""
    kind = msg.WhichOneof("event")
    if kind == "progress":
        p = msg.progress
        return ProfileProgress(p.stage, int(p.done), int(p.total), p.message)
    if kind == "skipped":
        s = msg.skipped
        return PointSkipped(mode_from_proto(s.mode, "skipped.mode"), int(s.batch_size), s.reason)
    if kind == "measurement":
        return measurement_from_proto(msg.measurement)
    raise InvalidArgument("event", "is not set", "progress, measurement or skipped")


# --- the device ------------------------------------------------------------------------------


def device_info_to_proto(info: DeviceInfo) -> profiler_pb2.GetDeviceResponse:
    return profiler_pb2.GetDeviceResponse(
        spec=spec_to_proto(info.spec), node_id=info.node_id, backend=info.backend,
        current_mode=mode_to_proto(info.current_mode), workloads=list(info.workloads),
        power_rails=list(info.power_rails))


def device_info_from_proto(msg: profiler_pb2.GetDeviceResponse) -> DeviceInfo:
    return DeviceInfo(spec_from_proto(msg.spec, "spec"), msg.backend, mode_from_proto(msg.current_mode, "current_mode"),
                      tuple(msg.workloads), tuple(msg.power_rails), msg.node_id)


def power_modes_page_to_proto(modes: Sequence[PowerMode], next_page_token: str,
                              total_size: int) -> profiler_pb2.ListPowerModesResponse:
    return profiler_pb2.ListPowerModesResponse(modes=[mode_to_proto(m) for m in modes],
                                               next_page_token=next_page_token, total_size=total_size)


# --- mode changes ----------------------------------------------------------------------------


def apply_request_to_proto(target: PowerMode | str | int) -> profiler_pb2.ApplyPowerModeRequest:
    """A mode, or an nvpmodel preset by name (str) or id (int)."""
    if isinstance(target, PowerMode):
        return profiler_pb2.ApplyPowerModeRequest(mode=mode_to_proto(target))
    if isinstance(target, str):
        return profiler_pb2.ApplyPowerModeRequest(preset_name=target)
    return profiler_pb2.ApplyPowerModeRequest(preset_id=int(target))


def apply_target_from_proto(msg: profiler_pb2.ApplyPowerModeRequest) -> PowerMode | str | int:
    """The mode asked for, or the preset's name (str) or id (int): the device knows its presets."""
    target = msg.WhichOneof("target")
    if target is None:
        raise InvalidArgument("target", "no mode or preset given", "mode, preset_name or preset_id")
    if target == "mode":
        return mode_from_proto(msg.mode, "mode")
    return msg.preset_name if target == "preset_name" else int(msg.preset_id)


def applied_to_proto(applied: PowerMode, previous: PowerMode) -> profiler_pb2.ApplyPowerModeResponse:
    return profiler_pb2.ApplyPowerModeResponse(applied=mode_to_proto(applied), previous=mode_to_proto(previous))


def applied_from_proto(msg: profiler_pb2.ApplyPowerModeResponse) -> tuple[PowerMode, PowerMode]:
    """(applied, previous)."""
    return mode_from_proto(msg.applied, "applied"), mode_from_proto(msg.previous, "previous")


def restored_to_proto(mode: PowerMode, changed: bool) -> profiler_pb2.RestorePowerModeResponse:
    return profiler_pb2.RestorePowerModeResponse(restored=mode_to_proto(mode), changed=changed)


def restored_from_proto(msg: profiler_pb2.RestorePowerModeResponse) -> tuple[PowerMode, bool]:
    """(the mode now, whether the restore changed it)."""
    return mode_from_proto(msg.restored, "restored"), bool(msg.changed)


# --- power telemetry -------------------------------------------------------------------------


def stream_power_request(rate_hz: float = 0.0, max_samples: int = 0,
                         include_rails: bool = False) -> profiler_pb2.StreamPowerRequest:
    """A StreamPower request (0: the agent's default rate; ``max_samples`` 0: until cancelled)."""
    return profiler_pb2.StreamPowerRequest(sample_rate_hz=rate_hz, max_samples=max_samples,
                                           include_rails=include_rails)


def power_sample_to_proto(sample: PowerSample, timestamp_s: float | None = None) -> profiler_pb2.PowerSample:
    """``sample`` (``t_s`` on the device's clock) with the wall-clock ``timestamp_s`` when given."""
    msg = profiler_pb2.PowerSample(t_s=sample.t_s, power_w=sample.power_w, rails_w=sample.rails_w or {})
    if timestamp_s is not None:
        seconds = math.floor(timestamp_s)  # apart: Unix time in ns does not fit a double's 53 bits exactly
        msg.timestamp.FromNanoseconds(seconds * 10**9 + round((timestamp_s - seconds) * 1e9))
    return msg


def power_sample_from_proto(msg: profiler_pb2.PowerSample) -> PowerSample:
    """The sample on the device's clock (rails None when the stream carried none)."""
    return PowerSample(msg.t_s, msg.power_w, dict(msg.rails_w) or None)

