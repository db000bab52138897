"""ReplayDevice: a Device that answers from a recorded profile table.

Every search strategy can run against a measured dataset exactly as the papers evaluated
theirs: the table's distinct values per dimension (cores, cpu_mhz, gpu_mhz, emc_mhz) define
the device's spec and grid; ``apply`` accepts only modes that were recorded; ``run`` returns
the recorded ``time_ms`` of the current mode and batch size (optionally with seeded Gaussian
noise of ``time_std_ms``) and advances a :class:`VirtualClock` by that much; the power sensor
reads the recorded ``power_w`` of the point that last ran (until the next mode change) and the
table's lowest power when idle.

``profiled_count`` counts the distinct (mode, batch size, workload, role) points measured
through ``run`` or ``lookup`` — what ``edgetune search`` reports as "profiled".
"""

from __future__ import annotations

import os
from collections import deque
from typing import Any

import numpy as np

from edgetune import validation
from edgetune.base.clocks import Clock, VirtualClock
from edgetune.base.mode import PowerMode
from edgetune.base.roles import Role
from edgetune.devices.base import Device
from edgetune.devices.sampling import PowerSampler, PowerSensor, VirtualSampler
from edgetune.errors import InvalidArgument
from edgetune.powermodes.spec import DeviceSpec
from edgetune.powermodes.specs import SPECS
from edgetune.tables import Table, read_profile_table

#: (cores, cpu_mhz, gpu_mhz, emc_mhz, batch_size, workload, role); "" where the table has no such column.
PointKey = tuple[int, float, float, float, int, str, str]


def _distinct(rows: list[dict], col: str) -> list:
    return sorted({r[col] for r in rows})


