"""The whole control plane on this machine (``edgetune up``): Redis, estimator, optimizer,
coordinator and one simulated profiler agent per node, as a :class:`LocalCluster`.

Nodes are asked for as ``DEVICE[:COUNT][@WATTS]`` items (``orin-agx:2,xavier-agx@20,nano``);
each gets the id ``DEVICE-N`` (N counts from 1 per device across the whole list) and registers
with its power budget: ``@WATTS`` when given, else the device's default, halfway between its
idle and its maximum board power in whole watts (:func:`default_budget_w`: AGX Orin 34 W, AGX
Xavier 29 W, Orin Nano 10 W, Nano 6 W) — tight enough that most modes are excluded, loose enough
that every built-in device has modes within it with room for the risk margin (half the
*maximum* left an Orin Nano at 7.5 W with no mode whose 95 % power bound fit).

Reference models: a job transfers from a reference (PowerTrain), which a fresh control plane
does not have. :func:`fit_references` fits one per device model of the fleet through the
Estimator's ``Fit`` — a reference *workload* (ResNet18 training by default) profiled on the
simulated board's truth over up to :data:`REFERENCE_POINTS` modes of the fulcrum grid — named
:func:`reference_model_id` (``reference-orin-agx-train``), for a job file's ``reference_model``.

Start order follows who must know whom: Redis, then the estimator and the optimizer (started
together), then the coordinator with their addresses (``--estimator`` / ``--optimizer``), then the agents,
which register with it. Stopping is the supervisor's: agents first (they restore their modes).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import numpy as np

from edgetune import validation
from edgetune.base.mode import PowerMode
from edgetune.base.roles import Role
from edgetune.clients.estimator import EstimatorClient
from edgetune.devices.simulated.tables import truth_table
from edgetune.errors import InvalidArgument
from edgetune.estimation.records import FitSpec, MeasuredRow
from edgetune.localrun.localcluster import LocalCluster
from edgetune.localrun.processes import Child, Supervisor
from edgetune.powermodes.grids import named_grid
from edgetune.powermodes.specs import SPECS, get_spec
from edgetune.tuning.protocols import reference_model_id

NODES_ALLOWED = "DEVICE[:COUNT][@WATTS] items separated by commas, e.g. orin-agx:2,xavier-agx@20,nano"
#: The reference workload and how many of its modes a reference is fitted on.
REFERENCE_WORKLOAD = "resnet18"
REFERENCE_POINTS = 150
REFERENCE_BATCH_SIZE = 16
REFERENCE_EPOCHS = 200
#: At most this many agents per ``up`` (each is a process: beyond it, use a real cluster).
MAX_NODES = 64


@dataclass(frozen=True)
class NodeRequest:
    """One ``DEVICE[:COUNT][@WATTS]`` item of ``--nodes``."""

    device: str
    count: int = 1
    budget_w: float | None = None


@dataclass(frozen=True)
class LocalNode:
    """A simulated node ``up`` runs: its id, device model and registered power budget."""

    node_id: str
    device: str
    budget_w: float


def default_budget_w(device: str) -> float:
    """Halfway between the device's idle and maximum board power, in whole watts (a node's
    registered budget when ``@WATTS`` is absent)."""
    spec = get_spec(device)
    return float(round((spec.idle_power_w + spec.max_power_w) / 2))


def parse_nodes(text: str, field_name: str = "--nodes") -> list[NodeRequest]:
    """``orin-agx:2,xavier-agx@20,nano`` -> requests; InvalidArgument naming the bad item."""
    items = [item.strip() for item in str(text).split(",")]
    if not any(items):
        raise InvalidArgument(field_name, "no nodes given", NODES_ALLOWED)
    out: list[NodeRequest] = []
    for i, item in enumerate(items):
        where = f"{field_name}[{i}]"
        if not item:
            raise InvalidArgument(where, "empty item", NODES_ALLOWED)
        rest, _, watts = item.partition("@")
        device, _, count_text = rest.partition(":")
        device = device.strip()
        if device not in SPECS:
            raise InvalidArgument(where, f"unknown device {device!r}", ", ".join(SPECS))
        count = 1
        if count_text:
            try:
                count = int(count_text)
            except ValueError:
                raise InvalidArgument(where, f"count {count_text!r} is not an integer", NODES_ALLOWED) from None
            count = validation.count(count, where, maximum=MAX_NODES)
        budget: float | None = None
        if "@" in item:
            try:
                budget = float(watts)
            except ValueError:
                raise InvalidArgument(where, f"budget {watts!r} is not a number of watts", NODES_ALLOWED) from None
            budget = validation.power_budget_w(budget, where)
        out.append(NodeRequest(device, count, budget))
    total = sum(r.count for r in out)
    if total > MAX_NODES:
        raise InvalidArgument(field_name, f"{total} nodes asked for", f"at most {MAX_NODES}")
    return out


def local_nodes(requests: Sequence[NodeRequest]) -> list[LocalNode]:
    """Ids ``DEVICE-N`` (N from 1 per device, in list order) with their budgets."""
    seen: dict[str, int] = {}
    out: list[LocalNode] = []
    for request in requests:
        budget = request.budget_w if request.budget_w is not None else default_budget_w(request.device)
        for _ in range(request.count):
            seen[request.device] = seen.get(request.device, 0) + 1
            out.append(LocalNode(f"{request.device}-{seen[request.device]}", request.device, budget))
    return out


def fit_references(estimator_address: str, devices: Sequence[str], *, workload: str = REFERENCE_WORKLOAD,
                   seed: int = 0, points: int = REFERENCE_POINTS, epochs: int = REFERENCE_EPOCHS) -> dict[str, str]:
    """Fit a training reference per device model through the Estimator (the simulator's truth on
    ``points`` random fulcrum modes, ``epochs`` of training); ``device -> model id``."""
    out: dict[str, str] = {}
    with grpc.insecure_channel(estimator_address) as channel:
        estimator = EstimatorClient(channel, timeout_s=300)
        for device in dict.fromkeys(devices):  # once per model, in fleet order
            grid = named_grid(get_spec(device), "fulcrum").array()
            rng = np.random.default_rng(seed)
            grid = grid[np.sort(rng.choice(len(grid), min(points, len(grid)), replace=False))]
            rows = truth_table(device, workload, "train", grid, [REFERENCE_BATCH_SIZE])
            measurements = tuple(MeasuredRow(PowerMode.from_mapping(r), REFERENCE_BATCH_SIZE, r["time_ms"],
                                             r["power_w"], device, workload, Role.TRAIN) for r in rows)
            model_id = reference_model_id(device)
            estimator.fit(FitSpec(device, workload, Role.TRAIN, "nn", model_id, measurements, epochs, seed))
            out[device] = model_id
    return out


@dataclass
class ControlPlane:
    """The running processes of ``up``; :meth:`close` stops them all (agents first)."""

    cluster: LocalCluster
    nodes: list[LocalNode]
    estimator: Child | None = None
    optimizer: Child | None = None
    agents: dict[str, Child] = field(default_factory=dict)
    #: device model -> its reference model's id in the estimator
    references: dict[str, str] = field(default_factory=dict)

    @property
    def coordinator_address(self) -> str:
        assert self.cluster.coordinator is not None, "the control plane is not started"
        return self.cluster.coordinator.address

    @property
    def node_ids(self) -> list[str]:
        return [n.node_id for n in self.nodes]

    def ready_record(self) -> dict[str, object]:
        """The ready file's content (CONTRACT: ``{"coordinator": "HOST:PORT", "nodes": [...]}``)."""
        return {"coordinator": self.coordinator_address, "nodes": self.node_ids}

    def close(self) -> None:
        self.cluster.close()


