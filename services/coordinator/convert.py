"""Coordinator messages <-> the coordination library's types (edges of the servicer only)."""

from __future__ import annotations

from collections.abc import Sequence

from google.protobuf import json_format, timestamp_pb2

from edgetune import validation
from edgetune.coordination.configs import NodeConfig
from edgetune.coordination.inference import InferencePlacement
from edgetune.coordination.registry import NodeRecord, spec_to_dict
from edgetune.coordination.rounds import OptionTable, RoundNode, RoundOutcome, RoundRequest
from edgetune.devices.base import Role
from edgetune.errors import InvalidArgument
from edgetune.powermodes.mode import PowerMode
from edgetune.powermodes.specs import SPECS
from edgetune.proto.convert import (
    ROUND_OBJECTIVE,
    budgets_from_dict,
    mode_from_proto,
    mode_to_proto,
    optional_value,
    role_from_proto,
    role_to_proto,
    spec_from_proto,
    spec_to_proto,
)
from edgetune.proto.tables import table_from_proto
from edgetune.proto.v1 import common_pb2, coordinator_pb2


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


def node_record_from_proto(msg: coordinator_pb2.NodeInfo) -> NodeRecord:
    current = mode_from_proto(msg.current_mode, "node.current_mode").as_dict() if msg.current_mode.cores else None
    return NodeRecord(node_id=msg.node_id, hostname=msg.hostname, address=msg.address,
                      device=_device_dict(msg.device), labels=dict(msg.labels),
                      power_budget_w=optional_value(msg, "power_budget_w"), state=msg.state, current_mode=current)


def node_info_to_proto(record: NodeRecord) -> coordinator_pb2.NodeInfo:
    msg = coordinator_pb2.NodeInfo(node_id=record.node_id, hostname=record.hostname, address=record.address,
                                   labels=record.labels, state=record.state)
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
                                     round_id=cfg.round_id, restore=cfg.restore, reason=cfg.reason)
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
