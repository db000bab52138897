"""``edgetune estimate efficiency`` with the user's own model and proxy data (``MODULE:FUNCTION`` both):
passes to the target per batch size written as the ``optimize joint --efficiency`` table, and bad
entries exit 2 naming the field. The model is the tests' sensor-window CNN (narrow, two classes:
``sensor_cnn:make_small``); the proxy data are defined in this file."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest
import torch

from edgetune.cli import main
from edgetune.optimization.joint_tables import read_efficiency
from tests.fixtures.workloads.sensor_cnn import CHANNELS

MODULE = Path(__file__).stem
WORKLOAD = "tests.fixtures.workloads.sensor_cnn:make_small"


def sensor_windows():
    """The proxy data: (train, val), each (inputs, targets); class 1 windows carry a positive offset."""
    g = torch.Generator().manual_seed(1)

    def split(n: int):
        y = torch.randint(0, 2, (n,), generator=g)
        x = torch.randn(n, CHANNELS, 32, generator=g) + 1.0 * y.view(-1, 1, 1).float()
        return x, y

    return split(512), split(200)


def not_a_pair():
    return torch.zeros(3)


@pytest.fixture(autouse=True)
def importable(monkeypatch):
    monkeypatch.syspath_prepend(str(Path(__file__).parent))
    yield
    sys.modules.pop(MODULE, None)


def test_passes_to_target_per_batch_size_of_the_users_model_and_data(tmp_path, capsys):
    out = tmp_path / "eff.csv"
    code = main(["estimate", "efficiency", "--workload", WORKLOAD, "--data", f"{MODULE}:sensor_windows",
                 "--batch-sizes", "8,32", "--target-accuracy", "0.8", "--seeds", "0,1", "--max-passes", "15",
                 "--base-lr", "0.05", "--no-ray", "--out", str(out)])
    _, err = capsys.readouterr()
    assert code == 0, err
    eff = read_efficiency(out)
    assert sorted(eff.passes_by_batch) == [8, 32]
    assert all(math.isfinite(n) and 1 <= n <= 15 for n in eff.passes_by_batch.values()), eff
    # at the same s = 64 samples per pass, b=8 takes 8 optimiser steps a pass, b=32 two: it needs more passes
    assert eff.passes_by_batch[32] >= eff.passes_by_batch[8]


@pytest.mark.parametrize(("args", "needle"), [
    (["--data", f"{MODULE}:missing"], "has no function 'missing'"),
    (["--data", f"{MODULE}:not_a_pair"], "not (train, val)"),
    (["--data", "no_such_module_xyz:f"], "no module named"),
    (["--data", f"{MODULE}:sensor_windows", "--target-accuracy", "0.01"], "already has"),
    (["--data", f"{MODULE}:sensor_windows", "--seeds", "0,x"], "--seeds[1]"),
])
def test_bad_entries_exit_2_naming_the_field(tmp_path, capsys, args, needle):
    base = {"--target-accuracy": "0.8"}
    if "--target-accuracy" in args:
        base = {}
    argv = ["estimate", "efficiency", "--workload", WORKLOAD, "--batch-sizes", "8", "--no-ray",
            "--out", str(tmp_path / "eff.csv"), *[x for kv in base.items() for x in kv], *args]
    code = main(argv)
    out, err = capsys.readouterr()
    assert code == 2 and needle in out + err, out + err
    assert not (tmp_path / "eff.csv").exists()  # bad input changes nothing
