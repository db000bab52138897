"""NeuralPower (NeuralPower): per-layer-type polynomial Lasso models of time and power.

Pieces:

* :func:`sample_configs` / :func:`build_layer` — random 1-layer networks of each type
  (``conv``, ``pool``, ``flatten``, ``fc``) in ranges scaled down from NeuralPower's Table 2 so
  that a shared laptop CPU measures a few hundred of them in a minute or two;
* :func:`repetitions` and :func:`measure_time_ms` — NeuralPower's repetition rule (count the
  runs that fit a window, round up to ``(first digit + 1) · 10^(digits - 1)``) and a real
  CPU timing with :func:`edgetune.workloads.time_module` (median of the repeats: the CPU is
  shared, and the median ignores another process's burst);
* :func:`layer_features` — Table 1's hyperparameters (+ batch size) of a
  :class:`~.features.LayerRecord`, so any model's layers can be predicted;
* :class:`PolyLasso` — PolynomialFeatures(K, interactions) → StandardScaler → Lasso, K and
  α chosen by 5-fold CV on RMSE over K ∈ {1..4}, α ∈ {1e-10 … 1}, refit on all data;
* :class:`NeuralPowerModel` — one PolyLasso per (type, target); whole-network time = Σ
  layer times, power = time-weighted mean of layer powers.
"""

from __future__ import annotations

import math
import time
import warnings
from dataclasses import dataclass, field

import numpy as np
import torch
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import Lasso, lasso_path
from sklearn.model_selection import KFold
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import PolynomialFeatures, StandardScaler
from torch import nn

from edgetune.errors import InvalidArgument
from edgetune.estimation.threads import one_blas_thread
from edgetune.physics.layers import LayerRecord
from edgetune.workloads import time_module
from edgetune.workloads.layers import extract_layers

#: The four layer types NeuralPower models.
NP_KINDS = ("conv", "pool", "flatten", "fc")
#: Input features per type (NeuralPower's Table 1, plus batch size, which our layers vary).
FEATURES: dict[str, tuple[str, ...]] = {
    "conv": ("input_size", "channels", "filters", "kernel", "stride", "padding", "batch_size"),
    "pool": ("input_size", "channels", "pool_size", "stride", "padding", "batch_size"),
    "flatten": ("input_size", "channels", "batch_size"),
    "fc": ("input_size", "neurons", "batch_size"),
}
DEGREES = (1, 2, 3, 4)
ALPHAS = tuple(10.0**e for e in range(-10, 1))  # 1e-10 ... 1, decades

#: Value ranges (inclusive) of the generated 1-layer networks: Table 2 shrunk for a CPU.
RANGES: dict[str, dict[str, tuple[int, int]]] = {
    "conv": {"input_size": (8, 48), "channels": (1, 64), "filters": (8, 128), "kernel": (1, 5), "stride": (1, 3)},
    "pool": {"input_size": (8, 64), "channels": (16, 128), "pool_size": (2, 4), "stride": (1, 3)},
    "flatten": {"input_size": (4, 64), "channels": (16, 128)},
    "fc": {"input_size": (64, 4096), "neurons": (16, 2048)},
}
BATCH_SIZES = (1, 2, 4)


