"""The Coordinator gRPC service end to end on loopback, over a real (embedded) Redis.

Three nodes register, a round is planned from inline options and applied, nodes read and
watch their configs, a budget update re-plans and only the affected node gets a new revision.
Errors come back as INVALID_ARGUMENT / NOT_FOUND / FAILED_PRECONDITION naming the field.
"""

from __future__ import annotations

import queue
import threading
import time
from contextlib import contextmanager

import grpc
import harness
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from edgetune.powermodes.specs import get_spec
from edgetune.proto.serde.common import spec_to_proto
from edgetune.proto.v1 import common_pb2, coordinator_pb2, coordinator_pb2_grpc, profiler_pb2, tuning_pb2
from edgetune.store import EmbeddedStore, MeasurementRecord

SPEC = get_spec("orin-agx")
# Three operating points of the Orin AGX (real table values): fast/hungry, middle, slow/frugal.
MODES = [(12, 2201.6, 1300.5, 3199.0), (8, 1728.0, 930.75, 3199.0), (4, 1113.6, 522.75, 2133.0)]
TIMES_MS = [100.0, 150.0, 260.0]
POWERS_W = [42.0, 30.0, 16.0]  # the middle point costs more energy than the fast one


def _options(scale: float = 1.0) -> common_pb2.PredictionTable:
    return common_pb2.PredictionTable(cores=[m[0] for m in MODES], cpu_mhz=[m[1] for m in MODES],
                                      gpu_mhz=[m[2] for m in MODES], emc_mhz=[m[3] for m in MODES],
                                      batch_size=[32] * len(MODES), time_ms=[t * scale for t in TIMES_MS],
                                      power_w=POWERS_W)


@pytest.fixture
def store():
    s = EmbeddedStore()
    yield s
    s.close()


@contextmanager
def _replica(store, *, leader: bool = True, **kw):
    """A replica and a stub on it; ``leader``: once it holds the lease."""
    with harness.coordinator(store, leader=leader, host="127.0.0.1", grace_s=1.0, **kw) as coordinator, \
            grpc.insecure_channel(coordinator.server.address) as channel:
        yield coordinator, coordinator_pb2_grpc.CoordinatorStub(channel)


@pytest.fixture
def leader(store):
    with _replica(store, replica_id="coord-0") as (coordinator, stub):
        yield coordinator, stub


def _register(stub, name: str, budget: float | None = None) -> str:
    node = coordinator_pb2.NodeInfo(hostname=name, address=f"127.0.0.1:5{len(name)}051", device=spec_to_proto(SPEC),
                                    labels={"rack": "a"})
    if budget is not None:
        node.power_budget_w = budget
    return stub.RegisterNode(coordinator_pb2.RegisterNodeRequest(node=node)).node_id


def _plan_request(node_ids, apply=True, **budgets) -> coordinator_pb2.PlanRoundRequest:
    return coordinator_pb2.PlanRoundRequest(
        round_id="round-1", objective=coordinator_pb2.ROUND_OBJECTIVE_MAKESPAN,
        budgets=common_pb2.Budgets(**budgets),
        workload=common_pb2.Workload(name="resnet18", role=common_pb2.ROLE_TRAIN),
        nodes=[coordinator_pb2.NodeRound(node_id=n, samples=3200, options=_options(1.0 + 0.1 * i))
               for i, n in enumerate(node_ids)],
        apply=apply)


