"""Gaussian-process predictors: a GP on its own, and a GP on a transferred NN's residuals.

``gp``: an exact GP with ``C · Matérn(ν=2.5, one length scale per feature) + White`` noise
(THOR found Matérn 2.5 best) on normalised targets, its hyper-parameters maximising the marginal
likelihood with L-BFGS-B from a few seeded restarts (:class:`GaussianProcess`: scikit-learn's
``GaussianProcessRegressor`` written out in numpy, same objective, starts and optimiser, ~3× less CPU
per fit), on the standardised features and the standardised (log-time or power) target. It gives a predictive std that grows away from the data. Exact GP fitting is cubic in
the rows, so a table larger than ``max_rows`` (default 800) is subsampled (seeded) for
fitting; prediction on 18k modes against a few hundred rows takes well under a second.

``nn+gp``: a PowerTrain NN (:class:`~edgetune.estimation.nn.NNPredictor`) is fitted on the
reference and transferred to the new small table; then a GP is fitted on that table, and its
std is the predictive std. Two ways to combine them (``combine``):

* ``"stacked"`` (default): the GP models the target over the mode features *plus the
  transferred NN's prediction* as a fifth input. With ARD the GP leans on the NN output where
  the reference transfers well and on the raw modes where it does not.
* ``"residual"``: the GP models the NN's in-sample residuals over the mode features and the
  prediction is ``nn + gp``.

On the simulator (50 noisy modes, Orin AGX, ResNet18 reference, 3 draws) "stacked" beat
"residual" on every workload — MobileNetV3 time 7.8 vs 7.8-10 %, BERT-base 4.9 vs 9.5 % time and
3.5 vs 6.6 % power — because a transferred NN's residuals on a workload unlike the reference
(BERT is GPU-bound everywhere, ResNet data-bound at low CPU clocks) are not smooth, while the
target itself is. Out-of-fold residuals were worse still. Before any transfer the predictor
answers with the NN alone (no std).

Calibration (``calibration="cv"``): the GP's std is over-confident on modes it was
not profiled on, mostly because the stacked NN input was fine-tuned on the same rows (a
leave-one-out check with the fitted hyper-parameters says the std is calibrated, score std
≈ 1.0, while on unprofiled modes it is 1.8–3.6× too narrow). With ``calibration="cv"`` the
transfer also refits NN + GP on ``calibration_folds`` folds (default 10; each fold starts from
the same reference NN), collects the held-out standardised residuals ``(y − μ)/σ`` and scales
every reported std by ``c = q_{1−risk}(scores) / z(risk)`` (split-conformal rank,
``calibration_risk`` default 0.1), so that ``μ + z(risk)·c·σ`` is the CV conformal bound.
``c`` is stored in the model file (``std_scale``; files without it read as 1.0). The same folds
also leave each profiled row's held-out mean (``calibration_means``, target units; not stored in
the file), on which :func:`edgetune.optimization.select.selection_margin` replays a selection to
calibrate a power margin for the selection itself rather than per mode.

Serialisation stores the fitted kernel hyperparameters and the training rows, and rebuilds
the GP without re-optimising (identical predictions, no pickle).
"""

from __future__ import annotations

import copy
import math
from typing import Any

import numpy as np
from scipy.linalg import cho_solve, cholesky, solve_triangular
from scipy.linalg.lapack import dpotrf, dpotrs
from scipy.optimize import minimize
from scipy.spatial.distance import cdist

from edgetune import validation
from edgetune.base.risk import z_score
from edgetune.errors import InvalidArgument
from edgetune.estimation.base import Predictor
from edgetune.estimation.features import inverse_transform
from edgetune.estimation.nn import NNPredictor, fine_tune_many
from edgetune.estimation.threads import one_blas_thread

#: How ``nn+gp`` combines the transferred NN and the GP (module docs).
COMBINE_MODES = ("stacked", "residual")
#: How ``nn+gp`` calibrates its std after a transfer (module docs); None: the raw GP std.
CALIBRATIONS = (None, "cv")


