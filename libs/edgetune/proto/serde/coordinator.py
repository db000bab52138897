"""``coordinator.proto`` <-> the control plane's records: nodes (:class:`~edgetune.store.NodeRecord`),
rounds (:mod:`edgetune.planning.rounds`), node configs (:class:`~edgetune.store.NodeConfig`),
budgets (:class:`~edgetune.store.SiteBudgets`, :mod:`edgetune.planning.placement`).

Each section maps one RPC's messages both ways: the coordinator's side (a request to a record, a
record to a response) and a client's (:class:`edgetune.clients.coordinator.CoordinatorClient`).
What the wire does not carry, and so does not come back: a node's ``registered_s``, ``power_w``
and why it is unavailable (its state says ``unavailable``); a plan's option rows, total power,
deadline and exactness, and the nodes it planned around (its reason names them).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from google.protobuf import json_format

from edgetune import validation
from edgetune.base.mode import PowerMode
from edgetune.base.records import OptionTable, Predictions
from edgetune.base.roles import Role
from edgetune.errors import InvalidArgument
from edgetune.planning.placement import InferencePlacement, InferenceUpdate
from edgetune.planning.planner import NodePlan, RoundPlan
from edgetune.planning.rounds import RoundNode, RoundOutcome, RoundRequest
from edgetune.powermodes.specs import SPECS
from edgetune.proto.serde.common import (
    ROUND_OBJECTIVE,
    mode_from_proto,
    mode_to_proto,
    optional_value,
    role_from_proto,
    role_to_proto,
    spec_from_proto,
    spec_to_proto,
    timestamp_from_proto,
    timestamp_to_proto,
)
from edgetune.proto.serde.tables import table_from_proto, table_to_proto
from edgetune.proto.v1 import common_pb2, coordinator_pb2
from edgetune.store import (
    STATE_LOST,
    Heartbeat,
    NodeAnnouncement,
    NodeConfig,
    NodeRecord,
    NodeRegistered,
    SiteBudgets,
    spec_to_dict,
)

# --- nodes (RegisterNode, ListNodes, Heartbeat) ---------------------------------------------------

#: Longest hostname (DNS) and agent address (host:port), most labels of a node and longest label text.
MAX_HOSTNAME_LENGTH = 253
MAX_ADDRESS_LENGTH = 512
MAX_LABELS = 64
MAX_LABEL_LENGTH = 256


def _device_dict(msg: common_pb2.DeviceSpec) -> dict[str, Any]:
    """The registered spec: the node's discovered tables, or the built-in spec its name names."""
    if msg.core_counts or msg.cpu_mhz or msg.gpu_mhz or msg.emc_mhz:
        return spec_to_dict(spec_from_proto(msg, "node.device"))
    if msg.name in SPECS:
        return spec_to_dict(SPECS[msg.name])
    return {"name": msg.name} if msg.name else {}


def registered_node_from_proto(msg: coordinator_pb2.NodeInfo) -> NodeRecord:
    """What a node registers (RegisterNode), checked: InvalidArgument naming ``node.<field>``."""
    validation.text(msg.hostname, "node.hostname", max_length=MAX_HOSTNAME_LENGTH)
    if not msg.node_id and msg.hostname.strip():  # the hostname becomes the id: it must be one
        validation.node_id(msg.hostname.strip(), "node.hostname")
    validation.text(msg.address, "node.address", max_length=MAX_ADDRESS_LENGTH)
    validation.repeated(msg.labels, "node.labels", maximum=MAX_LABELS)
    for key, value in msg.labels.items():
        validation.identifier(key, "node.labels[key]", max_length=MAX_LABEL_LENGTH)
        validation.text(value, f"node.labels[{validation.shown(key, 40)}]", max_length=MAX_LABEL_LENGTH)
    current = mode_from_proto(msg.current_mode, "node.current_mode").as_dict() if msg.current_mode.cores else None
    return NodeRecord(node_id=msg.node_id, hostname=msg.hostname, address=msg.address,
                      device=_device_dict(msg.device), labels=dict(msg.labels),
                      power_budget_w=optional_value(msg, "power_budget_w"), state=msg.state, current_mode=current)