def test_register_plan_get_watch_and_budget_update(leader):
    coordinator, stub = leader
    ids = [_register(stub, f"jetson-{i}", budget=50.0) for i in range(3)]
    assert ids == ["jetson-0", "jetson-1", "jetson-2"]
    listed = stub.ListNodes(coordinator_pb2.ListNodesRequest()).nodes
    assert [n.node_id for n in listed] == ids
    assert all(n.state == "ready" and n.device.name == "orin-agx" and n.power_budget_w == 50.0 for n in listed)
    assert listed[0].device.gpu_mhz == list(SPEC.gpu_mhz) and listed[0].last_seen.seconds > 0

    # Plan: each node runs its fastest option (42 W <= 50 W) for ceil(3200 / 32) minibatches.
    plan = stub.PlanRound(_plan_request(ids, site_power_budget_w=200.0))
    assert plan.feasible and plan.round_id == "round-1"
    assert [(n.node_id, n.mode.cores, n.batch_size) for n in plan.nodes] == [(i, 12, 32) for i in ids]
    assert plan.makespan_s == pytest.approx(100 * 1.2 * 100 / 1000)  # ceil(3200/32) x 120 ms
    assert plan.energy_j == pytest.approx(sum(n.time_s * n.power_w for n in plan.nodes))

    configs = {i: stub.GetNodeConfig(coordinator_pb2.GetNodeConfigRequest(node_id=i)) for i in ids}
    assert all(c.revision == 1 and c.mode.cores == 12 and c.batch_size == 32 for c in configs.values())
    assert configs[ids[0]].workload.name == "resnet18" and configs[ids[0]].workload.role == common_pb2.ROLE_TRAIN
    assert configs[ids[0]].round_id == "round-1" and configs[ids[0]].power_budget_w == 50.0
    assert configs[ids[0]].valid_from.seconds > 0

    # Heartbeat tells the node about its latest revision.
    beat = stub.Heartbeat(coordinator_pb2.HeartbeatRequest(node_id=ids[1], state="running", power_w=41.0,
                                                           applied_revision=1))
    assert beat.config_revision == 1 and not beat.reregister

    # A node watches from the revision it applied; a budget cut on it re-plans the round.
    got: queue.Queue = queue.Queue()
    call = stub.WatchConfig(coordinator_pb2.WatchConfigRequest(node_id=ids[1], after_revision=1))

    def read() -> None:
        try:
            for c in call:
                got.put(c)
        except grpc.RpcError as exc:  # our own cancel below ends the stream
            assert exc.code() == grpc.StatusCode.CANCELLED

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    time.sleep(0.2)
    t0 = time.monotonic()
    out = stub.UpdateBudget(coordinator_pb2.UpdateBudgetRequest(
        node_id=ids[1], budgets=common_pb2.Budgets(power_budget_w=30.0)))
    assert out.budgets.power_budget_w == 30.0
    pushed = got.get(timeout=5)
    latency_ms = (time.monotonic() - t0) * 1000
    assert pushed.revision == 2 and pushed.mode.cores == 8 and pushed.power_budget_w == 30.0
    call.cancel()
    reader.join(5)
    revisions = {i: stub.GetNodeConfig(coordinator_pb2.GetNodeConfigRequest(node_id=i)).revision for i in ids}
    assert revisions == {ids[0]: 1, ids[1]: 2, ids[2]: 1}  # only the affected node moved
    print(f"UpdateBudget -> WatchConfig push: {latency_ms:.1f} ms")

    # Site budget update: 42 + 30 + 42 W no longer fits 100 W; the planner slows someone down.
    site = stub.UpdateBudget(coordinator_pb2.UpdateBudgetRequest(
        budgets=common_pb2.Budgets(site_power_budget_w=100.0)))
    assert site.budgets.site_power_budget_w == 100.0
    after = [stub.GetNodeConfig(coordinator_pb2.GetNodeConfigRequest(node_id=i)) for i in ids]
    assert sum(POWERS_W[[m[0] for m in MODES].index(c.mode.cores)] for c in after) <= 100.0
    assert any(c.revision > revisions[c.node_id] for c in after)


def test_watch_from_zero_starts_with_the_current_config(leader):
    coordinator, stub = leader
    ids = [_register(stub, "a")]
    stub.PlanRound(_plan_request(ids))
    call = stub.WatchConfig(coordinator_pb2.WatchConfigRequest(node_id="a"), timeout=5)
    first = next(call)
    assert first.revision == 1 and first.node_id == "a"
    call.cancel()


def test_lost_nodes_are_planned_around(store):
    with _replica(store, heartbeat_ttl_s=1.0) as (coordinator, stub):  # long enough that a and b never lapse
        ids = [_register(stub, n) for n in ("a", "b", "c")]
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:  # a and b keep beating, c went silent
            for i in ids[:2]:
                stub.Heartbeat(coordinator_pb2.HeartbeatRequest(node_id=i))
            if any(n.state == "lost" for n in stub.ListNodes(coordinator_pb2.ListNodesRequest()).nodes):
                break
            time.sleep(0.05)
        plan = stub.PlanRound(_plan_request(ids))
        assert plan.feasible and [n.node_id for n in plan.nodes] == ["a", "b"]
        assert "planned around c (lost" in plan.reason
        with pytest.raises(grpc.RpcError) as err:
            stub.GetNodeConfig(coordinator_pb2.GetNodeConfigRequest(node_id="c"))
        assert err.value.code() == grpc.StatusCode.NOT_FOUND


