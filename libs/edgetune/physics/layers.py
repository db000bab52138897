"""One layer call of a network as the layer costing sees it: kind, shapes, channels, FLOPs and bytes.

:func:`edgetune.workloads.layers.extract_layers` takes these from a torch model with forward hooks;
:class:`edgetune.physics.costing.LayerCostModel` prices them. Plain values: no torch here.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

#: NeuralPower's layer types (NeuralPower, Table 1) plus the catch-all.
LAYER_KINDS = ("conv", "pool", "flatten", "fc", "other")


@dataclass(frozen=True)
class LayerRecord:
    """One call of one leaf module. Spatial sizes are 1 for tensors without them."""

    index: int  # call order
    name: str  # qualified module name
    module_type: str  # class name (Conv2d, BatchNorm2d, ...)
    kind: str  # one of LAYER_KINDS
    batch_size: int
    in_shape: tuple[int, ...]
    out_shape: tuple[int, ...]
    in_h: int
    in_w: int
    out_h: int
    out_w: int
    c_in: int  # channels (dim 1) of the input; features for fc
    c_out: int  # channels of the output: filters (conv) / neurons (fc)
    kernel: int  # kernel or pool size (0 when none)
    stride: int
    padding: int  # -1 for padding="same"
    groups: int
    flops: int  # forward FLOPs, 2 × MACs (zero for non-GEMM layers, the zoo's convention)
    params: int  # parameters owned directly by the module
    bytes_in: int
    bytes_weights: int
    bytes_out: int

    @property
    def bytes_moved(self) -> int:
        """Inputs + weights + outputs, bytes: one forward pass's minimum DRAM traffic."""
        return self.bytes_in + self.bytes_weights + self.bytes_out

    @property
    def out_numel(self) -> int:
        return math.prod(self.out_shape)

    @property
    def in_numel(self) -> int:
        return math.prod(self.in_shape)

    @property
    def depthwise(self) -> bool:
        return self.kind == "conv" and self.groups > 1 and self.groups == self.c_in

    def as_dict(self) -> dict:
        d = asdict(self)
        d["bytes_moved"] = self.bytes_moved
        return d