def node_to_proto(record: NodeRecord) -> coordinator_pb2.NodeInfo:
    """A node as ListNodes (and RegisterNode's request) carries it."""
    msg = coordinator_pb2.NodeInfo(node_id=record.node_id, hostname=record.hostname, address=record.address,
                                   labels=record.labels, state=record.state, applied_revision=record.applied_revision,
                                   applied_epoch=record.applied_epoch, refused_revision=record.refused_revision,
                                   refused_reason=record.refused_reason)
    spec = record.spec
    if spec is not None:
        msg.device.CopyFrom(spec_to_proto(spec))
    elif record.device_model:
        msg.device.name = record.device_model
    if record.current_mode:
        msg.current_mode.CopyFrom(mode_to_proto(PowerMode.from_mapping(record.current_mode)))
    if record.power_budget_w is not None:
        msg.power_budget_w = record.power_budget_w
    if record.last_seen_s is not None:
        msg.last_seen.CopyFrom(timestamp_to_proto(record.last_seen_s))
    return msg


def node_from_proto(msg: coordinator_pb2.NodeInfo) -> NodeRecord:
    """A node as ListNodes answered (live unless its state says ``lost``)."""
    current = mode_from_proto(msg.current_mode, "node.current_mode").as_dict() if msg.current_mode.cores else None
    return NodeRecord(node_id=msg.node_id, hostname=msg.hostname, address=msg.address,
                      device=_device_dict(msg.device), labels=dict(msg.labels),
                      power_budget_w=optional_value(msg, "power_budget_w"),
                      live=bool(msg.state) and msg.state != STATE_LOST, state=msg.state,
                      last_seen_s=timestamp_from_proto(msg.last_seen) if msg.HasField("last_seen") else None,
                      current_mode=current, applied_revision=msg.applied_revision, applied_epoch=msg.applied_epoch,
                      refused_revision=msg.refused_revision, refused_reason=msg.refused_reason)


def heartbeat_from_proto(msg: coordinator_pb2.HeartbeatRequest) -> Heartbeat:
    """What an agent's beat reports (the coordinator's side of Heartbeat; the time is the registry's)."""
    current = mode_from_proto(msg.current_mode, "current_mode").as_dict() if msg.current_mode.cores else None
    return Heartbeat(state=msg.state, current_mode=current, power_w=msg.power_w,
                     applied_revision=msg.applied_revision, applied_epoch=msg.applied_epoch,
                     refused_revision=msg.refused_revision, refused_reason=msg.refused_reason)


# The node's side of RegisterNode / Heartbeat / WatchConfig (:class:`edgetune.clients.nodes.NodesClient`):
# what an agent sends, and the registration's answer it reads back.


def announcement_to_proto(node: NodeAnnouncement) -> coordinator_pb2.RegisterNodeRequest:
    """The registration of a node: its device's discovered spec, its mode and state."""
    info = coordinator_pb2.NodeInfo(node_id=node.node_id, hostname=node.hostname, address=node.address,
                                    device=spec_to_proto(node.spec), current_mode=mode_to_proto(node.current_mode),
                                    labels=dict(node.labels), state=node.state)
    if node.power_budget_w is not None:
        info.power_budget_w = node.power_budget_w
    return coordinator_pb2.RegisterNodeRequest(node=info)


def registered_from_proto(msg: coordinator_pb2.RegisterNodeResponse) -> NodeRegistered:
    return NodeRegistered(node_id=msg.node_id, heartbeat_interval_s=msg.heartbeat_interval_s,
                          config_revision=int(msg.config_revision), config_epoch=int(msg.config_epoch))


def heartbeat_to_proto(node_id: str, beat: Heartbeat) -> coordinator_pb2.HeartbeatRequest:
    """A node's beat (``beat.ts_s`` stays home: the coordinator stamps its own time)."""
    msg = coordinator_pb2.HeartbeatRequest(
        node_id=node_id, power_w=beat.power_w or 0.0, state=beat.state, applied_revision=beat.applied_revision,
        applied_epoch=beat.applied_epoch, refused_revision=beat.refused_revision, refused_reason=beat.refused_reason)
    if beat.current_mode:
        msg.current_mode.CopyFrom(mode_to_proto(PowerMode.from_mapping(beat.current_mode)))
    return msg


