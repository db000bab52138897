"""The node-tuning workflow: profile → frontier rounds → transfer → calibrated safe selection →
verification on the device → the node's option table (:class:`NodeTuner`), under one
:class:`TuningPolicy`, against narrow interfaces (:mod:`.protocols`) implemented in-process
(:mod:`.local`) and over gRPC (:mod:`.remote`)."""

from edgetune.tuning.policy import DEFAULT_POLICY, TuningPolicy, default_policy
from edgetune.tuning.protocols import Estimator, Measurer, ModelRef, Selector
from edgetune.tuning.records import Choice, Decision, OptionTable, Points, Predictions
from edgetune.tuning.safety import SafetyState, held_out_power_error
from edgetune.tuning.tuner import NodeTuner

__all__ = ["DEFAULT_POLICY", "Choice", "Decision", "Estimator", "Measurer", "ModelRef", "NodeTuner", "OptionTable",
           "Points", "Predictions", "SafetyState", "Selector", "TuningPolicy", "default_policy",
           "held_out_power_error"]
