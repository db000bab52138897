"""``edgetune search`` (libs/edgetune/cli/search.py): docs/contract.md's JSON for each problem, exit codes."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from edgetune.cli import cli
from edgetune.devices.simulated.tables import truth_table
from edgetune.powermodes.grids import named_grid
from edgetune.powermodes.specs import get_spec
from edgetune.tables import write_table

BASE_KEYS = {"feasible", "mode", "batch_size", "profiled", "time_ms", "power_w"}


@pytest.fixture(scope="module")
def truth_csv(tmp_path_factory) -> str:
    grid = named_grid(get_spec("orin-agx"), "fulcrum")
    rows = truth_table("orin-agx", "resnet18", "train", grid.array(), [16])
    rows += truth_table("orin-agx", "mobilenetv3", "infer", grid.array(), [1, 4, 16, 32, 64])
    path = tmp_path_factory.mktemp("search") / "truth.csv"
    write_table(rows, path)
    return str(path)


@pytest.fixture(scope="module")
def two_trainers_csv(tmp_path_factory) -> str:
    grid = named_grid(get_spec("orin-agx"), "fulcrum")
    rows = truth_table("orin-agx", "resnet18", "train", grid.array(), [16])
    rows += truth_table("orin-agx", "mobilenetv3", "train", grid.array(), [16])
    rows += truth_table("orin-agx", "mobilenetv3", "infer", grid.array(), [1, 4, 16, 32, 64])
    path = tmp_path_factory.mktemp("search2") / "truth.csv"
    write_table(rows, path)
    return str(path)


def _search(*args: str):
    return CliRunner().invoke(cli, ["search", *args], catch_exceptions=False)


def test_train_json(truth_csv):
    r = _search("--strategy", "gmd", "--replay", truth_csv, "--problem", "train", "--power-budget", "30", "--json")
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    assert set(out) == BASE_KEYS and out["feasible"] is True
    assert set(out["mode"]) == {"cores", "cpu_mhz", "gpu_mhz", "emc_mhz"}
    assert out["batch_size"] == 16 and 0 < out["profiled"] <= 10 and out["power_w"] <= 30


def test_exhaustive_is_the_optimum(truth_csv):
    r = _search("--strategy", "exhaustive", "--replay", truth_csv, "--problem", "train", "--power-budget", "25",
                "--json")
    out = json.loads(r.output)
    assert out["profiled"] == 441 and out["power_w"] <= 25


def test_infer_json(truth_csv):
    r = _search("--strategy", "gmd", "--replay", truth_csv, "--problem", "infer", "--power-budget", "25",
                "--latency-budget-ms", "200", "--arrival-rps", "60", "--json")
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    assert set(out) == BASE_KEYS | {"latency_ms"}
    assert out["latency_ms"] <= 200 and out["profiled"] <= 11
    assert out["latency_ms"] == pytest.approx((out["batch_size"] - 1) / 60 * 1000 + out["time_ms"])


def test_concurrent_json(truth_csv):
    r = _search("--strategy", "random", "--replay", truth_csv, "--problem", "concurrent", "--power-budget", "30",
                "--latency-budget-ms", "800", "--arrival-rps", "40", "--max-profiles", "60", "--seed", "2", "--json")
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    assert set(out) == BASE_KEYS | {"latency_ms", "train_minibatches_per_s", "tau_train"}
    assert out["profiled"] <= 60 and out["tau_train"] >= 1
    assert out["train_minibatches_per_s"] == pytest.approx(out["tau_train"] * 40 / out["batch_size"])


def test_infeasible_is_an_answer(truth_csv):
    r = _search("--strategy", "exhaustive", "--replay", truth_csv, "--problem", "train", "--power-budget", "5",
                "--json")
    assert r.exit_code == 0
    out = json.loads(r.output)
    assert out["feasible"] is False and out["reason"] and out["profiled"] == 441


def test_random_respects_max_profiles(truth_csv):
    r = _search("--strategy", "random", "--replay", truth_csv, "--problem", "train", "--power-budget", "30",
                "--max-profiles", "20", "--json")
    assert json.loads(r.output)["profiled"] == 20


@pytest.mark.parametrize("args, option", [
    (["--problem", "infer", "--power-budget", "25", "--arrival-rps", "60"], "--latency-budget-ms"),
    (["--problem", "infer", "--power-budget", "25", "--latency-budget-ms", "200"], "--arrival-rps"),
    (["--problem", "concurrent", "--power-budget", "25", "--latency-budget-ms", "200"], "--arrival-rps"),
    (["--problem", "train", "--power-budget", "-3"], "--power-budget"),
    (["--problem", "infer", "--power-budget", "25", "--latency-budget-ms", "200", "--arrival-rps", "0"],
     "--arrival-rps"),
    (["--problem", "train", "--power-budget", "25", "--max-profiles", "0"], "--max-profiles"),
])
def test_missing_or_bad_options_exit_2(truth_csv, args, option):
    r = _search("--strategy", "gmd", "--replay", truth_csv, *args)
    assert r.exit_code == 2
    assert option in r.output


def test_several_workloads_need_naming(two_trainers_csv):
    base = ["--strategy", "gmd", "--replay", two_trainers_csv, "--power-budget", "30", "--json"]
    r = _search(*base, "--problem", "concurrent", "--latency-budget-ms", "800", "--arrival-rps", "40")
    assert r.exit_code == 2 and "--train-workload" in r.output
    r = _search(*base, "--problem", "train")
    assert r.exit_code == 2 and "--train-workload" in r.output
    r = _search(*base, "--problem", "concurrent", "--latency-budget-ms", "800", "--arrival-rps", "40",
                "--train-workload", "mobilenetv3")
    assert r.exit_code == 0 and json.loads(r.output)["feasible"] is True
    r = _search(*base, "--problem", "train", "--train-workload", "bert-base")
    assert r.exit_code == 2 and "bert-base" in r.output


def test_readable_summary(truth_csv):
    r = _search("--strategy", "gmd", "--replay", truth_csv, "--problem", "infer", "--power-budget", "25",
                "--latency-budget-ms", "200", "--arrival-rps", "60")
    assert r.exit_code == 0
    assert "peak latency" in r.output and "profiled" in r.output and "batch size" in r.output


def test_main_exit_code_for_a_bad_table(tmp_path):
    from edgetune.cli import main

    bad = tmp_path / "bad.csv"
    bad.write_text("cores,cpu_mhz\n4,422.4\n")
    assert main(["search", "--strategy", "gmd", "--replay", str(bad), "--problem", "train",
                 "--power-budget", "20"]) == 2


@pytest.fixture(scope="module")
def sparse_csv(tmp_path_factory) -> str:
    """A table that recorded 20 random modes of the fulcrum grid, not the grid itself."""
    import numpy as np

    grid = named_grid(get_spec("orin-agx"), "fulcrum").array()
    some = grid[np.random.default_rng(0).choice(len(grid), 20, replace=False)]
    path = tmp_path_factory.mktemp("sparse") / "truth.csv"
    write_table(truth_table("orin-agx", "resnet18", "train", some, [16]), path)
    return str(path)


@pytest.mark.parametrize("budget_w", [20, 30, 40])
def test_gmd_searches_a_sparse_table(sparse_csv, budget_w):
    """Unrecorded grid points stand for the nearest recorded mode: GMD keeps searching (it used to stop after
    one or two profiles) and lands within 10 % of the table's optimum."""
    gmd = json.loads(_search("--strategy", "gmd", "--replay", sparse_csv, "--problem", "train",
                             "--power-budget", str(budget_w), "--json").output)
    best = json.loads(_search("--strategy", "exhaustive", "--replay", sparse_csv, "--problem", "train",
                              "--power-budget", str(budget_w), "--json").output)
    assert gmd["feasible"] and gmd["power_w"] <= budget_w
    assert 5 <= gmd["profiled"] <= 10
    assert gmd["time_ms"] <= 1.10 * best["time_ms"]


def test_a_budget_sweep_runs_one_search_per_budget(truth_csv):
    """The one budget syntax of every command: A:B[:STEP] (default step 1) gives a JSON list."""
    r = _search("--strategy", "exhaustive", "--replay", truth_csv, "--problem", "train", "--power-budget", "24:26",
                "--json")
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert [o["power_budget_w"] for o in out] == [24.0, 25.0, 26.0]
    for o in out:
        single = _search("--strategy", "exhaustive", "--replay", truth_csv, "--problem", "train", "--power-budget",
                         f"{o['power_budget_w']:g}", "--json")
        assert json.loads(single.stdout) == {k: v for k, v in o.items() if k != "power_budget_w"}
