"""Conversions between the library's types and the ``edgetune.v1`` protobuf messages.

Services use these at their edges (request -> library call -> response) so that servicers
hold wiring only. What lives here: PowerMode / Preset / DeviceSpec both ways, the enums
(role, grid, strategy, problem, objective) to and from the library's string names (prediction
tables: :mod:`edgetune.proto.serde.tables`), profiling measurements to messages and back to
stored measurement records, a reader for ``optional`` scalars and Unix seconds as Timestamps. Bad input
raises :class:`~edgetune.errors.InvalidArgument` naming the field.
"""

from __future__ import annotations

import math
from typing import Any

from google.protobuf import timestamp_pb2
from google.protobuf.message import Message

from edgetune import validation
from edgetune.base.mode import PowerMode
from edgetune.base.roles import Role
from edgetune.errors import InvalidArgument
from edgetune.powermodes.spec import DeviceSpec, Preset
from edgetune.profiling.protocol import Measurement
from edgetune.proto.v1 import common_pb2, coordinator_pb2, optimizer_pb2
from edgetune.store import MeasurementRecord

# --- power modes and specs ------------------------------------------------------------------


def mode_to_proto(mode: PowerMode) -> common_pb2.PowerMode:
    return common_pb2.PowerMode(cores=int(mode.cores), cpu_mhz=mode.cpu_mhz, gpu_mhz=mode.gpu_mhz,
                                emc_mhz=mode.emc_mhz)


def mode_from_proto(msg: common_pb2.PowerMode, field: str = "mode") -> PowerMode:
    """The library mode of ``msg``; every knob must be positive (an unset mode is all zeros).

    Not validated against a device: do ``spec.validate(mode)`` before applying it.
    """
    if msg.cores <= 0:
        raise InvalidArgument(f"{field}.cores", f"{msg.cores} is not a core count", ">= 1")
    for dim in ("cpu_mhz", "gpu_mhz", "emc_mhz"):
        value = getattr(msg, dim)
        if not (value > 0 and math.isfinite(value)):
            raise InvalidArgument(f"{field}.{dim}", f"{value:g} is not a frequency", "> 0 MHz")
    return PowerMode(int(msg.cores), msg.cpu_mhz, msg.gpu_mhz, msg.emc_mhz)


def preset_to_proto(preset: Preset) -> common_pb2.Preset:
    msg = common_pb2.Preset(id=preset.id, name=preset.name, cores=preset.cores,
                            cpu_max_mhz=preset.cpu_max_mhz, gpu_max_mhz=preset.gpu_max_mhz,
                            emc_max_mhz=preset.emc_max_mhz)
    if preset.budget_w is not None:
        msg.budget_w = preset.budget_w
    return msg


def preset_from_proto(msg: common_pb2.Preset) -> Preset:
    return Preset(id=msg.id, name=msg.name, cores=msg.cores, cpu_max_mhz=msg.cpu_max_mhz,
                  gpu_max_mhz=msg.gpu_max_mhz, emc_max_mhz=msg.emc_max_mhz,
                  budget_w=optional_value(msg, "budget_w"))


def spec_to_proto(spec: DeviceSpec) -> common_pb2.DeviceSpec:
    """The spec as a message; ``spec.extra`` (library-internal) is not sent."""
    return common_pb2.DeviceSpec(
        name=spec.name, display_name=spec.display_name, core_counts=list(spec.core_counts),
        cpu_mhz=list(spec.cpu_mhz), gpu_mhz=list(spec.gpu_mhz), emc_mhz=list(spec.emc_mhz),
        presets=[preset_to_proto(p) for p in spec.presets], idle_power_w=spec.idle_power_w,
        max_power_w=spec.max_power_w, soc=spec.soc, notes=spec.notes,
    )


def spec_from_proto(msg: common_pb2.DeviceSpec, field: str = "spec") -> DeviceSpec:
    """A DeviceSpec from a message; tables must be non-empty and are sorted ascending."""
    validation.device_tables(msg.core_counts, {d: getattr(msg, d) for d in ("cpu_mhz", "gpu_mhz", "emc_mhz")}, field)
    for name in ("idle_power_w", "max_power_w"):
        validation.number(getattr(msg, name), f"{field}.{name}", minimum=0.0)
    for i, p in enumerate(msg.presets):
        for name in ("cpu_max_mhz", "gpu_max_mhz", "emc_max_mhz"):
            validation.number(getattr(p, name), f"{field}.presets[{i}].{name}", minimum=0.0)
        validation.count(p.cores, f"{field}.presets[{i}].cores", minimum=0, maximum=validation.MAX_CORES)
        if p.HasField("budget_w"):
            validation.power_budget_w(p.budget_w, f"{field}.presets[{i}].budget_w")
    return DeviceSpec(
        name=msg.name, display_name=msg.display_name, core_counts=tuple(sorted(msg.core_counts)),
        cpu_mhz=tuple(sorted(msg.cpu_mhz)), gpu_mhz=tuple(sorted(msg.gpu_mhz)),
        emc_mhz=tuple(sorted(msg.emc_mhz)), presets=tuple(preset_from_proto(p) for p in msg.presets),
        idle_power_w=msg.idle_power_w, max_power_w=msg.max_power_w, soc=msg.soc, notes=msg.notes,
    )


# --- enums ----------------------------------------------------------------------------------


