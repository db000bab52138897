"""``make demo``: the main job, end to end, on simulated Jetsons, on the control plane: started as
``edgetune up`` starts it (processes under :class:`edgetune.localrun.processes.Supervisor`),
tuned by one TuningJob that the coordinator runs.

- ``suite``       the fleet and the control plane (Redis, estimator, optimizer, coordinator, one agent per node)
- ``story``       the shared state (Story, NodeResult, Options, the job's spec) and helpers every step uses
- ``steps``       steps 1–5: discover, reference models, the tuning job (submit + watch), the demo's
                  check of the job's predictions on held-out modes, Pareto
- ``rounds``      steps 6–7: plan a federated round, verify its configs, change a budget mid-way
- ``concurrent``  step 8: concurrent training + inference by a GMD search session
- ``report``      PNG plots, ``summary.json`` and ``index.html`` in the report folder
- ``__main__``    ``python -m edgetune.demo [--out DIR] [--modes N] [--quick] [--nodes IDS]``
"""
