"""The model zoo's registry: workload name → :class:`WorkloadDef`.

A WorkloadDef is everything the runner and the profiler need to know about a workload
without caring which model it is: how to build the model, what one sample looks like, how
to make a minibatch and a DataLoader, its loss, its FLOPs (counted by forward hooks, see
:mod:`edgetune.workloads.flops`) and parameter count.

Names: the PowerTrain workloads ``resnet18``, ``mobilenetv3`` (small; ``mobilenetv3-large``
is the paper's 5.5 M variant), ``yolov8n``, ``lstm``, ``bert-base``, and small variants for
tests and laptops (``bert-tiny``, ``lstm-tiny``). ``get_workload(name, input_size=64)``
overrides any field of the model's config (shrinking inputs keeps CPU tests fast).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import Dataset, default_collate

from edgetune import validation
from edgetune.errors import InvalidArgument
from edgetune.workloads import bert, lstm, mobilenet, resnet, yolo
from edgetune.workloads.data import IGNORE_INDEX, dataset_for
from edgetune.workloads.flops import FlopReport, count_flops

TASKS = ("classify", "detect", "lm", "mlm")


@dataclass(frozen=True)
class WorkloadDef:
    """One zoo workload: a model config plus the task that says how to feed and score it."""

    name: str
    task: str  # one of TASKS
    config: Any  # the model module's frozen config dataclass
    builder: Callable[[Any], nn.Module]
    description: str = ""
    optimizer: str = "sgd"  # default for training runs: "sgd" (momentum 0.9) or "adam"
    lr: float = 0.01

    # --- the model ------------------------------------------------------------------------
    def build(self, device: torch.device | str | None = None) -> nn.Module:
        model = self.builder(self.config)
        return model.to(device) if device is not None else model

    def with_config(self, **overrides: Any) -> WorkloadDef:
        """A copy with config fields replaced; unknown fields → ``InvalidArgument`` naming them."""
        fields = {f.name: f for f in dataclasses.fields(self.config)}
        for key, value in overrides.items():
            if key not in fields:
                raise InvalidArgument(key, f"not a setting of workload {self.name!r}", ", ".join(fields))
            default = getattr(self.config, key)
            if isinstance(default, int) and not isinstance(default, bool):
                if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                    raise InvalidArgument(key, f"{value!r} is not a positive integer", ">= 1")
        if not overrides:
            return self
        config = dataclasses.replace(self.config, **overrides)
        wl = dataclasses.replace(self, config=config)
        wl.build_check()
        return wl

    def build_check(self) -> None:
        """Validate the config the way ``build`` would, without allocating weights."""
        with torch.device("meta"):
            self.builder(self.config)

    # --- the data -------------------------------------------------------------------------
    @property
    def input_shape(self) -> tuple[int, ...]:
        """Shape of one sample, without the batch dimension: (C, H, W) or (T,)."""
        c = self.config
        if self.task in ("classify", "detect"):
            return (c.in_channels, c.input_size, c.input_size)
        return (c.seq_len,)

    @property
    def input_dtype(self) -> torch.dtype:
        return torch.float32 if self.task in ("classify", "detect") else torch.int64

    def dataset(self, n_samples: int, source: str = "synthetic", seed: int = 0) -> Dataset:
        return dataset_for(self, n_samples, source, seed)

    def make_batch(
        self, batch_size: int, seed: int = 0, device: torch.device | str | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """One synthetic minibatch ``(inputs, targets)`` of ``batch_size`` samples."""
        validation.batch_size(batch_size)
        ds = self.dataset(batch_size, seed=seed)
        inputs, targets = default_collate([ds[i] for i in range(batch_size)])
        if device is not None:
            inputs, targets = inputs.to(device), targets.to(device)
        return inputs, targets

    # --- training -------------------------------------------------------------------------
    def loss(self, outputs: Any, targets: torch.Tensor) -> torch.Tensor:
        """Scalar training loss of the model's training-mode ``outputs``."""
        if self.task == "classify":
            return F.cross_entropy(outputs, targets)
        if self.task == "detect":
            return yolo.detection_loss(outputs, targets, self.config.reg_max)
        # language models: (B, T, V) logits against (B, T) token targets
        return F.cross_entropy(outputs.flatten(0, 1), targets.flatten(), ignore_index=IGNORE_INDEX)

    # --- size -----------------------------------------------------------------------------
    def flop_report(self, batch_size: int = 1) -> FlopReport:
        """Per-layer FLOPs of one inference forward pass, counted on the meta device (no memory, no math)."""
        with torch.device("meta"):
            model = self.builder(self.config).eval()
            x = torch.zeros((batch_size, *self.input_shape), dtype=self.input_dtype)
        return count_flops(model, x)

    def flops(self, batch_size: int = 1) -> int:
        """FLOPs (2 × multiply-accumulates) of one forward pass over ``batch_size`` samples."""
        return self.flop_report(batch_size).total_flops

    def param_count(self) -> int:
        """Distinct parameters (tied weights once), trainable or not."""
        with torch.device("meta"):
            model = self.builder(self.config)
        return sum(p.numel() for p in model.parameters())


def _entry(
    name: str, task: str, config: Any, builder: Any, about: str, optimizer: str, lr: float
) -> WorkloadDef:
    return WorkloadDef(name, task, config, builder, description=about, optimizer=optimizer, lr=lr)


# optimizer / lr are the defaults a training run uses when the caller gives none
_ZOO: dict[str, WorkloadDef] = {
    w.name: w
    for w in [
        _entry("resnet18", "classify", resnet.ResNetConfig(), resnet.build,
               "ResNet18, ImageNet layout (PowerTrain's reference workload)", "sgd", 0.01),
        _entry("mobilenetv3", "classify", mobilenet.MobileNetV3Config("small"), mobilenet.build,
               "MobileNetV3-small with SE and hard-swish", "sgd", 0.01),
        _entry("mobilenetv3-large", "classify", mobilenet.MobileNetV3Config("large"), mobilenet.build,
               "MobileNetV3-large (the size PowerTrain's Table 2 lists)", "sgd", 0.01),
        _entry("yolov8n", "detect", yolo.YoloConfig(), yolo.build,
               "YOLOv8n-like detector: C2f backbone, SPPF, PAN neck, decoupled head", "sgd", 0.01),
        _entry("lstm", "lm", lstm.LstmConfig(), lstm.build,
               "2-layer LSTM word language model, WikiText-2 vocabulary", "adam", 1e-3),
        _entry("lstm-tiny", "lm", lstm.LstmConfig(vocab_size=256, embed_dim=64, hidden_size=64, seq_len=16),
               lstm.build, "small LSTM language model for tests", "adam", 1e-2),
        _entry("bert-base", "mlm", bert.BertConfig(), bert.build,
               "BERT-base encoder with masked-LM head, 128-token sequences", "adam", 1e-4),
        _entry("bert-tiny", "mlm", bert.TINY, bert.build,
               "2-layer, 128-hidden BERT with masked-LM head, for tests", "adam", 1e-3),
    ]
}  # fmt: skip


def workload_names() -> list[str]:
    return list(_ZOO)


def get_workload(name: str, **overrides: Any) -> WorkloadDef:
    """The zoo entry ``name``, with config fields replaced by ``overrides``.

    Unknown name → ``InvalidArgument("workload", ..., allowed=<names>)``.
    """
    try:
        wl = _ZOO[name]
    except (KeyError, TypeError):
        raise InvalidArgument("workload", f"unknown workload {name!r}", ", ".join(_ZOO)) from None
    return wl.with_config(**overrides)