def _code(fn, request):
    with pytest.raises(grpc.RpcError) as err:
        fn(request)
    return err.value.code(), err.value.details()


def test_errors_name_the_field(leader):
    coordinator, stub = leader
    _register(stub, "a")
    code, details = _code(stub.PlanRound, _plan_request(["a", "ghost"]))
    assert code == grpc.StatusCode.NOT_FOUND and "nodes[1].node_id" in details

    bad = _plan_request(["a"])
    bad.nodes[0].options.gpu_mhz[1] = 700.0
    code, details = _code(stub.PlanRound, bad)
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "nodes[0].options.gpu_mhz[1]" in details
    bad = _plan_request(["a"])
    bad.nodes[0].options.power_w[2] = float("nan")
    code, details = _code(stub.PlanRound, bad)
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "nodes[0].options.power_w[2]" in details

    bad = _plan_request(["a"])
    bad.nodes[0].samples = 0
    code, details = _code(stub.PlanRound, bad)
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "nodes[0].samples" in details

    no_options = _plan_request(["a"])
    no_options.nodes[0].ClearField("options")
    code, details = _code(stub.PlanRound, no_options)
    assert code == grpc.StatusCode.FAILED_PRECONDITION and "nodes[0].options" in details

    code, details = _code(stub.GetNodeConfig, coordinator_pb2.GetNodeConfigRequest(node_id="a"))
    assert code == grpc.StatusCode.NOT_FOUND and "node_id" in details
    code, details = _code(stub.UpdateBudget, coordinator_pb2.UpdateBudgetRequest(node_id="a"))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "budgets.power_budget_w" in details
    code, details = _code(stub.UpdateBudget, coordinator_pb2.UpdateBudgetRequest(
        node_id="ghost", budgets=common_pb2.Budgets(power_budget_w=10.0)))
    assert code == grpc.StatusCode.NOT_FOUND and "node_id" in details
    assert stub.Heartbeat(coordinator_pb2.HeartbeatRequest(node_id="ghost")).reregister
    with pytest.raises(grpc.RpcError) as err:
        next(stub.WatchConfig(coordinator_pb2.WatchConfigRequest(node_id="ghost"), timeout=5))
    assert err.value.code() == grpc.StatusCode.NOT_FOUND and "node_id" in err.value.details()
    with pytest.raises(grpc.RpcError) as err:
        stub.RegisterNode(coordinator_pb2.RegisterNodeRequest(node=coordinator_pb2.NodeInfo(
            hostname="b", state="asleep")))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "node.state" in err.value.details()


def test_plan_from_stored_measurements(leader):
    coordinator, stub = leader
    _register(stub, "a", budget=30.0)
    rows = [{"id": f"m{i}", "device_model": "orin-agx", "node_id": "a", "workload": "resnet18", "role": "train",
             "cores": c, "cpu_mhz": cpu, "gpu_mhz": gpu, "emc_mhz": emc, "batch_size": 32, "time_ms": t, "power_w": p}
            for i, ((c, cpu, gpu, emc), t, p) in enumerate(zip(MODES, TIMES_MS, POWERS_W, strict=True))]
    coordinator.store.put_measurements([MeasurementRecord.from_row(r) for r in rows])
    req = _plan_request(["a"], apply=False)
    req.nodes[0].ClearField("options")
    plan = stub.PlanRound(req)
    assert plan.feasible and plan.nodes[0].mode.cores == 8  # the fastest option within 30 W
    code, _ = _code(stub.GetNodeConfig, coordinator_pb2.GetNodeConfigRequest(node_id="a"))
    assert code == grpc.StatusCode.NOT_FOUND  # apply=False publishes nothing


