"""Proxy data sets, zoo models adapted to them, and the shared pre-trained checkpoint (Ahmed et al.).

Seed 000 estimates batch-size efficiency on a server by fine-tuning the *same pre-trained
model* with every batch size on a *proxy data set* of the same task type. Offline, that is:

- **Data** — scikit-learn's bundled ``load_digits`` (1,797 8×8 images, 10 classes; no
  download), through the zoo's own pipeline (:class:`edgetune.workloads.data.DigitsImages`:
  standardised, bilinear to the model's input size, repeated to 3 channels), split once by
  a fixed permutation into three disjoint parts:

  ======================  ==========  =====================================================
  name                    samples     role
  ======================  ==========  =====================================================
  ``pretrain`` pool       397         pre-training (the paper's CIFAR-100 pre-training)
  ``"digits"``            700         the proxy set (the paper's CIFAR-10 subset)
  ``"digits-noisy"``      700         a *different* target set: other digits, with Gaussian
                                      pixel noise (σ = 0.3 of the standardised scale; the
                                      paper's SVHN / CINIC), for the oracle in experiments
  ======================  ==========  =====================================================

  Each of the two sets is split 80 / 20 into train / held-out test (560 / 140), as in the
  paper. ``"digits-noisy-proxy"`` (:data:`NOISY_PROXY`) is the proxy set at the target's
  difficulty: the ``"digits"`` part with pixel noise of the same σ, independent draws
  (train: one draw; held-out: the 140 test digits under 8 draws = 1,120 images, for a less
  noisy accuracy signal). It is disjoint from the target's digits.
  ``eval_draws`` (:func:`load_proxy_data`) scores the held-out digits of either noisy set
  under that many independent noise draws: the target ``"digits-noisy"`` keeps its own draw
  first and adds ``eval_draws - 1`` others (default 1: its 140 images as drawn), the noisy
  proxy has :data:`EVAL_DRAWS` by default. A noise-free set has one draw only.

- **Models** — the zoo's building blocks at digit scale, so that a CPU trains one to
  target in seconds: ``"resnet-slim"`` (ResNet18's ``BasicBlock``, 3 stages of 16 / 32 / 64
  channels, one block each, ≈ 78 k parameters) and ``"mobilenetv3-slim"`` (MobileNetV3's
  ``InvertedResidual`` blocks with squeeze-excite and hard-swish, 5 blocks up to 40
  channels, ≈ 156 k parameters); ``"mobilenetv2-slim"`` (MobileNetV2's blocks: ReLU6, no
  squeeze-excite, 16 → 64 channels, ≈ 80 k parameters; the model Ahmed et al. names, kept beside
  the zoo's MobileNetV3 for that comparison). Any zoo classification workload name (``"resnet18"``,
  ``"mobilenetv3"``) also works: the full model with 10 classes at the given input size.

- **Pre-trained checkpoint** — :func:`pretrained_state`: the model trained briefly on the
  pool (Adam, fixed seed), the same weights for every batch size and seed; cached per
  process, and on disk in ``$EDGETUNE_CHECKPOINT_DIR`` (:data:`CHECKPOINT_DIR_ENV`) when it is
  set, so that the processes of one run (the test suite's workers, the services they start)
  train each checkpoint once.

- **Text** — the paper's character-level transformer experiment lives in
  :mod:`edgetune.estimation.proxy_text` (corpora from the standard library's own text, a
  slim causal transformer); the functions here dispatch to it: :func:`load_proxy_data` for
  its data set names (``"text-proxy"``, ``"text-target-a"``, ...), :func:`build_proxy_model`
  and :func:`pretrained_state` for ``"chartransformer-slim"``, and :func:`accuracy` scores
  every position of a sequence (next-character accuracy).
"""

from __future__ import annotations

import fcntl
import hashlib
import os
from functools import lru_cache
from pathlib import Path

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import default_collate

from edgetune import stopping
from edgetune.errors import InvalidArgument
from edgetune.estimation.proxy_data import ProxyData
from edgetune.estimation.proxy_text import (
    PRETRAIN_BATCH,
    PRETRAIN_LR,
    TEXT_DATASETS,
    TEXT_MODELS,
    build_text_model,
    load_text_data,
    pretrain_text_state,
)
from edgetune.workloads.data import DigitsImages
from edgetune.workloads.mobilenet import InvertedResidual
from edgetune.workloads.registry import get_workload
from edgetune.workloads.resnet import BasicBlock

