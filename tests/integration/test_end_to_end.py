"""The whole control plane on loopback: profile, plan, push, re-plan on a budget change.

The coordinator, the estimator (no Ray: nothing here fits models) and the optimizer (each when this
checkout has its service) and three profiler agents on a simulated Orin AGX, Xavier AGX and Orin
Nano, each registered through its coordinator link with its power budget: the services' own
servers and agent loop, in this process over the in-memory store (``harness.InProcessCluster``;
what is tested is the services' behaviour, not their processes). PlanRound plans from stored
measurements, so the estimator only has to be up and answer on the shared store.

1. The coordinator's side queues a profiling job per node (40 random modes x 2 batch sizes);
   each agent claims it from its stream, profiles, writes the measurements and acks.
2. A makespan round is planned from the stored measurements and applied: every node's
   option is a valid mode of its device within its budget, every agent applies its pushed
   config (WatchConfig) and heartbeats it; the optimizer's own min-time selection per node
   (same measurements, round times) agrees with the coordinator's makespan.
3. An energy round with a site budget and a deadline: within every node's budget, the sum
   within the site's, every node done by the deadline.
4. UpdateBudget on one node, then on the site: the last round is re-planned, the budgets
   hold, and exactly the nodes whose config changed get a new revision (the one whose option
   broke its new budget among them); agents follow.
"""

from __future__ import annotations

import importlib.util
import math

import grpc
import pytest
from harness import InProcessCluster, wait_for

from edgetune.base.mode import PowerMode
from edgetune.base.records import Predictions
from edgetune.control.jobs import JobQueue
from edgetune.powermodes.specs import get_spec
from edgetune.proto.serde.common import mode_from_proto
from edgetune.proto.serde.tables import table_to_proto
from edgetune.proto.v1 import (
    common_pb2,
    coordinator_pb2,
    coordinator_pb2_grpc,
    estimator_pb2,
    estimator_pb2_grpc,
    optimizer_pb2,
    optimizer_pb2_grpc,
    profiler_pb2,
    profiler_pb2_grpc,
    tuning_pb2,
)

pytestmark = [pytest.mark.integration, pytest.mark.slow]

#: node id -> (device model, power budget W, samples per round)
NODES = {"orin": ("orin-agx", 30.0, 3200), "xavier": ("xavier-agx", 20.0, 2400), "nano": ("orin-nano", 10.0, 1600)}
WORKLOAD = common_pb2.Workload(name="resnet18", role=common_pb2.ROLE_TRAIN)
N_MODES, BATCH_SIZES = 40, (16, 32)
HAS_ESTIMATOR = importlib.util.find_spec("edgetune.services.estimator.server") is not None
HAS_OPTIMIZER = importlib.util.find_spec("edgetune.services.optimizer.server") is not None
Point = tuple[tuple[int, float, float, float], int]


def _options(cluster: InProcessCluster, node_id: str) -> dict[Point, tuple[float, float]]:
    """(mode, batch size) -> (time_ms, power_w) of the node's stored measurements."""
    model = NODES[node_id][0]
    return {(m.mode.as_tuple(), m.batch_size): (m.time_ms, m.power_w)
            for m in cluster.store.get_measurements(model, WORKLOAD.name, "train", node_id)}


def _configs(stub) -> dict[str, coordinator_pb2.NodeConfig]:
    return {n: stub.GetNodeConfig(coordinator_pb2.GetNodeConfigRequest(node_id=n), timeout=10) for n in NODES}


def _point(config) -> Point:
    return mode_from_proto(config.mode).as_tuple(), int(config.batch_size)


def _agents_follow(cluster, agents, configs) -> None:
    """Every agent's device runs its pushed config's mode, and its heartbeat says so."""
    def in_mode() -> bool:
        for node_id, agent in agents.items():
            with grpc.insecure_channel(agent.address) as channel:
                device = profiler_pb2_grpc.ProfilerStub(channel).GetDevice(profiler_pb2.GetDeviceRequest(), timeout=10)
            if mode_from_proto(device.current_mode) != mode_from_proto(configs[node_id].mode):
                return False
        listed = {n.node_id: n for n in coordinator_pb2_grpc.CoordinatorStub(cluster.channel).ListNodes(coordinator_pb2.ListNodesRequest(), timeout=10).nodes}
        return all(listed[n].state == "running" and mode_from_proto(listed[n].current_mode) ==
                   mode_from_proto(configs[n].mode) for n in NODES)

    wait_for(in_mode, 15, "the agents to apply their pushed configs and report them")


