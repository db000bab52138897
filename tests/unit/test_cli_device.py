"""``edgetune device --device SPEC [--json]`` for a sysroot, a replay table and the simulator."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from edgetune.cli.device import command
from edgetune.tables import write_table

SYSROOTS = Path(__file__).resolve().parents[1] / "fixtures" / "sysroots"


def run_json(*args: str) -> dict:
    result = CliRunner().invoke(command, [*args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def test_sysfs_sysroot_json():
    info = run_json("--device", f"sysfs:{SYSROOTS / 'orin-agx-jp6'}")
    assert info["backend"] == "sysfs" and info["name"] == "orin-agx" and info["soc"] == "t234"
    assert info["model"] == "NVIDIA Jetson AGX Orin Developer Kit"
    assert info["cores"] == 12 and info["n_modes"] == 18_096
    assert {k: v["count"] for k, v in info["tables"].items()} == {"cores": 12, "cpu_mhz": 29, "gpu_mhz": 13,
                                                                  "emc_mhz": 4}
    assert info["tables"]["gpu_mhz"]["min"] == 114.75 and info["tables"]["gpu_mhz"]["max"] == 1300.5
    assert info["current_mode"] == {"cores": 8, "cpu_mhz": 1113.6, "gpu_mhz": 216.75, "emc_mhz": 2133.0}
    assert [p["name"] for p in info["presets"]][0] == "MAXN"
    assert info["power"]["power_w"] == pytest.approx(7.144, abs=1e-3)
    assert set(info["power"]["rails_w"]) == {"VDD_GPU_SOC", "VDD_CPU_CV", "VIN_SYS_5V0", "VDDQ_VDD2_1V8AO"}
    disc = info["discovery"]
    assert disc["l4t"] == "R36.4.3" and disc["missing"] == []
    assert disc["gpu"]["devfreq"] == "sys/devices/platform/17000000.gpu/devfreq_dev"


def test_sysfs_reports_what_is_missing(tmp_path):
    import shutil

    root = tmp_path / "nano"
    shutil.copytree(SYSROOTS / "nano", root)
    shutil.rmtree(root / "sys/bus")
    info = run_json("--device", f"sysfs:{root}", "--hard-limit-w", "10")
    assert "error" in info["power"] and info["hard_limit_w"] == 10.0
    assert any("power monitor" in m for m in info["discovery"]["missing"])


def test_sysfs_rich_table():
    result = CliRunner().invoke(command, ["--device", f"sysfs:{SYSROOTS / 'nano'}"])
    assert result.exit_code == 0, result.output
    for text in ("NVIDIA Jetson Nano Developer Kit", "5,040", "POM_5V_IN", "t210-override", "MAXN"):
        assert text in result.output


def test_replay_table(tmp_path):
    rows = [{"cores": c, "cpu_mhz": 1113.6, "gpu_mhz": g, "emc_mhz": 3199.0, "batch_size": b, "time_ms": 10.0 * b / c,
             "power_w": 10.0 + c + g / 100, "workload": "resnet18", "role": "train"}
            for c in (4, 8) for g in (420.75, 828.75) for b in (16, 32)]
    path = tmp_path / "truth.csv"
    write_table(rows, path)
    info = run_json("--device", f"replay:{path}")
    assert info["backend"] == "replay" and info["name"] == "replay" and info["n_modes"] == 4
    assert info["replay"]["rows"] == 8 and info["replay"]["recorded_modes"] == 4
    assert info["replay"]["batch_sizes"] == [16, 32] and info["replay"]["workloads"] == ["resnet18"]
    assert info["power"]["power_w"] == pytest.approx(min(r["power_w"] for r in rows))
    result = CliRunner().invoke(command, ["--device", f"replay:{path}"])
    assert result.exit_code == 0 and "recorded modes" in result.output


def test_simulated_device():
    pytest.importorskip("edgetune.devices.simulated")
    info = run_json("--device", "sim:orin-agx")
    assert info["backend"] == "sim" and info["n_modes"] == 18_096 and info["power"]["power_w"] > 0


def test_bad_device_exits_2_with_the_allowed_values(capsys):
    from edgetune.cli import main

    assert main(["device", "--device", "gpu0"]) == 2
    err = capsys.readouterr().err
    assert "device: unknown device 'gpu0'" in err and "sysfs[:ROOT]" in err and "Traceback" not in err
    assert main(["device", "--device", "replay:/nonexistent/truth.csv"]) == 2


# --- --watch ------------------------------------------------------------------------
def test_watch_prints_one_plain_line_per_sample_off_a_terminal():
    res = CliRunner().invoke(command, ["--device", "sim:orin-nx", "--watch", "--count", "3", "--interval", "0.01"])
    assert res.exit_code == 0, res.output
    lines = res.output.strip().splitlines()
    assert len(lines) == 3
    assert all("power" in ln and "gpu-thermal" in ln and "gpu 918/918 MHz" in ln and "not throttled" in ln
               for ln in lines)
    energy = [float(ln.split("energy ")[1].split(" J")[0]) for ln in lines]
    assert energy[0] == 0.0 and energy[2] > 0.0  # the counter grows between samples


def test_watch_json_of_a_fake_board_has_every_field():
    res = CliRunner().invoke(command, ["--device", f"sysfs:{SYSROOTS / 'orin-nano-super'}", "--watch",
                                       "--count", "2", "--interval", "0.01", "--json"])
    assert res.exit_code == 0, res.output
    docs = [json.loads(ln) for ln in res.output.strip().splitlines()]
    assert len(docs) == 2
    d = docs[1]
    assert d["backend"] == "sysfs" and d["rails_w"]["VDD_IN"] == pytest.approx(5.032 * 1.104)
    assert {z["name"] for z in d["zones"]} >= {"cpu-thermal", "gpu-thermal"}
    assert d["clocks"] == {"cores": 6, "cpu_mhz": 1113.6, "gpu_mhz": 306.0, "emc_mhz": 2133.0}
    assert d["throttled"] is False and d["energy_j"]["total"] > 0.0


def test_watch_rich_table_refreshes_in_place():
    from rich.console import Console

    from edgetune.cli import device as device_cli
    from edgetune.devices.simulated.device import SimulatedJetson

    dev = SimulatedJetson("orin-nano-super")
    dev.heat(90.0, tau_s=1e6)  # a hot board: the table says why it throttles
    printed: list[str] = []
    console = Console(file=_Sink(printed), force_terminal=True, width=120)
    shown = device_cli.watch(dev.telemetry, dev.clock, 0.01, 2, "rich", "test board", console=console)
    text = "".join(printed)
    assert shown == 2 and "tj-thermal" in text and "throttled" in text and "yes" in text
    assert "\x1b[" in text  # cursor movement: the table is redrawn in place


class _Sink:
    def __init__(self, out: list) -> None:
        self.out = out

    def write(self, s: str) -> int:
        self.out.append(s)
        return len(s)

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return True


def test_watch_options_need_watch_and_valid_values():
    res = CliRunner().invoke(command, ["--device", "sim:orin-nx", "--count", "2"])
    assert res.exit_code == 2 and "--watch" in res.output
    res = CliRunner().invoke(command, ["--device", "sim:orin-nx", "--watch", "--interval", "0"])
    assert res.exit_code == 2 and "--interval" in res.output
