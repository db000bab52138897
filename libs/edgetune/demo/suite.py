"""The edgetune control plane on loopback, started as ``edgetune up`` starts it: embedded Redis,
the estimator, the optimizer, the coordinator (whose reconcile loop runs tuning jobs) and one
profiler agent per simulated Jetson, under the demo's :class:`Supervisor` — with the typed clients
the story talks to (the coordinator's, the optimizer's, each agent's profiler; the estimator through
the tuning protocol's remote adapter)."""

from __future__ import annotations

from dataclasses import dataclass, field

import grpc

from edgetune.clients.coordinator import CoordinatorClient
from edgetune.clients.optimizer import OptimizerClient
from edgetune.clients.profiler import ProfilerClient
from edgetune.clients.tuning import ServiceEstimator
from edgetune.localrun.controlplane import LocalNode, start_control_plane
from edgetune.localrun.localcluster import LocalCluster
from edgetune.localrun.processes import Child, Supervisor
from edgetune.store import NodeRecord, Store
from edgetune.tuning.protocols import Estimator

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
    profiler: ProfilerClient


@dataclass
class Suite:
    """Running services and their clients; :meth:`close` (via the cluster's supervisor) stops them all."""

    cluster: LocalCluster
    coordinator: CoordinatorClient
    optimizer: OptimizerClient
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


def _channel(suite_channels: list[grpc.Channel], address: str) -> grpc.Channel:
    ch = grpc.insecure_channel(address, options=_CHANNEL_OPTIONS)
    suite_channels.append(ch)
    return ch


def start_suite(sup: Supervisor, fleet: tuple[NodeSpec, ...], *, seed: int = 0, ray: bool = True,
                transfer_epochs: int = 0, on_started=lambda name, child: None) -> Suite:
    """Start the control plane under ``sup`` as ``edgetune up`` does
    (:func:`~edgetune.localrun.controlplane.start_control_plane`: the coordinator told the
    estimator's and the optimizer's addresses, one agent per node registered with its budget) and
    return the :class:`Suite`; ``on_started(name, child)`` is called for each process once all serve.
    ``ray``: the estimator runs its tasks on a local Ray (False: one after another, in-process);
    ``transfer_epochs``: the coordinator's transfers (0: the tuning policy's)."""
    plane = start_control_plane(sup.log_dir, [LocalNode(n.node_id, n.device, n.budget_w) for n in fleet],
                                ray=ray, seed=seed, references=False, supervisor=sup,
                                coordinator_args=["--transfer-epochs", str(transfer_epochs)] if transfer_epochs else [])
    cluster = plane.cluster
    assert cluster.coordinator is not None and plane.estimator is not None and plane.optimizer is not None
    channels: list[grpc.Channel] = []
    on_started("redis", None)
    for name, child in (("estimator", plane.estimator), ("optimizer", plane.optimizer),
                        ("coordinator", cluster.coordinator)):
        on_started(name, child)
    agents = {}
    for node in fleet:
        child = plane.agents[node.node_id]
        on_started(child.name, child)
        agents[node.node_id] = Agent(node, child, ProfilerClient(_channel(channels, child.address)))
    estimator = ServiceEstimator(_channel(channels, plane.estimator.address), plane.estimator.address,
                                 "local Ray" if ray else "no Ray")
    optimizer = OptimizerClient(_channel(channels, plane.optimizer.address))
    coordinator = CoordinatorClient(_channel(channels, cluster.coordinator.address))
    return Suite(cluster, coordinator, optimizer, estimator, agents, channels)


def registered(suite: Suite) -> dict[str, NodeRecord]:
    return {n.node_id: n for n in suite.coordinator.nodes()}
