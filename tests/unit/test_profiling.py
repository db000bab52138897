"""The measurement protocol (edgetune.profiling): settling, warm-up, energy, limits, orders.

Pure parts (repetitions, integration, settling rule, orders) run on hand-made data; the
protocol runs against the simulated Jetson (virtual clock), plus a tiny scripted device
where a test needs exact control (a device that fails mid-way).
"""

from __future__ import annotations

import math
from itertools import pairwise

import pytest

from edgetune.base.clocks import VirtualClock
from edgetune.base.mode import PowerMode
from edgetune.base.roles import Role
from edgetune.devices.base import Device
from edgetune.devices.sampling import PowerSample, PowerSampler, PowerSensor
from edgetune.errors import FailedPrecondition, InvalidArgument
from edgetune.powermodes.specs import NANO, ORIN_AGX
from edgetune.profiling import (
    CapSearch,
    Measurement,
    PowerLimitExceeded,
    ProfileConfig,
    Profiler,
    descending_order,
    integrate_energy_j,
    measurement_id,
    repetitions,
    run_cap_search,
)
from edgetune.profiling.order import descending_chains, upward_steps
from edgetune.profiling.protocol import ROW_COLUMNS
from edgetune.profiling.settling import detect_settle
from edgetune.profiling.stats import trapezoid_j, window_points
from edgetune.tables import PROFILE_COLUMNS

ORIN_LOW = PowerMode(4, 422.4, 114.75, 665.6)
ORIN_MID = PowerMode(8, 1344.0, 726.75, 2133.0)
ORIN_MAXN = ORIN_AGX.maxn()


def sim(seed: int = 0) -> Device:
    simulated = pytest.importorskip("edgetune.devices.simulated.device")
    return simulated.SimulatedJetson("orin-agx", seed=seed)


# --- NeuralPower: repetitions ------------------------------------------------------------------
@pytest.mark.parametrize("n, expected", [(37, 40), (99, 100), (120, 200), (5, 6), (9, 10), (1, 2),
                                          (40, 50), (1000, 2000), (0, 1)])
def test_repetitions_round_up_at_the_leading_digit(n, expected):
    # NeuralPower §4.3.2: n̂ = (first digit of n + 1) · 10^(digits − 1), always ≥ n.
    assert repetitions(n) == expected
    assert repetitions(n) > n


def test_repetitions_refuses_negative_counts():
    with pytest.raises(InvalidArgument, match="count_in_window"):
        repetitions(-1)


# --- integration ----------------------------------------------------------------------------
def test_trapezoid_over_window_holds_edge_samples_flat():
    samples = [PowerSample(10.0, 20.0), PowerSample(11.0, 30.0), PowerSample(12.0, 10.0)]
    # 10→11: 25 J, 11→12: 20 J, 12→12.5 held at 10 W: 5 J.
    assert integrate_energy_j(samples, 10.0, 12.5) == pytest.approx(50.0)
    assert window_points(samples, 10.0, 12.5)[-1] == (12.5, 10.0)


def test_no_samples_in_window_is_an_error():
    with pytest.raises(FailedPrecondition):
        integrate_energy_j([PowerSample(0.0, 5.0)], 1.0, 2.0)


# --- settling rule --------------------------------------------------------------------------
def test_detect_settle_waits_for_two_agreeing_windows():
    ramp = [20.0, 16.0, 13.0, 11.5, 10.6, 10.2, 10.05, 10.0, 10.0, 10.0, 10.0, 10.0, 10.0, 10.0]
    i = detect_settle(ramp, per_window=3, tolerance=0.02)
    assert i is not None and ramp[i - 5] < 12.0  # both windows are past the fast part of the ramp
    assert detect_settle([10.0] * 6, per_window=3, tolerance=0.0) == 5
    assert detect_settle([10.0, 20.0] * 10, per_window=1, tolerance=0.02) is None


# --- orders ---------------------------------------------------------------------------------
def _grid(cores=(4, 8), cpu=(422.4, 1344.0, 2201.6), gpu=(114.75, 726.75, 1300.5), emc=(665.6, 3199.0)):
    return [PowerMode(c, f, g, e) for c in cores for f in cpu for g in gpu for e in emc]


def test_descending_order_is_monotone_within_chains_and_keeps_every_mode():
    modes = _grid()
    order = descending_order(modes)
    assert sorted(order) == sorted(modes)
    chains = descending_chains(modes)
    for chain in chains:
        for a, b in pairwise(chain):
            assert a.cpu_mhz >= b.cpu_mhz and a.gpu_mhz >= b.gpu_mhz
    # upward steps only between chains; 3 CPU x 3 GPU levels need 3 chains (Dilworth).
    assert len(chains) == 3
    assert upward_steps(order) == len(chains) - 1
    assert upward_steps(order) < upward_steps(sorted(modes))


