"""The numpy GP against scikit-learn's GaussianProcessRegressor with the same kernel, starts and optimiser."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.gaussian_process import GaussianProcessRegressor
from sklearn.gaussian_process.kernels import ConstantKernel, Matern, WhiteKernel

from edgetune.estimation.gp import (
    CONSTANT_BOUNDS,
    LENGTH_SCALE_BOUNDS,
    NOISE_BOUNDS,
    GaussianProcess,
    initial_theta,
    neg_log_marginal_likelihood,
    theta_bounds,
)

pytestmark = pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")  # bounds reached: fine here


def _sklearn(d: int, restarts: int = 0, seed: int = 0, optimizer: str | None = "fmin_l_bfgs_b"):
    kernel = (ConstantKernel(1.0, CONSTANT_BOUNDS)
              * Matern(length_scale=np.ones(d), length_scale_bounds=LENGTH_SCALE_BOUNDS, nu=2.5)
              + WhiteKernel(noise_level=1e-2, noise_level_bounds=NOISE_BOUNDS))
    return GaussianProcessRegressor(kernel=kernel, normalize_y=True, n_restarts_optimizer=restarts,
                                    random_state=seed, optimizer=optimizer)


def _rows(n: int, d: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, d))
    y = np.sin(x[:, 0]) + 0.5 * x[:, 1] ** 2 - 0.3 * x[:, -1] + rng.normal(0, 0.05, n)
    return x, y


def test_the_starts_and_bounds_are_scikit_learns():
    ref = _sklearn(5).kernel
    assert np.allclose(initial_theta(5), ref.theta)
    assert np.allclose(theta_bounds(5), ref.bounds)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_likelihood_and_its_gradient_match_scikit_learn(seed):
    x, y = _rows(12, 5, seed)
    yn = (y - y.mean()) / y.std()
    ref = _sklearn(5, optimizer=None).fit(x, y)
    bounds = theta_bounds(5)
    for theta in np.random.default_rng(seed).uniform(bounds[:, 0], bounds[:, 1], size=(5, 7)):
        value, grad = neg_log_marginal_likelihood(theta, x, yn)
        want, want_grad = ref.log_marginal_likelihood(theta, eval_gradient=True)
        assert value == pytest.approx(-want, rel=1e-9, abs=1e-9)
        assert np.allclose(grad, -want_grad, rtol=1e-7, atol=1e-9)


@pytest.mark.parametrize(("n", "restarts", "seed"), [(12, 2, 0), (12, 2, 3), (30, 1, 1), (8, 0, 2)])
def test_a_fit_finds_scikit_learns_optimum_and_predicts_as_it_does(n, restarts, seed):
    x, y = _rows(n, 5, seed)
    ref = _sklearn(5, restarts, seed).fit(x, y)
    gp = GaussianProcess(restarts, seed).fit(x, y)
    yn = (y - y.mean()) / y.std()
    ours = neg_log_marginal_likelihood(gp.theta, x, yn)[0]
    assert ours <= -ref.log_marginal_likelihood_value_ + 1e-6  # the same optimum (or a better one)
    x_new = np.random.default_rng(seed + 100).normal(size=(50, 5))
    mu, sd = gp.predict(x_new)
    ref_at_ours = _sklearn(5, optimizer=None)
    ref_at_ours.kernel = ref_at_ours.kernel.clone_with_theta(gp.theta)
    want_mu, want_sd = ref_at_ours.fit(x, y).predict(x_new, return_std=True)
    assert np.allclose(mu, want_mu, rtol=1e-8, atol=1e-10)
    assert np.allclose(sd, want_sd, rtol=1e-6, atol=1e-10)
    assert gp.summary() == str(ref_at_ours.kernel_)
    want_noise = np.sqrt(ref_at_ours.kernel_.k2.noise_level) * float(np.ravel(ref_at_ours._y_train_std)[0])
    assert gp.noise_sd() == pytest.approx(want_noise)


def test_a_restored_gp_predicts_exactly_as_the_fitted_one():
    x, y = _rows(15, 4, 5)
    gp = GaussianProcess(1, 0).fit(x, y)
    state, arrays = gp.state()
    back = GaussianProcess.restore(state, arrays["theta"], arrays["x"], arrays["y"])
    x_new = np.random.default_rng(9).normal(size=(20, 4))
    for a, b in zip(gp.predict(x_new), back.predict(x_new), strict=True):
        assert np.array_equal(a, b)


def test_a_warm_start_is_the_first_start():
    x, y = _rows(12, 3, 4)
    fitted = GaussianProcess(0, 0).fit(x, y)
    again = GaussianProcess(0, 0).fit(x, y, start=fitted.theta)
    assert np.allclose(again.theta, fitted.theta, atol=1e-3)


def test_a_constant_target_fits_without_dividing_by_zero():
    x, _ = _rows(10, 3, 6)
    gp = GaussianProcess(0, 0).fit(x, np.full(10, 2.5))
    mu, sd = gp.predict(x)
    assert np.allclose(mu, 2.5) and np.all(np.isfinite(sd))