#: Bounds of the kernel's hyper-parameters (standardised inputs, ``normalize_y`` targets): the constant
#: ``C``, every Matérn length scale, the white-noise level. Theta is their log, in the order
#: ``[log C, log ℓ_1 … log ℓ_d, log noise]`` (scikit-learn's for ``C · Matérn + White``, so model files
#: written with its GaussianProcessRegressor read the same).
CONSTANT_BOUNDS = (1e-3, 1e3)
LENGTH_SCALE_BOUNDS = (1e-2, 1e3)
NOISE_BOUNDS = (1e-6, 1.0)
#: Added to the kernel's diagonal for the Cholesky factor (scikit-learn's default ``alpha``).
JITTER = 1e-10
_SQRT5 = math.sqrt(5.0)
_LOG_2PI = math.log(2.0 * math.pi)


def initial_theta(n_features: int) -> np.ndarray:
    """The first start of every fit: ``C = 1``, every length scale 1, noise 0.01 (log space)."""
    return np.log(np.concatenate([[1.0], np.ones(n_features), [1e-2]]))


def theta_bounds(n_features: int) -> np.ndarray:
    """``(n_features + 2, 2)`` log-space bounds of theta (:data:`CONSTANT_BOUNDS` ...)."""
    return np.log(np.array([CONSTANT_BOUNDS, *[LENGTH_SCALE_BOUNDS] * n_features, NOISE_BOUNDS], dtype=float))


def _matern52(dist: np.ndarray) -> np.ndarray:
    k = dist * _SQRT5
    return (1.0 + k + k * k / 3.0) * np.exp(-k)


def neg_log_marginal_likelihood(theta: np.ndarray, x: np.ndarray, y: np.ndarray) -> tuple[float, np.ndarray]:
    """``−log p(y | x, θ)`` of ``C · Matérn(ν=2.5, ARD) + White`` and its gradient in log space.

    ``y`` is already normalised. The same numbers as scikit-learn's ``log_marginal_likelihood`` (a
    non-positive-definite kernel gives ``+inf`` and a zero gradient, as there), without its per-call
    kernel bookkeeping, which cost ~20× the arithmetic on a node's dozen rows.
    """
    n = x.shape[0]
    c, scales, noise = math.exp(theta[0]), np.exp(theta[1:-1]), math.exp(theta[-1])
    xs = x / scales
    diff = xs[:, None, :] - xs[None, :, :]
    sq = diff * diff  # (n, n, d): per-feature squared scaled distances
    dist = np.sqrt(sq.sum(axis=2))
    e = np.exp(-_SQRT5 * dist)
    m = (1.0 + _SQRT5 * dist + 5.0 / 3.0 * dist * dist) * e
    k = c * m
    k.flat[:: n + 1] += noise + JITTER
    # LAPACK's Cholesky and its solves straight (what scipy.linalg.cholesky / cho_solve call, less their
    # argument checks, which cost more than the arithmetic at a dozen rows)
    chol, info = dpotrf(k, lower=1, clean=1)
    if info != 0:  # not positive definite
        return math.inf, np.zeros_like(theta)
    alpha = dpotrs(chol, y, lower=1)[0]
    lml = -0.5 * float(y @ alpha) - float(np.log(chol.diagonal()).sum()) - 0.5 * n * _LOG_2PI
    inner = np.outer(alpha, alpha) - dpotrs(chol, np.eye(n), lower=1)[0]
    grad = np.empty_like(theta)
    grad[0] = 0.5 * c * float((inner * m).sum())
    # d m / d log ℓ_k = 5/3 · sq_k · (1 + √5 r) · e^{−√5 r}
    weights = inner * ((1.0 + _SQRT5 * dist) * e)
    grad[1:-1] = 0.5 * c * 5.0 / 3.0 * (weights.reshape(-1) @ sq.reshape(-1, sq.shape[2]))
    grad[-1] = 0.5 * noise * float(inner.trace())
    return -lml, -grad


def _fmt_list(values: np.ndarray) -> str:
    return ", ".join(f"{v:.3g}" for v in values)


