"""Crash consistency with real processes: a coordinator SIGKILLed around each multi-key write,
Redis restarted with and without its data, two profiler agents on simulated Orin AGX boards.

The kill comes from the coordinator itself at a named point (``EDGETUNE_FAULT_POINT``,
:mod:`edgetune.control.faults`): just before and just after the one atomic write of a
round publish (configs + ``round:last``) and of a budget change (registration + re-planned
configs). A replacement coordinator starts on the same port (the agents' ``--coordinator``).
Afterwards the registry, the configs, the last round and the agents agree, and every node's
(epoch, revision) only went up.
"""

from __future__ import annotations

import shutil
import time

import grpc
import pytest
from harness import durable_redis, free_port, restart_redis

from edgetune.clients.coordinator import CoordinatorClient
from edgetune.control.faults import ENV as FAULT_ENV
from edgetune.localrun.localcluster import LocalCluster
from edgetune.localrun.processes import Child, Supervisor
from edgetune.proto.serde.common import mode_from_proto
from edgetune.proto.v1 import common_pb2, coordinator_pb2, coordinator_pb2_grpc
from edgetune.store import EmbeddedRedisServer

pytestmark = [pytest.mark.integration, pytest.mark.slow]

NODES = ("a", "b")
# FAST 42 W, MID 30 W, SLOW 15 W: a budget of 50 W runs FAST, 35 W MID, 20 W SLOW.
OPTIONS = common_pb2.PredictionTable(
    cores=[12, 8, 4], cpu_mhz=[2201.6, 1728.0, 1190.4], gpu_mhz=[1300.5, 930.75, 624.75],
    emc_mhz=[3199.0, 3199.0, 2133.0], batch_size=[32, 32, 32], time_ms=[100.0, 150.0, 300.0],
    power_w=[42.0, 30.0, 15.0])
POWER_OF_CORES = {12: 42.0, 8: 30.0, 4: 15.0}


def _plan(round_id: str) -> coordinator_pb2.PlanRoundRequest:
    return coordinator_pb2.PlanRoundRequest(
        round_id=round_id, workload=common_pb2.Workload(name="resnet18", role=common_pb2.ROLE_TRAIN), apply=True,
        nodes=[coordinator_pb2.NodeRound(node_id=n, samples=320, options=OPTIONS) for n in NODES])


def _budget(node_id: str, watts: float) -> coordinator_pb2.UpdateBudgetRequest:
    return coordinator_pb2.UpdateBudgetRequest(node_id=node_id, budgets=common_pb2.Budgets(power_budget_w=watts))


