"""Flower (``flwr``) integration: every federated round planned by the edgetune coordinator.

Server side, :class:`PowerAwareStrategy` wraps any ``flwr.server.strategy.Strategy``
(FedAvg, FedProx, ...). Each round it lets the wrapped strategy sample clients, maps each
client to its edgetune node (the client's ``edgetune_node_id`` property, or a ``cid`` →
node mapping) and makes sure the coordinator has tuned those nodes for the workload: it
submits a **TuningJob** (``SubmitTuningJob``, :class:`Tuning`: the risk as a probability, the
profiling budget, method and reference) and follows it (``WatchTuningJob``) until every node is
Applied. The coordinator's reconcile loop runs the shared workflow (:class:`~edgetune.tuning.NodeTuner`
under the tuning policy): profile, transfer, safe selection at the risk, the choice measured on
the node, a measured miss dropped and selected again. The strategy then plans the round
(``PlanRound`` with ``apply``: the configs are stored and pushed to the agents) from each node's
verified option (its mode and batch size, the measured time, the larger of the measured power
and the predicted bound), reads each node's config (``GetNodeConfig``) and adds it to the
client's ``FitIns`` config::

    batch_size, cores, cpu_mhz, gpu_mhz, emc_mhz, config_revision,
    edgetune_node_id, edgetune_round_id, edgetune_agent (the node agent's address)

The job is read again every round: a node whose budget changed (``UpdateBudget``) is selected
again by the coordinator, and the round waits for that verified choice. A node the job could
not tune within its budget stops the run (FailedPrecondition with the job's reason), as does an
infeasible plan, rather than train outside the budgets; a client whose node the coordinator
planned around (heartbeat lost, cordoned) sits the round out.

Client side, :class:`PowerAwareClient` wraps a ``NumPyClient``: it reports its node id and
sample count as properties, and around local training applies the planned mode through the
node's agent (``ApplyPowerMode``, validated against the device's tables, guarded by the
agent's ModeGuard) and restores it afterwards (``RestorePowerMode``), even when training
fails. The wrapped client reads the planned ``batch_size`` from its config.
:func:`power_mode` is the same bracket as a context manager for other client shapes.

Needs the ``flower`` extra (``flwr[simulation]==1.41.0``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TypeVar

import grpc
from flwr.client import NumPyClient
from flwr.common import (
    Config,
    EvaluateIns,
    EvaluateRes,
    FitIns,
    FitRes,
    GetPropertiesIns,
    NDArrays,
    Parameters,
    Scalar,
)
from flwr.server.client_manager import ClientManager
from flwr.server.client_proxy import ClientProxy
from flwr.server.strategy import Strategy

from edgetune import validation
from edgetune.base.mode import MODE_FIELDS, PowerMode
from edgetune.base.records import Predictions
from edgetune.base.roles import Role
from edgetune.clients.profiler import ProfilerClient
from edgetune.errors import FailedPrecondition, InvalidArgument
from edgetune.identity import ClientSecurity, open_channel
from edgetune.proto.serde.common import ROUND_OBJECTIVE, mode_from_proto, role_to_proto
from edgetune.proto.serde.tables import table_to_proto
from edgetune.proto.serde.tuning import METHODS
from edgetune.proto.v1 import (
    common_pb2,
    coordinator_pb2,
    coordinator_pb2_grpc,
    tuning_pb2,
)

log = logging.getLogger(__name__)

# FitIns config keys beside the mode's MODE_FIELDS (plain names for what the wrapped client uses;
# the rest are namespaced).
BATCH_SIZE = "batch_size"
REVISION = "config_revision"
NODE_ID = "edgetune_node_id"
ROUND_ID = "edgetune_round_id"
AGENT = "edgetune_agent"
# Client properties the strategy asks for.
SAMPLES = "edgetune_samples"
# Fit metrics the client adds: the mode the agent applied (exact table values).
APPLIED_PREFIX = "edgetune_applied_"

RPC_TIMEOUT_S = 30.0
#: How long a client waits while the agent's device is busy (a profile running) before training anyway fails.
DEFAULT_BUSY_WAIT_S = 60.0


# --- server side ---------------------------------------------------------------------------------
#: Job phases after which the job changes only when something changes it (a budget, a node).
_SETTLED = (tuning_pb2.JOB_PHASE_SUCCEEDED, tuning_pb2.JOB_PHASE_FAILED, tuning_pb2.JOB_PHASE_CANCELLED)


#: The fewest profiles per node a job of the strategy may ask for (see :meth:`Tuning.__post_init__`).
MIN_PROFILES = 10


@dataclass(frozen=True)
class Tuning:
    """The TuningJob the strategy asks the coordinator to run for its nodes (see module doc).

    ``risk``: the probability that a chosen configuration's power exceeds the node's budget (None:
    the coordinator's tuning policy's default); ``profiles``: points measured per node; ``method``:
    ``frontier`` or ``random``; ``batch_sizes``: the batch size tuned (the first); ``reference_model_id``:
    the estimator model to transfer from (empty: the estimator's reference for each node's device);
    ``timeout_s``: how long a round waits for the job.
    """

    risk: float | None = None
    profiles: int = 12
    method: str = "frontier"
    batch_sizes: tuple[int, ...] = (16,)
    reference_model_id: str = ""
    timeout_s: float = 600.0

    def __post_init__(self) -> None:
        if self.risk is not None:
            validation.risk(self.risk, "tuning.risk")
        # the frontier schedule profiles half of them at random first, and a transfer needs 5 rows
        validation.count(self.profiles, "tuning.profiles", minimum=MIN_PROFILES)
        if self.method not in METHODS:
            raise InvalidArgument("tuning.method", f"unknown method {self.method!r}", ", ".join(METHODS))
        validation.batch_sizes(self.batch_sizes, "tuning.batch_sizes")
        if not self.timeout_s > 0:
            raise InvalidArgument("tuning.timeout_s", f"{self.timeout_s!r}", "> 0 seconds")

    def spec(self, name: str, workload: common_pb2.Workload, nodes: Sequence[str]) -> tuning_pb2.TuningJobSpec:
        spec = tuning_pb2.TuningJobSpec(name=name, workload=workload, batch_sizes=list(self.batch_sizes),
                                        nodes=list(nodes), profiles=self.profiles,
                                        method=METHODS[self.method],  # type: ignore[arg-type]
                                        reference_model_id=self.reference_model_id)
        if self.risk is not None:
            spec.risk = self.risk
        return spec


def verified_options(job: tuning_pb2.TuningJob) -> dict[str, common_pb2.PredictionTable]:
    """Each Applied node's verified choice as its one planning option: the mode and batch size, the
    time measured on the node, and the larger of the measured power and the predicted bound. A node
    the job has not tuned within its budget raises FailedPrecondition with the job's reason."""
    out: dict[str, common_pb2.PredictionTable] = {}
    for n in job.nodes:
        if n.phase != tuning_pb2.NODE_PHASE_APPLIED or not n.HasField("measured_power_w"):
            raise FailedPrecondition(f"tuning job {job.spec.name}: node {n.node_id} is "
                                     f"{tuning_pb2.NodePhase.Name(n.phase)}: {n.reason or 'not applied'}")
        power = max(n.measured_power_w, n.predicted_power_upper_w if n.HasField("predicted_power_upper_w") else 0.0)
        m = n.mode
        out[n.node_id] = table_to_proto(Predictions.from_rows([{
            "cores": m.cores, "cpu_mhz": m.cpu_mhz, "gpu_mhz": m.gpu_mhz, "emc_mhz": m.emc_mhz,
            "batch_size": n.batch_size, "time_ms": n.measured_time_ms, "power_w": power}]))
    return out


