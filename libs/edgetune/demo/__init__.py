"""``make demo``: the main job, end to end, on simulated Jetsons.

- ``story``   the steps: discover devices, profile a fleet, find Pareto fronts, select modes
- ``report``  PNG plots and an HTML page in the report folder
- ``__main__`` ``python -m edgetune.demo [--out DIR] [--modes N] [--seed S]``

Today the story runs in-process on the library (simulated devices through the real
profiling protocol). The service-based story (agents, coordinator, estimator, optimizer as
processes) replaces ``story`` when those services land; the report stays.
"""
