"""Batch-size efficiency on a proxy data set: passes to target accuracy and the vector r (Ahmed et al.).

Seed 000 splits time to accuracy into ``TT(b, f) = T_s(b, f) × N_s_acc(b)``: the device
profiles ``T_s``, the time to train on **s samples**; a server estimates ``N_s_acc(b)``, how
many such s-sample passes training with batch size b needs to reach the target accuracy,
by fine-tuning the same pre-trained model with every b on a proxy data set, and sends
``r_b = N_s_acc(b) / max_b N_s_acc(b)``.

:func:`estimate_batch_efficiency` does that here, one Ray task per (batch size, seed)
(:mod:`edgetune.estimation.parallel`):

- start from the shared pre-trained checkpoint (:func:`edgetune.estimation.proxy.pretrained_state`);
- Adam for the CNNs and AdamW for the character transformer, as the paper (``optimizer``:
  :func:`default_optimizer` picks it by workload), at ``lr = base_lr · sqrt(b / base_batch)``
  (square-root scaling, 5e-4 at b = 128 by default; the text experiment's 1e-3:
  :func:`scaled_lr`);
- the training stream is a seeded sequence of epoch permutations of the proxy's training
  split, consumed b samples per minibatch; the seed fixes the order (the same for every
  b, so the batch sizes see the same samples) and dropout;
- **s** (``samples_per_pass``, default 256 = 2 × the largest batch size, inside the paper's
  ``b_max ≤ s ≤ |D|``): after every s samples the held-out accuracy is measured; the
  passes to target are the first k with accuracy ≥ target (an integer, as the paper's
  10 and 15); never within ``max_passes`` → ``inf``.

The text workload (``"chartransformer-slim"`` on ``"text-proxy"``, ``"text-target-a"``, ...,
:mod:`edgetune.estimation.proxy_text`) runs through the same code: its samples are
64-character windows and its accuracy is next-character accuracy over every position.

Per batch size the result holds the passes of every seed, their mean and std (inf when
any seed never reaches the target: a censored run has no finite mean) and r. Two options
make r a sounder measurement (both off unless asked for):

- :meth:`BatchEfficiencyEstimate.plateau_target`: a proxy target every run can reach, chosen
  from the proxy's own curves (train with ``target_accuracy=1.0``, i.e. the whole budget,
  then :meth:`~BatchEfficiencyEstimate.retargeted` to it): the checkpoint's accuracy plus a
  ``fraction`` of the way to the lowest best accuracy of any (batch size, seed) run, snapped
  down to an accuracy the held-out set can measure. The
  paper trains every b "until convergence (reaching the target accuracy)"; a proxy target
  above some b's plateau makes that b's r infinite, a design error rather than a measurement.
- :func:`fit_noise_scale` / ``efficiency(fit="noise-scale")``: the mean passes smoothed by the
  empirical model of large-batch training (McCandlish et al. 2018): samples to target
  ``E(b) = E_min · (1 + b / B_noise)``, i.e. passes linear in b with a non-negative intercept
  and slope, fitted by weighted non-negative least squares (relative residuals). Two
  parameters over all batch sizes pool the seeds' noise instead of ranking near-ties of
  separate per-b means.

The
``eff.csv`` it writes is exactly the ``edgetune optimize joint --efficiency`` table of
docs/contract.md: ``batch_size,passes_to_target`` with ``inf`` for never.
"""

from __future__ import annotations

import csv
import math
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from edgetune import stopping, validation
from edgetune.base.records import BatchEfficiency
from edgetune.errors import InvalidArgument
from edgetune.estimation.parallel import Progress, run_tasks

# The proxy models and data (estimation.proxy, proxy_text: torch) are imported in the functions
# that train: reading and scoring an efficiency table, and the estimator service's start-up, stay
# torch-free.