@dataclass(frozen=True)
class ClientNode:
    """A sampled client as the coordinator knows it."""

    cid: str
    node_id: str
    samples: int


@dataclass(frozen=True)
class Assignment:
    """What one client was told to run in one round (kept in :attr:`PowerAwareStrategy.assignments`)."""

    server_round: int
    cid: str
    node_id: str
    batch_size: int
    mode: PowerMode | None
    config_revision: int
    round_id: str
    #: Power and time of the planned option (the coordinator's plan for this node).
    planned_power_w: float
    planned_time_s: float
    power_budget_w: float | None


@dataclass
class RoundRecord:
    """One fit round: the coordinator's plan, what each client was told, what each reported back."""

    plan: coordinator_pb2.PlanRoundResponse
    assignments: list[Assignment] = field(default_factory=list)
    #: Node ids of sampled clients the coordinator planned around.
    sat_out: list[str] = field(default_factory=list)
    #: node id -> the client's fit metrics (a PowerAwareClient adds the mode its agent applied).
    fit_metrics: dict[str, dict[str, Scalar]] = field(default_factory=dict)


class PowerAwareStrategy(Strategy):
    """``strategy`` with every fit round planned by the coordinator at ``coordinator`` (see module doc).

    ``workload``: the workload name (a zoo name or the user's ``MODULE:FUNCTION``) or a ``Workload``
    message; ``tuning``: the TuningJob each node's option comes from (:class:`Tuning`; its
    :attr:`tuning_job` is the job as last read). ``objective``: ``makespan`` or ``energy``;
    ``deadline_s`` / ``site_power_budget_w``: the round's budgets (absent: the site's standing
    ones). ``node_ids`` (cid → node id) and ``samples`` (node id → samples this round)
    override what the clients report as properties.
    """

    def __init__(self, strategy: Strategy, coordinator: str, workload: str | common_pb2.Workload, *,
                 role: Role | str = Role.TRAIN, objective: str = "makespan", deadline_s: float | None = None,
                 site_power_budget_w: float | None = None, node_ids: Mapping[str, str] | None = None,
                 samples: Mapping[str, int] | None = None, tuning: Tuning | None = None,
                 round_prefix: str = "flower", timeout_s: float = RPC_TIMEOUT_S,
                 security: ClientSecurity | None = None) -> None:
        super().__init__()
        self.strategy = strategy
        self.coordinator = coordinator
        if isinstance(workload, str):
            workload = common_pb2.Workload(name=workload)
        self.workload = common_pb2.Workload()
        self.workload.CopyFrom(workload)
        self.workload.role = common_pb2.Role.ValueType(role_to_proto(role))
        self.objective = coordinator_pb2.RoundObjective.ValueType(ROUND_OBJECTIVE.to_proto(objective))
        self.budgets = common_pb2.Budgets()
        if deadline_s is not None:
            self.budgets.deadline_s = deadline_s
        if site_power_budget_w is not None:
            self.budgets.site_power_budget_w = site_power_budget_w
        self.node_ids = dict(node_ids or {})
        self.samples = dict(samples or {})
        self.tuning = tuning or Tuning()
        #: The TuningJob as last read (None before the first round).
        self.tuning_job: tuning_pb2.TuningJob | None = None
        self._jobs = 0
        self.round_prefix = round_prefix
        self.timeout_s = timeout_s
        #: server round -> its plan, assignments and the clients' reports.
        self.rounds: dict[int, RoundRecord] = {}
        self._clients: dict[str, ClientNode] = {}
        self._channel = open_channel(coordinator, security)  # ``security``: TLS and an operator token
        self._stub = coordinator_pb2_grpc.CoordinatorStub(self._channel)

    def __repr__(self) -> str:
        return f"PowerAwareStrategy({self.strategy!r}, coordinator={self.coordinator!r})"

    def close(self) -> None:
        self._channel.close()

    @property
    def assignments(self) -> list[Assignment]:
        return [a for r in sorted(self.rounds) for a in self.rounds[r].assignments]

    # -- the planned part --------------------------------------------------------------------
    def configure_fit(self, server_round: int, parameters: Parameters,
                      client_manager: ClientManager) -> list[tuple[ClientProxy, FitIns]]:
        sampled = self.strategy.configure_fit(server_round, parameters, client_manager)
        if not sampled:
            return sampled
        clients = [self._client_node(proxy, server_round) for proxy, _ in sampled]
        options = verified_options(self._tuned([c.node_id for c in clients]))
        plan = self._plan(server_round, clients, options)
        planned = {n.node_id: n for n in plan.nodes}
        addresses = {n.node_id: n.address for n in
                     self._stub.ListNodes(coordinator_pb2.ListNodesRequest(), timeout=self.timeout_s).nodes}
        record = self.rounds[server_round] = RoundRecord(plan)
        out = []
        for (proxy, ins), client in zip(sampled, clients, strict=True):
            node_plan = planned.get(client.node_id)
            if node_plan is None:  # planned around: lost or unavailable, it cannot run this round
                record.sat_out.append(client.node_id)
                continue
            config = self._stub.GetNodeConfig(coordinator_pb2.GetNodeConfigRequest(node_id=client.node_id),
                                              timeout=self.timeout_s)
            out.append((proxy, FitIns(ins.parameters, {**ins.config, **fit_config(config, addresses.get(
                client.node_id, ""))})))
            record.assignments.append(Assignment(
                server_round, proxy.cid, client.node_id, config.batch_size,
                mode_from_proto(config.mode) if config.HasField("mode") else None, config.revision,
                config.round_id, node_plan.power_w, node_plan.time_s,
                config.power_budget_w if config.HasField("power_budget_w") else None))
        if record.sat_out:
            log.warning("clients sit this round out: the coordinator planned around their nodes",
                        extra={"round": server_round, "nodes": record.sat_out, "reason": plan.reason})
        return out

    def _client_node(self, proxy: ClientProxy, server_round: int) -> ClientNode:
        """The client's node id and sample count: the mappings given, else its properties (asked once)."""
        known = self._clients.get(proxy.cid)
        if known is not None:
            return known
        properties: Mapping[str, Scalar] = {}
        node_id = self.node_ids.get(proxy.cid)
        if node_id is None or node_id not in self.samples:
            res = proxy.get_properties(GetPropertiesIns(config={}), timeout=self.timeout_s, group_id=server_round)
            properties = res.properties
        node_id = node_id or str(properties.get(NODE_ID, ""))
        if not node_id:
            raise InvalidArgument(f"client {proxy.cid}.{NODE_ID}", "the client reports no edgetune node id",
                                  "a PowerAwareClient, or node_ids={cid: node_id}")
        samples = int(self.samples.get(node_id) or properties.get(SAMPLES) or 0)
        if samples <= 0:
            raise InvalidArgument(f"client {proxy.cid}.{SAMPLES}", f"node {node_id!r} reports no training samples",
                                  "a PowerAwareClient with samples > 0, or samples={node_id: n}")
        client = self._clients[proxy.cid] = ClientNode(proxy.cid, node_id, samples)
        return client

    def _tuned(self, node_ids: Sequence[str]) -> tuning_pb2.TuningJob:
        """The TuningJob over ``node_ids`` once settled: submitted when none covers them yet (a new
        job per new set of nodes), else read again (it re-selects a node whose budget changed)."""
        job = self.tuning_job
        if job is None or not set(node_ids) <= set(job.spec.nodes):
            self._jobs += 1
            nodes = sorted(set(node_ids) | set(job.spec.nodes if job is not None else ()))
            spec = self.tuning.spec(f"{self.round_prefix}-tuning-{self._jobs}", self.workload, nodes)
            job = self._stub.SubmitTuningJob(tuning_pb2.SubmitTuningJobRequest(spec=spec), timeout=self.timeout_s)
            log.info("tuning job submitted", extra={"job": spec.name, "nodes": nodes})
        else:
            job = self._stub.GetTuningJob(tuning_pb2.GetTuningJobRequest(name=job.spec.name), timeout=self.timeout_s)
        if job.phase not in _SETTLED:
            for update in self._stub.WatchTuningJob(tuning_pb2.WatchTuningJobRequest(name=job.spec.name),
                                                    timeout=self.tuning.timeout_s):
                job = update
                if job.phase in _SETTLED:
                    break
        self.tuning_job = job
        return job

    def _plan(self, server_round: int, clients: Sequence[ClientNode],
              options: Mapping[str, common_pb2.PredictionTable]) -> coordinator_pb2.PlanRoundResponse:
        nodes = [coordinator_pb2.NodeRound(node_id=c.node_id, samples=c.samples, options=options[c.node_id])
                 for c in clients]
        request = coordinator_pb2.PlanRoundRequest(
            round_id=f"{self.round_prefix}-{server_round}", objective=self.objective, budgets=self.budgets,
            workload=self.workload, nodes=nodes, apply=True)
        plan = self._stub.PlanRound(request, timeout=self.timeout_s)
        if not plan.feasible:
            raise FailedPrecondition(f"round {request.round_id}: the coordinator found no plan within the budgets: "
                                     f"{plan.reason}")
        log.info("round planned", extra={"round": server_round, "round_id": plan.round_id,
                                         "makespan_s": plan.makespan_s, "energy_j": plan.energy_j})
        return plan

    # -- the rest is the wrapped strategy's ----------------------------------------------------
    def initialize_parameters(self, client_manager: ClientManager) -> Parameters | None:
        return self.strategy.initialize_parameters(client_manager)

    def aggregate_fit(self, server_round: int, results: list[tuple[ClientProxy, FitRes]],
                      failures: list[tuple[ClientProxy, FitRes] | BaseException],
                      ) -> tuple[Parameters | None, dict[str, Scalar]]:
        record = self.rounds.get(server_round)
        if record is not None:
            nodes = {a.cid: a.node_id for a in record.assignments}
            record.fit_metrics.update({nodes.get(proxy.cid, proxy.cid): dict(res.metrics) for proxy, res in results})
        return self.strategy.aggregate_fit(server_round, results, failures)

    def configure_evaluate(self, server_round: int, parameters: Parameters,
                           client_manager: ClientManager) -> list[tuple[ClientProxy, EvaluateIns]]:
        return self.strategy.configure_evaluate(server_round, parameters, client_manager)

    def aggregate_evaluate(self, server_round: int, results: list[tuple[ClientProxy, EvaluateRes]],
                           failures: list[tuple[ClientProxy, EvaluateRes] | BaseException],
                           ) -> tuple[float | None, dict[str, Scalar]]:
        return self.strategy.aggregate_evaluate(server_round, results, failures)

    def evaluate(self, server_round: int, parameters: Parameters) -> tuple[float, dict[str, Scalar]] | None:
        return self.strategy.evaluate(server_round, parameters)


