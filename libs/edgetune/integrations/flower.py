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
from typing import Any, TypeVar

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
from edgetune.base.records import OptionTable
from edgetune.base.roles import Role
from edgetune.clients.calls import CallFailed, Status
from edgetune.clients.coordinator import CoordinatorClient
from edgetune.clients.profiler import ProfilerClient
from edgetune.errors import FailedPrecondition, InvalidArgument
from edgetune.identity import ClientSecurity, open_channel
from edgetune.planning.planner import RoundPlan
from edgetune.planning.rounds import OBJECTIVES, RoundNode, RoundOutcome, RoundRequest
from edgetune.store import NodeConfig
from edgetune.tuning.jobs import NodePhase, TuningJobSpec, TuningJobView, TuningMethod

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
        if self.method not in tuple(TuningMethod):
            raise InvalidArgument("tuning.method", f"unknown method {self.method!r}",
                                  ", ".join(m.value for m in TuningMethod))
        validation.batch_sizes(self.batch_sizes, "tuning.batch_sizes")
        if not self.timeout_s > 0:
            raise InvalidArgument("tuning.timeout_s", f"{self.timeout_s!r}", "> 0 seconds")

    def spec(self, name: str, workload: str, role: Role, nodes: Sequence[str]) -> TuningJobSpec:
        """The job over ``nodes`` for ``workload`` (its name) in ``role``."""
        return TuningJobSpec(name=name, workload=workload, role=role.value, batch_sizes=tuple(self.batch_sizes),
                             nodes=tuple(nodes), risk=self.risk, profiles=self.profiles,
                             method=TuningMethod(self.method), reference_model_id=self.reference_model_id)


def verified_options(job: TuningJobView) -> dict[str, OptionTable]:
    """Each Applied node's verified choice as its one planning option: the mode and batch size, the
    time measured on the node, and the larger of the measured power and the predicted bound. A node
    the job has not tuned within its budget raises FailedPrecondition with the job's reason."""
    out: dict[str, OptionTable] = {}
    for n in job.nodes:
        if n.phase != NodePhase.APPLIED or n.measured_power_w is None or n.mode is None:
            # the phase as the wire names it (NODE_PHASE_FAILED), as this message always said
            raise FailedPrecondition(f"tuning job {job.spec.name}: node {n.node_id} is "
                                     f"NODE_PHASE_{NodePhase(n.phase).name}: {n.reason or 'not applied'}")
        power = max(n.measured_power_w, n.predicted_power_upper_w or 0.0)
        m = n.mode
        out[n.node_id] = OptionTable.from_rows([(PowerMode(int(m[0]), m[1], m[2], m[3]), n.batch_size,
                                                 n.measured_time_ms or 0.0, power)])
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

    round_id: str
    plan: RoundPlan
    assignments: list[Assignment] = field(default_factory=list)
    #: Node ids of sampled clients the coordinator planned around.
    sat_out: list[str] = field(default_factory=list)
    #: node id -> the client's fit metrics (a PowerAwareClient adds the mode its agent applied).
    fit_metrics: dict[str, dict[str, Scalar]] = field(default_factory=dict)


