"""Predictors (edgetune.estimation): learning, transfer, uncertainty, asymmetric loss, files, errors.

Data come from the noise-free simulator (``truth_table``) with seeded noise added; sizes and
epochs are kept small so the whole file runs in well under a minute on one core.
"""

from __future__ import annotations

import io
import json
import zipfile

import numpy as np
import pytest
import torch

from edgetune.base.risk import z_score
from edgetune.devices.simulated.tables import truth_table
from edgetune.errors import FailedPrecondition, InvalidArgument
from edgetune.estimation.base import Predictor
from edgetune.estimation.bundle import TimePowerModel
from edgetune.estimation.features import feature_columns
from edgetune.estimation.methods import METHODS
from edgetune.estimation.metrics import mape_pct, under_fraction
from edgetune.estimation.registry import adapt, make_predictor
from edgetune.estimation.validation import ExtrapolationWarning
from edgetune.optimization.select import selection_margin
from edgetune.powermodes.grids import modes_array
from edgetune.powermodes.specs import ORIN_AGX
from edgetune.tables import Table

torch.set_num_threads(1)

#: Small-data settings per method, so every test stays fast.
FAST = {
    "nn": {"epochs": 150, "batch_size": 16},
    "transfer": {"epochs": 150, "batch_size": 16},
    "nn-asym": {"epochs": 150, "batch_size": 16},
    "nn+gp": {"nn_params": {"epochs": 150, "batch_size": 16}, "restarts": 1},
    "gp": {"restarts": 1},
    "ref+gp": {"restarts": 0},
    "linear": {},
    "rf": {"n_estimators": 50},
}


def truth(workload: str, modes: np.ndarray, batch_size: int = 16) -> tuple[np.ndarray, np.ndarray]:
    rows = truth_table(ORIN_AGX, workload, "train", modes, [batch_size])
    return np.array([r["time_ms"] for r in rows]), np.array([r["power_w"] for r in rows])


def noisy(y: np.ndarray, rel: float, seed: int) -> np.ndarray:
    return y * (1.0 + np.random.default_rng(seed).normal(0.0, rel, y.shape))


@pytest.fixture(scope="module")
def fulcrum() -> np.ndarray:
    return modes_array(ORIN_AGX, "fulcrum")  # 441 modes


@pytest.fixture(scope="module")
def powertrain() -> np.ndarray:
    return modes_array(ORIN_AGX, "powertrain")  # 4,368 modes


@pytest.fixture(scope="module")
def resnet_reference(powertrain):
    """ResNet18 time / power NNs on a 1,200-mode subsample of the PowerTrain grid (short training)."""
    idx = np.random.default_rng(0).choice(len(powertrain), 1200, replace=False)
    t, p = truth("resnet18", powertrain[idx])
    return {
        "time_ms": make_predictor("nn", "time_ms", epochs=30, seed=0).fit(powertrain[idx], noisy(t, 0.01, 1)),
        "power_w": make_predictor("nn", "power_w", epochs=30, seed=0).fit(powertrain[idx], noisy(p, 0.01, 2)),
    }


# -- every method learns -----------------------------------------------------------------------------
@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("target", ["time_ms", "power_w"])
def test_every_method_beats_the_mean_on_a_small_table(method, target, fulcrum):
    rng = np.random.default_rng(3)
    idx = rng.choice(len(fulcrum), 80, replace=False)
    rest = np.setdiff1d(np.arange(len(fulcrum)), idx)
    t, p = truth("tiny", fulcrum)
    y = t if target == "time_ms" else p
    pred = make_predictor(method, target, seed=0, **FAST[method]).fit(fulcrum[idx], y[idx])
    mean, std = pred.predict(fulcrum[rest])
    assert mean.shape == (len(rest),) and np.all(np.isfinite(mean))
    baseline = mape_pct(np.full(len(rest), y[idx].mean()), y[rest])
    assert mape_pct(mean, y[rest]) < 0.6 * baseline, (method, target)
    if method == "gp":
        assert std is not None and np.all(std > 0)
    assert pred.meta["fit"]["rows"] == 80


# -- files ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("method", METHODS)
def test_round_trip_gives_identical_predictions(method, fulcrum):
    t, _ = truth("tiny", fulcrum)
    kw = {k: (dict(v, epochs=5) if k == "nn_params" else v) for k, v in FAST[method].items()}
    if "epochs" in kw:
        kw["epochs"] = 5
    idx = np.random.default_rng(2).choice(len(fulcrum), 60, replace=False)
    pred = make_predictor(method, "time_ms", seed=1, **kw).fit(fulcrum[idx], t[idx])
    again = Predictor.from_bytes(pred.to_bytes())
    assert type(again) is type(pred) and again.columns == pred.columns
    a, sa = pred.predict(fulcrum)
    b, sb = again.predict(fulcrum)
    np.testing.assert_allclose(a, b, rtol=1e-9)
    if sa is not None:
        np.testing.assert_allclose(sa, sb, rtol=1e-6, atol=1e-9)