def fit_config(config: coordinator_pb2.NodeConfig, agent_address: str = "") -> dict[str, Scalar]:
    """The FitIns config entries of a node's config (see module doc)."""
    out: dict[str, Scalar] = {BATCH_SIZE: int(config.batch_size), REVISION: int(config.revision),
                              NODE_ID: config.node_id, ROUND_ID: config.round_id}
    if config.HasField("mode") and not config.restore:
        out.update(mode_from_proto(config.mode).as_dict())
    if agent_address:
        out[AGENT] = agent_address
    return out


# --- client side ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class FitPlan:
    """What the coordinator planned for this client's round, read back from its FitIns config."""

    batch_size: int
    mode: PowerMode | None
    config_revision: int
    node_id: str = ""
    round_id: str = ""
    agent: str = ""

    @classmethod
    def from_config(cls, config: Config) -> FitPlan | None:
        """None when the config carries no plan (a strategy without edgetune)."""
        if BATCH_SIZE not in config or REVISION not in config:
            return None
        mode = PowerMode.from_mapping(dict(config)) if all(k in config for k in MODE_FIELDS) else None
        return cls(int(config[BATCH_SIZE]), mode, int(config[REVISION]), str(config.get(NODE_ID, "")),
                   str(config.get(ROUND_ID, "")), str(config.get(AGENT, "")))


