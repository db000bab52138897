"""Deciding modes and batch sizes.

- ``pareto``   exact, vectorised Pareto fronts over (time, power) and (throughput, power)
- ``records``  the optimizer's questions and answers (selections, verdicts, search sessions) as records
- ``answers``  the one-shot answers (fronts at a risk, selections, joint, concurrent, next profiles)
- ``sessions`` ask/tell search sessions in the store
"""
