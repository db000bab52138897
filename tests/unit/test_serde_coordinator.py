"""``proto.serde.coordinator``: nodes, rounds, node configs and budgets round-trip through their
messages (record -> message -> record equal, for what the wire carries), and bad input is refused
naming the field."""

from __future__ import annotations

import math

import numpy as np
import pytest

from edgetune.base.mode import PowerMode
from edgetune.base.records import OptionTable
from edgetune.errors import InvalidArgument
from edgetune.optimization.problems import Solution
from edgetune.planning.placement import InferencePlacement, InferenceUpdate
from edgetune.planning.planner import NodePlan, RoundPlan
from edgetune.planning.rounds import RoundNode, RoundOutcome, RoundRequest
from edgetune.powermodes.specs import get_spec
from edgetune.proto.serde import coordinator as serde
from edgetune.proto.serde.common import spec_to_proto
from edgetune.proto.v1 import common_pb2, coordinator_pb2
from edgetune.store import Heartbeat, NodeConfig, NodeRecord, SiteBudgets, spec_to_dict

FAST = PowerMode(12, 2201.6, 1300.5, 3199.0)
MID = PowerMode(8, 1497.6, 828.75, 3199.0)


def _wire(msg):
    """``msg`` as another process reads it."""
    return type(msg).FromString(msg.SerializeToString())


# --- nodes ------------------------------------------------------------------------------------------

NODE = NodeRecord("orin-1", hostname="jetson-a", address="10.0.0.7:50051", device=spec_to_dict(get_spec("orin-agx")),
                  labels={"rack": "a"}, power_budget_w=30.0, live=True, state="ready", last_seen_s=1_700_000_000.5,
                  current_mode=MID.as_dict(), applied_revision=3, applied_epoch=17, refused_revision=2,
                  refused_reason="mode out of table")


def test_a_listed_node_round_trips():
    got = serde.node_from_proto(_wire(serde.node_to_proto(NODE)))
    assert got == NODE and got.spec == get_spec("orin-agx")


def test_a_lost_node_reads_back_not_live():
    lost = NodeRecord("n", device={"name": "nano"}, state="lost")
    got = serde.node_from_proto(_wire(serde.node_to_proto(lost)))
    assert not got.live and got.state == "lost" and got.last_seen_s is None and got.power_budget_w is None


def test_a_registration_takes_the_built_in_tables_of_a_bare_device_name():
    msg = coordinator_pb2.NodeInfo(node_id="n", device=common_pb2.DeviceSpec(name="orin-agx"), power_budget_w=20.0)
    got = serde.registered_node_from_proto(msg)
    assert got.spec == get_spec("orin-agx") and got.power_budget_w == 20.0 and got.current_mode is None
    assert serde.registered_node_from_proto(coordinator_pb2.NodeInfo(node_id="n")).device == {}


def test_a_registration_keeps_what_the_agent_sent():
    msg = serde.node_to_proto(NODE)
    got = serde.registered_node_from_proto(msg)
    assert (got.node_id, got.hostname, got.address, got.labels, got.power_budget_w, got.state, got.current_mode) == (
        NODE.node_id, NODE.hostname, NODE.address, NODE.labels, NODE.power_budget_w, NODE.state, NODE.current_mode)
    assert got.device == NODE.device


@pytest.mark.parametrize(("change", "field"), [
    (lambda m: setattr(m, "hostname", "h" * 300), "node.hostname"),
    (lambda m: (setattr(m, "node_id", ""), setattr(m, "hostname", "not a node id!")), "node.hostname"),
    (lambda m: setattr(m, "address", "a" * 600), "node.address"),
    (lambda m: m.labels.update({"k" * 300: "x"}), "node.labels[key]"),
    (lambda m: setattr(m.current_mode, "gpu_mhz", -1.0), "node.current_mode.gpu_mhz"),
    (lambda m: m.device.cpu_mhz.append(-5.0), f"node.device.cpu_mhz[{len(get_spec('orin-agx').cpu_mhz)}]"),
])
def test_a_bad_registration_is_refused_naming_the_field(change, field):
    msg = serde.node_to_proto(NODE)
    change(msg)
    with pytest.raises(InvalidArgument) as err:
        serde.registered_node_from_proto(msg)
    assert err.value.field == field