def _busy(exc: grpc.RpcError) -> bool:
    return exc.code() == grpc.StatusCode.FAILED_PRECONDITION


@contextmanager
def power_mode(agent_address: str, mode: PowerMode, *, timeout_s: float = RPC_TIMEOUT_S,
               busy_wait_s: float = DEFAULT_BUSY_WAIT_S, security: ClientSecurity | None = None) -> Iterator[PowerMode]:
    """Apply ``mode`` through the node agent at ``agent_address`` for the ``with`` body, then restore.

    Yields the mode as applied (exact table values). While a profile holds the device
    (FAILED_PRECONDITION) it retries for up to ``busy_wait_s``. A refused mode raises the
    agent's error (INVALID_ARGUMENT naming the field); a failed restore is logged, not raised
    (the agent restores on exit in any case, and the training result is worth keeping).
    """
    with open_channel(agent_address, security) as channel:  # ``security``: TLS and an operator token
        agent = ProfilerClient(channel, timeout_s=timeout_s)
        applied, _ = _retry_busy(lambda: agent.apply(mode), busy_wait_s)
        try:
            yield applied
        finally:
            try:
                _retry_busy(agent.restore, busy_wait_s)
            except grpc.RpcError as exc:
                log.error("restoring the power mode failed", extra={"agent": agent_address,
                                                                    "code": exc.code().name, "error": exc.details()})


