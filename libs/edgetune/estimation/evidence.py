"""When a reference-based blend may replace a GP fitted on the profiles alone: the evidence rule of
``ref+gp`` (:mod:`edgetune.estimation.prior`), in a module of its own so the CLI can name its default
without importing the predictors (torch)."""

from __future__ import annotations

import numpy as np

#: The blend replaces the GP from scratch only when its out-of-fold gain is clear: the mean per-row gain in
#: absolute percentage error above this many standard errors of it. The weights are chosen on the same
#: out-of-fold predictions, so a small gain there is partly selection. On the real sets
#: (``experiments/real_data.py``'s 3 draws / 3 other draws as a check) the blend's worst ratio to the GP
#: was 1.38x / 1.04x without this test, 1.36x / 1.04x at 1.0 standard error, 1.02x / 1.07x at 1.5 and
#: 1.00x / 1.04x at 2.0. The price is part of the gain where the reference is good: zeus power at 10 points
#: 0.75x -> 0.84-0.94x, and the simulator's shipped Orin reference at 20 points (``make bench``'s
#: ``transfer_vs_gp_sim``) time 0.62x -> 0.85x. Per transfer: the estimator's ``params`` ``evidence_se``,
#: ``estimate transfer --evidence-se`` (0: any gain).
EVIDENCE_SE = 2.0
MAX_EVIDENCE_SE = 10.0


def clear_gain(scratch: np.ndarray, blend: np.ndarray, truth: np.ndarray, evidence_se: float) -> bool:
    """Whether ``blend``'s out-of-fold absolute percentage errors beat ``scratch``'s by more than
    ``evidence_se`` standard errors of the paired mean difference."""
    gain = np.abs(scratch - truth) / np.abs(truth) - np.abs(blend - truth) / np.abs(truth)
    if gain.size < 2:
        return False
    return float(gain.mean()) > evidence_se * float(gain.std(ddof=1)) / np.sqrt(gain.size)
