"""``coordinator.proto`` messages <-> the library's records."""

from __future__ import annotations

from typing import Any

from google.protobuf import json_format, timestamp_pb2

from edgetune.base.mode import PowerMode
from edgetune.base.roles import Role
from edgetune.proto.serde.common import mode_to_proto, role_from_proto, spec_to_proto
from edgetune.proto.v1 import coordinator_pb2
from edgetune.store import Heartbeat, NodeAnnouncement, NodeConfig, NodeRegistered

# === the node's side ==========================================================================
# What a node's agent sends (its registration, its heartbeats, where its config watch starts) and
# reads back (the registration's answer, its configs): :mod:`edgetune.clients.nodes`.


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


def _epoch_s(ts: timestamp_pb2.Timestamp) -> float:
    return ts.seconds + ts.nanos / 1e9  # apart: Unix time in ns does not fit a double's 53 bits exactly


def node_config_from_proto(msg: coordinator_pb2.NodeConfig) -> NodeConfig:
    """A pushed config as the node reads it. Its mode is read as sent, not checked here: the node
    validates it against its own device (a mode it does not have is refused, and the refusal
    reported with the config's revision)."""
    mode = None
    if msg.HasField("mode"):
        m = msg.mode
        mode = PowerMode(int(m.cores), m.cpu_mhz, m.gpu_mhz, m.emc_mhz)
    workload: dict[str, Any] = {}
    role = Role.TRAIN
    if msg.HasField("workload"):
        workload = json_format.MessageToDict(msg.workload, preserving_proto_field_name=True)
        workload.pop("role", None)  # kept apart, as the library's name
        role = role_from_proto(msg.workload.role, "config.workload.role", default=Role.TRAIN)
    return NodeConfig(
        node_id=msg.node_id, mode=mode, batch_size=int(msg.batch_size), workload=workload, role=role.value,
        round_id=msg.round_id,
        valid_from_s=_epoch_s(msg.valid_from) if msg.HasField("valid_from") else None,
        valid_until_s=_epoch_s(msg.valid_until) if msg.HasField("valid_until") else None,
        power_budget_w=msg.power_budget_w if msg.HasField("power_budget_w") else None,
        restore=bool(msg.restore), reason=msg.reason, revision=int(msg.revision), epoch=int(msg.epoch))