def test_standby_forwards_planning_to_the_leader(leader, store):
    coordinator, stub = leader
    _register(stub, "a")
    with _replica(store, leader=False, replica_id="coord-1") as (standby, standby_stub):
        time.sleep(0.1)
        assert not standby.lease.is_leader
        # the standby relays the leader's answers (its errors included): no call fails for reaching it
        assert standby_stub.PlanRound(_plan_request(["a"])).feasible
        reply = standby_stub.UpdateBudget(coordinator_pb2.UpdateBudgetRequest(
            node_id="a", budgets=common_pb2.Budgets(power_budget_w=10.0)))
        assert reply.budgets.power_budget_w == 10.0
        assert stub.ListNodes(coordinator_pb2.ListNodesRequest()).nodes[0].power_budget_w == 10.0
        code, details = _code(standby_stub.UpdateBudget, coordinator_pb2.UpdateBudgetRequest(
            node_id="ghost", budgets=common_pb2.Budgets(power_budget_w=10.0)))
        assert code == grpc.StatusCode.NOT_FOUND and "node_id" in details
        # reads and registrations work on any replica
        assert [n.node_id for n in standby_stub.ListNodes(coordinator_pb2.ListNodesRequest()).nodes] == ["a"]
        # both replicas behind one client target, round robin: every call succeeds
        target = f"ipv4:{coordinator.server.address},{standby.server.address}"
        with grpc.insecure_channel(target, options=[("grpc.lb_policy_name", "round_robin")]) as both:
            both_stub = coordinator_pb2_grpc.CoordinatorStub(both)
            for budget in (40.0, 45.0, 50.0, 55.0):
                assert both_stub.UpdateBudget(coordinator_pb2.UpdateBudgetRequest(
                    node_id="a", budgets=common_pb2.Budgets(power_budget_w=budget)),
                    timeout=10).budgets.power_budget_w == budget
                assert both_stub.PlanRound(_plan_request(["a"]), timeout=10).feasible
        # the leader shuts down gracefully: it releases, the standby takes over at once
        coordinator.server.stop(0)
        assert standby.lease.wait_leader(2.0)
        assert standby_stub.PlanRound(_plan_request(["a"])).feasible


def test_health_and_reflection(leader):
    coordinator, _stub = leader
    channel = grpc.insecure_channel(coordinator.server.address)
    health = health_pb2_grpc.HealthStub(channel)
    assert health.Check(health_pb2.HealthCheckRequest(service="edgetune.v1.Coordinator")).status == \
        health_pb2.HealthCheckResponse.SERVING
    refl = reflection_pb2_grpc.ServerReflectionStub(channel)
    reply = next(refl.ServerReflectionInfo(iter([reflection_pb2.ServerReflectionRequest(list_services="")])))
    assert "edgetune.v1.Coordinator" in {s.name for s in reply.list_services_response.service}
    channel.close()


def test_plan_round_batch_sizes_efficiency_and_energy_saved(leader):
    coordinator, stub = leader
    ids = [_register(stub, n) for n in ("a", "b")]
    req = _plan_request(ids, apply=False)
    fast = MODES[0]
    for n in req.nodes:  # b=8: 400 × 30 ms = 12 s, slower than b=32's 10 s ...
        for column, value in zip(("cores", "cpu_mhz", "gpu_mhz", "emc_mhz", "batch_size", "time_ms", "power_w"),
                                 (*fast, 8, 30.0, 42.0), strict=True):
            getattr(n.options, column).append(value)
    req.batch_efficiency.update({8: 0.5, 32: 1.0})  # ... unless b=8 needs half the samples: 6 s
    req.nodes[1].batch_sizes.append(32)  # b is fixed at 32 by the FL job
    plan = stub.PlanRound(req)
    assert plan.feasible and [(n.node_id, n.batch_size) for n in plan.nodes] == [("a", 8), ("b", 32)]
    assert plan.nodes[0].time_s == pytest.approx(6.0)
    assert plan.fastest_energy_j > 0 and plan.fastest_makespan_s > 0
    assert plan.energy_saved_j == pytest.approx(plan.fastest_energy_j - plan.energy_j)
    req.nodes[0].batch_sizes.append(16)
    plan = stub.PlanRound(req)
    assert not plan.feasible and "batch sizes 16" in plan.reason


def test_lost_and_returning_nodes_replan_the_round(store):
    with _replica(store, heartbeat_ttl_s=1.0, membership_check_s=0.1) as (coordinator, stub):
        ids = [_register(stub, n) for n in ("a", "b", "c")]
        plan = stub.PlanRound(_plan_request(ids, site_power_budget_w=100.0))
        assert plan.feasible and len(plan.nodes) == 3
        revs = {i: stub.GetNodeConfig(coordinator_pb2.GetNodeConfigRequest(node_id=i)).revision for i in ids}
        deadline = time.monotonic() + 8
        changed = False
        while time.monotonic() < deadline and not changed:  # c goes silent; the leader's check re-plans
            for i in ids[:2]:
                stub.Heartbeat(coordinator_pb2.HeartbeatRequest(node_id=i))
            cfg = {i: stub.GetNodeConfig(coordinator_pb2.GetNodeConfigRequest(node_id=i)) for i in ids[:2]}
            changed = any(c.revision > revs[i] for i, c in cfg.items())
            time.sleep(0.05)
        assert changed
        assert stub.GetNodeConfig(coordinator_pb2.GetNodeConfigRequest(node_id="c")).revision == revs["c"]
        # c re-registers: its config is re-planned at once (within the 100 W site budget)
        _register(stub, "c")
        after = {i: stub.GetNodeConfig(coordinator_pb2.GetNodeConfigRequest(node_id=i)) for i in ids}
        assert after["c"].revision >= revs["c"]
        assert sum(1 for i in ids if after[i].mode.cores == 12) <= 2  # 3 × 42 W would break 100 W