def test_nn_training_is_deterministic_for_a_seed(fulcrum):
    t, _ = truth("tiny", fulcrum)
    a = make_predictor("nn", "time_ms", seed=5, epochs=10).fit(fulcrum, t).predict(fulcrum)[0]
    b = make_predictor("nn", "time_ms", seed=5, epochs=10).fit(fulcrum, t).predict(fulcrum)[0]
    c = make_predictor("nn", "time_ms", seed=6, epochs=10).fit(fulcrum, t).predict(fulcrum)[0]
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)


def test_model_file_round_trip_and_unknown_version_refused(fulcrum, tmp_path):
    rows = truth_table(ORIN_AGX, "tiny", "train", fulcrum[::2], [16])
    table = Table(list(rows[0]), rows, "tiny.csv")
    model = TimePowerModel.fit_table(table, method="linear")
    path = tmp_path / "m.model"
    model.save(path)
    loaded = TimePowerModel.load(path)
    assert (loaded.device, loaded.workload, loaded.role, loaded.batch_sizes) == ("orin-agx", "tiny", "train", [16])
    np.testing.assert_allclose(loaded.predict(fulcrum)["time_ms"], model.predict(fulcrum)["time_ms"])
    # bump the version: refused with a message naming it
    buf = io.BytesIO()
    with zipfile.ZipFile(path) as src, zipfile.ZipFile(buf, "w") as dst:
        for name in src.namelist():
            data = src.read(name)
            if name == "header.json":
                header = json.loads(data)
                header["version"] = 99
                data = json.dumps(header).encode()
            dst.writestr(name, data)
    with pytest.raises(InvalidArgument, match="version 99"):
        TimePowerModel.from_bytes(buf.getvalue(), "m.model")
    with pytest.raises(InvalidArgument, match="not an edgetune model"):
        TimePowerModel.from_bytes(b"not a zip", "junk.model")


# -- transfer -------------------------------------------------------------------------------------------
def test_transfer_beats_nn_from_scratch_on_50_modes(resnet_reference, powertrain):
    rng = np.random.default_rng(11)
    idx = rng.choice(len(powertrain), 50, replace=False)
    rest = np.setdiff1d(np.arange(len(powertrain)), idx)[::4]
    t, p = truth("mobilenetv3", powertrain)
    results = {}
    for target, y in (("time_ms", t), ("power_w", p)):
        y_obs = noisy(y[idx], 0.01, 12)
        moved = adapt(resnet_reference[target], "transfer", powertrain[idx], y_obs)
        scratch = make_predictor("nn", target, seed=0, epochs=150, batch_size=16).fit(powertrain[idx], y_obs)
        results[target] = (mape_pct(moved.predict(powertrain[rest])[0], y[rest]),
                           mape_pct(scratch.predict(powertrain[rest])[0], y[rest]))
        assert moved.meta["transfers"] and moved.meta["transfers"][-1]["rows"] == 50
    assert results["time_ms"][0] < results["time_ms"][1], results
    assert results["power_w"][0] < results["power_w"][1], results
    assert results["time_ms"][0] < 20.0 and results["power_w"][0] < 8.0, results


def test_transfer_leaves_the_reference_untouched(resnet_reference, powertrain):
    before = resnet_reference["time_ms"].predict(powertrain[:50])[0]
    t, _ = truth("lstm", powertrain[:30])
    adapt(resnet_reference["time_ms"], "nn+gp", powertrain[:30], t, restarts=0)
    np.testing.assert_array_equal(resnet_reference["time_ms"].predict(powertrain[:50])[0], before)


def test_nn_gp_transfer_gives_std_and_round_trips(resnet_reference, powertrain):
    idx = np.random.default_rng(4).choice(len(powertrain), 40, replace=False)
    _, p = truth("yolov8n", powertrain[idx])
    moved = adapt(resnet_reference["power_w"], "nn+gp", powertrain[idx], p, restarts=0)
    mean, std = moved.predict(powertrain[:200])
    assert std is not None and np.all(std > 0)
    again = Predictor.from_bytes(moved.to_bytes())
    np.testing.assert_allclose(again.predict(powertrain[:200])[0], mean, rtol=1e-9)


