"""The coordinator's state stays consistent and its watches scale (loopback gRPC, embedded Redis).

- a failing UpdateBudget (INVALID_ARGUMENT, FAILED_PRECONDITION) changes nothing;
- a config the agent's device refuses is reported as refused, with the reason, and is not
  counted as applied (a real agent on a simulated Orin AGX, linked with ``--coordinator``);
- after the store lost its data an open WatchConfig stream (and a new one from the old
  revision) still delivers the new config: a new epoch;
- 150 open WatchConfig streams (past redis-py's default pool of 100, one blocked read each
  before) share one feed reader: every RPC still answers and the coordinator holds at most
  its pool's connections.
"""

from __future__ import annotations

import threading
import time

import grpc
import harness
import pytest

from edgetune.base.mode import PowerMode
from edgetune.powermodes.specs import get_spec
from edgetune.proto.serde.common import spec_to_proto
from edgetune.proto.v1 import common_pb2, coordinator_pb2, coordinator_pb2_grpc
from edgetune.services.profiler.server import create_server, link_to_coordinator
from edgetune.store import EmbeddedStore, NodeConfig

SPEC = get_spec("orin-agx")
OPTIONS = common_pb2.PredictionTable(cores=[12, 8], cpu_mhz=[2201.6, 1728.0], gpu_mhz=[1300.5, 930.75],
                                     emc_mhz=[3199.0, 3199.0], batch_size=[32, 32], time_ms=[100.0, 150.0],
                                     power_w=[42.0, 30.0])


@pytest.fixture
def store():
    s = EmbeddedStore()
    yield s
    s.close()


@pytest.fixture
def leader(store):
    with harness.coordinator(store, host="127.0.0.1", membership_check_s=0) as coordinator, \
            grpc.insecure_channel(coordinator.server.address) as channel:
        yield coordinator, coordinator_pb2_grpc.CoordinatorStub(channel)


def _register(stub, node_id: str, budget_w: float = 50.0) -> None:
    stub.RegisterNode(coordinator_pb2.RegisterNodeRequest(node=coordinator_pb2.NodeInfo(
        node_id=node_id, device=spec_to_proto(SPEC), power_budget_w=budget_w)))


def _node(stub, node_id: str) -> coordinator_pb2.NodeInfo:
    return next(n for n in stub.ListNodes(coordinator_pb2.ListNodesRequest()).nodes if n.node_id == node_id)


def test_a_failing_update_budget_changes_nothing(leader):
    _, stub = leader
    _register(stub, "n1")
    assert stub.PlanRound(coordinator_pb2.PlanRoundRequest(
        round_id="r1", apply=True, workload=common_pb2.Workload(name="resnet18", role=common_pb2.ROLE_TRAIN),
        nodes=[coordinator_pb2.NodeRound(node_id="n1", samples=320, options=OPTIONS)])).feasible
    before = stub.GetNodeConfig(coordinator_pb2.GetNodeConfigRequest(node_id="n1"))
    bad = [  # a new budget with an inference update that fails after the budget itself was checked
        (coordinator_pb2.UpdateBudgetRequest(node_id="n1", budgets=common_pb2.Budgets(
            power_budget_w=35.0, arrival_rps=10.0)), grpc.StatusCode.INVALID_ARGUMENT),  # no workload standing
        (coordinator_pb2.UpdateBudgetRequest(node_id="n1", budgets=common_pb2.Budgets(
            power_budget_w=35.0, arrival_rps=10.0, latency_budget_ms=100.0),
            workload=common_pb2.Workload(name="mobilenetv3")), grpc.StatusCode.FAILED_PRECONDITION),  # not measured
        (coordinator_pb2.UpdateBudgetRequest(node_id="n1", budgets=common_pb2.Budgets(power_budget_w=-1.0)),
         grpc.StatusCode.INVALID_ARGUMENT),
    ]
    for request, code in bad:
        with pytest.raises(grpc.RpcError) as err:
            stub.UpdateBudget(request)
        assert err.value.code() == code, err.value.details()
        assert _node(stub, "n1").power_budget_w == 50.0
        assert stub.GetNodeConfig(coordinator_pb2.GetNodeConfigRequest(node_id="n1")) == before
    stub.UpdateBudget(coordinator_pb2.UpdateBudgetRequest(node_id="n1", budgets=common_pb2.Budgets(power_budget_w=35.0)))
    after = stub.GetNodeConfig(coordinator_pb2.GetNodeConfigRequest(node_id="n1"))
    assert _node(stub, "n1").power_budget_w == 35.0 == after.power_budget_w and after.revision == before.revision + 1


