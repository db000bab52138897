"""THOR (THOR): layer-wise training energy from variant networks and one GP per layer kind.

How it works, for a sequential model parsed into blocks (:mod:`.blocks`):

1. **Plan.** Every block kind of the model needs a GP over its channels. A kind is profiled
   through a small *variant network*: an output kind alone (``E_out(C_in)``), an input kind
   with an output layer (``E_in = E − Ê_out``), a hidden kind between an input and an output
   layer (``E_hidden(C1, C2) = E − Ê_in(C1) − Ê_out(C2)``). Those auxiliary input / output
   layers sit at the hidden layer's resolutions, so they are kinds of their own; planning
   collects them all, with channel bounds, until nothing new appears.
2. **Profile + fit, actively.** Per kind (outputs first, then inputs, then hidden), start at
   the corners of the channel range, fit a GP (Matérn ν = 2.5 by default; RBF and
   DotProduct to compare), profile next the candidate with the largest predictive variance,
   stop at a cap or when that variance falls under 5 % of the profiled data's variance.
   "Profiling" a variant = the layer costing (:mod:`edgetune.physics.costing`)
   of a training iteration, energy above idle per iteration, with the noise of a
   500-iteration run; its cost is accounted as 500 iterations plus a set-up per point.
3. **Estimate.** A model's energy per iteration = Σ of its blocks' GP means (additivity).

:class:`FlopsLinear` is the paper's baseline: energy = a + b · FLOPs, least squares on the
same profiled variants.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal, overload

import numpy as np
import torch
from sklearn.exceptions import ConvergenceWarning
from sklearn.gaussian_process import GaussianProcessRegressor
from sklearn.gaussian_process.kernels import RBF, ConstantKernel, DotProduct, Matern, WhiteKernel
from sklearn.linear_model import LinearRegression
from torch import nn

from edgetune import stopping
from edgetune.base.mode import PowerMode
from edgetune.errors import InvalidArgument
from edgetune.estimation.layerwise.blocks import BlockInstance, BlockKind, ParsedModel, blocks_of
from edgetune.estimation.threads import one_blas_thread
from edgetune.physics.costing import LayerCostModel
from edgetune.workloads.layers import extract_layers, total_flops

KERNELS = ("matern", "rbf", "dotproduct")
#: Stop when the largest predictive variance is under this share of the profiled data's variance.
VAR_FRACTION = 0.05
#: Iterations per profiled point (THOR §A5.2) and the set-up of each profiling run (s).
PROFILE_ITERATIONS = 500
PROFILE_SETUP_S = 3.0
#: Most candidate values per GP input dimension (channel ranges are integer grids).
MAX_CANDIDATES_PER_DIM = 64


def make_kernel(name: str, n_dims: int):
    """The GP kernel ``name`` (+ a white-noise term for measurement noise)."""
    noise = WhiteKernel(1e-3, (1e-8, 5e-2))  # normalised units: noise can't explain the whole signal
    amp = ConstantKernel(1.0, (1e-3, 1e3))
    if name == "matern":
        return amp * Matern([0.3] * n_dims, (1e-2, 1e2), nu=2.5) + noise
    if name == "rbf":
        return amp * RBF([0.3] * n_dims, (1e-2, 1e2)) + noise
    if name == "dotproduct":
        return amp * DotProduct(1.0, (1e-3, 1e3)) + noise
    raise InvalidArgument("kernel", f"unknown kernel {name!r}", ", ".join(KERNELS))


@dataclass
class LayerGP:
    """One kind's GP over integer channels in ``bounds`` (inputs scaled to [0, 1])."""

    bounds: tuple[tuple[int, int], ...]
    kernel: str = "matern"
    X: list[tuple[int, ...]] = field(default_factory=list)
    y: list[float] = field(default_factory=list)
    stop_reason: str = ""
    gp_: GaussianProcessRegressor | None = None

    def _scale(self, X: np.ndarray) -> np.ndarray:
        lo = np.array([b[0] for b in self.bounds], dtype=float)
        hi = np.array([b[1] for b in self.bounds], dtype=float)
        return (np.asarray(X, dtype=float) - lo) / np.maximum(hi - lo, 1.0)

    def corners(self) -> list[tuple[int, ...]]:
        """The range bounds, where THOR starts (2 points in 1-D, 4 in 2-D)."""
        grids = [sorted({lo, hi}) for lo, hi in self.bounds]
        return [tuple(int(v) for v in p) for p in np.array(np.meshgrid(*grids, indexing="ij")).reshape(len(grids), -1).T]

    def candidates(self) -> np.ndarray:
        axes = [np.unique(np.round(np.linspace(lo, hi, min(hi - lo + 1, MAX_CANDIDATES_PER_DIM))).astype(int))
                for lo, hi in self.bounds]
        return np.array(np.meshgrid(*axes, indexing="ij")).reshape(len(axes), -1).T

    def fit(self) -> LayerGP:
        X = self._scale(np.array(self.X))
        gp = GaussianProcessRegressor(make_kernel(self.kernel, len(self.bounds)), normalize_y=True,
                                      n_restarts_optimizer=1, random_state=0)
        with warnings.catch_warnings(), one_blas_thread():  # tiny matrices (estimation.threads)
            warnings.simplefilter("ignore", ConvergenceWarning)
            gp.fit(X, np.array(self.y, dtype=float))
        self.gp_ = gp
        return self

    @overload
    def predict(self, X: np.ndarray | Sequence[Sequence[int]], return_std: Literal[False] = False) -> np.ndarray: ...
    @overload
    def predict(self, X: np.ndarray | Sequence[Sequence[int]],
                return_std: Literal[True]) -> tuple[np.ndarray, np.ndarray]: ...
    def predict(self, X: np.ndarray | Sequence[Sequence[int]],
                return_std: bool = False) -> np.ndarray | tuple[np.ndarray, np.ndarray]:
        """Mean (and the latent function's std: the white-noise term taken out)."""
        if self.gp_ is None:
            raise InvalidArgument("gp", "not fitted", "profile the kind first")
        Xs = self._scale(np.atleast_2d(np.asarray(X, dtype=float)))
        if not return_std:
            return self.gp_.predict(Xs)
        mean, std = self.gp_.predict(Xs, return_std=True)
        noise_var = self.gp_.kernel_.k2.noise_level * float(self.gp_._y_train_std) ** 2
        return mean, np.sqrt(np.maximum(std**2 - noise_var, 0.0))

    def learn(self, measure: Callable[[tuple[int, ...]], float], cap: int, var_fraction: float = VAR_FRACTION,
              strategy: str = "variance", rng: np.random.Generator | None = None) -> LayerGP:
        """Profile the corners, then the max-variance candidate until the cap or the 5 % rule.

        ``strategy="random"`` picks uniformly among unprofiled candidates instead (THOR's
        ablation), still stopping by the same rules.
        """
        if strategy not in ("variance", "random"):
            raise InvalidArgument("strategy", f"unknown strategy {strategy!r}", "variance, random")
        for p in self.corners():
            if len(self.X) < cap and p not in self.X:
                self.X.append(p)
                self.y.append(float(measure(p)))
        # the variance rule needs one interior point: corners alone leave the hyperparameters unidentified
        min_points = len(self.corners()) + 1
        rng = rng or np.random.default_rng(0)
        cands = self.candidates()
        while True:
            stopping.check()  # between GP fits: a caller that went away stops the profiling
            self.fit()
            if len(self.X) >= cap:
                self.stop_reason = "cap"
                break
            _, std = self.predict(cands, return_std=True)
            seen = {tuple(x) for x in self.X}
            fresh = np.array([tuple(c) not in seen for c in cands])
            if not fresh.any():
                self.stop_reason = "exhausted"
                break
            data_var = float(np.var(self.y))
            if len(self.X) >= min_points and float(np.max(std[fresh] ** 2)) < var_fraction * data_var:
                self.stop_reason = "variance"
                break
            if strategy == "variance":
                pick = cands[np.flatnonzero(fresh)[int(np.argmax(std[fresh]))]]
            else:
                pick = cands[rng.choice(np.flatnonzero(fresh))]
            p = tuple(int(v) for v in pick)
            self.X.append(p)
            self.y.append(float(measure(p)))
        return self


