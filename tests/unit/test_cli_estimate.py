"""``edgetune estimate fit | transfer | predict``: the docs/contract.md commands end to end, and their errors."""

from __future__ import annotations

import numpy as np
import pytest

from edgetune.cli import main
from edgetune.devices.simulated.tables import truth_table
from edgetune.powermodes.grids import modes_array
from edgetune.powermodes.specs import ORIN_AGX
from edgetune.tables import read_mode_table, read_profile_table, write_table


def run(capsys, *args: str) -> tuple[int, str, str]:
    code = main(["estimate", *args])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("estimate")
    modes = modes_array(ORIN_AGX, "fulcrum")
    write_table(truth_table(ORIN_AGX, "resnet18", "train", modes, [16]), d / "ref.csv")
    idx = np.random.default_rng(0).choice(len(modes), 40, replace=False)
    write_table(truth_table(ORIN_AGX, "mobilenetv3", "train", modes[idx], [16]), d / "new.csv")
    # a mode table in a scrambled order with an extra column, to check order and carry-through
    order = np.random.default_rng(1).permutation(len(modes))[:25]
    rows = [{"note": f"n{i}", "cores": int(modes[i, 0]), "cpu_mhz": modes[i, 1], "gpu_mhz": modes[i, 2],
             "emc_mhz": modes[i, 3]} for i in order]
    write_table(rows, d / "modes.csv")
    return d


@pytest.fixture(scope="module")
def ref_model(files):
    code = main(["estimate", "fit", "--profiles", str(files / "ref.csv"), "--out", str(files / "ref.model"),
                 "--epochs", "15", "--seed", "3", "--cv-folds", "0"])  # CV: tested below, on a GP
    assert code == 0
    return files / "ref.model"


@pytest.mark.parametrize("method", ["transfer", "nn+gp"])
def test_fit_transfer_predict_end_to_end(files, ref_model, capsys, method):
    new_model = files / f"new-{method}.model"
    code, out, err = run(capsys, "transfer", "--base", str(ref_model), "--profiles", str(files / "new.csv"),
                         "--out", str(new_model), "--method", method, "--cv-folds", "0")
    assert code == 0, err
    assert "mobilenetv3" in out and "40 rows" in out
    pred_path = files / f"pred-{method}.csv"
    code, out, err = run(capsys, "predict", "--model", str(new_model), "--modes", str(files / "modes.csv"),
                         "--out", str(pred_path))
    assert code == 0, err
    pred = read_mode_table(pred_path)
    modes = read_mode_table(files / "modes.csv")
    assert len(pred) == len(modes) == 25
    assert [r["note"] for r in pred] == [r["note"] for r in modes]  # order and extra column kept
    # the modes had no batch_size: the model's one batch size is written, so `plan` can read the table
    assert pred.columns[:6] == ["note", "cores", "cpu_mhz", "gpu_mhz", "emc_mhz", "batch_size"]
    assert {r["batch_size"] for r in pred} == {16}
    assert "time_ms" in pred.columns and "power_w" in pred.columns
    has_std = method == "nn+gp"
    assert ("time_std_ms" in pred.columns) == has_std and ("power_std_w" in pred.columns) == has_std
    truth = truth_table(ORIN_AGX, "mobilenetv3", "train", modes.mode_array(), [16])
    t_true = np.array([r["time_ms"] for r in truth])
    p_true = np.array([r["power_w"] for r in truth])
    t_pred, p_pred = pred.column("time_ms"), pred.column("power_w")
    assert np.all(t_pred > 0) and np.all(p_pred > 0)
    assert np.mean(np.abs(t_pred - t_true) / t_true) < 0.35  # short reference training: loose bound
    assert np.mean(np.abs(p_pred - p_true) / p_true) < 0.15


def test_predict_with_the_reference_model_and_profile_table_input(files, ref_model, capsys):
    # a profile table is a valid mode table too: its time_ms / power_w are replaced, others carried
    out_path = files / "ref-pred.csv"
    code, _, err = run(capsys, "predict", "--model", str(ref_model), "--modes", str(files / "new.csv"),
                       "--out", str(out_path))
    assert code == 0, err
    table = read_profile_table(out_path)
    assert table.columns[-2:] == ["time_ms", "power_w"] and table.has("workload")
    assert len(table) == 40


