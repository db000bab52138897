"""SysfsJetson against fake sysroots copied from real Jetson layouts (tests/fixtures/sysroots)."""

from __future__ import annotations

import filecmp
import os
import shutil
from pathlib import Path

import pytest

from edgetune.base.mode import PowerMode
from edgetune.devices.sysfs import SysfsJetson, discover
from edgetune.errors import FailedPrecondition, InvalidArgument

SYSROOTS = Path(__file__).resolve().parents[1] / "fixtures" / "sysroots"

# name -> builtin spec, soc, cpus, (cpu, gpu, emc) table sizes, found mode, rails, total power (W)
EXPECTED = {
    "orin-agx-jp5": ("orin-agx", "t234", 12, (29, 13, 4), PowerMode(12, 1420.8, 318.75, 3199.0),
                     ["VDD_GPU_SOC", "VDD_CPU_CV", "VIN_SYS_5V0", "VDDQ_VDD2_1V8AO"],
                     (5008 * 477 + 5008 * 159 + 5000 * 686 + 4992 * 101) / 1e6),
    "orin-agx-jp6": ("orin-agx", "t234", 12, (29, 13, 4), PowerMode(8, 1113.6, 216.75, 2133.0),
                     ["VDD_GPU_SOC", "VDD_CPU_CV", "VIN_SYS_5V0", "VDDQ_VDD2_1V8AO"],
                     (5016 * 398 + 5016 * 231 + 5000 * 702 + 4992 * 96) / 1e6),
    "xavier-agx": ("xavier-agx", "t194", 8, (29, 14, 9), PowerMode(8, 1190.4, 318.75, 1600.0),
                   ["GPU", "CPU", "SOC", "CV", "VDDRQ", "SYS5V"],
                   (19008 * (0 + 16 + 65 + 0 + 8) + 4976 * 331) / 1e6),
    "nano": ("nano", "t210", 4, (15, 12, 7), PowerMode(4, 1224.0, 76.8, 1600.0),
             ["POM_5V_IN", "POM_5V_GPU", "POM_5V_CPU"], 1919 / 1000),  # POM_5V_IN is the board total
    "orin-nx": ("orin-nx", "t234", 8, (26, 7, 4), PowerMode(4, 1113.6, 306.0, 2133.0),
                ["VDD_IN", "VDD_CPU_GPU_CV", "VDD_SOC"], 5024 * 1032 / 1e6),  # VDD_IN is the board total
    "orin-nano-super": ("orin-nano-super", "t234", 6, (22, 8, 4), PowerMode(6, 1113.6, 306.0, 2133.0),
                        ["VDD_IN", "VDD_CPU_GPU_CV", "VDD_SOC"], 5032 * 1104 / 1e6),
}


def copy_root(name: str, tmp_path: Path) -> Path:
    dest = tmp_path / name
    shutil.copytree(SYSROOTS / name, dest)
    return dest


def trees_equal(a: Path, b: Path) -> bool:
    cmp = filecmp.dircmp(a, b)

    def same(c: filecmp.dircmp) -> bool:
        if c.left_only or c.right_only or c.funny_files:
            return False
        _, mismatch, errors = filecmp.cmpfiles(c.left, c.right, c.common_files, shallow=False)
        return not mismatch and not errors and all(same(s) for s in c.subdirs.values())

    return same(cmp)


def read(root: Path, rel: str) -> str:
    return (root / rel).read_text().strip()


# --- discovery -------------------------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_discovery_finds_model_tables_and_sensors(name):
    builtin, soc, n_cpus, sizes, found_mode, rails, total_w = EXPECTED[name]
    rep = discover(SYSROOTS / name)
    assert rep.ok and not rep.missing
    assert (rep.model.builtin, rep.model.soc, rep.cpu.n_cpus) == (builtin, soc, n_cpus)
    assert (len(rep.cpu.table_khz), len(rep.gpu.table_hz), len(rep.emc.table_khz)) == sizes
    assert [r.name for r in rep.rails] == rails

    dev = SysfsJetson(SYSROOTS / name)
    spec = dev.spec
    assert spec.name == builtin and spec.soc == soc
    assert spec.core_counts == tuple(range(1, n_cpus + 1))
    assert (len(spec.cpu_mhz), len(spec.gpu_mhz), len(spec.emc_mhz)) == sizes
    assert spec.n_modes == n_cpus * sizes[0] * sizes[1] * sizes[2]
    assert spec.presets, "a known model carries the built-in nvpmodel presets"
    assert dev.current_mode() == found_mode
    sensor = dev.power_sensor()
    assert sensor.read_w() == pytest.approx(total_w)
    assert list(sensor.rails_w()) == rails


