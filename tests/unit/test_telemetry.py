"""Telemetry: the throttling rule, thermal zones, energy counters, the sampler and its cost, the
simulated hot board, and the jetson-stats mapping against the sysfs reading of the same fake board."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from edgetune.devices.simulated.device import SimulatedJetson
from edgetune.devices.sysfs import SysfsJetson
from edgetune.devices.thermal import find_zones, read_zones
from edgetune.errors import InvalidArgument
from edgetune.telemetry import (
    Clocks,
    EnergyCounter,
    TelemetrySample,
    TelemetrySampler,
    ZoneReading,
    throttle_reasons,
)
from edgetune.telemetry.jtop import JtopSnapshot, sample_from_jtop
from edgetune.telemetry.sampler import TOTAL

SYSROOTS = Path(__file__).resolve().parents[1] / "fixtures" / "sysroots"


# --- the rule ----------------------------------------------------------------------------------
def test_throttling_is_a_zone_past_its_trip_or_a_clock_below_its_pin():
    cool = (ZoneReading("cpu-thermal", 60.0, 99.0), ZoneReading("PMIC-Die", 100.0, None))
    assert throttle_reasons(Clocks(8, 1984.0, 918.0, 3199.0), Clocks(None, 1984.0, 918.0, 3199.0), cool) == ()
    # within the rounding tolerance: not throttled; governor ranges (no pin): never by clocks
    assert throttle_reasons(Clocks(8, 1960.0, 918.0, 3199.0), Clocks(None, 1984.0, None, None), cool) == ()
    assert throttle_reasons(Clocks(8, 729.6, 306.0, 204.0), Clocks(), cool) == ()
    hot = (ZoneReading("tj-thermal", 99.0, 99.0),)
    assert throttle_reasons(Clocks(), Clocks(), hot) == ("tj-thermal 99.0 °C >= trip 99.0 °C",)
    assert throttle_reasons(Clocks(8, 1984.0, 612.0, 3199.0), Clocks(None, 1984.0, 918.0, None), cool) == (
        "gpu 612 MHz < applied 918 MHz",)


def test_thermal_zones_and_their_first_throttling_trip():
    root = str(SYSROOTS / "nano")
    zones = {z.name: z for z in read_zones(root, find_zones(root))}
    assert list(zones) == ["AO-therm", "CPU-therm", "GPU-therm", "PLL-therm", "PMIC-Die", "thermal-fan-est"]
    assert zones["CPU-therm"].temp_c == 34.0 and zones["CPU-therm"].trip_c == 99.0  # passive beats critical
    assert zones["PMIC-Die"].trip_c is None and not zones["PMIC-Die"].past_trip
    root = str(SYSROOTS / "orin-nano-super")
    assert "tj-thermal" not in {z.name for z in read_zones(root, find_zones(root))}  # disabled: reads empty


# --- energy and the sampler --------------------------------------------------------------------
def test_energy_counter_is_a_monotonic_trapezoid_per_rail():
    e = EnergyCounter()
    assert e.add(10.0, {"VDD_IN": 5.0, TOTAL: 5.0}) == {}
    assert e.add(12.0, {"VDD_IN": 7.0, TOTAL: 7.0}) == pytest.approx({"VDD_IN": 12.0, TOTAL: 12.0})
    e.add(13.0, {"VDD_IN": -1.0, TOTAL: 7.0})  # a glitched reading never lowers a counter
    e.add(12.5, {"VDD_IN": 5.0, TOTAL: 5.0})  # nor does a clock going backwards
    j = e.joules()
    assert j["VDD_IN"] >= 12.0 and j[TOTAL] == pytest.approx(12.0 + 7.0)


def test_sampler_integrates_power_over_wall_time_and_feeds_listeners():
    seen: list[tuple[TelemetrySample, dict]] = []
    s = TelemetrySampler(lambda: TelemetrySample(0.0, 4.0, {"VDD_IN": 4.0}), rate_hz=50.0,
                         on_sample=[lambda sample, joules: seen.append((sample, joules))])
    t0 = time.monotonic()
    s.start()
    time.sleep(0.4)
    s.stop()
    elapsed = time.monotonic() - t0
    j = s.energy.joules()
    assert 4.0 * (elapsed - 0.1) < j[TOTAL] <= 4.0 * elapsed + 1e-9
    assert j["VDD_IN"] == pytest.approx(j[TOTAL])
    assert len(seen) == s.samples_taken >= 10
    assert [b[TOTAL] for _, b in seen] == sorted(b[TOTAL] for _, b in seen)
    with pytest.raises(InvalidArgument, match="telemetry_hz"):
        TelemetrySampler(lambda: None, rate_hz=0)  # type: ignore[arg-type, return-value]


def test_sampler_survives_a_failing_read():
    calls = iter([OSError("i2c busy")] + [None] * 100)

    def read():
        exc = next(calls)
        if exc:
            raise exc
        return TelemetrySample(0.0, 1.0)

    s = TelemetrySampler(read, rate_hz=100.0)
    assert s.sample_once() is None and s.errors == 1
    assert s.sample_once() is not None and s.samples_taken == 1


def test_sysfs_sampler_cost_per_sample_is_negligible_at_1_hz():
    dev = SysfsJetson(SYSROOTS / "orin-agx-jp6")  # 4 rails, 9 zones: the biggest fake board
    n = 200
    c0, t0 = time.process_time(), time.perf_counter()
    for _ in range(n):
        dev.telemetry()
    cpu_ms = (time.process_time() - c0) / n * 1000
    wall_ms = (time.perf_counter() - t0) / n * 1000
    print(f"sysfs telemetry read: {cpu_ms:.3f} ms CPU, {wall_ms:.3f} ms wall per sample "
          f"-> {cpu_ms / 10:.4f} % of a core at 1 Hz")
    assert cpu_ms < 10.0  # < 1 % of a core at 1 Hz even on a slow CI machine


# --- the simulated hot board -------------------------------------------------------------------
def test_simulated_board_heats_throttles_and_cools_down():
    dev = SimulatedJetson("orin-nano-super", seed=3)
    t = dev.telemetry()
    assert {z.name for z in t.zones} == {"cpu-thermal", "gpu-thermal", "tj-thermal"}
    assert not t.throttled and t.clocks.gpu_mhz == t.pinned.gpu_mhz == 1020.0
    idle = dev.temperatures_c()
    t0 = dev.clock.now_s()
    dev.run("resnet18", "train", 16, 50)
    mid = (t0 + dev.clock.now_s()) / 2
    assert dev.temperatures_c(mid)["tj-thermal"] > idle["tj-thermal"] + 5.0  # load warms the board
    dev.heat(80.0, tau_s=30.0)
    hot = dev.telemetry()
    assert hot.throttled and hot.clocks.gpu_mhz < hot.pinned.gpu_mhz and hot.clocks.cpu_mhz < hot.pinned.cpu_mhz
    dev.sleep(200.0)
    assert not dev.telemetry().throttled
    with pytest.raises(InvalidArgument):
        dev.heat(-1.0)


# --- jetson-stats: same fields as sysfs on the same fake board ---------------------------------
def _jtop_view_of(root: Path) -> JtopSnapshot:
    """What jtop's service reports for the files of ``root``, in its units (documented in
    edgetune.telemetry.jtop): integer mW, °C, kHz; zone names shortened at the first '-'."""
    hw = root / "sys/bus/i2c/drivers/ina3221/1-0040/hwmon/hwmon1"
    rails = {}
    for k in (1, 2, 3):
        mv, ma = int((hw / f"in{k}_input").read_text()), int((hw / f"curr{k}_input").read_text())
        rails[(hw / f"in{k}_label").read_text().strip()] = {"online": True, "type": "INA3221", "volt": mv,
                                                              "curr": ma, "power": mv * ma // 1000}
    temps = {}
    for z in sorted((root / "sys/class/thermal").iterdir()):
        raw = (z / "temp").read_text().strip()
        name = (z / "type").read_text().strip().split("-")[0]
        temps[name] = {"online": bool(raw), "temp": int(raw) / 1000 if raw else -256}
    pol = root / "sys/devices/system/cpu/cpufreq/policy0"
    freq = {k: int((pol / f"scaling_{k}_freq").read_text()) for k in ("min", "max", "cur")}
    online = [True] + [(root / f"sys/devices/system/cpu/cpu{i}/online").read_text().strip() == "1"
                       for i in range(1, 8)]
    dv = root / "sys/devices/platform/17000000.gpu/devfreq_dev"
    gfreq = {k: int((dv / f"{k}_freq").read_text()) // 1000 for k in ("min", "max", "cur")}
    emc_khz = int((root / "sys/kernel/debug/bpmp/debug/clk/emc/rate").read_text()) // 1000
    return JtopSnapshot(
        power={"rail": rails, "tot": {"power": rails["VDD_IN"]["power"], "name": "VDD_IN"}},
        temperature=temps,
        cpu={"cpu": [{"online": on, "freq": dict(freq) if on else {}} for on in online]},
        gpu={"gpu": {"type": "integrated", "freq": gfreq}},
        memory={"EMC": {"online": True, "cur": emc_khz}},
    )


def test_jtop_and_sysfs_backends_give_the_same_fields_for_the_same_fake_board():
    root = SYSROOTS / "orin-nx"
    dev = SysfsJetson(root)
    sysfs = dev.telemetry()
    trips = {z.name: z.trip_c for z in sysfs.zones}
    jtop = sample_from_jtop(_jtop_view_of(root), sysfs.t_s, trips)
    assert jtop.backend == "jtop" and sysfs.backend == "sysfs"
    assert set(jtop.as_dict()) == set(sysfs.as_dict())
    assert jtop.rails_w == pytest.approx(sysfs.rails_w, abs=1e-3)  # jtop rounds to whole mW
    assert jtop.power_w == pytest.approx(sysfs.power_w, abs=1e-3)
    assert jtop.clocks == sysfs.clocks and jtop.pinned == sysfs.pinned
    by_short = {z.name.split("-")[0]: (z.temp_c, z.trip_c) for z in sysfs.zones}
    assert {z.name: (z.temp_c, z.trip_c) for z in jtop.zones} == by_short  # tj (offline) skipped by both
    assert jtop.throttled == sysfs.throttled is False


def test_jtop_source_needs_jetson_stats_and_its_service_and_auto_falls_back_to_the_device():
    from edgetune.errors import FailedPrecondition
    from edgetune.telemetry.jtop import JTOP_SOCKET, telemetry_reader

    dev = SysfsJetson(SYSROOTS / "orin-nx")
    if not Path(JTOP_SOCKET).exists():  # this machine is no Jetson: no jtop service
        with pytest.raises(FailedPrecondition, match="jetson-stats is not installed|jtop service is not running"):
            telemetry_reader(dev, "jtop")
        assert telemetry_reader(dev, "auto") == dev.telemetry
    sim = SimulatedJetson("orin-nx")
    assert telemetry_reader(sim, "auto") == sim.telemetry  # never jtop for a simulated board
    with pytest.raises(InvalidArgument, match="telemetry_source"):
        telemetry_reader(dev, "tegrastats")
