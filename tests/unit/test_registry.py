"""Node registry on the in-memory store: registration, heartbeat TTLs, lost nodes, budgets."""

from __future__ import annotations

import pytest

from edgetune.control.registry import NodeRegistry
from edgetune.errors import InvalidArgument, NotFound
from edgetune.powermodes.specs import get_spec
from edgetune.store import NodeRecord, spec_from_dict, spec_to_dict


def _node(node_id: str = "", **kw) -> NodeRecord:
    return NodeRecord(node_id=node_id, hostname=kw.pop("hostname", node_id or "jetson-a"),
                      address=kw.pop("address", "10.0.0.7:50051"), device=spec_to_dict(get_spec("orin-agx")), **kw)


def test_register_assigns_ids_and_reads_back(store):
    reg = NodeRegistry(store)
    a = reg.register(_node("", hostname="jetson-a", labels={"rack": "1"}, power_budget_w=30.0))
    b = reg.register(_node("", hostname=""))
    assert a.node_id == "jetson-a" and a.live and a.state == "ready" and a.power_budget_w == 30.0
    assert b.node_id.startswith("node-")
    got = reg.get("jetson-a")
    assert got.labels == {"rack": "1"} and got.device_model == "orin-agx"
    assert got.spec == get_spec("orin-agx")  # tables survive the JSON round trip
    assert [n.node_id for n in reg.nodes()] == sorted([a.node_id, b.node_id])


def test_reregistration_keeps_the_operator_budget(store):
    reg = NodeRegistry(store)
    reg.register(_node("n1", power_budget_w=40.0))
    reg.update_budget("n1", 25.0)
    again = reg.register(_node("n1"))  # an agent restart: no budget in its registration
    assert again.power_budget_w == 25.0


def test_heartbeat_expiry_marks_lost_and_a_beat_revives(store, clock):
    reg = NodeRegistry(store, heartbeat_ttl_s=1.0)
    reg.register(_node("n1"))
    reg.register(_node("n2"))
    assert {n.node_id for n in reg.live_nodes()} == {"n1", "n2"}
    clock.advance(0.6)
    assert reg.heartbeat("n1", state="running", power_w=21.5, applied_revision=3)
    assert not reg.lost_nodes()
    clock.advance(0.6)  # n2's beat is 1.2 s old, n1's 0.6 s
    lost = reg.lost_nodes()
    assert [n.node_id for n in lost] == ["n2"]
    assert lost[0].state == "lost" and lost[0].last_seen_s is not None  # last beat remembered after expiry
    n1 = reg.get("n1")
    assert n1.live and n1.state == "running" and n1.power_w == 21.5 and n1.applied_revision == 3
    assert reg.heartbeat("n2")
    assert reg.get("n2").live


def test_heartbeat_of_unknown_node_asks_to_register(store):
    reg = NodeRegistry(store)
    assert reg.heartbeat("ghost") is False
    reg.register(_node("n1"))
    with pytest.raises(InvalidArgument, match="state"):
        reg.heartbeat("n1", state="sleeping")


def test_budget_updates_and_errors_name_the_field(store):
    reg = NodeRegistry(store)
    reg.register(_node("n1"))
    assert reg.update_budget("n1", 18.5).power_budget_w == 18.5
    assert reg.update_budget("n1", None).power_budget_w is None
    with pytest.raises(NotFound, match="node_id"):
        reg.update_budget("nope", 10.0)
    with pytest.raises(InvalidArgument, match="power_budget_w"):
        reg.update_budget("n1", -3.0)
    with pytest.raises(InvalidArgument, match="node.power_budget_w"):
        reg.register(_node("n2", power_budget_w=float("nan")))


def test_unavailable_nodes_are_live_but_not_plannable(store):
    reg = NodeRegistry(store)
    reg.register(_node("n1"))
    reg.register(_node("n2"))
    reg.set_unavailable("n2", "cordoned")
    n2 = reg.get("n2")
    assert n2.live and n2.state == "unavailable" and n2.unavailable_reason == "cordoned"
    assert [n.node_id for n in reg.plannable_nodes()] == ["n1"]
    reg.set_unavailable("n2", None)
    assert len(reg.plannable_nodes()) == 2


def test_a_new_registry_resumes_from_the_store(store):
    NodeRegistry(store).register(_node("n1", power_budget_w=12.0))
    fresh = NodeRegistry(store)  # a restarted coordinator
    assert fresh.get("n1").power_budget_w == 12.0 and fresh.get("n1").live
    assert fresh.deregister("n1") and not fresh.exists("n1")


def test_spec_dict_round_trip_and_missing_tables():
    spec = get_spec("xavier-agx")
    assert spec_from_dict(spec_to_dict(spec)) == spec
    assert spec_from_dict({"name": "orin-agx"}) is None
