"""Shipped reference models (edgetune.estimation.references): they load by name, are small,
say what they are, predict their device's simulator table sensibly, and ``estimate transfer``
starts from them."""

from __future__ import annotations

import os

import numpy as np
import pytest

from edgetune.cli import main
from edgetune.devices.simulated import truth_table
from edgetune.errors import InvalidArgument
from edgetune.estimation.metrics import mape_pct
from edgetune.estimation.references import REFERENCES, find_reference, load_reference, reference_path
from edgetune.powermodes.grids import named_grid
from edgetune.powermodes.specs import get_spec
from edgetune.tables import Table, write_table


@pytest.mark.parametrize("ref", REFERENCES, ids=lambda r: r.device)
def test_reference_loads_and_predicts_its_device(ref):
    assert os.path.getsize(reference_path(ref.device)) < 3_000_000  # package data: a few MB at most
    model = load_reference(ref.device)
    assert (model.device, model.workload, model.role, model.batch_sizes) == (ref.device, ref.workload, ref.role,
                                                                               [ref.batch_size])
    # the fulcrum grid's modes (most are not in the powertrain grid it was fitted on), against the truth
    modes = named_grid(get_spec(ref.device), "fulcrum").array()[::7]
    rows = truth_table(ref.device, ref.workload, ref.role, modes, [ref.batch_size])
    table = Table(list(rows[0].keys()), rows, "truth")
    pred = model.predict_table(table)
    assert mape_pct(pred["time_ms"], table.column("time_ms")) < 10.0
    assert mape_pct(pred["power_w"], table.column("power_w")) < 6.0
    assert np.all(pred["power_w"] > 0)


def test_unknown_reference_is_refused_naming_the_shipped_ones():
    with pytest.raises(InvalidArgument) as err:
        find_reference("orin-nano")
    assert "orin-agx" in str(err.value.allowed)
    assert find_reference("reference:orin-agx").device == "orin-agx"
    assert find_reference("orin-agx-resnet18-train").device == "orin-agx"


def test_transfer_from_a_shipped_reference(tmp_path, capsys):
    modes = named_grid(get_spec("orin-agx"), "fulcrum").array()
    idx = np.random.default_rng(0).choice(len(modes), 20, replace=False)
    write_table(truth_table("orin-agx", "mobilenetv3", "train", modes[idx], [16]), tmp_path / "new.csv")
    code = main(["estimate", "transfer", "--base", "reference:orin-agx", "--profiles", str(tmp_path / "new.csv"),
                 "--out", str(tmp_path / "new.model"), "--method", "ref+gp", "--cv-folds", "0"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "orin-agx" in out and "mobilenetv3" in out
    code = main(["estimate", "transfer", "--base", "reference:thor", "--profiles", str(tmp_path / "new.csv"),
                 "--out", str(tmp_path / "x.model")])
    _, err = capsys.readouterr()
    assert code == 2 and "orin-agx" in err and not (tmp_path / "x.model").exists()