# -- uncertainty ----------------------------------------------------------------------------------------
def test_gp_std_grows_away_from_the_data(fulcrum):
    t, _ = truth("tiny", fulcrum)
    low_gpu = fulcrum[:, 2] <= 600
    gp = make_predictor("gp", "time_ms", restarts=1).fit(fulcrum[low_gpu][::2], t[low_gpu][::2])
    _, near = gp.predict(fulcrum[low_gpu][1::2])
    _, far = gp.predict(fulcrum[fulcrum[:, 2] >= 1300], check_ranges=False)  # deliberately far out
    assert far.mean() > 3 * near.mean()


# -- asymmetric loss ------------------------------------------------------------------------------------
def test_asymmetric_loss_under_predicts_less_often_than_mse(fulcrum):
    _, p = truth("resnet18", fulcrum)
    y = noisy(p, 0.03, 7)
    rest_truth = p
    mse = make_predictor("nn", "power_w", seed=0, epochs=60, batch_size=32).fit(fulcrum, y)
    asym = make_predictor("nn-asym", "power_w", seed=0, epochs=60, batch_size=32).fit(fulcrum, y)
    assert asym.loss == "asym-mape"
    u_mse = under_fraction(mse.predict(fulcrum)[0], rest_truth)
    u_asym = under_fraction(asym.predict(fulcrum)[0], rest_truth)
    assert u_asym < u_mse and u_asym < 0.35, (u_asym, u_mse)


# -- features -------------------------------------------------------------------------------------------
def test_batch_size_becomes_a_feature_only_with_several_batch_sizes(fulcrum):
    one = truth_table(ORIN_AGX, "tiny", "train", fulcrum[:50], [16])
    two = truth_table(ORIN_AGX, "tiny", "train", fulcrum[:50], [8, 32])
    assert feature_columns(Table(list(one[0]), one)) == ("cores", "cpu_mhz", "gpu_mhz", "emc_mhz")
    assert feature_columns(Table(list(two[0]), two))[-1] == "batch_size"
    model = TimePowerModel.fit_table(Table(list(two[0]), two, "two.csv"), method="linear")
    assert model.columns[-1] == "batch_size" and model.batch_sizes == [8, 32]
    single = TimePowerModel.fit_table(Table(list(one[0]), one, "one.csv"), method="linear")
    wrong = Table(["cores", "cpu_mhz", "gpu_mhz", "emc_mhz", "batch_size"],
                  [dict(r, batch_size=64) for r in one[:3]], "modes.csv")
    with pytest.raises(InvalidArgument, match="batch size 16 only") as exc:
        single.predict_table(wrong)
    assert exc.value.field == "modes.csv:2:batch_size"


# -- errors ---------------------------------------------------------------------------------------------
def test_too_few_rows_says_how_many_are_needed(fulcrum):
    t, _ = truth("tiny", fulcrum[:9])
    with pytest.raises(InvalidArgument, match="at least 10 rows") as exc:
        make_predictor("linear").fit(fulcrum[:9], t)
    assert exc.value.field == "rows"


def test_transfer_needs_five_rows(resnet_reference, powertrain):
    t, _ = truth("lstm", powertrain[:4])
    with pytest.raises(InvalidArgument, match="at least 5 rows"):
        adapt(resnet_reference["time_ms"], "transfer", powertrain[:4], t)


def test_nan_is_refused_naming_the_field(fulcrum):
    x = fulcrum[:20].copy()
    x[3, 2] = np.nan
    with pytest.raises(InvalidArgument) as exc:
        make_predictor("linear").fit(x, np.ones(20))
    assert exc.value.field == "gpu_mhz" and "row 4" in str(exc.value)
    y = np.ones(20)
    y[5] = np.inf
    with pytest.raises(InvalidArgument) as exc:
        make_predictor("linear", "power_w").fit(fulcrum[:20], y)
    assert exc.value.field == "power_w"


def test_modes_far_outside_the_training_ranges_are_refused(fulcrum):
    t, _ = truth("tiny", fulcrum)
    pred = make_predictor("linear").fit(fulcrum, t)
    khz = fulcrum[:3].copy()
    khz[:, 1] *= 1000.0  # CPU clock in kHz, not MHz
    with pytest.raises(InvalidArgument, match="far outside") as exc:
        pred.predict(khz)
    assert exc.value.field == "cpu_mhz"
    slightly = fulcrum[:3].copy()
    slightly[:, 0] = 16  # a few cores more than any Orin: extrapolation, warned
    with pytest.warns(ExtrapolationWarning, match="3 of 3 rows"):
        pred.predict(slightly)


