"""Baselines the transfer predictors are judged against.

``linear``: ordinary least squares on the standardised features (PowerTrain's and THOR's
"linear regression" baseline); on log time it is a power law in the clocks.
``rf``: a random forest (200 trees, seeded, one job).
NN from scratch: the ``nn`` method (:class:`~edgetune.estimation.nn.NNPredictor`) fitted on the
small table directly, without a reference — :func:`scratch_nn` builds one.
"""

from __future__ import annotations

import pickle
from typing import Any

import numpy as np
from sklearn.ensemble import RandomForestRegressor

from edgetune.estimation.base import Predictor
from edgetune.estimation.nn import NNPredictor


class LinearPredictor(Predictor):
    """Least squares ``y ≈ w·x + b`` on standardised features."""

    method = "linear"

    def __init__(self, target: str = "time_ms", transform: str | None = None, seed: int = 0) -> None:
        super().__init__(target, transform, seed)
        self.coef: np.ndarray | None = None

    def _fit(self, xs: np.ndarray, ys: np.ndarray) -> dict[str, Any]:
        design = np.hstack([xs, np.ones((xs.shape[0], 1))])
        self.coef, *_ = np.linalg.lstsq(design, ys, rcond=None)
        return {}

    def _predict(self, xs: np.ndarray) -> tuple[np.ndarray, None]:
        assert self.coef is not None
        return xs @ self.coef[:-1] + self.coef[-1], None

    def _state(self):
        return {}, {"coef": self.coef}, {}

    def _load_state(self, state, arrays, blobs) -> None:
        self.coef = np.asarray(arrays["coef"], dtype=float)


class RandomForestPredictor(Predictor):
    """scikit-learn random forest on standardised features."""

    method = "rf"

    def __init__(self, target: str = "time_ms", transform: str | None = None, seed: int = 0, *,
                 n_estimators: int = 200, min_samples_leaf: int = 1) -> None:
        super().__init__(target, transform, seed)
        self.n_estimators, self.min_samples_leaf = int(n_estimators), int(min_samples_leaf)
        self.forest: RandomForestRegressor | None = None

    def params(self) -> dict[str, Any]:
        return {"n_estimators": self.n_estimators, "min_samples_leaf": self.min_samples_leaf}

    def _fit(self, xs: np.ndarray, ys: np.ndarray) -> dict[str, Any]:
        self.forest = RandomForestRegressor(n_estimators=self.n_estimators, min_samples_leaf=self.min_samples_leaf,
                                            random_state=self.seed, n_jobs=1).fit(xs, ys)
        return {}

    def _predict(self, xs: np.ndarray) -> tuple[np.ndarray, None]:
        assert self.forest is not None
        return self.forest.predict(xs), None

    def _state(self):
        # A fitted forest is thousands of node arrays; pickle is the one portable form sklearn offers.
        return {}, {}, {"forest.pkl": pickle.dumps(self.forest, protocol=pickle.HIGHEST_PROTOCOL)}

    def _load_state(self, state, arrays, blobs) -> None:
        self.forest = pickle.loads(blobs["forest.pkl"])  # noqa: S301 (trusted model files, see base docs)


def scratch_nn(target: str = "time_ms", seed: int = 0, **kw: Any) -> NNPredictor:
    """The PowerTrain MLP to be fitted from scratch on a small table (no reference)."""
    return NNPredictor(target, seed=seed, **kw)
