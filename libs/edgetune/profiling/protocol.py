"""The measurement protocol: one (mode, workload, role, batch size) point → one Measurement.

Per point (PowerTrain's protocol, with Ahmed et al.'s peak power and NeuralPower's trapezoid rule):

1. validate the mode against the device's tables and apply it;
2. wait for power to settle (sliding-window detection, :mod:`.settling`), giving up after
   a timeout and flagging it; the last settled window is the mode's idle power, or
   ``idle_s`` seconds are sampled explicitly when asked;
3. run and drop the warm-up minibatch(es) (the first is slow: kernel selection, caches);
4. optionally repeat very short minibatches (NeuralPower's n̂) so the sampler sees enough samples;
5. run the clean minibatches with the device's power sampler running;
6. report time mean / std, power mean / std / peak, energy (trapezoid over the run window),
   energy per minibatch, idle power and energy above idle, samples, settling;
7. throttling: the device's telemetry is read before the run (thermal zones) and right after
   it (zones and clocks); a point measured
   while throttled (a clock below the applied mode's, a thermal zone past its trip point) is
   flagged ``throttled`` and, by default, measured again after a cool-down (idle until the
   board no longer throttles, at most ``cooldown_timeout_s``), up to ``max_remeasures`` times.
   A point still throttled after that keeps the flag, so no predictor trains on it silently.

A measured power above ``hard_limit_w`` restores the mode the device was in and raises
:class:`PowerLimitExceeded`. :meth:`Profiler.profile` runs many points and always puts the
device back in its original mode (try/finally), reporting progress to a callback.

The protocol only uses the :class:`~edgetune.devices.base.Device` interface, so it runs the
same against a real Jetson (real clock, threaded sampler) and the simulator (virtual clock).
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from edgetune import validation
from edgetune.base.mode import PowerMode
from edgetune.base.roles import Role
from edgetune.devices.base import Device
from edgetune.devices.sampling import PowerSample
from edgetune.errors import FailedPrecondition, InvalidArgument
from edgetune.profiling.settling import SettleResult, wait_for_settle, window_size
from edgetune.profiling.stats import mean_std, power_stats, repetitions
from edgetune.telemetry.sample import Clocks, throttle_reasons

log = logging.getLogger(__name__)


class PowerLimitExceeded(FailedPrecondition):
    """Measured power went above the hard limit; the device was put back in its previous mode."""

    def __init__(self, mode: PowerMode, power_w: float, limit_w: float, phase: str) -> None:
        self.mode = mode
        self.power_w = power_w
        self.limit_w = limit_w
        self.phase = phase
        super().__init__(
            f"hard_limit_w: measured {power_w:.2f} W > {limit_w:.2f} W in mode {mode.label()} "
            f"while {phase}; profiling aborted and the previous mode restored")


@dataclass(frozen=True)
class ProfileConfig:
    """Knobs of the protocol. Defaults follow PowerTrain (see the module docstring)."""

    #: Clean minibatches per point (PowerTrain: ~40).
    n_minibatches: int = 40
    #: Minibatches run and dropped first (PowerTrain drops the first: kernel autotuning).
    warmup_minibatches: int = 1
    #: Power sampler rate during the clean run (jtop / Ahmed et al. / PowerTrain: 1 Hz).
    sample_rate_hz: float = 1.0
    #: Sliding window for settling; 1 s windows confirm a 2–3 s transient within ~2–4 s.
    settle_window_s: float = 1.0
    #: Sensor polls per second while settling (INA3221 on sysfs can be read much faster than 1 Hz).
    settle_poll_hz: float = 4.0
    #: Consecutive windows agree when their means differ by ≤ max(tolerance·mean, tolerance_w).
    settle_tolerance: float = 0.02
    settle_tolerance_w: float = 0.1
    #: Give up waiting after this long and flag the point as not settled.
    settle_timeout_s: float = 10.0
    #: 0: idle power is the last settled window (free); > 0: sample this long with the sampler.
    idle_s: float = 0.0
    #: Abort (after restoring the previous mode) when measured power exceeds this (None: no limit).
    hard_limit_w: float | None = None
    #: Seed 001: when a run would be shorter than ``min_run_samples`` sampler periods, repeat
    #: the minibatch n̂ = repetitions(count) times, the count timed on ``pilot_minibatches``.
    repeat_short: bool = False
    min_run_samples: int = 5
    pilot_minibatches: int = 3
    #: Re-measure a point taken while throttled, after idling until the board cools down.
    remeasure_throttled: bool = True
    max_remeasures: int = 1
    cooldown_timeout_s: float = 120.0
    cooldown_poll_s: float = 2.0
    #: Node id and run key go into the measurement id (re-running a key overwrites, not duplicates).
    node: str = ""
    run_key: str = ""
    #: The workload name the ids are keyed by when it is not the one measured: a user workload's
    #: MODULE:FUNCTION as requested, while rows record its id (a coordinator, which never imports
    #: user code, computes the ids of the points it queued from the name it asked for).
    id_workload: str = ""

    def validate(self) -> ProfileConfig:
        validation.count(self.n_minibatches, "n_minibatches")
        validation.count(self.warmup_minibatches, "warmup_minibatches", minimum=0)
        validation.sample_rate_hz(self.sample_rate_hz)
        window_size(self.settle_window_s, self.settle_poll_hz)
        if self.settle_tolerance < 0 or self.settle_tolerance_w < 0:
            raise InvalidArgument("settle_tolerance", "tolerances must be >= 0", ">= 0")
        if self.settle_timeout_s < 0:
            raise InvalidArgument("settle_timeout_s", f"{self.settle_timeout_s} must be >= 0", ">= 0")
        if self.idle_s < 0:
            raise InvalidArgument("idle_s", f"{self.idle_s} must be >= 0", ">= 0")
        if self.hard_limit_w is not None and self.hard_limit_w <= 0:
            raise InvalidArgument("hard_limit_w", f"{self.hard_limit_w} must be positive", "> 0")
        if int(self.max_remeasures) != self.max_remeasures or self.max_remeasures < 0:
            raise InvalidArgument("max_remeasures", f"{self.max_remeasures} must be an integer >= 0", ">= 0")
        if not self.cooldown_timeout_s >= 0 or not self.cooldown_poll_s > 0:
            raise InvalidArgument("cooldown_timeout_s", "cooldown_timeout_s must be >= 0 and cooldown_poll_s > 0",
                                  "cooldown_timeout_s >= 0, cooldown_poll_s > 0")
        if self.min_run_samples < 1 or self.pilot_minibatches < 1:
            raise InvalidArgument("min_run_samples", "min_run_samples and pilot_minibatches must be >= 1", ">= 1")
        return self


#: Profile-table columns a Measurement writes, in order (docs/contract.md first, then extras).
ROW_COLUMNS: tuple[str, ...] = (
    "cores", "cpu_mhz", "gpu_mhz", "emc_mhz", "batch_size", "time_ms", "power_w",
    "device", "workload", "role", "peak_power_w", "energy_j", "time_std_ms", "power_std_w", "samples",
    "idle_power_w", "energy_per_minibatch_j", "energy_above_idle_j", "n_minibatches", "duration_s",
    "settled", "settle_s", "throttled", "remeasured", "node", "id",
)


def measurement_id(device: str, node: str, workload: str, role: str, mode: PowerMode, batch_size: int,
                   run_key: str = "") -> str:
    """Stable id of a point: the same inputs always give the same id (idempotent writes)."""
    key = json.dumps([device, node, workload, role, [f"{v:g}" for v in mode.as_tuple()], int(batch_size), run_key])
    return hashlib.sha256(key.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Measurement:
    id: str
    device: str
    node: str
    workload: str
    role: str
    mode: PowerMode
    batch_size: int
    time_ms: float  # mean over the clean minibatches
    time_std_ms: float
    power_w: float  # time-weighted mean over the run window (energy_j / duration_s)
    power_std_w: float
    peak_power_w: float
    energy_j: float  # ∫P dt over the run window, trapezoid rule
    energy_per_minibatch_j: float
    idle_power_w: float
    energy_above_idle_j: float  # energy_j − idle_power_w · duration_s (THOR's dynamic energy)
    samples: int
    n_minibatches: int
    duration_s: float
    settled: bool
    settle_s: float
    warmup_times_ms: tuple[float, ...] = ()
    minibatch_times_ms: tuple[float, ...] = ()
    power_samples: tuple[PowerSample, ...] = field(default=(), repr=False)
    run_start_s: float = 0.0
    run_end_s: float = 0.0
    #: Measured while the board throttled (see the module docs), and why.
    throttled: bool = False
    throttle_reasons: tuple[str, ...] = ()
    #: How many times the point was measured again after a throttled attempt.
    remeasured: int = 0

    def to_row(self) -> dict[str, Any]:
        """One profile-table row (docs/contract.md columns first; see :data:`ROW_COLUMNS`)."""
        return {
            **self.mode.as_dict(),
            "batch_size": self.batch_size,
            "time_ms": self.time_ms,
            "power_w": self.power_w,
            "device": self.device,
            "workload": self.workload,
            "role": self.role,
            "peak_power_w": self.peak_power_w,
            "energy_j": self.energy_j,
            "time_std_ms": self.time_std_ms,
            "power_std_w": self.power_std_w,
            "samples": self.samples,
            "idle_power_w": self.idle_power_w,
            "energy_per_minibatch_j": self.energy_per_minibatch_j,
            "energy_above_idle_j": self.energy_above_idle_j,
            "n_minibatches": self.n_minibatches,
            "duration_s": self.duration_s,
            "settled": "true" if self.settled else "false",
            "settle_s": self.settle_s,
            "throttled": "true" if self.throttled else "false",
            "remeasured": self.remeasured,
            "node": self.node,
            "id": self.id,
        }


@dataclass(frozen=True)
class ProgressEvent:
    """Progress of :meth:`Profiler.profile`: ``phase`` is ``"start"`` before a point and
    ``"done"`` after it (with its measurement); ``done`` counts finished points."""

    done: int
    total: int
    mode: PowerMode
    batch_size: int
    phase: str
    measurement: Measurement | None = None


ProgressCallback = Callable[[ProgressEvent], None]


def _nearest_before(samples: Sequence[PowerSample], t_s: float) -> list[PowerSample]:
    """The last reading before ``t_s``, moved to ``t_s``: for a clean run so short that no
    sample fell inside it, the load power seen during the warm-up stands in (samples = 1)."""
    before = [s for s in samples if s.t_s < t_s]
    if not before:
        return []
    last = max(before, key=lambda s: s.t_s)
    return [PowerSample(t_s, last.power_w, last.rails_w)]


def _check_batch_size(batch_size: Any) -> int:
    return validation.batch_size(batch_size)


class Profiler:
    """Runs the measurement protocol on one device."""

    def __init__(self, device: Device, config: ProfileConfig | None = None) -> None:
        self.device = device
        self.config = (config or ProfileConfig()).validate()
        # One measurement at a time per profiler: two interleaved runs would corrupt both.
        self._busy = threading.RLock()

    def _claim(self) -> None:
        if not self._busy.acquire(blocking=False):
            raise FailedPrecondition(f"{self.device.spec.name} is busy profiling; try again when it is done")

    # -- one point -----------------------------------------------------------------------
    def measure(self, mode: PowerMode, workload: str, role: Role | str, batch_size: int) -> Measurement:
        """Measure one point. On any error the device goes back to the mode it was in."""
        role = Role.parse(role)
        batch_size = _check_batch_size(batch_size)
        mode = self.device.spec.validate(mode)  # refuse before touching the device
        self._claim()
        try:
            before = self.device.current_mode()
            try:
                m = self._measure(mode, workload, role, batch_size)
                attempts = 0
                while m.throttled and self.config.remeasure_throttled and attempts < self.config.max_remeasures:
                    log.warning("point measured while throttled; cooling down and measuring again",
                                extra={"mode": m.mode.label(), "reasons": list(m.throttle_reasons)})
                    self._cool_down()
                    attempts += 1
                    m = self._measure(mode, workload, role, batch_size)
                if m.throttled:
                    log.warning("point still throttled: kept with throttled=true",
                                extra={"mode": m.mode.label(), "reasons": list(m.throttle_reasons)})
                return replace(m, remeasured=attempts) if attempts else m
            except BaseException:
                self._restore(before)
                raise
        finally:
            self._busy.release()

    def _measure(self, mode: PowerMode, workload: str, role: Role, batch_size: int) -> Measurement:
        cfg, dev, clock = self.config, self.device, self.device.clock
        applied = dev.apply(mode)

        def check_limit(sample: PowerSample, phase: str = "settling") -> None:
            if cfg.hard_limit_w is not None and sample.power_w > cfg.hard_limit_w:
                raise PowerLimitExceeded(applied, sample.power_w, cfg.hard_limit_w, phase)

        settle = wait_for_settle(
            dev.power_sensor(), clock, window_s=cfg.settle_window_s, poll_hz=cfg.settle_poll_hz,
            tolerance=cfg.settle_tolerance, tolerance_w=cfg.settle_tolerance_w,
            timeout_s=cfg.settle_timeout_s, on_reading=check_limit)
        if not settle.settled:
            log.warning("power did not settle within %.1f s in mode %s", cfg.settle_timeout_s, applied)
        idle_power_w = self._idle_power_w(settle, check_limit)

        w, n = cfg.warmup_minibatches, cfg.n_minibatches
        if cfg.repeat_short:
            n = self._repeat_count(workload, role, batch_size, n)

        # Warm-up and clean minibatches run in one call, as in training: a backend may
        # count every call as a cold start (model build, autotuning), so a separate
        # warm-up call would leave the clean run's first minibatch slow.
        sampler = dev.sampler(cfg.sample_rate_hz)
        heat_before = dev.telemetry()
        t_start = clock.now_s()
        sampler.start()
        try:
            all_ms = dev.run(workload, role, batch_size, w + n)
        finally:
            samples = sampler.stop()
            t_end = clock.now_s()
        heat_after = dev.telemetry()
        # Before the run only the zones count: an idle GPU may be rail-gated or clocked down by
        # its governor whatever the pin says; right after the run the clocks count too.
        before = throttle_reasons(Clocks(), Clocks(), heat_before.zones)
        reasons = tuple(dict.fromkeys(before + heat_after.throttle_reasons))
        if len(all_ms) != w + n:
            raise FailedPrecondition(f"device ran {len(all_ms)} minibatches, {w + n} were asked")
        for s in samples:
            check_limit(s, "running")
        warmup_ms, times_ms = tuple(all_ms[:w]), list(all_ms[w:])
        # Power and energy cover the clean minibatches only.
        t_clean = min(t_start + sum(warmup_ms) / 1000.0, t_end)
        samples = [s for s in samples if s.t_s >= t_clean - 1e-9] or _nearest_before(samples, t_clean)

        stats = power_stats(samples, t_clean, t_end)
        time_ms, time_std_ms = mean_std(times_ms)
        name = dev.spec.name
        return Measurement(
            id=measurement_id(name, cfg.node, cfg.id_workload or workload, role.value, applied, batch_size,
                              cfg.run_key),
            device=name, node=cfg.node, workload=workload, role=role.value, mode=applied,
            batch_size=batch_size, time_ms=time_ms, time_std_ms=time_std_ms,
            power_w=stats.power_w, power_std_w=stats.power_std_w, peak_power_w=stats.peak_power_w,
            energy_j=stats.energy_j, energy_per_minibatch_j=stats.energy_j / n,
            idle_power_w=idle_power_w,
            energy_above_idle_j=stats.energy_j - idle_power_w * stats.duration_s,
            samples=stats.samples, n_minibatches=n, duration_s=stats.duration_s,
            settled=settle.settled, settle_s=settle.settle_s,
            warmup_times_ms=warmup_ms, minibatch_times_ms=tuple(times_ms),
            power_samples=tuple(samples), run_start_s=t_clean, run_end_s=t_end,
            throttled=bool(reasons), throttle_reasons=reasons,
        )

    def _cool_down(self) -> bool:
        """Idle (in the applied mode) until no thermal zone is past its trip point; False on timeout.

        Zones only: an idle board's clocks say nothing about heat (the GPU may be gated)."""
        cfg, clock = self.config, self.device.clock
        deadline = clock.now_s() + cfg.cooldown_timeout_s
        while any(z.past_trip for z in self.device.telemetry().zones):
            if clock.now_s() >= deadline:
                return False
            clock.sleep(cfg.cooldown_poll_s)
        return True

    def _idle_power_w(self, settle: SettleResult, check_limit: Callable[[PowerSample], None]) -> float:
        if self.config.idle_s <= 0:
            return settle.power_w
        sampler = self.device.sampler(self.config.sample_rate_hz)
        t0 = self.device.clock.now_s()
        sampler.start()
        try:
            self.device.clock.sleep(self.config.idle_s)
        finally:
            samples = sampler.stop()
        for s in samples:
            check_limit(s)
        return power_stats(samples, t0, self.device.clock.now_s()).power_w

    def _repeat_count(self, workload: str, role: Role, batch_size: int, n: int) -> int:
        """Seed 001: stretch a run shorter than ``min_run_samples`` sampler periods.

        The minibatch time is taken on an unsampled pilot (its warm-up dropped), then the
        count that fits in the window is rounded up with :func:`repetitions`.
        """
        cfg = self.config
        w = cfg.warmup_minibatches
        pilot_ms = self.device.run(workload, role, batch_size, w + cfg.pilot_minibatches)[w:]
        mean_ms = max(sum(pilot_ms) / len(pilot_ms), 1e-6)
        window_s = cfg.min_run_samples / cfg.sample_rate_hz
        if n * mean_ms / 1000.0 >= window_s:
            return n
        return max(n, repetitions(int(window_s * 1000.0 / mean_ms)))

    def _restore(self, mode: PowerMode) -> None:
        try:
            if self.device.current_mode() != mode:
                self.device.apply(mode)
        except Exception:  # never mask the error that brought us here
            log.exception("could not restore mode %s", mode)

    # -- many points ---------------------------------------------------------------------
    def profile(self, modes: Sequence[PowerMode], workload: str, role: Role | str,
                batch_sizes: Sequence[int] = (16,), progress: ProgressCallback | None = None) -> list[Measurement]:
        """Every mode × batch size (batch sizes inner, so each mode is applied once)."""
        if not batch_sizes:
            raise InvalidArgument("batch_sizes", "no batch sizes given", "positive integers")
        sizes = [_check_batch_size(b) for b in batch_sizes]
        return self.profile_points([(m, b) for m in modes for b in sizes], workload, role, progress)

    def profile_points(self, points: Iterable[tuple[PowerMode, int]], workload: str, role: Role | str,
                       progress: ProgressCallback | None = None) -> list[Measurement]:
        """Measure ``points`` in order; the device ends in the mode it started in, whatever happens."""
        role = Role.parse(role)
        # Everything is validated before the first apply: a bad row must not leave a half-run.
        checked = [(self.device.spec.validate(m), _check_batch_size(b)) for m, b in points]
        if not checked:
            raise InvalidArgument("modes", "no points to profile")
        known = self.device.workloads()
        if known and workload not in known:
            raise InvalidArgument("workload", f"{self.device.backend or 'device'} cannot run {workload!r}",
                                  ", ".join(known))
        self._claim()
        original = self.device.current_mode()
        results: list[Measurement] = []
        try:
            for mode, b in checked:
                if progress:
                    progress(ProgressEvent(len(results), len(checked), mode, b, "start"))
                m = self.measure(mode, workload, role, b)
                results.append(m)
                if progress:
                    progress(ProgressEvent(len(results), len(checked), mode, b, "done", m))
        finally:
            try:
                self._restore(original)
            finally:
                self._busy.release()
        return results

    def peak_power_w(self, workload: str, role: Role | str) -> Callable[[int, PowerMode], float]:
        """A ``(batch_size, mode) -> peak_power_w`` probe for :func:`~.order.run_cap_search`."""
        def probe(batch_size: int, mode: PowerMode) -> float:
            return self.measure(mode, workload, role, batch_size).peak_power_w
        return probe