def _check_budgets(options, configs, budgets_w, site_w=None) -> dict[str, float]:
    """Each config is a measured option of its node, a valid mode of its device, within its budget."""
    power = {}
    for node_id, config in configs.items():
        point = _point(config)
        assert point in options[node_id], f"{node_id}: {point} is not one of its measured options"
        assert get_spec(NODES[node_id][0]).validate(PowerMode(*point[0])).as_tuple() == point[0]
        power[node_id] = options[node_id][point][1]
        assert power[node_id] <= budgets_w[node_id], (node_id, power[node_id], budgets_w[node_id])
        assert config.power_budget_w == budgets_w[node_id]
    if site_w is not None:
        assert sum(power.values()) <= site_w + 1e-9, (power, site_w)
    return power


def _round_time_s(options, node_id: str, point: Point) -> float:
    return math.ceil(NODES[node_id][2] / point[1]) * options[node_id][point][0] / 1000


def _optimizer_makespan(address: str, options, budgets_w) -> float:
    """Per node, the optimizer's least round time within the node's budget; the round's is the slowest."""
    slowest = 0.0
    with grpc.insecure_channel(address) as channel:
        stub = optimizer_pb2_grpc.OptimizerStub(channel)
        for node_id, table in options.items():
            rows = [{"cores": m[0], "cpu_mhz": m[1], "gpu_mhz": m[2], "emc_mhz": m[3], "batch_size": b,
                     "time_ms": 1000 * _round_time_s(options, node_id, (m, b)), "power_w": p}
                    for (m, b), (_t, p) in table.items()]
            reply = stub.Select(optimizer_pb2.SelectRequest(
                candidates=optimizer_pb2.Candidates(table=table_to_proto(Predictions.from_rows(rows))),
                objective=optimizer_pb2.OBJECTIVE_MIN_TIME,
                budgets=common_pb2.Budgets(power_budget_w=budgets_w[node_id])), timeout=30)
            decision = reply.decisions[0]
            assert decision.feasible, decision.reason
            slowest = max(slowest, decision.time_ms / 1000)
    return slowest


def _plan(stub, objective, **budgets) -> coordinator_pb2.PlanRoundResponse:
    return stub.PlanRound(coordinator_pb2.PlanRoundRequest(
        objective=objective, budgets=common_pb2.Budgets(**budgets), workload=WORKLOAD, apply=True,
        nodes=[coordinator_pb2.NodeRound(node_id=n, samples=s) for n, (_m, _b, s) in NODES.items()]), timeout=30)