SAMPLES_PER_PASS = 256
BASE_LR = 5e-4
BASE_BATCH = 128
EFFICIENCY_COLUMNS = ("batch_size", "passes_to_target")
# accuracies are ratios of counts (k / n_test); a target computed by arithmetic (plateau_target,
# matched_target_accuracy) can land a rounding error above the ratio it stands for, which would
# silently ask for one more correct image: "reached" allows for that
ACCURACY_TOLERANCE = 1e-9
FITS = ("none", "noise-scale")  # efficiency(fit=...): raw mean passes, or McCandlish et al.'s E(b) model
OPTIMIZERS = ("adam", "adamw")  # torch defaults otherwise (AdamW: weight_decay 0.01)


def default_optimizer(workload: str) -> str:
    """The paper's optimizer for ``workload``: AdamW for a text (transformer) model, Adam for the CNNs."""
    from edgetune.estimation.proxy_text import TEXT_MODELS  # deferred: torch

    return "adamw" if workload in TEXT_MODELS else "adam"


def _optimizer_name(workload: str, optimizer: str | None) -> str:
    name = default_optimizer(workload) if optimizer is None else optimizer
    if name not in OPTIMIZERS:
        raise InvalidArgument("optimizer", f"unknown optimizer {optimizer!r}", ", ".join(OPTIMIZERS))
    return name


def _check_pairing(workload: str, data_set: str) -> None:
    """A text model trains on a text data set and an image model on an image one."""
    from edgetune.estimation.proxy_text import TEXT_DATASETS, TEXT_MODELS  # deferred: torch

    if workload in TEXT_MODELS and data_set not in TEXT_DATASETS:
        raise InvalidArgument("proxy", f"{workload!r} is a text model; {data_set!r} is not a text data set",
                              ", ".join(TEXT_DATASETS))
    if workload not in TEXT_MODELS and data_set in TEXT_DATASETS:
        raise InvalidArgument("workload", f"{data_set!r} is a text data set; {workload!r} is not a text model",
                              ", ".join(TEXT_MODELS))


def scaled_lr(batch_size: int, base_lr: float = BASE_LR, base_batch: int = BASE_BATCH) -> float:
    """Adam / AdamW learning rate for ``batch_size``: ``base_lr · sqrt(batch_size / base_batch)``."""
    if batch_size < 1 or base_batch < 1 or not base_lr > 0:
        raise InvalidArgument("batch_size", f"lr scaling needs positive sizes and lr, got b={batch_size}, "
                              f"base_batch={base_batch}, base_lr={base_lr}", "> 0")
    return base_lr * math.sqrt(batch_size / base_batch)


@dataclass(frozen=True)
class NoiseScaleFit:
    """``N(b) = n_min · (1 + b / b_noise)`` passes to target (McCandlish et al. 2018's ``E(b)`` over s).

    ``n_min``: the passes as b → 0 (``E_min / s``); ``b_noise``: the critical batch size
    (``inf``: passes do not grow with b; ``0`` with ``n_min = 0``: passes proportional to b).
    """

    intercept: float  # n_min
    slope: float  # n_min / b_noise, passes per unit of batch size

    @property
    def n_min(self) -> float:
        return self.intercept

    @property
    def b_noise(self) -> float:
        if self.slope == 0.0:
            return math.inf
        return self.intercept / self.slope

    def passes(self, batch_size: float) -> float:
        return self.intercept + self.slope * float(batch_size)