def test_a_refused_config_is_reported_as_refused_with_its_reason(leader, tmp_path):
    coordinator, stub = leader
    server, servicer = create_server("sim:orin-agx", port=0, host="127.0.0.1", redis_url="none",
                                     state_dir=tmp_path, node_id="agent-1", grace_s=0.5)
    server.start()
    link = link_to_coordinator(server, servicer, coordinator.server.address, server.address, power_budget_w=50.0)
    try:
        assert link.wait_registered(10)
        configs = coordinator.servicer.configs
        # A mode this device does not have (13 cores at 9,999 MHz): the leader's library path could push it.
        configs.publish(NodeConfig("agent-1", mode=PowerMode(13, 9999.0, 1300.5, 3199.0), batch_size=32))
        node = harness.wait_for(lambda: (n := _node(stub, "agent-1")).refused_revision == 1 and n, 10, "the refusal")
        assert node.applied_revision == 0 and "13" in node.refused_reason
        assert servicer.device.current_mode() != PowerMode(13, 9999.0, 1300.5, 3199.0)

        good = PowerMode(8, 1728.0, 930.75, 3199.0)
        configs.publish(NodeConfig("agent-1", mode=good, batch_size=32))
        node = harness.wait_for(lambda: (n := _node(stub, "agent-1")).applied_revision == 2 and n, 10, "the apply")
        assert (node.refused_revision, node.refused_reason) == (0, "")
        assert node.applied_epoch == configs.epoch() > 0 and servicer.device.current_mode() == good
    finally:
        server.stop(0.5)


def test_after_the_store_lost_its_data_watches_deliver_the_new_config(leader, store):
    coordinator, stub = leader
    configs = coordinator.servicer.configs
    _register(stub, "n1")
    for b in (16, 32, 64):
        configs.publish(NodeConfig("n1", mode=PowerMode(8, 1728.0, 930.75, 3199.0), batch_size=b))
    old = stub.GetNodeConfig(coordinator_pb2.GetNodeConfigRequest(node_id="n1"))
    assert old.revision == 3 and old.epoch > 0
    call = stub.WatchConfig(coordinator_pb2.WatchConfigRequest(node_id="n1", after_revision=3, after_epoch=old.epoch))
    got: list = []

    def read() -> None:
        try:
            got.extend(c for c in call)
        except grpc.RpcError:  # cancelled at the end
            pass

    threading.Thread(target=read, daemon=True).start()
    harness.wait_for(lambda: configs.hub.watches == 1, 10, "the stream to be open and waiting on the hub")

    store.client.flushall()  # Redis lost its data (a restart without persistence)
    time.sleep(0.01)  # the new epoch is a later millisecond
    _register(stub, "n1")
    configs.publish(NodeConfig("n1", mode=PowerMode(12, 2201.6, 1300.5, 3199.0), batch_size=8))
    harness.wait_for(lambda: got, 10, "the open stream to deliver revision 1 of the new epoch")
    assert (got[0].revision, got[0].batch_size) == (1, 8) and got[0].epoch > old.epoch
    # A new stream from the old (epoch, revision), as an agent reconnecting would open it.
    again = next(stub.WatchConfig(coordinator_pb2.WatchConfigRequest(node_id="n1", after_revision=3,
                                                                      after_epoch=old.epoch), timeout=10))
    assert (again.revision, again.epoch) == (1, got[0].epoch)
    reply = stub.Heartbeat(coordinator_pb2.HeartbeatRequest(node_id="n1"))
    assert (reply.config_revision, reply.config_epoch) == (1, got[0].epoch)
    call.cancel()


def test_many_open_watches_share_one_feed_reader_and_every_rpc_still_answers(leader, store):
    coordinator, stub = leader
    n = 150  # past redis-py's default pool of 100, which one blocked read per stream exhausted at ~97
    ids = [f"w{i:03d}" for i in range(n)]
    coordinator.server.limits.max_watches = n  # one channel here stands for n agents (each its own caller)
    for node_id in ids:
        _register(stub, node_id)
    calls = [stub.WatchConfig(coordinator_pb2.WatchConfigRequest(node_id=i)) for i in ids]
    try:
        hub = coordinator.servicer.configs.hub
        harness.wait_for(lambda: hub.watches == n, 30, "every stream to wait on the hub")
        for k in range(20):
            assert not stub.Heartbeat(coordinator_pb2.HeartbeatRequest(node_id=ids[k]), timeout=5).reregister
        assert len(stub.ListNodes(coordinator_pb2.ListNodesRequest(), timeout=5).nodes) == n
        coordinator.servicer.configs.publish_many(
            [NodeConfig(i, mode=PowerMode(8, 1728.0, 930.75, 3199.0), batch_size=32) for i in ids])
        got: dict[str, int] = {}

        def read(node_id: str, call) -> None:
            got[node_id] = next(call).revision

        readers = [threading.Thread(target=read, args=(i, c), daemon=True) for i, c in zip(ids, calls, strict=True)]
        for r in readers:
            r.start()
        for r in readers:
            r.join(20)
        assert got == {i: 1 for i in ids}
        clients = store.client.info("clients")["connected_clients"]
        assert clients <= 64 + 1, clients  # the store's pool, however many streams
    finally:
        for c in calls:
            c.cancel()