def start_control_plane(workdir: Path, nodes: Sequence[LocalNode], *, redis_url: str | None = None,
                        ray: bool = True, seed: int = 0, log_level: str = "INFO", references: bool = True,
                        supervisor: Supervisor | None = None, workload_path: Sequence[Path] = (),
                        coordinator_args: Sequence[str] = ()) -> ControlPlane:
    """Start every process under one supervisor and return them once each serves (the agents
    once registered); on any failure everything started is stopped and the error raised.
    ``workload_path``: the agents' ``--workload-path`` (where jobs' MODULE:FUNCTION workloads live);
    ``coordinator_args``: more coordinator flags (``--transfer-epochs 100``)."""
    cluster = LocalCluster(Path(workdir), heartbeat_ttl_s=10.0, lease_ms=2000, replica_id="up", grace_s=1.0,
                           log_level=log_level, supervisor=supervisor, external_redis=redis_url,
                           workload_path=tuple(workload_path), coordinator_args=tuple(coordinator_args))
    plane = ControlPlane(cluster, list(nodes))
    cluster.start(coordinator=False)
    try:
        # Both start together (the estimator's Ray start-up is the slow one), then each is awaited.
        estimator = cluster.spawn_service("estimator", [] if ray else ["--no-ray"])
        optimizer = cluster.spawn_service("optimizer")
        plane.optimizer = cluster.wait_serving(optimizer, "edgetune.v1.Optimizer")
        plane.estimator = cluster.wait_serving(estimator, "edgetune.v1.Estimator")
        cluster.estimator, cluster.optimizer = plane.estimator, plane.optimizer  # -> --estimator / --optimizer
        cluster.start_coordinator()
        plane.agents = cluster.start_agents({n.node_id: (n.device, n.budget_w) for n in nodes}, seed=seed)
        if references:
            plane.references = fit_references(plane.estimator.address, [n.device for n in nodes], seed=seed)
    except BaseException:
        cluster.close()
        raise
    return plane