def test_paper_mode_counts_come_from_the_discovered_tables():
    assert SysfsJetson(SYSROOTS / "orin-agx-jp5").spec.n_modes == 18_096
    assert SysfsJetson(SYSROOTS / "xavier-agx").spec.n_modes == 29_232


def test_jp5_and_jp6_layouts_differ_but_discover_alike():
    jp5, jp6 = discover(SYSROOTS / "orin-agx-jp5"), discover(SYSROOTS / "orin-agx-jp6")
    assert jp5.gpu.devfreq == "sys/devices/platform/17000000.ga10b/devfreq/17000000.ga10b"
    assert jp6.gpu.devfreq == "sys/devices/platform/17000000.gpu/devfreq_dev"
    assert jp5.emc.cap_file == "sys/kernel/nvpmodel_emc_cap/emc_iso_cap"
    assert jp6.emc.cap_file == "sys/kernel/nvpmodel_clk_cap/emc"
    assert "hwmon3" in jp5.rails[0].voltage_file and "hwmon1" in jp6.rails[0].voltage_file
    assert (jp5.model.l4t, jp6.model.l4t) == ("R35.4.1", "R36.4.3")
    assert jp5.cpu.table_khz == jp6.cpu.table_khz and jp5.gpu.table_hz == jp6.gpu.table_hz


def test_units_hwmon_mv_ma_and_iio_mw(tmp_path):
    root = copy_root("nano", tmp_path)
    iio = root / "sys/bus/i2c/drivers/ina3221x/6-0040/iio:device0"
    (iio / "in_power1_input").write_text("2500\n")  # mW
    assert SysfsJetson(root).power_sensor().rails_w()["POM_5V_GPU"] == pytest.approx(2.5)
    root = copy_root("orin-agx-jp5", tmp_path)
    hw = root / "sys/bus/i2c/drivers/ina3221/1-0040/hwmon/hwmon3"
    (hw / "in1_input").write_text("5000\n")  # mV
    (hw / "curr1_input").write_text("2000\n")  # mA
    assert SysfsJetson(root).power_sensor().rails_w()["VDD_GPU_SOC"] == pytest.approx(10.0)


def test_nc_and_sum_channels_are_not_rails():
    names = [r.name for r in discover(SYSROOTS / "orin-agx-jp6").rails]
    assert "NC" not in names and not any("sum" in n for n in names)


def test_empty_root_reports_what_is_missing(tmp_path):
    rep = discover(tmp_path)
    assert not rep.ok and not rep.rails
    assert any("CPU frequency table" in m for m in rep.missing)
    assert any("GPU devfreq" in m for m in rep.missing)
    with pytest.raises(FailedPrecondition, match="missing"):
        SysfsJetson(tmp_path)


def test_unknown_model_builds_its_own_spec_without_presets(tmp_path):
    root = copy_root("orin-agx-jp6", tmp_path)
    (root / "proc/device-tree/model").write_bytes(b"Example Tegra Carrier Kit\0")
    (root / "proc/device-tree/compatible").write_bytes(b"example,carrier\0nvidia,tegra234\0")
    dev = SysfsJetson(root)
    assert dev.report.model.builtin is None and dev.spec.presets == ()
    assert dev.spec.name == "example-tegra-carrier-kit"
    assert any("presets: no /etc/nvpmodel.conf" in m for m in dev.report.missing)
    assert len(dev.spec.gpu_mhz) == 13 and dev.spec.soc == "t234"