def test_a_heartbeat_is_what_the_agent_reported():
    msg = coordinator_pb2.HeartbeatRequest(node_id="n", current_mode=common_pb2.PowerMode(
        cores=8, cpu_mhz=1497.6, gpu_mhz=828.75, emc_mhz=3199.0), power_w=21.5, state="running", applied_revision=4,
        applied_epoch=9, refused_revision=3, refused_reason="no")
    assert serde.heartbeat_from_proto(msg) == Heartbeat("running", MID.as_dict(), 21.5, 4, 0.0, 9, 3, "no")
    with pytest.raises(InvalidArgument) as err:
        serde.heartbeat_from_proto(coordinator_pb2.HeartbeatRequest(
            node_id="n", current_mode=common_pb2.PowerMode(cores=-1, cpu_mhz=1.0, gpu_mhz=1.0, emc_mhz=1.0)))
    assert err.value.field == "current_mode.cores"


# --- rounds -----------------------------------------------------------------------------------------

OPTIONS = OptionTable.from_rows([(FAST, 32, 100.0, 42.0), (MID, 32, 150.0, 30.0), (MID, 8, 40.0, 29.0)])


def _request(**kw) -> RoundRequest:
    nodes = (RoundNode("a", 6000, options=OPTIONS, batch_sizes=(32,), batch_efficiency={32: 1.0, 8: math.inf}),
             RoundNode("b", 3000, power_budget_w=20.0))
    base = {"round_id": "r1", "objective": "energy", "deadline_s": 600.0, "site_power_budget_w": 80.0,
            "workload": {"name": "resnet18", "batch_size": 32}, "role": "infer", "apply": True,
            "batch_sizes": (8, 32), "batch_efficiency": {8: 1.2, 32: 1.0}}
    return RoundRequest(nodes, **{**base, **kw})


@pytest.mark.parametrize("request_", [_request(), _request(objective="makespan", deadline_s=None, role="train",
                                                            batch_sizes=None, batch_efficiency=None, apply=False)])
def test_a_round_request_round_trips(request_):
    got = serde.round_request_from_proto(_wire(serde.round_request_to_proto(request_)))
    assert got.to_json() == request_.to_json()  # option tables are arrays: compared as their JSON
    assert got.nodes[0].options is not None and got.nodes[1].options is None


@pytest.mark.parametrize(("change", "field"), [
    (lambda m: setattr(m, "objective", 9), "objective"),
    (lambda m: setattr(m.workload, "role", 9), "workload.role"),
    (lambda m: m.nodes[0].options.time_ms.__setitem__(1, -1.0), "nodes[0].options.time_ms[1]"),
    (lambda m: m.nodes[0].options.cores.__setitem__(0, 0), "nodes[0].options.cores[0]"),
])
def test_a_bad_round_request_is_refused_naming_the_field(change, field):
    msg = serde.round_request_to_proto(_request())
    change(msg)
    with pytest.raises(InvalidArgument) as err:
        serde.round_request_from_proto(msg)
    assert err.value.field == field


def test_a_round_outcome_round_trips():
    plan = RoundPlan(True, "energy", None, makespan_s=120.0, energy_j=4000.0,
                     nodes=[NodePlan("a", serde.ROW_NOT_SENT, 32, 120.0, 30.0, 3600.0, MID),
                            NodePlan("b", serde.ROW_NOT_SENT, 8, 60.0, 6.5, 390.0, FAST)],
                     fastest_energy_j=4500.0, fastest_makespan_s=100.0)
    outcome = RoundOutcome("r1", plan)
    msg = _wire(serde.round_outcome_to_proto(outcome))
    assert msg.energy_saved_j == 500.0
    assert serde.round_outcome_from_proto(msg, "energy") == outcome


def test_an_infeasible_round_carries_its_reason_and_the_nodes_planned_around():
    outcome = RoundOutcome("r2", RoundPlan(False, "makespan", "no option within 5 W"),
                           planned_around=(("c", "lost: no heartbeat"),))
    msg = _wire(serde.round_outcome_to_proto(outcome))
    assert not msg.feasible and msg.reason == "no option within 5 W; planned around c (lost: no heartbeat)"
    back = serde.round_outcome_from_proto(msg, "makespan")
    assert not back.plan.feasible and back.reason == outcome.reason and back.plan.nodes == []


# --- node configs -----------------------------------------------------------------------------------


@pytest.mark.parametrize("config", [
    NodeConfig("a", MID, 32, {"name": "resnet18", "batch_size": 32}, "infer", "r1", 1_700_000_000.25,
               1_700_000_600.5, 25.0, False, "round r1 (energy)", revision=4, epoch=1_700_000_000_000),
    NodeConfig("b", None, restore=True, reason="restore", revision=2),
])
def test_a_node_config_round_trips(config):
    assert serde.config_from_proto(_wire(serde.config_to_proto(config))) == config