T = TypeVar("T")


def _retry_busy(call: Callable[[], T], wait_s: float) -> T:
    deadline = time.monotonic() + wait_s
    while True:
        try:
            return call()
        except grpc.RpcError as exc:
            if not _busy(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.1)


class PowerAwareClient(NumPyClient):
    """``client`` with its local training run in the coordinator's planned mode (see module doc).

    ``node_id``: this client's edgetune node; ``samples``: its training set size (the round's
    plan is sized by it); ``agent_address``: the node agent (default: the address the strategy
    sends, which is what the agent registered).
    """

    def __init__(self, client: NumPyClient, node_id: str, samples: int, *, agent_address: str = "",
                 timeout_s: float = RPC_TIMEOUT_S, busy_wait_s: float = DEFAULT_BUSY_WAIT_S,
                 security: ClientSecurity | None = None) -> None:
        if not node_id:
            raise InvalidArgument("node_id", "is empty", "the node id the agent registered")
        if samples <= 0:
            raise InvalidArgument("samples", f"{samples!r}", "> 0")
        self.client = client
        self.node_id = node_id
        self.samples = int(samples)
        self.agent_address = agent_address
        self.timeout_s = timeout_s
        self.busy_wait_s = busy_wait_s
        self.security = security

    def get_properties(self, config: Config) -> dict[str, Scalar]:
        return {**self.client.get_properties(config), NODE_ID: self.node_id, SAMPLES: self.samples}

    def get_parameters(self, config: dict[str, Scalar]) -> NDArrays:
        return self.client.get_parameters(config)

    def fit(self, parameters: NDArrays, config: dict[str, Scalar]) -> tuple[NDArrays, int, dict[str, Scalar]]:
        plan = FitPlan.from_config(config)
        if plan is None or plan.mode is None:
            return self.client.fit(parameters, config)
        if plan.node_id and plan.node_id != self.node_id:
            raise InvalidArgument(NODE_ID, f"the plan is for node {plan.node_id!r}, this client is {self.node_id!r}")
        agent = self.agent_address or plan.agent
        if not agent:
            raise InvalidArgument(AGENT, "no agent address to apply the mode through",
                                  "agent_address=..., or an agent registered with its address")
        with power_mode(agent, plan.mode, timeout_s=self.timeout_s, busy_wait_s=self.busy_wait_s,
                        security=self.security) as applied:
            new_parameters, n, metrics = self.client.fit(parameters, config)
        applied_metrics = {f"{APPLIED_PREFIX}{k}": v for k, v in applied.as_dict().items()}
        return new_parameters, n, {**metrics, **applied_metrics, NODE_ID: self.node_id, BATCH_SIZE: plan.batch_size,
                                   REVISION: plan.config_revision}

    def evaluate(self, parameters: NDArrays, config: dict[str, Scalar]) -> tuple[float, int, dict[str, Scalar]]:
        return self.client.evaluate(parameters, config)
