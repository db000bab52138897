"""MobileNetV3 (Howard et al. 2019), small and large, in plain torch.

Inverted residual blocks (1×1 expand → depthwise k×k → squeeze-excite → 1×1 project) with
ReLU in the early blocks and hard-swish later, as in the paper's Tables 1–2 and
torchvision's layout: small = 2,542,856 parameters and ≈ 0.06 GMACs at 224×224; large =
5,483,032 parameters and ≈ 0.22 GMACs (the PowerTrain paper's "MobileNetv3", 5.5 M / 225 M).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F

from edgetune.errors import InvalidArgument

# (in, kernel, expanded, out, use_se, activation, stride) per block, from the paper
_SMALL = [
    (16, 3, 16, 16, True, "RE", 2),
    (16, 3, 72, 24, False, "RE", 2),
    (24, 3, 88, 24, False, "RE", 1),
    (24, 5, 96, 40, True, "HS", 2),
    (40, 5, 240, 40, True, "HS", 1),
    (40, 5, 240, 40, True, "HS", 1),
    (40, 5, 120, 48, True, "HS", 1),
    (48, 5, 144, 48, True, "HS", 1),
    (48, 5, 288, 96, True, "HS", 2),
    (96, 5, 576, 96, True, "HS", 1),
    (96, 5, 576, 96, True, "HS", 1),
]
_LARGE = [
    (16, 3, 16, 16, False, "RE", 1),
    (16, 3, 64, 24, False, "RE", 2),
    (24, 3, 72, 24, False, "RE", 1),
    (24, 5, 72, 40, True, "RE", 2),
    (40, 5, 120, 40, True, "RE", 1),
    (40, 5, 120, 40, True, "RE", 1),
    (40, 3, 240, 80, False, "HS", 2),
    (80, 3, 200, 80, False, "HS", 1),
    (80, 3, 184, 80, False, "HS", 1),
    (80, 3, 184, 80, False, "HS", 1),
    (80, 3, 480, 112, True, "HS", 1),
    (112, 3, 672, 112, True, "HS", 1),
    (112, 5, 672, 160, True, "HS", 2),
    (160, 5, 960, 160, True, "HS", 1),
    (160, 5, 960, 160, True, "HS", 1),
]
_HEAD = {"small": 1024, "large": 1280}  # width of the classifier's hidden layer


@dataclass(frozen=True)
class MobileNetV3Config:
    variant: str = "small"  # "small" | "large"
    num_classes: int = 1000
    input_size: int = 224  # square images, pixels
    in_channels: int = 3
    dropout: float = 0.2


def _make_divisible(v: float, divisor: int = 8) -> int:
    # the paper's channel rounding: nearest multiple of 8, never more than 10 % below v
    new_v = max(divisor, int(v + divisor / 2) // divisor * divisor)
    return new_v + divisor if new_v < 0.9 * v else new_v


def _act(name: str) -> nn.Module:
    return nn.Hardswish(inplace=True) if name == "HS" else nn.ReLU(inplace=True)


def _conv_bn_act(
    c_in: int, c_out: int, k: int, stride: int = 1, groups: int = 1, act: str | None = "RE"
) -> nn.Sequential:
    layers: list[nn.Module] = [
        nn.Conv2d(c_in, c_out, k, stride, (k - 1) // 2, groups=groups, bias=False),
        nn.BatchNorm2d(c_out, eps=0.001, momentum=0.01),
    ]
    if act is not None:
        layers.append(_act(act))
    return nn.Sequential(*layers)


class SqueezeExcite(nn.Module):
    """Channel attention: global pool → 1×1 squeeze (ReLU) → 1×1 excite (hard-sigmoid) → scale."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        squeezed = _make_divisible(channels // 4)
        self.fc1 = nn.Conv2d(channels, squeezed, 1)
        self.fc2 = nn.Conv2d(squeezed, channels, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s = F.adaptive_avg_pool2d(x, 1)
        s = F.hardsigmoid(self.fc2(F.relu(self.fc1(s), inplace=True)), inplace=True)
        return x * s


class InvertedResidual(nn.Module):
    def __init__(
        self, c_in: int, k: int, c_exp: int, c_out: int, use_se: bool, act: str, stride: int
    ) -> None:
        super().__init__()
        self.use_residual = stride == 1 and c_in == c_out
        layers: list[nn.Module] = []
        if c_exp != c_in:  # the first block of "small" has no expansion
            layers.append(_conv_bn_act(c_in, c_exp, 1, act=act))
        layers.append(_conv_bn_act(c_exp, c_exp, k, stride, groups=c_exp, act=act))  # depthwise
        if use_se:
            layers.append(SqueezeExcite(c_exp))
        layers.append(_conv_bn_act(c_exp, c_out, 1, act=None))  # linear bottleneck
        self.block = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.block(x)
        return x + y if self.use_residual else y


class MobileNetV3(nn.Module):
    def __init__(self, config: MobileNetV3Config = MobileNetV3Config()) -> None:
        super().__init__()
        self.config = config
        settings = {"small": _SMALL, "large": _LARGE}[config.variant]
        layers: list[nn.Module] = [_conv_bn_act(config.in_channels, settings[0][0], 3, 2, act="HS")]
        layers += [InvertedResidual(*s) for s in settings]
        last_in = settings[-1][3]
        last_conv = 6 * last_in
        layers.append(_conv_bn_act(last_in, last_conv, 1, act="HS"))
        self.features = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        hidden = _HEAD[config.variant]
        self.classifier = nn.Sequential(
            nn.Linear(last_conv, hidden),
            nn.Hardswish(inplace=True),
            nn.Dropout(config.dropout, inplace=True),
            nn.Linear(hidden, config.num_classes),
        )
        self._init_weights()

    def _init_weights(self) -> None:
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out")
                if m.bias is not None:
                    nn.init.zeros_(m.bias)
            elif isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, 0, 0.01)
                nn.init.zeros_(m.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.avgpool(self.features(x))
        return self.classifier(torch.flatten(x, 1))


def build(config: MobileNetV3Config) -> MobileNetV3:
    if config.variant not in ("small", "large"):
        raise InvalidArgument("variant", f"unknown MobileNetV3 variant {config.variant!r}", "small, large")
    return MobileNetV3(config)
