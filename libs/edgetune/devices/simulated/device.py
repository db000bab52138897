"""SimulatedJetson: a Device backend on a virtual clock, driven by the physical model.

``run`` returns noisy per-minibatch times (the first slower: cuDNN autotune, allocation)
and advances the virtual clock by each minibatch; the power sensor answers for any instant
of that clock from a recorded history of runs and mode switches, so a sampler can produce,
on ``stop()``, exactly the samples a sensor polled at ``rate_hz`` would have given. Power
after a mode switch approaches the new level exponentially from the old mode's level
(PowerTrain: 2-3 s to stabilise), carries a small ripple within each minibatch (forward /
backward / data phases) and sensor noise; between runs the device draws its mode's idle
power. Noise comes from two seeded generators (runs, sensor), so a seed and a call
sequence always give the same numbers.

Heat: three thermal zones (``cpu-thermal``, ``gpu-thermal``, ``tj-thermal``) sit at
``ambient_c`` plus the board's noise-free power times a thermal resistance set by
``THERMAL_RISE_AT_MAX_C`` (+45 °C at the spec's ``max_power_w``), plus whatever :meth:`heat`
added (a hot board in tests: extra degrees that decay exponentially on the virtual clock); they follow the
power without thermal lag (no heat capacity is modelled). When ``tj-thermal``
reaches ``trip_c`` the board throttles as a Jetson does: CPU and GPU clocks drop to
``THROTTLE_FRAC`` of the applied mode's (floored to the tables) and a run started then is
timed and powered in that throttled mode; :meth:`telemetry` reports the lower clocks.
"""

from __future__ import annotations

import math
import threading
from bisect import bisect_right
from dataclasses import dataclass

import numpy as np

from edgetune import validation
from edgetune.base.clocks import VirtualClock
from edgetune.base.mode import PowerMode
from edgetune.base.roles import Role
from edgetune.devices.base import Device
from edgetune.devices.sampling import PowerSample, PowerSampler, PowerSensor
from edgetune.devices.simulated.profiles import RoleProfile, get_profile, profile_names
from edgetune.errors import FailedPrecondition, InvalidArgument
from edgetune.physics.hardware import REF_CPU_MHZ, hardware_for
from edgetune.physics.model import PhysicalModel, as_mode_array
from edgetune.powermodes.spec import DeviceSpec
from edgetune.powermodes.specs import get_spec
from edgetune.telemetry.sample import Clocks, TelemetrySample, ZoneReading

#: Relative amplitude of the within-minibatch power ripple (of the load above idle).
RIPPLE_FRAC = 0.04
#: Sensor noise: relative and absolute standard deviation (INA3221 / jtop readings).
SENSOR_NOISE_REL = 0.008
SENSOR_NOISE_ABS_W = 0.05
#: Minibatch-to-minibatch power variation (relative std of each minibatch's mean level).
MINIBATCH_POWER_CV = 0.004
#: Probability and size of an occasional slow minibatch (GC pause, page fault burst).
HICCUP_PROB = 0.01
HICCUP_MAX_FRAC = 0.25
#: Virtual seconds of history kept for sampling past instants.
HISTORY_S = 3600.0
#: Board temperature rise above ambient at the spec's max_power_w (°C); sets the thermal resistance.
THERMAL_RISE_AT_MAX_C = 45.0
#: First (passive) trip point of the simulated zones (°C), where throttling starts.
TRIP_C = 95.0
#: Throttled CPU / GPU clocks as a fraction of the applied mode's (floored to the tables).
THROTTLE_FRAC = 0.6
#: Name of the one simulated rail: the board input, which is also the total.
SIM_RAIL = "VDD_IN"


@dataclass
class _Switch:
    t_s: float
    old: PowerMode
    new: PowerMode


@dataclass
class _Run:
    """One ``run`` call: minibatch boundaries on the clock and each minibatch's power level."""

    t0_s: float
    ends_s: np.ndarray  # end instant of each minibatch
    level_w: np.ndarray  # steady power of each minibatch in this mode
    idle_w: float  # idle power of the mode (ripple rides on level - idle)
    old_level_w: float | None  # steady load power of the previous mode (settling), if recent

    @property
    def t1_s(self) -> float:
        return float(self.ends_s[-1])


class _SimSensor(PowerSensor):
    def __init__(self, device: SimulatedJetson) -> None:
        self._device = device

    def read_w(self) -> float:
        return self._device.power_at(self._device.clock.now_s())