def reregister_from_proto(msg: coordinator_pb2.HeartbeatResponse) -> bool:
    """Whether the coordinator asks the node to register again (it lost its record)."""
    return bool(msg.reregister)


def watch_config_request(node_id: str, after_revision: int, after_epoch: int) -> coordinator_pb2.WatchConfigRequest:
    return coordinator_pb2.WatchConfigRequest(node_id=node_id, after_revision=after_revision, after_epoch=after_epoch)


# --- rounds (PlanRound) ---------------------------------------------------------------------------


def _batch_sizes(values: Sequence[int]) -> tuple[int, ...] | None:
    """Empty (proto3's absent) is None: any batch size; checked by the round library."""
    return tuple(int(b) for b in values) or None


def _efficiency(values: Mapping[int, float]) -> dict[int, float] | None:
    return {int(b): float(r) for b, r in values.items()} or None


def _options_from_proto(options: common_pb2.PredictionTable, at: str) -> OptionTable | None:
    """The node's options (None: no rows, use the stored ones); std columns are not planned on."""
    rows = table_from_proto(options, at, allow_empty=True)
    if not len(rows):
        return None
    return OptionTable(batch_size=rows.batch_size, time_ms=rows.time_ms, power_w=rows.power_w, modes=rows.modes)


def _options_to_proto(options: OptionTable) -> common_pb2.PredictionTable:
    return table_to_proto(Predictions(options.modes, options.batch_size, options.time_ms, options.power_w))


def workload_to_dict(msg: common_pb2.Workload) -> dict[str, Any]:
    """The Workload without its role (kept separately) as a JSON dict."""
    out = json_format.MessageToDict(msg, preserving_proto_field_name=True)
    out.pop("role", None)
    return out


def _workload_to_proto(workload: Mapping[str, Any], role: Role | str) -> common_pb2.Workload:
    msg = common_pb2.Workload()
    json_format.ParseDict(dict(workload), msg, ignore_unknown_fields=True)
    msg.role = common_pb2.Role.ValueType(role_to_proto(role))
    return msg


def round_request_from_proto(msg: coordinator_pb2.PlanRoundRequest) -> RoundRequest:
    nodes = []
    for i, n in enumerate(msg.nodes):
        options = _options_from_proto(n.options, f"nodes[{i}].options")
        nodes.append(RoundNode(n.node_id, int(n.samples), optional_value(n, "power_budget_w"), options,
                               _batch_sizes(n.batch_sizes), _efficiency(n.batch_efficiency)))
    budgets = msg.budgets
    return RoundRequest(
        nodes=tuple(nodes), round_id=msg.round_id, objective=ROUND_OBJECTIVE.from_proto(msg.objective),
        deadline_s=optional_value(budgets, "deadline_s"),
        site_power_budget_w=optional_value(budgets, "site_power_budget_w"),
        workload=workload_to_dict(msg.workload),
        role=role_from_proto(msg.workload.role, "workload.role", default=Role.TRAIN).value, apply=msg.apply,
        batch_sizes=_batch_sizes(msg.batch_sizes), batch_efficiency=_efficiency(msg.batch_efficiency))


def round_request_to_proto(request: RoundRequest) -> coordinator_pb2.PlanRoundRequest:
    msg = coordinator_pb2.PlanRoundRequest(
        round_id=request.round_id,
        objective=coordinator_pb2.RoundObjective.ValueType(ROUND_OBJECTIVE.to_proto(request.objective)),
        workload=_workload_to_proto(request.workload, request.role), apply=request.apply,
        batch_sizes=list(request.batch_sizes or ()), batch_efficiency=dict(request.batch_efficiency or {}))
    if request.deadline_s is not None:
        msg.budgets.deadline_s = request.deadline_s
    if request.site_power_budget_w is not None:
        msg.budgets.site_power_budget_w = request.site_power_budget_w
    for n in request.nodes:
        node = msg.nodes.add(node_id=n.node_id, samples=n.samples, batch_sizes=list(n.batch_sizes or ()),
                             batch_efficiency=dict(n.batch_efficiency or {}))
        if n.power_budget_w is not None:
            node.power_budget_w = n.power_budget_w
        if n.options is not None:
            node.options.CopyFrom(_options_to_proto(n.options))
    return msg