# -- 1-layer networks ---------------------------------------------------------------------
def sample_configs(kind: str, n: int, seed: int = 0) -> list[dict[str, int]]:
    """``n`` random hyperparameter sets of layer type ``kind`` (uniform integers in :data:`RANGES`)."""
    if kind not in NP_KINDS:
        raise InvalidArgument("kind", f"unknown layer type {kind!r}", ", ".join(NP_KINDS))
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        cfg = {k: int(rng.integers(lo, hi + 1)) for k, (lo, hi) in RANGES[kind].items()}
        cfg["batch_size"] = int(rng.choice(BATCH_SIZES))
        if kind in ("conv", "pool"):
            size = cfg["kernel"] if kind == "conv" else cfg["pool_size"]
            cfg["padding"] = int(size // 2) if rng.random() < 0.5 else 0  # "padding yes/no"
            cfg["input_size"] = max(cfg["input_size"], size)  # the window must fit the input
        out.append(cfg)
    return out


def build_layer(kind: str, cfg: dict[str, int]) -> tuple[nn.Module, tuple[int, ...]]:
    """The 1-layer network of ``cfg`` and its input shape (batch first)."""
    b, s = cfg["batch_size"], cfg["input_size"]
    if kind == "conv":
        return nn.Conv2d(cfg["channels"], cfg["filters"], cfg["kernel"], cfg["stride"], cfg["padding"]), (
            b, cfg["channels"], s, s)
    if kind == "pool":
        return nn.MaxPool2d(cfg["pool_size"], cfg["stride"], cfg["padding"]), (b, cfg["channels"], s, s)
    if kind == "flatten":
        return nn.Flatten(), (b, cfg["channels"], s, s)
    if kind == "fc":
        return nn.Linear(cfg["input_size"], cfg["neurons"]), (b, cfg["input_size"])
    raise InvalidArgument("kind", f"unknown layer type {kind!r}", ", ".join(NP_KINDS))


def layer_features(r: LayerRecord) -> np.ndarray | None:
    """The model inputs of a record (order of :data:`FEATURES`), or None for unmodelled types."""
    if r.kind == "conv":
        return np.array([r.in_h, r.c_in, r.c_out, r.kernel, r.stride, r.padding, r.batch_size], dtype=float)
    if r.kind == "pool":
        return np.array([r.in_h, r.c_in, r.kernel, r.stride, r.padding, r.batch_size], dtype=float)
    if r.kind == "flatten":
        return np.array([r.in_h, r.c_in, r.batch_size], dtype=float)
    if r.kind == "fc":
        return np.array([r.c_in, r.c_out, r.batch_size], dtype=float)
    return None


def repetitions(n: int) -> int:
    """Seed 001's rounding of a run count: ``(first digit of n + 1) · 10^(digits - 1)``."""
    n = max(1, int(n))
    digits = len(str(n))
    return (int(str(n)[0]) + 1) * 10 ** (digits - 1)


def measure_time_ms(module: nn.Module, x: torch.Tensor, window_ms: float = 20.0, max_repeats: int = 200,
                    min_repeats: int = 3) -> float:
    """Real CPU time of one forward pass (ms): count runs in ``window_ms``, round them up by
    :func:`repetitions` (capped), time that many and take the median."""
    count, t0 = 0, time.perf_counter()
    with torch.inference_mode():
        module(x)  # warm-up (allocation, oneDNN primitive choice)
        while (time.perf_counter() - t0) * 1e3 < window_ms:
            module(x)
            count += 1
    n = min(max_repeats, max(min_repeats, repetitions(count)))
    return float(np.median(time_module(module, x, repeats=n, warmup=0)))


@dataclass
class LayerSample:
    """One measured 1-layer network."""

    kind: str
    config: dict[str, int]
    record: LayerRecord
    time_ms: float
    power_w: float


def collect(kind: str, n: int, seed: int = 0, power_fn=None, window_ms: float = 20.0) -> list[LayerSample]:
    """Generate, build, measure (real CPU time) and cost (``power_fn(record) -> W``) ``n`` layers."""
    out = []
    for cfg in sample_configs(kind, n, seed):
        module, shape = build_layer(kind, cfg)
        x = torch.randn(shape)
        record = next(r for r in extract_layers(module, x) if r.kind == kind)
        t_ms = measure_time_ms(module, x, window_ms=window_ms)
        out.append(LayerSample(kind, cfg, record, t_ms, float(power_fn(record)) if power_fn else float("nan")))
    return out


# -- the regression ------------------------------------------------------------------------
def _pipeline(degree: int, alpha: float) -> Pipeline:
    return Pipeline([
        ("poly", PolynomialFeatures(degree, include_bias=False)),
        ("scale", StandardScaler()),
        ("lasso", Lasso(alpha=alpha, max_iter=20000, tol=1e-6)),
    ])


@dataclass
class PolyLasso:
    """Polynomial Lasso with (K, α) picked by k-fold CV RMSE and a refit on all data."""

    degrees: tuple[int, ...] = DEGREES
    alphas: tuple[float, ...] = ALPHAS
    n_folds: int = 5
    seed: int = 0
    degree_: int = 0
    alpha_: float = 0.0
    cv_rmse_: dict[tuple[int, float], float] = field(default_factory=dict)
    model_: Pipeline | None = None

    def fit(self, X: np.ndarray, y: np.ndarray) -> PolyLasso:
        X, y = np.asarray(X, dtype=float), np.asarray(y, dtype=float)
        if len(X) < self.n_folds * 2:
            raise InvalidArgument("samples", f"{len(X)} samples are too few for {self.n_folds}-fold CV",
                                  f">= {self.n_folds * 2}")
        folds = list(KFold(self.n_folds, shuffle=True, random_state=self.seed).split(X))
        alphas_desc = np.array(sorted(self.alphas, reverse=True))
        sq_err = {(k, a): 0.0 for k in self.degrees for a in alphas_desc}
        with warnings.catch_warnings(), one_blas_thread():  # small matrices (estimation.threads)
            warnings.simplefilter("ignore", ConvergenceWarning)
            for k in self.degrees:
                for train, val in folds:
                    poly = PolynomialFeatures(k, include_bias=False)
                    scale = StandardScaler()
                    xt = scale.fit_transform(poly.fit_transform(X[train]))
                    xv = scale.transform(poly.transform(X[val]))
                    y_mean = y[train].mean()
                    # the whole α path with warm starts: one pass per (K, fold) instead of 11 fits
                    _, coefs, _ = lasso_path(xt, y[train] - y_mean, alphas=alphas_desc, max_iter=5000, tol=1e-5)
                    pred = xv @ coefs + y_mean  # (n_val, n_alphas)
                    for j, a in enumerate(alphas_desc):
                        sq_err[(k, a)] += float(np.sum((pred[:, j] - y[val]) ** 2))
            self.cv_rmse_ = {key: math.sqrt(v / len(y)) for key, v in sq_err.items()}
            # ties (several α with the same error) go to the simpler model: lower K, larger α
            self.degree_, self.alpha_ = min(self.cv_rmse_, key=lambda ka: (round(self.cv_rmse_[ka], 12), ka[0], -ka[1]))
            self.model_ = _pipeline(self.degree_, float(self.alpha_)).fit(X, y)
        return self

    @property
    def cv_rmse(self) -> float:
        return self.cv_rmse_[(self.degree_, self.alpha_)]

    def predict(self, X: np.ndarray) -> np.ndarray:
        if self.model_ is None:
            raise InvalidArgument("model", "PolyLasso is not fitted", "call fit first")
        return self.model_.predict(np.atleast_2d(np.asarray(X, dtype=float)))


@dataclass
class NeuralPowerModel:
    """One :class:`PolyLasso` per (layer type, target) — NeuralPower's eight models."""

    models: dict[tuple[str, str], PolyLasso] = field(default_factory=dict)
    min_time_ms: float = 1e-4  # a polynomial can go negative on tiny layers; time cannot

    def fit(self, samples: list[LayerSample], seed: int = 0) -> NeuralPowerModel:
        for kind in NP_KINDS:
            rows = [s for s in samples if s.kind == kind]
            if not rows:
                continue
            feats = [layer_features(s.record) for s in rows]
            X = np.stack([f for f in feats if f is not None])  # every NP_KINDS kind has features
            self.models[(kind, "time")] = PolyLasso(seed=seed).fit(X, np.array([s.time_ms for s in rows]))
            if all(np.isfinite(s.power_w) for s in rows):
                self.models[(kind, "power")] = PolyLasso(seed=seed).fit(X, np.array([s.power_w for s in rows]))
        return self

    def predict_layer(self, r: LayerRecord, target: str = "time") -> float | None:
        x = layer_features(r)
        model = self.models.get((r.kind, target))
        if x is None or model is None:
            return None
        y = float(model.predict(x)[0])
        return max(y, self.min_time_ms) if target == "time" else y

    def predict_network(self, records: list[LayerRecord]) -> tuple[float, float, int]:
        """(time_ms = Σ layer times, power_w = time-weighted mean, layers not modelled)."""
        total_t, weighted_p, skipped = 0.0, 0.0, 0
        for r in records:
            t = self.predict_layer(r, "time")
            if t is None:
                skipped += 1
                continue
            p = self.predict_layer(r, "power")
            total_t += t
            weighted_p += t * (p if p is not None else 0.0)
        return total_t, (weighted_p / total_t if total_t > 0 else float("nan")), skipped
