"""``--workload MODULE:FUNCTION`` on the CLI: a model not in the zoo (a 1-D CNN over sensor windows)
profiled, transferred, selected and verified on ``sim:orin-agx``; bad entries exit 2 naming it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from edgetune.cli import main
from edgetune.devices.simulated.tables import truth_table
from edgetune.powermodes.grids import modes_array
from edgetune.powermodes.specs import ORIN_AGX
from edgetune.tables import read_profile_table, write_table
from edgetune.workloads.user import load_workload

ROOT = Path(__file__).resolve().parents[2]
SPEC = "tests.fixtures.workloads.sensor_cnn:make"
MODE_KEYS = ("cores", "cpu_mhz", "gpu_mhz", "emc_mhz")


@pytest.fixture(autouse=True)
def _on_pythonpath(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT))  # what PYTHONPATH=. gives the console script


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """The fulcrum grid as a mode table and a ResNet18 reference model fitted on it."""
    d = tmp_path_factory.mktemp("tune-user")
    grid = modes_array(ORIN_AGX, "fulcrum")
    write_table([dict(zip(MODE_KEYS, m, strict=True)) for m in grid.tolist()], d / "modes.csv")
    write_table(truth_table(ORIN_AGX, "resnet18", "train", grid, [16]), d / "ref.csv")
    assert main(["estimate", "fit", "--profiles", str(d / "ref.csv"), "--out", str(d / "ref.model"), "--seed", "0",
                 "--epochs", "40", "--cv-folds", "0"]) == 0  # CV: tested in test_cli_estimate
    return d


def test_tune_a_user_model_profiles_transfers_selects_and_verifies(files, capsys, tmp_path):
    budget_w = 20.0
    code = main(["tune", "--device", "sim:orin-agx", "--workload", SPEC, "--base", str(files / "ref.model"),
                 "--modes", str(files / "modes.csv"), "--power-budget", f"{budget_w:g}", "--batch-size", "64",
                 "--initial", "8", "--rounds", "1", "--per-round", "4", "--profiles-out", str(tmp_path / "p.csv"),
                 "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    wl_id = load_workload(SPEC).workload_id
    assert f"tuning {wl_id} (train, batch size 64)" in err
    answer = json.loads(out)
    assert answer["feasible"] and answer["batch_size"] == 64
    profiled = read_profile_table(tmp_path / "p.csv")
    assert {r["workload"] for r in profiled.rows} == {wl_id} and 8 <= len(profiled) <= 12, err
    assert "transferred" in err and "measured within budget" in err
    # the choice, on the simulator's noise-free truth for this model: within budget and near the best
    grid = modes_array(ORIN_AGX, "fulcrum")
    truth = truth_table(ORIN_AGX, wl_id, "train", grid, [64])
    t = np.array([r["time_ms"] for r in truth])
    p = np.array([r["power_w"] for r in truth])
    at = {tuple(float(v) for v in m): i for i, m in enumerate(grid.tolist())}
    i = at[tuple(float(answer["mode"][k]) for k in MODE_KEYS)]
    assert p[i] <= budget_w + 0.5
    assert t[i] <= 1.25 * t[p <= budget_w].min()


def test_profile_a_user_model_from_pythonpath_in_a_subprocess(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = tmp_path / "rows.csv"
    run = subprocess.run([sys.executable, "-m", "edgetune.cli", "profile", "--device", "sim:orin-agx", "--workload",
                          "tests.fixtures.workloads.sensor_cnn:make_infer", "--role", "infer", "--random", "3",
                          "--batch-sizes", "8,32", "--n-minibatches", "5", "--out", str(out)],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    rows = read_profile_table(out).rows
    assert len(rows) == 6 and all(r["workload"].startswith("sensor_cnn.make_infer-") for r in rows)
    assert all(r["role"] == "infer" and r["time_ms"] > 0 and r["power_w"] > 0 for r in rows)


@pytest.mark.parametrize("entry,needle", [
    ("missing", "has no function 'missing'"),
    ("../no_such_module:make", "is not MODULE:FUNCTION"),
    ("tests.fixtures.workloads.no_such_module:make", "no module named 'tests.fixtures.workloads.no_such_module'"),
    ("bad_two_values", "returned a 2-tuple"),
    ("bad_forward", "forward pass (or its loss) raised RuntimeError: sensor window has the wrong number of channels"),
    ("bad_batch_shape", "not (inputs, targets)"),
    ("make_infer", "loss_fn is None, so it runs only as an inference workload"),
])
def test_bad_entries_exit_2_naming_the_workload(files, capsys, tmp_path, entry, needle):
    spec = entry if ":" in entry else f"tests.fixtures.workloads.sensor_cnn:{entry}"
    for argv in (["profile", "--device", "sim:orin-agx", "--workload", spec, "--random", "2",
                  "--out", str(tmp_path / "x.csv")],
                 ["tune", "--device", "sim:orin-agx", "--workload", spec, "--base", str(files / "ref.model"),
                  "--modes", str(files / "modes.csv"), "--power-budget", "20"]):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert "--workload: " in err and spec in err and needle in err, err
        assert not (tmp_path / "x.csv").exists()  # bad input changes nothing
