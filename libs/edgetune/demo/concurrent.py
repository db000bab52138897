"""The demo's concurrent training + inference case (step 8): a GMD search session on the optimizer,
every point it asks for profiled on one Orin agent."""

from __future__ import annotations

from edgetune.base.mode import PowerMode
from edgetune.demo.story import (
    Story,
    Tick,
    profile,
)
from edgetune.optimization.records import SearchRequest
from edgetune.proto.serde.common import mode_to_proto, role_to_proto
from edgetune.proto.serde.optimizer import told_from_proto
from edgetune.proto.v1 import common_pb2, profiler_pb2


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
        told: list[common_pb2.Measurement] = []
        for (role, workload, batch), modes in groups.items():
            told += profile(agent, profiler_pb2.ProfileRequest(
                workload=story.workload(common_pb2.Role.ValueType(role_to_proto(role)), workload or None, batch),
                modes=[mode_to_proto(m) for m in modes], batch_sizes=[batch], seed=o.seed + 500 + profiled))
            profiled += len(modes)
        reply = opt.tell(session.session_id, [told_from_proto(i, m) for i, m in enumerate(told)])
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