def test_missing_column_exits_2_naming_it(files, ref_model, capsys, tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("cores,cpu_mhz,emc_mhz,batch_size,time_ms,power_w\n4,422.4,665.6,16,100,20\n")
    code, _, err = run(capsys, "fit", "--profiles", str(bad), "--out", str(tmp_path / "x.model"))
    assert code == 2 and "gpu_mhz" in err
    modes = tmp_path / "modes.csv"
    modes.write_text("cores,cpu_mhz,gpu_mhz\n4,422.4,114.75\n")
    code, _, err = run(capsys, "predict", "--model", str(ref_model), "--modes", str(modes), "--out",
                       str(tmp_path / "p.csv"))
    assert code == 2 and "emc_mhz" in err


def test_too_few_rows_and_wrong_units_exit_2(files, ref_model, capsys, tmp_path):
    rows = read_profile_table(files / "new.csv").rows
    small = tmp_path / "small.csv"
    write_table(rows[:4], small)
    code, _, err = run(capsys, "transfer", "--base", str(ref_model), "--profiles", str(small), "--out",
                       str(tmp_path / "x.model"))
    assert code == 2 and "at least 5 rows" in err
    code, _, err = run(capsys, "fit", "--profiles", str(small), "--out", str(tmp_path / "x.model"))
    assert code == 2 and "at least 10 rows" in err
    khz = tmp_path / "khz.csv"
    khz.write_text("cores,cpu_mhz,gpu_mhz,emc_mhz\n12,2201600,1300.5,3199\n")
    code, _, err = run(capsys, "predict", "--model", str(ref_model), "--modes", str(khz), "--out",
                       str(tmp_path / "p.csv"))
    assert code == 2 and "cpu_mhz" in err and "far outside" in err


def test_bad_method_and_bad_model_file_exit_2(files, capsys, tmp_path):
    code, _, err = run(capsys, "fit", "--profiles", str(files / "ref.csv"), "--out", str(tmp_path / "x.model"),
                       "--method", "svm")
    assert code == 2 and "--method" in err
    junk = tmp_path / "junk.model"
    junk.write_bytes(b"hello")
    code, _, err = run(capsys, "predict", "--model", str(junk), "--modes", str(files / "modes.csv"), "--out",
                       str(tmp_path / "p.csv"))
    assert code == 2 and "not an edgetune model" in err
    code, _, err = run(capsys, "predict", "--model", str(tmp_path / "none.model"), "--modes",
                       str(files / "modes.csv"), "--out", str(tmp_path / "p.csv"))
    assert code == 2 and "no such file" in err


def test_non_nn_reference_cannot_be_transferred_with_transfer(files, capsys, tmp_path):
    lin = tmp_path / "lin.model"
    assert run(capsys, "fit", "--profiles", str(files / "ref.csv"), "--out", str(lin), "--method", "linear",
               "--cv-folds", "0")[0] == 0
    code, _, err = run(capsys, "transfer", "--base", str(lin), "--profiles", str(files / "new.csv"), "--out",
                       str(tmp_path / "x.model"), "--method", "transfer")
    assert code == 2 and "base" in err and "--method nn" in err
    code, _, err = run(capsys, "transfer", "--base", str(lin), "--profiles", str(files / "new.csv"), "--out",
                       str(tmp_path / "y.model"), "--method", "gp")
    assert code == 0, err


def test_predict_refuses_modes_of_another_device_naming_both(files, ref_model, capsys):
    # an Orin AGX model answered a Nano's 1-core, 102 MHz mode at 11.7 W, exit 0
    write_table([{"cores": 1, "cpu_mhz": 102.0, "gpu_mhz": 76.8, "emc_mhz": 204.0}], files / "nano.csv")
    code, _, err = run(capsys, "predict", "--model", str(ref_model), "--modes", str(files / "nano.csv"),
                       "--out", str(files / "nano-pred.csv"))
    assert code == 2 and "nano" in err and "orin-agx" in err, err
    rows = [{"device": "xavier-agx", "cores": 2, "cpu_mhz": 729.6, "gpu_mhz": 318.75, "emc_mhz": 665.6}]
    write_table(rows, files / "xavier.csv")
    code, _, err = run(capsys, "predict", "--model", str(ref_model), "--modes", str(files / "xavier.csv"),
                       "--out", str(files / "xavier-pred.csv"))
    assert code == 2 and "xavier-agx" in err and "orin-agx" in err, err


def test_transfer_prints_and_stores_its_cross_validated_accuracy(files, capsys, tmp_path):
    # a transfer says how good it is, from held-out folds of the profiled rows (a GP: quick, and has a σ)
    write_table(read_profile_table(files / "ref.csv").rows[::8], tmp_path / "ref-small.csv")
    code, _, err = run(capsys, "fit", "--profiles", str(tmp_path / "ref-small.csv"), "--out",
                       str(tmp_path / "gp.model"), "--method", "gp", "--cv-folds", "0")
    assert code == 0, err
    code, out, err = run(capsys, "transfer", "--base", str(tmp_path / "gp.model"), "--profiles",
                         str(files / "new.csv"), "--out", str(tmp_path / "new.model"), "--method", "gp",
                         "--cv-folds", "4")
    assert code == 0, err
    assert "4-fold cross-validated on 40 rows: MAPE time" in out and "90 % interval covers" in out
    from edgetune.estimation.bundle import TimePowerModel

    model = TimePowerModel.load(tmp_path / "new.model")
    metrics, cv = model.last_event["metrics"], model.cross_validation
    assert cv is not None and cv.folds == 4 and cv.rows == 40
    assert 0 < cv.time_mape_pct < 100 and 0 < cv.power_mape_pct < 100
    # held-out error is larger than the in-sample error the event also records
    assert cv.time_mape_pct > metrics["time_mape_train"]
    assert cv.time_coverage is not None and 0.5 <= cv.time_coverage <= 1.0  # a probability, and not a broken σ
    assert metrics["time_mape_cv"] == cv.time_mape_pct and metrics["power_coverage_cv"] == cv.power_coverage
    # the printed numbers are the stored ones
    assert f"time {cv.time_mape_pct:.1f} %" in out and f"power {cv.power_mape_pct:.1f} %" in out


def test_fit_cross_validates_and_folds_zero_skips_it(files, capsys, tmp_path):
    small = tmp_path / "small.csv"
    write_table(read_profile_table(files / "ref.csv").rows[::10], small)  # 45 rows: a GP fit is quick
    code, out, err = run(capsys, "fit", "--profiles", str(small), "--out", str(tmp_path / "a.model"),
                         "--method", "gp", "--cv-folds", "3")
    assert code == 0, err
    from edgetune.estimation.bundle import TimePowerModel

    cv = TimePowerModel.load(tmp_path / "a.model").cross_validation
    assert cv is not None and cv.folds == 3 and cv.rows == 45 and "3-fold cross-validated" in out
    # a GP on 30 rows of a smooth table predicts the held-out third well, and worse than its training fit
    assert cv.time_mape_pct < 25 and cv.power_mape_pct < 10
    code, out, err = run(capsys, "fit", "--profiles", str(small), "--out", str(tmp_path / "b.model"),
                         "--method", "gp", "--cv-folds", "0")
    assert code == 0 and "cross-validated" not in out
    assert TimePowerModel.load(tmp_path / "b.model").cross_validation is None


def test_the_default_transfer_is_ref_gp(files, ref_model, capsys, tmp_path):
    # ref+gp beat the fine-tuned MLP (transfer) on the simulator and the real sets (experiments/README.md)
    code, out, err = run(capsys, "transfer", "--base", str(ref_model), "--profiles", str(files / "new.csv"),
                         "--out", str(tmp_path / "d.model"), "--cv-folds", "0")
    assert code == 0, err
    assert "with ref+gp on 40 rows" in out
    from edgetune.estimation.bundle import TimePowerModel

    model = TimePowerModel.load(tmp_path / "d.model")
    assert {p.method for p in model.predictors.values()} == {"ref+gp"}


def test_evidence_se_sets_ref_gps_rule_and_is_refused_by_name(files, ref_model, capsys, tmp_path):
    from edgetune.estimation.bundle import TimePowerModel

    code, out, err = run(capsys, "transfer", "--base", str(ref_model), "--profiles", str(files / "new.csv"),
                         "--out", str(tmp_path / "e.model"), "--cv-folds", "0", "--evidence-se", "0")
    assert code == 0, err
    assert {p.evidence_se for p in TimePowerModel.load(tmp_path / "e.model").predictors.values()} == {0.0}
    code, _, err = run(capsys, "transfer", "--base", str(ref_model), "--profiles", str(files / "new.csv"),
                       "--out", str(tmp_path / "f.model"), "--evidence-se", "-1")
    assert code == 2 and "--evidence-se" in err and not (tmp_path / "f.model").exists()
    code, _, err = run(capsys, "transfer", "--base", str(ref_model), "--profiles", str(files / "new.csv"),
                       "--out", str(tmp_path / "g.model"), "--method", "nn+gp", "--evidence-se", "1")
    assert code == 2 and "--evidence-se" in err and "ref+gp" in err and not (tmp_path / "g.model").exists()


def test_a_transfers_folds_fine_tune_as_one_batch_with_the_numbers_of_each_alone(files, ref_model):
    # cross-validating an MLP transfer fine-tunes the K folds' nets as one stack (about one transfer's
    # cost, not K): each fold's model, and so the CV record, is the one the fold gives alone
    from edgetune.estimation.base import Predictor
    from edgetune.estimation.bundle import TimePowerModel, cross_validate, transfer_targets
    from edgetune.estimation.features import TARGETS, table_features

    ref, table = TimePowerModel.load(ref_model), read_profile_table(files / "new.csv")
    settings = {"transfer_epochs": 12}
    batched = ref.transfer_table(table, "transfer", nn_settings=settings, cv_folds=4).cross_validation
    calls: list[int] = []

    def one_by_one(xts, yts, target):
        calls.append(len(xts))
        return [Predictor.from_bytes(transfer_targets(bases=[ref.predictors[target].to_bytes()], which=[0], xs=[xt],
                                                      ys=[yt], method="transfer", kw={}, nn_settings=settings)[0])
                for xt, yt in zip(xts, yts, strict=True)]

    alone = cross_validate(table_features(table, ref.columns), {t: table.column(t) for t in TARGETS}, one_by_one,
                           4, 0)
    assert calls == [4, 4] and batched is not None and alone is not None
    assert batched.to_dict() == alone.to_dict()
