"""The gRPC services, installed as ``edgetune.services``: wiring only, algorithms live in the library.

- ``common``       server bootstrap shared by all: health, reflection, metrics, graceful shutdown
- ``profiler``     node agent (one per Jetson): discover, profile, actuate, telemetry
- ``estimator``    fits and serves predictors (Ray)
- ``optimizer``    Pareto fronts, selection, search sessions
- ``coordinator``  federation: registry, planning, config push
"""