@dataclass(frozen=True)
class ProfiledPoint:
    """One profiled variant network."""

    kind: str  # label of the kind it was profiled for
    channels: tuple[int, ...]
    n_blocks: int
    flops: int  # forward FLOPs of the variant (the baseline's input)
    time_ms: float  # per iteration
    energy_j: float  # per iteration, above idle, as measured


@dataclass
class _Need:
    kind: BlockKind
    bounds: list[list[int]]
    templates: tuple[tuple[nn.Module, ...], ...]  # the variant's blocks
    data_shape: tuple[int, ...] | None  # None for output kinds: built from the channel
    position: int  # index of this kind's block in the variant


class Thor:
    """THOR for one parsed model family (its channels from 1 to the original), on one device mode."""

    def __init__(self, parsed: ParsedModel, cost_model: LayerCostModel | None = None, mode: PowerMode | None = None,
                 kernel: str = "matern", cap_1d: int = 10, cap_2d: int = 24, var_fraction: float = VAR_FRACTION,
                 noise_cv: float = 0.02, strategy: str = "variance", seed: int = 0) -> None:
        if kernel not in KERNELS:
            raise InvalidArgument("kernel", f"unknown kernel {kernel!r}", ", ".join(KERNELS))
        self.parsed = parsed
        self.cost_model = cost_model or LayerCostModel()
        self.mode = mode
        self.kernel, self.cap_1d, self.cap_2d = kernel, cap_1d, cap_2d
        self.var_fraction, self.noise_cv, self.strategy = var_fraction, noise_cv, strategy
        self.rng = np.random.default_rng(seed)
        self.gps: dict[BlockKind, LayerGP] = {}
        self.needs: dict[BlockKind, _Need] = {}
        self.profiled: list[ProfiledPoint] = []
        self.fit_s = 0.0

    # -- measuring a variant ---------------------------------------------------------------
    def _variant(self, need: _Need, point: Sequence[int]) -> tuple[nn.Module, list[BlockInstance], tuple]:
        """The variant network of ``need`` at GP input ``point`` (its channels), its blocks, its data shape."""
        k = need.kind
        if need.data_shape is None:  # output kind alone: the data carries the channel count
            shape: tuple[int, ...] = (k.batch_size, point[0], k.in_h, k.in_w) if k.in_h else (k.batch_size, point[0])
            chans: list[int] = []
        else:
            shape = need.data_shape
            # input variant: [C]; hidden: [C_in, C_out]; depthwise hidden: [C, C] (its own width follows)
            chans = [point[0]] if k.role == "input" else [point[0], point[-1]]
        sub = ParsedModel(need.templates, self.parsed.connector, tuple(shape))
        model, blocks = blocks_of(sub, chans)
        return model, blocks, tuple(shape)

    def measure_variant(self, need: _Need, point: Sequence[int]) -> float:
        """Profile a variant (simulated, noisy): energy above idle per iteration, J."""
        model, _, shape = self._variant(need, point)
        records = extract_layers(model, *_meta_input(shape))
        cost = self.cost_model.cost_records(records, self.mode, training=True)
        t_ms, e_j = self.cost_model.measure(cost, self.rng, self.noise_cv)
        self.profiled.append(ProfiledPoint(need.kind.label(), tuple(point), len(need.templates),
                                           total_flops(records), t_ms, e_j))
        return e_j

    # -- planning --------------------------------------------------------------------------
    def _add(self, need: _Need) -> bool:
        old = self.needs.get(need.kind)
        if old is None:
            self.needs[need.kind] = need
            return True
        changed = False
        for ob, nb in zip(old.bounds, need.bounds, strict=True):
            if nb[0] < ob[0] or nb[1] > ob[1]:
                ob[0], ob[1] = min(ob[0], nb[0]), max(ob[1], nb[1])
                changed = True
        return changed

    def _data_shape_for(self, hidden_in: tuple[int, ...]) -> tuple[int, ...]:
        """Data shape whose input block outputs ``hidden_in``'s spatial size."""
        p = self.parsed
        if len(hidden_in) <= 2:
            raise InvalidArgument("model", "a hidden layer with a flat input right after the input layer is not "
                                  "supported", "4-D input to hidden layers")
        _, blocks = blocks_of(p)
        d = p.input_shape[2] / blocks[1].in_shape[2]
        target = tuple(hidden_in[2:])
        for h in sorted(range(max(1, int(target[0] * d) - int(d) - 1), int(target[0] * d) + int(d) + 2),
                        key=lambda v: abs(v - target[0] * d)):
            w = int(round(h * p.input_shape[3] / p.input_shape[2]))
            shape = (p.input_shape[0], p.input_shape[1], h, w)
            sub = ParsedModel((p.blocks[0], p.blocks[-1]), p.connector, shape)
            _, bl = blocks_of(sub, [1])
            if tuple(bl[1].in_shape[2:]) == target:
                return shape
        raise InvalidArgument("model", f"no input size makes the input layer output {target}", "")

    def plan(self) -> dict[BlockKind, _Need]:
        """All kinds to profile (the model's and the auxiliary ones), with channel bounds."""
        p = self.parsed
        _, blocks = blocks_of(p)
        orig = p.channels()
        # channel upper bounds per block output (depthwise blocks follow their input)
        out_hi: list[int] = []
        for i, c in enumerate(orig):
            out_hi.append(c if p.variable(i) else out_hi[-1])
        t_in, t_out = p.blocks[0], p.blocks[-1]
        queue: list[_Need] = []
        for b in blocks:
            role = b.kind.role
            if role == "output":
                queue.append(_Need(b.kind, [[1, out_hi[-1]]], (t_out,), None, 0))
            elif role == "input":
                queue.append(_Need(b.kind, [[1, out_hi[0]]], (t_in, t_out), p.input_shape, 0))
            else:
                in_hi = out_hi[b.index - 1]
                bounds = [[1, in_hi]] if b.kind.n_inputs == 1 else [[1, in_hi], [1, out_hi[b.index]]]
                queue.append(_Need(b.kind, bounds, (t_in, p.blocks[b.index], t_out),
                                   self._data_shape_for(b.in_shape), 1))
        while queue:
            need = queue.pop(0)
            if not self._add(need):
                continue
            need = self.needs[need.kind]
            if need.kind.role == "output":
                continue
            # the auxiliary kinds of this variant, with the bounds of the channels they see
            _, vblocks, _ = self._variant(need, [hi for _, hi in need.bounds])
            first, last = list(need.bounds[0]), list(need.bounds[-1])
            vin, vout = vblocks[0], vblocks[-1]
            if need.kind.role == "hidden":
                queue.append(_Need(vin.kind, [first], (t_in, t_out), need.data_shape, 0))
            queue.append(_Need(vout.kind, [last], (t_out,), None, 0))
        return self.needs

    # -- profiling -------------------------------------------------------------------------
    def _measure_fn(self, need: _Need) -> Callable[[tuple[int, ...]], float]:
        role = need.kind.role
        if role == "output":
            return lambda c: self.measure_variant(need, c)
        if role == "input":
            def f_in(c: tuple[int, ...]) -> float:
                _, vb, _ = self._variant(need, c)
                return self.measure_variant(need, c) - self._predict(vb[-1])
            return f_in

        def f_hidden(c: tuple[int, ...]) -> float:
            _, vb, _ = self._variant(need, c)
            return self.measure_variant(need, c) - self._predict(vb[0]) - self._predict(vb[-1])
        return f_hidden

    def _predict(self, block: BlockInstance) -> float:
        return float(self.gps[block.kind].predict([block.gp_input()])[0])

    def fit(self) -> Thor:
        """Plan, then profile and fit every kind (outputs, inputs, hidden)."""
        if not self.needs:
            self.plan()
        order = {"output": 0, "input": 1, "hidden": 2}
        for need in sorted(self.needs.values(), key=lambda n: order[n.kind.role]):
            bounds = tuple((int(lo), int(hi)) for lo, hi in need.bounds)
            gp = LayerGP(bounds, self.kernel)
            cap = self.cap_2d if len(bounds) == 2 else self.cap_1d
            t0 = time.perf_counter()
            n_before = len(self.profiled)
            gp.learn(self._measure_fn(need), cap, self.var_fraction, self.strategy, self.rng)
            self.fit_s += time.perf_counter() - t0
            self.gps[need.kind] = gp
            assert len(self.profiled) - n_before == len(gp.X)
        return self

    @property
    def profiling_s(self) -> float:
        """Device time the profiling would take: 500 iterations + set-up per point."""
        return sum(PROFILE_ITERATIONS * p.time_ms / 1000.0 + PROFILE_SETUP_S for p in self.profiled)

    # -- estimating ------------------------------------------------------------------------
    def estimate_j(self, channels: Sequence[int] | None = None) -> float:
        """Energy above idle per training iteration of the model with ``channels``, J."""
        return self.estimate_blocks_j(blocks_of(self.parsed, channels)[1])

    def estimate_blocks_j(self, blocks: Sequence[BlockInstance]) -> float:
        """Energy above idle per iteration of a model already described by :func:`blocks_of`."""
        missing = [b.kind.label() for b in blocks if b.kind not in self.gps]
        if missing:
            raise InvalidArgument("channels", f"no GP for {missing}", "fit() covers the parsed model's kinds")
        return float(sum(self._predict(b) for b in blocks))

    def flops_baseline(self) -> FlopsLinear:
        """The FLOPs + linear regression baseline on the same profiled variants."""
        return FlopsLinear().fit([p.flops for p in self.profiled], [p.energy_j for p in self.profiled])


