"""``edgetune optimize select|joint|frontier``: exact JSON (docs/contract.md), human output, exit codes."""

import json

import pytest
from click.testing import CliRunner

from edgetune.cli.optimize import command as optimize

HEADER = "cores,cpu_mhz,gpu_mhz,emc_mhz,batch_size,time_ms,power_w,power_std_w\n"
ROWS = [
    "8,1344,727,2133,16,100,20,1\n",
    "12,2200,1300,3199,16,60,51.1,2\n",
    "4,422,115,665,16,490,14.7,0.5\n",
    "8,1344,727,2133,32,180,19.5,3\n",
]


@pytest.fixture
def table(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text(HEADER + "".join(ROWS))
    return str(path)


def run(*args):
    return CliRunner().invoke(optimize, [str(a) for a in args])


def test_select_json_exact(table):
    r = run("select", "--table", table, "--power-budget", "30", "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout) == {
        "feasible": True, "mode": {"cores": 8, "cpu_mhz": 1344.0, "gpu_mhz": 727.0, "emc_mhz": 2133.0},
        "batch_size": 16, "time_ms": 100.0, "power_w": 20.0}
    assert list(json.loads(r.stdout)) == ["feasible", "mode", "batch_size", "time_ms", "power_w"]


def test_select_infeasible_is_exit_0(table):
    r = run("select", "--table", table, "--power-budget", "10", "--json")
    assert r.exit_code == 0
    out = json.loads(r.stdout)
    assert out["feasible"] is False and set(out) == {"feasible", "reason"} and "10 W" in out["reason"]


def test_select_sweep_json(table):
    r = run("select", "--table", table, "--power-budget", "14:52:1", "--json")
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert [o["power_budget_w"] for o in out] == list(range(14, 53))
    assert out[0] == {"power_budget_w": 14, "feasible": False, "reason": out[0]["reason"]}
    assert out[1]["time_ms"] == 490.0 and out[1]["feasible"] is True
    assert out[5]["time_ms"] == 490.0  # 19 W: the 19.5 W row does not fit yet
    assert out[6]["time_ms"] == 100.0 and out[6]["power_w"] == 20.0
    assert out[-1]["time_ms"] == 60.0
    for o in out:
        single = json.loads(run("select", "--table", table, "--power-budget", o["power_budget_w"], "--json").stdout)
        assert {k: v for k, v in o.items() if k != "power_budget_w"} == single


def test_select_risk_objective_time_budget(table):
    # upper bounds at risk 0.05 (z = 1.645): 21.64, 54.39, 15.52, 24.43 W
    def pick(*args):
        r = run("select", "--table", table, *args, "--json")
        assert r.exit_code == 0, r.output
        return json.loads(r.stdout)

    assert pick("--power-budget", "21")["time_ms"] == 100.0
    assert pick("--power-budget", "21", "--risk", "0.05")["time_ms"] == 490.0
    assert pick("--power-budget", "22", "--risk", "0.05")["time_ms"] == 100.0
    assert pick("--objective", "power", "--time-budget-ms", "200")["power_w"] == 19.5
    # energies 2000, 3066, 7203, 3510 mJ
    assert pick("--objective", "energy", "--power-budget", "60")["time_ms"] == 100.0
    assert pick("--power-budget", "60", "--time-budget-ms", "50")["feasible"] is False


def test_select_human_output(table):
    r = run("select", "--table", table, "--power-budget", "30")
    assert r.exit_code == 0 and "100 ms" in r.stdout and "1344" in r.stdout
    r = run("select", "--table", table, "--power-budget", "10:30:10")
    assert r.exit_code == 0 and "infeasible" in r.stdout
    r = run("select", "--table", table, "--power-budget", "10")
    assert r.exit_code == 0 and "infeasible" in r.stdout


@pytest.mark.parametrize("args,needle", [
    (["--power-budget", "50:17:1"], "--power-budget"),
    (["--power-budget", "-3"], "--power-budget"),
    (["--power-budget", "17:50:0"], "--power-budget"),
    (["--power-budget", "abc"], "--power-budget"),
    (["--power-budget", "30", "--risk", "0.9"], "risk"),
    (["--power-budget", "30", "--time-budget-ms", "-1"], "--time-budget-ms"),
])
def test_select_bad_args_exit_2(table, args, needle):
    r = run("select", "--table", table, *args)
    assert r.exit_code == 2 and needle in r.output


def test_select_bad_tables_exit_2(tmp_path):
    r = run("select", "--table", tmp_path / "missing.csv", "--power-budget", "30")
    assert r.exit_code == 2 and "missing.csv" in r.output and "no such file" in r.output
    bad = tmp_path / "bad.csv"
    bad.write_text(HEADER + "8,1344,727,2133,16,100,-20,1\n")
    r = run("select", "--table", bad, "--power-budget", "30")
    assert r.exit_code == 2 and "bad.csv:2:power_w" in r.output
    bad.write_text("cores,cpu_mhz,gpu_mhz,emc_mhz,batch_size,time_ms\n8,1,1,1,1,1\n")
    r = run("select", "--table", bad, "--power-budget", "30")
    assert r.exit_code == 2 and "bad.csv:1:power_w" in r.output


# --------------------------------------------------------------------------- joint


@pytest.fixture
def joint_files(tmp_path):
    lut = tmp_path / "lut.csv"
    lut.write_text("batch_size,mode,time_s,power_w\n8,307,100,4.0\n8,460,70,4.4\n8,614,55,5.2\n"
                   "32,153,150,4.2\n32,307,80,4.8\n32,460,56,5.6\n32,614,35,6.6\n")
    eff = tmp_path / "eff.csv"
    eff.write_text("batch_size,passes_to_target\n8,10\n32,15\n64,\n")
    return str(lut), str(eff)


@pytest.mark.parametrize("cap,expected", [
    ("4.5", {"feasible": True, "batch_size": 8, "mode": "460", "time_to_target_s": 700.0, "power_w": 4.4}),
    ("7", {"feasible": True, "batch_size": 32, "mode": "614", "time_to_target_s": 525.0, "power_w": 6.6}),
    ("none", {"feasible": True, "batch_size": 32, "mode": "614", "time_to_target_s": 525.0, "power_w": 6.6}),
])
def test_joint_json_exact(joint_files, cap, expected):
    lut, eff = joint_files
    r = run("joint", "--lut", lut, "--efficiency", eff, "--power-cap", cap, "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout) == expected
    assert list(json.loads(r.stdout)) == list(expected)


def test_joint_infeasible_and_human(joint_files):
    lut, eff = joint_files
    r = run("joint", "--lut", lut, "--efficiency", eff, "--power-cap", "3", "--json")
    assert r.exit_code == 0
    out = json.loads(r.stdout)
    assert set(out) == {"feasible", "reason"} and out["feasible"] is False and "3 W" in out["reason"]
    r = run("joint", "--lut", lut, "--efficiency", eff, "--power-cap", "7")
    assert r.exit_code == 0 and "525" in r.stdout and "614" in r.stdout


def test_joint_bad_input_exit_2(joint_files, tmp_path):
    lut, eff = joint_files
    r = run("joint", "--lut", lut, "--efficiency", eff, "--power-cap", "-1")
    assert r.exit_code == 2 and "--power-cap" in r.output
    r = run("joint", "--lut", lut, "--efficiency", eff, "--power-cap", "lots")
    assert r.exit_code == 2 and "--power-cap" in r.output
    bad = tmp_path / "bad_eff.csv"
    bad.write_text("batch_size,passes_to_target\n8,ten\n")
    r = run("joint", "--lut", lut, "--efficiency", bad, "--power-cap", "7")
    assert r.exit_code == 2 and "bad_eff.csv:2:passes_to_target" in r.output
    r = run("joint", "--lut", tmp_path / "nope.csv", "--efficiency", eff, "--power-cap", "7")
    assert r.exit_code == 2 and "nope.csv" in r.output


def test_through_the_edgetune_entry_point(table, capsys):
    from edgetune.cli import main

    assert main(["optimize", "select", "--table", table, "--power-budget", "30", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["time_ms"] == 100.0
    assert main(["optimize", "select", "--table", table, "--power-budget", "50:17:1"]) == 2
    assert "--power-budget" in capsys.readouterr().err


# --------------------------------------------------------------------------- frontier


@pytest.fixture(scope="module")
def predictions(tmp_path_factory):
    """Every fulcrum-grid mode of the simulated Orin AGX, ResNet18 train bs 16 (the 'predictions')."""
    from edgetune.devices.simulated.tables import truth_table
    from edgetune.powermodes.grids import named_grid
    from edgetune.powermodes.specs import get_spec
    from edgetune.tables import write_table

    grid = named_grid(get_spec("orin-agx"), "fulcrum").array()
    rows = truth_table("orin-agx", "resnet18", "train", grid, [16])
    path = tmp_path_factory.mktemp("frontier") / "pred.csv"
    write_table(rows, path)
    return str(path), rows


def test_frontier_picks_unprofiled_front_modes_and_writes_a_mode_table(predictions, tmp_path):
    from edgetune.optimization.pareto import pareto_mask
    from edgetune.tables import read_mode_table, write_table

    path, rows = predictions
    profiled = tmp_path / "profiled.csv"
    write_table([{k: r[k] for k in ("cores", "cpu_mhz", "gpu_mhz", "emc_mhz")} for r in rows[::40]], profiled)
    out = tmp_path / "next.csv"
    r = run("frontier", "--table", path, "--profiled", profiled, "--n", 4, "--power-budget", "20:40",
            "--out", out, "--json")
    assert r.exit_code == 0, r.output
    got = json.loads(r.stdout)
    assert got["profiled"] == len(rows[::40]) and len(got["modes"]) == 4
    front = {tuple(float(rows[i][k]) for k in ("cores", "cpu_mhz", "gpu_mhz", "emc_mhz"))
             for i in pareto_mask([x["time_ms"] for x in rows], [x["power_w"] for x in rows]).nonzero()[0]}
    seen = {tuple(float(x[k]) for k in ("cores", "cpu_mhz", "gpu_mhz", "emc_mhz")) for x in rows[::40]}
    picked = {tuple(float(m[k]) for k in ("cores", "cpu_mhz", "gpu_mhz", "emc_mhz")) for m in got["modes"]}
    assert picked <= front - seen
    assert all(18 <= w <= 41 for w in got["predicted_power_w"])
    assert [tuple(float(x[k]) for k in ("cores", "cpu_mhz", "gpu_mhz", "emc_mhz"))
            for x in read_mode_table(str(out)).rows] == [tuple(float(m[k]) for k in m) for m in got["modes"]]
    human = run("frontier", "--table", path, "--profiled", profiled, "--n", 2)
    assert human.exit_code == 0 and "next 2 modes to profile" in human.output


def test_frontier_bad_input_exits_2_naming_the_option(predictions, table, tmp_path):
    path, _rows = predictions
    r = run("frontier", "--table", table, "--profiled", table)  # the fixture table has two batch sizes
    assert r.exit_code == 2 and "--table" in r.output and "batch sizes" in r.output
    r = run("frontier", "--table", path, "--profiled", path, "--power-budget", "20-40")
    assert r.exit_code == 2 and "--power-budget" in r.output
    r = run("frontier", "--table", path, "--profiled", path, "--n", 0)
    assert r.exit_code == 2 and "--n" in r.output


def test_select_reads_estimate_predicts_output_without_batch_size(tmp_path):
    """``estimate predict`` on a mode table without batch_size writes none: select still works
    (one option per mode; the JSON's batch_size is null)."""
    path = tmp_path / "pred.csv"
    path.write_text("cores,cpu_mhz,gpu_mhz,emc_mhz,time_ms,power_w,power_std_w\n"
                    "8,1344,727,2133,100,20,1\n12,2200,1300,3199,60,51.1,2\n")
    r = run("select", "--table", path, "--power-budget", "30", "--risk", "0.2", "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout) == {
        "feasible": True, "mode": {"cores": 8, "cpu_mhz": 1344.0, "gpu_mhz": 727.0, "emc_mhz": 2133.0},
        "batch_size": None, "time_ms": 100.0, "power_w": 20.0,
        "power_upper_w": pytest.approx(20.0 + 0.8416212 * 1.0)}  # z(0.8) = 0.84: the bound checked
    r = run("frontier", "--table", path, "--profiled", path, "--json")
    assert r.exit_code == 0 and json.loads(r.stdout)["modes"] == []  # every mode is profiled


def test_rows_are_named_one_way_on_success_and_when_infeasible(table):
    r = run("select", "--table", table, "--power-budget", "30")
    assert r.exit_code == 0 and "row 0 (line 2 of" in r.stdout, r.output
    r = run("select", "--table", table, "--power-budget", "10")
    assert r.exit_code == 0 and "0-based" not in r.stdout and "row 2 (line 4 of" in r.stdout, r.output
    r = run("select", "--table", table, "--power-budget", "10", "--json")
    reason = json.loads(r.stdout)["reason"]
    assert "; closest: mode " in reason and ", row 2 (line 4 of" in reason and "0-based" not in reason, reason
