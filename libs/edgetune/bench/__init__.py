"""``make bench``: speed and overhead targets, measured and written to a results file.

Targets are checked here, not in timed unit tests (a loaded CI machine would make those
flaky). Each benchmark is a function in ``suites`` registered with ``@benchmark(name,
target=...)``; it returns measured values, and the runner records whether the target held.

- ``suites``    the benchmarks (grids, simulator, selection, planning, profiling overhead, ...)
- ``regret``    ``decision_regret``: ``edgetune tune``'s decisions on recorded tables replayed as devices,
                scored against the exhaustive best (``experiments/decision_regret.py`` runs all of it)
- ``runner``    registry, timing helpers, results JSON + Markdown
- ``__main__``  ``python -m edgetune.bench [--out FILE] [--only NAME ...]``
"""