def test_no_debugfs_falls_back_to_builtin_emc_table_and_the_nvpmodel_cap(tmp_path):
    root = copy_root("orin-agx-jp5", tmp_path)
    shutil.rmtree(root / "sys/kernel/debug")
    dev = SysfsJetson(root)
    assert dev.report.emc.method == "cap" and dev.spec.emc_mhz == (204.0, 665.6, 2133.0, 3199.0)
    assert any("EMC" in m for m in dev.report.missing)
    dev.apply(PowerMode(12, 2201.6, 1300.5, 2133.0))
    assert read(root, "sys/kernel/nvpmodel_emc_cap/emc_iso_cap") == "2133000000"


# --- apply -----------------------------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_apply_writes_pinned_clocks_and_reads_back(name, tmp_path):
    root = copy_root(name, tmp_path)
    dev = SysfsJetson(root)
    spec = dev.spec
    mode = PowerMode(2, spec.cpu_mhz[3], spec.gpu_mhz[2], spec.emc_mhz[1])
    assert dev.apply(mode) == mode
    assert dev.current_mode() == mode
    khz = str(dev.report.cpu.table_khz[3])
    for p in dev.report.cpu.policies:
        if 0 in p.cpus:
            assert read(root, f"{p.path}/scaling_min_freq") == read(root, f"{p.path}/scaling_max_freq") == khz
    g = dev.report.gpu.devfreq
    assert read(root, f"{g}/min_freq") == read(root, f"{g}/max_freq") == str(dev.report.gpu.table_hz[2])
    emc = dev.report.emc
    assert read(root, emc.set_file) == str(emc.table_khz[1] * 1000)
    assert read(root, emc.lock_file) == "1"
    on = [c for c in range(dev.report.cpu.n_cpus)
          if c not in dev.report.cpu.online_files or read(root, dev.report.cpu.online_files[c]) == "1"]
    assert on == [0, 1]


def _index(writes, pred):
    return [i for i, (path, value) in enumerate(writes) if pred(path, value)]


def test_write_order_raising_then_lowering(tmp_path):
    root = copy_root("orin-agx-jp6", tmp_path)  # found: 8 cores, CPU max 1728 MHz, GPU max 624.75
    dev = SysfsJetson(root)
    dev.apply(PowerMode(12, 2201.6, 1300.5, 3199.0))
    w = dev.writes
    online = _index(w, lambda p, v: p.endswith("/online"))
    freq = _index(w, lambda p, v: "freq" in p)
    assert [w[i] for i in online] == [(f"sys/devices/system/cpu/cpu{c}/online", "1") for c in (8, 9, 10, 11)]
    assert max(online) < min(freq), "cores come online before any clock is written"
    pol0 = [p.rsplit("/", 1)[1] for p, _ in w if "policy0/" in p]
    assert pol0 == ["scaling_max_freq", "scaling_min_freq"], "raising: max before min"
    gpu = [p.rsplit("/", 1)[1] for p, _ in w if "devfreq_dev/" in p]
    assert gpu == ["max_freq", "min_freq"]
    emc = [p.rsplit("/", 1)[1] for p, _ in w if "bpmp" in p]
    assert emc == ["rate", "mrq_rate_locked"]
    assert any("policy8/" in p for p, _ in w), "the cluster brought online gets its clocks"

    dev.writes.clear()
    dev.apply(PowerMode(4, 115.2, 114.75, 204.0))
    w = dev.writes
    pol0 = [p.rsplit("/", 1)[1] for p, _ in w if "policy0/" in p]
    assert pol0 == ["scaling_min_freq", "scaling_max_freq"], "lowering: min before max"
    offline = _index(w, lambda p, v: p.endswith("/online"))
    assert [w[i][1] for i in offline] == ["0"] * 8
    assert [w[i][0] for i in offline] == [f"sys/devices/system/cpu/cpu{c}/online" for c in range(11, 3, -1)]
    assert min(offline) > max(_index(w, lambda p, v: "online" not in p)), "cores go offline last"


