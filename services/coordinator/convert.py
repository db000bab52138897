"""Coordinator messages <-> the coordination library's types (edges of the servicer only)."""

from __future__ import annotations

from collections.abc import Sequence

from google.protobuf import json_format, timestamp_pb2

from edgetune import validation
from edgetune.base.mode import PowerMode
from edgetune.base.roles import Role
from edgetune.base.workload import is_user_workload, parse_spec
from edgetune.control.configs import NodeConfig
from edgetune.control.tuningjobs import JOB_PHASES, NODE_PHASES
from edgetune.errors import InvalidArgument
from edgetune.planning.placement import InferencePlacement
from edgetune.planning.rounds import OptionTable, RoundNode, RoundOutcome, RoundRequest
from edgetune.powermodes.specs import SPECS
from edgetune.proto.serde.common import (
    ROUND_OBJECTIVE,
    budgets_from_dict,
    mode_from_proto,
    mode_to_proto,
    optional_value,
    profile_knobs,
    role_from_proto,
    role_to_proto,
    spec_from_proto,
    spec_to_proto,
)
from edgetune.proto.serde.tables import table_from_proto
from edgetune.proto.v1 import common_pb2, coordinator_pb2, profiler_pb2, tuning_pb2
from edgetune.store import NodeRecord, spec_to_dict
from edgetune.tuning.jobs import DEFAULT_PROFILES, NodeStatus, TuningJobSpec, TuningJobView


def _timestamp(epoch_s: float | None) -> timestamp_pb2.Timestamp | None:
    if epoch_s is None:
        return None
    ts = timestamp_pb2.Timestamp()
    ts.FromNanoseconds(int(round(epoch_s * 1e9)))
    return ts


def _device_dict(msg: common_pb2.DeviceSpec) -> dict:
    """The registered spec: the node's discovered tables, or the built-in spec its name names."""
    if msg.core_counts or msg.cpu_mhz or msg.gpu_mhz or msg.emc_mhz:
        return spec_to_dict(spec_from_proto(msg, "node.device"))
    if msg.name in SPECS:
        return spec_to_dict(SPECS[msg.name])
    return {"name": msg.name} if msg.name else {}


#: Longest hostname (DNS) and agent address (host:port), most labels of a node and longest label text.
MAX_HOSTNAME_LENGTH = 253
MAX_ADDRESS_LENGTH = 512
MAX_LABELS = 64
MAX_LABEL_LENGTH = 256


def node_record_from_proto(msg: coordinator_pb2.NodeInfo) -> NodeRecord:
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


def node_info_to_proto(record: NodeRecord) -> coordinator_pb2.NodeInfo:
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
    seen = _timestamp(record.last_seen_s)
    if seen is not None:
        msg.last_seen.CopyFrom(seen)
    return msg


def workload_to_dict(msg: common_pb2.Workload) -> dict:
    """The Workload without its role (kept separately) as a JSON dict."""
    out = json_format.MessageToDict(msg, preserving_proto_field_name=True)
    out.pop("role", None)
    return out


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


def _batch_sizes(values: Sequence[int]) -> tuple[int, ...] | None:
    """Empty (proto3's absent) is None: any batch size; checked by the round library."""
    return tuple(int(b) for b in values) or None


def _efficiency(values) -> dict[int, float] | None:
    return {int(b): float(r) for b, r in values.items()} or None


def _options_from_proto(options: common_pb2.PredictionTable, at: str) -> OptionTable | None:
    """The node's options (None: no rows, use the stored ones); std columns are not planned on."""
    rows = table_from_proto(options, at, allow_empty=True)
    if not len(rows):
        return None
    return OptionTable(batch_size=rows.batch_size, time_ms=rows.time_ms, power_w=rows.power_w, modes=rows.modes)


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