class _SimSampler(PowerSampler):
    """Produces, at ``stop()``, the samples a sensor polled every 1/rate_hz would have taken."""

    def __init__(self, device: SimulatedJetson, rate_hz: float) -> None:
        super().__init__(rate_hz)
        self._device = device
        self._t_start: float | None = None
        self._samples: list[PowerSample] = []  # produced so far: each instant's noise drawn once

    def start(self) -> None:
        self._t_start = self._device.clock.now_s()
        self._samples = []

    def poll(self) -> list[PowerSample]:
        if self._t_start is None:
            raise FailedPrecondition("power sampler: poll() before start()")
        t0, t1 = self._t_start, self._device.clock.now_s()
        n = int(math.floor((t1 - t0) * self.rate_hz + 1e-9)) + 1
        times = t0 + np.arange(len(self._samples), n) / self.rate_hz
        new = [PowerSample(float(t), self._device.power_at(float(t))) for t in times]
        self._samples.extend(new)
        return new

    def stop(self) -> list[PowerSample]:
        if self._t_start is None:
            raise FailedPrecondition("power sampler: stop() before start()")
        self.poll()
        self._t_start = None
        return self._samples


class SimulatedJetson(Device):
    """A Jetson simulated from its spec and the workload profiles (``backend = "sim"``)."""

    backend = "sim"

    def __init__(self, spec: DeviceSpec | str, seed: int = 0, noise: bool = True, settle_s: float = 2.5,
                 initial_mode: PowerMode | None = None, ambient_c: float = 25.0, trip_c: float = TRIP_C) -> None:
        self._spec = get_spec(spec) if isinstance(spec, str) else spec
        if settle_s < 0:
            raise InvalidArgument("settle_s", f"{settle_s} must not be negative", ">= 0")
        self._model = PhysicalModel(self._spec, hardware_for(self._spec))
        self._clock = VirtualClock()
        self._noise = noise
        self._tau_s = settle_s / 4.0  # within ~2 % of the new level after settle_s
        self._rng = np.random.default_rng(seed)
        self._sensor_rng = np.random.default_rng([seed, 1])
        self._mode = self._spec.validate(initial_mode) if initial_mode is not None else self._spec.maxn()
        self._initial_mode: PowerMode | None = None
        self._switches: list[_Switch] = []
        self._runs: list[_Run] = []
        self._switch_times: list[float] = []  # parallel to _switches / _runs, for bisect
        self._run_starts: list[float] = []
        self._lock = threading.RLock()
        self.ambient_c = float(ambient_c)
        self.trip_c = float(trip_c)
        self._c_per_w = THERMAL_RISE_AT_MAX_C / (self._spec.max_power_w or 60.0)
        self._heat: list[tuple[float, float, float]] = []  # (t_s, extra_c, tau_s)
        # Telemetry noise has its own generator: a monitor reading in the background must not
        # change the measurements a seed reproduces.
        self._telemetry_rng = np.random.default_rng([seed, 2])

    # -- Device interface --------------------------------------------------------------------
    @property
    def spec(self) -> DeviceSpec:
        return self._spec

    @property
    def clock(self) -> VirtualClock:
        return self._clock

    def current_mode(self) -> PowerMode:
        return self._mode

    def apply(self, mode: PowerMode) -> PowerMode:
        applied = self._spec.validate(mode)  # raises before anything changes
        with self._lock:
            if applied != self._mode:
                if self._initial_mode is None:
                    self._initial_mode = self._mode
                self._switches.append(_Switch(self._clock.now_s(), self._mode, applied))
                self._switch_times.append(self._clock.now_s())
                self._mode = applied
        return applied

    def run(self, workload: str, role: Role | str, batch_size: int, n_minibatches: int, *,
            warmup: bool = True) -> list[float]:
        """``warmup=False``: the run continues a training already under way (the online tuner's
        steps), so its first minibatch pays no autotuning / allocation time."""
        prof = self._profile(workload, role)
        validation.batch_size(batch_size)
        validation.count(n_minibatches, "n_minibatches")
        with self._lock:
            mode = self.effective_mode(self._clock.now_s())  # a hot board runs throttled
            br = self._model.evaluate(prof, [mode.as_tuple()], batch_size)
            mean_ms, level_w = float(br.time_ms[0]), float(br.power_w[0])
            times = np.full(n_minibatches, mean_ms)
            levels = np.full(n_minibatches, level_w)
            if self._noise:
                run_offset = self._rng.normal(0.0, prof.time_cv / 2)
                times *= np.exp(run_offset + self._rng.normal(0.0, prof.time_cv, n_minibatches))
                hiccups = self._rng.random(n_minibatches) < HICCUP_PROB
                times *= 1.0 + hiccups * self._rng.uniform(0.05, HICCUP_MAX_FRAC, n_minibatches)
                levels *= 1.0 + self._rng.normal(0.0, MINIBATCH_POWER_CV, n_minibatches)
            # Autotuning runs host code and trial kernels: slower on a slow CPU.
            cpu_stretch = REF_CPU_MHZ / (mode.cpu_mhz * self._model.hw.cpu_perf)
            if warmup:
                times[0] += prof.warmup_ms * math.sqrt(cpu_stretch)

            t0 = self._clock.now_s()
            ends = t0 + np.cumsum(times) / 1000.0
            old_level = None
            last = self._switches[-1] if self._switches else None
            if last is not None and t0 - last.t_s < 12 * self._tau_s:
                old_level = float(self._model.evaluate(prof, [last.old.as_tuple()], batch_size).power_w[0])
            idle_w = float(self._model.idle_power_w([mode.as_tuple()])[0])
            self._runs.append(_Run(t0, ends, levels, idle_w, old_level))
            self._run_starts.append(t0)
            self._clock.advance(float(ends[-1]) - t0)
            self._prune()
        return [float(t) for t in times]

    def power_sensor(self) -> PowerSensor:
        return _SimSensor(self)

    def sampler(self, rate_hz: float = 1.0) -> PowerSampler:
        return _SimSampler(self, rate_hz)

    def workloads(self) -> list[str]:
        return profile_names()

    # -- simulation extras -------------------------------------------------------------------
    def sleep(self, seconds: float) -> None:
        """Let virtual time pass with nothing running (the device draws its idle power)."""
        if seconds < 0:
            raise InvalidArgument("seconds", f"{seconds} must not be negative", ">= 0")
        self._clock.advance(seconds)

    def idle(self, seconds: float) -> None:
        """Alias of :meth:`sleep`: stay idle for ``seconds`` of virtual time."""
        self.sleep(seconds)

    def power_at(self, t_s: float, noisy: bool | None = None) -> float:
        """Sensor reading at virtual instant ``t_s`` (within the kept history)."""
        with self._lock:
            p = self._steady_with_settling(t_s)
            if self._noise if noisy is None else noisy:
                p += self._sensor_rng.normal(0.0, SENSOR_NOISE_REL * p + SENSOR_NOISE_ABS_W)
        return max(p, 0.0)

    def true_time_ms(self, mode, workload: str, role: Role | str, batch_size: int):
        """Noise-free minibatch time: a float for one mode, an array for an (n, 4) array."""
        return self._true(mode, workload, role, batch_size, "time_ms")

    def true_power_w(self, mode, workload: str, role: Role | str, batch_size: int):
        """Noise-free mean power while running: a float for one mode, an array for (n, 4)."""
        return self._true(mode, workload, role, batch_size, "power_w")

    def true_idle_power_w(self, mode=None):
        """Idle power of ``mode`` (default: the current one); array in, array out."""
        m = self._mode if mode is None else mode
        if isinstance(m, np.ndarray):
            return self._model.idle_power_w(m)
        return float(self._model.idle_power_w([self._mode_tuple(m)])[0])

    # -- heat and telemetry ------------------------------------------------------------------
    def heat(self, extra_c: float, tau_s: float = 60.0) -> None:
        """Make the board hot now: ``extra_c`` degrees on every zone, decaying with ``tau_s`` (virtual s)."""
        if not extra_c >= 0 or not tau_s > 0:
            raise InvalidArgument("extra_c", f"heat({extra_c}, {tau_s}): need extra_c >= 0 and tau_s > 0",
                                  "extra_c >= 0, tau_s > 0")
        with self._lock:
            self._heat.append((self._clock.now_s(), float(extra_c), float(tau_s)))

    def temperatures_c(self, t_s: float | None = None) -> dict[str, float]:
        """Zone temperatures at ``t_s`` (default now): ambient + R * power + added heat."""
        t = self._clock.now_s() if t_s is None else t_s
        with self._lock:
            base = self.ambient_c + self._c_per_w * self._steady_with_settling(t)
            base += sum(c * math.exp(-(t - t0) / tau) for t0, c, tau in self._heat if t >= t0)
        return {"cpu-thermal": base, "gpu-thermal": base + 1.0, "tj-thermal": base + 1.0}

    def throttled_at(self, t_s: float) -> bool:
        return self.temperatures_c(t_s)["tj-thermal"] >= self.trip_c

    def effective_mode(self, t_s: float) -> PowerMode:
        """The mode the clocks really run at ``t_s``: the applied one, or its throttled version."""
        mode = self._mode_at(t_s)[0] if t_s < self._clock.now_s() else self._mode
        if not self.throttled_at(t_s):
            return mode
        sp = self._spec
        return PowerMode(mode.cores, sp.floor("cpu_mhz", mode.cpu_mhz * THROTTLE_FRAC),
                         sp.floor("gpu_mhz", mode.gpu_mhz * THROTTLE_FRAC), mode.emc_mhz)

    def telemetry(self) -> TelemetrySample:
        with self._lock:
            t = self._clock.now_s()
            p = self._steady_with_settling(t)
            if self._noise:
                p += self._telemetry_rng.normal(0.0, SENSOR_NOISE_REL * p + SENSOR_NOISE_ABS_W)
            p = max(p, 0.0)
            temps = self.temperatures_c(t)
            eff, applied = self.effective_mode(t), self._mode
        zones = tuple(ZoneReading(name, round(c, 3), self.trip_c) for name, c in temps.items())
        return TelemetrySample(
            t_s=t, power_w=p, rails_w={SIM_RAIL: p}, zones=zones,
            clocks=Clocks(eff.cores, eff.cpu_mhz, eff.gpu_mhz, eff.emc_mhz),
            pinned=Clocks(None, applied.cpu_mhz, applied.gpu_mhz, applied.emc_mhz), backend=self.backend)

    # -- internals ---------------------------------------------------------------------------
    def _profile(self, workload: str, role: Role | str) -> RoleProfile:
        if not isinstance(workload, str):
            raise InvalidArgument("workload", f"unknown workload {workload!r}", ", ".join(profile_names()))
        return get_profile(workload).role(role)

    def _mode_tuple(self, mode) -> tuple:
        if isinstance(mode, PowerMode):
            return self._spec.validate(mode).as_tuple()
        return tuple(float(x) for x in mode)

    def _true(self, mode, workload, role, batch_size, what):
        prof = self._profile(workload, role)
        validation.batch_size(batch_size)
        if isinstance(mode, np.ndarray) and mode.ndim == 2:
            return getattr(self._model.evaluate(prof, as_mode_array(mode), batch_size), what)
        return float(getattr(self._model.evaluate(prof, [self._mode_tuple(mode)], batch_size), what)[0])

    def _mode_at(self, t_s: float) -> tuple[PowerMode, _Switch | None]:
        """The mode in force at ``t_s`` and the last switch at or before it."""
        idx = bisect_right(self._switch_times, t_s) - 1
        if idx < 0:
            first = self._switches[0].old if self._switches else self._mode
            return first, None
        sw = self._switches[idx]
        return sw.new, sw

    def _steady_with_settling(self, t_s: float) -> float:
        mode, sw = self._mode_at(t_s)
        run = self._run_at(t_s)
        if run is not None:
            i = min(int(np.searchsorted(run.ends_s, t_s, side="right")), len(run.ends_s) - 1)
            start = run.t0_s if i == 0 else float(run.ends_s[i - 1])
            level = float(run.level_w[i])
            if self._noise:  # forward / backward / data phases within the minibatch
                phase = (t_s - start) / max(float(run.ends_s[i]) - start, 1e-9)
                level += RIPPLE_FRAC * (level - run.idle_w) * math.sin(2 * math.pi * phase)
            old = run.old_level_w
        else:
            level = float(self._model.idle_power_w([mode.as_tuple()])[0])
            old = float(self._model.idle_power_w([sw.old.as_tuple()])[0]) if sw is not None else None
        if sw is not None and old is not None and self._tau_s > 0:
            level += (old - level) * math.exp(-(t_s - sw.t_s) / self._tau_s)
        return level

    def _run_at(self, t_s: float) -> _Run | None:
        idx = bisect_right(self._run_starts, t_s) - 1
        if idx >= 0 and t_s < self._runs[idx].t1_s:
            return self._runs[idx]
        return None

    def _prune(self) -> None:
        horizon = self._clock.now_s() - HISTORY_S
        if self._runs and self._runs[0].t1_s < horizon:
            self._runs = [r for r in self._runs if r.t1_s >= horizon]
            self._run_starts = [r.t0_s for r in self._runs]
        # keep the last switch before the horizon: it defines the mode at the horizon
        if len(self._switches) > 1 and self._switches[1].t_s < horizon:
            keep = max(i for i, sw in enumerate(self._switches) if sw.t_s < horizon)
            self._switches = self._switches[keep:]
            self._switch_times = self._switch_times[keep:]