DATASETS = ("digits", "digits-noisy")
# a proxy of the target's difficulty: the *proxy's* digits (disjoint from the target's) with pixel
# noise of the target's level but an independent draw; its held-out split is scored under
# EVAL_DRAWS independent noise draws (a larger, augmented held-out set: a less noisy accuracy signal)
NOISY_PROXY = "digits-noisy-proxy"
PROXY_DATASETS = (*DATASETS, NOISY_PROXY)
NOISY_DATASETS = ("digits-noisy", NOISY_PROXY)  # the sets with pixel noise: their held-out split can be redrawn
SLIM_MODELS = ("resnet-slim", "mobilenetv3-slim", "mobilenetv2-slim")  # the image models; the text models: proxy_text.TEXT_MODELS
NUM_CLASSES = 10
IN_CHANNELS = 3  # the zoo's digits pipeline repeats the grey image to 3 channels

_SPLIT_SEED = 20240  # fixed: the proxy / target / pool partition never changes
_POOL, _PART = 397, 700  # 397 + 700 + 700 = 1,797 digits
_TEST_FRACTION = 0.2
_NOISE_STD = 0.3  # target set's pixel noise, in standardised units
EVAL_DRAWS = 8  # noise draws of the noisy proxy's held-out images by default (140 digits -> 1,120 test images)
_MAX_EVAL_DRAWS = 64
# a directory shared by the processes of one run: a pre-trained checkpoint found there is loaded, one
# trained is saved there (the same seeded training, so the same weights either way)
CHECKPOINT_DIR_ENV = "EDGETUNE_CHECKPOINT_DIR"


