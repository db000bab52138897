"""The node-tuning workflow: profile → frontier rounds → transfer → calibrated safe selection →
verification on the device → the node's option table.

- ``tuner``      :class:`~edgetune.tuning.tuner.NodeTuner`, the one workflow
- ``policy``     :class:`~edgetune.tuning.policy.TuningPolicy`, every knob of it
- ``protocols``  the narrow interfaces it talks to (Measurer, Estimator, Selector)
- ``local``      those interfaces in-process (a device's profiler, the estimation library, the selectors)
- ``safety``     the calibration of predicted power σ from held-out points and misses

Over gRPC the same interfaces are implemented by :mod:`edgetune.clients.tuning`. The records it
passes (points, predictions, decisions) are base values: :mod:`edgetune.base.records`.
"""