class GaussianProcess:
    """An exact GP with ``C · Matérn(ν=2.5, ARD) + White`` noise on normalised targets (``normalize_y``).

    :meth:`fit` maximises the log marginal likelihood with L-BFGS-B from :func:`initial_theta` (or
    ``start``) and from ``restarts`` log-uniform draws inside :func:`theta_bounds` (seeded), keeping the
    best; :meth:`restore` rebuilds one from stored hyper-parameters without optimising. The objective,
    the starts and the optimiser are scikit-learn's ``GaussianProcessRegressor(normalize_y=True,
    n_restarts_optimizer=restarts, random_state=seed)``'s, written out in numpy: fitting a node's few
    rows spent almost all its time in scikit-learn's kernel objects, not in the arithmetic
    (``tests/unit/test_gp.py`` holds the two side by side).
    """

    def __init__(self, restarts: int = 3, seed: int = 0) -> None:
        self.restarts, self.seed = restarts, seed
        self.theta: np.ndarray | None = None
        self.x: np.ndarray | None = None
        self.y: np.ndarray | None = None
        self._y_mean, self._y_std = 0.0, 1.0
        self._chol: np.ndarray | None = None
        self._alpha: np.ndarray | None = None

    @property
    def fitted(self) -> bool:
        return self.theta is not None

    def _normalise(self, y: np.ndarray) -> np.ndarray:
        self._y_mean = float(np.mean(y))
        std = float(np.std(y))
        self._y_std = std if std != 0.0 else 1.0
        return (y - self._y_mean) / self._y_std

    def fit(self, x: np.ndarray, y: np.ndarray, start: np.ndarray | None = None) -> GaussianProcess:
        """Optimise the kernel on ``(x, y)``; from hyper-parameters ``start`` (log-space theta) if given."""
        x, y = np.asarray(x, float), np.asarray(y, float).ravel()
        yn = self._normalise(y)
        bounds = theta_bounds(x.shape[1])
        starts = [np.asarray(start, float) if start is not None else initial_theta(x.shape[1])]
        rng = np.random.RandomState(self.seed)  # the draws of scikit-learn's restarts, for the same seed
        starts += [rng.uniform(bounds[:, 0], bounds[:, 1]) for _ in range(self.restarts)]
        with one_blas_thread():  # a few dozen rows (estimation.threads)
            optima = [minimize(neg_log_marginal_likelihood, theta0, args=(x, yn), method="L-BFGS-B", jac=True,
                               bounds=bounds) for theta0 in starts]
            best = optima[int(np.argmin([float(res.fun) for res in optima]))]  # ties: the first, as scikit-learn
            self.x, self.y = x, y
            self._factorise(np.asarray(best.x, float), yn)
        return self

    def _factorise(self, theta: np.ndarray, yn: np.ndarray) -> None:
        assert self.x is not None
        self.theta = theta
        c, noise = math.exp(theta[0]), math.exp(theta[-1])
        xs = self.x / np.exp(theta[1:-1])
        k = c * _matern52(cdist(xs, xs))
        k[np.diag_indices_from(k)] += noise + JITTER
        try:
            self._chol = cholesky(k, lower=True, check_finite=False)
        except np.linalg.LinAlgError as exc:
            exc.args = (f"the kernel {self.summary()} is not positive definite on these rows", *exc.args)
            raise
        self._alpha = cho_solve((self._chol, True), yn, check_finite=False)

    def predict(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Predictive mean and std (the white noise included) at ``x``, in the units of the fitted ``y``."""
        assert self.theta is not None and self.x is not None and self._chol is not None and self._alpha is not None
        theta = self.theta
        c, scales, noise = math.exp(theta[0]), np.exp(theta[1:-1]), math.exp(theta[-1])
        with one_blas_thread():
            k_trans = c * _matern52(cdist(np.asarray(x, float) / scales, self.x / scales))
            mu = (k_trans @ self._alpha) * self._y_std + self._y_mean
            v = solve_triangular(self._chol, k_trans.T, lower=True, check_finite=False)
            var = np.maximum(c + noise - np.einsum("ij,ij->j", v, v), 0.0)
        return mu, np.sqrt(var) * self._y_std

    def state(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        assert self.theta is not None and self.x is not None and self.y is not None
        return ({"restarts": self.restarts}, {"theta": self.theta, "x": self.x, "y": self.y})

    @classmethod
    def restore(cls, state: dict[str, Any], theta: np.ndarray, x: np.ndarray, y: np.ndarray,
                seed: int = 0) -> GaussianProcess:
        gp = cls(int(state.get("restarts", 0)), seed)
        gp.x, gp.y = np.asarray(x, float), np.asarray(y, float).ravel()
        gp._factorise(np.asarray(theta, float), gp._normalise(gp.y))
        return gp

    def summary(self) -> str:
        """The fitted kernel, written as scikit-learn writes it (``C**2 * Matern(...) + WhiteKernel(...)``)."""
        if self.theta is None:
            return ""
        c, scales, noise = np.exp(self.theta[0]), np.exp(self.theta[1:-1]), np.exp(self.theta[-1])
        return (f"{np.sqrt(c):.3g}**2 * Matern(length_scale=[{_fmt_list(scales)}], nu=2.5) "
                f"+ WhiteKernel(noise_level={noise:.3g})")

    def noise_sd(self) -> float:
        """The fitted white-noise sd in the units of the ``y`` it was fitted on (normalisation undone)."""
        assert self.theta is not None
        return float(math.sqrt(math.exp(self.theta[-1])) * self._y_std)


class GPPredictor(Predictor):
    """Exact GP on (log-)target with Matérn-2.5 ARD + white noise; gives a std."""

    method = "gp"
    gives_std = True

    def __init__(self, target: str = "time_ms", transform: str | None = None, seed: int = 0, *,
                 restarts: int = 3, max_rows: int = 800) -> None:
        super().__init__(target, transform, seed)
        if int(max_rows) < 10:
            raise InvalidArgument("max_rows", f"{max_rows} is too few rows for a GP", ">= 10")
        self.restarts, self.max_rows = int(restarts), int(max_rows)
        self.gp: GaussianProcess | None = None

    def params(self) -> dict[str, Any]:
        return {"restarts": self.restarts, "max_rows": self.max_rows}

    def _fit(self, xs: np.ndarray, ys: np.ndarray) -> dict[str, Any]:
        if xs.shape[0] > self.max_rows:
            keep = np.sort(np.random.default_rng(self.seed).choice(xs.shape[0], self.max_rows, replace=False))
            xs, ys = xs[keep], ys[keep]
        self.gp = GaussianProcess(self.restarts, self.seed).fit(xs, ys)
        return {"gp_rows": int(xs.shape[0]), "kernel": self.gp.summary()}

    def _predict(self, xs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        assert self.gp is not None
        return self.gp.predict(xs)

    def _state(self):
        assert self.gp is not None
        state, arrays = self.gp.state()
        return state, {f"gp.{k}": v for k, v in arrays.items()}, {}

    def _load_state(self, state, arrays, blobs) -> None:
        self.gp = GaussianProcess.restore(state, arrays["gp.theta"], arrays["gp.x"], arrays["gp.y"], self.seed)


class NNGPPredictor(Predictor):
    """Transfer NN, then a GP over (mode features, NN prediction) — or on NN residuals; std from the GP."""

    method = "nn+gp"
    supports_transfer = True
    gives_std = True

    def __init__(self, target: str = "time_ms", transform: str | None = None, seed: int = 0, *,
                 combine: str = "stacked", restarts: int = 2, nn_params: dict[str, Any] | None = None,
                 nn: NNPredictor | None = None, calibration: str | None = None, calibration_risk: float = 0.1,
                 calibration_folds: int = 10) -> None:
        super().__init__(target, transform, seed)
        if combine not in COMBINE_MODES:
            raise InvalidArgument("combine", f"unknown combination {combine!r}", ", ".join(COMBINE_MODES))
        if calibration not in CALIBRATIONS:
            raise InvalidArgument("calibration", f"unknown calibration {calibration!r}", "none, cv")
        validation.risk(calibration_risk, "calibration_risk")
        if int(calibration_folds) < 2:
            raise InvalidArgument("calibration_folds", f"{calibration_folds!r} folds", ">= 2")
        self.combine, self.restarts = combine, int(restarts)
        self.calibration, self.calibration_risk = calibration, float(calibration_risk)
        self.calibration_folds = int(calibration_folds)
        self.std_scale = 1.0
        self.calibration_scores: np.ndarray | None = None
        self.calibration_means: np.ndarray | None = None
        self.nn = nn if nn is not None else NNPredictor(target, transform, seed, **(nn_params or {}))
        self.gp: GaussianProcess | None = None

    @classmethod
    def from_nn(cls, nn: NNPredictor, combine: str = "stacked", restarts: int = 2, **kw: Any) -> NNGPPredictor:
        """Wrap a fitted NN (a reference, or a clone of one) so that :meth:`transfer` adds the GP.

        Other keywords (``calibration``, ``calibration_risk``, ``calibration_folds``) go to the constructor.
        """
        pred = cls(nn.target, nn.transform, nn.seed, combine=combine, restarts=restarts, nn=nn, **kw)
        pred.columns, pred.x_scaler, pred.y_scaler = nn.columns, nn.x_scaler, nn.y_scaler
        pred.lo, pred.hi = nn.lo, nn.hi
        pred.meta = {"fit": nn.meta.get("fit"), "transfers": list(nn.meta.get("transfers", []))}
        return pred

    @property
    def progress(self):
        return self.nn.progress

    @progress.setter
    def progress(self, fn) -> None:
        self.nn.progress = fn

    def params(self) -> dict[str, Any]:
        out = {"combine": self.combine, "restarts": self.restarts, "nn_params": self.nn.params()}
        if self.calibration is not None:
            out.update(calibration=self.calibration, calibration_risk=self.calibration_risk,
                       calibration_folds=self.calibration_folds)
        return out

    def _sync_nn(self) -> None:
        # the NN works in this predictor's scaled space: share the scalers
        self.nn.columns, self.nn.x_scaler, self.nn.y_scaler = self.columns, self.x_scaler, self.y_scaler

    def _gp_inputs(self, xs: np.ndarray, nn_out: np.ndarray) -> np.ndarray:
        return np.column_stack([xs, nn_out]) if self.combine == "stacked" else xs

    def _fit(self, xs: np.ndarray, ys: np.ndarray) -> dict[str, Any]:
        self._sync_nn()
        info = self.nn._fit(xs, ys)
        self.gp = None
        return info

    def _fit_gp(self, nn: NNPredictor, xs: np.ndarray, ys: np.ndarray) -> GaussianProcess:
        nn_out = nn.forward(xs)
        target = ys if self.combine == "stacked" else ys - nn_out
        return GaussianProcess(self.restarts, self.seed).fit(self._gp_inputs(xs, nn_out), target)

    def _transfer(self, xs: np.ndarray, ys: np.ndarray) -> dict[str, Any]:
        return self._transfer_many([self], [xs], [ys])[0]

    @classmethod
    def _transfer_many(cls, preds, xss, yss) -> list[dict[str, Any]]:
        """The NNs of every predictor fine-tuned in one batch (:func:`~edgetune.estimation.nn.fine_tune_many`),
        then each one's GP."""
        for p in preds:
            p._sync_nn()
        scores = [p.cv_scores(xs, ys) if p.calibration == "cv" else None for p, xs, ys in zip(preds, xss, yss,
                                                                                             strict=True)]
        infos = fine_tune_many([p.nn for p in preds], xss, yss)
        return [p._finish_transfer(xs, ys, info, sc) for p, xs, ys, info, sc in zip(preds, xss, yss, infos, scores,
                                                                                     strict=True)]

    def _finish_transfer(self, xs: np.ndarray, ys: np.ndarray, info: dict[str, Any],
                         scores: np.ndarray | None) -> dict[str, Any]:
        self.gp = self._fit_gp(self.nn, xs, ys)
        out = {**info, "combine": self.combine, "kernel": self.gp.summary()}
        self.std_scale = 1.0
        if scores is not None:
            # not stored in the file; for other risks see conformal_scale, for a selection margin
            # edgetune.optimization.select.selection_margin(time, calibration_means, y, risk)
            self.calibration_scores = scores
            self.std_scale = conformal_scale(scores, self.calibration_risk)
            out.update(calibration=self.calibration, std_scale=round(self.std_scale, 4))
        return out

    def cv_scores(self, xs: np.ndarray, ys: np.ndarray) -> np.ndarray:
        """Held-out standardised residuals ``(y − μ)/σ`` of NN+GP transfers from the current NN on K folds.

        Also sets :attr:`calibration_means`: each row's held-out (out-of-fold) mean in target units,
        what :func:`~edgetune.optimization.select.selection_margin` replays the selection on.
        """
        n = xs.shape[0]
        k = min(self.calibration_folds, n)
        folds = np.array_split(np.random.default_rng(self.seed + 7).permutation(n), k)
        scores = np.empty(n)
        held_mu = np.empty(n)
        keeps = [np.setdiff1d(np.arange(n), held) for held in folds]
        nns = []
        for _ in folds:
            nn = copy.deepcopy(self.nn)
            nn.progress = None
            nns.append(nn)
        fine_tune_many(nns, [xs[keep] for keep in keeps], [ys[keep] for keep in keeps])  # the folds in one batch
        for held, keep, nn in zip(folds, keeps, nns, strict=True):
            gp = self._fit_gp(nn, xs[keep], ys[keep])
            nn_out = nn.forward(xs[held])
            mu, sd = gp.predict(self._gp_inputs(xs[held], nn_out))
            mu = mu if self.combine == "stacked" else nn_out + mu
            scores[held] = (ys[held] - mu) / np.maximum(sd, 1e-12)
            held_mu[held] = mu
        if self.y_scaler is not None:
            self.calibration_means = inverse_transform(
                self.transform, self.y_scaler.inverse(held_mu.reshape(-1, 1)).ravel(), None)[0]
        return scores

    def _predict(self, xs: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
        nn_out = self.nn.forward(xs)
        if self.gp is None:
            return nn_out, None
        mu, sd = self.gp.predict(self._gp_inputs(xs, nn_out))
        return (mu if self.combine == "stacked" else nn_out + mu), sd * self.std_scale

    def _state(self):
        _, nn_arrays, _ = self.nn._state()
        state: dict[str, Any] = {"in_dim": len(self.columns), "has_gp": self.gp is not None,
                                 "std_scale": self.std_scale}
        arrays = dict(nn_arrays)
        if self.gp is not None:
            gp_state, gp_arrays = self.gp.state()
            state["gp"] = gp_state
            arrays.update({f"gp.{k}": v for k, v in gp_arrays.items()})
        return state, arrays, {}

    def _load_state(self, state, arrays, blobs) -> None:
        self.nn._load_state({"in_dim": state["in_dim"]}, arrays, blobs)
        self._sync_nn()
        self.gp = (GaussianProcess.restore(state["gp"], arrays["gp.theta"], arrays["gp.x"], arrays["gp.y"], self.seed)
                   if state.get("has_gp") else None)
        self.std_scale = float(state.get("std_scale", 1.0))  # files before calibration: the raw std


def conformal_scale(scores: np.ndarray, risk: float, *, two_sided: bool = False) -> float:
    """``c`` with ``z·c`` = the split-conformal (1 − risk) quantile of standardised residuals ``scores``:
    ``z = z(risk)`` for a one-sided bound ``μ + z·c·σ``; ``two_sided``: ``z = z(risk / 2)``, the interval
    ``μ ± z·c·σ`` (``scores`` then are ``|y − μ| / σ``)."""
    s = np.sort(np.asarray(scores, float))
    n = len(s)
    k = min(int(np.ceil((n + 1) * (1.0 - risk))), n)  # finite-sample conformal rank; > n: the max
    return max(float(s[k - 1]), 0.0) / z_score(risk / 2 if two_sided else risk)