@lru_cache(maxsize=4)
def _digits_at(input_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    ds = DigitsImages(input_size, IN_CHANNELS)
    x, y = default_collate([ds[i] for i in range(len(ds))])
    return x, y


def _partition() -> dict[str, np.ndarray]:
    order = np.random.default_rng(_SPLIT_SEED).permutation(_POOL + 2 * _PART)
    return {"pretrain": order[:_POOL], "digits": order[_POOL:_POOL + _PART],
            "digits-noisy": order[_POOL + _PART:]}


def _perturb(images_8px: torch.Tensor, seed: int) -> torch.Tensor:
    """Add seeded Gaussian pixel noise to 8×8 images (fixed: the target set is one data set)."""
    rng = np.random.default_rng([_SPLIT_SEED, seed])
    return images_8px + torch.from_numpy(rng.normal(0.0, _NOISE_STD, images_8px.shape).astype(np.float32))


def default_eval_draws(name: str) -> int:
    """Noise draws of ``name``'s held-out split when none are asked for: 8 for the noisy proxy, else 1."""
    return EVAL_DRAWS if name == NOISY_PROXY else 1


def load_proxy_data(name: str = "digits", input_size: int = 8, eval_draws: int | None = None) -> ProxyData:
    """The data set ``name`` (see :data:`PROXY_DATASETS`, or ``"pretrain"`` for the pool) at ``input_size`` px.

    ``eval_draws``: the held-out digits under that many independent pixel-noise draws (noisy sets
    only, :data:`NOISY_DATASETS`; ``None``: :func:`default_eval_draws`). More draws measure the
    accuracy on the same digits with less noise-draw noise; the training split is unchanged.

    A text data set (:data:`edgetune.estimation.proxy_text.TEXT_DATASETS`) is
    :func:`~edgetune.estimation.proxy_text.load_text_data`'s 64-character windows;
    ``input_size`` does not apply to it and ``eval_draws`` must be 1 (or ``None``).
    """
    if name in TEXT_DATASETS:
        if eval_draws is not None and (isinstance(eval_draws, bool) or eval_draws != 1):
            raise InvalidArgument("eval_draws", f"{name!r} is text: it has no pixel noise to redraw "
                                  f"(asked for {eval_draws!r} draws)", f"1 (or None) for {name!r}")
        return load_text_data(name)
    if name not in (*PROXY_DATASETS, "pretrain"):
        raise InvalidArgument("proxy", f"unknown proxy data set {name!r}", ", ".join((*PROXY_DATASETS,
                                                                                      *TEXT_DATASETS)))
    if not isinstance(input_size, int) or input_size < 8:
        raise InvalidArgument("input_size", f"{input_size!r} is too small", ">= 8 (the digits' own size)")
    if eval_draws is None:
        eval_draws = default_eval_draws(name)
    if isinstance(eval_draws, bool) or not isinstance(eval_draws, int) or not 1 <= eval_draws <= _MAX_EVAL_DRAWS:
        raise InvalidArgument("eval_draws", f"{eval_draws!r} is not a number of noise draws",
                              f"an integer in [1, {_MAX_EVAL_DRAWS}]")
    if eval_draws > 1 and name not in NOISY_DATASETS:
        raise InvalidArgument("eval_draws", f"{name!r} has no pixel noise to redraw (asked for {eval_draws} draws)",
                              f"1 for {name!r}; more only for " + ", ".join(NOISY_DATASETS))
    return _load(name, input_size, eval_draws)


@lru_cache(maxsize=8)
def _load(name: str, input_size: int, eval_draws: int) -> ProxyData:
    if name == NOISY_PROXY:
        return _noisy_proxy(input_size, eval_draws)
    idx = torch.from_numpy(_partition()[name])
    if name == "digits-noisy":
        # noise at the native 8×8, then resampled like the zoo pipeline does
        x8, y = _digits_at(8)
        clean, y = x8[idx], y[idx]
        x = _resize(_perturb(clean, seed=1), input_size)
        n_test = int(round(len(y) * _TEST_FRACTION))
        # the target's own held-out draw first, then eval_draws - 1 independent redraws of the same digits
        x_test = torch.cat([x[:n_test], *(_resize(_perturb(clean[:n_test], seed=200 + k), input_size)
                                          for k in range(1, eval_draws))])
        return ProxyData(name, x[n_test:].contiguous(), y[n_test:].contiguous(), x_test.contiguous(),
                         y[:n_test].repeat(eval_draws).contiguous())
    x_all, y_all = _digits_at(input_size)
    x, y = x_all[idx], y_all[idx]
    if name == "pretrain":
        empty = torch.zeros((0, *x.shape[1:])), torch.zeros(0, dtype=torch.int64)
        return ProxyData(name, x.contiguous(), y.contiguous(), *empty)
    n_test = int(round(len(y) * _TEST_FRACTION))
    return ProxyData(name, x[n_test:].contiguous(), y[n_test:].contiguous(),
                     x[:n_test].contiguous(), y[:n_test].contiguous())


def _resize(x8: torch.Tensor, input_size: int) -> torch.Tensor:
    if input_size == 8:
        return x8
    return F.interpolate(x8, size=(input_size, input_size), mode="bilinear", align_corners=False)


def _noisy_proxy(input_size: int, eval_draws: int = EVAL_DRAWS) -> ProxyData:
    """``"digits-noisy-proxy"``: the proxy's 700 digits with the target's noise level, other draws.

    The server does not have the device's images, but it knows their kind (the same sensor noise
    level, as the paper's proxy shares the target's task type and input shape), so its proxy is
    made as hard as the target: pixel noise of σ = ``_NOISE_STD`` on the proxy's own digits
    (disjoint from the target's), drawn independently of the target's. Train: one fixed draw
    (as the target's training set, which is one noisy data set). Held-out: the 140 test digits
    under ``eval_draws`` independent draws (default :data:`EVAL_DRAWS`), so the accuracy that
    decides "target reached" is measured on 1,120 images instead of 140 (steps of 0.09 % instead
    of 0.7 %).
    """
    x8, y_all = _digits_at(8)
    idx = torch.from_numpy(_partition()["digits"])
    x, y = x8[idx], y_all[idx]
    n_test = int(round(len(y) * _TEST_FRACTION))
    x_train = _resize(_perturb(x[n_test:], seed=2), input_size)
    x_test = torch.cat([_resize(_perturb(x[:n_test], seed=100 + k), input_size) for k in range(eval_draws)])
    y_test = y[:n_test].repeat(eval_draws)
    return ProxyData(NOISY_PROXY, x_train.contiguous(), y[n_test:].contiguous(), x_test.contiguous(),
                     y_test.contiguous())


# --- models ------------------------------------------------------------------------------
class SlimResNet(nn.Module):
    """ResNet18's BasicBlocks at digit scale: 3×3 stem, one block per stage (16, 32, 64 ch), FC."""

    def __init__(self, widths: tuple[int, ...] = (16, 32, 64), num_classes: int = NUM_CLASSES,
                 in_channels: int = IN_CHANNELS) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(in_channels, widths[0], 3, 1, 1, bias=False),
                                  nn.BatchNorm2d(widths[0]), nn.ReLU(inplace=True))
        blocks, c_in = [], widths[0]
        for i, c_out in enumerate(widths):
            blocks.append(BasicBlock(c_in, c_out, 1 if i == 0 else 2))
            c_in = c_out
        self.stages = nn.Sequential(*blocks)
        self.fc = nn.Linear(c_in, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, BasicBlock):  # as the zoo's ResNet: blocks start as identity
                nn.init.zeros_(m.bn2.weight)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.adaptive_avg_pool2d(self.stages(self.stem(x)), 1)
        return self.fc(torch.flatten(x, 1))