def _list(values: list, limit: int = 12) -> str:
    text = [f"{v:g}" if isinstance(v, float) else str(v) for v in values]
    if len(text) > limit:
        return f"{len(text)} values: " + ", ".join(text[:limit // 2]) + ", …, " + ", ".join(text[-3:])
    return ", ".join(text) or "none"


class _ReplaySensor(PowerSensor):
    def __init__(self, device: ReplayDevice) -> None:
        self.device = device

    def read_w(self) -> float:
        return self.device.power_at(self.device.clock.now_s())[0]


class ReplayDevice(Device):
    """A recorded profile table behind the Device interface."""

    backend = "replay"

    def __init__(self, table_or_path: Table | str | os.PathLike, workload: str | None = None,
                 role: Role | str | None = None, device_name: str | None = None, *,
                 noise: bool = False, seed: int = 0) -> None:
        table = table_or_path if isinstance(table_or_path, Table) else read_profile_table(table_or_path)
        self.path = table.path or "table"
        rows = list(table.rows)
        if not rows:
            raise InvalidArgument(self.path, "the profile table has no rows")
        rows, name = self._select_device(rows, device_name)
        self.has_workload, self.has_role = table.has("workload"), table.has("role")
        if workload is not None and self.has_workload:
            rows = self._filter(rows, "workload", workload)
        self.default_role = Role.parse(role).value if role is not None else None
        if self.default_role is not None and self.has_role:
            rows = self._filter(rows, "role", self.default_role)
        self.table = Table(list(table.columns), rows, table.path)
        self.default_workload = workload
        self.noise = noise and table.has("time_std_ms")
        self._rng = np.random.default_rng(seed)

        self._index: dict[PointKey, dict[str, Any]] = {}
        for r in rows:
            self._index.setdefault(self._key(PowerMode.from_mapping(r), r["batch_size"],
                                             r.get("workload", "") if self.has_workload else "",
                                             r.get("role", "") if self.has_role else ""), r)
        self._recorded_modes = sorted({k[:4] for k in self._index})
        self._recorded_set = set(self._recorded_modes)
        self.idle_power_w = min(r["power_w"] for r in rows)
        builtin = SPECS.get(name)
        self._spec = DeviceSpec(
            name=name,
            display_name=f"{builtin.display_name if builtin else name} (replay of {os.path.basename(self.path)})",
            core_counts=tuple(int(c) for c in _distinct(rows, "cores")),
            cpu_mhz=tuple(float(v) for v in _distinct(rows, "cpu_mhz")),
            gpu_mhz=tuple(float(v) for v in _distinct(rows, "gpu_mhz")),
            emc_mhz=tuple(float(v) for v in _distinct(rows, "emc_mhz")),
            presets=builtin.presets if builtin else (),
            idle_power_w=self.idle_power_w,
            max_power_w=max(r["power_w"] for r in rows),
            soc=builtin.soc if builtin else "",
            notes=f"replayed from {self.path}",
        )
        self._clock = VirtualClock()
        self._mode = PowerMode(*self._recorded_modes[-1])
        self._initial_mode: PowerMode | None = None
        # ("run", t_start_s, power_w) / ("apply", t_s, 0.0), in time order; bounded.
        self._events: deque[tuple[str, float, float]] = deque(maxlen=4096)
        self._profiled: set[PointKey] = set()

    # -- construction helpers --------------------------------------------------------------
    def _select_device(self, rows: list[dict], device_name: str | None) -> tuple[list[dict], str]:
        devices = _distinct(rows, "device") if "device" in rows[0] else []
        if device_name is not None and devices:
            rows = self._filter(rows, "device", device_name)
            return rows, device_name
        if len(devices) > 1:
            raise InvalidArgument("device", f"{self.path} holds several devices; name one", _list(devices))
        return rows, device_name or (devices[0] if devices else "replay")

    def _filter(self, rows: list[dict], col: str, value: str) -> list[dict]:
        kept = [r for r in rows if r.get(col) == value]
        if not kept:
            raise InvalidArgument(col, f"{value!r} was not recorded in {self.path}", _list(_distinct(rows, col)))
        return kept

    @staticmethod
    def _key(mode: PowerMode, batch_size: int, workload: str, role: str) -> PointKey:
        return (int(mode.cores), float(mode.cpu_mhz), float(mode.gpu_mhz), float(mode.emc_mhz),
                int(batch_size), workload, role)

    # -- Device ----------------------------------------------------------------------------
    @property
    def spec(self) -> DeviceSpec:
        return self._spec

    @property
    def clock(self) -> Clock:
        return self._clock

    def current_mode(self) -> PowerMode:
        return self._mode

    def _check_mode(self, mode: PowerMode) -> PowerMode:
        """Validated mode with exact table values; raises naming the field, or ``mode`` for unrecorded combinations."""
        m = self._spec.validate(mode)
        if m.as_tuple() not in self._recorded_set:
            raise InvalidArgument("mode", f"{m} was never recorded in {self.path}",
                                  f"{len(self._recorded_modes)} recorded modes")
        return m

    def apply(self, mode: PowerMode) -> PowerMode:
        m = self._check_mode(mode)
        if self._initial_mode is None:
            self._initial_mode = self._mode
        if m != self._mode:
            self._events.append(("apply", self._clock.now_s(), 0.0))
        self._mode = m
        return m

    def _resolve(self, workload: str | None, role: Role | str | None) -> tuple[str, str]:
        w = ""
        if self.has_workload:
            known = self.workloads()
            if workload:
                w = workload
            elif self.default_workload:
                w = self.default_workload
            elif len(known) == 1:
                w = known[0]
            if w not in known:
                raise InvalidArgument("workload", f"{w or workload!r} was not recorded in {self.path}", _list(known))
        r = ""
        if self.has_role:
            known_roles = self.roles()
            if role:
                r = Role.parse(role).value
            elif self.default_role:
                r = self.default_role
            elif len(known_roles) == 1:
                r = known_roles[0]
            if r not in known_roles:
                raise InvalidArgument("role", f"{r or role!r} was not recorded in {self.path}", _list(known_roles))
        elif role:
            Role.parse(role)  # still refuse nonsense roles
        return w, r

    def lookup(self, mode: PowerMode, batch_size: int, workload: str | None = None,
               role: Role | str | None = None, *, record: bool = True) -> dict[str, Any]:
        """The recorded row of (mode, batch size, workload, role); counts as a profile when ``record``."""
        m = self._check_mode(mode)
        w, r = self._resolve(workload, role)
        key = self._key(m, batch_size, w, r)
        row = self._index.get(key)
        if row is None:
            batches = sorted({k[4] for k in self._index if k[:4] == key[:4] and k[5:] == (w, r)})
            if not batches:
                raise InvalidArgument("mode", f"{m} was not recorded for workload {w or '-'} / role {r or '-'}",
                                      f"{len(self.modes(w or None, r or None))} modes recorded for it")
            raise InvalidArgument("batch_size", f"{batch_size} was not recorded for {m} ({w or '-'}/{r or '-'})",
                                  _list(batches))
        if record:
            self._profiled.add(key)
        return dict(row)

    def run(self, workload: str, role: Role | str, batch_size: int, n_minibatches: int) -> list[float]:
        validation.count(n_minibatches, "n_minibatches")
        row = self.lookup(self._mode, batch_size, workload, role)
        time_ms = float(row["time_ms"])
        std = float(row.get("time_std_ms") or 0.0) if self.noise else 0.0
        if std > 0:
            times = np.maximum(self._rng.normal(time_ms, std, int(n_minibatches)), 1e-3).tolist()
        else:
            times = [time_ms] * int(n_minibatches)
        self._events.append(("run", self._clock.now_s(), float(row["power_w"])))
        self._clock.advance(sum(times) / 1000.0)
        return times

    def power_at(self, t_s: float) -> tuple[float, dict[str, float] | None]:
        """Power at instant ``t_s``: the last run's recorded power since the last mode change, else idle."""
        power_w = self.idle_power_w
        for kind, t_event, p in self._events:
            if t_event > t_s:
                break
            power_w = p if kind == "run" else self.idle_power_w
        return power_w, None

    def power_sensor(self) -> PowerSensor:
        return _ReplaySensor(self)

    def sampler(self, rate_hz: float = 1.0) -> PowerSampler:
        return VirtualSampler(self.power_at, self._clock, rate_hz)

    # -- the recorded grid, for search strategies ---------------------------------------------
    def workloads(self) -> list[str]:
        return sorted({k[5] for k in self._index}) if self.has_workload else []

    def roles(self) -> list[str]:
        return sorted({k[6] for k in self._index}) if self.has_role else []

    def modes(self, workload: str | None = None, role: Role | str | None = None,
              batch_size: int | None = None) -> list[PowerMode]:
        """Recorded modes (sorted), optionally only those recorded for a workload / role / batch size."""
        r = Role.parse(role).value if role else None
        return [PowerMode(*m) for m in sorted({
            k[:4] for k in self._index
            if (workload is None or k[5] == workload) and (r is None or k[6] == r)
            and (batch_size is None or k[4] == batch_size)})]

    def batch_sizes(self, mode: PowerMode | None = None, workload: str | None = None,
                    role: Role | str | None = None) -> list[int]:
        r = Role.parse(role).value if role else None
        m = self._spec.validate(mode).as_tuple() if mode is not None else None
        return sorted({k[4] for k in self._index
                       if (m is None or k[:4] == m) and (workload is None or k[5] == workload)
                       and (r is None or k[6] == r)})

    @property
    def n_recorded_modes(self) -> int:
        return len(self._recorded_modes)

    @property
    def profiled_count(self) -> int:
        """Distinct (mode, batch size, workload, role) points measured so far."""
        return len(self._profiled)

    def reset_profiled(self) -> None:
        self._profiled.clear()
