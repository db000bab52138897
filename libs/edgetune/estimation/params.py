"""The rules of a fit's or transfer's settings, one place each (method names: :mod:`.methods`): constructor keywords
given as text (the estimator's ``params``), epochs, the held-out fraction and the rows it needs.

Each refusal is an :class:`~edgetune.errors.InvalidArgument` naming the setting (``kind``,
``params.lr``, ``epochs``, ``validation_fraction``), so a typo is refused before a task is started.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Mapping
from typing import Any

from edgetune import validation
from edgetune.errors import InvalidArgument
from edgetune.estimation.bundle import held_out_count
from edgetune.estimation.features import TARGETS
from edgetune.estimation.methods import NN_METHODS, TRANSFER_METHODS
from edgetune.estimation.registry import make_predictor

DEFAULT_FIT_METHOD = "nn"
#: Fine-tuning settings of the reference MLP a transfer may set.
NN_TRANSFER_SETTINGS = ("transfer_epochs", "transfer_lr", "transfer_mode")
MAX_VALIDATION_FRACTION = 0.5


def parameter_value(text: str) -> Any:
    """A setting given as text: int, float, bool, or the text itself."""
    low = text.strip().lower()
    if low in ("true", "false"):
        return low == "true"
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return text


def epochs(value: int) -> int:
    return validation.count(value, "epochs", minimum=0, maximum=validation.MAX_EPOCHS)


def predictor_params(method: str, n_epochs: int, params: Mapping[str, str], *,
                     field_prefix: str = "params") -> dict[str, Any]:
    """Constructor keywords of ``method`` from ``n_epochs`` (0: the method's default) and ``params``."""
    epochs(n_epochs)
    kw: dict[str, Any] = {k: parameter_value(v) for k, v in params.items()}
    defaults = _constructor_defaults(method)
    for name, value in kw.items():
        if name in defaults:
            kw[name] = validation.parameter(value, defaults[name], f"{field_prefix}.{name}")
    if n_epochs:
        if method not in NN_METHODS:
            raise InvalidArgument("epochs", f"applies to the NN methods, not {method!r}", "0 for " + method)
        if method == "nn+gp":
            kw["nn_params"] = {**kw.get("nn_params", {}), "epochs": n_epochs}
        else:
            kw["epochs"] = n_epochs
    try:
        make_predictor(method, TARGETS[0], **kw)  # cheap: nothing is built before fit
    except TypeError:
        names = _constructor_names(method)
        bad = sorted(set(kw) - names)
        raise InvalidArgument(f"{field_prefix}.{bad[0] if bad else '?'}", f"not a parameter of {method!r}",
                              ", ".join(sorted(names))) from None
    except InvalidArgument as exc:
        raise exc.prefixed(field_prefix) from None
    return kw


def transfer_params(method: str, n_epochs: int, params: Mapping[str, str]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(keywords for ``adapt``, attributes to set on the reference NN before fine-tuning).

    Fine-tuning settings (``transfer_epochs``, ``transfer_lr``, ``transfer_mode``) live on the reference
    MLP, as in ``edgetune estimate transfer``; ``n_epochs`` is ``transfer_epochs``.
    """
    epochs(n_epochs)
    kw = {k: parameter_value(v) for k, v in params.items()}
    nn_defaults = _constructor_defaults("nn")
    nn_attrs: dict[str, Any] = {k: validation.parameter(kw.pop(k), nn_defaults[k], f"params.{k}")
                                for k in NN_TRANSFER_SETTINGS if k in kw}
    if n_epochs:
        if method not in TRANSFER_METHODS:
            raise InvalidArgument("epochs", f"fine-tuning epochs apply to {', '.join(TRANSFER_METHODS)}, not "
                                  f"{method!r} (it fits the new rows from scratch)", "0")
        nn_attrs["transfer_epochs"] = n_epochs
    if nn_attrs and method not in TRANSFER_METHODS:
        raise InvalidArgument(f"params.{next(iter(nn_attrs))}", f"applies to {', '.join(TRANSFER_METHODS)} only")
    if method == "nn+gp":
        names = {"combine", "restarts"}
    elif method in TRANSFER_METHODS:
        names = set()
    else:
        names = _constructor_names(method) - {"transform"}
    bad = sorted(set(kw) - names)
    if bad:
        raise InvalidArgument(f"params.{bad[0]}", f"not a transfer parameter of {method!r}",
                              ", ".join(sorted(names | set(NN_TRANSFER_SETTINGS))) or "none")
    if "transfer_epochs" in nn_attrs and (not isinstance(nn_attrs["transfer_epochs"], int)
                                          or nn_attrs["transfer_epochs"] < 1):
        raise InvalidArgument("params.transfer_epochs", f"{nn_attrs['transfer_epochs']!r}", ">= 1")
    defaults = _constructor_defaults(method)
    for name, value in kw.items():
        if name in defaults:
            kw[name] = validation.parameter(value, defaults[name], f"params.{name}")
    return kw, nn_attrs


def validation_fraction(value: float, default: float) -> float:
    """The held-out fraction asked for; 0: ``default`` (the tuning policy's)."""
    if value == 0:
        return default
    if not (math.isfinite(value) and 0 < value <= MAX_VALIDATION_FRACTION):
        raise InvalidArgument("validation_fraction", f"{value!r} is out of range",
                              f"0 (default {default}) or (0, {MAX_VALIDATION_FRACTION}]")
    return float(value)


def min_fit_rows(fraction: float, min_train_rows: int) -> int:
    """Fewest rows that leave ``min_train_rows`` to train on after the held-out split."""
    n = min_train_rows + 1
    while n - held_out_count(n, fraction) < min_train_rows:
        n += 1
    return n


def _constructor_defaults(method: str) -> dict[str, Any]:
    cls = type(make_predictor(method, TARGETS[0]))
    return {n: p.default for n, p in inspect.signature(cls.__init__).parameters.items()
            if n not in ("self", "target", "seed") and p.default is not inspect.Parameter.empty}


def _constructor_names(method: str) -> set[str]:
    cls = type(make_predictor(method, TARGETS[0]))
    sig = inspect.signature(cls.__init__)
    return {n for n, p in sig.parameters.items()
            if n not in ("self", "target", "seed") and p.kind is not inspect.Parameter.VAR_KEYWORD}
