"""A YOLOv8n-like detector in plain torch, with a simplified YOLOv8-style training loss.

Layout follows Ultralytics' ``yolov8.yaml`` at scale n (depth 0.33, width 0.25):
CSP-Darknet backbone of Conv (conv-BN-SiLU) and C2f blocks, SPPF, a PAN neck (top-down
upsample + concat, bottom-up strided conv + concat) and the decoupled anchor-free head
(separate box branch with a 16-bin distribution per side — DFL — and class branch) on
strides 8/16/32. At 80 classes that is ≈ 3.16 M parameters and ≈ 8.7 GFLOPs at 640×640.

The loss keeps YOLOv8's three terms (class BCE, IoU box loss, distribution focal loss) and
weights, but replaces the task-aligned assigner with a simple one: the grid cell holding a
box's centre is the positive on every level. Enough to give real gradients through every
layer — what a power/time profile needs — without the assigner's bookkeeping.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import cast

import torch
from torch import nn
from torch.nn import functional as F

from edgetune.errors import InvalidArgument


@dataclass(frozen=True)
class YoloConfig:
    num_classes: int = 80
    input_size: int = 640  # square images, pixels; a multiple of 32
    in_channels: int = 3
    width: float = 0.25  # channel multiplier (n scale)
    depth: float = 0.33  # block-repeat multiplier (n scale)
    max_channels: int = 1024
    reg_max: int = 16  # bins of the box-side distribution
    max_boxes: int = 4  # boxes per synthetic image (targets are padded to this)


STRIDES = (8, 16, 32)
_LOSS_GAINS = {"box": 7.5, "cls": 0.5, "dfl": 1.5}  # Ultralytics' defaults


class Conv(nn.Module):
    """Conv2d (no bias) → BatchNorm → SiLU: the only convolution YOLOv8 uses outside the head's last layer."""

    def __init__(self, c_in: int, c_out: int, k: int = 1, s: int = 1) -> None:
        super().__init__()
        self.conv = nn.Conv2d(c_in, c_out, k, s, k // 2, bias=False)
        self.bn = nn.BatchNorm2d(c_out, eps=0.001, momentum=0.03)
        self.act = nn.SiLU(inplace=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.bn(self.conv(x)))


class Bottleneck(nn.Module):
    def __init__(self, c: int, shortcut: bool) -> None:
        super().__init__()
        self.cv1 = Conv(c, c, 3)
        self.cv2 = Conv(c, c, 3)
        self.add = shortcut

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.cv2(self.cv1(x))
        return x + y if self.add else y


class C2f(nn.Module):
    """CSP block, YOLOv8 style: split, n bottlenecks on one half, concat every intermediate, fuse."""

    def __init__(self, c_in: int, c_out: int, n: int, shortcut: bool) -> None:
        super().__init__()
        self.c = c_out // 2
        self.cv1 = Conv(c_in, 2 * self.c, 1)
        self.cv2 = Conv((2 + n) * self.c, c_out, 1)
        self.m = nn.ModuleList(Bottleneck(self.c, shortcut) for _ in range(n))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        ys = list(self.cv1(x).chunk(2, 1))
        for m in self.m:
            ys.append(m(ys[-1]))
        return self.cv2(torch.cat(ys, 1))


class SPPF(nn.Module):
    """Spatial pyramid pooling, fast: three chained 5×5 max-pools ≈ pools of 5, 9 and 13."""

    def __init__(self, c_in: int, c_out: int, k: int = 5) -> None:
        super().__init__()
        c = c_in // 2
        self.cv1 = Conv(c_in, c, 1)
        self.cv2 = Conv(4 * c, c_out, 1)
        self.pool = nn.MaxPool2d(k, 1, k // 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = [self.cv1(x)]
        for _ in range(3):
            y.append(self.pool(y[-1]))
        return self.cv2(torch.cat(y, 1))


class DFL(nn.Module):
    """Expected value of each side's 16-bin distribution, as a fixed 1×1 conv (as in Ultralytics)."""

    def __init__(self, reg_max: int) -> None:
        super().__init__()
        self.reg_max = reg_max
        self.conv = nn.Conv2d(reg_max, 1, 1, bias=False).requires_grad_(False)
        self.conv.weight.data[:] = torch.arange(reg_max, dtype=torch.float32).view(1, reg_max, 1, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (B, 4·reg_max, N) → (B, 4, N)
        b, _, n = x.shape
        x = x.view(b, 4, self.reg_max, n).transpose(2, 1).softmax(1)
        return self.conv(x).view(b, 4, n)


class Detect(nn.Module):
    """Decoupled head: per level a box branch (3×3, 3×3, 1×1 → 4·reg_max) and a class branch (→ nc)."""

    def __init__(self, nc: int, channels: tuple[int, ...], reg_max: int) -> None:
        super().__init__()
        self.nc, self.reg_max = nc, reg_max
        c2 = max(16, channels[0] // 4, reg_max * 4)
        c3 = max(channels[0], min(nc, 100))
        self.cv2 = nn.ModuleList(
            nn.Sequential(Conv(c, c2, 3), Conv(c2, c2, 3), nn.Conv2d(c2, 4 * reg_max, 1)) for c in channels
        )
        self.cv3 = nn.ModuleList(
            nn.Sequential(Conv(c, c3, 3), Conv(c3, c3, 3), nn.Conv2d(c3, nc, 1)) for c in channels
        )
        self.dfl = DFL(reg_max)
        self._init_bias()

    def _init_bias(self) -> None:
        # start with ~5 objects per 640² image: keeps the initial class loss from swamping the rest
        for box, cls, s in zip(self.cv2, self.cv3, STRIDES, strict=True):
            box_out, cls_out = cast(nn.Sequential, box)[-1], cast(nn.Sequential, cls)[-1]
            assert isinstance(box_out, nn.Conv2d) and isinstance(cls_out, nn.Conv2d)
            assert box_out.bias is not None and cls_out.bias is not None
            box_out.bias.data[:] = 1.0
            cls_out.bias.data[:] = math.log(5 / self.nc / (640 / s) ** 2)

    def forward(self, feats: list[torch.Tensor]) -> list[torch.Tensor] | torch.Tensor:
        outs = [torch.cat((b(x), c(x)), 1) for x, b, c in zip(feats, self.cv2, self.cv3, strict=True)]
        if self.training:
            return outs  # raw maps (B, 4·reg_max + nc, H, W); the loss decodes what it needs
        return self._decode(outs)

    def _decode(self, outs: list[torch.Tensor]) -> torch.Tensor:
        """(B, N, 4 + nc): boxes x1 y1 x2 y2 in pixels and class probabilities, N = Σ H·W."""
        b = outs[0].shape[0]
        flat = torch.cat([o.view(b, o.shape[1], -1) for o in outs], 2)
        box_logits, cls_logits = flat.split((4 * self.reg_max, self.nc), 1)
        anchors, strides = _anchor_points(outs, flat.device, flat.dtype)  # (N, 2), (N, 1) in stride units
        lt, rb = self.dfl(box_logits).chunk(2, 1)  # (B, 2, N) each
        a = anchors.t().unsqueeze(0)
        boxes = torch.cat((a - lt, a + rb), 1) * strides.t()
        return torch.cat((boxes, cls_logits.sigmoid()), 1).transpose(1, 2)


def _anchor_points(
    outs: list[torch.Tensor], device: torch.device, dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor]:
    points, strides = [], []
    for o, s in zip(outs, STRIDES, strict=True):
        h, w = o.shape[2:]
        sy, sx = torch.meshgrid(
            torch.arange(h, device=device, dtype=dtype) + 0.5,
            torch.arange(w, device=device, dtype=dtype) + 0.5,
            indexing="ij",
        )
        points.append(torch.stack((sx, sy), -1).view(-1, 2))
        strides.append(torch.full((h * w, 1), float(s), device=device, dtype=dtype))
    return torch.cat(points), torch.cat(strides)


class YoloV8(nn.Module):
    def __init__(self, config: YoloConfig = YoloConfig()) -> None:
        super().__init__()
        self.config = config

        def ch(c: int) -> int:  # width scaling, rounded up to a multiple of 8
            return math.ceil(min(c, config.max_channels) * config.width / 8) * 8

        def n(k: int) -> int:  # depth scaling
            return max(round(k * config.depth), 1)

        c1, c2, c3, c4, c5 = ch(64), ch(128), ch(256), ch(512), ch(1024)
        # backbone: P1/2 … P5/32
        self.stem = nn.Sequential(
            Conv(config.in_channels, c1, 3, 2), Conv(c1, c2, 3, 2), C2f(c2, c2, n(3), True)
        )
        self.stage3 = nn.Sequential(Conv(c2, c3, 3, 2), C2f(c3, c3, n(6), True))  # → P3
        self.stage4 = nn.Sequential(Conv(c3, c4, 3, 2), C2f(c4, c4, n(6), True))  # → P4
        self.stage5 = nn.Sequential(Conv(c4, c5, 3, 2), C2f(c5, c5, n(3), True), SPPF(c5, c5))  # → P5
        # PAN neck: top-down then bottom-up
        self.up = nn.Upsample(scale_factor=2, mode="nearest")
        self.td4 = C2f(c5 + c4, c4, n(3), False)
        self.td3 = C2f(c4 + c3, c3, n(3), False)
        self.down3 = Conv(c3, c3, 3, 2)
        self.bu4 = C2f(c3 + c4, c4, n(3), False)
        self.down4 = Conv(c4, c4, 3, 2)
        self.bu5 = C2f(c4 + c5, c5, n(3), False)
        self.detect = Detect(config.num_classes, (c3, c4, c5), config.reg_max)

    def forward(self, x: torch.Tensor) -> list[torch.Tensor] | torch.Tensor:
        p3 = self.stage3(self.stem(x))
        p4 = self.stage4(p3)
        p5 = self.stage5(p4)
        t4 = self.td4(torch.cat((self.up(p5), p4), 1))
        n3 = self.td3(torch.cat((self.up(t4), p3), 1))
        n4 = self.bu4(torch.cat((self.down3(n3), t4), 1))
        n5 = self.bu5(torch.cat((self.down4(n4), p5), 1))
        return self.detect([n3, n4, n5])


def build(config: YoloConfig) -> YoloV8:
    if config.input_size % 32:
        raise InvalidArgument(
            "input_size", f"{config.input_size} is not a multiple of the largest stride", "multiples of 32"
        )
    return YoloV8(config)


def _bbox_giou(a: torch.Tensor, b: torch.Tensor, eps: float = 1e-7) -> torch.Tensor:
    """Generalised IoU of matching xyxy boxes, (P, 4) each."""
    inter = (torch.min(a[:, 2:], b[:, 2:]) - torch.max(a[:, :2], b[:, :2])).clamp(min=0).prod(1)
    area_a = (a[:, 2:] - a[:, :2]).clamp(min=0).prod(1)
    area_b = (b[:, 2:] - b[:, :2]).clamp(min=0).prod(1)
    union = area_a + area_b - inter + eps
    hull = (torch.max(a[:, 2:], b[:, 2:]) - torch.min(a[:, :2], b[:, :2])).clamp(min=0).prod(1) + eps
    iou = inter / union
    return iou - (hull - union) / hull


def detection_loss(outputs: list[torch.Tensor], targets: torch.Tensor, reg_max: int = 16) -> torch.Tensor:
    """YOLOv8-style loss: box (1 − GIoU) · 7.5 + class BCE · 0.5 + DFL · 1.5, averaged over positives.

    ``outputs``: the training-mode raw maps, one per stride. ``targets``: (B, K, 5) rows of
    (class, x1, y1, x2, y2) in pixels; class < 0 marks padding.
    """
    valid = targets[..., 0] >= 0
    b_idx, k_idx = valid.nonzero(as_tuple=True)
    cls = targets[b_idx, k_idx, 0].long()
    boxes = targets[b_idx, k_idx, 1:]
    bins = torch.arange(reg_max, device=targets.device, dtype=outputs[0].dtype)
    loss_cls = outputs[0].new_zeros(())
    loss_box = outputs[0].new_zeros(())
    loss_dfl = outputs[0].new_zeros(())
    n_pos = 0
    for out, s in zip(outputs, STRIDES, strict=True):
        _, _, h, w = out.shape
        box_logits, cls_logits = out.split((4 * reg_max, out.shape[1] - 4 * reg_max), 1)
        # positive cell: the one holding the box centre, on this level's grid
        cx = ((boxes[:, 0] + boxes[:, 2]) / (2 * s)).floor().clamp(0, w - 1).long()
        cy = ((boxes[:, 1] + boxes[:, 3]) / (2 * s)).floor().clamp(0, h - 1).long()
        cls_target = torch.zeros_like(cls_logits)
        cls_target[b_idx, cls, cy, cx] = 1.0
        loss_cls = loss_cls + F.binary_cross_entropy_with_logits(cls_logits, cls_target, reduction="sum")
        if len(b_idx) == 0:
            continue
        n_pos += len(b_idx)
        dist_logits = box_logits[b_idx, :, cy, cx].view(-1, 4, reg_max)  # (P, 4, reg_max)
        anchor = torch.stack((cx, cy), 1).to(boxes.dtype) + 0.5  # stride units
        target_ltrb = torch.cat((anchor - boxes[:, :2] / s, boxes[:, 2:] / s - anchor), 1).clamp(
            0, reg_max - 1.01
        )
        pred_ltrb = dist_logits.softmax(-1) @ bins
        pred_box = torch.cat((anchor - pred_ltrb[:, :2], anchor + pred_ltrb[:, 2:]), 1)
        target_box = torch.cat((anchor - target_ltrb[:, :2], anchor + target_ltrb[:, 2:]), 1)
        loss_box = loss_box + (1.0 - _bbox_giou(pred_box, target_box)).sum()
        # distribution focal loss: cross-entropy to the two bins around the target distance
        left = target_ltrb.floor().long()
        w_left = (left + 1).to(target_ltrb.dtype) - target_ltrb
        logp = dist_logits.log_softmax(-1)
        nll_left = -logp.gather(-1, left.unsqueeze(-1)).squeeze(-1)
        nll_right = -logp.gather(-1, (left + 1).unsqueeze(-1)).squeeze(-1)
        loss_dfl = loss_dfl + (nll_left * w_left + nll_right * (1 - w_left)).mean(-1).sum()
    norm = max(n_pos, 1)
    return (
        _LOSS_GAINS["box"] * loss_box + _LOSS_GAINS["cls"] * loss_cls + _LOSS_GAINS["dfl"] * loss_dfl
    ) / norm