# (in, kernel, expanded, out, use_se, activation, stride): MobileNetV3-small's first blocks,
# strides cut to fit 8×8 inputs
_SLIM_MOBILE = [
    (16, 3, 16, 16, True, "RE", 1),
    (16, 3, 72, 24, False, "RE", 2),
    (24, 3, 88, 24, False, "RE", 1),
    (24, 5, 96, 40, True, "HS", 2),
    (40, 5, 240, 40, True, "HS", 1),
]


class SlimMobileNetV3(nn.Module):
    """MobileNetV3-small's inverted residual blocks at digit scale, with its 1×1 head and classifier."""

    def __init__(self, num_classes: int = NUM_CLASSES, in_channels: int = IN_CHANNELS,
                 head: int = 240, hidden: int = 256, dropout: float = 0.2) -> None:
        super().__init__()
        last = _SLIM_MOBILE[-1][3]
        self.features = nn.Sequential(
            nn.Conv2d(in_channels, 16, 3, 1, 1, bias=False), nn.BatchNorm2d(16), nn.Hardswish(inplace=True),
            *[InvertedResidual(*s) for s in _SLIM_MOBILE],
            nn.Conv2d(last, head, 1, bias=False), nn.BatchNorm2d(head), nn.Hardswish(inplace=True),
        )
        self.classifier = nn.Sequential(nn.Linear(head, hidden), nn.Hardswish(inplace=True),
                                        nn.Dropout(dropout), nn.Linear(hidden, num_classes))
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out")
            elif isinstance(m, nn.BatchNorm2d):
                # the zoo blocks' 0.01 suits ImageNet's long runs; a digits run has only hundreds of
                # steps, too few for running statistics that slow (held-out accuracy stays at chance)
                m.momentum = 0.1

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.adaptive_avg_pool2d(self.features(x), 1)
        return self.classifier(torch.flatten(x, 1))


# (expansion t, out channels c, blocks n, first stride s): MobileNetV2's table at digit scale
# (its 16 → 24 → 32 → 64 stages, strides cut to fit 8×8 inputs)
_SLIM_MOBILE_V2 = [(1, 16, 1, 1), (6, 24, 2, 1), (6, 32, 2, 2), (6, 64, 1, 2)]


class _InvertedResidualV2(nn.Module):
    """MobileNetV2's block: 1×1 expand (ReLU6) → 3×3 depthwise (ReLU6) → 1×1 linear bottleneck."""

    def __init__(self, c_in: int, c_out: int, stride: int, expansion: int) -> None:
        super().__init__()
        hidden = c_in * expansion
        layers: list[nn.Module] = []
        if expansion != 1:
            layers += [nn.Conv2d(c_in, hidden, 1, bias=False), nn.BatchNorm2d(hidden), nn.ReLU6(inplace=True)]
        layers += [nn.Conv2d(hidden, hidden, 3, stride, 1, groups=hidden, bias=False), nn.BatchNorm2d(hidden),
                   nn.ReLU6(inplace=True), nn.Conv2d(hidden, c_out, 1, bias=False), nn.BatchNorm2d(c_out)]
        self.block = nn.Sequential(*layers)
        self.use_residual = stride == 1 and c_in == c_out

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.block(x)
        return x + y if self.use_residual else y


