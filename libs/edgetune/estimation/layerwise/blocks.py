"""THOR's layer parsing (THOR §3.2): a sequential model as input / hidden / output blocks.

A *block* is one parametric unit (``Conv2d``, ``Linear``, or a module marked as a THOR unit,
e.g. a residual block) plus the non-parametric modules that follow it (BN, activation,
pooling, dropout). The first block is the *input layer*, the last (a ``Linear``) the
*output layer*, the rest *hidden layers*. The flattening modules before the first
``Linear`` (``Flatten``, adaptive pools) are the *connector*: :func:`instantiate` puts them
in front of any ``Linear`` that receives a 4-D tensor, so a block can be chained after any
other in the variant networks THOR profiles.

A block's *kind* (:class:`BlockKind`) is what THOR fits one GP for: (role, layer type,
input H × W, kernel, stride, batch size, module signature). Channels are the GP's inputs:
``C_out`` for the input layer, ``C_in`` for the output layer, ``(C_in, C_out)`` for hidden
layers (``C`` alone for depthwise convolutions, whose C_in = C_out).

Models are rebuilt with other channel counts by :func:`instantiate`, on the ``meta`` device
by default (shapes are all the simulator's layer costing needs). A custom parametric unit
takes part by having ``thor_unit = True``, ``in_channels``, ``out_channels``, ``stride``,
``kernel_size`` and ``rebuild(c_in, c_out) -> nn.Module``.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, TypeGuard

import torch
from torch import nn

from edgetune.errors import InvalidArgument
from edgetune.workloads.layers import SHAPE_PRESERVING, shape_only

ROLES = ("input", "hidden", "output")
_CONNECTORS = (nn.Flatten, nn.AdaptiveAvgPool2d, nn.AdaptiveMaxPool2d, nn.AdaptiveAvgPool1d, nn.AdaptiveMaxPool1d)


class ThorUnit(Protocol):
    """A custom parametric unit (module docs)."""

    in_channels: int
    out_channels: int

    def rebuild(self, c_in: int, c_out: int) -> nn.Module: ...


def is_unit(m: nn.Module) -> TypeGuard[ThorUnit]:
    return bool(getattr(m, "thor_unit", False))


def is_parametric(m: nn.Module) -> bool:
    return isinstance(m, (nn.Conv2d, nn.Linear)) or is_unit(m)


def is_depthwise(m: nn.Module) -> bool:
    """A depthwise conv: groups = C_in = C_out; rebuilt ones are marked, as at one channel they
    are indistinguishable from a plain 1 → 1 conv."""
    marked = getattr(m, "thor_depthwise", None)
    if marked is not None:
        return bool(marked)
    return isinstance(m, nn.Conv2d) and m.groups > 1 and m.groups == m.in_channels == m.out_channels


def flatten_units(model: nn.Module) -> list[nn.Module]:
    """The model's modules in order, ``nn.Sequential`` containers expanded; THOR units and leaves kept."""
    if is_unit(model) or not any(True for _ in model.children()):
        return [model]
    if not isinstance(model, nn.Sequential):
        raise InvalidArgument("model", f"{type(model).__name__} is not sequential: THOR parses nn.Sequential "
                              "models of layers and THOR units", "nn.Sequential of Conv2d / Linear / units")
    return [u for child in model for u in flatten_units(child)]


@dataclass(frozen=True)
class ParsedModel:
    """Blocks (module templates, connector removed), the connector and the input shape."""

    blocks: tuple[tuple[nn.Module, ...], ...]
    connector: tuple[nn.Module, ...]
    input_shape: tuple[int, ...]  # (batch, C, H, W) of the data

    @property
    def n_blocks(self) -> int:
        return len(self.blocks)

    def role(self, i: int) -> str:
        return "input" if i == 0 else "output" if i == self.n_blocks - 1 else "hidden"

    def param(self, i: int) -> nn.Module:
        return next(m for m in self.blocks[i] if is_parametric(m))

    def variable(self, i: int) -> bool:
        """Whether block i's output channels are free (not output, not depthwise)."""
        return i < self.n_blocks - 1 and not is_depthwise(self.param(i))

    def channels(self) -> list[int]:
        """Output channels of every block but the output one (the model's channel vector)."""
        return [_out_channels(self.param(i)) for i in range(self.n_blocks - 1)]


def _out_channels(m: nn.Module) -> int:
    if isinstance(m, nn.Linear):
        return m.out_features
    if isinstance(m, nn.Conv2d) or is_unit(m):
        return m.out_channels
    raise TypeError(f"{type(m).__name__} is not a parametric layer")


