"""The optimizer (``edgetune.v1.Optimizer``): Pareto fronts, budgeted selection (least time /
power / energy, safe UCB, budget sweeps), Ahmed et al.'s joint batch + mode selection, Fulcrum's
concurrent training + inference decision, and ask/tell search sessions kept in the store so that
any replica, or a restarted one, continues them. Entry point: ``server.main`` /
``edgetune serve optimizer``.
"""