def fit_noise_scale(passes_by_batch: Mapping[int, float]) -> NoiseScaleFit:
    """Fit ``N(b) = a + c·b`` (a, c ≥ 0) to the finite passes by weighted least squares on relative error.

    The weights are ``1 / N(b)`` (residuals relative to the measured passes: the seeds' spread
    grows with the passes), and the non-negativity constraints make it McCandlish et al.'s
    model ``E(b) = E_min (1 + b / B_noise)``: if the unconstrained line has a negative part the
    best one-parameter fit (constant, or through the origin) is taken, the exact two-variable NNLS.
    Batch sizes with ``inf`` passes (never reached the target) are left out.
    """
    pts = [(float(b), float(n)) for b, n in passes_by_batch.items() if n is not None and math.isfinite(n)]
    if any(n <= 0 for _, n in pts) or any(b <= 0 for b, _ in pts):
        raise InvalidArgument("passes_by_batch", f"{dict(passes_by_batch)} has a non-positive batch size or "
                              "passes", "positive batch sizes and passes (inf for never)")
    if len({b for b, _ in pts}) < 2:
        raise InvalidArgument("passes_by_batch", f"{len(pts)} batch size(s) with finite passes: a line needs "
                              "two", ">= 2 distinct batch sizes that reach the target")
    b = np.array([p[0] for p in pts])
    n = np.array([p[1] for p in pts])
    w2 = 1.0 / n ** 2  # squared weights of the relative residuals
    candidates = []
    sw, swb, swbb, swn, swbn = w2.sum(), (w2 * b).sum(), (w2 * b * b).sum(), (w2 * n).sum(), (w2 * b * n).sum()
    det = sw * swbb - swb * swb
    if det > 0:
        a = (swbb * swn - swb * swbn) / det
        c = (sw * swbn - swb * swn) / det
        if a >= 0 and c >= 0:
            candidates.append((a, c))
    candidates.append((swn / sw, 0.0))  # constant
    candidates.append((0.0, swbn / swbb))  # through the origin
    a, c = min(candidates, key=lambda ac: float((w2 * (n - ac[0] - ac[1] * b) ** 2).sum()))
    return NoiseScaleFit(float(a), float(c))


@dataclass(frozen=True)
class RunResult:
    """One (batch size, seed) training run."""

    batch_size: int
    seed: int
    passes_to_target: float  # inf = never within max_passes
    accuracy_by_pass: tuple[float, ...]  # held-out accuracy after each s-sample pass
    lr: float
    wall_s: float


def train_to_target(*, workload: str, batch_size: int, seed: int, target_accuracy: float, lr: float,
                    samples_per_pass: int, max_passes: int, input_size: int, data, init_state,
                    optimizer: str | None = None) -> RunResult:
    """Fine-tune ``init_state`` with ``batch_size`` until held-out accuracy ≥ target; count s-sample passes.

    ``optimizer``: ``"adam"`` or ``"adamw"`` (:data:`OPTIMIZERS`); ``None``: the paper's for the
    workload (:func:`default_optimizer`). Deterministic for a seed on one thread (``run_tasks``
    ensures that in both of its modes).
    """
    import torch  # deferred: torch
    from torch.nn import functional as F  # deferred: torch

    from edgetune.estimation.proxy import accuracy, build_proxy_model  # deferred: torch

    t0 = time.perf_counter()
    opt_cls = {"adam": torch.optim.Adam, "adamw": torch.optim.AdamW}[_optimizer_name(workload, optimizer)]
    torch.manual_seed(seed)  # dropout masks
    model = build_proxy_model(workload, input_size)
    model.load_state_dict(init_state)
    model.train()
    passes, curve = passes_to_target(model, opt_cls(model.parameters(), lr=lr), F.cross_entropy,
                                     (data.x_train, data.y_train), lambda: accuracy(model, data.x_test, data.y_test),
                                     batch_size=batch_size, seed=seed, target_accuracy=target_accuracy,
                                     samples_per_pass=samples_per_pass, max_passes=max_passes)
    return RunResult(batch_size, seed, passes, curve, lr, time.perf_counter() - t0)