def test_descending_order_of_a_total_order_is_strictly_downward():
    modes = [PowerMode(8, 1344.0, g, 3199.0) for g in ORIN_AGX.gpu_mhz]
    order = descending_order(list(reversed(modes[::2])) + modes[1::2])
    assert [m.gpu_mhz for m in order] == sorted(ORIN_AGX.gpu_mhz, reverse=True)
    assert upward_steps(order) == 0


def _nano_power(batch_size: int, gpu_mhz: float) -> float:
    # Peak power rising with frequency and batch size (Ahmed et al.'s premise).
    return 1.5 + 6.0 * (gpu_mhz / 921.6) ** 2 * (0.5 + 0.5 * math.log2(batch_size) / 7)


@pytest.mark.parametrize("cap_w", [3.0, 4.5, 5.0, 7.0, 100.0, 1.0])
def test_cap_search_matches_exhaustive_with_fewer_points(cap_w):
    levels = [PowerMode(4, 1479.0, g, 1600.0) for g in NANO.gpu_mhz]
    batch_sizes = [4, 8, 16, 32, 64, 128]
    exhaustive = {}
    for b in batch_sizes:
        feasible = [i for i, m in enumerate(levels) if _nano_power(b, m.gpu_mhz) < cap_w]  # strictly under
        exhaustive[b] = max(feasible) if feasible else None
    result = run_cap_search(CapSearch(levels, batch_sizes, cap_w), lambda b, m: _nano_power(b, m.gpu_mhz))
    assert result.best_level == exhaustive
    assert result.profiled < len(levels) * len(batch_sizes)
    assert [p[0] for p in result.profiled_points] == sorted(
        [p[0] for p in result.profiled_points], reverse=True)  # largest batch first


def test_cap_search_walks_down_when_power_is_not_monotone_in_batch():
    levels = [PowerMode(4, 1479.0, g, 1600.0) for g in NANO.gpu_mhz[:4]]
    power = {128: [1, 2, 3, 9], 64: [1, 2, 9, 9]}  # b=64 is *hungrier* at level 2
    result = run_cap_search(CapSearch(levels, [64, 128], 5.0), lambda b, m: power[b][levels.index(m)])
    assert result.best_level == {128: 2, 64: 1}


# --- the protocol on the simulator ----------------------------------------------------------
def test_measurement_fields_are_consistent():
    dev = sim()
    m = Profiler(dev, ProfileConfig(sample_rate_hz=2.0)).measure(ORIN_MID, "resnet18", "train", 16)
    assert m.n_minibatches == 40 and len(m.minibatch_times_ms) == 40
    assert m.peak_power_w >= m.power_w > 0
    assert m.time_ms > 0 and m.time_std_ms >= 0
    assert m.samples == len(m.power_samples) >= 2
    # energy = ∫P dt of the returned samples over the run window, integrated by hand
    pts = sorted((s.t_s, s.power_w) for s in m.power_samples)
    pts = [(m.run_start_s, pts[0][1])] * (pts[0][0] > m.run_start_s) + pts + [(m.run_end_s, pts[-1][1])]
    assert m.energy_j == pytest.approx(trapezoid_j(pts), rel=1e-9)
    assert m.energy_j == pytest.approx(m.power_w * m.duration_s, rel=1e-9)
    assert m.energy_per_minibatch_j == pytest.approx(m.energy_j / 40)
    assert m.duration_s == pytest.approx(sum(m.minibatch_times_ms) / 1000.0, rel=0.05)


def test_first_minibatch_is_dropped():
    m = Profiler(sim(), ProfileConfig()).measure(ORIN_MID, "resnet18", "train", 16)
    assert len(m.warmup_times_ms) == 1
    assert m.warmup_times_ms[0] > 1.5 * m.time_ms  # the simulated first minibatch is slow
    assert m.time_ms == pytest.approx(sum(m.minibatch_times_ms) / 40)
    assert max(m.minibatch_times_ms) < m.warmup_times_ms[0]
    # with no warm-up the slow minibatch lands in the mean and inflates it
    raw = Profiler(sim(), ProfileConfig(warmup_minibatches=0)).measure(ORIN_MID, "resnet18", "train", 16)
    assert raw.time_ms > m.time_ms


def test_settling_is_detected_after_a_mode_change():
    dev = sim()
    prof = Profiler(dev, ProfileConfig())
    prof.measure(ORIN_MAXN, "resnet18", "train", 16)
    m = prof.measure(ORIN_LOW, "resnet18", "train", 16)
    assert m.settled
    assert 1.0 <= m.settle_s <= 4.0  # virtual seconds; PowerTrain saw 2–3 s on the device