def test_inactive_policy_is_not_written(tmp_path):
    root = copy_root("orin-agx-jp6", tmp_path)  # cpus 8-11 offline: policy8 inactive
    dev = SysfsJetson(root)
    dev.apply(PowerMode(8, 1497.6, 624.75, 2133.0))
    assert not any("policy8" in p for p, _ in dev.writes)


@pytest.mark.parametrize("bad, field", [
    (PowerMode(12, 2201.6, 500.0, 3199.0), "gpu_mhz"),
    (PowerMode(13, 2201.6, 1300.5, 3199.0), "cores"),
    (PowerMode(0, 2201.6, 1300.5, 3199.0), "cores"),
    (PowerMode(4, 1234.5, 1300.5, 3199.0), "cpu_mhz"),
    (PowerMode(4, 2201.6, 1300.5, 1866.0), "emc_mhz"),
])
def test_invalid_mode_is_refused_with_nothing_written(bad, field, tmp_path):
    root = copy_root("orin-agx-jp5", tmp_path)
    dev = SysfsJetson(root)
    with pytest.raises(InvalidArgument) as err:
        dev.apply(bad)
    assert err.value.field == field and err.value.allowed
    assert dev.writes == [] and trees_equal(root, SYSROOTS / "orin-agx-jp5")


def test_missing_control_file_fails_before_any_write(tmp_path):
    root = copy_root("xavier-agx", tmp_path)
    os.remove(root / "sys/devices/system/cpu/cpufreq/policy6/scaling_min_freq")
    dev = SysfsJetson(root)
    with pytest.raises(FailedPrecondition, match="nothing was changed"):
        dev.apply(PowerMode(8, 2265.6, 1377.0, 2133.0))
    assert dev.writes == []


# --- restore ---------------------------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_restore_puts_back_exactly_what_was_found(name, tmp_path):
    root = copy_root(name, tmp_path)
    dev = SysfsJetson(root)
    found = dev.current_mode()
    spec = dev.spec
    dev.apply(spec.maxn())
    dev.apply(spec.minimum())
    dev.apply(PowerMode(3, spec.cpu_mhz[5], spec.gpu_mhz[3], spec.emc_mhz[1]))
    assert dev._initial_mode == found
    dev.restore()
    assert dev.current_mode() == found
    assert trees_equal(root, SYSROOTS / name), "every file (online, governor, min, max, EMC) as found"
    dev.writes.clear()
    dev.restore()  # nothing left to undo
    assert dev.writes == []


def test_restore_writes_governor_back(tmp_path):
    root = copy_root("nano", tmp_path)
    dev = SysfsJetson(root)
    dev.apply(PowerMode(2, 102.0, 76.8, 204.0))
    (root / "sys/devices/system/cpu/cpu0/cpufreq/scaling_governor").write_text("performance\n")
    dev.close()  # close() restores
    assert read(root, "sys/devices/system/cpu/cpu0/cpufreq/scaling_governor") == "schedutil"
    assert trees_equal(root, SYSROOTS / "nano")


def test_nano_emc_uses_the_t210_override(tmp_path):
    root = copy_root("nano", tmp_path)
    dev = SysfsJetson(root)
    dev.apply(PowerMode(4, 1479.0, 921.6, 800.0))
    emc = [(p.rsplit("/", 2)[-2:], v) for p, v in dev.writes if "emc" in p]
    assert emc == [(["override.emc", "clk_update_rate"], "800000000"), (["override.emc", "clk_state"], "1")]
    assert dev.current_mode().emc_mhz == 800.0


def test_run_uses_the_given_runner():
    dev = SysfsJetson(SYSROOTS / "nano", runner=lambda w, r, b, n: [float(b)] * n)
    assert dev.run("resnet18", "train", 16, 2) == [16.0, 16.0]


def test_run_defaults_to_the_real_zoo_runner():
    import torch

    torch.set_num_threads(1)
    dev = SysfsJetson(SYSROOTS / "nano")
    times_ms = dev.run("lstm-tiny", "train", 4, 3)  # real minibatches on this machine's CPU
    assert len(times_ms) == 3 and all(t > 0 for t in times_ms)
    dev.runner.close()