def passes_to_target(model: Any, opt: Any, loss_fn: Callable[[Any, Any], Any], train: tuple[Any, Any],
                     evaluate: Callable[[], float], *, batch_size: int, seed: int, target_accuracy: float,
                     samples_per_pass: int, max_passes: int) -> tuple[float, tuple[float, ...]]:
    """The method's count: train ``model`` on ``train`` = (inputs, targets) b samples a step, from a
    seeded stream of epoch permutations (the same order for every b), ``evaluate()`` after every s
    samples; (the first pass k reaching the target or inf, the accuracy after each pass)."""
    import torch  # deferred: torch

    x_train, y_train = train
    order_rng = np.random.default_rng(seed)
    stream = np.empty(0, dtype=np.int64)  # the sample order, extended one epoch at a time
    pos = seen = 0
    curve: list[float] = []
    for k in range(1, max_passes + 1):
        while seen < k * samples_per_pass:
            stopping.check()  # between minibatches: a caller that went away stops the training
            if pos + batch_size > len(stream):
                stream = np.concatenate([stream[pos:], order_rng.permutation(len(y_train))])
                pos = 0
            j = torch.from_numpy(stream[pos:pos + batch_size])
            pos += batch_size
            opt.zero_grad(set_to_none=True)
            loss_fn(model(x_train[j]), y_train[j]).backward()
            opt.step()
            seen += batch_size
        curve.append(evaluate())
        if curve[-1] >= target_accuracy - ACCURACY_TOLERANCE:
            return float(k), tuple(curve)
    return math.inf, tuple(curve)


