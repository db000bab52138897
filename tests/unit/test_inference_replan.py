"""Inference placement re-solved on an arrival-rate change: only that node's config moves,
and the decision meets the InferProblem's latency, keep-up and power budgets."""

from __future__ import annotations

import pytest

from edgetune.base.mode import PowerMode
from edgetune.base.records import OptionTable
from edgetune.control.configs import ConfigStore
from edgetune.control.leader import LeaderLease, NotLeader
from edgetune.control.registry import NodeRegistry
from edgetune.control.rounds import RoundCoordinator
from edgetune.devices.simulated.tables import truth_table
from edgetune.errors import FailedPrecondition, InvalidArgument, NotFound
from edgetune.planning.rounds import RoundNode, RoundRequest
from edgetune.powermodes.grids import fulcrum_grid
from edgetune.powermodes.specs import get_spec
from edgetune.store import MeasurementRecord, MemoryStore, NodeRecord, spec_to_dict

WORKLOAD = "mobilenetv3"
BATCHES = (1, 4, 16, 32, 64)
FAST, MID = PowerMode(12, 2201.6, 1300.5, 3199.0), PowerMode(8, 1728.0, 930.75, 3199.0)
TRAIN_OPTIONS = OptionTable.from_rows([(FAST, 32, 100.0, 42.0), (MID, 32, 150.0, 30.0)])


def infer_rows(node_id: str = "inf") -> list[dict]:
    spec = get_spec("orin-agx")
    rows = truth_table(spec, WORKLOAD, "infer", fulcrum_grid(spec).modes(), BATCHES)
    return [{**r, "id": f"{node_id}-{i}", "device_model": spec.name, "node_id": node_id} for i, r in enumerate(rows)]


@pytest.fixture
def setup():
    store = MemoryStore()
    registry = NodeRegistry(store, heartbeat_ttl_s=30.0)
    lease = LeaderLease(store, holder_id="me", lease_ms=10_000)
    lease.try_acquire()
    rounds = RoundCoordinator(store, registry, ConfigStore(store), lease)
    device = spec_to_dict(get_spec("orin-agx"))
    for n in ("a", "b"):
        registry.register(NodeRecord(n, device=device, power_budget_w=50.0))
    registry.register(NodeRecord("inf", device=device, power_budget_w=30.0))
    rows = infer_rows()
    store.put_measurements([MeasurementRecord.from_row(r) for r in rows])
    # a and b train (a round applied); "inf" serves inference
    out = rounds.plan(RoundRequest(tuple(RoundNode(n, 3200, options=TRAIN_OPTIONS) for n in "ab"),
                                   round_id="r1", workload={"name": "resnet18"}, apply=True))
    assert [p.revision for p in out.published] == [1, 1]
    yield store, registry, rounds, rows
    store.close()


def _check_budgets(placement, rows, power_budget_w):
    """λ = (β−1)/α + t_in ≤ L̂, t_in ≤ β/α (keep-up) and p_in ≤ P̂, from the measured row."""
    ev = placement.decision.evaluation
    row = next(r for r in rows if r["batch_size"] == ev.batch_size
               and PowerMode.from_mapping(r).as_tuple() == ev.mode.as_tuple())
    alpha, t_in = placement.arrival_rps, row["time_ms"]
    latency = (ev.batch_size - 1) / alpha * 1000.0 + t_in
    assert latency == pytest.approx(ev.latency_ms) and latency <= placement.latency_budget_ms
    assert t_in <= ev.batch_size / alpha * 1000.0
    assert row["power_w"] <= power_budget_w


