"""The edgetune suite on loopback: embedded Redis, coordinator, estimator, optimizer and one
profiler agent per simulated Jetson, each a process of the :class:`Supervisor`, with the
generated gRPC stubs the story talks to."""

from __future__ import annotations

from dataclasses import dataclass, field

import grpc

from edgetune.coordination.processes import Child, Supervisor
from edgetune.coordination.store import Store, open_store
from edgetune.demo.estimation import (
    ESTIMATOR_MODULE,
    Estimator,
    LocalEstimator,
    ServiceEstimator,
    service_available,
)
from edgetune.proto.v1 import coordinator_pb2, coordinator_pb2_grpc, optimizer_pb2_grpc, profiler_pb2_grpc

#: Big enough for PowerTrain-grid candidate tables (7k rows) in one message.
MAX_MESSAGE = 64 * 1024 * 1024
_CHANNEL_OPTIONS = [("grpc.max_send_message_length", MAX_MESSAGE),
                    ("grpc.max_receive_message_length", MAX_MESSAGE)]


@dataclass(frozen=True)
class NodeSpec:
    """One simulated Jetson of the fleet."""

    node_id: str
    device: str  # simulated device model (DeviceSpec.name)
    budget_w: float
    samples: int  # local training samples per federated round


#: The demo fleet: two of each AGX, an Orin Nano and a Nano, each with its own budget and data.
FLEET: tuple[NodeSpec, ...] = (
    NodeSpec("orin-1", "orin-agx", 30.0, 6000),
    NodeSpec("orin-2", "orin-agx", 20.0, 5000),
    NodeSpec("xavier-1", "xavier-agx", 25.0, 4000),
    NodeSpec("xavier-2", "xavier-agx", 15.0, 3000),
    NodeSpec("orin-nano-1", "orin-nano", 10.0, 1500),
    NodeSpec("nano-1", "nano", 7.0, 600),
)


@dataclass
class Agent:
    node: NodeSpec
    child: Child
    stub: profiler_pb2_grpc.ProfilerStub


@dataclass
class Suite:
    """Running services and their stubs; :meth:`close` (via the supervisor) stops them all."""

    supervisor: Supervisor
    store: Store
    coordinator: coordinator_pb2_grpc.CoordinatorStub
    optimizer: optimizer_pb2_grpc.OptimizerStub
    estimator: Estimator
    agents: dict[str, Agent] = field(default_factory=dict)
    channels: list[grpc.Channel] = field(default_factory=list)

    def rows(self) -> list[dict]:
        """One row per process: name, pid, address, log file."""
        out = []
        if self.supervisor.redis is not None:
            out.append({"process": "redis (embedded)", "pid": self.supervisor.redis.pid,
                        "address": self.supervisor.redis.url, "log": "-"})
        for c in self.supervisor.children:
            out.append({"process": c.name, "pid": c.pid, "address": c.address, "log": c.log_path.name})
        return out

    def close(self) -> None:
        for ch in self.channels:
            ch.close()
        try:
            self.store.close()
        finally:
            self.supervisor.close()


def _channel(suite_channels: list[grpc.Channel], address: str) -> grpc.Channel:
    ch = grpc.insecure_channel(address, options=_CHANNEL_OPTIONS)
    suite_channels.append(ch)
    return ch


def start_suite(sup: Supervisor, fleet: tuple[NodeSpec, ...], *, seed: int = 0, use_service: bool | None = None,
                ray: bool = True, on_started=lambda name, child: None) -> Suite:
    """Start every service under ``sup`` and return the :class:`Suite`; ``on_started(name, child)``
    is called as each one serves. ``use_service``: None = the estimator service when installed;
    ``ray``: the estimator runs its tasks on a local Ray (False: one after another, in-process)."""
    redis = sup.start_redis()
    on_started("redis", None)
    channels: list[grpc.Channel] = []
    store = open_store(redis.url)
    common = ["--redis", redis.url, "--log-level", "INFO"]

    lease_key = store.key("leader", "coordinator")
    coord = sup.spawn("coordinator", ["-m", "edgetune.services.coordinator.server", "--host", "127.0.0.1",
                                      "--port", "0", "--metrics-port", "0", "--grace-s", "1", *common,
                                      "--lease-ms", "2000", "--heartbeat-ttl-s", "10", "--replica-id", "demo",
                                      "--kube", "none"])
    # The leader plans (PlanRound, UpdateBudget): wait for the lease as well as for health.
    sup.wait_ready(coord, "edgetune.v1.Coordinator", extra=lambda: bool(store.client.get(lease_key)))
    on_started("coordinator", coord)
    coordinator = coordinator_pb2_grpc.CoordinatorStub(_channel(channels, coord.address))

    # Agents start together (their start-up overlaps), then each is awaited.
    spawned = {}
    for i, node in enumerate(fleet):
        spawned[node.node_id] = sup.spawn(f"agent-{node.node_id}", [
            "-m", "edgetune.services.profiler.server", "--host", "127.0.0.1", "--port", "0", "--metrics-port", "0",
            "--grace-s", "1", *common, "--device", f"sim:{node.device}", "--node-id", node.node_id,
            "--seed", str(seed + i), "--state-dir", str(sup.log_dir / "agent-state" / node.node_id),
            "--coordinator", coord.address, "--power-budget-w", f"{node.budget_w:g}"])

    use_service = service_available() if use_service is None else use_service
    est_child = None
    if use_service:
        est_child = sup.spawn("estimator", ["-m", ESTIMATOR_MODULE, "--host", "127.0.0.1", "--port", "0",
                                            "--metrics-port", "0", "--grace-s", "1", *common,
                                            *([] if ray else ["--no-ray"])])
    opt = sup.start_service("optimizer", "edgetune.services.optimizer.server", "edgetune.v1.Optimizer", common)
    on_started("optimizer", opt)
    optimizer = optimizer_pb2_grpc.OptimizerStub(_channel(channels, opt.address))

    agents = {}
    for node in fleet:
        child = spawned[node.node_id]
        sup.wait_ready(child, "edgetune.v1.Profiler")
        on_started(child.name, child)
        agents[node.node_id] = Agent(node, child, profiler_pb2_grpc.ProfilerStub(_channel(channels, child.address)))

    if est_child is not None:
        sup.wait_ready(est_child, "edgetune.v1.Estimator")
        on_started("estimator", est_child)
        estimator: Estimator = ServiceEstimator(_channel(channels, est_child.address), est_child.address,
                                                "local Ray" if ray else "no Ray")
    else:
        estimator = LocalEstimator()
    return Suite(sup, store, coordinator, optimizer, estimator, agents, channels)


def registered(suite: Suite) -> dict[str, coordinator_pb2.NodeInfo]:
    return {n.node_id: n for n in suite.coordinator.ListNodes(coordinator_pb2.ListNodesRequest(), timeout=10).nodes}
