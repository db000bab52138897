"""The demo's concurrent training + inference case (step 8): a GMD search session on the optimizer,
every point it asks for profiled on one Orin agent."""

from __future__ import annotations

from edgetune.demo.story import (
    RPC_TIMEOUT_S,
    Story,
    Tick,
    label,
    profile,
)
from edgetune.proto.v1 import (
    common_pb2,
    optimizer_pb2,
    profiler_pb2,
)


# --- 8. concurrent training + inference -------------------------------------------------------------
def concurrent_search(story: Story, tick: Tick) -> str:
    """A GMD search session (Optimizer StartSearch / Ask / Tell / EndSearch) for training and inference
    interleaved on one Orin node; every asked point is profiled on the node's agent."""
    o = story.options
    node = next(n for n in story.fleet if n.node_id == o.concurrent_node)
    agent, opt = story.agent(node.node_id), story.suite.optimizer
    latency_ms, rate = o.concurrent
    budgets = common_pb2.Budgets(power_budget_w=node.budget_w, latency_budget_ms=latency_ms, arrival_rps=rate)
    session = opt.StartSearch(optimizer_pb2.StartSearchRequest(
        strategy=optimizer_pb2.STRATEGY_GMD, problem=optimizer_pb2.PROBLEM_CONCURRENT, budgets=budgets,
        device=node.device, grid=common_pb2.GRID_FULCRUM, batch_sizes=[o.batch_size],
        train_workload=o.workload, infer_workload=o.infer_workload, seed=o.seed), timeout=RPC_TIMEOUT_S)
    profiled = 0
    for _ in range(200):
        asked = opt.Ask(optimizer_pb2.AskRequest(session_id=session.session_id), timeout=RPC_TIMEOUT_S)
        if asked.done or not asked.points:
            break
        groups: dict[tuple[common_pb2.Role.ValueType, str, int], list[common_pb2.PowerMode]] = {}
        for p in asked.points:
            groups.setdefault((p.role, p.workload, p.batch_size), []).append(p.mode)
        told = []
        for (role, workload, batch), modes in groups.items():
            told += profile(agent, profiler_pb2.ProfileRequest(
                workload=story.workload(role, workload or None, batch), modes=modes, batch_sizes=[batch],
                seed=o.seed + 500 + profiled))
            profiled += len(modes)
        reply = opt.Tell(optimizer_pb2.TellRequest(session_id=session.session_id, measurements=told),
                         timeout=RPC_TIMEOUT_S)
        tick("search", reply.profiled, max(session.max_profiles * 2, reply.profiled))
        if reply.done:
            break
    d = opt.EndSearch(optimizer_pb2.EndSearchRequest(session_id=session.session_id), timeout=RPC_TIMEOUT_S).decision
    story.concurrent = {"node": node.node_id, "device": node.device, "strategy": "GMD", "grid": "fulcrum",
                        "train_workload": o.workload, "infer_workload": o.infer_workload,
                        "power_budget_w": node.budget_w, "latency_budget_ms": latency_ms, "arrival_rps": rate,
                        "feasible": d.feasible, "reason": d.reason, "profiled_points": profiled,
                        "trials": d.profiled}
    if not d.feasible:
        return f"{node.node_id}: no configuration meets the budgets ({d.reason}); {profiled} points profiled"
    story.concurrent.update({"mode": label(d.mode), "train_batch": d.batch_size, "infer_batch": d.infer_batch_size,
                             "tau_train": d.tau_train, "latency_ms": d.latency_ms,
                             "train_minibatches_per_s": d.train_minibatches_per_s, "power_w": d.power_w})
    return (f"{node.node_id}: mode {label(d.mode)}, inference batch β={d.infer_batch_size}, τ={d.tau_train} "
            f"training minibatches per inference minibatch; peak latency {d.latency_ms:.0f} ms ≤ {latency_ms:g} ms at "
            f"{rate:g} rps, {d.train_minibatches_per_s:.2f} training minibatches/s, {d.power_w:.1f} W ≤ "
            f"{node.budget_w:g} W — {profiled} points profiled")
