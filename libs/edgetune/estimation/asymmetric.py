"""Fulcrum's asymmetric loss (Fulcrum): MAPE with under-prediction weighted 4×.

A power predictor that under-predicts picks modes that break the power budget; one that
over-predicts only costs a little speed. Weighting the relative error of under-predictions
``UNDER_WEIGHT`` times pushes the fitted curve above the data, so fewer predictions fall
below the truth. Used by the ``nn-asym`` method (:class:`~edgetune.estimation.nn.NNPredictor`
with ``loss="asym-mape"``), which defaults to the ``power_w`` target.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    # only tensor methods are called, so importing this module (the optimizer's guide reads
    # UNDER_WEIGHT) does not load torch
    import torch

UNDER_WEIGHT = 4.0


def asymmetric_mape_loss(pred: torch.Tensor, true: torch.Tensor, under_weight: float = UNDER_WEIGHT) -> torch.Tensor:
    """Mean of ``w · |pred − true| / |true|`` with ``w = under_weight`` where ``pred < true``, else 1."""
    rel = (pred - true) / true.abs().clamp_min(1e-9)
    weight = rel.new_full(rel.shape, under_weight).where(rel < 0, rel.new_ones(rel.shape))
    return (weight * rel.abs()).mean()


def asymmetric_mape(pred: np.ndarray, true: np.ndarray, under_weight: float = UNDER_WEIGHT) -> float:
    """The same loss on numpy arrays (for reports), as a fraction."""
    pred, true = np.asarray(pred, dtype=float), np.asarray(true, dtype=float)
    rel = (pred - true) / np.maximum(np.abs(true), 1e-9)
    return float(np.mean(np.where(rel < 0, under_weight, 1.0) * np.abs(rel)))
