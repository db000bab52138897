"""Deciding modes and batch sizes.

- ``pareto``   exact, vectorised Pareto fronts over (time, power) and (throughput, power)
"""