def round_outcome_to_proto(outcome: RoundOutcome) -> coordinator_pb2.PlanRoundResponse:
    plan = outcome.plan
    msg = coordinator_pb2.PlanRoundResponse(round_id=outcome.round_id, feasible=plan.feasible,
                                            reason=outcome.reason)
    if not plan.feasible:
        return msg
    msg.makespan_s = plan.makespan_s or 0.0
    msg.energy_j = plan.energy_j or 0.0
    msg.fastest_energy_j = plan.fastest_energy_j or 0.0
    msg.fastest_makespan_s = plan.fastest_makespan_s or 0.0
    msg.energy_saved_j = plan.energy_saved_j or 0.0
    for p in plan.nodes:
        node = msg.nodes.add(node_id=p.id, batch_size=p.batch_size, time_s=p.time_s, power_w=p.power_w,
                             energy_j=p.energy_j)
        if p.mode is not None:
            node.mode.CopyFrom(mode_to_proto(p.mode))
    return msg


#: A planned node's option row is the coordinator's; a client reads this instead.
ROW_NOT_SENT = -1


def round_outcome_from_proto(msg: coordinator_pb2.PlanRoundResponse, objective: str) -> RoundOutcome:
    """What PlanRound answered for a round planned for ``objective`` (the reason holds the nodes
    planned around; option rows are :data:`ROW_NOT_SENT`)."""
    reason = msg.reason or None
    if not msg.feasible:
        return RoundOutcome(msg.round_id, RoundPlan(False, objective, reason))
    nodes = [NodePlan(n.node_id, ROW_NOT_SENT, n.batch_size, n.time_s, n.power_w, n.energy_j,
                      mode_from_proto(n.mode, f"nodes[{i}].mode") if n.HasField("mode") else None)
             for i, n in enumerate(msg.nodes)]
    return RoundOutcome(msg.round_id, RoundPlan(True, objective, reason, makespan_s=msg.makespan_s,
                                                energy_j=msg.energy_j, nodes=nodes,
                                                fastest_energy_j=msg.fastest_energy_j,
                                                fastest_makespan_s=msg.fastest_makespan_s))


# --- node configs (GetNodeConfig, WatchConfig) ----------------------------------------------------


def config_to_proto(cfg: NodeConfig) -> coordinator_pb2.NodeConfig:
    msg = coordinator_pb2.NodeConfig(node_id=cfg.node_id, revision=cfg.revision, batch_size=cfg.batch_size,
                                     round_id=cfg.round_id, restore=cfg.restore, reason=cfg.reason, epoch=cfg.epoch)
    if cfg.mode is not None:
        msg.mode.CopyFrom(mode_to_proto(cfg.mode))
    if cfg.workload or cfg.role:
        msg.workload.CopyFrom(_workload_to_proto(cfg.workload, cfg.role))
    if cfg.valid_from_s is not None:
        msg.valid_from.CopyFrom(timestamp_to_proto(cfg.valid_from_s))
    if cfg.valid_until_s is not None:
        msg.valid_until.CopyFrom(timestamp_to_proto(cfg.valid_until_s))
    if cfg.power_budget_w is not None:
        msg.power_budget_w = cfg.power_budget_w
    return msg


def _raw_mode(msg: common_pb2.PowerMode) -> PowerMode:
    return PowerMode(int(msg.cores), msg.cpu_mhz, msg.gpu_mhz, msg.emc_mhz)


def config_from_proto(msg: coordinator_pb2.NodeConfig) -> NodeConfig:
    """A node's config as the coordinator sent it. Its mode is read as sent, not checked here: the
    node validates it against its own device (a mode it does not have is refused, and the refusal
    reported with the config's revision)."""
    return NodeConfig(
        node_id=msg.node_id, mode=_raw_mode(msg.mode) if msg.HasField("mode") else None,
        batch_size=msg.batch_size, workload=workload_to_dict(msg.workload),
        role=role_from_proto(msg.workload.role, "config.workload.role", default=Role.TRAIN).value,
        round_id=msg.round_id,
        valid_from_s=timestamp_from_proto(msg.valid_from) if msg.HasField("valid_from") else None,
        valid_until_s=timestamp_from_proto(msg.valid_until) if msg.HasField("valid_until") else None,
        power_budget_w=optional_value(msg, "power_budget_w"), restore=msg.restore, reason=msg.reason,
        revision=msg.revision, epoch=msg.epoch)


