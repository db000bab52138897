"""The only hand-written code that maps gRPC messages to library records and back, one module per concern.

- ``common``       power modes, device specs, roles, measurements, timestamps (``common.proto``)
- ``tables``       prediction tables (``PredictionTable``), with their packed wire form
- ``tuning``       TuningJob specs and status, SubmitProfiling's payload (``tuning.proto``)
- ``coordinator``  nodes, rounds, node configs and budgets (``coordinator.proto``)
"""