class PowerAwareStrategy(Strategy):
    """``strategy`` with every fit round planned by the coordinator at ``coordinator`` (see module doc).

    ``workload``: the workload name (a zoo name or the user's ``MODULE:FUNCTION``) or the Workload as a
    dict (``name``, ``batch_size``, ``dataset``: ``PlanRound``'s workload); ``tuning``: the TuningJob each node's option comes from (:class:`Tuning`; its
    :attr:`tuning_job` is the job as last read). ``objective``: ``makespan`` or ``energy``;
    ``deadline_s`` / ``site_power_budget_w``: the round's budgets (absent: the site's standing
    ones). ``node_ids`` (cid → node id) and ``samples`` (node id → samples this round)
    override what the clients report as properties.
    """

    def __init__(self, strategy: Strategy, coordinator: str, workload: str | Mapping[str, Any], *,
                 role: Role | str = Role.TRAIN, objective: str = "makespan", deadline_s: float | None = None,
                 site_power_budget_w: float | None = None, node_ids: Mapping[str, str] | None = None,
                 samples: Mapping[str, int] | None = None, tuning: Tuning | None = None,
                 round_prefix: str = "flower", timeout_s: float = RPC_TIMEOUT_S,
                 security: ClientSecurity | None = None) -> None:
        super().__init__()
        self.strategy = strategy
        self.coordinator = coordinator
        self.workload: dict[str, Any] = {"name": workload} if isinstance(workload, str) else dict(workload)
        self.role = Role.parse(role)
        if str(objective).strip().lower() not in OBJECTIVES:
            raise InvalidArgument("objective", f"unknown objective {objective!r}", ", ".join(OBJECTIVES))
        self.objective = str(objective).strip().lower()
        self.deadline_s = deadline_s
        self.site_power_budget_w = site_power_budget_w
        self.node_ids = dict(node_ids or {})
        self.samples = dict(samples or {})
        self.tuning = tuning or Tuning()
        #: The TuningJob as last read (None before the first round).
        self.tuning_job: TuningJobView | None = None
        self._jobs = 0
        self.round_prefix = round_prefix
        self.timeout_s = timeout_s
        #: server round -> its plan, assignments and the clients' reports.
        self.rounds: dict[int, RoundRecord] = {}
        self._clients: dict[str, ClientNode] = {}
        # ``security``: TLS and an operator token
        self._coordinator = CoordinatorClient.connect(coordinator, security, timeout_s=timeout_s)

    def __repr__(self) -> str:
        return f"PowerAwareStrategy({self.strategy!r}, coordinator={self.coordinator!r})"

    def close(self) -> None:
        self._coordinator.close()

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
        outcome = self._plan(server_round, clients, options)
        planned = {n.id: n for n in outcome.plan.nodes}
        addresses = {n.node_id: n.address for n in self._coordinator.nodes()}
        record = self.rounds[server_round] = RoundRecord(outcome.round_id, outcome.plan)
        out = []
        for (proxy, ins), client in zip(sampled, clients, strict=True):
            node_plan = planned.get(client.node_id)
            if node_plan is None:  # planned around: lost or unavailable, it cannot run this round
                record.sat_out.append(client.node_id)
                continue
            config = self._coordinator.config(client.node_id)
            out.append((proxy, FitIns(ins.parameters, {**ins.config, **fit_config(config, addresses.get(
                client.node_id, ""))})))
            record.assignments.append(Assignment(
                server_round, proxy.cid, client.node_id, config.batch_size, config.mode, config.revision,
                config.round_id, node_plan.power_w, node_plan.time_s, config.power_budget_w))
        if record.sat_out:
            log.warning("clients sit this round out: the coordinator planned around their nodes",
                        extra={"round": server_round, "nodes": record.sat_out, "reason": outcome.reason})
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

    def _tuned(self, node_ids: Sequence[str]) -> TuningJobView:
        """The TuningJob over ``node_ids`` once settled: submitted when none covers them yet (a new
        job per new set of nodes), else read again (it re-selects a node whose budget changed)."""
        job = self.tuning_job
        if job is None or not set(node_ids) <= set(job.spec.nodes):
            self._jobs += 1
            nodes = sorted(set(node_ids) | set(job.spec.nodes if job is not None else ()))
            spec = self.tuning.spec(f"{self.round_prefix}-tuning-{self._jobs}", self.workload["name"], self.role,
                                    nodes)
            job = self._coordinator.submit_job(spec)
            log.info("tuning job submitted", extra={"job": spec.name, "nodes": nodes})
        else:
            job = self._coordinator.job(job.spec.name)
        if not job.phase.done:  # settled: it changes only when something changes it (a budget, a node)
            with self._coordinator.watch_job(job.spec.name, timeout_s=self.tuning.timeout_s) as updates:
                for update in updates:
                    job = update
                    if job.phase.done:
                        break
        self.tuning_job = job
        return job

    def _plan(self, server_round: int, clients: Sequence[ClientNode],
              options: Mapping[str, OptionTable]) -> RoundOutcome:
        request = RoundRequest(
            tuple(RoundNode(c.node_id, c.samples, options=options[c.node_id]) for c in clients),
            round_id=f"{self.round_prefix}-{server_round}", objective=self.objective, deadline_s=self.deadline_s,
            site_power_budget_w=self.site_power_budget_w, workload=self.workload, role=self.role.value, apply=True)
        outcome = self._coordinator.plan_round(request)
        if not outcome.plan.feasible:
            raise FailedPrecondition(f"round {request.round_id}: the coordinator found no plan within the budgets: "
                                     f"{outcome.reason}")
        log.info("round planned", extra={"round": server_round, "round_id": outcome.round_id,
                                         "makespan_s": outcome.plan.makespan_s, "energy_j": outcome.plan.energy_j})
        return outcome

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


def fit_config(config: NodeConfig, agent_address: str = "") -> dict[str, Scalar]:
    """The FitIns config entries of a node's config (see module doc)."""
    out: dict[str, Scalar] = {BATCH_SIZE: int(config.batch_size), REVISION: int(config.revision),
                              NODE_ID: config.node_id, ROUND_ID: config.round_id}
    if config.mode is not None and not config.restore:
        out.update(config.mode.as_dict())
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


def _busy(exc: CallFailed) -> bool:
    return exc.code == Status.FAILED_PRECONDITION


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
            except CallFailed as exc:
                log.error("restoring the power mode failed", extra={"agent": agent_address,
                                                                    "code": exc.code.value, "error": exc.details})


T = TypeVar("T")


def _retry_busy(call: Callable[[], T], wait_s: float) -> T:
    deadline = time.monotonic() + wait_s
    while True:
        try:
            return call()
        except CallFailed as exc:
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