def config_to_proto(cfg: NodeConfig) -> coordinator_pb2.NodeConfig:
    msg = coordinator_pb2.NodeConfig(node_id=cfg.node_id, revision=cfg.revision, batch_size=cfg.batch_size,
                                     round_id=cfg.round_id, restore=cfg.restore, reason=cfg.reason, epoch=cfg.epoch)
    if cfg.mode is not None:
        msg.mode.CopyFrom(mode_to_proto(cfg.mode))
    if cfg.workload or cfg.role:
        json_format.ParseDict(dict(cfg.workload), msg.workload, ignore_unknown_fields=True)
        msg.workload.role = common_pb2.Role.ValueType(role_to_proto(cfg.role))
    for name in ("valid_from", "valid_until"):
        ts = _timestamp(getattr(cfg, f"{name}_s"))
        if ts is not None:
            getattr(msg, name).CopyFrom(ts)
    if cfg.power_budget_w is not None:
        msg.power_budget_w = cfg.power_budget_w
    return msg


def node_budget_from_proto(msg: coordinator_pb2.UpdateBudgetRequest) -> float:
    value = optional_value(msg.budgets, "power_budget_w")
    if value is None:
        raise InvalidArgument("budgets.power_budget_w", f"is required to change node {msg.node_id!r}'s budget",
                              validation.POWER_BUDGET_ALLOWED)
    return validation.power_budget_w(value, "budgets.power_budget_w")


def inference_update_from_proto(msg: coordinator_pb2.UpdateBudgetRequest) -> dict | None:
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
    return {"arrival_rps": None if arrival is None else validation.arrival_rps(arrival, "budgets.arrival_rps"),
            "latency_budget_ms": None if latency is None else validation.latency_budget_ms(latency, "budgets.latency_budget_ms"),
            "workload": name or None}


def placement_to_proto(placement: InferencePlacement, revision: int) -> coordinator_pb2.UpdateBudgetResponse:
    budgets = budgets_from_dict({"power_budget_w": placement.power_budget_w, "arrival_rps": placement.arrival_rps,
                                 "latency_budget_ms": placement.latency_budget_ms})
    return coordinator_pb2.UpdateBudgetResponse(budgets=budgets, reason="" if placement.feasible else placement.reason,
                                                config_revision=revision)


# --- tuning jobs ---------------------------------------------------------------------------------

_TUNING_OBJECTIVES = {tuning_pb2.TUNING_OBJECTIVE_UNSPECIFIED: "min-time",
                      tuning_pb2.TUNING_OBJECTIVE_MIN_TIME: "min-time",
                      tuning_pb2.TUNING_OBJECTIVE_MIN_ENERGY: "min-energy"}
_TUNING_METHODS = {tuning_pb2.TUNING_METHOD_UNSPECIFIED: "frontier", tuning_pb2.TUNING_METHOD_FRONTIER: "frontier",
                   tuning_pb2.TUNING_METHOD_RANDOM: "random", tuning_pb2.TUNING_METHOD_CAP_SEARCH: "cap-search"}
_NODE_PHASES = {name: getattr(tuning_pb2, f"NODE_PHASE_{name.upper()}") for name in NODE_PHASES}
_JOB_PHASES = {name: getattr(tuning_pb2, f"JOB_PHASE_{name.upper()}") for name in JOB_PHASES}


def tuning_spec_from_proto(msg: tuning_pb2.TuningJobSpec) -> TuningJobSpec:
    """The checked spec (InvalidArgument naming ``spec.<field>``)."""
    if msg.objective not in _TUNING_OBJECTIVES:
        raise InvalidArgument("spec.objective", f"unknown value {msg.objective}", "MIN_TIME, MIN_ENERGY")
    if msg.method not in _TUNING_METHODS:
        raise InvalidArgument("spec.method", f"unknown value {msg.method}", "FRONTIER, RANDOM, CAP_SEARCH")
    sizes = tuple(msg.batch_sizes) or ((msg.workload.batch_size,) if msg.workload.batch_size else (16,))
    return TuningJobSpec(
        name=msg.name, workload=msg.workload.name,
        role=role_from_proto(msg.workload.role, "spec.workload.role", default=Role.TRAIN).value,
        batch_sizes=sizes, nodes=tuple(msg.nodes), selector_device=msg.selector.device,
        selector_labels=dict(msg.selector.labels), objective=_TUNING_OBJECTIVES[msg.objective],
        time_budget_ms=optional_value(msg, "time_budget_ms"), power_budget_w=optional_value(msg, "power_budget_w"),
        node_power_budget_w=dict(msg.node_power_budget_w), risk=optional_value(msg, "risk"),
        profiles=msg.profiles or DEFAULT_PROFILES, method=_TUNING_METHODS[msg.method],
        reference_model_id=msg.reference_model_id).check()


