"""``edgetune modes`` (libs/edgetune/cli/modes.py): the mode table of docs/contract.md."""

from __future__ import annotations

import csv
import importlib
import importlib.util
import io
from pathlib import Path

import pytest
from click.testing import CliRunner

import edgetune

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "nvpmodel"


def _modes_command():
    """The click command; loaded from its file if a sibling command module of the root is not there yet."""
    try:
        return importlib.import_module("edgetune.cli.modes").command
    except ImportError:  # edgetune.cli/__init__ imports every command module; others may be in progress
        path = Path(edgetune.__file__).parent / "cli" / "modes.py"
        spec = importlib.util.spec_from_file_location("_edgetune_cli_modes_under_test", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module.command


command = _modes_command()


def run(*args: str):
    return CliRunner().invoke(command, list(args))


def rows(text: str) -> list[dict]:
    return list(csv.DictReader(io.StringIO(text)))


@pytest.mark.parametrize("device,grid,count", [
    ("orin-agx", "full", 18_096),
    ("orin-agx", "powertrain", 4_368),
    ("orin-agx", "fulcrum", 441),
    ("xavier-agx", "full", 29_232),
])
def test_counts(device, grid, count):
    res = run("--device", device, "--grid", grid)
    assert res.exit_code == 0, res.output
    table = rows(res.output)
    assert len(table) == count
    assert list(table[0]) == ["cores", "cpu_mhz", "gpu_mhz", "emc_mhz"]
    assert len({tuple(r.values()) for r in table}) == count


def test_default_grid_is_full_and_values_are_plain_numbers():
    out = run("--device", "orin-agx").output.splitlines()
    assert out[0] == "cores,cpu_mhz,gpu_mhz,emc_mhz"
    assert out[1] == "1,115.2,114.75,204" and out[-1] == "12,2201.6,1300.5,3199"


def test_fulcrum_contains_gmd_midpoint():
    table = rows(run("--device", "orin-agx", "--grid", "fulcrum").output)
    assert {"cores": "8", "cpu_mhz": "1344", "gpu_mhz": "726.75", "emc_mhz": "2133"} in table


@pytest.mark.parametrize("device", ["orin-agx", "xavier-agx", "orin-nano", "nano", "tx2-nx"])
@pytest.mark.parametrize("grid", ["full", "powertrain", "fulcrum"])
def test_every_device_and_grid(device, grid):
    res = run("--device", device, "--grid", grid)
    assert res.exit_code == 0 and len(rows(res.output)) > 0


def test_out_file_and_summary(tmp_path):
    out = tmp_path / "modes.csv"
    res = run("--device", "orin-agx", "--out", str(out))
    assert res.exit_code == 0
    # the summary is the only output (it goes to stderr; CliRunner's output includes stderr)
    assert res.output.strip() == f"wrote 18096 modes of orin-agx (full) to {out}"
    assert len(rows(out.read_text())) == 18_096


def test_unknown_device_names_option_and_allowed_values():
    res = run("--device", "jetson-thor")
    assert res.exit_code == 2
    assert "--device" in res.output and "jetson-thor" in res.output
    for name in ("orin-agx", "xavier-agx", "orin-nano", "nano", "tx2-nx"):
        assert name in res.output
    assert "Traceback" not in res.output


def test_unknown_grid_names_option_and_allowed_values():
    res = run("--device", "nano", "--grid", "dense")
    assert res.exit_code == 2
    assert "--grid" in res.output and all(g in res.output for g in ("full", "powertrain", "fulcrum"))


def test_presets_builtin_and_from_a_real_conf():
    table = rows(run("--device", "orin-agx", "--presets").output)
    assert [r["name"] for r in table] == ["MAXN", "MODE_15W", "MODE_30W", "MODE_50W"]
    res = run("--device", "nano", "--presets", "--nvpmodel", str(FIXTURES / "nvpmodel_t210_jetson-nano.conf"))
    assert res.exit_code == 0
    assert rows(res.output)[1] == {"id": "1", "name": "5W", "budget_w": "5", "cores": "2",
                                   "cpu_mhz": "825.6", "gpu_mhz": "614.4", "emc_mhz": "1600"}


def test_presets_from_a_malformed_conf_exit_2(tmp_path):
    bad = tmp_path / "nvpmodel.conf"
    bad.write_text("< POWER_MODEL ID=0 NAME=MAXN >\nGPU MAX_FREQ\n")
    res = run("--device", "nano", "--presets", "--nvpmodel", str(bad))
    assert res.exit_code == 2 and "nvpmodel.conf:2" in res.output


def test_registered_in_the_root_command():
    try:
        from edgetune.cli import main
    except ImportError as exc:  # another command module of the root is not there yet
        pytest.skip(f"edgetune.cli root not importable yet: {exc}")
    assert main(["modes", "--device", "orin-agx", "--grid", "fulcrum", "--out", "/dev/null"]) == 0
    assert main(["modes", "--device", "nope"]) == 2


# --- Orin NX, Orin Nano Super, Thor -------------------------------------------------
@pytest.mark.parametrize("device,cores,sizes,maxima", [
    ("orin-nx", 8, (26, 7, 4), (1984.0, 918.0, 3199.0)),
    ("sim:orin-nx", 8, (26, 7, 4), (1984.0, 918.0, 3199.0)),
    ("orin-nano-super", 6, (22, 8, 4), (1728.0, 1020.0, 3199.0)),
    ("sim:orin-nano-super", 6, (22, 8, 4), (1728.0, 1020.0, 3199.0)),
])
def test_new_devices_write_their_full_mode_space(device, cores, sizes, maxima):
    res = run("--device", device)
    assert res.exit_code == 0, res.output
    table = rows(res.output)
    assert len(table) == cores * sizes[0] * sizes[1] * sizes[2]  # the cited tables' product
    for i, col in enumerate(("cpu_mhz", "gpu_mhz", "emc_mhz")):
        values = {float(r[col]) for r in table}
        assert len(values) == sizes[i] and max(values) == maxima[i]
    assert {int(r["cores"]) for r in table} == set(range(1, cores + 1))


@pytest.mark.parametrize("device,conf", [
    ("orin-nx", "nvpmodel_p3767_0000_orin_nx.conf"),
    ("sim:orin-nano-super", "nvpmodel_p3767_0003_super_orin_nano.conf"),
])
def test_new_device_presets_equal_those_parsed_from_the_real_conf(device, conf):
    builtin = run("--device", device, "--presets")
    parsed = run("--device", device, "--presets", "--nvpmodel", str(FIXTURES / conf))
    assert builtin.exit_code == parsed.exit_code == 0, builtin.output + parsed.output
    assert builtin.output == parsed.output and len(rows(builtin.output)) >= 3


def test_thor_is_refused_with_the_reason():
    for name in ("thor", "sim:thor"):
        res = run("--device", name)
        assert res.exit_code == 2 and "not published" in res.output and "Traceback" not in res.output


def test_a_backend_names_the_device_too_sysfs_tables_and_replayed_values(tmp_path):
    """``--device`` takes every backend form here as everywhere: a sysroot's discovered tables give the
    same modes as the built-in spec of that board; a replayed table's grid is the values it recorded."""
    sysroot = Path(__file__).resolve().parents[1] / "fixtures" / "sysroots" / "orin-agx-jp6"
    for grid in ("full", "fulcrum"):
        res = run("--device", f"sysfs:{sysroot}", "--grid", grid)
        assert res.exit_code == 0, res.output
        assert res.output == run("--device", "orin-agx", "--grid", grid).output
    table = tmp_path / "truth.csv"
    table.write_text("cores,cpu_mhz,gpu_mhz,emc_mhz,batch_size,time_ms,power_w,workload,role\n"
                     "12,2201.6,1300.5,3199,16,10,30,resnet18,train\n8,1728,930.75,3199,16,15,20,resnet18,train\n")
    got = {(r["cores"], r["gpu_mhz"]) for r in rows(run("--device", f"replay:{table}").output)}
    assert got == {(c, g) for c in ("8", "12") for g in ("930.75", "1300.5")}
    missing = run("--device", f"replay:{tmp_path / 'none.csv'}")
    assert missing.exit_code == 2 and "--device" in missing.output and "replay:FILE.csv" in missing.output
