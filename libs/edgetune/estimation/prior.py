"""``ref+gp``: a reference model as a GP's prior mean or input, chosen per target by cross-validation.

A transfer must beat a Matérn GP fitted from scratch on the same profiled points,
and fine-tuning the reference MLP (``transfer``, ``nn+gp``) did not, on real measurements.
This predictor keeps the reference untouched and uses only its *predictions* ``r(x)``
(in the standardised, log-for-time target space of the new table):

* ``scratch``: a GP on the mode features alone (what the baseline does);
* ``prior``: ``a + b·r(x)`` fitted by least squares on the profiled rows, plus a GP on the
  residuals over the mode features: the reference is the prior mean, the GP corrects it
  where the new workload / device differs;
* ``stacked``: a GP over the mode features plus ``r(x)`` as one more input (ARD decides how
  much to trust it).

How the three serve a target is decided by K-fold cross-validation on the profiled rows
(``folds``, default 5; each fold re-optimises its kernel, starting from the all-rows one): the
non-negative weights, summing to one on a 0.1 grid, whose blend of the candidates' out-of-fold
predictions has the least MAPE (target units) are kept, and the weighted candidates are
refitted on every row. A blend rather than a hard choice: on the real sets (``experiments/
real_data.py``) the hard choice sometimes picked a candidate 1.3× worse than the scratch GP,
the blend less often. ``choice`` names the heaviest candidate in the blend; the out-of-fold MAPE of each
(``cv_mape_pct``) and the ``weights`` are recorded in the transfer's metadata — the accuracy
``estimate transfer`` can report without a separate test set. The blend serves only when its
out-of-fold gain over the GP from scratch is clear (above ``evidence_se`` standard errors of the
paired per-row gain, :mod:`edgetune.estimation.evidence`); otherwise the GP from scratch serves
alone, so a reference that does not help costs nothing.

Calibration: the blend's std is ``sqrt(σ² + s₀²)`` — the weighted GP std and a homoscedastic
floor ``s₀``, the median out-of-fold absolute error (``std_floor``) — times ``std_scale``: the
split-conformal ``coverage`` (0.9) quantile of the out-of-fold ``|y − μ|/std``, over ``z`` of the
two-sided interval (1.645), so that ``μ ± 1.645·std`` is a 90 % interval on the held-out folds.
``std_scale``, ``std_floor``, ``weights`` and the blended candidates are stored in the file; a
file from before the blend (one candidate, no floor) reads as that candidate alone.

The reference may be any fitted predictor (``nn``, ``gp`` ...) with the same feature columns;
it is stored inside this predictor's file (``blobs/reference.predictor``), so a transferred
model file is self-contained. Fitting ``ref+gp`` with no reference (``fit``) is a plain GP.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from edgetune.errors import FailedPrecondition, InvalidArgument
from edgetune.estimation.base import Predictor
from edgetune.estimation.evidence import EVIDENCE_SE, MAX_EVIDENCE_SE, clear_gain
from edgetune.estimation.features import forward_transform, inverse_transform
from edgetune.estimation.gp import GaussianProcess, conformal_scale
from edgetune.estimation.metrics import mape_pct

CANDIDATES: tuple[str, ...] = ("scratch", "prior", "stacked")


class RefGPPredictor(Predictor):
    """GP using a reference's predictions as prior mean or input; the combination chosen by CV."""

    method = "ref+gp"
    supports_transfer = True
    gives_std = True

    def __init__(self, target: str = "time_ms", transform: str | None = None, seed: int = 0, *,
                 restarts: int = 2, folds: int = 5, candidates: tuple[str, ...] | list[str] | str = CANDIDATES,
                 coverage: float = 0.9, evidence_se: float = EVIDENCE_SE) -> None:
        super().__init__(target, transform, seed)
        if isinstance(candidates, str):  # as a setting is written on the wire and the command line
            candidates = [c.strip() for c in candidates.split(",") if c.strip()]
        unknown = [c for c in candidates if c not in CANDIDATES]
        if unknown or not candidates:
            raise InvalidArgument("candidates", f"unknown or no candidates {list(candidates)!r}", ", ".join(CANDIDATES))
        if int(folds) < 2:
            raise InvalidArgument("folds", f"{folds!r} folds", ">= 2")
        if not 0.5 <= float(coverage) < 1.0:
            raise InvalidArgument("coverage", f"{coverage!r} is out of range", "0.5 <= coverage < 1")
        if not 0.0 <= float(evidence_se) <= MAX_EVIDENCE_SE:
            raise InvalidArgument("evidence_se", f"{evidence_se!r} is out of range",
                                  f"0 <= evidence_se <= {MAX_EVIDENCE_SE:g}")
        self.restarts, self.folds = int(restarts), int(folds)
        self.candidates = tuple(candidates)
        self.coverage = float(coverage)
        self.evidence_se = float(evidence_se)
        self.std_floor = 0.0
        self.weights: dict[str, float] = {}
        self.members: dict[str, tuple[GaussianProcess, np.ndarray]] = {}
        self.reference: Predictor | None = None
        self.choice = "scratch"
        self.affine = np.zeros(2)
        self.std_scale = 1.0
        self.gp: GaussianProcess | None = None

    @classmethod
    def from_reference(cls, reference: Predictor, **kw: Any) -> RefGPPredictor:
        """An unfitted-on-the-new-table predictor around a fitted ``reference`` (kept, not copied)."""
        if not reference.fitted:
            raise FailedPrecondition("the reference predictor is not fitted")
        pred = cls(reference.target, reference.transform, reference.seed, **kw)
        pred.reference = reference
        pred.columns, pred.x_scaler, pred.y_scaler = reference.columns, reference.x_scaler, reference.y_scaler
        pred.lo, pred.hi = reference.lo, reference.hi
        pred.meta = {"fit": reference.meta.get("fit"), "transfers": list(reference.meta.get("transfers", []))}
        return pred

    def params(self) -> dict[str, Any]:
        return {"restarts": self.restarts, "folds": self.folds, "candidates": list(self.candidates),
                "coverage": self.coverage, "evidence_se": self.evidence_se}

    # -- the reference's output in this predictor's scaled target space ---------------------------
    def _ref_z(self, xs: np.ndarray) -> np.ndarray:
        assert self.reference is not None and self.x_scaler is not None and self.y_scaler is not None
        mu, _ = self.reference.predict(self.x_scaler.inverse(xs), check_ranges=False)
        z = forward_transform(self.transform, np.maximum(mu, 1e-9) if self.transform == "log" else mu)
        return self.y_scaler.transform(z.reshape(-1, 1)).ravel()

    # -- one candidate: fit and predict on scaled arrays ---------------------------------------
    def _fit_candidate(self, kind: str, xs: np.ndarray, ys: np.ndarray, r: np.ndarray | None,
                       theta: np.ndarray | None = None, refit: bool = False) -> tuple[GaussianProcess, np.ndarray]:
        """Fit one candidate; with ``theta``, start from those kernel hyper-parameters: one
        optimisation from there (``refit``) or none (reused as they are)."""
        affine = np.zeros(2)
        inputs, target = xs, ys
        if kind == "stacked":
            assert r is not None
            inputs = np.column_stack([xs, r])
        elif kind == "prior":
            assert r is not None
            design = np.column_stack([np.ones_like(r), r])
            affine = np.linalg.lstsq(design, ys, rcond=None)[0]
            target = ys - design @ affine
        if theta is None:
            return GaussianProcess(self.restarts, self.seed).fit(inputs, target), affine
        if refit:
            return GaussianProcess(0, self.seed).fit(inputs, target, start=theta), affine
        return GaussianProcess.restore({"restarts": self.restarts}, theta, inputs, target, self.seed), affine

    @staticmethod
    def _predict_candidate(kind: str, gp: GaussianProcess, affine: np.ndarray, xs: np.ndarray,
                           r: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        if kind == "scratch":
            return gp.predict(xs)
        assert r is not None
        if kind == "stacked":
            return gp.predict(np.column_stack([xs, r]))
        mu, sd = gp.predict(xs)
        return affine[0] + affine[1] * r + mu, sd

    def _to_units(self, mu: np.ndarray) -> np.ndarray:
        assert self.y_scaler is not None
        return inverse_transform(self.transform, self.y_scaler.inverse(mu.reshape(-1, 1)).ravel(), None)[0]

    def cross_validate(self, xs: np.ndarray, ys: np.ndarray, r: np.ndarray | None) -> dict[str, tuple]:
        """Each usable candidate: (fit on all rows, out-of-fold mean, out-of-fold std) in scaled space.

        Each fold re-optimises the kernel hyper-parameters on its own rows, starting from those
        fitted on all rows (one optimisation, no restarts): reusing the all-rows kernel as is
        leaks the held-out rows into the fold and made the residuals too small for calibration
        (on real sets, 90 % intervals covered 44–76 % of held-out rows at 10–20 points).
        """
        n = xs.shape[0]
        k = min(self.folds, n)
        folds = np.array_split(np.random.default_rng(self.seed + 11).permutation(n), k)
        kinds = [c for c in self.candidates if r is not None or c == "scratch"]
        out: dict[str, tuple] = {}
        for kind in kinds:
            full = self._fit_candidate(kind, xs, ys, r)
            theta = full[0].state()[1]["theta"]
            mu, sd = np.empty(n), np.empty(n)
            for held in folds:
                keep = np.setdiff1d(np.arange(n), held)
                gp, affine = self._fit_candidate(kind, xs[keep], ys[keep], None if r is None else r[keep], theta,
                                                 refit=True)
                mu[held], sd[held] = self._predict_candidate(kind, gp, affine, xs[held],
                                                             None if r is None else r[held])
            out[kind] = (full, mu, sd)
        return out

    def _choose_and_fit(self, xs: np.ndarray, ys: np.ndarray) -> dict[str, Any]:
        r = self._ref_z(xs) if self.reference is not None else None
        truth = self._to_units(ys)
        cv = self.cross_validate(xs, ys, r)
        out_of_fold = {k: self._to_units(mu) for k, (_, mu, _) in cv.items()}
        mape = {k: mape_pct(pred, truth) for k, pred in out_of_fold.items()}
        self.weights = _simplex_weights(out_of_fold, truth)
        blend = np.sum([w * out_of_fold[k] for k, w in self.weights.items()], axis=0)
        if "scratch" in cv and not clear_gain(out_of_fold["scratch"], blend, truth, self.evidence_se):
            self.weights = {"scratch": 1.0}
        # the heaviest member of the blend (ties: the better one alone) is the one an older reader sees
        self.choice = max(self.weights, key=lambda k: (self.weights[k], -mape[k]))
        self.members = {k: cv[k][0] for k in self.weights}
        self.gp, self.affine = cv[self.choice][0]
        mu = sum(w * cv[k][1] for k, w in self.weights.items())
        sd = sum(w * cv[k][2] for k, w in self.weights.items())
        # a homoscedastic part (the median out-of-fold error) keeps the interval from collapsing where
        # the GP is sure of itself but the measurements are not
        self.std_floor = float(np.median(np.abs(ys - mu)))
        sd = np.hypot(sd, self.std_floor)
        scores = np.abs(ys - mu) / np.maximum(sd, 1e-12)
        self.std_scale = max(conformal_scale(scores, 1.0 - self.coverage, two_sided=True), 1e-3)
        return {"choice": self.choice, "cv_mape_pct": {k: round(v, 3) for k, v in mape.items()},
                "weights": {k: round(w, 3) for k, w in self.weights.items()},
                "std_scale": round(self.std_scale, 4), "kernel": self.gp.summary()}

    # -- Predictor hooks -----------------------------------------------------------------------
    def _fit(self, xs: np.ndarray, ys: np.ndarray) -> dict[str, Any]:
        self.reference = None  # fitted on its own table: a GP from scratch (with CV calibration)
        return self._choose_and_fit(xs, ys)

    def _transfer(self, xs: np.ndarray, ys: np.ndarray) -> dict[str, Any]:
        if self.reference is None:
            raise FailedPrecondition("ref+gp transfers from a reference predictor; build it with "
                                     "RefGPPredictor.from_reference (edgetune estimate transfer does)")
        return self._choose_and_fit(xs, ys)

    def _predict(self, xs: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
        if self.gp is None:  # not yet adapted to a table: the reference alone
            if self.reference is None:
                raise FailedPrecondition("ref+gp predictor is not fitted")
            return self._ref_z(xs), None
        r = self._ref_z(xs) if set(self.members) != {"scratch"} else None
        mu, sd = np.zeros(xs.shape[0]), np.zeros(xs.shape[0])
        for kind, (gp, affine) in self.members.items():
            m, d = self._predict_candidate(kind, gp, affine, xs, r)
            mu, sd = mu + self.weights[kind] * m, sd + self.weights[kind] * d
        return mu, np.hypot(sd, self.std_floor) * self.std_scale

    def _state(self):
        # the chosen candidate stays under "gp" / "affine" (what files before the blend hold); the
        # other blended candidates go under "members"
        state: dict[str, Any] = {"choice": self.choice, "affine": [float(v) for v in self.affine],
                                 "std_scale": self.std_scale, "std_floor": self.std_floor,
                                 "has_gp": self.gp is not None,
                                 "weights": dict(self.weights), "members": {}}
        arrays: dict[str, np.ndarray] = {}
        if self.gp is not None:
            gp_state, gp_arrays = self.gp.state()
            state["gp"] = gp_state
            arrays.update({f"gp.{k}": v for k, v in gp_arrays.items()})
        for kind, (gp, affine) in self.members.items():
            if kind == self.choice:
                continue
            gp_state, gp_arrays = gp.state()
            state["members"][kind] = {"gp": gp_state, "affine": [float(v) for v in affine]}
            arrays.update({f"member.{kind}.{k}": v for k, v in gp_arrays.items()})
        blobs = {"reference.predictor": self.reference.to_bytes()} if self.reference is not None else {}
        return state, arrays, blobs

    def _load_state(self, state, arrays, blobs) -> None:
        self.choice = str(state.get("choice", "scratch"))
        self.affine = np.asarray(state.get("affine", [0.0, 0.0]), float)
        self.std_scale = float(state.get("std_scale", 1.0))
        self.std_floor = float(state.get("std_floor", 0.0))
        ref = blobs.get("reference.predictor")
        self.reference = Predictor.from_bytes(ref, "reference") if ref is not None else None
        self.gp = (GaussianProcess.restore(state["gp"], arrays["gp.theta"], arrays["gp.x"], arrays["gp.y"], self.seed)
                   if state.get("has_gp") else None)
        self.members, self.weights = {}, {}
        if self.gp is None:
            return
        self.weights = {str(k): float(w) for k, w in state.get("weights", {self.choice: 1.0}).items()}
        self.members[self.choice] = (self.gp, self.affine)
        for kind, member in state.get("members", {}).items():
            gp = GaussianProcess.restore(member["gp"], arrays[f"member.{kind}.theta"], arrays[f"member.{kind}.x"],
                                         arrays[f"member.{kind}.y"], self.seed)
            self.members[kind] = (gp, np.asarray(member["affine"], float))


def _simplex_weights(preds: dict[str, np.ndarray], truth: np.ndarray, step: float = 0.1) -> dict[str, float]:
    """Non-negative weights summing to 1 (grid ``step``) whose blend has the least MAPE on ``truth``."""
    kinds = list(preds)
    steps = int(round(1.0 / step))
    best, best_w = np.inf, {kinds[0]: 1.0}
    for combo in _compositions(steps, len(kinds)):
        w = np.asarray(combo, float) / steps
        blend = sum(wi * preds[k] for wi, k in zip(w, kinds, strict=True))
        err = mape_pct(blend, truth)
        if err < best - 1e-10:
            best, best_w = err, {k: float(wi) for wi, k in zip(w, kinds, strict=True) if wi > 0}
    return best_w


def _compositions(total: int, parts: int) -> Iterator[tuple[int, ...]]:
    """Every way to write ``total`` as ``parts`` non-negative integers, in order."""
    if parts == 1:
        yield (total,)
        return
    for first in range(total, -1, -1):
        for rest in _compositions(total - first, parts - 1):
            yield (first, *rest)
