"""Per-layer records of a torch model, taken with forward hooks.

:func:`extract_layers` runs the model once (on any device, ``meta`` included: shapes only)
and returns one :class:`LayerRecord` per call of a leaf module, in call order: its kind
(``conv``, ``pool``, ``flatten``, ``fc`` — NeuralPower's four types — or ``other`` for
normalisation, activations, dropout, ...), input / output shapes, channels in and out,
filters or neurons, kernel / pool size, stride, padding, groups, batch size, FLOPs (the
zoo's counter: 2 × MACs of convolutions and linear layers, zero elsewhere) and the bytes a
call moves (inputs + the module's own weights + outputs).

Hooks see ``nn.Module`` calls only: functional ops inside a forward (``torch.flatten``,
``F.adaptive_avg_pool2d``, residual adds) have no record. ResNet18 in the zoo flattens with
``torch.flatten``, so it has no ``flatten`` record; ``nn.Flatten`` modules do get one.
"""

from __future__ import annotations

import contextlib
import copy
from collections import Counter
from collections.abc import Iterator, Sequence
from typing import SupportsInt

import torch
from torch import nn

from edgetune.physics.layers import LAYER_KINDS, LayerRecord

# the zoo's per-module FLOP rules (one convention for the whole project); used directly so
# that one forward pass gives shapes and FLOPs together
from edgetune.workloads.flops import _counter_for

_POOLS = (nn.MaxPool1d, nn.MaxPool2d, nn.MaxPool3d, nn.AvgPool1d, nn.AvgPool2d, nn.AvgPool3d,
          nn.AdaptiveAvgPool1d, nn.AdaptiveAvgPool2d, nn.AdaptiveAvgPool3d,
          nn.AdaptiveMaxPool1d, nn.AdaptiveMaxPool2d, nn.AdaptiveMaxPool3d)


def layer_kind(module: nn.Module) -> str:
    """NeuralPower type of a module: ``conv``, ``pool``, ``flatten``, ``fc`` or ``other``."""
    if isinstance(module, nn.modules.conv._ConvNd):
        return "conv"
    if isinstance(module, _POOLS):
        return "pool"
    if isinstance(module, nn.Flatten):
        return "flatten"
    if isinstance(module, nn.Linear):
        return "fc"
    return "other"


def _first(v: object) -> int:
    """First element of an int-or-tuple hyperparameter (square kernels / strides assumed)."""
    if isinstance(v, (tuple, list)):
        return int(v[0]) if v else 0
    if isinstance(v, str):  # padding="same" / "valid"
        return -1 if v == "same" else 0
    return int(v) if isinstance(v, SupportsInt) else 0


def _spatial(shape: tuple[int, ...]) -> tuple[int, int]:
    if len(shape) >= 4:
        return int(shape[-2]), int(shape[-1])
    if len(shape) == 3:  # (B, C, L): 1-D conv / pool
        return int(shape[-1]), 1
    return 1, 1


def _channels(shape: tuple[int, ...]) -> int:
    if len(shape) >= 3:
        return int(shape[1])
    return int(shape[-1]) if shape else 1


def _tensors(obj: object) -> list[torch.Tensor]:
    if isinstance(obj, torch.Tensor):
        return [obj]
    if isinstance(obj, (tuple, list)):
        return [t for o in obj for t in _tensors(o)]
    return []


def _leaves(model: nn.Module) -> list[tuple[str, nn.Module]]:
    return [(n, m) for n, m in model.named_modules() if not any(True for _ in m.children())]


#: Modules whose output has their input's shape: on the meta device their forward is skipped
#: (meta BatchNorm alone takes milliseconds per call; a shape is all a meta pass yields).
SHAPE_PRESERVING = (nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d, nn.LayerNorm, nn.GroupNorm, nn.ReLU, nn.ReLU6,
                    nn.LeakyReLU, nn.Hardswish, nn.Hardsigmoid, nn.SiLU, nn.GELU, nn.Sigmoid, nn.Tanh, nn.Dropout,
                    nn.Dropout2d, nn.Identity)


def _same(x: torch.Tensor, *args: object, **kwargs: object) -> torch.Tensor:
    return x


