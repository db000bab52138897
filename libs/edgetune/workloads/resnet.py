"""ResNet18 (He et al. 2016), ImageNet layout, in plain torch.

Same layers and parameter count as torchvision's ``resnet18`` (11,689,512 at 1000 classes;
1.82 GMACs at 224×224). The adaptive average pool makes any input size ≥ 32 px work, which
the tests use to train at 32×32.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn


@dataclass(frozen=True)
class ResNetConfig:
    num_classes: int = 1000
    input_size: int = 224  # square images, pixels
    in_channels: int = 3
    layers: tuple[int, int, int, int] = (2, 2, 2, 2)  # BasicBlocks per stage: ResNet18


class BasicBlock(nn.Module):
    def __init__(self, c_in: int, c_out: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(c_in, c_out, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(c_out)
        self.conv2 = nn.Conv2d(c_out, c_out, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(c_out)
        self.relu = nn.ReLU(inplace=True)
        self.downsample: nn.Module | None = None
        if stride != 1 or c_in != c_out:  # projection shortcut when the shape changes
            self.downsample = nn.Sequential(
                nn.Conv2d(c_in, c_out, 1, stride, bias=False), nn.BatchNorm2d(c_out)
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + identity)


class ResNet(nn.Module):
    def __init__(self, config: ResNetConfig = ResNetConfig()) -> None:
        super().__init__()
        self.config = config
        self.conv1 = nn.Conv2d(config.in_channels, 64, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        stages = []
        c_in = 64
        for i, n_blocks in enumerate(config.layers):
            c_out = 64 * 2**i
            blocks = [BasicBlock(c_in, c_out, 1 if i == 0 else 2)]
            blocks += [BasicBlock(c_out, c_out, 1) for _ in range(n_blocks - 1)]
            stages.append(nn.Sequential(*blocks))
            c_in = c_out
        self.layer1, self.layer2, self.layer3, self.layer4 = stages
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(c_in, config.num_classes)
        self._init_weights()

    def _init_weights(self) -> None:
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
        # zero-init the last BN of each block: every block starts as identity, trains faster
        for m in self.modules():
            if isinstance(m, BasicBlock):
                nn.init.zeros_(m.bn2.weight)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


def build(config: ResNetConfig) -> ResNet:
    return ResNet(config)