@dataclass(frozen=True)
class BatchEfficiencyEstimate:
    """Passes to target per (batch size, seed) on one proxy data set, and what follows from them."""

    workload: str
    proxy: str
    target_accuracy: float
    samples_per_pass: int
    batch_sizes: tuple[int, ...]
    seeds: tuple[int, ...]
    passes: np.ndarray  # (len(batch_sizes), len(seeds)); inf = never
    initial_accuracy: float  # the pre-trained model's held-out accuracy
    runs: tuple[RunResult, ...] = field(default=(), repr=False)
    wall_s: float = 0.0
    optimizer: str | None = None  # how the runs trained (OPTIMIZERS); None: not recorded
    fresh_head: bool = False  # the runs started from the checkpoint with a re-initialised classifier

    def passes_mean(self) -> dict[int, float]:
        """Mean passes over seeds per batch size; inf if any seed never reached the target."""
        return {b: float(np.mean(row)) if np.isfinite(row).all() else math.inf
                for b, row in zip(self.batch_sizes, self.passes, strict=True)}

    def passes_std(self) -> dict[int, float]:
        return {b: float(np.std(row)) if np.isfinite(row).all() else math.nan
                for b, row in zip(self.batch_sizes, self.passes, strict=True)}

    def ratio(self) -> dict[int, float]:
        """``r_b = N(b) / max_b N(b)`` over the batch sizes that reach the target; inf for the others."""
        mean = self.passes_mean()
        finite = [n for n in mean.values() if math.isfinite(n)]
        top = max(finite) if finite else math.inf
        return {b: n / top if math.isfinite(n) else math.inf for b, n in mean.items()}

    def fitted_passes(self, seed: int | None = None) -> dict[int, float]:
        """Mean (or one seed's) passes smoothed by :func:`fit_noise_scale`; inf stays inf (never reached)."""
        passes = self._passes(seed)
        fit = fit_noise_scale(passes)
        return {b: fit.passes(b) if math.isfinite(n) else math.inf for b, n in passes.items()}

    def _passes(self, seed: int | None) -> dict[int, float]:
        if seed is None:
            return self.passes_mean()
        if seed not in self.seeds:
            raise InvalidArgument("seed", f"{seed!r} is not one of this estimate's seeds", f"{list(self.seeds)}")
        col = self.seeds.index(seed)
        return {b: float(row[col]) for b, row in zip(self.batch_sizes, self.passes, strict=True)}

    def efficiency(self, seed: int | None = None, fit: str = "none"):
        """As :class:`edgetune.optimization.joint.BatchEfficiency` (mean over seeds, or one seed's).

        ``fit="noise-scale"``: smoothed by McCandlish et al.'s model (:meth:`fitted_passes`).
        """
        if fit not in FITS:
            raise InvalidArgument("fit", f"unknown fit {fit!r}", ", ".join(FITS))
        passes = self._passes(seed) if fit == "none" else self.fitted_passes(seed)
        return BatchEfficiency.from_pairs(passes)

    def plateau_target(self, fraction: float) -> float:
        """A target every run reaches: ``a_0 + fraction · (min over runs of its best accuracy - a_0)``.

        ``a_0`` is the checkpoint's accuracy; the runs should have had the whole budget (trained
        with ``target_accuracy=1.0``), so that their best accuracy is their plateau. Score the
        runs at it with :meth:`retargeted`. ``fraction`` in (0, 1]: 1 is the lowest plateau
        itself (its crossing is decided by fluctuations at the edge); below 1 leaves a margin.

        The result is snapped down to the nearest accuracy some run measured above ``a_0``: a
        held-out set of n images measures only k / n, so a target between two levels means the
        upper one, which on a small set can be the lowest plateau itself and erase the margin.
        """
        if not (isinstance(fraction, (int, float)) and 0.0 < fraction <= 1.0):
            raise InvalidArgument("fraction", f"{fraction!r} is not in (0, 1]", "(0, 1]")
        top = self.reachable_accuracy()
        if not top > self.initial_accuracy:
            raise InvalidArgument("runs", f"some run never improved on the checkpoint's {self.initial_accuracy:.4f}",
                                  "runs whose best accuracy exceeds the checkpoint's")
        goal = self.initial_accuracy + fraction * (top - self.initial_accuracy)
        levels = [a for run in self.runs for a in run.accuracy_by_pass
                  if self.initial_accuracy < a <= goal + ACCURACY_TOLERANCE]
        return max(levels, default=goal)

    def reachable_accuracy(self) -> float:
        """The highest held-out accuracy that every (batch size, seed) run reached (needs ``runs``)."""
        if not self.runs:
            raise InvalidArgument("runs", "this estimate holds no accuracy curves", "an estimate with runs")
        return min(max(run.accuracy_by_pass, default=self.initial_accuracy) for run in self.runs)

    def retargeted(self, target_accuracy: float) -> BatchEfficiencyEstimate:
        """The same runs scored at a lower ``target_accuracy``: passes = first pass at or above it.

        Exact without training: a run stops at its first pass at the original target, so its
        curve holds the first crossing of every lower level (and a never-run reaches max_passes).
        """
        if not self.initial_accuracy < target_accuracy <= self.target_accuracy:
            raise InvalidArgument("target_accuracy", f"{target_accuracy} is outside the curves' range",
                                  f"({self.initial_accuracy:.4f}, {self.target_accuracy:.4f}]")
        by_key = {(run.batch_size, run.seed): run for run in self.runs}
        runs, passes = [], np.empty_like(self.passes)
        for i, b in enumerate(self.batch_sizes):
            for j, s in enumerate(self.seeds):
                run = by_key[(b, s)]
                k = next((k for k, a in enumerate(run.accuracy_by_pass, 1)
                          if a >= target_accuracy - ACCURACY_TOLERANCE), None)
                passes[i, j] = math.inf if k is None else float(k)
                runs.append(RunResult(b, s, passes[i, j], run.accuracy_by_pass[:k], run.lr, run.wall_s))
        return BatchEfficiencyEstimate(self.workload, self.proxy, target_accuracy, self.samples_per_pass,
                                       self.batch_sizes, self.seeds, passes, self.initial_accuracy, tuple(runs),
                                       self.wall_s, self.optimizer, self.fresh_head)

    def to_csv(self, path: str | os.PathLike) -> None:
        """``eff.csv`` for ``edgetune optimize joint`` (mean passes; ``inf`` = never)."""
        write_efficiency_csv(path, self.passes_mean())

    def rows(self) -> list[dict]:
        """One dict per batch size for reports: lr, mean / std passes, r, every seed's passes."""
        mean, std, r = self.passes_mean(), self.passes_std(), self.ratio()
        lr = {run.batch_size: run.lr for run in self.runs}
        out = []
        for b, row in zip(self.batch_sizes, self.passes, strict=True):
            out.append({"workload": self.workload, "proxy": self.proxy, "batch_size": b,
                        "lr": lr.get(b, math.nan), "passes_mean": mean[b], "passes_std": std[b], "r": r[b],
                        **{f"passes_seed{s}": float(v) for s, v in zip(self.seeds, row, strict=True)}})
        return out


