"""Predictor methods by name (:mod:`.methods` names them), and how each one adapts to a new small table.

:func:`adapt` is what ``edgetune estimate transfer`` does with a reference predictor and a
new table for each method: ``transfer`` (and ``nn``, ``nn-asym``) fine-tune a clone of the
reference MLP; ``nn+gp`` does that and adds the residual GP; ``ref+gp`` keeps any fitted
reference as it is and fits a GP around its predictions (``prior.py``); ``gp``, ``linear`` and ``rf``
cannot transfer and are fitted on the new table alone (the reference only lends its feature
columns).
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

import numpy as np

from edgetune.errors import InvalidArgument
from edgetune.estimation.base import Predictor, transfer_many
from edgetune.estimation.baselines import LinearPredictor, RandomForestPredictor
from edgetune.estimation.gp import GPPredictor, NNGPPredictor
from edgetune.estimation.methods import TRANSFER_METHODS, check_method
from edgetune.estimation.nn import NNPredictor
from edgetune.estimation.prior import RefGPPredictor


def make_predictor(method: str, target: str = "time_ms", **kw: Any) -> Predictor:
    """A new, unfitted predictor of ``method`` for ``target`` (``time_ms`` / ``power_w``).

    Keyword arguments go to the method's constructor (``seed``, ``epochs``, ``restarts`` ...).
    """
    check_method(method)
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
    raise AssertionError(f"method {method!r} is named in METHODS but built by no predictor here")


def adapt(base: Predictor, method: str, x: np.ndarray, y: np.ndarray, progress: Any = None, **kw: Any) -> Predictor:
    """A new predictor for a small table ``(x, y)`` from reference ``base`` (left untouched).

    ``progress(stage, epoch, epochs)`` is called while an NN trains.
    """
    return adapt_many(base, method, [x], [y], progress, **kw)[0]


def adapt_many(base: Predictor | Sequence[Predictor], method: str, xs: Sequence[np.ndarray],
               ys: Sequence[np.ndarray], progress: Any = None, **kw: Any) -> list[Predictor]:
    """:func:`adapt` of ``base`` (one reference, or one per table) to each table ``(xs[i], ys[i])``; the MLP
    methods fine-tune them all in one batch (:func:`~edgetune.estimation.base.transfer_many`), each
    predictor the same as adapted alone."""
    check_method(method)
    bases = list(base) if isinstance(base, Sequence) else [base] * len(xs)
    if method in TRANSFER_METHODS:
        read: dict[int, NNPredictor] = {}  # each distinct reference read once; the tables' nets are copies
        nns = []
        for b in bases:
            if id(b) not in read:
                read[id(b)] = _reference_nn(b, method)
                nns.append(read[id(b)])
            else:
                nns.append(copy.deepcopy(read[id(b)]))
        for nn in nns:
            if method == "nn-asym":
                nn.loss = "asym-mape"
            nn.progress = progress
        preds: list[Predictor] = [NNGPPredictor.from_nn(nn, **kw) for nn in nns] if method == "nn+gp" else list(nns)
        try:
            transfer_many(preds, xs, ys)
        finally:
            for nn in nns:
                nn.progress = None
        return preds
    return [_adapt_one(b, method, x, y, **kw) for b, x, y in zip(bases, xs, ys, strict=True)]


def _adapt_one(base: Predictor, method: str, x: np.ndarray, y: np.ndarray, **kw: Any) -> Predictor:
    if method == "ref+gp":
        # any fitted reference serves (it is only asked for predictions); a ref+gp base lends its own
        ref = base.reference if isinstance(base, RefGPPredictor) and base.reference is not None else base
        return RefGPPredictor.from_reference(ref, **kw).transfer(x, y)
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
