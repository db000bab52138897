"""``make demo``: the main job, end to end, on simulated Jetsons, through the real services
(processes started and stopped by :class:`edgetune.coordination.processes.Supervisor`).

- ``suite``       the fleet and the suite (Redis, coordinator, estimator, optimizer, one agent per node)
- ``estimation``  the Estimator API: the service over gRPC, or the library in-process without it
- ``story``       the shared state (Story, NodeResult, Options) and helpers every step uses
- ``steps``       steps 1–5: discover, profile, fit + transfer + predict, Pareto, select + verify
- ``rounds``      steps 6–7: plan a federated round, verify its configs, change a budget mid-way
- ``concurrent``  step 8: concurrent training + inference by a GMD search session
- ``report``      PNG plots, ``summary.json`` and ``index.html`` in the report folder
- ``__main__``    ``python -m edgetune.demo [--out DIR] [--modes N] [--quick] [--nodes IDS]``
"""
