"""Channel-parametric models for THOR's evaluation, and their random-channel variants.

Seed 003 evaluates on LeNet-5, a 5-layer CNN (four Conv2D+BatchNorm+MaxPool and an FC;
CelebA-like input), ResNets, an LSTM and a Transformer, each as 100 random-channel variants
("channels from 1 to the original"). Here, all ``nn.Sequential`` so that
:mod:`.blocks` parses them:

* :func:`cnn5` — the paper's 5-layer CNN (64 × 64 × 3 input, 2 classes: gender on CelebA);
* :func:`vgg_ish` — a VGG-11-like stack at 32 × 32 with a global-pool classifier;
* :func:`resnet_ish` — a stem and four :class:`ResidualBlock` units (projection shortcut
  always on, so a block's cost is smooth in its channels), one per stage;
* :func:`mobilenet_ish` — a MobileNetV1-style stack of depthwise-separable blocks with a
  two-layer classifier (so an FC hidden layer too).

:func:`random_channels` draws a channel vector uniformly in ``[1, original]`` per free block.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import torch
from torch import nn

from edgetune.errors import InvalidArgument
from edgetune.estimation.layerwise.blocks import ParsedModel, parse


class ResidualBlock(nn.Module):
    """A ResNet basic block (3×3, 3×3, 1×1 projection shortcut) that THOR treats as one unit."""

    thor_unit = True

    def __init__(self, c_in: int, c_out: int, stride: int = 1) -> None:
        super().__init__()
        self.in_channels, self.out_channels, self.stride, self.kernel_size = c_in, c_out, stride, 3
        self.conv1 = nn.Conv2d(c_in, c_out, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(c_out)
        self.relu = nn.ReLU()
        self.conv2 = nn.Conv2d(c_out, c_out, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(c_out)
        self.proj = nn.Conv2d(c_in, c_out, 1, stride, bias=False)
        self.bn3 = nn.BatchNorm2d(c_out)

    def rebuild(self, c_in: int, c_out: int) -> ResidualBlock:
        return ResidualBlock(c_in, c_out, self.stride)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.bn2(self.conv2(self.relu(self.bn1(self.conv1(x)))))
        return self.relu(y + self.bn3(self.proj(x)))


def _conv_bn_relu(c_in: int, c_out: int, k: int = 3, stride: int = 1, groups: int = 1) -> list[nn.Module]:
    return [nn.Conv2d(c_in, c_out, k, stride, k // 2, groups=groups, bias=False), nn.BatchNorm2d(c_out), nn.ReLU()]


def cnn5(channels: Sequence[int] = (32, 64, 128, 256), input_size: int = 64, num_classes: int = 2) -> nn.Sequential:
    layers: list[nn.Module] = []
    c_in = 3
    for c in channels:
        layers += [nn.Conv2d(c_in, c, 3, 1, 1), nn.BatchNorm2d(c), nn.ReLU(), nn.MaxPool2d(2)]
        c_in = c
    side = input_size // 2 ** len(channels)
    return nn.Sequential(*layers, nn.Flatten(), nn.Linear(c_in * side * side, num_classes))


def vgg_ish(channels: Sequence[int] = (64, 128, 256, 256, 512, 512), num_classes: int = 10) -> nn.Sequential:
    pools_after = {0, 1, 3, 5}  # VGG-11's pooling pattern over six conv layers at 32 × 32
    layers: list[nn.Module] = []
    c_in = 3
    for i, c in enumerate(channels):
        layers += _conv_bn_relu(c_in, c)
        if i in pools_after:
            layers.append(nn.MaxPool2d(2))
        c_in = c
    return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(c_in, num_classes))


def resnet_ish(channels: Sequence[int] = (32, 64, 128, 256, 512), num_classes: int = 10) -> nn.Sequential:
    stem, *stages = channels
    layers: list[nn.Module] = _conv_bn_relu(3, stem)
    c_in = stem
    for i, c in enumerate(stages):
        layers.append(ResidualBlock(c_in, c, 1 if i == 0 else 2))
        c_in = c
    return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(c_in, num_classes))


#: (output channels of the pointwise conv, stride of the depthwise conv) per separable block
_MOBILENET = ((64, 1), (128, 2), (128, 1), (256, 2), (256, 1), (512, 2))


def mobilenet_ish(channels: Sequence[int] | None = None, hidden: int = 1024, num_classes: int = 10) -> nn.Sequential:
    """Stem conv (s2) → depthwise-separable blocks → global pool → FC(hidden) → FC(classes).

    ``channels`` = stem width then each block's pointwise width (the depthwise convs follow).
    """
    widths = list(channels) if channels is not None else [32] + [c for c, _ in _MOBILENET]
    if len(widths) != len(_MOBILENET) + 1:
        raise InvalidArgument("channels", f"{len(widths)} widths", f"{len(_MOBILENET) + 1} (stem + blocks)")
    layers: list[nn.Module] = _conv_bn_relu(3, widths[0], 3, 2)
    c_in = widths[0]
    for c, (_, s) in zip(widths[1:], _MOBILENET, strict=True):
        layers += _conv_bn_relu(c_in, c_in, 3, s, groups=c_in)  # depthwise
        layers += _conv_bn_relu(c_in, c, 1)  # pointwise
        c_in = c
    return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(c_in, hidden), nn.Hardswish(),
                         nn.Dropout(0.2), nn.Linear(hidden, num_classes))


#: name -> (builder on meta, input shape without batch)
MODELS: dict[str, tuple[Callable[[], nn.Module], tuple[int, ...]]] = {
    "cnn5": (cnn5, (3, 64, 64)),
    "vgg-ish": (vgg_ish, (3, 32, 32)),
    "resnet-ish": (resnet_ish, (3, 32, 32)),
    "mobilenet-ish": (mobilenet_ish, (3, 64, 64)),
}


def parsed_model(name: str, batch_size: int = 16) -> ParsedModel:
    """The named model parsed into THOR blocks (built on the meta device)."""
    if name not in MODELS:
        raise InvalidArgument("model", f"unknown model {name!r}", ", ".join(MODELS))
    builder, shape = MODELS[name]
    with torch.device("meta"):
        model = builder()
    return parse(model, (batch_size, *shape))


def random_channels(parsed: ParsedModel, rng: np.random.Generator, low_frac: float = 0.0) -> list[int]:
    """A channel vector with each free block's width uniform in [max(1, low_frac·orig), orig];
    depthwise blocks follow their input."""
    orig = parsed.channels()
    out = []
    for i, c in enumerate(orig):
        if parsed.variable(i):
            out.append(int(rng.integers(max(1, int(low_frac * c)), c + 1)))
        else:
            out.append(out[-1] if out else c)
    return out