def parse(model: nn.Module, input_shape: Sequence[int]) -> ParsedModel:
    """Split a sequential model into blocks (see the module docs)."""
    units = flatten_units(model)
    first_fc = next((i for i, u in enumerate(units) if isinstance(u, nn.Linear)), None)
    params = [u for u in units if is_parametric(u)]
    if first_fc is None or not isinstance(params[-1], nn.Linear):
        raise InvalidArgument("model", "THOR needs a final Linear output layer", "... → nn.Linear")
    connector = tuple(u for u in units[:first_fc] if isinstance(u, _CONNECTORS))
    units = [u for i, u in enumerate(units) if not (i < first_fc and isinstance(u, _CONNECTORS))]
    blocks: list[list[nn.Module]] = []
    prefix: list[nn.Module] = []
    for u in units:
        if is_parametric(u):
            blocks.append(prefix + [u])
            prefix = []
        elif blocks:
            blocks[-1].append(u)
        else:
            prefix.append(u)  # non-parametric layers before the first parametric one join the input block
    if len(blocks) < 2:
        raise InvalidArgument("model", f"{len(blocks)} parametric layer(s): THOR needs input and output layers",
                              ">= 2 parametric layers")
    return ParsedModel(tuple(tuple(b) for b in blocks), connector, tuple(int(s) for s in input_shape))


# -- rebuilding -----------------------------------------------------------------------------
def _rebuild(m: nn.Module, in_shape: torch.Size, c_out: int | None) -> nn.Module:
    c_in = int(in_shape[1]) if len(in_shape) >= 2 else int(in_shape[-1])
    if isinstance(m, nn.Conv2d):
        if is_depthwise(m):
            # torch's stub types the attributes tuple[int, ...] and the arguments as 2-tuples
            dw = nn.Conv2d(c_in, c_in, m.kernel_size, m.stride, m.padding, m.dilation,  # type: ignore[arg-type]
                           groups=c_in, bias=m.bias is not None)
            setattr(dw, "thor_depthwise", True)  # noqa: B010 (a marker, not a Module attribute torch types)
            return dw
        return nn.Conv2d(c_in, int(c_out if c_out is not None else m.out_channels),
                         m.kernel_size, m.stride, m.padding, m.dilation,  # type: ignore[arg-type]  # as above
                         bias=m.bias is not None)
    if isinstance(m, nn.Linear):
        return nn.Linear(int(in_shape[-1]), int(c_out if c_out is not None else m.out_features),
                         bias=m.bias is not None)
    if isinstance(m, (nn.BatchNorm1d, nn.BatchNorm2d)):
        return type(m)(c_in, eps=m.eps, momentum=m.momentum, affine=m.affine)
    if is_unit(m):
        return m.rebuild(c_in, int(c_out if c_out is not None else m.out_channels))
    return copy.deepcopy(m)


def instantiate(blocks: Sequence[Sequence[nn.Module]], channels: Sequence[int], input_shape: Sequence[int],
                connector: Sequence[nn.Module] = (), device: str = "meta") -> tuple[nn.Sequential, list[int]]:
    """A model of ``blocks`` whose block ``i`` outputs ``channels[i]`` channels (the last
    block keeps its own width), and the module count of each block.

    Shapes are propagated on ``device``; a ``Linear`` that receives a 4-D tensor gets the
    ``connector`` (flatten / global pool) in front, counted in its block.
    """
    modules: list[nn.Module] = []
    sizes: list[int] = []
    x = torch.zeros(tuple(int(s) for s in input_shape), device=device)

    def add(new: nn.Module) -> None:
        nonlocal x
        modules.append(new)
        if not (x.is_meta and isinstance(new, SHAPE_PRESERVING)):  # shapes only: skip what keeps them
            with shape_only(new, x.is_meta):
                x = new(x)

    for i, block in enumerate(blocks):
        n0 = len(modules)
        seen_param = False
        for m in block:
            if isinstance(m, nn.Linear) and x.dim() > 2:
                if not connector:
                    raise InvalidArgument("model", "a Linear layer follows a 4-D tensor but the model has no "
                                          "Flatten / global pool", "nn.Flatten before the first Linear")
                for c in connector:
                    add(copy.deepcopy(c))
            param_here = is_parametric(m) and not seen_param
            c_out = channels[i] if (param_here and i < len(channels)) else None
            with torch.device(device):
                new = _rebuild(m, x.shape, c_out)
            add(new)
            seen_param = seen_param or is_parametric(m)
        sizes.append(len(modules) - n0)
    return nn.Sequential(*modules), sizes


