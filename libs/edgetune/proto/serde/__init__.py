"""The only hand-written code that maps gRPC messages to library records and back, one module per concern.

- ``common``   power modes, device specs, roles, measurements, budgets, decisions (``common.proto``)
- ``tables``   prediction tables (``PredictionTable``), with their packed wire form
- ``tuning``   TuningJob specs and status (``tuning.proto``), the job file
- ``estimator`` fits, transfers, predictions, batch efficiency, energy (``estimator.proto``)
- ``optimizer`` fronts, selections, verdicts, search sessions (``optimizer.proto``)
"""