class Fleet:
    """The cluster, its coordinator on a fixed port (replaced after each kill) and what was seen."""

    def __init__(self, cluster: LocalCluster, port: int, monkeypatch: pytest.MonkeyPatch) -> None:
        self.cluster, self.port, self.monkeypatch = cluster, port, monkeypatch
        self.starts = 0
        self.armed: str | None = None
        self.coordinator: Child | None = None
        self.channel: grpc.Channel | None = None
        self.stub: coordinator_pb2_grpc.CoordinatorStub | None = None
        #: node -> (epoch, revision) of every config read: must never go down.
        self.seen: dict[str, list[tuple[int, int]]] = {n: [] for n in NODES}
        self.redis: EmbeddedRedisServer | None = None

    def restart_redis(self, *, keep_data: bool) -> None:
        """Stop Redis (SIGTERM: the AOF is flushed) and start it on the same port, with or without its data."""
        assert self.redis is not None
        self.redis = restart_redis(self.redis, before_start=(lambda _dir: None) if keep_data else shutil.rmtree)

    def retry(self, call, timeout_s: float = 30.0):
        """``call(stub)`` until the coordinator is back on its feet (store reconnected, lease taken again)."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                return call(self.stub)
            except grpc.RpcError as exc:
                if exc.code() not in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.FAILED_PRECONDITION) or \
                        time.monotonic() > deadline:
                    raise
                time.sleep(0.2)

    def start_coordinator(self, fault: str | None = None) -> coordinator_pb2_grpc.CoordinatorStub:
        self.starts += 1
        self.armed = fault
        replica = f"c{self.starts}"
        if fault:
            self.monkeypatch.setenv(FAULT_ENV, fault)
        try:
            child = self.cluster.spawn_coordinator(replica, f"coordinator-{self.starts}", port=self.port)
        finally:
            self.monkeypatch.delenv(FAULT_ENV, raising=False)
        store = self.cluster.store
        assert store is not None and self.cluster.supervisor is not None
        # A killed leader's lease runs out first (lease_ms), then this replica leads.
        self.cluster.supervisor.wait_ready(
            child, "edgetune.v1.Coordinator",
            extra=lambda: (store.lease_holder("coordinator") or "").startswith(replica + "@"))
        self.coordinator = child
        if self.channel is not None:
            self.channel.close()
        self.channel = grpc.insecure_channel(child.address)
        self.stub = coordinator_pb2_grpc.CoordinatorStub(self.channel)
        return self.stub

    def killed_at(self, fault: str, call, next_fault: str | None = None) -> None:
        """``call`` reaches the coordinator armed with ``fault``: it dies there; a replacement
        starts (armed with ``next_fault``: one start serves as the next trial's too)."""
        assert self.coordinator is not None and self.armed == fault
        with pytest.raises(grpc.RpcError) as err:
            call(self.stub)
        assert err.value.code() == grpc.StatusCode.UNAVAILABLE
        self.coordinator.proc.wait(10)
        assert self.coordinator.proc.returncode == -9  # SIGKILL, at the named point
        self.start_coordinator(next_fault)
        self.wait_live()

    def wait_live(self, timeout_s: float = 60.0) -> None:
        """Until every agent beats again (they back off while the coordinator is away; a node without
        a live heartbeat is planned around)."""
        deadline = time.monotonic() + timeout_s
        while True:
            listed = {n.node_id: n.state for n in self.retry(
                lambda s: s.ListNodes(coordinator_pb2.ListNodesRequest(), timeout=10)).nodes}
            if all(listed.get(n) not in (None, "lost") for n in NODES):
                return
            assert time.monotonic() < deadline, f"the agents did not come back: {listed}"
            time.sleep(0.2)

    def state(self) -> tuple[dict[str, float], dict[str, coordinator_pb2.NodeConfig], str]:
        assert self.stub is not None and self.cluster.store is not None
        budgets = {n.node_id: n.power_budget_w for n in self.stub.ListNodes(coordinator_pb2.ListNodesRequest(),
                                                                             timeout=10).nodes}
        configs = {n: self.stub.GetNodeConfig(coordinator_pb2.GetNodeConfigRequest(node_id=n), timeout=10)
                   for n in NODES}
        for n, cfg in configs.items():
            self.seen[n].append((cfg.epoch, cfg.revision))
            assert self.seen[n] == sorted(self.seen[n]), f"{n}: (epoch, revision) went backwards: {self.seen[n]}"
        last = self.cluster.store.get_round()
        return budgets, configs, last.request["round_id"] if last is not None else ""

    def check_consistent(self, round_id: str, budgets_w: dict[str, float]) -> dict[str, coordinator_pb2.NodeConfig]:
        """Registry, configs and the last round agree; each config is the best mode within its budget."""
        budgets, configs, last = self.state()
        assert last == round_id
        assert budgets == budgets_w
        for n, cfg in configs.items():
            assert cfg.round_id == round_id, (n, cfg.round_id)
            assert cfg.power_budget_w == budgets[n], (n, cfg.power_budget_w, budgets[n])
            best = max(p for p in POWER_OF_CORES.values() if p <= budgets[n])
            assert POWER_OF_CORES[cfg.mode.cores] == best, (n, cfg.mode.cores, budgets[n])
        return configs

    def agents_follow(self, configs: dict[str, coordinator_pb2.NodeConfig], timeout_s: float = 20.0) -> None:
        """Every agent applied its config (heartbeat: revision, epoch, and the mode it runs)."""
        assert self.stub is not None
        deadline = time.monotonic() + timeout_s
        while True:
            listed = {n.node_id: n for n in self.stub.ListNodes(coordinator_pb2.ListNodesRequest(), timeout=10).nodes}
            done = [n for n in NODES if n in listed and (listed[n].applied_revision, listed[n].applied_epoch) ==
                    (configs[n].revision, configs[n].epoch) and listed[n].current_mode.cores and
                    mode_from_proto(listed[n].current_mode) == mode_from_proto(configs[n].mode)]
            if len(done) == len(NODES):
                return
            assert time.monotonic() < deadline, f"agents did not apply their configs: {listed} vs {configs}"
            time.sleep(0.2)


@pytest.fixture
def fleet(request, tmp_path, monkeypatch):
    """The cluster; its first coordinator armed with ``request.param`` (indirect parametrization) if given."""
    redis = durable_redis(tmp_path / "redis")
    # Generous start-up time: each process imports the whole stack (seconds on a busy CI box).
    # A 2 s lease: a busy box must not make the leader miss its renewals (a 1 s one flapped).
    cluster = LocalCluster(tmp_path, external_redis=redis.url, lease_ms=2000, heartbeat_ttl_s=3.0,
                           supervisor=Supervisor(tmp_path, start_timeout_s=180.0))
    f = Fleet(cluster, free_port(), monkeypatch)
    f.redis = redis
    try:
        cluster.start(coordinator=False)
        f.start_coordinator(getattr(request, "param", None))
        cluster.coordinator = f.coordinator  # the agents' --coordinator
        cluster.client = CoordinatorClient(f.channel)  # start_agents waits on the fleet's coordinator
        cluster.start_agents({n: ("orin-agx", 50.0) for n in NODES})
        yield f
    finally:
        if f.channel is not None:
            f.channel.close()
        cluster.close()
        f.redis.stop()


@pytest.mark.parametrize("fleet", ["round.planned"], indirect=True)
def test_a_coordinator_killed_around_each_write_leaves_registry_configs_round_and_agents_agreeing(fleet):
    # -- a round publish: configs + round:last -----------------------------------------------------
    store = fleet.cluster.store
    fleet.killed_at("round.planned", lambda s: s.PlanRound(_plan("r1"), timeout=30), "round.committed")
    assert store.get_round() is None and store.config_revisions(NODES) == {"a": 0, "b": 0}  # nothing of r1
    fleet.killed_at("round.committed", lambda s: s.PlanRound(_plan("r3"), timeout=30), "budget.planned")
    r3 = fleet.check_consistent("r3", {"a": 50.0, "b": 50.0})  # all of r3: its configs and round:last

    # -- a budget change: the registration + the configs re-planned for it ------------------------
    fleet.killed_at("budget.planned", lambda s: s.UpdateBudget(_budget("a", 35.0), timeout=30), "budget.committed")
    assert fleet.check_consistent("r3", {"a": 50.0, "b": 50.0}) == r3  # neither the budget nor its configs
    fleet.killed_at("budget.committed", lambda s: s.UpdateBudget(_budget("a", 35.0), timeout=30))
    after = fleet.check_consistent("r3", {"a": 35.0, "b": 50.0})  # both; the budget re-planned r3, not r1
    assert after["b"].revision == r3["b"].revision and after["a"].revision == r3["a"].revision + 1
    fleet.agents_follow(after)

    # A failing UpdateBudget changes nothing (the inference path fails after the budget is checked).
    with pytest.raises(grpc.RpcError) as err:
        fleet.retry(lambda s: s.UpdateBudget(coordinator_pb2.UpdateBudgetRequest(
            node_id="b", budgets=common_pb2.Budgets(power_budget_w=20.0, arrival_rps=10.0)), timeout=30))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert fleet.check_consistent("r3", {"a": 35.0, "b": 50.0}) == after


def test_after_redis_restarts_with_or_without_its_data_registry_configs_and_agents_agree(fleet):
    assert fleet.retry(lambda s: s.PlanRound(_plan("r3"), timeout=30)).feasible
    fleet.retry(lambda s: s.UpdateBudget(_budget("a", 35.0), timeout=30))
    after = fleet.check_consistent("r3", {"a": 35.0, "b": 50.0})

    # -- Redis restarts with its data (AOF): the same epoch, revisions go on, watches stream on ----
    fleet.restart_redis(keep_data=True)
    fleet.wait_live()
    fleet.retry(lambda s: s.UpdateBudget(_budget("a", 20.0), timeout=30))
    kept = fleet.check_consistent("r3", {"a": 20.0, "b": 50.0})
    assert kept["a"].revision == after["a"].revision + 1 == 3 and kept["a"].epoch == after["a"].epoch
    fleet.agents_follow(kept)

    # -- ... and without it: the agents register again (with their own budgets); revisions count
    # anew in a new epoch, and a watch that saw revision 3 of the old epoch still gets revision 1.
    fleet.restart_redis(keep_data=False)
    fleet.wait_live()  # registered again
    assert fleet.cluster.store.get_round() is None and fleet.cluster.store.get_config("a") is None
    assert fleet.retry(lambda s: s.PlanRound(_plan("r4"), timeout=30)).feasible
    fleet.retry(lambda s: s.UpdateBudget(_budget("b", 35.0), timeout=30))
    configs = fleet.check_consistent("r4", {"a": 50.0, "b": 35.0})
    assert configs["a"].revision == 1 < kept["a"].revision and configs["a"].epoch > kept["a"].epoch
    fleet.agents_follow(configs)