@dataclass
class FlopsLinear:
    """Energy = a + b · FLOPs by least squares (THOR's proxy baseline)."""

    model_: LinearRegression | None = None

    def fit(self, flops: Sequence[float], energy_j: Sequence[float]) -> FlopsLinear:
        self.model_ = LinearRegression().fit(np.asarray(flops, dtype=float).reshape(-1, 1) / 1e9,
                                             np.asarray(energy_j, dtype=float))
        return self

    def predict(self, flops: Sequence[float] | float) -> np.ndarray:
        if self.model_ is None:
            raise InvalidArgument("model", "FlopsLinear is not fitted", "call fit first")
        return self.model_.predict(np.atleast_1d(np.asarray(flops, dtype=float)).reshape(-1, 1) / 1e9)


def _meta_input(shape: Sequence[int]):
    return (torch.zeros(tuple(int(s) for s in shape), device="meta"),)


def model_flops(parsed: ParsedModel, channels: Sequence[int] | None = None) -> int:
    """Forward FLOPs of the parsed model built with ``channels``."""
    model, _ = blocks_of(parsed, channels)
    return total_flops(extract_layers(model, *_meta_input(parsed.input_shape)))


def true_energy_j(parsed: ParsedModel, cost_model: LayerCostModel, channels: Sequence[int] | None = None,
                  mode: PowerMode | None = None, rng: np.random.Generator | None = None,
                  noise_cv: float = 0.0) -> float:
    """The simulator's energy above idle per training iteration (``rng`` → a noisy observation)."""
    model, _ = blocks_of(parsed, channels)
    cost = cost_model.cost_records(extract_layers(model, *_meta_input(parsed.input_shape)), mode, training=True)
    return cost_model.measure(cost, rng, noise_cv)[1] if rng is not None else cost.energy_above_idle_j


def mape_pct(pred: Sequence[float], true: Sequence[float]) -> float:
    p, t = np.asarray(pred, dtype=float), np.asarray(true, dtype=float)
    return float(100.0 * np.mean(np.abs(p - t) / np.abs(t)))


__all__ = ["FlopsLinear", "KERNELS", "LayerGP", "ProfiledPoint", "Thor", "make_kernel", "mape_pct", "model_flops",
           "true_energy_j"]
