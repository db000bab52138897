"""Energy-aware random channel pruning (THOR §4.3) guided by any cost estimate.

The loop (random pruning in the manner of Li et al. 2022, as THOR uses it): repeatedly pick
a random prunable block and remove a random 5–15 % of its channels, until the guide's
estimate of the model falls to ``budget_ratio`` of its estimate for the original. Guides:
THOR's energy estimate, raw FLOPs, or FLOPs through the linear-regression baseline. Where the
pruned model *lands* is judged on the simulator's true energy (:func:`.thor.true_energy_j`):
THOR lands at 49.2 % of the original energy in the paper, the FLOPs guide above the budget.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from edgetune.errors import InvalidArgument
from edgetune.estimation.layerwise.blocks import ParsedModel


@dataclass(frozen=True)
class PruneResult:
    """Where one guided pruning run stopped."""

    guide: str
    channels: tuple[int, ...]
    steps: int
    guide_ratio: float  # the guide's estimate / its estimate of the original (<= budget when reached)
    reached: bool


def consistent(parsed: ParsedModel, channels: Sequence[int]) -> list[int]:
    """Channels with every depthwise block following its input (prunable blocks as given)."""
    out: list[int] = []
    for i, c in enumerate(channels):
        out.append(int(c) if parsed.variable(i) or not out else out[-1])
    return out


def random_prune(parsed: ParsedModel, guide: Callable[[Sequence[int]], float], guide_name: str = "guide",
                 budget_ratio: float = 0.5, rng: np.random.Generator | None = None,
                 step_frac: tuple[float, float] = (0.05, 0.15), max_steps: int = 2000) -> PruneResult:
    """Prune random channels until ``guide(channels) <= budget_ratio * guide(original)``."""
    if not 0.0 < budget_ratio < 1.0:
        raise InvalidArgument("budget_ratio", f"{budget_ratio} is not a fraction", "0 < budget_ratio < 1")
    rng = rng or np.random.default_rng(0)
    channels = consistent(parsed, parsed.channels())
    reference = float(guide(channels))
    prunable = [i for i in range(len(channels)) if parsed.variable(i)]
    ratio = 1.0
    for step in range(max_steps + 1):
        ratio = float(guide(channels)) / reference
        if ratio <= budget_ratio:
            return PruneResult(guide_name, tuple(channels), step, ratio, True)
        open_blocks = [i for i in prunable if channels[i] > 1]
        if not open_blocks:
            break
        i = int(rng.choice(open_blocks))
        cut = max(1, int(round(channels[i] * rng.uniform(*step_frac))))
        channels[i] = max(1, channels[i] - cut)
        channels = consistent(parsed, channels)
    return PruneResult(guide_name, tuple(channels), max_steps, ratio, False)