def write_efficiency_csv(path: str | os.PathLike, passes_by_batch: Mapping[int, float]) -> None:
    """``batch_size,passes_to_target`` rows by ascending batch size; never (inf / NaN) is written ``inf``."""
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(EFFICIENCY_COLUMNS)
        for b in sorted(passes_by_batch):
            n = float(passes_by_batch[b])
            w.writerow([int(b), "inf" if not math.isfinite(n) else repr(n)])


def matched_target_accuracy(proxy_initial: float, target_initial: float, target_accuracy: float) -> float:
    """The proxy's target accuracy that corresponds to the device's ``target_accuracy``.

    Seed 000 picks the proxy's target so that its training is comparable to the device's. The
    device knows its target and the pre-trained model's accuracy on its own held-out split
    (one evaluation, no training); the proxy's target closes the same fraction of the
    pre-trained model's remaining error: ``a_p + (t - a_d) / (1 - a_d) · (1 - a_p)``.
    """
    for name, v in (("proxy_initial", proxy_initial), ("target_initial", target_initial),
                    ("target_accuracy", target_accuracy)):
        if not 0.0 <= v <= 1.0:
            raise InvalidArgument(name, f"{v} is not a fraction", "[0, 1]")
    if not target_initial < target_accuracy:
        raise InvalidArgument("target_accuracy", f"{target_accuracy} is not above the pre-trained "
                              f"{target_initial}", f"> {target_initial}")
    closed = (target_accuracy - target_initial) / (1.0 - target_initial)
    return proxy_initial + closed * (1.0 - proxy_initial)


def _start_state(workload: str, input_size: int, fresh_head: bool):
    from edgetune.estimation.proxy import pretrained_state, with_fresh_head  # deferred: torch

    state = pretrained_state(workload, input_size)
    return with_fresh_head(workload, state, input_size) if fresh_head else state


def initial_accuracy(workload: str, data_set: str, input_size: int = 8, eval_draws: int | None = None,
                     fresh_head: bool = False) -> float:
    """The shared pre-trained checkpoint's held-out accuracy on ``data_set`` (``eval_draws`` as in
    :func:`~edgetune.estimation.proxy.load_proxy_data`; ``fresh_head``: with its classifier layer
    re-initialised, as :func:`estimate_batch_efficiency` starts then)."""
    from edgetune.estimation.proxy import accuracy, build_proxy_model, load_proxy_data  # deferred: torch

    _check_pairing(workload, data_set)
    data = load_proxy_data(data_set, input_size, eval_draws)
    model = build_proxy_model(workload, input_size)
    model.load_state_dict(_start_state(workload, input_size, fresh_head))
    return accuracy(model, data.x_test, data.y_test)


def check_settings(batch_sizes: Sequence[int], seeds: Sequence[int], target_accuracy: float, samples_per_pass: int,
           max_passes: int) -> None:
    validation.batch_sizes(batch_sizes)
    if not seeds or len(set(seeds)) != len(seeds):
        raise InvalidArgument("seeds", f"{list(seeds)} must be one or more distinct integers")
    for i, s in enumerate(seeds):
        validation.seed(s, f"seeds[{i}]")
    if not 0.0 < target_accuracy <= 1.0:
        raise InvalidArgument("target_accuracy", f"{target_accuracy} is not a fraction", "(0, 1]")
    if samples_per_pass < max(batch_sizes):
        raise InvalidArgument("samples_per_pass", f"s={samples_per_pass} is below the largest batch size "
                              f"{max(batch_sizes)}", f">= {max(batch_sizes)} (Ahmed et al.: b_max <= s <= |D|)")
    if max_passes < 1:
        raise InvalidArgument("max_passes", f"{max_passes} must be positive", ">= 1")