def test_missing_feature_column_names_it(fulcrum):
    rows = truth_table(ORIN_AGX, "tiny", "train", fulcrum[:30], [16])
    model = TimePowerModel.fit_table(Table(list(rows[0]), rows, "ref.csv"), method="linear")
    no_gpu = Table(["cores", "cpu_mhz", "emc_mhz"], [{k: r[k] for k in ("cores", "cpu_mhz", "emc_mhz")} for r in rows],
                   "modes.csv")
    with pytest.raises(InvalidArgument) as exc:
        model.predict_table(no_gpu)
    assert exc.value.field == "modes.csv:gpu_mhz"


def test_mixed_workloads_in_one_table_are_refused(fulcrum):
    rows = (truth_table(ORIN_AGX, "tiny", "train", fulcrum[:20], [16])
            + truth_table(ORIN_AGX, "lstm", "train", fulcrum[:20], [16]))
    with pytest.raises(InvalidArgument, match="mixes 2 values") as exc:
        TimePowerModel.fit_table(Table(list(rows[0]), rows, "mixed.csv"), method="linear")
    assert exc.value.field == "mixed.csv:workload"


def test_unknown_method_lists_the_allowed_ones():
    with pytest.raises(InvalidArgument) as exc:
        make_predictor("svm")
    assert exc.value.field == "method" and "nn+gp" in exc.value.allowed


def test_methods_that_cannot_transfer_say_so(fulcrum):
    t, _ = truth("tiny", fulcrum)
    lin = make_predictor("linear").fit(fulcrum[:30], t[:30])
    with pytest.raises(FailedPrecondition, match="cannot transfer"):
        lin.transfer(fulcrum[30:60], t[30:60])
    with pytest.raises(InvalidArgument, match="transfers an NN reference") as exc:
        adapt(lin, "transfer", fulcrum[30:60], t[30:60])
    assert exc.value.field == "base"
    # a non-transfer method fits the new table alone, with the reference's columns
    fresh = adapt(lin, "rf", fulcrum[30:60], t[30:60], n_estimators=10)
    assert fresh.method == "rf" and fresh.columns == lin.columns
    with pytest.raises(FailedPrecondition, match="not fitted"):
        make_predictor("nn").transfer(fulcrum[:10], t[:10])


def test_nn_gp_cv_calibration_covers_held_out_residuals_better(resnet_reference, powertrain):
    # the raw GP std of a stacked nn+gp is over-confident on unprofiled modes; calibration="cv"
    # scales it by the K-fold conformal factor, stored in the file
    rng = np.random.default_rng(11)
    idx = rng.choice(len(powertrain), 40, replace=False)
    _, p = truth("mobilenetv3", powertrain)
    y = noisy(p[idx], 0.015, 12)
    kw = dict(restarts=0)
    raw = adapt(resnet_reference["power_w"], "nn+gp", powertrain[idx], y, **kw)
    cal = adapt(resnet_reference["power_w"], "nn+gp", powertrain[idx], y, calibration="cv",
                calibration_folds=5, calibration_risk=0.1, **kw)
    assert cal.calibration_scores is not None and cal.std_scale > 1.0
    # the held-out (out-of-fold) means, in W, for selection_margin: one per row, worse than in-sample
    assert raw.calibration_means is None
    oof = cal.calibration_means
    assert oof is not None and oof.shape == (40,) and np.isfinite(oof).all()
    assert np.sqrt(np.mean((y - oof) ** 2)) > np.sqrt(np.mean((y - cal.predict(powertrain[idx])[0]) ** 2))
    margin = selection_margin(truth("mobilenetv3", powertrain[idx])[0], oof, y, 0.1)
    assert 0.0 <= margin <= float(y.max() - y.min())
    held = np.setdiff1d(np.arange(len(powertrain)), idx)[::7]
    mu_r, sd_r = raw.predict(powertrain[held])
    mu_c, sd_c = cal.predict(powertrain[held])
    np.testing.assert_allclose(mu_c, mu_r)  # the same fit, only the std is scaled
    z = z_score(0.1)
    cov_raw = np.mean(p[held] <= mu_r + z * sd_r)
    cov_cal = np.mean(p[held] <= mu_c + z * sd_c)
    assert cov_cal > cov_raw
    back = Predictor.from_bytes(cal.to_bytes())
    assert back.std_scale == cal.std_scale
    np.testing.assert_allclose(back.predict(powertrain[held])[1], sd_c)


def test_nn_gp_calibration_options_are_checked_naming_the_field():
    for kw, field in ((dict(calibration="loo"), "calibration"), (dict(calibration_risk=0.7), "calibration_risk"),
                      (dict(calibration_folds=1), "calibration_folds")):
        with pytest.raises(InvalidArgument) as exc:
            make_predictor("nn+gp", "power_w", **kw)
        assert exc.value.field == field