class SlimMobileNetV2(nn.Module):
    """MobileNetV2 (the paper's model) at digit scale: ReLU6, no squeeze-excite, dropout + one linear layer."""

    def __init__(self, num_classes: int = NUM_CLASSES, in_channels: int = IN_CHANNELS, head: int = 256,
                 dropout: float = 0.2) -> None:
        super().__init__()
        layers: list[nn.Module] = [nn.Conv2d(in_channels, 16, 3, 1, 1, bias=False), nn.BatchNorm2d(16),
                                   nn.ReLU6(inplace=True)]
        c_in = 16
        for t, c, n, s in _SLIM_MOBILE_V2:
            for i in range(n):
                layers.append(_InvertedResidualV2(c_in, c, s if i == 0 else 1, t))
                c_in = c
        layers += [nn.Conv2d(c_in, head, 1, bias=False), nn.BatchNorm2d(head), nn.ReLU6(inplace=True)]
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Sequential(nn.Dropout(dropout), nn.Linear(head, num_classes))
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out")
            elif isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, 0, 0.01)
                nn.init.zeros_(m.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.adaptive_avg_pool2d(self.features(x), 1)
        return self.classifier(torch.flatten(x, 1))


def build_proxy_model(workload: str, input_size: int = 8) -> nn.Module:
    """A fresh (untrained) model: a slim name of :data:`SLIM_MODELS`, a zoo classification workload,
    or a text model of :data:`edgetune.estimation.proxy_text.TEXT_MODELS` (``input_size`` does not apply)."""
    if workload == "resnet-slim":
        return SlimResNet()
    if workload == "mobilenetv3-slim":
        return SlimMobileNetV3()
    if workload == "mobilenetv2-slim":
        return SlimMobileNetV2()

    if workload in TEXT_MODELS:
        return build_text_model(workload)

    wl = get_workload(workload)  # unknown names raise InvalidArgument listing the zoo
    if wl.task != "classify":
        raise InvalidArgument("workload", f"{workload!r} is a {wl.task} workload, not an image classifier",
                              ", ".join((*SLIM_MODELS, *TEXT_MODELS)) + ", or a zoo classification workload")
    return wl.with_config(num_classes=NUM_CLASSES, input_size=input_size, in_channels=IN_CHANNELS).build()


HEAD_SEED = 7  # the fresh classifier's initialisation: one for every batch size and seed


def head_layer(model: nn.Module) -> nn.Linear:
    """The image model's last classifier layer: the one a transfer to a new label set replaces."""
    last = [m for m in model.modules() if isinstance(m, nn.Linear)]
    if not last or last[-1].out_features != NUM_CLASSES:
        raise InvalidArgument("workload", f"{type(model).__name__} has no {NUM_CLASSES}-class linear head",
                              "an image classifier (" + ", ".join(SLIM_MODELS) + ", or a zoo classifier)")
    return last[-1]


def with_fresh_head(workload: str, state: dict[str, torch.Tensor], input_size: int = 8) -> dict[str, torch.Tensor]:
    """``state`` with its last classifier layer re-initialised (seeded by :data:`HEAD_SEED`).

    Seed 000 pre-trains on CIFAR-100 and fine-tunes on SVHN / CINIC: the 100-class head is
    replaced, so fine-tuning re-learns the classifier on transferred features. The digits
    checkpoint is pre-trained on the same ten classes as its proxy and target; a fresh head
    puts its fine-tuning in the paper's regime (starting near chance) without another data set.
    """
    model = build_proxy_model(workload, input_size)
    model.load_state_dict(state)
    head = head_layer(model)
    gen = torch.Generator().manual_seed(HEAD_SEED)
    bound = 1.0 / head.in_features ** 0.5  # torch's default Linear initialisation, from a fixed generator
    with torch.no_grad():
        head.weight.uniform_(-bound, bound, generator=gen)
        head.bias.uniform_(-bound, bound, generator=gen)
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


@torch.no_grad()
def accuracy(model: nn.Module, x: torch.Tensor, y: torch.Tensor, chunk: int = 512) -> float:
    """Top-1 accuracy in eval mode (BatchNorm running stats, no dropout); the mode is restored.

    Over every element of ``y``: per image for a classifier (``y`` (n,)), per position for a
    sequence model (``y`` (n, T), logits (n, vocab, T): next-character accuracy).
    """
    was_training = model.training
    model.eval()
    correct = 0
    for i in range(0, len(y), chunk):
        correct += int((model(x[i:i + chunk]).argmax(1) == y[i:i + chunk]).sum())
    model.train(was_training)
    return correct / max(y.numel(), 1)


def pretrained_state(workload: str, input_size: int = 8, epochs: int = 10, batch_size: int | None = None,
                     lr: float | None = None, seed: int = 0) -> dict[str, torch.Tensor]:
    """The shared starting point: ``workload`` trained ``epochs`` on the pool with Adam (seeded).

    ``batch_size`` / ``lr``: ``None`` for 32 / 1e-3. A text model
    (:data:`edgetune.estimation.proxy_text.TEXT_MODELS`) is pre-trained instead by
    :func:`edgetune.estimation.proxy_text.pretrain_text_state`: its fixed number of AdamW steps
    on windows of ``"text-pretrain"`` (``None``: its own batch size and lr; ``epochs`` and
    ``input_size`` do not apply). Cached per process on the resolved arguments (defaults
    given or not: one checkpoint). Returned tensors are detached copies; callers
    ``load_state_dict`` them into a fresh model.
    """
    if workload in TEXT_MODELS:
        return _pretrained_state(workload, 0, 0, PRETRAIN_BATCH if batch_size is None else batch_size,
                                 PRETRAIN_LR if lr is None else lr, seed)
    return _pretrained_state(workload, input_size, epochs, 32 if batch_size is None else batch_size,
                             1e-3 if lr is None else lr, seed)


@lru_cache(maxsize=8)
def _pretrained_state(workload: str, input_size: int, epochs: int, batch_size: int, lr: float,
                      seed: int) -> dict[str, torch.Tensor]:
    directory = os.environ.get(CHECKPOINT_DIR_ENV)
    if not directory:
        return _pretrain(workload, input_size, epochs, batch_size, lr, seed)
    # named by a digest of the arguments: any workload name (a caller's, of any length or character)
    # gives a short, safe file name
    key = hashlib.sha256(repr((workload, input_size, epochs, batch_size, lr, seed)).encode()).hexdigest()[:32]
    path = Path(directory) / f"pretrained-{key}.pt"
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_suffix(".lock"), "w") as lock:  # one process trains, the others wait and load
        fcntl.flock(lock, fcntl.LOCK_EX)
        if path.exists():
            return torch.load(path, weights_only=True)
        state = _pretrain(workload, input_size, epochs, batch_size, lr, seed)
        torch.save(state, path.with_suffix(".tmp"))
        os.replace(path.with_suffix(".tmp"), path)  # whole or absent for a reader that does not lock
        return state


def _pretrain(workload: str, input_size: int, epochs: int, batch_size: int, lr: float,
              seed: int) -> dict[str, torch.Tensor]:
    if workload in TEXT_MODELS:
        return pretrain_text_state(workload, batch_size=batch_size, lr=lr, seed=seed)
    pool = load_proxy_data("pretrain", input_size)
    torch.manual_seed(seed)
    model = build_proxy_model(workload, input_size)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    order_rng = np.random.default_rng(seed)
    model.train()
    for _ in range(epochs):
        order = torch.from_numpy(order_rng.permutation(pool.n_train))
        for i in range(0, pool.n_train - batch_size + 1, batch_size):
            stopping.check()  # a caller that went away stops the pre-training (nothing is cached)
            j = order[i:i + batch_size]
            opt.zero_grad(set_to_none=True)
            F.cross_entropy(model(pool.x_train[j]), pool.y_train[j]).backward()
            opt.step()
    return {k: v.detach().clone() for k, v in model.state_dict().items()}
