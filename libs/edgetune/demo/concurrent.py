"""The demo's concurrent training + inference case (step 8): a GMD search session on the optimizer,
every point it asks for profiled on one Orin agent."""

from __future__ import annotations

from edgetune.base.mode import PowerMode
from edgetune.base.roles import Role
from edgetune.demo.story import (
    Story,
    Tick,
    profile,
)
from edgetune.optimization.records import SearchRequest, Told
from edgetune.store import MeasurementRecord


# --- 8. concurrent training + inference -------------------------------------------------------------
def concurrent_search(story: Story, tick: Tick) -> str:
    """A GMD search session (Optimizer StartSearch / Ask / Tell / EndSearch) for training and inference
    interleaved on one Orin node; every asked point is profiled on the node's agent."""
    o = story.options
    node = next(n for n in story.fleet if n.node_id == o.concurrent_node)
    agent, opt = story.agent(node.node_id), story.suite.optimizer
    latency_ms, rate = o.concurrent
    session = opt.start_search(SearchRequest(
        "gmd", "concurrent", power_budget_w=node.budget_w, latency_budget_ms=latency_ms, arrival_rps=rate,
        device=node.device, grid="fulcrum", batch_sizes=(o.batch_size,), train_workload=o.workload,
        infer_workload=o.infer_workload, seed=o.seed))
    profiled = 0
    for _ in range(200):
        asked = opt.ask(session.session_id)
        if asked.done or not asked.points:
            break
        groups: dict[tuple[str, str, int], list[PowerMode]] = {}
        for p in asked.points:
            groups.setdefault((p.role, p.workload, p.batch_size), []).append(p.mode)
        measured: list[MeasurementRecord] = []
        for (role, workload, batch), modes in groups.items():
            measured += profile(agent, story.profile_job(modes, role=Role.parse(role), workload=workload or None,
                                                         batch_size=batch, seed=o.seed + 500 + profiled))
            profiled += len(modes)
        reply = opt.tell(session.session_id, [Told.measured(f"measurements[{i}]", m) for i, m in enumerate(measured)])
        tick("search", reply.profiled, max(session.max_profiles * 2, reply.profiled))
        if reply.done:
            break
    d = opt.end_search(session.session_id)
    story.concurrent = {"node": node.node_id, "device": node.device, "strategy": "GMD", "grid": "fulcrum",
                        "train_workload": o.workload, "infer_workload": o.infer_workload,
                        "power_budget_w": node.budget_w, "latency_budget_ms": latency_ms, "arrival_rps": rate,
                        "feasible": d.feasible, "reason": d.reason, "profiled_points": profiled,
                        "trials": d.profiled}
    if not d.feasible or d.mode is None:
        return f"{node.node_id}: no configuration meets the budgets ({d.reason}); {profiled} points profiled"
    story.concurrent.update({"mode": d.mode.label(), "train_batch": d.batch_size, "infer_batch": d.infer_batch_size,
                             "tau_train": d.tau_train, "latency_ms": d.latency_ms,
                             "train_minibatches_per_s": d.train_minibatches_per_s, "power_w": d.power_w})
    return (f"{node.node_id}: mode {d.mode.label()}, inference batch β={d.infer_batch_size}, τ={d.tau_train} "
            f"training minibatches per inference minibatch; peak latency {d.latency_ms:.0f} ms ≤ {latency_ms:g} ms at "
            f"{rate:g} rps, {d.train_minibatches_per_s:.2f} training minibatches/s, {d.power_w:.1f} W ≤ "
            f"{node.budget_w:g} W — {profiled} points profiled")
