"""The node-tuning workflow: profile → frontier rounds → transfer → calibrated safe selection →
verification on the device → the node's option table (:class:`NodeTuner`), under one
:class:`TuningPolicy`, against narrow interfaces (:mod:`.protocols`) implemented in-process
(:mod:`.local`) and over gRPC (:mod:`.remote`).

The exports load on first use: the wire tables (:mod:`edgetune.proto.tables`) decode into
:class:`~edgetune.tuning.records.Predictions`, and a service that only reads them (the
coordinator) must not load the estimation stack (torch) that the tuner and policy import.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from edgetune.tuning.policy import DEFAULT_POLICY, TuningPolicy, default_policy
    from edgetune.tuning.protocols import Estimator, Measurer, ModelRef, Selector
    from edgetune.tuning.records import Choice, Decision, OptionTable, Points, Predictions
    from edgetune.tuning.safety import SafetyState, held_out_power_error
    from edgetune.tuning.tuner import NodeTuner

__all__ = ["DEFAULT_POLICY", "Choice", "Decision", "Estimator", "Measurer", "ModelRef", "NodeTuner", "OptionTable",
           "Points", "Predictions", "SafetyState", "Selector", "TuningPolicy", "default_policy",
           "held_out_power_error"]

_HOME = {"DEFAULT_POLICY": "policy", "TuningPolicy": "policy", "default_policy": "policy",
         "Estimator": "protocols", "Measurer": "protocols", "ModelRef": "protocols", "Selector": "protocols",
         "Choice": "records", "Decision": "records", "OptionTable": "records", "Points": "records",
         "Predictions": "records", "SafetyState": "safety", "held_out_power_error": "safety",
         "NodeTuner": "tuner"}


def __getattr__(name: str) -> Any:
    if name not in _HOME:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"edgetune.tuning.{_HOME[name]}"), name)
    globals()[name] = value
    return value
