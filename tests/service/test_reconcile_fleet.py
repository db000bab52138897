"""A job's nodes of one device model pool their profiles (edgetune.tuning.fleet), in one process: the leader's
Reconciler on MemoryStore with the estimation library and simulated boards (``test_reconcile_drift``'s).

Three Orin AGX nodes, one of them a hotter board (its power 12 % over its peers'): the reference is
fine-tuned once on the three nodes' points, each node fits its own residual on that fleet model (``ref+gp``),
and each is Applied within its budget — the hot one too, by its own correction.
"""

from __future__ import annotations

from harness import wait_for
from test_reconcile_drift import BUDGET_W, DEVICE, WORKLOAD, leader_loop
from test_reconcile_drift import estimator as estimator  # the module-scoped fixture: a fitted Orin reference

from edgetune.control.registry import NodeRegistry
from edgetune.control.tuningjobs import TuningJobs
from edgetune.powermodes.specs import get_spec
from edgetune.store import MemoryStore, NodeRecord, spec_to_dict
from edgetune.tuning.fleet import NODE_METHOD, fleet_model_id
from edgetune.tuning.jobs import NodePhase, TuningJobSpec
from edgetune.tuning.protocols import reference_model_id

NODES = ("orin-agx-1", "orin-agx-2", "orin-agx-3")
PROFILES = 8


def test_a_jobs_nodes_of_one_device_model_share_a_fleet_model_and_each_fits_its_own_board(estimator, monkeypatch):
    looked_up: list[str] = []
    find = estimator.find
    monkeypatch.setattr(estimator, "find", lambda model_id: looked_up.append(model_id) or find(model_id))
    store = MemoryStore()
    registry = NodeRegistry(store, heartbeat_ttl_s=120)
    for node_id in NODES:
        registry.register(NodeRecord(node_id, device=spec_to_dict(get_spec(DEVICE)), power_budget_w=BUDGET_W))
    with leader_loop(store, registry, estimator, NODES) as (rec, boards):
        boards["orin-agx-3"].power_factor = 1.12
        jobs = TuningJobs(store)
        jobs.submit(TuningJobSpec("fleet", WORKLOAD, nodes=NODES, profiles=PROFILES, method="random"))
        status = wait_for(lambda: (s := jobs.get("fleet").status) is not None and len(s.nodes) == 3
                          and all(n.terminal for n in s.nodes.values()) and s, 90, "every node Applied or Failed")
        pools = rec.cached()["pools"]
    # one lookup of the reference for the job's device model, though its three workers start in one pass
    assert looked_up == [reference_model_id(DEVICE, "train")], looked_up
    fleet = estimator.find(fleet_model_id("fleet", DEVICE))
    assert fleet is not None and fleet.kind == "transfer"
    for node_id, node in status.nodes.items():
        assert node.phase == NodePhase.APPLIED, (node_id, node.reason)
        assert node.measured_power_w is not None and node.measured_power_w <= BUDGET_W
        told = [e.message for e in node.events if e.reason == "FleetModel"]
        # the pool: every node's profiles (the held-out modes stay each node's own)
        assert told and f"on {3 * PROFILES} points of 3 {DEVICE} nodes" in told[0], told
        own = estimator.find(f"tuning-fleet-{node_id}")
        assert own is not None and own.kind == NODE_METHOD  # its own residual on the fleet model
    assert pools == 1