def test_arrival_rate_change_republishes_only_that_node(setup):
    store, registry, rounds, rows = setup
    configs = rounds.configs
    low = rounds.update_arrival_rate("inf", 50.0, 100.0, workload=WORKLOAD)
    assert low.feasible and low.published.revision == 1 and low.published.changed
    cfg = configs.get("inf")
    assert (cfg.role, cfg.batch_size, cfg.mode, cfg.workload) == ("infer", low.decision.batch_size,
                                                                   low.decision.mode, {"name": WORKLOAD})
    _check_budgets(low, rows, 30.0)
    # the same rate again: nothing changes
    again = rounds.update_arrival_rate("inf", 50.0)
    assert again.published.revision == 1 and not again.published.changed
    # a higher rate: a bigger β (queueing at β=1 can no longer keep up), a new revision for "inf" only
    high = rounds.update_arrival_rate("inf", 400.0)  # latency budget and workload are the standing ones
    assert high.latency_budget_ms == 100.0 and high.workload == WORKLOAD
    assert high.decision.batch_size > low.decision.batch_size
    assert high.published.revision == 2 and high.published.changed
    _check_budgets(high, rows, 30.0)
    assert configs.revisions(["a", "b", "inf"]) == {"a": 1, "b": 1, "inf": 2}
    assert configs.get("inf").batch_size == high.decision.batch_size


def test_infeasible_rate_keeps_the_config_and_budget_change_resolves(setup):
    store, registry, rounds, rows = setup
    first = rounds.update_arrival_rate("inf", 200.0, 100.0, workload=WORKLOAD)
    assert first.feasible and first.published.revision == 1
    too_fast = rounds.update_arrival_rate("inf", 5000.0)
    assert not too_fast.feasible and too_fast.published is None and "keep up" in too_fast.reason
    assert rounds.configs.revision("inf") == 1
    # Back to 200 rps (the same decision: no new revision); then a lower power budget
    # re-solves the placement at the standing rate: β=4 at a slower mode within 25 W.
    assert not rounds.update_arrival_rate("inf", 200.0).published.changed
    change = rounds.update_node_budget("inf", 25.0)
    assert change.outcome is None and change.placement is not None  # in no training round; re-solved
    cfg = rounds.configs.get("inf")
    assert cfg.power_budget_w == 25.0 and rounds.configs.revision("inf") == 2 and cfg.mode != first.decision.mode
    placement = rounds.update_arrival_rate("inf", 200.0)
    assert placement.published.revision == 2 and not placement.published.changed
    _check_budgets(placement, rows, 25.0)
    assert rounds.configs.revisions(["a", "b"]) == {"a": 1, "b": 1}


def test_errors_name_the_field(setup):
    store, registry, rounds, rows = setup
    with pytest.raises(InvalidArgument, match="budgets.arrival_rps"):
        rounds.update_arrival_rate("inf", 0.0, 100.0, workload=WORKLOAD)
    with pytest.raises(InvalidArgument, match="budgets.latency_budget_ms"):
        rounds.update_arrival_rate("inf", 10.0, -5.0, workload=WORKLOAD)
    with pytest.raises(InvalidArgument, match="budgets.latency_budget_ms"):
        rounds.update_arrival_rate("inf", 10.0, workload=WORKLOAD)  # none standing yet
    with pytest.raises(InvalidArgument, match="workload.name"):
        rounds.update_arrival_rate("inf", 10.0, 100.0)
    # a node whose device model has no inference measurements of the workload (its own or any node's)
    registry.register(NodeRecord("nano", device=spec_to_dict(get_spec("orin-nano"))))
    with pytest.raises(FailedPrecondition, match=f"profile {WORKLOAD} with role infer"):
        rounds.update_arrival_rate("nano", 10.0, 100.0, workload=WORKLOAD)
    with pytest.raises(NotFound, match="node_id"):
        rounds.update_arrival_rate("ghost", 10.0, 100.0, workload=WORKLOAD)
    assert rounds.configs.revisions(["a", "b", "inf"]) == {"a": 1, "b": 1, "inf": 0}
    rounds.lease.release()
    with pytest.raises(NotLeader):
        rounds.update_arrival_rate("inf", 10.0, 100.0, workload=WORKLOAD)