def test_settling_timeout_is_flagged_not_fatal():
    cfg = ProfileConfig(settle_tolerance=0.0, settle_tolerance_w=0.0, settle_timeout_s=1.0)
    m = Profiler(sim(), cfg).measure(ORIN_MID, "resnet18", "train", 16)
    assert not m.settled and m.settle_s >= 1.0
    assert m.to_row()["settled"] == "false"


def test_idle_power_is_below_load_power():
    for idle_s in (0.0, 3.0):
        m = Profiler(sim(), ProfileConfig(idle_s=idle_s)).measure(ORIN_MAXN, "resnet18", "train", 16)
        assert 0 < m.idle_power_w < m.power_w
        assert m.energy_above_idle_j == pytest.approx(m.energy_j - m.idle_power_w * m.duration_s)
        assert m.energy_above_idle_j > 0


def test_to_row_has_contract_columns_and_stable_id():
    m = Profiler(sim(), ProfileConfig(n_minibatches=5)).measure(ORIN_MID, "resnet18", "infer", 32)
    row = m.to_row()
    assert list(row)[:len(PROFILE_COLUMNS)] == list(PROFILE_COLUMNS)
    assert list(row) == list(ROW_COLUMNS)
    assert row["role"] == "infer" and row["batch_size"] == 32 and row["device"] == "orin-agx"
    again = Profiler(sim(seed=1), ProfileConfig(n_minibatches=5)).measure(ORIN_MID, "resnet18", "infer", 32)
    assert again.id == m.id  # same point, same id: writes are idempotent
    assert m.id != measurement_id("orin-agx", "", "resnet18", "infer", ORIN_MID, 32, run_key="other")
    assert m.id != measurement_id("orin-agx", "", "resnet18", "train", ORIN_MID, 32)


def test_hard_limit_aborts_and_restores_the_original_mode():
    dev = sim()
    start = dev.current_mode()
    prof = Profiler(dev, ProfileConfig(hard_limit_w=20.0))
    with pytest.raises(PowerLimitExceeded) as info:
        prof.profile([ORIN_LOW, ORIN_MAXN], "resnet18", "train", [16])
    assert info.value.power_w > 20.0 and info.value.mode == ORIN_MAXN
    assert dev.current_mode() == start
    # measure() alone goes back to the mode before the point
    dev.apply(ORIN_LOW)
    with pytest.raises(PowerLimitExceeded):
        prof.measure(ORIN_MAXN, "resnet18", "train", 16)
    assert dev.current_mode() == ORIN_LOW


def test_profile_restores_the_original_mode_and_reports_progress():
    dev = sim()
    start = dev.current_mode()
    events = []
    modes = [ORIN_MAXN, ORIN_MID, ORIN_LOW]
    out = Profiler(dev, ProfileConfig(n_minibatches=5)).profile(modes, "resnet18", "train", [8, 16],
                                                                progress=events.append)
    assert len(out) == 6 and [(m.mode, m.batch_size) for m in out] == [(m, b) for m in modes for b in (8, 16)]
    assert dev.current_mode() == start
    done = [e for e in events if e.phase == "done"]
    assert [e.done for e in done] == [1, 2, 3, 4, 5, 6] and all(e.total == 6 for e in events)
    assert done[-1].measurement is out[-1]


def test_unknown_modes_are_refused_before_anything_is_applied():
    dev = sim()
    applied = []
    real_apply = dev.apply
    dev.apply = lambda mode: applied.append(mode) or real_apply(mode)  # type: ignore[method-assign]
    bad = PowerMode(8, 1344.0, 700.0, 2133.0)  # 700 MHz is not an Orin GPU step
    with pytest.raises(InvalidArgument, match="gpu_mhz"):
        Profiler(dev).profile([ORIN_MID, bad], "resnet18", "train", [16])
    with pytest.raises(InvalidArgument, match="batch_size"):
        Profiler(dev).profile([ORIN_MID], "resnet18", "train", [0])
    with pytest.raises(InvalidArgument, match="role"):
        Profiler(dev).profile([ORIN_MID], "resnet18", "fly", [16])
    assert applied == []


class _FailingDevice(Device):
    """A scripted device whose third run raises: the profiler must still restore."""

    backend = "test"

    def __init__(self) -> None:
        self._clock = VirtualClock()
        self._mode = ORIN_AGX.preset("MODE_30W").mode()
        self.runs = 0

    spec = ORIN_AGX  # type: ignore[assignment]

    @property
    def clock(self):
        return self._clock

    def current_mode(self):
        return self._mode

    def apply(self, mode):
        self._mode = self.spec.validate(mode)
        return self._mode

    def run(self, workload, role, batch_size, n_minibatches):
        self.runs += 1
        if self.runs == 2:  # the second point fails
            raise RuntimeError("CUDA error: out of memory")
        self._clock.advance(0.05 * n_minibatches)
        return [50.0] * n_minibatches

    def power_sensor(self):
        outer = self

        class _S(PowerSensor):
            def read_w(self) -> float:
                return 10.0 + outer._mode.gpu_mhz / 100.0

        return _S()

    def sampler(self, rate_hz: float = 1.0) -> PowerSampler:
        outer = self

        class _Sampler(PowerSampler):
            def start(self) -> None:
                self.t0 = outer.clock.now_s()

            def stop(self) -> list[PowerSample]:
                n = int((outer.clock.now_s() - self.t0) * self.rate_hz) + 1
                return [PowerSample(self.t0 + k / self.rate_hz, outer.power_sensor().read_w()) for k in range(n)]

        return _Sampler(rate_hz)


