"""The predictor methods' names, and the estimator's other names of them.

Importing this module loads no estimator (no torch, no sklearn): the tuning policy, the CLI and the
control plane name a method here, :mod:`.registry` builds it.

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
"""

from __future__ import annotations

from edgetune.errors import InvalidArgument

METHODS: tuple[str, ...] = ("nn", "transfer", "nn-asym", "gp", "nn+gp", "ref+gp", "linear", "rf")
#: Methods that adapt a fitted NN reference (the rest fit the new table from scratch).
TRANSFER_METHODS: tuple[str, ...] = ("transfer", "nn", "nn-asym", "nn+gp")
#: Methods whose predictor is (or wraps) the PowerTrain MLP.
NN_METHODS: tuple[str, ...] = ("nn", "transfer", "nn-asym", "nn+gp")
#: Other names that mean one of the methods (the estimator's ``kind``).
KIND_ALIASES = {"powertrain-nn": "nn", "powertrain": "nn", "nn-gp": "nn+gp"}


def check_method(name: object, field: str = "method") -> str:
    """``name`` when it is one of :data:`METHODS`; InvalidArgument naming ``field`` otherwise."""
    if name not in METHODS:
        raise InvalidArgument(field, f"unknown method {name!r}", ", ".join(METHODS))
    return str(name)


def parse_method(kind: str, default: str, field: str = "kind") -> str:
    """The method ``kind`` names (one of :data:`METHODS` or an alias, any case; empty: ``default``)."""
    name = KIND_ALIASES.get(kind.strip().lower(), kind.strip().lower()) or default
    if name not in METHODS:
        raise InvalidArgument(field, f"unknown kind {kind!r}", ", ".join((*METHODS, *KIND_ALIASES)))
    return name