# --- budgets (UpdateBudget) -----------------------------------------------------------------------


def node_budget_from_proto(msg: coordinator_pb2.UpdateBudgetRequest) -> float:
    """A node's new power budget (a plain budget update), checked."""
    value = optional_value(msg.budgets, "power_budget_w")
    if value is None:
        raise InvalidArgument("budgets.power_budget_w", f"is required to change node {msg.node_id!r}'s budget",
                              validation.POWER_BUDGET_ALLOWED)
    return validation.power_budget_w(value, "budgets.power_budget_w")


def inference_update_from_proto(msg: coordinator_pb2.UpdateBudgetRequest) -> InferenceUpdate | None:
    """An inference placement update (arrival rate, latency budget, workload; None: keep the
    standing value), or None when the request changes none of them (a plain budget update)."""
    arrival = optional_value(msg.budgets, "arrival_rps")
    latency = optional_value(msg.budgets, "latency_budget_ms")
    name = msg.workload.name if msg.HasField("workload") else ""
    if arrival is None and latency is None and not name:
        return None
    if not msg.node_id:
        raise InvalidArgument("node_id", "is empty: an arrival rate / latency budget / workload is an inference "
                              "node's, not the site's", "the inference node's id")
    return InferenceUpdate(
        arrival_rps=None if arrival is None else validation.arrival_rps(arrival, "budgets.arrival_rps"),
        latency_budget_ms=(None if latency is None
                           else validation.latency_budget_ms(latency, "budgets.latency_budget_ms")),
        workload=name or None)


def site_budgets_from_proto(msg: coordinator_pb2.UpdateBudgetRequest) -> SiteBudgets:
    """The site budgets a request sets (None: keep the standing one); checked by the round library."""
    return SiteBudgets(optional_value(msg.budgets, "site_power_budget_w"), optional_value(msg.budgets, "deadline_s"))


def node_budget_request(node_id: str, power_budget_w: float) -> coordinator_pb2.UpdateBudgetRequest:
    return coordinator_pb2.UpdateBudgetRequest(node_id=node_id,
                                               budgets=common_pb2.Budgets(power_budget_w=power_budget_w))


def node_budget_to_proto(power_budget_w: float | None) -> coordinator_pb2.UpdateBudgetResponse:
    """The node's budget as now registered (None: none)."""
    msg = coordinator_pb2.UpdateBudgetResponse()
    if power_budget_w is not None:
        msg.budgets.power_budget_w = power_budget_w
    return msg


def node_budget_from_response(msg: coordinator_pb2.UpdateBudgetResponse) -> float | None:
    return optional_value(msg.budgets, "power_budget_w")


def site_budgets_to_proto(site: SiteBudgets) -> coordinator_pb2.UpdateBudgetResponse:
    """The site's budgets in effect after the update."""
    msg = coordinator_pb2.UpdateBudgetResponse()
    if site.site_power_budget_w is not None:
        msg.budgets.site_power_budget_w = site.site_power_budget_w
    if site.deadline_s is not None:
        msg.budgets.deadline_s = site.deadline_s
    return msg


def site_budgets_from_response(msg: coordinator_pb2.UpdateBudgetResponse) -> SiteBudgets:
    return SiteBudgets(optional_value(msg.budgets, "site_power_budget_w"), optional_value(msg.budgets, "deadline_s"))


def placement_to_proto(placement: InferencePlacement, revision: int) -> coordinator_pb2.UpdateBudgetResponse:
    """An inference node's re-solved placement: its budgets, why it is infeasible ("" when not) and the
    node's config revision."""
    msg = coordinator_pb2.UpdateBudgetResponse(reason="" if placement.feasible else placement.reason,
                                               config_revision=revision)
    msg.budgets.arrival_rps = placement.arrival_rps
    msg.budgets.latency_budget_ms = placement.latency_budget_ms
    if placement.power_budget_w is not None:
        msg.budgets.power_budget_w = placement.power_budget_w
    return msg