class EnumMap:
    """A proto enum <-> the library's lower-case names (``ROLE_TRAIN`` <-> ``"train"``).

    ``default`` is what ``*_UNSPECIFIED`` (0) reads as; ``None`` makes it an error.
    """

    def __init__(self, wrapper: Any, prefix: str, field: str, default: str | None = None) -> None:
        self._wrapper = wrapper
        self._prefix = prefix
        self.field = field
        self.default = default
        self.names: tuple[str, ...] = tuple(
            n[len(prefix):].lower() for n, v in wrapper.items() if v != 0
        )

    def to_proto(self, name: str) -> int:
        key = f"{self._prefix}{str(name).strip().upper()}"
        try:
            return int(self._wrapper.Value(key))
        except ValueError:
            raise InvalidArgument(self.field, f"unknown {self.field} {name!r}", ", ".join(self.names)) from None

    def from_proto(self, value: int, field: str | None = None) -> str:
        field = field or self.field
        if value == 0:
            if self.default is None:
                raise InvalidArgument(field, "is not set", ", ".join(self.names))
            return self.default
        try:
            return self._wrapper.Name(value)[len(self._prefix):].lower()
        except ValueError:
            raise InvalidArgument(field, f"unknown value {value}", ", ".join(self.names)) from None


ROLE = EnumMap(common_pb2.Role, "ROLE_", "role")
GRID = EnumMap(common_pb2.Grid, "GRID_", "grid", default="full")
OBJECTIVE = EnumMap(optimizer_pb2.Objective, "OBJECTIVE_", "objective", default="min_time")
STRATEGY = EnumMap(optimizer_pb2.Strategy, "STRATEGY_", "strategy")
PROBLEM = EnumMap(optimizer_pb2.Problem, "PROBLEM_", "problem")
ROUND_OBJECTIVE = EnumMap(coordinator_pb2.RoundObjective, "ROUND_OBJECTIVE_", "objective", default="makespan")


def role_to_proto(role: Role | str) -> int:
    return ROLE.to_proto(Role.parse(role).value)


def role_from_proto(value: int, field: str = "role", default: Role | None = None) -> Role:
    """The library Role; ROLE_UNSPECIFIED gives ``default`` or raises naming ``field``."""
    if value == 0 and default is not None:
        return default
    return Role(ROLE.from_proto(value, field))


# --- measurements -----------------------------------------------------------------------------


def measurement_to_proto(m: Measurement, node_id: str | None = None,
                         timestamp_s: float | None = None) -> common_pb2.Measurement:
    """A profiling :class:`~edgetune.profiling.protocol.Measurement` as a message.

    The message's ``energy_j`` is the energy of one minibatch (``m.energy_per_minibatch_j``);
    ``node_id`` defaults to the measurement's node; ``timestamp_s`` (Unix seconds) sets
    ``timestamp`` when given.
    """
    msg = common_pb2.Measurement(
        id=m.id, node_id=node_id if node_id is not None else m.node, device=m.device,
        workload=m.workload, role=common_pb2.Role.ValueType(role_to_proto(m.role)), mode=mode_to_proto(m.mode),
        batch_size=int(m.batch_size), time_ms=m.time_ms, time_std_ms=m.time_std_ms, power_w=m.power_w,
        power_std_w=m.power_std_w, peak_power_w=m.peak_power_w, energy_j=m.energy_per_minibatch_j,
        idle_power_w=m.idle_power_w, samples=int(m.samples), minibatches=int(m.n_minibatches),
    )
    if timestamp_s is not None:
        # Seconds and fraction apart: Unix time in ns does not fit a double's 53 bits exactly.
        seconds = math.floor(timestamp_s)
        msg.timestamp.FromNanoseconds(seconds * 10**9 + round((timestamp_s - seconds) * 1e9))
    return msg


def measurement_from_proto(msg: common_pb2.Measurement, field: str = "measurement") -> MeasurementRecord:
    """The stored form of a Measurement message: a :class:`~edgetune.store.MeasurementRecord` whose
    :meth:`~edgetune.store.MeasurementRecord.to_row` is the docs/contract.md profile-table row.

    A record, not a profiling Measurement: the message does not carry the protocol's run details
    (settling, per-minibatch times, power samples, run window). Its extra columns: ``energy_j`` the
    whole run's energy (per-minibatch energy x minibatches, as in rows written by ``edgetune
    profile``), ``energy_per_minibatch_j``, the spreads, the peak and idle power, the counts.
    """
    mode = mode_from_proto(msg.mode, f"{field}.mode")
    return MeasurementRecord(
        id=msg.id, device_model=msg.device, workload=msg.workload,
        role=role_from_proto(msg.role, f"{field}.role").value, mode=mode, batch_size=int(msg.batch_size),
        time_ms=msg.time_ms, power_w=msg.power_w, node_id=msg.node_id or None,
        extra={"peak_power_w": msg.peak_power_w, "energy_j": msg.energy_j * msg.minibatches,
               "time_std_ms": msg.time_std_ms, "power_std_w": msg.power_std_w, "samples": int(msg.samples),
               "idle_power_w": msg.idle_power_w, "energy_per_minibatch_j": msg.energy_j,
               "n_minibatches": int(msg.minibatches)})


# --- optional scalars, profiling knobs ---------------------------------------------------------


def optional_value(msg: Message, name: str) -> Any:
    """The value of an ``optional`` (or message) field, ``None`` when unset."""
    return getattr(msg, name) if msg.HasField(name) else None


# --- times ------------------------------------------------------------------------------------


def timestamp_to_proto(epoch_s: float) -> timestamp_pb2.Timestamp:
    """Unix seconds as a Timestamp, seconds and fraction apart (Unix time in ns does not fit a
    double's 53 bits exactly)."""
    seconds = math.floor(epoch_s)
    ts = timestamp_pb2.Timestamp()
    ts.FromNanoseconds(seconds * 10**9 + round((epoch_s - seconds) * 1e9))
    return ts


def timestamp_from_proto(ts: timestamp_pb2.Timestamp) -> float:
    """A Timestamp as Unix seconds (an unset one is 0.0)."""
    return ts.seconds + ts.nanos / 1e9