def test_profile_plan_push_and_replan(tmp_path):
    with InProcessCluster(tmp_path) as cluster:
        if HAS_ESTIMATOR:
            estimator = cluster.start_service("estimator")
            with grpc.insecure_channel(estimator.address) as channel:
                estimator_pb2_grpc.EstimatorStub(channel).ListModels(estimator_pb2.ListModelsRequest(), timeout=10)
        optimizer = cluster.start_service("optimizer") if HAS_OPTIMIZER else None
        agents = cluster.start_agents({n: (model, budget) for n, (model, budget, _s) in NODES.items()})
        stub = coordinator_pb2_grpc.CoordinatorStub(cluster.channel)
        budgets_w = {n: budget for n, (_m, budget, _s) in NODES.items()}

        # 1. Profiling jobs through SubmitProfiling (the per-node streams); the agents write and acknowledge.
        jobs = JobQueue(cluster.store)
        for i, node_id in enumerate(NODES):
            request = tuning_pb2.SubmitProfilingRequest(node_id=node_id, job_id=f"profile-{node_id}",
                                                        request=profiler_pb2.ProfileRequest(
                workload=WORKLOAD, random_modes=N_MODES, random_grid=common_pb2.GRID_FULL,
                batch_sizes=list(BATCH_SIZES), n_minibatches=10, seed=100 + i))
            assert not stub.SubmitProfiling(request, timeout=10).duplicate
            assert stub.SubmitProfiling(request, timeout=10).duplicate  # a retried call queues nothing
        expected = N_MODES * len(BATCH_SIZES)
        wait_for(lambda: all(len(_options(cluster, n)) == expected for n in NODES), 60, "the profiling jobs")
        wait_for(lambda: all(jobs.pending_count(n) == 0 and jobs.backlog(n) == 0 for n in NODES), 10, "the job acks")
        options = {n: _options(cluster, n) for n in NODES}

        # 2. Makespan round from the stored measurements, applied and pushed.
        plan = _plan(stub, coordinator_pb2.ROUND_OBJECTIVE_MAKESPAN)
        assert plan.feasible, plan.reason
        configs = _configs(stub)
        assert {n: c.revision for n, c in configs.items()} == dict.fromkeys(NODES, 1)
        assert {p.node_id: (mode_from_proto(p.mode).as_tuple(), p.batch_size) for p in plan.nodes} == \
            {n: _point(c) for n, c in configs.items()}
        _check_budgets(options, configs, budgets_w)
        assert plan.makespan_s == pytest.approx(max(_round_time_s(options, n, _point(c)) for n, c in configs.items()))
        if optimizer is not None:
            assert plan.makespan_s == pytest.approx(_optimizer_makespan(optimizer.address, options, budgets_w))
        _agents_follow(cluster, agents, configs)

        # 3. Energy round under a site budget below the nodes' sum, with a deadline.
        site_w, deadline_s = 45.0, 1.5 * plan.makespan_s
        energy = _plan(stub, coordinator_pb2.ROUND_OBJECTIVE_ENERGY, site_power_budget_w=site_w,
                       deadline_s=deadline_s)
        assert energy.feasible, energy.reason
        configs = _configs(stub)
        power = _check_budgets(options, configs, budgets_w, site_w)
        assert all(_round_time_s(options, n, _point(c)) <= deadline_s + 1e-9 for n, c in configs.items())
        assert energy.energy_j == pytest.approx(sum(_round_time_s(options, n, _point(c)) * power[n]
                                                    for n, c in configs.items()))
        _agents_follow(cluster, agents, configs)

        # 4a. A node's budget drops below its option (to one that still meets the deadline, so the
        # re-plan is feasible: an infeasible one keeps the old configs): only changed configs get
        # new revisions.
        cut, new_budget_w = next((n, max(cheaper) + 0.05) for n in NODES if (cheaper := [
            p for point, (_t, p) in options[n].items()
            if p < power[n] - 0.1 and _round_time_s(options, n, point) <= deadline_s]))
        budgets_w[cut] = new_budget_w
        stub.UpdateBudget(coordinator_pb2.UpdateBudgetRequest(
            node_id=cut, budgets=common_pb2.Budgets(power_budget_w=budgets_w[cut])), timeout=30)
        before, configs = configs, _configs(stub)
        _check_budgets(options, configs, budgets_w, site_w)
        for n in NODES:
            changed = _point(configs[n]) != _point(before[n]) or configs[n].power_budget_w != before[n].power_budget_w
            assert configs[n].revision == before[n].revision + (1 if changed else 0), n
        assert configs[cut].revision == before[cut].revision + 1
        _agents_follow(cluster, agents, configs)

        # 4b. The site budget drops: re-planned within it, again only changed nodes bumped.
        site_w = round(sum(_check_budgets(options, configs, budgets_w).values()) - 3.0, 2)
        reply = stub.UpdateBudget(coordinator_pb2.UpdateBudgetRequest(
            budgets=common_pb2.Budgets(site_power_budget_w=site_w)), timeout=30)
        assert reply.budgets.site_power_budget_w == site_w
        before, configs = configs, _configs(stub)
        _check_budgets(options, configs, budgets_w, site_w)
        bumped = {n for n in NODES if configs[n].revision > before[n].revision}
        assert bumped == {n for n in NODES if _point(configs[n]) != _point(before[n])}
        assert bumped, "a lower site budget must change at least one node's option"
        _agents_follow(cluster, agents, configs)