def estimate_batch_efficiency(
    workload: str,
    batch_sizes: Sequence[int],
    target_accuracy: float,
    seeds: Sequence[int] = (0, 1, 2),
    proxy: str = "digits",
    max_passes: int = 60,
    base_lr: float = BASE_LR,
    base_batch: int = BASE_BATCH,
    parallel: bool = True,
    *,
    samples_per_pass: int = SAMPLES_PER_PASS,
    input_size: int = 8,
    address: str | None = None,
    progress: Progress | None = None,
    eval_draws: int | None = None,
    optimizer: str | None = None,
    fresh_head: bool = False,
) -> BatchEfficiencyEstimate:
    """Train ``workload`` from the shared checkpoint with every batch size and seed to ``target_accuracy``.

    ``workload``: a slim image model (``"resnet-slim"``, ``"mobilenetv3-slim"``,
    ``"mobilenetv2-slim"``) or a zoo classification workload
    (:func:`edgetune.estimation.proxy.build_proxy_model`); ``proxy``: a data set of
    :data:`edgetune.estimation.proxy.PROXY_DATASETS`; ``eval_draws``: its held-out digits under
    that many pixel-noise draws (noisy sets only; ``None``: the set's default,
    :func:`edgetune.estimation.proxy.load_proxy_data`), so that "target reached" measures
    training progress rather than one draw's test noise. ``parallel`` / ``address`` /
    ``progress`` go to :func:`edgetune.estimation.parallel.run_tasks`.

    Text: ``workload="chartransformer-slim"`` with a ``proxy`` of
    :data:`edgetune.estimation.proxy_text.TEXT_DATASETS` (``"text-proxy"``, ``"text-target-a"``,
    ``"text-target-b"``); a sample is a 64-character window, the accuracy next-character
    accuracy, ``eval_draws`` 1 only. ``optimizer``: ``"adam"`` / ``"adamw"``, ``None`` for the
    paper's choice by workload (:func:`default_optimizer`: AdamW for the transformer).
    ``fresh_head``: start from the checkpoint with its classifier layer re-initialised
    (:func:`edgetune.estimation.proxy.with_fresh_head`), as a transfer to a new label set does.
    """
    from edgetune.estimation.proxy import accuracy, build_proxy_model, load_proxy_data  # deferred: torch

    batch_sizes, seeds = [int(b) for b in batch_sizes], [int(s) for s in seeds]
    check_settings(batch_sizes, seeds, target_accuracy, samples_per_pass, max_passes)
    optimizer = _optimizer_name(workload, optimizer)
    t0 = time.perf_counter()
    _check_pairing(workload, proxy)
    data = load_proxy_data(proxy, input_size, eval_draws)
    if samples_per_pass > data.n_train:
        raise InvalidArgument("samples_per_pass", f"s={samples_per_pass} exceeds the {data.n_train} training "
                              f"samples of {proxy!r}", f"<= {data.n_train}")
    init_state = _start_state(workload, input_size, fresh_head)
    start = build_proxy_model(workload, input_size)
    start.load_state_dict(init_state)
    initial = accuracy(start, data.x_test, data.y_test)
    if initial >= target_accuracy:  # zero passes would make r meaningless
        raise InvalidArgument("target_accuracy", f"the pre-trained {workload} already has {initial:.3f} on "
                              f"{proxy!r}", f"> {initial:.3f}")
    tasks = [{"batch_size": b, "seed": s, "lr": scaled_lr(b, base_lr, base_batch)}
             for b in batch_sizes for s in seeds]
    shared = {"workload": workload, "target_accuracy": target_accuracy, "samples_per_pass": samples_per_pass,
              "max_passes": max_passes, "input_size": input_size, "data": data, "init_state": init_state,
              "optimizer": optimizer}
    runs = run_tasks(train_to_target, tasks, parallel=parallel, address=address, progress=progress,
                     shared=shared)
    passes = np.array([r.passes_to_target for r in runs], dtype=float).reshape(len(batch_sizes), len(seeds))
    return BatchEfficiencyEstimate(workload, proxy, target_accuracy, samples_per_pass, tuple(batch_sizes),
                                   tuple(seeds), passes, initial, tuple(runs), time.perf_counter() - t0,
                                   optimizer, fresh_head)
