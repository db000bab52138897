"""SysfsJetson: a real Jetson driven through /sys (cpufreq, devfreq, EMC debugfs, INA3221).

``discover(root)`` reads what the board offers (model, cores, CPU / GPU / EMC frequency tables,
power rails) and says what it could not find; ``SysfsJetson(root)`` builds its own
:class:`DeviceSpec` from those tables (presets from the built-in spec when the model is known)
and switches modes with plain file writes under ``root`` — so tests point ``root`` at a copy of
a fake sysroot and read back what was written.

Write order of ``apply`` (and of ``restore``), chosen so that every single write is one the
kernel accepts given the writes before it:

1. **Cores online** (ascending). cpufreq refuses writes to a policy whose CPUs are all offline
   (``-EBUSY`` on an inactive policy), so a cluster must be up before its clocks are set.
2. **CPU clocks**, every active policy: pin ``scaling_min_freq = scaling_max_freq``. When the
   target is above the current max, write max first then min (raising); otherwise min first
   then max (lowering): min > max is rejected (or silently clamped) at every step otherwise.
3. **GPU clock**, devfreq ``min_freq`` / ``max_freq`` (Hz) with the same raise / lower rule.
4. **EMC**: t194 / t234 BPMP debugfs — lift the nvpmodel EMC cap when it is below the target,
   write ``rate`` (Hz), then ``mrq_rate_locked = 1`` (NVIDIA's ``jetson_clocks`` order); t210 —
   ``override.emc/clk_update_rate`` then ``clk_state = 1``; without debugfs, the nvpmodel cap
   alone (bounds the clock instead of pinning it).
5. **Cores offline** (descending), last, so the clusters being parked still took the new clocks
   and the remaining cores never run a higher clock than asked with fewer cores.

Governors are left as found: min = max pins the clock under any governor. ``restore()`` writes
back every file ``apply`` may touch (online states, governors, min / max, EMC rate / lock / cap)
exactly as they were before the first change, in the same order.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from edgetune.base.clocks import Clock, RealClock
from edgetune.base.mode import PowerMode
from edgetune.base.roles import Role
from edgetune.devices.base import Device
from edgetune.devices.ina3221 import Ina3221Sensor, Rail, find_rails
from edgetune.devices.sampling import PowerSensor
from edgetune.devices.sysfs_layout import (
    CpuLayout,
    EmcLayout,
    GpuLayout,
    ModelInfo,
    find_cpus,
    find_emc,
    find_gpu,
    read_int,
    read_model,
    read_text,
    rpath,
)
from edgetune.devices.thermal import find_zones, read_zones, zone_info
from edgetune.errors import EdgetuneError, FailedPrecondition
from edgetune.powermodes.nvpmodel import load_nvpmodel
from edgetune.powermodes.spec import DeviceSpec, Preset
from edgetune.powermodes.specs import SPECS, UNTABULATED
from edgetune.telemetry.sample import Clocks, TelemetrySample

#: Where nvpmodel keeps the active preset file (a link to /etc/nvpmodel/nvpmodel_<board>.conf).
NVPMODEL_CONF = "etc/nvpmodel.conf"

#: A minibatch runner: (workload, role, batch_size, n_minibatches) -> per-minibatch times in ms.
Runner = Callable[[str, Role, int, int], list[float]]


# --- discovery --------------------------------------------------------------------------------
@dataclass
class DiscoveryReport:
    """What ``discover`` found under a root, and what it did not."""

    root: str
    model: ModelInfo
    cpu: CpuLayout | None
    gpu: GpuLayout | None
    emc: EmcLayout | None
    rails: list[Rail]
    found: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """Enough to build a device: CPU and GPU tables (EMC can fall back to the built-in table)."""
        return bool(self.cpu and self.cpu.table_khz and self.gpu and self.gpu.table_hz)

    def as_dict(self) -> dict:
        cpu = self.cpu
        return {
            "root": self.root,
            "model": self.model.model,
            "compatible": list(self.model.compatible),
            "soc": self.model.soc,
            "builtin_spec": self.model.builtin,
            "l4t": self.model.l4t,
            "cpu": None if cpu is None else {
                "n_cpus": cpu.n_cpus,
                "hotplug": sorted(cpu.online_files),
                "policies": [{"path": p.path, "cpus": list(p.cpus), "n_freqs": len(p.table_khz)}
                             for p in cpu.policies],
                "table_khz": list(cpu.table_khz),
            },
            "gpu": None if self.gpu is None else {
                "devfreq": self.gpu.devfreq, "table_hz": list(self.gpu.table_hz),
                "railgate": self.gpu.railgate, "scaling_3d": self.gpu.scaling_3d,
                "power_control": self.gpu.power_control,
            },
            "emc": None if self.emc is None else {
                "method": self.emc.method, "table_khz": list(self.emc.table_khz),
                "table_source": self.emc.table_source, "rate_file": self.emc.rate_file,
                "lock_file": self.emc.lock_file, "cap_file": self.emc.cap_file,
            },
            "rails": [{"rail": r.name, "kind": r.kind,
                       "files": [f for f in (r.power_file, r.voltage_file, r.current_file) if f]}
                      for r in self.rails],
            "found": list(self.found),
            "missing": list(self.missing),
        }


def discover(root: str | os.PathLike = "/") -> DiscoveryReport:
    """Read model, cores, frequency tables and power rails under ``root``; never writes."""
    root = os.fspath(root)
    model = read_model(root)
    cpu, gpu, emc, rails = find_cpus(root), find_gpu(root), find_emc(root), find_rails(root)
    rep = DiscoveryReport(root, model, cpu, gpu, emc, rails)
    _note(rep, bool(model.model or model.compatible), "device-tree model",
          "device-tree model (/proc/device-tree/model, compatible)")
    if model.model and not model.builtin:
        why = f": {UNTABULATED[model.known]}" if model.known in UNTABULATED else ""
        rep.missing.append(f"built-in spec for {model.model!r} (tables from sysfs{why})")
    _note(rep, cpu is not None, f"{cpu.n_cpus if cpu else 0} CPUs", "CPUs (/sys/devices/system/cpu/possible)")
    _note(rep, bool(cpu and cpu.table_khz), "CPU frequency table",
          "CPU frequency table (cpufreq scaling_available_frequencies)")
    _note(rep, bool(cpu and cpu.online_files), "CPU hot-plug (cpuN/online)", "CPU hot-plug (cpuN/online)")
    _note(rep, gpu is not None, f"GPU devfreq {gpu.devfreq if gpu else ''}",
          "GPU devfreq (available_frequencies)")
    _note(rep, bool(emc and emc.table_khz), "EMC frequency table",
          "EMC frequency table (bpmp debug/emc/possible_rates or clk/emc/clk_possible_rates; needs debugfs)")
    _note(rep, bool(emc and emc.method in ("bpmp", "t210-override", "devfreq")),
          f"EMC control ({emc.method if emc else ''})",
          "EMC rate control (debugfs); nvpmodel EMC cap only" if emc and emc.method == "cap"
          else "EMC rate control (debugfs)")
    _note(rep, bool(rails), f"{len(rails)} INA3221 rails", "power monitor (INA3221 hwmon / iio)")
    zones = find_zones(root)
    _note(rep, bool(zones), f"{len(zones)} thermal zones", "thermal zones (/sys/class/thermal/thermal_zone*)")
    return rep


def _note(rep: DiscoveryReport, ok: bool, found: str, missing: str) -> None:
    (rep.found if ok else rep.missing).append(found if ok else missing)


# --- the device -------------------------------------------------------------------------------
def _mhz_khz(khz: int) -> float:
    return round(khz / 1000.0, 2)


def _mhz_hz(hz: int) -> float:
    return round(hz / 1e6, 2)


def _opt(value: int | None, per_mhz: float) -> float | None:
    """A kHz / Hz reading in MHz, or None when the file was missing or reads 0 (a gated clock)."""
    return value / per_mhz if value else None


def _clean(raw: str | None) -> str | None:
    """A file's content as ``read_text`` gives it (no trailing newline / NULs)."""
    return None if raw is None else raw.strip().strip("\0").strip()