def test_update_budget_arrival_rate_replaces_only_the_inference_node(leader):
    """UpdateBudget with budgets.arrival_rps re-solves one inference node's (mode, β) from its
    stored inference measurements; the training nodes' configs keep their revisions."""
    from edgetune.devices.simulated.tables import truth_table
    from edgetune.powermodes.grids import fulcrum_grid

    coordinator, stub = leader
    for n in ("a", "b"):
        _register(stub, n)
    stub.PlanRound(_plan_request(["a", "b"]))
    _register(stub, "inf", budget=30.0)
    rows = truth_table(SPEC, "mobilenetv3", "infer", fulcrum_grid(SPEC).modes(), (1, 4, 16, 32, 64))
    coordinator.store.put_measurements([MeasurementRecord.from_row({**r, "id": f"inf-{i}", "device": SPEC.name,
                                                                    "node": "inf"}) for i, r in enumerate(rows)])

    def update(**budgets) -> coordinator_pb2.UpdateBudgetResponse:
        return stub.UpdateBudget(coordinator_pb2.UpdateBudgetRequest(
            node_id="inf", budgets=common_pb2.Budgets(**budgets),
            workload=common_pb2.Workload(name="mobilenetv3", role=common_pb2.ROLE_INFER)))

    low = update(arrival_rps=50.0, latency_budget_ms=100.0)
    assert low.config_revision == 1 and not low.reason
    assert (low.budgets.arrival_rps, low.budgets.latency_budget_ms, low.budgets.power_budget_w) == (50.0, 100.0, 30.0)
    cfg = stub.GetNodeConfig(coordinator_pb2.GetNodeConfigRequest(node_id="inf"))
    assert cfg.workload.role == common_pb2.ROLE_INFER and cfg.workload.name == "mobilenetv3" and cfg.batch_size == 1
    assert update(arrival_rps=50.0).config_revision == 1  # the same rate: no new revision
    high = update(arrival_rps=400.0)
    cfg = stub.GetNodeConfig(coordinator_pb2.GetNodeConfigRequest(node_id="inf"))
    assert high.config_revision == 2 and cfg.revision == 2 and cfg.batch_size > 1
    for n in ("a", "b"):
        assert stub.GetNodeConfig(coordinator_pb2.GetNodeConfigRequest(node_id=n)).revision == 1
    too_fast = update(arrival_rps=5000.0)
    assert too_fast.config_revision == 2 and "keep up" in too_fast.reason

    code, details = _code(stub.UpdateBudget, coordinator_pb2.UpdateBudgetRequest(
        node_id="inf", budgets=common_pb2.Budgets(arrival_rps=-1.0)))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "budgets.arrival_rps" in details
    code, details = _code(stub.UpdateBudget, coordinator_pb2.UpdateBudgetRequest(
        node_id="inf", budgets=common_pb2.Budgets(arrival_rps=10.0, latency_budget_ms=0.0)))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "budgets.latency_budget_ms" in details
    code, details = _code(stub.UpdateBudget, coordinator_pb2.UpdateBudgetRequest(
        budgets=common_pb2.Budgets(arrival_rps=10.0)))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "node_id" in details
    code, details = _code(stub.UpdateBudget, coordinator_pb2.UpdateBudgetRequest(
        node_id="a", budgets=common_pb2.Budgets(arrival_rps=10.0, latency_budget_ms=100.0),
        workload=common_pb2.Workload(name="yolov8n")))
    assert code == grpc.StatusCode.FAILED_PRECONDITION and "profile yolov8n with role infer" in details