# -- kinds ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class BlockKind:
    """What one THOR GP covers: a block's role, type, input size, kernel, stride, batch, modules."""

    role: str
    layer: str  # conv, dwconv, fc or a unit's class name
    in_h: int  # 0 for a flat (B, C) input
    in_w: int
    kernel: int
    stride: int
    batch_size: int
    signature: tuple[str, ...]  # module types of the block as built (connector included)
    fixed: int = 0  # data channels of an input layer, output width of an output layer

    @property
    def n_inputs(self) -> int:
        """GP input dimension: 2 for hidden layers (C_in, C_out), 1 otherwise."""
        return 2 if self.role == "hidden" and self.layer != "dwconv" else 1

    def label(self) -> str:
        size = f"{self.in_h}x{self.in_w}" if self.in_h else "flat"
        k = f" k{self.kernel}s{self.stride}" if self.kernel else ""
        return f"{self.role}:{self.layer}@{size}{k} b{self.batch_size}"


def _layer_name(m: nn.Module) -> str:
    if is_depthwise(m):
        return "dwconv"
    if isinstance(m, nn.Conv2d):
        return "conv"
    if isinstance(m, nn.Linear):
        return "fc"
    return type(m).__name__


def _ks(m: nn.Module) -> tuple[int, int]:
    k = getattr(m, "kernel_size", 0)
    s = getattr(m, "stride", 0)
    return int(k[0] if isinstance(k, tuple) else k), int(s[0] if isinstance(s, tuple) else s)


def kind_of(role: str, built: Sequence[nn.Module], in_shape: Sequence[int]) -> BlockKind:
    """The kind of one built block (its modules as instantiated) fed ``in_shape``."""
    param = next(m for m in built if is_parametric(m))
    k, s = _ks(param)
    flat = len(in_shape) <= 2
    fixed = 0
    if role == "input":
        fixed = int(in_shape[1])
    elif role == "output":
        fixed = _out_channels(param)
    return BlockKind(role, _layer_name(param), 0 if flat else int(in_shape[2]), 0 if flat else int(in_shape[3]),
                     k, s, int(in_shape[0]), tuple(type(m).__name__ for m in built), fixed)


def block_shapes(model: nn.Sequential, sizes: Sequence[int], input_shape: Sequence[int]) -> list[tuple[int, ...]]:
    """Input shape of each block of an instantiated model (meta forward)."""
    shapes = []
    x = torch.zeros(tuple(input_shape), device="meta")
    pos = 0
    mods = list(model)
    for n in sizes:
        shapes.append(tuple(x.shape))
        for m in mods[pos:pos + n]:
            if not isinstance(m, SHAPE_PRESERVING):
                with shape_only(m):
                    x = m(x)
        pos += n
    return shapes


@dataclass(frozen=True)
class BlockInstance:
    """One block of one concrete model: kind, channels in and out, its modules."""

    index: int
    kind: BlockKind
    c_in: int
    c_out: int
    in_shape: tuple[int, ...]
    modules: tuple[nn.Module, ...]

    def gp_input(self) -> tuple[int, ...]:
        if self.kind.role == "input":
            return (self.c_out,)
        if self.kind.role == "output":
            return (self.c_in,)
        return (self.c_in,) if self.kind.n_inputs == 1 else (self.c_in, self.c_out)


def blocks_of(parsed: ParsedModel, channels: Sequence[int] | None = None) -> tuple[nn.Sequential, list[BlockInstance]]:
    """Build the model with ``channels`` (default: the parsed model's) and describe its blocks."""
    channels = list(parsed.channels() if channels is None else channels)
    model, sizes = instantiate(parsed.blocks, channels, parsed.input_shape, parsed.connector)
    shapes = block_shapes(model, sizes, parsed.input_shape)
    mods = list(model)
    out, pos = [], 0
    for i, n in enumerate(sizes):
        built = tuple(mods[pos:pos + n])
        pos += n
        param = next(m for m in built if is_parametric(m))
        c_in = int(shapes[i][1]) if len(shapes[i]) > 2 else (
            int(shapes[i][1]) if not isinstance(param, nn.Linear) else int(shapes[i][-1]))
        if isinstance(param, nn.Linear) and len(shapes[i]) > 2:
            c_in = int(shapes[i][1])  # channels before the connector: THOR's C_in of an FC after conv layers
        out.append(BlockInstance(i, kind_of(parsed.role(i), built, shapes[i]), c_in, _out_channels(param),
                                 shapes[i], built))
    return model, out
