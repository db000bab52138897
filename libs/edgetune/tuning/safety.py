"""The safety rules that make power budgets hold on the device.

- :func:`held_out_power_error` calibrates: the RMS relative power error on modes the model did
  not learn from. :meth:`SafetyState.power_std_w` adds it in quadrature to every predicted
  σ: σ' = √(σ² + (rel × power)²). A model overconfident away from its training modes (a GP's σ
  can be a tenth of its real error there) then selects with an honest margin that scales with
  the power, as the errors do.
- :meth:`SafetyState.learn_from_miss`: a mode measured over its budget is dropped together
  with every mode that has at least its cores and clocks (they draw at least its power) for
  every budget below the power measured there, and
  the error term is widened so that the margin z(1 - risk) · rel · power covers the relative miss seen
  there (the model under-predicts in that region). The tuner passes the prediction of the model refitted
  with the miss among its profiles, when it can refit, so the term keeps only what the refit did not explain.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from edgetune.base.records import OptionTable, Predictions
from edgetune.base.risk import upper_bound, z_score


def held_out_power_error(predicted_w: np.ndarray, measured_w: np.ndarray) -> float:
    """RMS of (measured − predicted) / predicted over held-out points (0 when there are none)."""
    pred = np.asarray(predicted_w, dtype=float)
    meas = np.asarray(measured_w, dtype=float)
    ok = pred > 0
    if not ok.any():
        return 0.0
    return float(np.sqrt(np.mean(np.square((meas[ok] - pred[ok]) / pred[ok]))))


def dominating(modes: np.ndarray, mode: np.ndarray) -> np.ndarray:
    """Mask of the ``modes`` with at least ``mode``'s cores and every clock (they draw at least its power)."""
    mask: np.ndarray = np.all(np.asarray(modes, dtype=float) >= np.asarray(mode, dtype=float).reshape(1, -1) - 1e-9,
                              axis=1)
    return mask


@dataclass
class SafetyState:
    """What a node's tuner has learned about its predictions' errors."""

    #: Relative power error added to every predicted σ (held-out calibration, widened by misses).
    power_rel_err: float = 0.0
    #: Misses: (mask of the candidates ruled out — the mode and every mode dominating it —, the power
    #: measured there). They are ruled out for every budget below that power.
    misses: list[tuple[np.ndarray, float]] = field(default_factory=list)

    def power_std_w(self, pred: Predictions) -> np.ndarray:
        """The calibrated power std of every prediction."""
        raw = pred.power_std_w if pred.power_std_w is not None else np.zeros(len(pred))
        std: np.ndarray = np.hypot(raw, self.power_rel_err * pred.power_w)
        return std

    def excluded(self, n: int, budget_w: float | None = None) -> np.ndarray:
        """Mask of the ``n`` candidates ruled out under ``budget_w`` (None: under any budget)."""
        mask = np.zeros(n, dtype=bool)
        for ruled_out, measured_w in self.misses:
            if budget_w is None or measured_w > budget_w:
                mask |= ruled_out
        return mask

    def allowed(self, n: int, budget_w: float | None = None) -> np.ndarray:
        """Rows of ``n`` candidates not ruled out under ``budget_w``, in order."""
        return np.flatnonzero(~self.excluded(n, budget_w))

    def learn_from_miss(self, modes: np.ndarray, index: int, predicted_w: float, measured_w: float | None,
                        risk: float) -> int:
        """Rule out candidate ``index`` and every mode dominating it (for budgets below ``measured_w``;
        a point the device skipped: for every budget); widen the error term so that
        ``z(1 - risk) × error × predicted`` covers the miss. Returns how many modes were newly ruled out."""
        ruled_out = dominating(modes, modes[index])
        ruled_out[index] = True
        power = math.inf if measured_w is None else float(measured_w)
        before = int(self.excluded(len(modes), power - 1e-9).sum())
        self.misses.append((ruled_out, power))
        if measured_w is not None and predicted_w > 0:
            self.power_rel_err = max(self.power_rel_err, (measured_w - predicted_w) / predicted_w / z_score(risk))
        return int(self.excluded(len(modes), power - 1e-9).sum()) - before

    def option_table(self, pred: Predictions, risk: float) -> OptionTable:
        """The options not ruled out under any budget, planned at their safe power: the upper bound
        mean + z(1 - risk) · calibrated σ."""
        keep = self.allowed(len(pred))
        safe_w = upper_bound(pred.power_w, self.power_std_w(pred), risk)
        return OptionTable(batch_size=pred.batch_size[keep], time_ms=pred.time_ms[keep], power_w=safe_w[keep],
                           modes=pred.modes[keep])
