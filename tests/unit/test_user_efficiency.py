"""``edgetune estimate efficiency`` with the user's own model and proxy data (``MODULE:FUNCTION`` both):
passes to the target per batch size written as the ``optimize joint --efficiency`` table, and bad
entries exit 2 naming the field. The model and data are defined in this file (a 1-D CNN over
sensor windows, two classes)."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

from edgetune.cli import main
from edgetune.optimization.joint_tables import read_efficiency

MODULE = Path(__file__).stem


def sensor_cnn():
    """The workload: (model, make_batch, loss_fn), the model as returned being the checkpoint."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv1d(3, 8, 5, padding=2), nn.ReLU(), nn.AdaptiveAvgPool1d(1), nn.Flatten(),
                          nn.Linear(8, 2))

    def make_batch(batch_size: int):
        return torch.randn(batch_size, 3, 32), torch.randint(0, 2, (batch_size,))

    return model, make_batch, nn.functional.cross_entropy


def sensor_windows():
    """The proxy data: (train, val), each (inputs, targets); class 1 windows carry a positive offset."""
    g = torch.Generator().manual_seed(1)

    def split(n: int):
        y = torch.randint(0, 2, (n,), generator=g)
        x = torch.randn(n, 3, 32, generator=g) + 1.0 * y.view(-1, 1, 1).float()
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
    code = main(["estimate", "efficiency", "--workload", f"{MODULE}:sensor_cnn", "--data", f"{MODULE}:sensor_windows",
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
    argv = ["estimate", "efficiency", "--workload", f"{MODULE}:sensor_cnn", "--batch-sizes", "8", "--no-ray",
            "--out", str(tmp_path / "eff.csv"), *[x for kv in base.items() for x in kv], *args]
    code = main(argv)
    out, err = capsys.readouterr()
    assert code == 2 and needle in out + err, out + err
    assert not (tmp_path / "eff.csv").exists()  # bad input changes nothing