def _nearest(table: tuple[float, ...], value: float) -> float:
    return min(table, key=lambda v: abs(v - value))


class SysfsJetson(Device):
    """A Jetson reached through the files under ``root`` (``/`` on the device itself)."""

    backend = "sysfs"

    def __init__(self, root: str | os.PathLike = "/", hard_limit_w: float | None = None,
                 runner: Runner | None = None) -> None:
        self.root = os.fspath(root)
        self.report = discover(self.root)
        if not self.report.ok:
            raise FailedPrecondition(f"sysfs device at {self.root!r}: cannot build a power-mode space; missing: "
                                     + "; ".join(self.report.missing))
        self.hard_limit_w = hard_limit_w
        self.runner = runner
        self._cpu: CpuLayout = self.report.cpu  # type: ignore[assignment]
        self._gpu: GpuLayout = self.report.gpu  # type: ignore[assignment]
        self._emc: EmcLayout | None = self.report.emc
        self._builtin: DeviceSpec | None = SPECS.get(self.report.model.builtin or "")
        # MHz table value -> the exact number the kernel takes (kHz for cpufreq, Hz otherwise).
        self._cpu_raw = {_mhz_khz(k): k for k in self._cpu.table_khz}
        self._gpu_raw = {_mhz_hz(h): h for h in self._gpu.table_hz}
        self._emc_raw, self.emc_table_source = self._emc_table()
        self._spec = self._build_spec()
        self.preset_source = self._load_presets()
        self._zones = find_zones(self.root)
        self._zone_info = zone_info(self.root, self._zones)  # types and trip points do not change
        self._clock = RealClock()
        self._sensor = Ina3221Sensor(self.root, self.report.rails) if self.report.rails else None
        self._initial_mode: PowerMode | None = None
        #: Before the first change: every file apply may write, as text (for planning) and as found
        #: byte for byte (latin-1, for the record and the last step of restore).
        self._snapshot: dict[str, str | None] | None = None
        self._raw: dict[str, str | None] = {}
        #: Every write made, in order: (path relative to root, value).
        self.writes: list[tuple[str, str]] = []

    # -- spec ------------------------------------------------------------------------------
    def _emc_table(self) -> tuple[dict[float, int], str]:
        emc = self._emc
        if emc and emc.table_khz:
            return {_mhz_khz(k): k * 1000 for k in emc.table_khz}, emc.table_source or "sysfs"
        if self._builtin is not None:  # debugfs not mounted / not root: the reference table
            return {m: int(round(m * 1e6)) for m in self._builtin.emc_mhz}, f"built-in spec {self._builtin.name}"
        hz = self._emc_current_hz()
        if hz:
            return {_mhz_hz(hz): hz}, "current EMC rate only"
        raise FailedPrecondition(f"sysfs device at {self.root!r}: no EMC table and no known model; "
                                 "mount debugfs (/sys/kernel/debug) and run as root")

    def _build_spec(self) -> DeviceSpec:
        model, builtin = self.report.model, self._builtin
        name = builtin.name if builtin else (re.sub(r"[^a-z0-9]+", "-", model.model.lower()).strip("-") or "jetson")
        return DeviceSpec(
            name=name,
            display_name=model.model or (builtin.display_name if builtin else "Jetson"),
            core_counts=tuple(range(self._cpu.min_cores, self._cpu.n_cpus + 1)),
            cpu_mhz=tuple(sorted(self._cpu_raw)),
            gpu_mhz=tuple(sorted(self._gpu_raw)),
            emc_mhz=tuple(sorted(self._emc_raw)),
            presets=builtin.presets if builtin else (),
            idle_power_w=builtin.idle_power_w if builtin else 0.0,
            max_power_w=self.hard_limit_w or (builtin.max_power_w if builtin else 0.0),
            soc=model.soc or (builtin.soc if builtin else ""),
            notes=f"discovered from sysfs under {self.root}",
            extra={"root": self.root, "l4t": model.l4t, "emc_table_source": self.emc_table_source},
        )

    def _load_presets(self) -> str:
        """Presets from the board's own nvpmodel.conf when it matches the discovered tables.

        The real file beats the built-in presets (a board may run another power-mode file, e.g.
        the JetPack 6.1 "Super" one); a file that cannot be read or matched is reported in
        ``report.missing`` (naming the file and why) and the built-in presets, if any, stay.
        """
        conf = os.path.join(self.root, NVPMODEL_CONF)
        target = os.path.realpath(conf)
        shown = "/" + NVPMODEL_CONF
        if target != os.path.join(os.path.realpath(self.root), NVPMODEL_CONF):  # a link: name the real file
            shown += f" -> /{os.path.relpath(target, os.path.realpath(self.root))}"
        if not os.path.isfile(conf):
            if not self._spec.presets:
                self.report.missing.append(f"presets: no /{NVPMODEL_CONF} and no built-in spec")
            return "built-in spec" if self._spec.presets else "none"
        try:
            presets: tuple[Preset, ...] = load_nvpmodel(conf).to_presets(self._spec)
        except EdgetuneError as exc:
            self.report.missing.append(f"presets: could not match preset file {shown} to the discovered tables "
                                       f"({exc}); " + ("kept the built-in presets" if self._spec.presets
                                                       else "no presets"))
            return "built-in spec" if self._spec.presets else "none"
        self._spec = replace(self._spec, presets=presets)
        self.report.found.append(f"{len(presets)} presets from {shown}")
        return shown

    @property
    def spec(self) -> DeviceSpec:
        return self._spec

    @property
    def clock(self) -> Clock:
        return self._clock

    # -- reading ---------------------------------------------------------------------------
    def online_cpus(self) -> set[int]:
        on = set()
        for c in range(self._cpu.n_cpus):
            f = self._cpu.online_files.get(c)
            if f is None or read_text(self.root, f) == "1":
                on.add(c)
        return on

    def _pinned_or_current(self, folder: str, lo: str, hi: str, cur: str) -> int | None:
        # Pinned (min = max): that is the clock (cur_freq lags a transition and is
        # sampled from counters on Orin). Otherwise the governor's current pick.
        a, b = read_int(self.root, f"{folder}/{lo}"), read_int(self.root, f"{folder}/{hi}")
        if a is not None and a == b:
            return a
        return read_int(self.root, f"{folder}/{cur}") or b

    def _emc_current_hz(self) -> int | None:
        emc = self._emc
        if emc is None:
            return None
        if emc.method == "t210-override" and read_int(self.root, emc.lock_file or "") == 1:
            pinned = read_int(self.root, emc.set_file or "")
            if pinned:
                return pinned
        if emc.method == "devfreq":
            return self._pinned_or_current(emc.extra["devfreq"], "min_freq", "max_freq", "cur_freq")
        if emc.method == "cap":
            cap = read_int(self.root, emc.cap_file or "")
            return cap if cap and cap < 2**62 else None
        return read_int(self.root, emc.rate_file) if emc.rate_file else None

    def current_mode(self) -> PowerMode:
        spec = self._spec
        cores = len(self.online_cpus())
        policy = next((p for p in self._cpu.policies if 0 in p.cpus), self._cpu.policies[0])
        cpu_khz = self._pinned_or_current(policy.path, "scaling_min_freq", "scaling_max_freq", "scaling_cur_freq")
        gpu_hz = self._pinned_or_current(self._gpu.devfreq, "min_freq", "max_freq", "cur_freq")
        emc_hz = self._emc_current_hz()
        return PowerMode(
            max(min(cores, spec.max_cores), min(spec.core_counts)),
            _nearest(spec.cpu_mhz, cpu_khz / 1000.0) if cpu_khz else spec.cpu_mhz[-1],
            _nearest(spec.gpu_mhz, gpu_hz / 1e6) if gpu_hz else spec.gpu_mhz[-1],
            _nearest(spec.emc_mhz, emc_hz / 1e6) if emc_hz else spec.emc_mhz[-1],
        )

    # -- telemetry -------------------------------------------------------------------------
    def _pin(self, folder: str, lo: str, hi: str) -> int | None:
        a, b = read_int(self.root, f"{folder}/{lo}"), read_int(self.root, f"{folder}/{hi}")
        return a if a is not None and a == b else None

    def telemetry(self) -> TelemetrySample:
        """Rails, thermal zones, the clocks running now (``scaling_cur_freq``, devfreq ``cur_freq``,
        the EMC ``rate``) and the clocks a pin holds (min = max, a locked EMC rate)."""
        power_w: float | None = None
        rails: dict[str, float] = {}
        if self._sensor is not None:
            try:
                power_w, rails = self._sensor.read_total_and_rails()
            except OSError:
                pass
        policy = next((p for p in self._cpu.policies if 0 in p.cpus), self._cpu.policies[0])
        cpu_khz = read_int(self.root, f"{policy.path}/scaling_cur_freq")
        gpu_hz = read_int(self.root, f"{self._gpu.devfreq}/cur_freq")
        emc = self._emc
        emc_hz = read_int(self.root, emc.rate_file) if emc and emc.rate_file else None
        cpu_pin = self._pin(policy.path, "scaling_min_freq", "scaling_max_freq")
        gpu_pin = self._pin(self._gpu.devfreq, "min_freq", "max_freq")
        emc_pin = None
        if emc and emc.lock_file and read_int(self.root, emc.lock_file) == 1 and emc.set_file:
            emc_pin = read_int(self.root, emc.set_file)
        elif emc and emc.method == "devfreq":
            emc_pin = self._pin(emc.extra["devfreq"], "min_freq", "max_freq")
        return TelemetrySample(
            t_s=self._clock.now_s(), power_w=power_w, rails_w=dict(rails),
            zones=read_zones(self.root, self._zones, self._zone_info),
            clocks=Clocks(len(self.online_cpus()), _opt(cpu_khz, 1e3), _opt(gpu_hz, 1e6), _opt(emc_hz, 1e6)),
            pinned=Clocks(None, _opt(cpu_pin, 1e3), _opt(gpu_pin, 1e6), _opt(emc_pin, 1e6)),
            backend=self.backend,
        )

    # -- planning writes -------------------------------------------------------------------
    def _range_writes(self, folder: str, lo_name: str, hi_name: str, lo: int, hi: int) -> list[tuple[str, str]]:
        """Writes setting [lo, hi] so that min <= max holds after each one."""
        cur_hi = read_int(self.root, f"{folder}/{hi_name}")
        lo_w, hi_w = (f"{folder}/{lo_name}", str(lo)), (f"{folder}/{hi_name}", str(hi))
        if cur_hi is None or lo > cur_hi:
            return [hi_w, lo_w]  # raising: max first
        return [lo_w, hi_w]  # lowering (or within range): min first

    def _active_policies(self, online: set[int]):
        return [p for p in self._cpu.policies if online.intersection(p.cpus)]

    def _plan_apply(self, mode: PowerMode) -> list[tuple[str, str]]:
        online_now = self.online_cpus()
        want = set(range(mode.cores))
        plan: list[tuple[str, str]] = []
        for c in sorted(want - online_now):
            plan.append((self._cpu.online_files[c], "1"))
        khz = self._cpu_raw[mode.cpu_mhz]
        for p in self._active_policies(online_now | want):
            plan += self._range_writes(p.path, "scaling_min_freq", "scaling_max_freq", khz, khz)
        hz = self._gpu_raw[mode.gpu_mhz]
        plan += self._range_writes(self._gpu.devfreq, "min_freq", "max_freq", hz, hz)
        plan += self._plan_emc(self._emc_raw[mode.emc_mhz])
        for c in sorted(online_now - want, reverse=True):
            plan.append((self._cpu.online_files[c], "0"))
        return plan

    def _plan_emc(self, hz: int) -> list[tuple[str, str]]:
        emc = self._emc
        # each method writes the files find_emc found for it; one missing means no EMC control
        if emc is not None and emc.method == "bpmp" and emc.set_file:
            plan: list[tuple[str, str]] = []
            cap = read_int(self.root, emc.cap_file) if emc.cap_file else None
            if emc.cap_file and cap and cap < hz:  # the nvpmodel cap would clamp the pinned rate
                plan.append((emc.cap_file, str(hz)))
            plan.append((emc.set_file, str(hz)))
            if emc.lock_file:
                plan.append((emc.lock_file, "1"))
            return plan
        if emc is not None and emc.method == "t210-override" and emc.set_file and emc.lock_file:
            return [(emc.set_file, str(hz)), (emc.lock_file, "1")]
        if emc is not None and emc.method == "devfreq":
            return self._range_writes(emc.extra["devfreq"], "min_freq", "max_freq", hz, hz)
        if emc is not None and emc.method == "cap" and emc.cap_file:
            return [(emc.cap_file, str(hz))]
        if self._emc_current_hz() == hz or len(self._emc_raw) == 1:
            return []
        raise FailedPrecondition(f"emc_mhz: cannot set the memory clock on {self.root!r}: no EMC control found "
                                 "(mount debugfs at /sys/kernel/debug and run as root)")

    def _check_writable(self, plan: list[tuple[str, str]]) -> None:
        for rel, _ in plan:
            path = rpath(self.root, rel)
            if not os.path.isfile(path):
                raise FailedPrecondition(f"{path}: does not exist; nothing was changed")
            if not os.access(path, os.W_OK):
                raise FailedPrecondition(f"{path}: not writable (run as root); nothing was changed")

    def _write_all(self, plan: list[tuple[str, str]]) -> None:
        for rel, value in plan:
            try:
                with open(rpath(self.root, rel), "w") as fh:
                    fh.write(value + "\n")
            except OSError as exc:
                raise FailedPrecondition(f"{rpath(self.root, rel)}: writing {value!r} failed: {exc}") from exc
            self.writes.append((rel, value))

    # -- switching ---------------------------------------------------------------------------
    def _snapshot_files(self) -> list[str]:
        files = list(self._cpu.online_files.values())
        for p in self._cpu.policies:
            files += [f"{p.path}/scaling_governor", f"{p.path}/scaling_min_freq", f"{p.path}/scaling_max_freq"]
        g = self._gpu.devfreq
        files += [f"{g}/governor", f"{g}/min_freq", f"{g}/max_freq"]
        emc = self._emc
        if emc is not None:
            files += [f for f in (emc.set_file, emc.lock_file, emc.cap_file) if f]
            if emc.method == "devfreq":
                e = emc.extra["devfreq"]
                files += [f"{e}/governor", f"{e}/min_freq", f"{e}/max_freq"]
        return list(dict.fromkeys(files))

    def _read_raw(self, rel: str) -> str | None:
        try:
            with open(rpath(self.root, rel), "rb") as fh:
                return fh.read().decode("latin-1")
        except OSError:
            return None

    def _take_snapshot(self) -> None:
        if self._snapshot is None:
            self._initial_mode = self.current_mode()
            self._raw = {rel: self._read_raw(rel) for rel in self._snapshot_files()}
            self._snapshot = {rel: _clean(raw) for rel, raw in self._raw.items()}

    def saved_state(self) -> dict[str, str | None]:
        self._take_snapshot()
        return dict(self._raw)

    def restore_saved(self, state: dict[str, str | None]) -> None:
        """Put back the files of a record written by an earlier agent (one that died mid-change)."""
        self._raw = {str(rel): (None if raw is None else str(raw)) for rel, raw in state.items()}
        self._snapshot = {rel: _clean(raw) for rel, raw in self._raw.items()}
        self._initial_mode = None
        self.restore()

    def apply(self, mode: PowerMode) -> PowerMode:
        target = self._spec.validate(mode)  # InvalidArgument naming the field; nothing written
        plan = self._plan_apply(target)
        self._check_writable(plan)
        recorded = set(self._snapshot_files())
        unrecorded = sorted({rel for rel, _ in plan} - recorded)
        if unrecorded:  # a write restore would not undo: refuse before the first one
            raise FailedPrecondition(f"{unrecorded[0]}: would be written but is not recorded for restore; "
                                     "nothing was changed")
        self._take_snapshot()
        self._write_all(plan)
        return target

    def _plan_restore(self, snap: dict[str, str | None]) -> list[tuple[str, str]]:
        cpu = self._cpu
        was_online = {c for c in range(cpu.n_cpus) if c not in cpu.online_files or snap.get(cpu.online_files[c]) == "1"}
        online_now = self.online_cpus()
        # A policy changed while active and parked since (cluster taken offline) only accepts
        # its old limits back once one of its CPUs is online again: wake one for the writes.
        wake: set[int] = set()
        for p in cpu.policies:
            if not (online_now | was_online).intersection(p.cpus) and self._policy_dirty(p.path, snap):
                first = next((c for c in p.cpus if c in cpu.online_files), None)
                if first is not None:
                    wake.add(first)
        up = was_online | wake
        plan: list[tuple[str, str]] = [(cpu.online_files[c], "1") for c in sorted(up - online_now)]

        def back(folder: str, gov: str, lo: str, hi: str) -> None:
            g = snap.get(f"{folder}/{gov}")
            if g and g != read_text(self.root, f"{folder}/{gov}"):
                plan.append((f"{folder}/{gov}", g))
            a, b = snap.get(f"{folder}/{lo}"), snap.get(f"{folder}/{hi}")
            if a is not None and b is not None and a.isdigit() and b.isdigit():
                plan.extend(self._range_writes(folder, lo, hi, int(a), int(b)))

        for p in self._active_policies(online_now | up):
            back(p.path, "scaling_governor", "scaling_min_freq", "scaling_max_freq")
        back(self._gpu.devfreq, "governor", "min_freq", "max_freq")
        emc = self._emc
        if emc is not None and emc.method == "devfreq":
            back(emc.extra["devfreq"], "governor", "min_freq", "max_freq")
        elif emc is not None and emc.method != "none":
            rate = snap.get(emc.set_file) if emc.set_file and emc.set_file != emc.cap_file else None
            lock = snap.get(emc.lock_file) if emc.lock_file else None
            # Releasing the lock: release first so the old rate value never pins the clock;
            # keeping it: put the rate back while still locked, then the flag.
            steps = [(emc.set_file, rate), (emc.lock_file, lock)]
            if lock == "0":
                steps.reverse()
            plan += [(f, v) for f, v in steps if f and v is not None]
            cap_value = snap.get(emc.cap_file) if emc.cap_file else None
            if emc.cap_file and cap_value is not None:
                plan.append((emc.cap_file, cap_value))
        plan += [(cpu.online_files[c], "0") for c in sorted((online_now | up) - was_online, reverse=True)]
        return plan

    def _policy_dirty(self, folder: str, snap: dict[str, str | None]) -> bool:
        names = ("scaling_governor", "scaling_min_freq", "scaling_max_freq")
        return any(snap.get(f"{folder}/{n}") not in (None, read_text(self.root, f"{folder}/{n}")) for n in names)

    def restore(self) -> None:
        """Write back every file ``apply`` touched, as found before the first change."""
        if self._snapshot is None:
            return
        plan = self._plan_restore(self._snapshot)
        self._check_writable(plan)
        self._write_all(plan)
        # The ordered writes put every value back; a file whose bytes still differ (a value as the
        # kernel formats it, whitespace) gets its exact content, so the device is left as found.
        for rel, raw in self._raw.items():
            if raw is not None and self._read_raw(rel) not in (None, raw):
                try:
                    with open(rpath(self.root, rel), "wb") as fh:
                        fh.write(raw.encode("latin-1"))
                except OSError as exc:
                    raise FailedPrecondition(f"{rpath(self.root, rel)}: restoring failed: {exc}") from exc
                self.writes.append((rel, _clean(raw) or ""))
        self._snapshot = None
        self._raw = {}
        self._initial_mode = None

    # -- running and power -----------------------------------------------------------------
    def run(self, workload: str, role: Role | str, batch_size: int, n_minibatches: int) -> list[float]:
        if self.runner is None:
            # The real zoo on this machine's torch device (CUDA on a Jetson); imported late
            # because torch is heavy and discovery / actuation do not need it.
            from edgetune.workloads.runner import RunnerPool  # deferred: torch

            self.runner = RunnerPool()
        return self.runner(workload, Role.parse(role), batch_size, n_minibatches)

    def power_sensor(self) -> PowerSensor:
        if self._sensor is None:
            raise FailedPrecondition(f"no INA3221 power monitor found under {self.root!r} "
                                     "(/sys/bus/i2c/drivers/ina3221*/)")
        return self._sensor