def test_a_config_mode_is_read_as_sent_for_the_node_to_judge():
    # the node checks a pushed mode against its own device and reports a refusal with the revision
    msg = serde.config_to_proto(NodeConfig("a", MID, 32))
    msg.mode.cores = 0
    assert serde.config_from_proto(msg).mode == PowerMode(0, MID.cpu_mhz, MID.gpu_mhz, MID.emc_mhz)


# --- budgets ----------------------------------------------------------------------------------------


def test_a_node_budget_request_and_its_answer_round_trip():
    msg = _wire(serde.node_budget_request("a", 18.5))
    assert serde.node_budget_from_proto(msg) == 18.5 and serde.inference_update_from_proto(msg) is None
    assert serde.node_budget_from_response(_wire(serde.node_budget_to_proto(18.5))) == 18.5
    assert serde.node_budget_from_response(_wire(serde.node_budget_to_proto(None))) is None


@pytest.mark.parametrize(("budgets", "field"), [(common_pb2.Budgets(), "budgets.power_budget_w"),
                                                (common_pb2.Budgets(power_budget_w=0.0), "budgets.power_budget_w"),
                                                (common_pb2.Budgets(power_budget_w=math.inf), "budgets.power_budget_w")])
def test_a_bad_node_budget_is_refused_naming_the_field(budgets, field):
    with pytest.raises(InvalidArgument) as err:
        serde.node_budget_from_proto(coordinator_pb2.UpdateBudgetRequest(node_id="a", budgets=budgets))
    assert err.value.field == field


def test_site_budgets_round_trip():
    site = SiteBudgets(site_power_budget_w=80.0, deadline_s=600.0)
    assert serde.site_budgets_from_response(_wire(serde.site_budgets_to_proto(site))) == site
    request = coordinator_pb2.UpdateBudgetRequest(budgets=common_pb2.Budgets(deadline_s=300.0))
    assert serde.site_budgets_from_proto(request) == SiteBudgets(None, 300.0)  # None: keep the standing one
    assert serde.site_budgets_from_response(serde.site_budgets_to_proto(SiteBudgets())) == SiteBudgets()


def test_an_inference_update_names_what_changes():
    msg = coordinator_pb2.UpdateBudgetRequest(node_id="inf", budgets=common_pb2.Budgets(arrival_rps=50.0),
                                              workload=common_pb2.Workload(name="resnet18"))
    assert serde.inference_update_from_proto(msg) == InferenceUpdate(50.0, None, "resnet18")


@pytest.mark.parametrize(("msg", "field"), [
    (coordinator_pb2.UpdateBudgetRequest(budgets=common_pb2.Budgets(arrival_rps=50.0)), "node_id"),
    (coordinator_pb2.UpdateBudgetRequest(node_id="i", budgets=common_pb2.Budgets(arrival_rps=0.0)),
     "budgets.arrival_rps"),
    (coordinator_pb2.UpdateBudgetRequest(node_id="i", budgets=common_pb2.Budgets(latency_budget_ms=-3.0)),
     "budgets.latency_budget_ms"),
])
def test_a_bad_inference_update_is_refused_naming_the_field(msg, field):
    with pytest.raises(InvalidArgument) as err:
        serde.inference_update_from_proto(msg)
    assert err.value.field == field


def test_a_placement_answers_its_budgets_revision_and_why_not():
    ok = InferencePlacement("inf", "resnet18", 50.0, 100.0, 20.0, Solution(True))
    msg = _wire(serde.placement_to_proto(ok, 3))
    assert (msg.budgets.arrival_rps, msg.budgets.latency_budget_ms, msg.budgets.power_budget_w) == (50.0, 100.0, 20.0)
    assert msg.config_revision == 3 and msg.reason == ""
    no = InferencePlacement("inf", "resnet18", 500.0, 10.0, None, Solution(False, reason="nothing keeps up"))
    msg = _wire(serde.placement_to_proto(no, 3))
    assert msg.reason == "nothing keeps up" and not msg.budgets.HasField("power_budget_w")


def test_options_keep_their_columns_on_the_wire():
    msg = serde.round_request_to_proto(_request())
    table = msg.nodes[0].options
    assert list(table.batch_size) == [32, 32, 8] and list(table.power_w) == [42.0, 30.0, 29.0]
    assert not table.power_std_w  # options are planned on their power as given
    np.testing.assert_array_equal(np.asarray(table.cores), OPTIONS.modes[:, 0])
    assert spec_to_proto(get_spec("orin-agx")) == serde.node_to_proto(NODE).device
