"""Predictor methods by name, and how each one adapts to a new small table.

Names (``METHODS``):

==========  =====================================================================
``nn``      PowerTrain MLP fitted on the given table (from scratch on a small one)
``transfer`` the same MLP; the name used when it is fitted as a reference to transfer
``nn-asym`` the MLP with Fulcrum's asymmetric MAPE loss (under-prediction ×4)
``gp``      Gaussian process, Matérn 2.5 ARD + white noise (std)
``nn+gp``   transfer NN plus a GP on its residuals (std)
``ref+gp``  GP with the reference's prediction as prior mean or input, or none, blended by CV (std; ``prior.py``)
``linear``  least squares
``rf``      random forest
==========  =====================================================================

:func:`adapt` is what ``edgetune estimate transfer`` does with a reference predictor and a
new table for each method: ``transfer`` (and ``nn``, ``nn-asym``) fine-tune a clone of the
reference MLP; ``nn+gp`` does that and adds the residual GP; ``ref+gp`` keeps any fitted
reference as it is and fits a GP around its predictions (``prior.py``); ``gp``, ``linear`` and ``rf``
cannot transfer and are fitted on the new table alone (the reference only lends its feature
columns).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from edgetune.errors import InvalidArgument
from edgetune.estimation.base import Predictor
from edgetune.estimation.baselines import LinearPredictor, RandomForestPredictor
from edgetune.estimation.gp import GPPredictor, NNGPPredictor
from edgetune.estimation.nn import NNPredictor
from edgetune.estimation.prior import RefGPPredictor

METHODS: tuple[str, ...] = ("nn", "transfer", "nn-asym", "gp", "nn+gp", "ref+gp", "linear", "rf")
#: Methods that adapt a fitted NN reference (the rest fit the new table from scratch).
TRANSFER_METHODS: tuple[str, ...] = ("transfer", "nn", "nn-asym", "nn+gp")


def make_predictor(method: str, target: str = "time_ms", **kw: Any) -> Predictor:
    """A new, unfitted predictor of ``method`` for ``target`` (``time_ms`` / ``power_w``).

    Keyword arguments go to the method's constructor (``seed``, ``epochs``, ``restarts`` ...).
    """
    if method in ("nn", "transfer"):
        return NNPredictor(target, **kw)
    if method == "nn-asym":
        return NNPredictor(target, **{"loss": "asym-mape", **kw})
    if method == "gp":
        return GPPredictor(target, **kw)
    if method == "nn+gp":
        return NNGPPredictor(target, **kw)
    if method == "ref+gp":
        return RefGPPredictor(target, **kw)
    if method == "linear":
        return LinearPredictor(target, **kw)
    if method == "rf":
        return RandomForestPredictor(target, **kw)
    raise InvalidArgument("method", f"unknown method {method!r}", ", ".join(METHODS))


def adapt(base: Predictor, method: str, x: np.ndarray, y: np.ndarray, progress: Any = None, **kw: Any) -> Predictor:
    """A new predictor for a small table ``(x, y)`` from reference ``base`` (left untouched).

    ``progress(stage, epoch, epochs)`` is called while an NN trains.
    """
    if method not in METHODS:
        raise InvalidArgument("method", f"unknown method {method!r}", ", ".join(METHODS))
    if method == "ref+gp":
        # any fitted reference serves (it is only asked for predictions); a ref+gp base lends its own
        ref = base.reference if isinstance(base, RefGPPredictor) and base.reference is not None else base
        return RefGPPredictor.from_reference(ref, **kw).transfer(x, y)
    if method in TRANSFER_METHODS:
        nn = _reference_nn(base, method)
        if method == "nn-asym":
            nn.loss = "asym-mape"
        nn.progress = progress
        try:
            if method == "nn+gp":
                return NNGPPredictor.from_nn(nn, **kw).transfer(x, y)
            return nn.transfer(x, y)
        finally:
            nn.progress = None
    fresh = make_predictor(method, base.target, transform=base.transform, seed=base.seed, **kw)
    return fresh.fit(x, y, columns=base.columns)


def _reference_nn(base: Predictor, method: str) -> NNPredictor:
    """A clone of the MLP inside ``base`` (an ``nn`` predictor, or the NN of an ``nn+gp`` one)."""
    if isinstance(base, NNGPPredictor):
        nn = NNGPPredictor.from_bytes(base.to_bytes()).nn  # type: ignore[attr-defined]
        # carry the outer predictor's bookkeeping onto the bare NN
        nn.columns, nn.lo, nn.hi, nn.meta = base.columns, base.lo, base.hi, dict(base.meta)
        return nn
    if isinstance(base, NNPredictor):
        return base.clone()  # type: ignore[return-value]
    raise InvalidArgument("base", f"method {method!r} transfers an NN reference, but the base model is "
                          f"{base.method!r}; fit the reference with --method nn",
                          "a reference fitted with nn, transfer, nn-asym or nn+gp")