def tuning_spec_to_proto(spec: TuningJobSpec) -> tuning_pb2.TuningJobSpec:
    msg = tuning_pb2.TuningJobSpec(
        name=spec.name, workload=common_pb2.Workload(name=spec.workload,
                                                     role=common_pb2.Role.ValueType(role_to_proto(spec.role))),
        batch_sizes=list(spec.batch_sizes), nodes=list(spec.nodes),
        selector=tuning_pb2.NodeSelector(device=spec.selector_device, labels=dict(spec.selector_labels)),
        objective=(tuning_pb2.TUNING_OBJECTIVE_MIN_ENERGY if spec.objective == "min-energy"
                   else tuning_pb2.TUNING_OBJECTIVE_MIN_TIME),
        node_power_budget_w=dict(spec.node_power_budget_w), profiles=spec.profiles,
        method=next(k for k, v in _TUNING_METHODS.items() if v == spec.method and k),
        reference_model_id=spec.reference_model_id)
    for name in ("time_budget_ms", "power_budget_w", "risk"):
        value = getattr(spec, name)
        if value is not None:
            setattr(msg, name, value)
    return msg


def node_status_to_proto(st: NodeStatus) -> tuning_pb2.NodeTuningStatus:
    msg = tuning_pb2.NodeTuningStatus(
        node_id=st.node_id, device=st.device, phase=_NODE_PHASES[st.phase], reason=st.reason, profiled=st.profiled,
        batch_size=st.batch_size, config_revision=st.config_revision,
        events=[tuning_pb2.TuningEvent(at=_timestamp(e.at_s), message=e.message) for e in st.events])
    if st.mode is not None:
        msg.mode.CopyFrom(mode_to_proto(PowerMode(int(st.mode[0]), st.mode[1], st.mode[2], st.mode[3])))
    for name in ("power_budget_w", "predicted_time_ms", "predicted_power_w", "predicted_power_upper_w",
                 "measured_time_ms", "measured_power_w"):
        value = getattr(st, name)
        if value is not None:
            setattr(msg, name, value)
    if st.started_s:
        msg.started.FromNanoseconds(int(round(st.started_s * 1e9)))
    if st.updated_s:
        msg.updated.FromNanoseconds(int(round(st.updated_s * 1e9)))
    return msg


def tuning_job_to_proto(view: TuningJobView) -> tuning_pb2.TuningJob:
    nodes = list(view.status.nodes.values()) if view.status is not None else []
    msg = tuning_pb2.TuningJob(spec=tuning_spec_to_proto(view.spec), phase=_JOB_PHASES[view.phase],
                               nodes=[node_status_to_proto(n) for n in nodes], revision=view.revision)
    if view.created_s:
        msg.created.FromNanoseconds(int(round(view.created_s * 1e9)))
    updated = view.status.updated_s if view.status is not None else view.created_s
    if updated:
        msg.updated.FromNanoseconds(int(round(updated * 1e9)))
    return msg


def profile_job_from_proto(msg: profiler_pb2.ProfileRequest) -> dict:
    """A ``SubmitProfiling`` request as the job payload the agents read (the request as JSON, proto
    field names); what can be checked without the node's device is checked here."""
    if not msg.workload.name:
        raise InvalidArgument("request.workload.name", "is empty", "a zoo workload or MODULE:FUNCTION")
    if is_user_workload(msg.workload.name):  # its form only: the node imports it from its --workload-path
        try:
            parse_spec(msg.workload.name)
        except InvalidArgument as exc:
            raise exc.renamed("request.workload.name") from None
    if not msg.modes and msg.random_modes <= 0:
        raise InvalidArgument("request.modes", "no modes to profile", "modes, or random_modes > 0")
    for i, m in enumerate(msg.modes):
        mode_from_proto(m, f"request.modes[{i}]")
    profile_knobs(msg, "request.")
    return json_format.MessageToDict(msg, preserving_proto_field_name=True)