def test_tuning_job_rpcs_and_submit_profiling(leader, store):
    coordinator, stub = leader
    node = _register(stub, "a", budget=30.0)
    spec = tuning_pb2.TuningJobSpec(name="mnv3", workload=common_pb2.Workload(name="mobilenetv3"),
                                    nodes=[node], profiles=12)
    bad = tuning_pb2.TuningJobSpec(name="mnv3", workload=common_pb2.Workload(name="mobilenetv3"),
                                   nodes=[node, node])
    code, details = _code(stub.SubmitTuningJob, tuning_pb2.SubmitTuningJobRequest(spec=bad))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "spec.nodes[1]" in details
    job = stub.SubmitTuningJob(tuning_pb2.SubmitTuningJobRequest(spec=spec))
    assert job.spec.name == "mnv3" and job.spec.profiles == 12 and job.phase == tuning_pb2.JOB_PHASE_PENDING
    watch = stub.WatchTuningJob(tuning_pb2.WatchTuningJobRequest(name="mnv3"), timeout=20)
    first = next(watch)
    assert first.revision >= job.revision
    # this coordinator has no --estimator / --optimizer: the leader's loop says so in the node's reason
    deadline = time.monotonic() + 10
    while True:
        got = stub.GetTuningJob(tuning_pb2.GetTuningJobRequest(name="mnv3"))
        if got.nodes and "--estimator" in got.nodes[0].reason:
            break
        assert time.monotonic() < deadline, got
        time.sleep(0.1)
    assert got.nodes[0].node_id == node and got.nodes[0].phase == tuning_pb2.NODE_PHASE_PENDING
    assert [j.spec.name for j in stub.ListTuningJobs(tuning_pb2.ListTuningJobsRequest()).jobs] == ["mnv3"]
    assert stub.CancelTuningJob(tuning_pb2.CancelTuningJobRequest(name="mnv3")).phase == \
        tuning_pb2.JOB_PHASE_CANCELLED
    assert any(j.phase == tuning_pb2.JOB_PHASE_CANCELLED for j in watch)  # the stream sees it
    code, details = _code(stub.GetTuningJob, tuning_pb2.GetTuningJobRequest(name="ghost"))
    assert code == grpc.StatusCode.NOT_FOUND and "name" in details

    request = tuning_pb2.SubmitProfilingRequest(node_id=node, job_id="p-1", request=profiler_pb2.ProfileRequest(
        workload=common_pb2.Workload(name="resnet18"), random_modes=4))
    assert not stub.SubmitProfiling(request).duplicate
    assert stub.SubmitProfiling(request).duplicate
    assert store.job_backlog(node) == 1  # queued once
    code, details = _code(stub.SubmitProfiling, tuning_pb2.SubmitProfilingRequest(node_id="ghost",
                                                                                  request=request.request))
    assert code == grpc.StatusCode.NOT_FOUND and "node_id" in details
    code, details = _code(stub.SubmitProfiling, tuning_pb2.SubmitProfilingRequest(
        node_id=node, request=profiler_pb2.ProfileRequest(workload=common_pb2.Workload(name="resnet18"))))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "request.modes" in details


def test_open_watches_and_feed_reads_are_on_the_metrics_endpoint(leader):
    """``edgetune_coordinator_config_watches`` counts the open WatchConfig streams and
    ``edgetune_coordinator_config_feed_reads_total`` the hub's reads of the change feed (what the
    watch bench and an operator's scraper read); a stream cancelled leaves the gauge."""
    from prometheus_client import REGISTRY

    from edgetune.clients.coordinator import CoordinatorClient

    coordinator, stub = leader
    ids = [_register(stub, f"metrics-{i}") for i in range(3)]

    def sample(name: str) -> float:
        value = REGISTRY.get_sample_value(name)
        assert value is not None, name
        return value

    before = sample("edgetune_coordinator_config_watches")
    with grpc.insecure_channel(coordinator.server.address) as channel:
        client = CoordinatorClient(channel)
        streams = [client.watch_config(i) for i in ids]
        deadline = time.monotonic() + 10
        while sample("edgetune_coordinator_config_watches") < before + 3 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert sample("edgetune_coordinator_config_watches") == before + 3
        reads = sample("edgetune_coordinator_config_feed_reads_total")
        stub.PlanRound(_plan_request(ids[:1]))  # one published config: the hub reads it from the feed
        assert next(streams[0]).revision == 1
        assert sample("edgetune_coordinator_config_feed_reads_total") > reads
        for s in streams:
            s.close()
        deadline = time.monotonic() + 10
        while sample("edgetune_coordinator_config_watches") > before and time.monotonic() < deadline:
            time.sleep(0.02)
        assert sample("edgetune_coordinator_config_watches") == before
