"""THOR's energy of a network (a layer-wise zoo name, or its layers) on a Jetson's layer costing.

The network becomes an ``nn.Sequential`` on the meta device (shapes only), THOR
(:mod:`edgetune.estimation.layerwise.thor`) plans its variant networks, profiles them on the
device's layer costing (:mod:`edgetune.physics.costing`) in the requested mode, fits one GP per
layer kind, and the energy of one training iteration above idle is the sum of its blocks' GP
means. Per block the GP also gives a std; the total std adds the blocks' variances (independent
GPs). A fitted THOR is cached per (device, mode, network, batch size): fitting takes seconds,
estimating microseconds. What the estimator's EstimateEnergy answers (:meth:`EnergyEstimator.answer`).

Without torch / scikit-learn, :data:`AVAILABLE` is False and :func:`require` raises
:class:`Unimplemented` saying so.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from edgetune import validation
from edgetune.base.mode import PowerMode
from edgetune.base.roles import Role
from edgetune.errors import EdgetuneError, InvalidArgument
from edgetune.estimation.records import EnergyEstimate, EnergySpec, LayerEnergy, LayerSpec
from edgetune.estimation.repository import LRU
from edgetune.powermodes.specs import get_spec

try:  # torch and scikit-learn are optional: without them the estimator answers UNIMPLEMENTED
    from edgetune.estimation.layerwise.blocks import BlockInstance, blocks_of, parse
    from edgetune.estimation.layerwise.thor import Thor
    from edgetune.estimation.layerwise.zoo import MODELS as ZOO
    from edgetune.estimation.layerwise.zoo import parsed_model
    from edgetune.physics.costing import LayerCostModel

    AVAILABLE, MISSING = True, ""
except ImportError as exc:  # pragma: no cover - depends on the installed packages
    AVAILABLE, MISSING = False, str(exc)
    ZOO = {}

DEFAULT_BATCH_SIZE = 16
#: Layer types a request may list, and what each becomes.
_LAYER_DIMS = ("input_height", "input_width", "in_channels", "out_channels", "kernel_size", "stride", "padding")
LAYER_TYPES = ("conv", "dwconv", "pool", "avgpool", "gap", "flatten", "fc", "bn", "relu", "dropout")


class Unimplemented(EdgetuneError):
    """The server cannot do this (a library part is missing); mapped to UNIMPLEMENTED."""


def require() -> None:
    if not AVAILABLE:
        raise Unimplemented("EstimateEnergy needs edgetune.estimation.layerwise (THOR), which this installation "
                            f"lacks: {MISSING}")


# --- the network ------------------------------------------------------------------------------------
def network_from_layers(layers: Sequence[LayerSpec], batch_size: int) -> Any:
    """The layers as a THOR-parsed model; a layer that does not fit its input is named."""
    import torch
    from torch import nn

    validation.repeated(layers, "layers", maximum=validation.MAX_LAYERS)
    for i, layer in enumerate(layers):  # every size bounded before a module is built
        for name in _LAYER_DIMS:
            validation.count(getattr(layer, name), f"layers[{i}].{name}", minimum=0, maximum=validation.MAX_LAYER_DIM)
    first = layers[0]
    for name in ("in_channels", "input_height", "input_width"):
        if getattr(first, name) < 1:
            raise InvalidArgument(f"layers[0].{name}", "the first layer must give the input shape", ">= 1")
    shape = (batch_size, first.in_channels, first.input_height, first.input_width)
    x = torch.zeros(shape, device="meta")
    modules: list[nn.Module] = []
    for i, layer in enumerate(layers):
        at = f"layers[{i}]"
        kind = layer.type.strip().lower()
        if kind not in LAYER_TYPES:
            raise InvalidArgument(f"{at}.type", f"unknown layer type {layer.type!r}", ", ".join(LAYER_TYPES))
        channels = int(x.shape[1])
        if layer.in_channels and layer.in_channels != channels and kind != "fc":
            raise InvalidArgument(f"{at}.in_channels", f"{layer.in_channels} but the previous layer gives {channels}",
                                  str(channels))
        k, s, p = layer.kernel_size, layer.stride, layer.padding
        with torch.device("meta"):
            if kind in ("conv", "dwconv"):
                if layer.out_channels < 1 and kind == "conv":
                    raise InvalidArgument(f"{at}.out_channels", "is required for a conv layer", ">= 1")
                out = channels if kind == "dwconv" else layer.out_channels
                m: nn.Module = nn.Conv2d(channels, out, k or 3, s or 1, p, groups=channels if kind == "dwconv" else 1)
            elif kind == "pool":
                m = nn.MaxPool2d(k or 2, s or (k or 2), p)
            elif kind == "avgpool":
                m = nn.AvgPool2d(k or 2, s or (k or 2), p)
            elif kind == "gap":
                m = nn.AdaptiveAvgPool2d(1)
            elif kind == "flatten":
                m = nn.Flatten()
            elif kind == "fc":
                if layer.out_channels < 1:
                    raise InvalidArgument(f"{at}.out_channels", "is required for an fc layer (its neurons)", ">= 1")
                if x.dim() > 2:  # THOR's connector: an FC after conv layers sees them flat
                    modules.append(nn.Flatten())
                    x = modules[-1](x)
                m = nn.Linear(int(x.shape[1]), layer.out_channels)
            elif kind == "bn":
                m = nn.BatchNorm2d(channels) if x.dim() == 4 else nn.BatchNorm1d(channels)
            elif kind == "relu":
                m = nn.ReLU()
            else:
                m = nn.Dropout(0.0)
        try:
            x = m(x)
        except RuntimeError as exc:
            raise InvalidArgument(at, f"does not fit its input of shape {tuple(x.shape)}: {exc}") from None
        modules.append(m)
    return parse(nn.Sequential(*modules), shape)


def network(workload: str, layers: Sequence[LayerSpec], batch_size: int) -> tuple[Any, str]:
    """(parsed model, cache signature) of the network: a zoo ``workload`` or its ``layers``."""
    if bool(workload) == bool(layers):
        raise InvalidArgument("workload", "give a zoo workload name or the layers, not both / neither",
                              ", ".join(ZOO) + ", or layers")
    if workload:
        if workload not in ZOO:
            raise InvalidArgument("workload", f"unknown layer-wise zoo model {workload!r}", ", ".join(ZOO))
        return parsed_model(workload, batch_size), f"zoo:{workload}"
    return network_from_layers(layers, batch_size), "layers:" + repr([tuple(str(v) for v in (
        lay.type, lay.input_height, lay.input_width, lay.in_channels, lay.out_channels, lay.kernel_size, lay.stride,
        lay.padding)) for lay in layers])


# --- estimating -------------------------------------------------------------------------------------
@dataclass
class BlockEnergy:
    block: Any
    energy_j: float
    std_j: float


class EnergyEstimator:
    """Fitted THORs by (device, mode, network, batch size), fitted once each (see the module docs)."""

    def __init__(self, cache_size: int = 8, seed: int = 0) -> None:
        self._thors = LRU(cache_size)
        self._lock = threading.Lock()  # one fit at a time: fits are CPU-bound and share the cores
        self.seed = seed

    def estimate(self, device: str, mode: PowerMode | None, parsed: Any, signature: str) -> list[BlockEnergy]:
        key = (device, mode.as_tuple() if mode is not None else None, signature, parsed.input_shape)
        thor = self._thors.get(key)
        if thor is None:
            with self._lock:
                thor = self._thors.get(key)
                if thor is None:
                    thor = Thor(parsed, LayerCostModel(device), mode, seed=self.seed).fit()
                    self._thors.put(key, thor)
        out = []
        for b in blocks_of(parsed)[1]:
            mean, std = thor.gps[b.kind].predict([b.gp_input()], return_std=True)
            out.append(BlockEnergy(b, float(mean[0]), float(std[0])))
        return out

    def answer(self, spec: EnergySpec) -> EnergyEstimate:
        """EstimateEnergy: the spec checked (THOR is fitted per request, for training only), then estimated."""
        require()
        if spec.model_id:
            raise InvalidArgument("model_id", "stored energy models are not supported: THOR is fitted per request "
                                  "and cached by the server", "empty")
        if spec.role is not None and spec.role is not Role.TRAIN:
            raise InvalidArgument("role", "THOR estimates the energy of a training iteration", "ROLE_TRAIN or unset")
        if spec.batch_size:  # 0: the default
            validation.batch_size(spec.batch_size, "batch_size")
        device = get_spec(spec.device or "xavier-agx")
        mode = validation.power_mode(device, spec.mode, "mode") if spec.mode is not None else None  # None: MAXN
        parsed, signature = network(spec.workload, spec.layers, spec.batch_size or DEFAULT_BATCH_SIZE)
        return estimate_of(self.estimate(device.name, mode, parsed, signature))


def layer_of(block: BlockInstance) -> LayerSpec:
    """A block as a layer: its parametric layer, input size, channels and THOR position."""
    k = block.kind
    return LayerSpec(type=k.layer, position=k.role, input_height=k.in_h, input_width=k.in_w,
                     in_channels=block.c_in, out_channels=block.c_out, kernel_size=k.kernel, stride=k.stride)


def estimate_of(blocks: Sequence[BlockEnergy]) -> EnergyEstimate:
    """The network's energy (the blocks' sum) and std (their variances summed), block by block."""
    return EnergyEstimate(sum(b.energy_j for b in blocks), math.sqrt(sum(b.std_j ** 2 for b in blocks)),
                          tuple(LayerEnergy(layer_of(b.block), b.energy_j, b.std_j) for b in blocks))
