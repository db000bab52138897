"""Federated-round planning: one (power mode, batch size) per node for the next round.

- ``fleet``     the round to plan (nodes, options, budgets), ``fleet.json`` reading, flat option arrays
- ``segments``  vectorised per-node kernels (segmented fronts and argmins)
- ``makespan``  least makespan under node and site power budgets (exact binary search)
- ``knapsack``  least summed energy under a site power budget (exact multiple-choice knapsack)
- ``planner``   :func:`plan_round` for the ``makespan`` and ``energy`` objectives
- ``bench``     :func:`bench_plan` for ``make bench``
- ``rounds``    the round records the coordinator plans: request, nodes (options: base.records.OptionTable), outcome
- ``placement`` an inference node's placement and the load it is solved for
"""

from edgetune.planning.bench import bench_plan
from edgetune.planning.fleet import Fleet, NodeOptions, load_fleet, parse_fleet
from edgetune.planning.planner import NodePlan, RoundPlan, plan_round

__all__ = ["Fleet", "NodeOptions", "NodePlan", "RoundPlan", "bench_plan", "load_fleet", "parse_fleet",
           "plan_round"]
