"""SimulatedJetson: docs/papers.md anchors, surface shape, settling, determinism, validation."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from edgetune.base.mode import PowerMode
from edgetune.devices.base import Device
from edgetune.devices.simulated.device import SimulatedJetson
from edgetune.devices.simulated.profiles import PROFILES
from edgetune.devices.simulated.tables import truth_table
from edgetune.errors import InvalidArgument
from edgetune.powermodes.specs import SPECS, get_spec

TIME_TOL = 0.15  # relative, time anchors
POWER_TOL = 0.08  # relative, power anchors

MAXN = PowerMode(12, 2201.6, 1300.5, 3199.0)
LOW = PowerMode(4, 422.4, 114.75, 665.6)  # PowerTrain / Fulcrum low mode
SLOWEST = PowerMode(1, 115.2, 114.75, 204.0)  # the slowest Orin AGX mode (its minimum)


@pytest.fixture(scope="module")
def orin() -> SimulatedJetson:
    return SimulatedJetson("orin-agx", noise=False)


def _grid(spec) -> np.ndarray:
    return np.array(list(itertools.product(spec.core_counts, spec.cpu_mhz, spec.gpu_mhz, spec.emc_mhz)), float)


# -- anchors ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "workload,role,bs,mode,time_ms,power_w",
    [
        ("resnet18", "train", 16, MAXN, 60, 51.1),
        ("resnet18", "train", 16, LOW, 490, 14.7),
        ("resnet18", "train", 16, SLOWEST, 2150, 11.8),
        ("mobilenetv3", "train", 16, MAXN, 96, None),
        ("yolov8n", "train", 16, MAXN, 188, None),
        ("bert-base", "train", 16, MAXN, 940, 57.0),
        ("lstm", "train", 16, MAXN, 11, None),
        ("mobilenetv3", "infer", 1, MAXN, 18, 20.9),
        ("mobilenetv3", "infer", 32, MAXN, 54, 38.2),
        ("mobilenetv3", "infer", 64, MAXN, 102, 39.5),
        ("mobilenetv3", "infer", 64, LOW, 1026, 14.0),
        ("bert-large", "infer", 1, MAXN, 66, 56.0),
        ("bert-large", "infer", 32, MAXN, 1940, 61.8),
    ],
)
def test_reference_anchors(orin, workload, role, bs, mode, time_ms, power_w):
    t = orin.true_time_ms(mode, workload, role, bs)
    assert t == pytest.approx(time_ms, rel=TIME_TOL)
    if power_w is not None:
        assert orin.true_power_w(mode, workload, role, bs) == pytest.approx(power_w, rel=POWER_TOL)


def test_slowest_anchor_is_the_slowest_mode(orin):
    times = orin.true_time_ms(_grid(orin.spec), "resnet18", "train", 16)
    assert tuple(_grid(orin.spec)[np.argmax(times)]) == SLOWEST.as_tuple()


def test_nano_power_caps_seed_000():
    nano = SimulatedJetson("nano", noise=False)
    modes = np.array([(4, 1479.0, g, 1600.0) for g in nano.spec.gpu_mhz])
    p128 = dict(zip(nano.spec.gpu_mhz, nano.true_power_w(modes, "resnet18", "train", 128), strict=True))
    p64 = dict(zip(nano.spec.gpu_mhz, nano.true_power_w(modes, "resnet18", "train", 64), strict=True))
    assert p128[307.2] <= 4.5 < p128[460.8]  # baseline 1 at 4.5 W: 307 MHz
    assert p128[614.4] <= 7.0 < p128[921.6]  # baseline 1 at 7 W: 614 MHz
    assert max(f for f, p in p64.items() if p <= 5.0) == 460.8  # b=64 @ 460 MHz under 5 W


def _knee_ratio(dev, workload, gpu_mhz=624.75, emc_mhz=2133.0):
    """f_cpu / f_gpu beyond which more CPU clock gains < 2 % per step."""
    cpus = np.array(dev.spec.cpu_mhz)
    modes = np.array([(12, c, gpu_mhz, emc_mhz) for c in cpus])
    t = dev.true_time_ms(modes, workload, "train", 16)
    gain = -np.diff(t) / t[:-1]
    return cpus[1:][np.argmax(gain < 0.02)] / gpu_mhz


@pytest.mark.parametrize("workload", ["resnet18", "mobilenetv3", "yolov8n"])
def test_balance_ratio_between_one_and_three(orin, workload):
    assert 0.8 <= _knee_ratio(orin, workload) <= 3.5


# -- surface shape ---------------------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(SPECS))
def test_monotone_power_and_time_over_whole_grid(name):
    spec = get_spec(name)
    dev = SimulatedJetson(spec, noise=False)
    grid = _grid(spec)
    shape = (len(spec.core_counts), len(spec.cpu_mhz), len(spec.gpu_mhz), len(spec.emc_mhz))
    for workload, role in [("resnet18", "train"), ("mobilenetv3", "infer"), ("yolov8n", "train"),
                           ("bert-base", "train"), ("lstm", "train"), ("char-transformer", "train"),
                           ("tiny", "train")]:
        t = dev.true_time_ms(grid, workload, role, 16).reshape(shape)
        p = dev.true_power_w(grid, workload, role, 16).reshape(shape)
        for axis in range(4):
            assert (np.diff(p, axis=axis) > 0).all(), (workload, axis, "power must rise")
            assert (np.diff(t, axis=axis) <= 1e-9).all(), (workload, axis, "time must not rise")


def test_gpu_clock_saturates_at_low_cpu_clock(orin):
    spec = orin.spec
    low_cpu = np.array([(12, 422.4, g, 3199.0) for g in spec.gpu_mhz])
    t = orin.true_time_ms(low_cpu, "resnet18", "train", 16)
    assert (t[-2] - t[-1]) / t[-2] < 0.01  # last GPU step buys (almost) nothing
    high_cpu = np.array([(12, 2201.6, g, 3199.0) for g in spec.gpu_mhz])
    th = orin.true_time_ms(high_cpu, "resnet18", "train", 16)
    assert (th[1] - th[-1]) / th[1] > 0.7  # while at high CPU clock the GPU dominates
    # and vice versa: at the lowest GPU clock, the CPU stops helping
    low_gpu = np.array([(12, c, 114.75, 3199.0) for c in spec.cpu_mhz])
    tg = orin.true_time_ms(low_gpu, "resnet18", "train", 16)
    assert (tg[-2] - tg[-1]) / tg[-2] < 0.01


def test_fewer_cores_slow_the_data_pipeline(orin):
    cores = np.array([(c, 1497.6, 1300.5, 3199.0) for c in orin.spec.core_counts])
    t = orin.true_time_ms(cores, "mobilenetv3", "train", 16)
    assert t[0] > 2.5 * t[-1]
    assert t[1] > t[3] > t[5]


def test_slow_emc_tier(orin):
    rows = {e: orin.true_time_ms(PowerMode(12, 2201.6, 1300.5, e), "resnet18", "train", 16)
            for e in orin.spec.emc_mhz}
    fast = max(rows[2133.0], rows[3199.0])
    assert rows[665.6] > 1.5 * fast and rows[204.0] > 1.5 * rows[665.6]
    assert rows[2133.0] < 1.35 * rows[3199.0]


def test_vectorised_truth_is_fast_and_matches_scalar(orin):
    import time

    grid = _grid(orin.spec)
    assert len(grid) == 18096
    t0 = time.perf_counter()
    t = orin.true_time_ms(grid, "resnet18", "train", 16)
    p = orin.true_power_w(grid, "resnet18", "train", 16)
    assert time.perf_counter() - t0 < 0.5
    i = 4321
    mode = PowerMode(int(grid[i, 0]), *grid[i, 1:])
    assert t[i] == pytest.approx(orin.true_time_ms(mode, "resnet18", "train", 16))
    assert p[i] == pytest.approx(orin.true_power_w(mode, "resnet18", "train", 16))


@pytest.mark.parametrize("name", sorted(SPECS))
def test_every_spec_is_sane(name):
    spec = get_spec(name)
    dev = SimulatedJetson(spec, noise=False)
    grid = _grid(spec)
    assert dev.true_idle_power_w(spec.minimum()) == pytest.approx(spec.idle_power_w, rel=0.01)
    # The zoo's profiles: user workloads registered by other tests in this process carry only
    # the roles they were built for.
    for workload, profile in PROFILES.items():
        for role in profile.roles:
            t = dev.true_time_ms(grid, workload, role, 16)
            p = dev.true_power_w(grid, workload, role, 16)
            assert np.isfinite(t).all() and (t > 0).all()
            assert (p >= spec.idle_power_w).all() and (p <= 1.2 * spec.max_power_w).all(), workload


# -- device behaviour ------------------------------------------------------------------------
def test_is_a_device_with_virtual_time():
    dev = SimulatedJetson("orin-agx", seed=1)
    assert isinstance(dev, Device) and dev.backend == "sim"
    assert dev.current_mode() == dev.spec.maxn()
    t0 = dev.clock.now_s()
    times = dev.run("resnet18", "train", 16, 40)
    assert len(times) == 40
    assert dev.clock.now_s() - t0 == pytest.approx(sum(times) / 1000)
    assert times[0] > 3 * np.median(times[1:])  # warm-up
    assert np.median(times[1:]) == pytest.approx(60, rel=0.1)
    assert 0.003 < np.std(times[1:]) / np.mean(times[1:]) < 0.1


def test_settling_after_mode_switch():
    dev = SimulatedJetson("orin-agx", seed=3)
    dev.run("resnet18", "train", 16, 100)  # hot at MAXN
    dev.apply(LOW)
    steady = dev.true_power_w(LOW, "resnet18", "train", 16)
    sampler = dev.sampler(10.0)
    sampler.start()
    dev.run("resnet18", "train", 16, 12)  # ~6 s at LOW
    samples = sampler.stop()
    early = [s.power_w for s in samples if s.t_s - samples[0].t_s < 0.3]
    late = [s.power_w for s in samples if s.t_s - samples[0].t_s > 3.0]
    assert min(early) > steady + 15  # still near the MAXN level
    assert np.mean(late) == pytest.approx(steady, rel=0.05)
    assert abs(max(late) - steady) < 0.15 * steady


def test_sampler_gives_rate_hz_samples_between_start_and_stop():
    dev = SimulatedJetson("orin-agx", seed=0)
    dev.sleep(10)
    s = dev.sampler(2.0)
    s.start()
    t0 = dev.clock.now_s()
    dev.run("mobilenetv3", "train", 16, 50)
    t1 = dev.clock.now_s()
    samples = s.stop()
    assert samples[0].t_s == pytest.approx(t0)
    assert len(samples) == int((t1 - t0) * 2.0) + 1
    assert all(b.t_s - a.t_s == pytest.approx(0.5) for a, b in itertools.pairwise(samples))
    mean_p = np.mean([x.power_w for x in samples[2:-1]])
    assert mean_p == pytest.approx(dev.true_power_w(MAXN, "mobilenetv3", "train", 16), rel=0.05)


def test_idle_power_between_runs():
    dev = SimulatedJetson("orin-agx", seed=0, noise=False)
    dev.run("resnet18", "train", 16, 10)
    dev.sleep(20)
    assert dev.power_sensor().read_w() == pytest.approx(dev.true_idle_power_w())
    assert dev.true_idle_power_w() < dev.true_power_w(MAXN, "resnet18", "train", 16) - 20


def test_deterministic_for_a_seed():
    def trace(seed):
        dev = SimulatedJetson("xavier-agx", seed=seed)
        s = dev.sampler(1.0)
        s.start()
        times = dev.run("resnet18", "train", 16, 30)
        dev.apply(dev.spec.preset("MODE_15W").mode())
        times += dev.run("yolov8n", "train", 8, 10)
        return times, [x.power_w for x in s.stop()]

    assert trace(7) == trace(7)
    assert trace(7) != trace(8)


def test_validation_errors():
    dev = SimulatedJetson("orin-agx")
    before = dev.current_mode()
    with pytest.raises(InvalidArgument) as e:
        dev.apply(PowerMode(12, 2201.6, 999.0, 3199.0))
    assert e.value.field == "gpu_mhz" and dev.current_mode() == before
    with pytest.raises(InvalidArgument) as e:
        dev.apply(PowerMode(13, 2201.6, 1300.5, 3199.0))
    assert e.value.field == "cores"
    with pytest.raises(InvalidArgument) as e:
        dev.run("vgg99", "train", 16, 3)
    assert e.value.field == "workload" and "resnet18" in e.value.allowed
    for field, args in (("batch_size", (0, 3)), ("n_minibatches", (16, 0)), ("batch_size", (-4, 3))):
        with pytest.raises(InvalidArgument) as e:
            dev.run("resnet18", "train", *args)
        assert e.value.field == field
    with pytest.raises(InvalidArgument) as e:
        dev.run("resnet18", "fly", 16, 3)
    assert e.value.field == "role"
    with pytest.raises(InvalidArgument) as e:
        dev.run("bert-large", "train", 16, 3)
    assert e.value.field == "role"
    assert dev.clock.now_s() == 0.0


def test_restore_returns_to_first_mode():
    dev = SimulatedJetson("orin-agx", initial_mode=LOW)
    dev.apply(MAXN)
    dev.apply(PowerMode(8, 1344.0, 726.75, 2133.0))
    dev.close()
    assert dev.current_mode() == LOW


def test_truth_table_rows():
    modes = [MAXN, LOW]
    rows = truth_table("orin-agx", "resnet18", "train", modes, [16, 32])
    assert len(rows) == 4
    assert list(rows[0]) == ["cores", "cpu_mhz", "gpu_mhz", "emc_mhz", "batch_size", "time_ms", "power_w",
                             "device", "workload", "role"]
    assert rows[0]["time_ms"] == pytest.approx(SimulatedJetson("orin-agx").true_time_ms(MAXN, "resnet18", "train", 16))
    assert rows[2]["batch_size"] == 32 and rows[2]["time_ms"] > rows[0]["time_ms"]
    assert {r["device"] for r in rows} == {"orin-agx"} and rows[0]["role"] == "train"


# --- Orin NX and Orin Nano Super ----------------------------------------------------
@pytest.mark.parametrize("name", ["orin-nx", "orin-nano-super"])
def test_new_devices_are_calibrated_to_their_module_envelope(name):
    """The calibration hardware.py states: ResNet-18 training at the top mode near the 25 W module
    envelope (within it), idle 4-6 W, and faster than the JetPack 5 Orin Nano."""
    dev = SimulatedJetson(name, noise=False)
    top = dev.spec.maxn()
    watts = dev.true_power_w(top, "resnet18", "train", 16)
    assert 18.0 < watts <= dev.spec.max_power_w == 25.0
    assert 4.0 <= dev.true_idle_power_w(dev.spec.minimum()) < 6.0
    nano = SimulatedJetson("orin-nano", noise=False)
    assert dev.true_time_ms(top, "resnet18", "train", 16) < nano.true_time_ms(nano.spec.maxn(), "resnet18", "train", 16)


def test_a_hot_simulated_board_runs_slower_at_throttled_clocks():
    cool = SimulatedJetson("orin-nx", noise=False)
    hot = SimulatedJetson("orin-nx", noise=False)
    hot.heat(80.0, tau_s=1e6)
    t_cool = sum(cool.run("resnet18", "train", 16, 10)[1:])
    t_hot = sum(hot.run("resnet18", "train", 16, 10)[1:])
    assert t_hot > 1.3 * t_cool
    eff = hot.effective_mode(hot.clock.now_s())
    assert eff.gpu_mhz < hot.current_mode().gpu_mhz and eff.cpu_mhz < hot.current_mode().cpu_mhz
    assert eff.gpu_mhz in hot.spec.gpu_mhz and eff.cpu_mhz in hot.spec.cpu_mhz
