"""Inference placement: one node's (mode, inference batch size β) for an arrival rate α.

An inference node's config depends on its request arrival rate α, its latency budget L̂ and
its power budget P̂: :class:`~edgetune.optimization.problems.InferProblem` picks, from the
node's stored inference measurements, the configuration with the least peak latency
λ = (β−1)/α + t_in within λ ≤ L̂, p_in ≤ P̂ and keep-up t_in ≤ β/α. When α (or L̂, or P̂)
moves, only that node is re-solved and its config re-published; the config store gives a
new revision only when the decision changed.

    kv inference/<node_id>   InferenceTarget {workload, arrival_rps, latency_budget_ms}: the
                             node's standing inference load (what a re-solve starts from)

Measurements: the node's own of (device model, workload, "infer"), else its device model's
(any node), the same fallback as round planning. P̂: the node's registered budget; a node
without one is not power-limited (every measured point is within budget).
"""

from __future__ import annotations

import logging

from edgetune import validation
from edgetune.control.configs import ConfigStore, NodeConfig
from edgetune.control.leader import LeaderLease
from edgetune.control.registry import NodeRegistry
from edgetune.errors import FailedPrecondition, InvalidArgument, NotFound
from edgetune.optimization.problems import ROLE_INFER, InferProblem
from edgetune.planning.placement import InferencePlacement
from edgetune.store import InferenceTarget, Store

log = logging.getLogger(__name__)


def placement_key(node_id: str) -> tuple[str, str]:
    return ("inference", node_id)


def standing_target(store: Store, node_id: str) -> InferenceTarget | None:
    raw = store.get(placement_key(node_id))
    return InferenceTarget.from_dict(raw) if raw is not None else None


def solve_placement(store: Store, registry: NodeRegistry, configs: ConfigStore, node_id: str, *,
                    arrival_rps: float | None = None, latency_budget_ms: float | None = None,
                    workload: str | None = None, lease: LeaderLease | None = None,
                    now_s: float | None = None, power_budget_w: float | None = None,
                    budget_given: bool = False, write: bool = True) -> InferencePlacement:
    """Re-solve ``node_id``'s inference selection and publish its config when feasible.

    ``arrival_rps`` / ``latency_budget_ms`` / ``workload``: None keeps the node's standing
    value (required the first time). Raises InvalidArgument naming ``budgets.arrival_rps``,
    ``budgets.latency_budget_ms`` or ``workload.name``; NotFound ``node_id``;
    FailedPrecondition when nothing of the workload's inference was measured for the node.
    The new α / L̂ are stored even when the selection is infeasible (they are facts about
    the load; a later budget change re-solves from them); an infeasible selection publishes
    nothing and keeps the previous config. ``budget_given``: solve under ``power_budget_w``
    instead of the registered budget (a budget change not written yet). ``write`` False:
    write nothing; the placement carries the config and target for the caller to commit
    with its other writes (:meth:`RoundCoordinator.update_node_budget`).
    """
    try:
        record = registry.get(node_id)
    except NotFound:
        raise NotFound(f"node_id: node {node_id!r} is not registered") from None
    standing = standing_target(store, node_id)
    alpha = arrival_rps if arrival_rps is not None else (standing.arrival_rps if standing else None)
    if alpha is None:
        raise InvalidArgument("budgets.arrival_rps", f"is required for node {node_id!r} (no standing arrival rate)",
                              validation.ARRIVAL_RATE_ALLOWED)
    alpha = validation.arrival_rps(alpha, "budgets.arrival_rps")
    latency = latency_budget_ms if latency_budget_ms is not None else (
        standing.latency_budget_ms if standing else None)
    if latency is None:
        raise InvalidArgument("budgets.latency_budget_ms",
                              f"is required for node {node_id!r} (no standing latency budget)",
                              validation.TIME_BUDGET_ALLOWED)
    latency = validation.latency_budget_ms(latency, "budgets.latency_budget_ms")
    name = workload or (standing.workload if standing else None)
    if not name:
        raise InvalidArgument("workload.name", f"is required for node {node_id!r} (no standing inference workload)",
                              "the inference workload's name, e.g. mobilenetv3")

    device = record.device_model
    rows = store.get_measurements(device, name, ROLE_INFER, node_id) if device else []
    if not rows and device:
        rows = store.get_measurements(device, name, ROLE_INFER)
    if not rows:
        raise FailedPrecondition(
            f"node_id: no stored inference measurements of {name} for node {node_id!r} "
            f"(device {device or 'unknown'}): profile {name} with role infer on it first")
    flat = [r.to_row() for r in rows]
    budget = power_budget_w if budget_given else record.power_budget_w
    # No registered budget: not power-limited (InferProblem needs a finite P̂; the most seen power is one).
    p_hat = budget if budget is not None else max(float(r["power_w"]) for r in flat)
    problem = InferProblem(p_hat, latency, alpha, infer_workload=name)
    decision = problem.solve(problem.observations_from_rows(flat))
    target = InferenceTarget(name, alpha, latency)

    config = published = None
    if decision.feasible and decision.evaluation is not None:
        ev = decision.evaluation
        config = NodeConfig(node_id=node_id, mode=ev.mode, batch_size=ev.batch_size, workload={"name": name},
                            role=ROLE_INFER, valid_from_s=now_s, power_budget_w=budget,
                            reason=f"inference: {alpha:g} rps, latency {ev.latency_ms:.1f} <= {latency:g} ms, "
                                   f"{ev.power_w:.1f} W")
    if write:  # the target and the config together: a kill between them leaves neither
        out = configs.publish_many([config] if config is not None else [], fence=lease,
                                   values=[(placement_key(node_id), target.to_dict(), None)])
        published = out[0] if out else None
    if config is None:
        log.warning("inference selection infeasible; config unchanged",
                    extra={"node_id": node_id, "reason": decision.reason})
    log.info("inference placement solved", extra={
        "node_id": node_id, "arrival_rps": alpha, "latency_budget_ms": latency, "feasible": decision.feasible,
        "batch_size": decision.batch_size, "changed": bool(published and published.changed)})
    return InferencePlacement(node_id, name, alpha, latency, budget, decision, published, config, target)


def has_placement(store: Store, node_id: str) -> bool:
    return standing_target(store, node_id) is not None
