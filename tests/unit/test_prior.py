"""``ref+gp``: a reference's predictions as GP prior mean / input, chosen by CV; calibrated std."""

from __future__ import annotations

import numpy as np
import pytest

from edgetune.devices.simulated.tables import truth_table
from edgetune.errors import FailedPrecondition, InvalidArgument
from edgetune.estimation.base import Predictor
from edgetune.estimation.metrics import mape_pct
from edgetune.estimation.prior import RefGPPredictor
from edgetune.estimation.registry import adapt, make_predictor
from edgetune.powermodes.grids import modes_array
from edgetune.powermodes.specs import ORIN_AGX


def truth(workload: str, modes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    rows = truth_table(ORIN_AGX, workload, "train", modes, [16])
    return np.array([r["time_ms"] for r in rows]), np.array([r["power_w"] for r in rows])


@pytest.fixture(scope="module")
def fulcrum() -> np.ndarray:
    return modes_array(ORIN_AGX, "fulcrum")  # 441 modes


@pytest.fixture(scope="module")
def reference(fulcrum):
    """ResNet18 GP references on 200 modes of the Fulcrum grid."""
    idx = np.random.default_rng(0).choice(len(fulcrum), 200, replace=False)
    t, p = truth("resnet18", fulcrum[idx])
    return {"time_ms": make_predictor("gp", "time_ms", restarts=0).fit(fulcrum[idx], t),
            "power_w": make_predictor("gp", "power_w", restarts=0).fit(fulcrum[idx], p)}


def test_a_related_workload_uses_the_reference_and_beats_the_scratch_gp(reference, fulcrum):
    # MobileNetV3 behaves like ResNet18 scaled: the reference carries the shape 20 points cannot show
    idx = np.random.default_rng(4).choice(len(fulcrum), 20, replace=False)
    rest = np.setdiff1d(np.arange(len(fulcrum)), idx)
    t, _ = truth("mobilenetv3", fulcrum)
    pred = adapt(reference["time_ms"], "ref+gp", fulcrum[idx], t[idx], restarts=0)
    scratch = make_predictor("gp", "time_ms", restarts=0).fit(fulcrum[idx], t[idx])
    info = pred.meta["transfers"][-1]
    assert info["choice"] in ("prior", "stacked") and set(info["cv_mape_pct"]) == {"scratch", "prior", "stacked"}
    assert info["weights"][info["choice"]] == max(info["weights"].values())
    assert sum(info["weights"].values()) == pytest.approx(1.0)
    ours, base = mape_pct(pred.predict(fulcrum[rest])[0], t[rest]), mape_pct(scratch.predict(fulcrum[rest])[0], t[rest])
    assert ours < base, (ours, base)


def test_std_is_scaled_to_the_cv_interval_and_the_file_round_trips(reference, fulcrum):
    idx = np.random.default_rng(5).choice(len(fulcrum), 30, replace=False)
    _, p = truth("yolov8n", fulcrum)
    pred = adapt(reference["power_w"], "ref+gp", fulcrum[idx], p[idx], restarts=0)
    assert pred.std_scale == pytest.approx(pred.meta["transfers"][-1]["std_scale"], rel=1e-3)
    again = Predictor.from_bytes(pred.to_bytes())
    assert isinstance(again, RefGPPredictor) and again.choice == pred.choice and again.reference is not None
    a, sa = pred.predict(fulcrum)
    b, sb = again.predict(fulcrum)
    np.testing.assert_allclose(a, b, rtol=1e-9)
    np.testing.assert_allclose(sa, sb, rtol=1e-6)


def test_the_reference_is_left_untouched_and_a_ref_gp_base_lends_its_reference(reference, fulcrum):
    before = reference["time_ms"].predict(fulcrum[:5])[0]
    idx = np.random.default_rng(6).choice(len(fulcrum), 15, replace=False)
    t, _ = truth("lstm", fulcrum)
    first = adapt(reference["time_ms"], "ref+gp", fulcrum[idx], t[idx], restarts=0)
    second = adapt(first, "ref+gp", fulcrum[idx], t[idx], restarts=0)
    assert second.reference is reference["time_ms"]
    np.testing.assert_allclose(reference["time_ms"].predict(fulcrum[:5])[0], before)


def test_bad_settings_and_transfer_without_a_reference_are_refused(fulcrum):
    with pytest.raises(InvalidArgument) as exc:
        RefGPPredictor(candidates=("prior", "magic"))
    assert exc.value.field == "candidates"
    with pytest.raises(InvalidArgument):
        RefGPPredictor(coverage=1.0)
    t, _ = truth("tiny", fulcrum)
    alone = make_predictor("ref+gp", "time_ms", restarts=0).fit(fulcrum[:40], t[:40])
    assert alone.choice == "scratch"
    with pytest.raises(FailedPrecondition):
        alone.transfer(fulcrum[40:60], t[40:60])


def test_devices_a_model_knows_and_modes_of_others():
    from edgetune.base.mode import MODE_FIELDS
    from edgetune.estimation.devices import check_modes_device, model_devices

    devices = model_devices("xavier-agx", [{"device": "orin-agx"}, {"device": "xavier-agx"}, {}])
    assert devices == ["xavier-agx", "orin-agx"]
    orin_mode = np.array([[12, 2201.6, 1300.5, 3199.0]])
    check_modes_device(devices, orin_mode, MODE_FIELDS)  # a device it was fitted for: fine
    with pytest.raises(InvalidArgument) as exc:
        check_modes_device(["orin-agx"], np.array([[1, 102.0, 76.8, 204.0]]), MODE_FIELDS)
    assert "a mode of nano" in exc.value.message and "orin-agx" in exc.value.message
    check_modes_device(["my-board"], np.array([[1, 102.0, 76.8, 204.0]]), MODE_FIELDS)  # unknown spec: trusted


def _synthetic(seed: int, noise: float = 0.03):
    """A 15 × 8 grid, a target table with known relative noise, and a related reference table."""
    limits = np.linspace(100.0, 300.0, 15)
    log_batch = np.arange(3.0, 11.0)
    x = np.array([(p, b) for p in limits for b in log_batch])
    shape = np.exp(-x[:, 0] / 120.0) + 0.02 * (x[:, 1] - 6.0) ** 2
    target = 40.0 * shape * np.exp(np.random.default_rng(seed).normal(0.0, noise, len(x)))
    return x, target, 25.0 * shape ** 0.9


def test_the_90_percent_interval_covers_about_90_percent_of_held_out_rows():
    # known 3 % noise: over 8 draws of 20 profiled rows, the calibrated interval covers 80–98 %
    cover, raw = [], []
    for seed in range(8):
        x, y, ref_y = _synthetic(seed)
        ref = make_predictor("gp", "time_ms", restarts=0).fit(x, ref_y, columns=("limit", "log_batch"))
        idx = np.random.default_rng(100 + seed).choice(len(x), 20, replace=False)
        rest = np.setdiff1d(np.arange(len(x)), idx)
        pred = adapt(ref, "ref+gp", x[idx], y[idx], restarts=0)
        mu, sd = pred.predict(x[rest], check_ranges=False)
        cover.append(np.mean(np.abs(y[rest] - mu) <= 1.6449 * sd))
        scratch = make_predictor("gp", "time_ms", restarts=0).fit(x[idx], y[idx], columns=("limit", "log_batch"))
        mu, sd = scratch.predict(x[rest], check_ranges=False)
        raw.append(np.mean(np.abs(y[rest] - mu) <= 1.6449 * sd))
    print(f"coverage ref+gp {np.mean(cover):.3f}, raw GP {np.mean(raw):.3f}")
    assert 0.80 <= np.mean(cover) <= 0.98, (np.mean(cover), np.mean(raw))


def test_a_reference_that_describes_nothing_leaves_the_scratch_gp_alone():
    # the reference is noise: no blend shows a clear out-of-fold gain, so the GP from scratch serves alone
    ours, base = [], []
    for seed in range(4):
        x, y, _ = _synthetic(seed)
        junk = np.exp(np.random.default_rng(50 + seed).normal(3.0, 0.5, len(x)))
        ref = make_predictor("gp", "time_ms", restarts=0).fit(x, junk, columns=("limit", "log_batch"))
        idx = np.random.default_rng(200 + seed).choice(len(x), 20, replace=False)
        rest = np.setdiff1d(np.arange(len(x)), idx)
        pred = adapt(ref, "ref+gp", x[idx], y[idx], restarts=0)
        assert pred.weights == {"scratch": 1.0}, pred.meta
        ours.append(mape_pct(pred.predict(x[rest], check_ranges=False)[0], y[rest]))
        scratch = make_predictor("gp", "time_ms", restarts=0).fit(x[idx], y[idx], columns=("limit", "log_batch"))
        base.append(mape_pct(scratch.predict(x[rest], check_ranges=False)[0], y[rest]))
    assert np.mean(ours) <= 1.01 * np.mean(base), (ours, base)


def test_a_blend_needs_a_clear_out_of_fold_gain():
    from edgetune.estimation.evidence import EVIDENCE_SE, clear_gain

    def clear(scratch: np.ndarray, blend: np.ndarray, truth: np.ndarray) -> bool:
        return clear_gain(scratch, blend, truth, EVIDENCE_SE)

    truth = np.full(10, 100.0)
    scratch = truth + np.array([5.0, -5.0] * 5)  # 5 % off on every row
    steady = truth + np.array([2.0, -2.0] * 5)  # 2 % off on every row: a gain of 3 points, no spread
    assert clear(scratch, steady, truth)
    # the same mean gain carried by two rows of ten, the other rows a little worse: not clear
    lumpy = truth + np.array([-20.0, 20.0] + [5.5, -5.5] * 4)
    lumpy[:2] = truth[:2]
    gain = np.abs(scratch - truth) - np.abs(lumpy - truth)
    assert gain.mean() > 0 and gain.mean() < EVIDENCE_SE * gain.std(ddof=1) / np.sqrt(gain.size)
    assert not clear(scratch, lumpy, truth)
    assert not clear(scratch[:1], steady[:1], truth[:1])  # one row says nothing
    assert clear_gain(scratch, lumpy, truth, 0.0)  # evidence_se 0: any gain keeps the blend


def test_evidence_se_is_a_setting_refused_out_of_range_and_kept_in_the_file():
    x, y, ref_y = _synthetic(1)
    ref = make_predictor("gp", "time_ms", restarts=0).fit(x, ref_y, columns=("limit", "log_batch"))
    with pytest.raises(InvalidArgument) as err:
        adapt(ref, "ref+gp", x[:20], y[:20], evidence_se=-1.0)
    assert err.value.field == "evidence_se"
    pred = adapt(ref, "ref+gp", x[:20], y[:20], restarts=0, evidence_se=0.0)
    assert Predictor.from_bytes(pred.to_bytes()).evidence_se == 0.0


def test_a_blend_round_trips_and_a_file_from_before_the_blend_reads_as_its_one_candidate():
    import io
    import json
    import zipfile

    x, y, ref_y = _synthetic(3)
    ref = make_predictor("gp", "time_ms", restarts=0).fit(x, ref_y, columns=("limit", "log_batch"))
    idx = np.random.default_rng(9).choice(len(x), 25, replace=False)
    pred = adapt(ref, "ref+gp", x[idx], y[idx], restarts=0)
    assert sum(pred.weights.values()) == pytest.approx(1.0) and pred.std_floor > 0
    again = Predictor.from_bytes(pred.to_bytes())
    assert again.weights == pred.weights
    np.testing.assert_allclose(again.predict(x)[0], pred.predict(x)[0], rtol=1e-9)
    np.testing.assert_allclose(again.predict(x)[1], pred.predict(x)[1], rtol=1e-6)
    # an older file: no weights, members or floor in its state
    src = zipfile.ZipFile(io.BytesIO(pred.to_bytes()))
    header = json.loads(src.read("header.json"))
    for key in ("weights", "members", "std_floor"):
        header["state"].pop(key)
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as out:
        for name in src.namelist():
            out.writestr(name, json.dumps(header) if name == "header.json" else src.read(name))
    old = Predictor.from_bytes(buf.getvalue())
    assert old.weights == {pred.choice: 1.0} and old.std_floor == 0.0
    single = RefGPPredictor._predict_candidate(pred.choice, pred.gp, pred.affine,
                                               pred.x_scaler.transform(x), old._ref_z(pred.x_scaler.transform(x)))[0]
    np.testing.assert_allclose(old._predict(pred.x_scaler.transform(x))[0], single, rtol=1e-9)
