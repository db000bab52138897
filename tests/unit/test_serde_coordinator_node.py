"""edgetune.proto.serde.coordinator, the node's side: what an agent registers and beats, and the configs
it reads back (messages built as the coordinator sends them), with the refusals naming the field."""

from __future__ import annotations

import pytest

from edgetune.base.mode import PowerMode
from edgetune.errors import InvalidArgument
from edgetune.powermodes.specs import get_spec
from edgetune.proto.serde import coordinator as serde
from edgetune.proto.serde.common import mode_from_proto, mode_to_proto, spec_from_proto
from edgetune.proto.v1 import common_pb2, coordinator_pb2
from edgetune.store import Heartbeat, NodeAnnouncement, NodeConfig, NodeRegistered

ORIN = get_spec("orin-agx")
MODE = PowerMode(8, 1728.0, 930.75, 3199.0)


def test_an_announcement_is_a_registration_with_the_discovered_spec():
    node = NodeAnnouncement("jetson-7", "jetson-7.local", "10.0.0.7:50051", ORIN, MODE, state="running",
                            labels={"rack": "a"}, power_budget_w=25.0)
    msg = serde.announcement_to_proto(node).node
    assert (msg.node_id, msg.hostname, msg.address, msg.state, dict(msg.labels)) == \
        ("jetson-7", "jetson-7.local", "10.0.0.7:50051", "running", {"rack": "a"})
    assert mode_from_proto(msg.current_mode) == MODE and msg.power_budget_w == 25.0
    spec = spec_from_proto(msg.device)
    assert (spec.name, spec.core_counts, spec.gpu_mhz, spec.presets) == (ORIN.name, ORIN.core_counts, ORIN.gpu_mhz,
                                                                         ORIN.presets)
    unbudgeted = serde.announcement_to_proto(NodeAnnouncement("n", "h", "a:1", ORIN, MODE)).node
    assert not unbudgeted.HasField("power_budget_w") and unbudgeted.state == "ready"  # none sent: the stored one stays


def test_the_registration_answer():
    msg = coordinator_pb2.RegisterNodeResponse(node_id="jetson-7", heartbeat_interval_s=2.5, config_revision=4,
                                               config_epoch=1_700_000_000_000)
    assert serde.registered_from_proto(msg) == NodeRegistered("jetson-7", 2.5, 4, 1_700_000_000_000)
    assert serde.registered_from_proto(coordinator_pb2.RegisterNodeResponse(node_id="n")).heartbeat_interval_s == 0.0


def test_a_heartbeat_carries_the_beat():
    beat = Heartbeat(state="profiling", current_mode=MODE.as_dict(), power_w=14.5, applied_revision=3,
                     applied_epoch=7, refused_revision=4, refused_reason="mode.cores: 13 is not a core count")
    msg = serde.heartbeat_to_proto("jetson-7", beat)
    assert (msg.node_id, msg.state, msg.power_w, msg.applied_revision, msg.applied_epoch, msg.refused_revision,
            msg.refused_reason) == ("jetson-7", "profiling", 14.5, 3, 7, 4, beat.refused_reason)
    assert mode_from_proto(msg.current_mode) == MODE
    bare = serde.heartbeat_to_proto("n", Heartbeat())
    assert not bare.HasField("current_mode") and bare.power_w == 0.0  # no monitor: no power
    assert serde.reregister_from_proto(coordinator_pb2.HeartbeatResponse(reregister=True))
    assert not serde.reregister_from_proto(coordinator_pb2.HeartbeatResponse(config_revision=3))


def test_a_watch_starts_after_the_last_config_seen():
    msg = serde.watch_config_request("jetson-7", 5, 9)
    assert (msg.node_id, msg.after_revision, msg.after_epoch) == ("jetson-7", 5, 9)


def _config_msg(cfg: NodeConfig) -> coordinator_pb2.NodeConfig:
    """The message the coordinator sends for ``cfg`` (its ``config_to_proto``)."""
    msg = coordinator_pb2.NodeConfig(node_id=cfg.node_id, revision=cfg.revision, batch_size=cfg.batch_size,
                                     round_id=cfg.round_id, restore=cfg.restore, reason=cfg.reason, epoch=cfg.epoch)
    if cfg.mode is not None:
        msg.mode.CopyFrom(mode_to_proto(cfg.mode))
    msg.workload.name = str(cfg.workload.get("name", ""))
    msg.workload.role = common_pb2.ROLE_INFER if cfg.role == "infer" else common_pb2.ROLE_TRAIN
    for name in ("valid_from", "valid_until"):
        at_s = getattr(cfg, f"{name}_s")
        if at_s is not None:
            getattr(msg, name).FromNanoseconds(int(at_s) * 10**9 + round((at_s - int(at_s)) * 1e9))
    if cfg.power_budget_w is not None:
        msg.power_budget_w = cfg.power_budget_w
    return msg


@pytest.mark.parametrize("cfg", [
    NodeConfig("jetson-7", mode=MODE, batch_size=32, workload={"name": "mobilenetv3"}, role="infer", round_id="r1",
               valid_from_s=1_700_000_000.5, valid_until_s=1_700_000_060.25, power_budget_w=25.0, reason="planned",
               revision=3, epoch=1_700_000_000_000),
    NodeConfig("jetson-7", restore=True, revision=4, epoch=1_700_000_000_000),
], ids=["mode", "restore"])
def test_a_pushed_config_reads_as_the_config_published(cfg):
    assert serde.config_from_proto(_config_msg(cfg)) == cfg


def test_a_config_mode_is_read_as_sent_for_the_device_to_judge():
    msg = _config_msg(NodeConfig("n", mode=PowerMode(13, 9999.0, 1300.5, 3199.0), revision=1))
    assert serde.config_from_proto(msg).mode == PowerMode(13, 9999.0, 1300.5, 3199.0)


def test_a_config_with_an_unknown_role_is_refused_naming_it():
    msg = _config_msg(NodeConfig("n", mode=MODE, revision=1))
    msg.workload.role = 9
    with pytest.raises(InvalidArgument) as err:
        serde.config_from_proto(msg)
    assert err.value.field == "config.workload.role"