def test_hard_limit_and_sampler(tmp_path):
    dev = SysfsJetson(SYSROOTS / "orin-agx-jp5", hard_limit_w=40.0)
    assert dev.hard_limit_w == 40.0 and dev.spec.max_power_w == 40.0
    sampler = dev.sampler(rate_hz=50.0)
    sampler.start()
    dev.clock.sleep(0.06)
    samples = sampler.stop()
    assert samples and samples[0].power_w == pytest.approx(EXPECTED["orin-agx-jp5"][6])
    assert set(samples[0].rails_w) == set(EXPECTED["orin-agx-jp5"][5])


# --- new boards, unknown boards, presets from the board's nvpmodel.conf ------------------------
@pytest.mark.parametrize("name", ["orin-nx", "orin-nano-super"])
def test_board_presets_come_from_its_nvpmodel_conf_and_match_the_builtin_spec(name):
    from edgetune.powermodes.specs import get_spec

    dev = SysfsJetson(SYSROOTS / name)
    assert dev.preset_source.startswith("/etc/nvpmodel.conf")
    assert dev.spec.presets == get_spec(name).presets
    assert (dev.spec.core_counts, dev.spec.cpu_mhz, dev.spec.gpu_mhz, dev.spec.emc_mhz) == (
        get_spec(name).core_counts, get_spec(name).cpu_mhz, get_spec(name).gpu_mhz, get_spec(name).emc_mhz)


def test_unknown_board_discovers_tables_and_names_the_preset_file_it_could_not_match():
    dev = SysfsJetson(SYSROOTS / "unknown-board")
    assert dev.report.model.builtin is None
    assert (len(dev.spec.core_counts), dev.spec.cpu_mhz, dev.spec.gpu_mhz, dev.spec.emc_mhz) == (
        4, (422.4, 729.6, 1036.8), (306.0, 612.0), (665.6, 2133.0))
    assert dev.spec.presets == () and dev.preset_source == "none"
    msg = next(m for m in dev.report.missing if m.startswith("presets"))
    assert "/etc/nvpmodel.conf" in msg and "CORE_7" in msg and "4 CPUs" in msg


def test_thor_is_recognised_and_says_why_it_has_no_builtin_spec(tmp_path):
    root = copy_root("orin-agx-jp6", tmp_path)
    (root / "proc/device-tree/model").write_bytes(b"NVIDIA Jetson AGX Thor Developer Kit\0")
    (root / "proc/device-tree/compatible").write_bytes(b"nvidia,p3971-0089+p3834-0008\0nvidia,p3834-0008\0nvidia,tegra264\0")
    rep = discover(root)
    assert rep.model.builtin is None and rep.model.known == "thor" and rep.model.soc == "t264"
    assert any("not published" in m for m in rep.missing)


# --- telemetry ---------------------------------------------------------------------------------
def test_telemetry_reads_rails_zones_and_clocks_of_a_fake_board():
    dev = SysfsJetson(SYSROOTS / "orin-nx")
    t = dev.telemetry()
    assert t.rails_w == pytest.approx({"VDD_IN": 5.024 * 1.032, "VDD_CPU_GPU_CV": 5.016 * 0.164,
                                       "VDD_SOC": 5.016 * 0.287})
    assert t.power_w == pytest.approx(5.024 * 1.032)  # VDD_IN is the total
    zones = {z.name: z for z in t.zones}
    assert "tj-thermal" not in zones  # disabled on P3767: reads empty, skipped
    assert zones["cpu-thermal"].temp_c == pytest.approx(43.093) and zones["cpu-thermal"].trip_c == 99.0
    assert (t.clocks.cores, t.clocks.cpu_mhz, t.clocks.gpu_mhz, t.clocks.emc_mhz) == (4, 1113.6, 306.0, 2133.0)
    assert not t.throttled


