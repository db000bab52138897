"""The only hand-written code that maps gRPC messages to library records and back, one module per concern.

- ``common``       power modes, device specs, roles, measurements, timestamps (``common.proto``)
- ``tables``       prediction tables (``PredictionTable``), with their packed wire form
- ``tuning``       TuningJob specs and status, SubmitProfiling's payload (``tuning.proto``)
- ``profiler``     the node agent's requests, events, device info, mode changes and power samples
  (``profiler.proto``); a ProfileRequest is a ``store.ProfileJob``
- ``coordinator``  nodes, heartbeats, rounds, node configs and budgets (``coordinator.proto``)
- ``estimator``    fits, transfers, predictions, batch efficiency, energy (``estimator.proto``)
- ``optimizer``    fronts, selections, verdicts, search sessions (``optimizer.proto``)
"""
