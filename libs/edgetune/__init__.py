"""edgetune: power-aware control plane for DNN training and inference on Jetson edge clusters.

The pieces:

- ``powermodes``   device specs (real frequency tables), mode spaces and grids, nvpmodel.conf
- ``devices``      the ``Device`` interface and its backends: sysfs Jetson, simulated Jetson, replay
- ``workloads``    the plain-torch model zoo and minibatch runners
- ``profiling``    the measurement protocol (settling, sampling, integration, ordering)
- ``estimation``   time / power / energy predictors
- ``optimization`` Pareto fronts, selection, search strategies, interleaving
- ``coordination`` node registry, jobs, round planning, stores (Redis / embedded)
- ``proto``        generated gRPC stubs (``make protos``)
- ``services``     the gRPC services (mapped from ``services/``; thin wiring over the library)
- ``cli``          the ``edgetune`` command
"""

__version__ = "0.1.0"