def test_telemetry_flags_a_pinned_clock_running_below_its_pin_and_a_hot_zone(tmp_path):
    root = copy_root("orin-nx", tmp_path)
    dev = SysfsJetson(root)
    mode = PowerMode(4, 1651.2, 612.0, 2133.0)
    dev.apply(mode)
    # a fake tree has no kernel behind it: the clocks follow their pins by hand
    (root / "sys/devices/system/cpu/cpufreq/policy0/scaling_cur_freq").write_text("1651200\n")
    (root / "sys/devices/platform/17000000.gpu/devfreq_dev/cur_freq").write_text("612000000\n")
    t = dev.telemetry()
    assert (t.pinned.cpu_mhz, t.pinned.gpu_mhz, t.pinned.emc_mhz) == (1651.2, 612.0, 2133.0)
    assert not t.throttled
    # the thermal governor caps the GPU below the pinned 612 MHz
    (root / "sys/devices/platform/17000000.gpu/devfreq_dev/cur_freq").write_text("408000000\n")
    t = dev.telemetry()
    assert t.throttled and any(r.startswith("gpu 408") for r in t.throttle_reasons)
    (root / "sys/devices/platform/17000000.gpu/devfreq_dev/cur_freq").write_text("612000000\n")
    (root / "sys/class/thermal/thermal_zone1/temp").write_text("99500\n")
    t = dev.telemetry()
    assert t.throttled and t.throttle_reasons == ("gpu-thermal 99.5 °C >= trip 99.0 °C",)
    dev.restore()


def test_emc_as_a_devfreq_device_is_discovered_pinned_and_restored(tmp_path):
    """Thor's layout for the memory clock: /sys/class/devfreq/bwmgr (min / max / cur, Hz). The
    tables here are the Orin NX's (Thor's are not published): only the layout is Thor's."""
    root = copy_root("orin-nx", tmp_path)
    shutil.rmtree(root / "sys/kernel/debug")
    bw = root / "sys/class/devfreq/bwmgr"
    bw.mkdir(parents=True)
    for name, text in (("available_frequencies", "204000000 665600000 2133000000 3199000000"),
                       ("min_freq", "204000000"), ("max_freq", "3199000000"), ("cur_freq", "665600000"),
                       ("governor", "nvhost_podgov")):
        (bw / name).write_text(text + "\n")
    dev = SysfsJetson(root)
    assert dev.report.emc.method == "devfreq" and dev.spec.emc_mhz == (204.0, 665.6, 2133.0, 3199.0)
    assert "EMC control (devfreq)" in dev.report.found
    assert dev.current_mode().emc_mhz == 665.6  # not pinned: the running rate
    dev.apply(PowerMode(4, 1651.2, 612.0, 2133.0))
    assert read(root, "sys/class/devfreq/bwmgr/min_freq") == read(root, "sys/class/devfreq/bwmgr/max_freq") == "2133000000"
    assert dev.current_mode().emc_mhz == 2133.0 and dev.telemetry().pinned.emc_mhz == 2133.0
    dev.restore()
    assert (read(root, "sys/class/devfreq/bwmgr/min_freq"), read(root, "sys/class/devfreq/bwmgr/max_freq")) == (
        "204000000", "3199000000")


def test_thor_style_ina238_system_input_is_the_board_power(tmp_path):
    """Thor's carrier reads its input with an INA238 (hwmon: in1 mV, curr1 mA, power1 µW), one
    rail jetson-stats calls VIN; the reading values here are made up."""
    root = copy_root("unknown-board", tmp_path)
    hw = root / "sys/bus/i2c/drivers/ina238/2-0044/hwmon/hwmon3"
    hw.mkdir(parents=True)
    (root / "sys/bus/i2c/drivers/ina238/2-0044/name").write_text("ina238\n")
    for name, text in (("name", "ina238"), ("in1_input", "19200"), ("curr1_input", "1480"),
                       ("power1_input", "28416000")):
        (hw / name).write_text(text + "\n")
    dev = SysfsJetson(root)
    assert [(r.name, r.kind) for r in dev.report.rails] == [("VIN", "ina238")]
    assert dev.power_sensor().read_w() == pytest.approx(28.416)
    t = dev.telemetry()
    assert t.power_w == pytest.approx(28.416) and t.rails_w == {"VIN": pytest.approx(28.416)}