def test_original_mode_is_restored_after_an_exception_midway():
    dev = _FailingDevice()
    start = dev.current_mode()
    with pytest.raises(RuntimeError, match="out of memory"):
        Profiler(dev).profile([ORIN_MAXN, ORIN_MID, ORIN_LOW], "resnet18", "train", [16])
    assert dev.runs == 2 and dev.current_mode() == start


def test_repeat_short_stretches_tiny_minibatches():
    dev = _FailingDevice()
    dev.runs = -100  # never fail here
    cfg = ProfileConfig(n_minibatches=10, repeat_short=True, min_run_samples=5, sample_rate_hz=1.0)
    m = Profiler(dev, cfg).measure(ORIN_MID, "tiny", "infer", 1)
    # 50 ms minibatches: 100 fit in 5 s -> n̂ = 200, and the sampler sees ≥ 5 samples
    assert m.n_minibatches == repetitions(100) == 200
    assert m.samples >= 5


def test_efficient_order_on_the_simulator_matches_exhaustive():
    levels = [PowerMode(8, 1344.0, g, 3199.0) for g in ORIN_AGX.gpu_mhz[::3]]
    cfg = ProfileConfig(n_minibatches=5)
    cap_w = 30.0
    exhaustive = {}
    prof = Profiler(sim(), cfg)
    for b in (8, 32):
        peaks = [prof.measure(m, "resnet18", "train", b).peak_power_w for m in levels]
        feasible = [i for i, p in enumerate(peaks) if p <= cap_w]
        exhaustive[b] = max(feasible) if feasible else None
    result = run_cap_search(CapSearch(levels, [8, 32], cap_w), Profiler(sim(), cfg).peak_power_w("resnet18", Role.TRAIN))
    assert result.best_level == exhaustive
    assert result.profiled < 2 * len(levels)


# --- throttling ---------------------------------------------------------------------
def test_a_point_measured_on_a_hot_board_is_flagged_and_remeasured_after_a_cool_down():
    cool = Profiler(sim(), ProfileConfig(n_minibatches=10)).measure(ORIN_MAXN, "resnet18", "train", 16)
    dev = sim()
    dev.heat(80.0, tau_s=20.0)  # tj-thermal far past its 95 °C trip: the clocks drop
    assert dev.telemetry().throttled
    log: list[Measurement] = []
    prof = Profiler(dev, ProfileConfig(n_minibatches=10, cooldown_poll_s=1.0))
    original_measure = prof._measure

    def spy(*a):
        log.append(original_measure(*a))
        return log[-1]

    prof._measure = spy
    m = prof.measure(ORIN_MAXN, "resnet18", "train", 16)
    assert len(log) == 2 and log[0].throttled and not log[1].throttled
    assert any("tj-thermal" in r for r in log[0].throttle_reasons)
    assert any(r.startswith("gpu ") for r in log[0].throttle_reasons)  # throttled clocks, not just heat
    assert log[0].time_ms > 1.3 * cool.time_ms  # the throttled attempt really was slower
    assert not m.throttled and m.remeasured == 1 and m.time_ms == pytest.approx(cool.time_ms, rel=0.1)
    row = m.to_row()
    assert row["throttled"] == "false" and row["remeasured"] == 1
    assert not dev.telemetry().throttled


def test_a_board_that_stays_hot_keeps_the_flag_and_no_remeasure_when_disabled():
    dev = sim()
    dev.heat(200.0, tau_s=1e6)
    m = Profiler(dev, ProfileConfig(n_minibatches=5, cooldown_timeout_s=4.0)).measure(
        ORIN_MAXN, "resnet18", "train", 16)
    assert m.throttled and m.remeasured == 1 and m.to_row()["throttled"] == "true"
    m = Profiler(dev, ProfileConfig(n_minibatches=5, remeasure_throttled=False)).measure(
        ORIN_MAXN, "resnet18", "train", 16)
    assert m.throttled and m.remeasured == 0
    with pytest.raises(InvalidArgument, match="max_remeasures"):
        ProfileConfig(max_remeasures=-1).validate()
