"""A FLOP counter built on forward hooks, and the one op module it needs to see matmuls.

Convention (the one papers and model cards use): FLOPs = 2 × multiply-accumulates of the
layers that dominate compute — convolutions, fully connected layers, recurrent cells and
the two attention matmuls. Normalisation, activations, pooling, residual adds and
embedding lookups count zero. So ResNet18 at 224×224 is 1.82 GMACs = 3.64 GFLOPs.

Hooks only see ``nn.Module`` calls, so a bare ``torch.matmul`` inside a forward would be
invisible: models in the zoo route their attention products through :class:`MatMul`.

Counting runs fine on the ``meta`` device (shapes only, no memory, no arithmetic), which is
how the registry counts BERT-base without allocating 440 MB or computing 28 GFLOPs.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn


class MatMul(nn.Module):
    """``torch.matmul(a, b)`` as a module, so the FLOP counter's hooks see it."""

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.matmul(a, b)


def _conv_macs(m: nn.Module, inputs: tuple, out: Any) -> int:
    assert isinstance(m, nn.modules.conv._ConvNd)
    per_output = (m.in_channels // m.groups) * math.prod(m.kernel_size)
    return out.numel() * per_output


def _linear_macs(m: nn.Module, inputs: tuple, out: Any) -> int:
    assert isinstance(m, nn.Linear)
    return out.numel() * m.in_features


def _matmul_macs(m: nn.Module, inputs: tuple, out: Any) -> int:
    # every output element is a dot product over a's last dimension
    return out.numel() * inputs[0].shape[-1]


_GATES = {nn.LSTM: 4, nn.GRU: 3, nn.RNN: 1}


def _rnn_macs(m: nn.Module, inputs: tuple, out: Any) -> int:
    assert isinstance(m, nn.RNNBase)
    x = inputs[0]
    if not isinstance(x, torch.Tensor):  # PackedSequence: count the real (unpadded) steps
        steps = int(x.batch_sizes.sum())
    else:
        steps = math.prod(x.shape[:-1])  # (B, T) or (T, B) or (T,) unbatched
    gates = _GATES[type(m)]
    dirs = 2 if m.bidirectional else 1
    h = m.hidden_size
    out_h = m.proj_size if m.proj_size > 0 else h
    macs = 0
    for layer in range(m.num_layers):
        in_size = m.input_size if layer == 0 else out_h * dirs
        per_step = gates * h * (in_size + out_h)  # input and recurrent projections of all gates
        if m.proj_size > 0:
            per_step += h * m.proj_size
        macs += steps * dirs * per_step
    return macs


_COUNTERS: dict[type, Callable[[nn.Module, tuple, Any], int]] = {
    nn.Conv1d: _conv_macs,
    nn.Conv2d: _conv_macs,
    nn.Conv3d: _conv_macs,
    nn.Linear: _linear_macs,
    MatMul: _matmul_macs,
    nn.LSTM: _rnn_macs,
    nn.GRU: _rnn_macs,
    nn.RNN: _rnn_macs,
}


def _counter_for(m: nn.Module) -> Callable[[nn.Module, tuple, Any], int] | None:
    for kind, fn in _COUNTERS.items():
        if isinstance(m, kind):  # isinstance, so subclasses (NonDynamicallyQuantizableLinear) count too
            return fn
    return None


@dataclass
class FlopReport:
    """FLOPs of one forward pass, in total and per counted module call (in call order)."""

    total_flops: int = 0
    per_module: list[tuple[str, str, int]] = field(default_factory=list)  # (name, type, flops)

    @property
    def total_macs(self) -> int:
        return self.total_flops // 2

    def by_type(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for _, kind, flops in self.per_module:
            out[kind] = out.get(kind, 0) + flops
        return out

    def under(self, prefix: str) -> int:
        """FLOPs of the modules whose qualified name starts with ``prefix`` (a sub-tree)."""
        return sum(f for name, _, f in self.per_module if name == prefix or name.startswith(prefix + "."))


def count_flops(model: nn.Module, *inputs: torch.Tensor) -> FlopReport:
    """Run ``model(*inputs)`` once without gradients and count its FLOPs with forward hooks.

    A module called several times (shared weights, the recurrent loop of a custom cell) is
    counted once per call, as its compute is.
    """
    report = FlopReport()
    handles = []
    for name, module in model.named_modules():
        fn = _counter_for(module)
        if fn is None:
            continue

        def hook(m: nn.Module, args: tuple, out: object, name: str = name, fn=fn) -> None:
            flops = 2 * int(fn(m, args, out))
            report.total_flops += flops
            report.per_module.append((name, type(m).__name__, flops))

        handles.append(module.register_forward_hook(hook))
    try:
        with torch.no_grad():
            model(*inputs)
    finally:
        for h in handles:
            h.remove()
    return report
