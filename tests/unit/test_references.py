"""Shipped reference models (edgetune.estimation.references): they load by name, are small,
say what they are (and their held-out accuracy), predict their device's simulator table sensibly,
and ``estimate transfer`` and the library estimator (a tuning job's default) start from them."""

from __future__ import annotations

import os

import numpy as np
import pytest

from edgetune.base.records import Points
from edgetune.cli import main
from edgetune.devices.simulated.tables import truth_table
from edgetune.errors import InvalidArgument
from edgetune.estimation.bundle import load_reference
from edgetune.estimation.metrics import mape_pct
from edgetune.estimation.references import REFERENCES, find_reference, reference_path, shipped_for
from edgetune.powermodes.grids import named_grid
from edgetune.powermodes.specs import get_spec
from edgetune.tables import Table, write_table
from edgetune.tuning.local import LibraryEstimator


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
    # the file says how well it fits its own grid: MAPE on the modes held out of its fit
    event = model.last_event
    assert event["held_out_rows"] >= 400 and event["source"] == f"simulator {ref.grid} grid"
    assert event["metrics"]["time_mape"] < 2.0 and event["metrics"]["power_mape"] < 1.0


def test_unknown_reference_is_refused_naming_the_shipped_ones():
    with pytest.raises(InvalidArgument) as err:
        find_reference("orin-nano")
    assert "orin-agx" in str(err.value.allowed)
    assert find_reference("reference:orin-agx").device == "orin-agx"
    assert find_reference("orin-agx-resnet18-train").device == "orin-agx"
    assert find_reference("reference:xavier-agx").name == "xavier-agx-resnet18-train"


def test_a_device_model_and_role_have_a_shipped_reference_or_none():
    assert shipped_for("orin-agx") == find_reference("orin-agx")
    assert shipped_for("xavier-agx", "train") == find_reference("xavier-agx")
    assert shipped_for("orin-agx", "infer") is None and shipped_for("orin-nano") is None


def test_the_library_estimator_transfers_from_a_shipped_reference_by_name():
    est = LibraryEstimator()
    assert est.find("reference-orin-agx-train") is None and est.find("reference:xavier-agx") is not None
    modes = named_grid(get_spec("xavier-agx"), "fulcrum").array()
    idx = np.random.default_rng(1).choice(len(modes), 30, replace=False)
    rows = truth_table("xavier-agx", "mobilenetv3", "train", modes[idx], [16])
    points = Points(modes[idx], np.full(30, 16), np.array([r["time_ms"] for r in rows]),
                    np.array([r["power_w"] for r in rows]), "xavier-agx", "mobilenetv3", "train")
    base = est.find("reference:xavier-agx")
    assert base is not None and (base.device, base.workload) == ("xavier-agx", "resnet18")
    new = est.transfer(base, points, model_id="new", method="ref+gp")
    pred = est.predict(new, modes, 16)
    truth = truth_table("xavier-agx", "mobilenetv3", "train", modes, [16])
    assert mape_pct(pred.time_ms, np.array([r["time_ms"] for r in truth])) < 10.0


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
