"""The edgetune suite on loopback: embedded Redis, coordinator, estimator, optimizer and one
profiler agent per simulated Jetson — a :class:`LocalCluster` under the demo's
:class:`Supervisor` — with the generated gRPC stubs the story talks to."""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass, field

import grpc

from edgetune.coordination.localcluster import LocalCluster
from edgetune.coordination.processes import Child, Supervisor
from edgetune.coordination.store import Store
from edgetune.proto.v1 import coordinator_pb2, coordinator_pb2_grpc, optimizer_pb2_grpc, profiler_pb2_grpc
from edgetune.tuning.protocols import Estimator
from edgetune.tuning.remote import ServiceEstimator

ESTIMATOR_MODULE = "edgetune.services.estimator.server"

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
    """Running services and their stubs; :meth:`close` (via the cluster's supervisor) stops them all."""

    cluster: LocalCluster
    coordinator: coordinator_pb2_grpc.CoordinatorStub
    optimizer: optimizer_pb2_grpc.OptimizerStub
    estimator: Estimator
    agents: dict[str, Agent] = field(default_factory=dict)
    channels: list[grpc.Channel] = field(default_factory=list)

    @property
    def supervisor(self) -> Supervisor:
        if self.cluster.supervisor is None:
            raise RuntimeError("the demo's cluster is not started")
        return self.cluster.supervisor

    @property
    def store(self) -> Store:
        if self.cluster.store is None:
            raise RuntimeError("the demo's cluster is not started")
        return self.cluster.store

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
        self.cluster.close()


def service_available() -> bool:
    """True when the estimator service is installed (``edgetune serve estimator``)."""
    try:
        return importlib.util.find_spec(ESTIMATOR_MODULE) is not None
    except ModuleNotFoundError:
        return False


def _channel(suite_channels: list[grpc.Channel], address: str) -> grpc.Channel:
    ch = grpc.insecure_channel(address, options=_CHANNEL_OPTIONS)
    suite_channels.append(ch)
    return ch


def start_suite(sup: Supervisor, fleet: tuple[NodeSpec, ...], *, seed: int = 0, use_service: bool | None = None,
                ray: bool = True, on_started=lambda name, child: None) -> Suite:
    """Start every service under ``sup`` (as a :class:`LocalCluster`) and return the :class:`Suite`;
    ``on_started(name, child)`` is called as each one serves. ``use_service``: None = the estimator
    service when installed; ``ray``: the estimator runs its tasks on a local Ray (False: one after
    another, in-process)."""
    cluster = LocalCluster(sup.log_dir, heartbeat_ttl_s=10.0, lease_ms=2000, replica_id="demo", grace_s=1.0,
                           supervisor=sup).start()  # Suite.close (or the demo's sup.close) stops it
    channels: list[grpc.Channel] = []
    on_started("redis", None)
    on_started("coordinator", cluster.coordinator)

    # Agents and the estimator start together (their start-ups overlap), then each is awaited.
    spawned = {node.node_id: cluster.spawn_agent(node.node_id, node.device, node.budget_w, seed=seed + i)
               for i, node in enumerate(fleet)}
    use_service = service_available() if use_service is None else use_service
    est_child = cluster.spawn_service("estimator", [] if ray else ["--no-ray"]) if use_service else None
    opt = cluster.start_service("optimizer", "edgetune.v1.Optimizer")
    on_started("optimizer", opt)
    optimizer = optimizer_pb2_grpc.OptimizerStub(_channel(channels, opt.address))

    agents = {}
    for node in fleet:
        child = cluster.wait_serving(spawned[node.node_id], "edgetune.v1.Profiler")
        on_started(child.name, child)
        agents[node.node_id] = Agent(node, child, profiler_pb2_grpc.ProfilerStub(_channel(channels, child.address)))

    if est_child is not None:
        cluster.wait_serving(est_child, "edgetune.v1.Estimator")
        on_started("estimator", est_child)
        estimator: Estimator = ServiceEstimator(_channel(channels, est_child.address), est_child.address,
                                                "local Ray" if ray else "no Ray")
    else:  # the same pipeline in this process, through the same protocol
        from edgetune.tuning.local import LibraryEstimator

        estimator = LibraryEstimator()
        estimator.where = "estimation library in-process (no estimator service in this checkout)"
    if cluster.coordinator is None:
        raise RuntimeError("the demo's cluster started no coordinator")
    coordinator = coordinator_pb2_grpc.CoordinatorStub(_channel(channels, cluster.coordinator.address))
    return Suite(cluster, coordinator, optimizer, estimator, agents, channels)


def registered(suite: Suite) -> dict[str, coordinator_pb2.NodeInfo]:
    return {n.node_id: n for n in suite.coordinator.ListNodes(coordinator_pb2.ListNodesRequest(), timeout=10).nodes}