@contextlib.contextmanager
def shape_only(model: nn.Module, enabled: bool = True) -> Iterator[None]:
    """Within the block, shape-preserving leaf modules of ``model`` return their input unchanged."""
    patched = []
    if enabled:
        for _, m in _leaves(model):
            if isinstance(m, SHAPE_PRESERVING) and "forward" not in m.__dict__:
                # instance attribute: shadows the class method until removed (on purpose: mypy's method-assign)
                m.forward = _same  # type: ignore[method-assign,assignment]
                patched.append(m)
    try:
        yield
    finally:
        for m in patched:
            del m.forward


def extract_layers(model: nn.Module, *inputs: torch.Tensor) -> list[LayerRecord]:
    """Records of every leaf-module call of ``model(*inputs)``, in call order (no gradients).

    A module called several times (the zoo's shared in-place ReLU) gives one record per
    call. FLOPs follow :func:`edgetune.workloads.count_flops`'s rules. On the ``meta``
    device, shape-preserving modules are not run (:func:`shape_only`).
    """
    raw: list[tuple[str, nn.Module, tuple[int, ...], tuple[int, ...], int, int, int]] = []
    handles = []
    for name, module in _leaves(model):
        counter = _counter_for(module)

        def hook(m: nn.Module, args: tuple, out: object, name: str = name, counter=counter) -> None:
            ins, outs = _tensors(args), _tensors(out)
            in_shape = tuple(ins[0].shape) if ins else ()
            out_shape = tuple(outs[0].shape) if outs else ()
            flops = 2 * int(counter(m, args, out)) if counter is not None else 0
            raw.append((name, m, in_shape, out_shape,
                        sum(t.numel() * t.element_size() for t in ins),
                        sum(t.numel() * t.element_size() for t in outs), flops))

        handles.append(module.register_forward_hook(hook))
    meta = any(t.is_meta for t in inputs)
    try:
        with torch.no_grad(), shape_only(model, meta):
            model(*inputs)
    finally:
        for h in handles:
            h.remove()

    records = []
    for i, (name, m, in_shape, out_shape, b_in, b_out, flops) in enumerate(raw):
        params = list(m.parameters(recurse=False))
        in_h, in_w = _spatial(in_shape)
        out_h, out_w = _spatial(out_shape)
        kind = layer_kind(m)
        c_in, c_out = _channels(in_shape), _channels(out_shape)
        if kind == "flatten":
            c_in = _channels(in_shape)
        records.append(LayerRecord(
            index=i, name=name, module_type=type(m).__name__, kind=kind,
            batch_size=int(in_shape[0]) if len(in_shape) >= 2 else 1,
            in_shape=in_shape, out_shape=out_shape, in_h=in_h, in_w=in_w, out_h=out_h, out_w=out_w,
            c_in=c_in, c_out=c_out,
            kernel=_first(getattr(m, "kernel_size", 0)) if kind in ("conv", "pool") else 0,
            stride=_first(getattr(m, "stride", 0)) if kind in ("conv", "pool") else 0,
            padding=_first(getattr(m, "padding", 0)) if kind in ("conv", "pool") else 0,
            groups=int(getattr(m, "groups", 1)),
            flops=flops,
            params=sum(p.numel() for p in params),
            bytes_in=b_in, bytes_weights=sum(p.numel() * p.element_size() for p in params),
            bytes_out=b_out,
        ))
    return records


def kind_counts(records: list[LayerRecord]) -> dict[str, int]:
    """Number of records per kind (every kind of :data:`LAYER_KINDS` present, zeros included)."""
    counts = Counter(r.kind for r in records)
    return {k: counts.get(k, 0) for k in LAYER_KINDS}


def total_flops(records: list[LayerRecord]) -> int:
    return sum(r.flops for r in records)


def _on_meta(model: nn.Module, input_shape: Sequence[int]) -> tuple[nn.Module, torch.Tensor]:
    """The model (moved to meta when it has real weights: shapes are all costing needs) and an input."""
    try:
        on_meta = next(model.parameters()).is_meta
    except StopIteration:
        on_meta = True
    if not on_meta:
        model = copy.deepcopy(model).to("meta")
    return model, torch.zeros(tuple(int(s) for s in input_shape), device="meta")


def layers_on_meta(model: nn.Module, input_shape: Sequence[int]) -> list[LayerRecord]:
    """The layer records of ``model`` on a float input of ``input_shape`` (batch first): shapes only, on
    meta, what :meth:`edgetune.physics.costing.LayerCostModel.cost_records` prices."""
    return extract_layers(*_on_meta(model, input_shape))
