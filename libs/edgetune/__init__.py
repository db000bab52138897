"""edgetune: power-aware control plane for DNN training and inference on Jetson edge clusters.

The pieces:

- ``powermodes``   device specs (real frequency tables), mode spaces and grids, nvpmodel.conf
- ``devices``      the ``Device`` interface and its backends: sysfs Jetson, simulated Jetson, replay
- ``workloads``    the plain-torch model zoo and minibatch runners
- ``profiling``    the measurement protocol (settling, sampling, integration, ordering)
- ``estimation``   time / power / energy predictors
- ``optimization`` Pareto fronts, selection, search strategies, interleaving
- ``planning``     federated round planning across nodes
- ``store``        the Store protocol and its backends (memory / embedded redis-server / Redis)
- ``tuning``       the one workflow (NodeTuner) and its local adapters
- ``proto``        generated gRPC stubs (``make protos``) and the serde modules (messages ↔ records)
- ``clients``      typed gRPC clients
- ``control``      node registry, leader lease, configs, jobs, tuning jobs, reconcile
- ``agent``        the node agent loop
- ``localrun``     ``edgetune up``: the services started as processes on one machine
- ``services``     the gRPC services (mapped from ``services/``; thin wiring over the library)
- ``cli``          the ``edgetune`` command

The floors these sit on, and who owns which rule: ``docs/architecture.md``.
"""

__version__ = "0.1.0"
