"""ReplayDevice: a recorded profile table behind the Device interface; open_device strings."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from edgetune.base.mode import PowerMode
from edgetune.devices.factory import open_device
from edgetune.devices.replay import ReplayDevice
from edgetune.devices.sysfs import SysfsJetson
from edgetune.errors import InvalidArgument
from edgetune.tables import write_table

SYSROOTS = Path(__file__).resolve().parents[1] / "fixtures" / "sysroots"
MODES = [PowerMode(c, cpu, gpu, emc) for c, cpu, gpu, emc in
         itertools.product((4, 12), (1113.6, 2201.6), (420.75, 1300.5), (2133.0, 3199.0))]
MISSING = PowerMode(4, 1113.6, 1300.5, 2133.0)  # a combination of recorded values never measured


def _rows():
    rows = []
    for m in MODES:
        if m == MISSING:
            continue
        for workload, role, batch in itertools.product(("resnet18", "bert"), ("train", "infer"), (16, 32)):
            speed = m.cores * m.cpu_mhz / 1000 + m.gpu_mhz / 100 + m.emc_mhz / 1000
            time_ms = round(1000.0 * batch / speed / (2 if role == "infer" else 1) / (1.5 if workload == "bert" else 1), 3)
            power_w = round(5.0 + m.cores * 0.5 + m.gpu_mhz / 100 + m.emc_mhz / 1000 + batch / 16, 3)
            rows.append({**m.as_dict(), "batch_size": batch, "time_ms": time_ms, "power_w": power_w,
                         "device": "orin-agx", "workload": workload, "role": role, "time_std_ms": time_ms / 10})
    return rows


@pytest.fixture()
def truth(tmp_path) -> Path:
    path = tmp_path / "truth.csv"
    write_table(_rows(), path)
    return path


def test_spec_is_the_distinct_values_of_the_table(truth):
    dev = ReplayDevice(truth)
    spec = dev.spec
    assert dev.backend == "replay" and spec.name == "orin-agx"
    assert spec.core_counts == (4, 12) and spec.cpu_mhz == (1113.6, 2201.6)
    assert spec.gpu_mhz == (420.75, 1300.5) and spec.emc_mhz == (2133.0, 3199.0)
    assert spec.n_modes == 16 and dev.n_recorded_modes == 15
    assert spec.presets, "a known device name brings the built-in presets"
    assert dev.workloads() == ["bert", "resnet18"] and dev.roles() == ["infer", "train"]
    assert dev.batch_sizes() == [16, 32]
    assert len(dev.modes()) == 15 and MISSING not in dev.modes()


def test_name_falls_back_to_replay_without_a_device_column(tmp_path):
    path = tmp_path / "t.csv"
    write_table([{k: v for k, v in r.items() if k != "device"} for r in _rows()], path)
    assert ReplayDevice(path).spec.name == "replay"
    assert ReplayDevice(path, device_name="bench").spec.name == "bench"


@pytest.mark.parametrize("mode, field", [
    (PowerMode(8, 1113.6, 420.75, 2133.0), "cores"),
    (PowerMode(4, 1000.0, 420.75, 2133.0), "cpu_mhz"),
    (PowerMode(4, 1113.6, 624.75, 2133.0), "gpu_mhz"),
    (PowerMode(4, 1113.6, 420.75, 665.6), "emc_mhz"),
    (MISSING, "mode"),
])
def test_apply_refuses_unrecorded_modes(truth, mode, field):
    dev = ReplayDevice(truth)
    before = dev.current_mode()
    with pytest.raises(InvalidArgument) as err:
        dev.apply(mode)
    assert err.value.field == field
    assert dev.current_mode() == before


def test_run_returns_recorded_time_and_advances_the_clock(truth):
    dev = ReplayDevice(truth)
    mode = PowerMode(12, 2201.6, 1300.5, 3199.0)
    assert dev.apply(mode) == mode
    row = dev.lookup(mode, 32, "resnet18", "train", record=False)
    t0 = dev.clock.now_s()
    times = dev.run("resnet18", "train", 32, 5)
    assert times == [row["time_ms"]] * 5
    assert dev.clock.now_s() - t0 == pytest.approx(5 * row["time_ms"] / 1000)


def test_unrecorded_workload_role_batch_are_refused(truth):
    dev = ReplayDevice(truth)
    with pytest.raises(InvalidArgument) as err:
        dev.run("vgg16", "train", 16, 1)
    assert err.value.field == "workload" and "resnet18" in err.value.allowed
    with pytest.raises(InvalidArgument) as err:
        dev.run("resnet18", "train", 64, 1)
    assert err.value.field == "batch_size" and err.value.allowed == "16, 32"
    with pytest.raises(InvalidArgument) as err:
        dev.run("resnet18", "finetune", 16, 1)
    assert err.value.field == "role"
    with pytest.raises(InvalidArgument) as err:
        dev.run("resnet18", "train", 16, 0)
    assert err.value.field == "n_minibatches"


def test_profiled_count_counts_distinct_points(truth):
    dev = ReplayDevice(truth)
    assert dev.profiled_count == 0
    dev.run("resnet18", "train", 16, 3)
    dev.run("resnet18", "train", 16, 3)
    assert dev.profiled_count == 1
    dev.run("resnet18", "infer", 16, 1)
    dev.run("bert", "train", 16, 1)
    dev.lookup(PowerMode(4, 1113.6, 420.75, 2133.0), 32, "bert", "train")
    assert dev.profiled_count == 4
    dev.lookup(PowerMode(4, 1113.6, 420.75, 3199.0), 32, "bert", "train", record=False)
    assert dev.profiled_count == 4
    dev.reset_profiled()
    assert dev.profiled_count == 0


def test_noise_is_seeded_and_optional(truth):
    a = ReplayDevice(truth, noise=True, seed=7).run("bert", "infer", 16, 20)
    b = ReplayDevice(truth, noise=True, seed=7).run("bert", "infer", 16, 20)
    c = ReplayDevice(truth, noise=True, seed=8).run("bert", "infer", 16, 20)
    exact = ReplayDevice(truth).run("bert", "infer", 16, 20)
    assert a == b and a != c
    assert len(set(exact)) == 1 and len(set(a)) > 1
    assert sum(a) / len(a) == pytest.approx(exact[0], rel=0.15)


def test_power_sensor_reads_last_run_then_idle(truth):
    dev = ReplayDevice(truth)
    sensor = dev.power_sensor()
    assert sensor.read_w() == dev.idle_power_w == min(r["power_w"] for r in _rows())
    row = dev.lookup(dev.current_mode(), 16, "resnet18", "train", record=False)
    dev.run("resnet18", "train", 16, 2)
    assert sensor.read_w() == row["power_w"]
    dev.apply(PowerMode(4, 1113.6, 420.75, 2133.0))
    assert sensor.read_w() == dev.idle_power_w


def test_sampler_is_virtual_and_sees_the_run(truth):
    dev = ReplayDevice(truth)
    row = dev.lookup(dev.current_mode(), 32, "bert", "train", record=False)
    sampler = dev.sampler(rate_hz=10.0)
    sampler.start()
    dev.run("bert", "train", 32, 4)
    samples = sampler.stop()
    assert samples[0].t_s == 0.0
    assert len(samples) == int(4 * row["time_ms"] / 100) + 1
    assert all(s.power_w == row["power_w"] for s in samples)


def test_constructor_filters_workload_and_role(truth):
    dev = ReplayDevice(truth, workload="bert", role="infer")
    assert dev.workloads() == ["bert"] and dev.roles() == ["infer"]
    times = dev.run("", "", 16, 1)  # the defaults fill in
    assert times == [dev.lookup(dev.current_mode(), 16, "bert", "infer")["time_ms"]]
    with pytest.raises(InvalidArgument) as err:
        ReplayDevice(truth, workload="vgg16")
    assert err.value.field == "workload"


def test_several_devices_need_a_name(tmp_path):
    rows = _rows()
    rows += [{**r, "device": "xavier-agx"} for r in rows[:10]]
    path = tmp_path / "two.csv"
    write_table(rows, path)
    with pytest.raises(InvalidArgument) as err:
        ReplayDevice(path)
    assert err.value.field == "device" and "xavier-agx" in err.value.allowed
    assert ReplayDevice(path, device_name="xavier-agx").spec.name == "xavier-agx"


def test_restore_returns_to_the_initial_mode(truth):
    dev = ReplayDevice(truth)
    first = dev.current_mode()
    dev.apply(PowerMode(4, 1113.6, 420.75, 2133.0))
    dev.restore()
    assert dev.current_mode() == first


def test_bad_table_is_refused(tmp_path):
    path = tmp_path / "bad.csv"
    path.write_text("cores,cpu_mhz,gpu_mhz,emc_mhz,batch_size,time_ms\n4,1113.6,420.75,2133,16,10\n")
    with pytest.raises(InvalidArgument, match="power_w"):
        ReplayDevice(path)
    empty = tmp_path / "empty.csv"
    empty.write_text("cores,cpu_mhz,gpu_mhz,emc_mhz,batch_size,time_ms,power_w\n")
    with pytest.raises(InvalidArgument, match="no rows"):
        ReplayDevice(empty)


# --- open_device -----------------------------------------------------------------------------
def test_open_device_strings(truth):
    assert isinstance(open_device(f"replay:{truth}", seed=3), ReplayDevice)
    dev = open_device(f"sysfs:{SYSROOTS / 'nano'}", seed=3)  # seed is dropped for sysfs
    assert isinstance(dev, SysfsJetson) and dev.spec.name == "nano"
    for bad in ("", "gpu", "sim:", "sim:jetson-tx1", "replay:", "cuda:0"):
        with pytest.raises(InvalidArgument) as err:
            open_device(bad)
        assert err.value.field == "device" and "sysfs[:ROOT]" in err.value.allowed


def test_open_device_sim():
    pytest.importorskip("edgetune.devices.simulated")
    dev = open_device("sim:nano", seed=1)
    assert dev.backend == "sim" and dev.spec.name == "nano"
