"""Measurement-noise floor (edgetune.estimation.noise): both estimators recover a known noise level."""

from __future__ import annotations

import numpy as np
import pytest

from edgetune.estimation.noise import difference_noise_sd, estimate_noise, floor_mape_pct, gp_noise_sd


def grid() -> np.ndarray:
    limits = np.arange(100.0, 301.0, 25.0)
    log_batch = np.log2([8, 16, 32, 64, 128, 256, 512, 1024])
    return np.array([(p, b) for p in limits for b in log_batch])


def smooth(x: np.ndarray) -> np.ndarray:
    return 100.0 * np.exp(-x[:, 0] / 300.0) * (1.0 + 0.03 * (x[:, 1] - 5.0) ** 2)


@pytest.mark.parametrize("sd", [0.01, 0.05])
def test_relative_noise_on_a_smooth_table_is_recovered_by_both_estimators(sd):
    x = grid()
    y = smooth(x) * np.exp(np.random.default_rng(1).normal(0.0, sd, len(x)))
    est = estimate_noise(x, y, "log", axis=0)
    assert est.gp_sd == pytest.approx(sd, rel=0.3)
    assert est.difference_sd == pytest.approx(sd, rel=0.3)
    assert est.sd == min(est.gp_sd, est.difference_sd)


def test_a_noiseless_table_has_a_floor_near_zero_and_structure_is_not_counted_by_differences():
    x = grid()
    z = np.log(smooth(x))
    assert difference_noise_sd(x, z, axis=0) < 1e-3
    assert gp_noise_sd(x, z) < 1e-2


def test_floor_mape_matches_a_perfect_predictor_on_simulated_measurements():
    rng = np.random.default_rng(2)
    f = np.full(200_000, 50.0)
    for sd in (0.02, 0.2):
        y = f * np.exp(rng.normal(0.0, sd, f.shape))
        assert floor_mape_pct(sd, "log", y) == pytest.approx(100.0 * np.mean(np.abs(f - y) / y), rel=0.02)
    y = f + rng.normal(0.0, 2.0, f.shape)
    assert floor_mape_pct(2.0, "identity", y) == pytest.approx(100.0 * np.mean(np.abs(f - y) / y), rel=0.02)
    assert np.isnan(floor_mape_pct(float("nan"), "log", y))
