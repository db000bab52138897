"""Round planning glue on the in-memory store: budgets precedence, planning around lost
nodes, re-planning after a budget change with revisions only for changed nodes."""

from __future__ import annotations

import time
from dataclasses import replace

import pytest

from edgetune.base.mode import PowerMode
from edgetune.base.records import OptionTable
from edgetune.control.configs import ConfigStore
from edgetune.control.leader import LeaderLease, NotLeader
from edgetune.control.registry import NodeRegistry
from edgetune.control.rounds import RoundCoordinator
from edgetune.errors import FailedPrecondition, InvalidArgument
from edgetune.planning.rounds import RoundNode, RoundRequest
from edgetune.powermodes.specs import get_spec
from edgetune.store import ManualClock, MemoryStore, NodeRecord, spec_to_dict

FAST, MID = PowerMode(12, 2201.6, 1300.5, 3199.0), PowerMode(8, 1728.0, 930.75, 3199.0)
OPTIONS = OptionTable.from_rows([(FAST, 32, 100.0, 42.0), (MID, 32, 150.0, 30.0)])


def _setup(heartbeat_ttl_s: float, clock=time.monotonic):
    store = MemoryStore(clock=clock)
    registry = NodeRegistry(store, heartbeat_ttl_s=heartbeat_ttl_s)
    lease = LeaderLease(store, holder_id="me", lease_ms=10_000)
    lease.try_acquire()
    rounds = RoundCoordinator(store, registry, ConfigStore(store), lease)
    for n in ("a", "b", "c"):
        registry.register(NodeRecord(n, device=spec_to_dict(get_spec("orin-agx")), power_budget_w=50.0))
    return store, registry, rounds


@pytest.fixture
def setup():
    # every node stays live for the whole test: a short TTL let a slow CI step (0.85 s between
    # registration and a re-plan) lose them all, and the re-plan came back empty
    yield (parts := _setup(heartbeat_ttl_s=60.0))
    parts[0].close()


@pytest.fixture
def expiring():
    """For the tests of lost nodes: a heartbeat lasts 1 s on a clock that moves when told."""
    clock = ManualClock()
    yield (*(parts := _setup(heartbeat_ttl_s=1.0, clock=clock)), clock)
    parts[0].close()


def _request(ids, options=OPTIONS, **kw) -> RoundRequest:
    return RoundRequest(tuple(RoundNode(i, 3200, options=options) for i in ids), round_id="r1",
                        workload={"name": "resnet18"}, apply=True, **kw)


def test_budget_precedence_and_replan_revisions(setup):
    store, registry, rounds = setup
    out = rounds.plan(_request("abc"))
    assert out.plan.feasible and [p.mode for p in out.plan.nodes] == [FAST] * 3
    assert [p.revision for p in out.published] == [1, 1, 1]
    # A request override beats the registered budget ...
    over = rounds.plan(RoundRequest((RoundNode("a", 3200, 35.0, OPTIONS),), workload={"name": "resnet18"}))
    assert over.plan.nodes[0].mode == MID and not over.published  # apply=False
    # ... and a budget update re-plans the last applied round: only "b" changes.
    change = rounds.update_node_budget("b", 35.0)
    re = change.outcome
    assert change.record.power_budget_w == 35.0 and registry.get("b").power_budget_w == 35.0
    assert {p.node_id: (p.revision, p.changed) for p in re.published} == {
        "a": (1, False), "b": (2, True), "c": (1, False)}
    # The standing site budget applies to the re-plan: 42 + 30 + 42 W no longer fits 100 W.
    site = rounds.update_site_budgets(site_power_budget_w=100.0)
    assert site.site is not None and site.site.site_power_budget_w == 100.0
    assert rounds.site_budgets().site_power_budget_w == 100.0
    assert site.outcome.plan.feasible and site.outcome.plan.total_power_w <= 100.0
    registry.register(NodeRecord("d", device=spec_to_dict(get_spec("orin-agx"))))
    assert rounds.update_node_budget("d", 20.0).outcome is None  # not in the round: only its budget
    assert registry.get("d").power_budget_w == 20.0


def test_lost_nodes_are_planned_around_and_come_back(expiring):
    store, registry, rounds, clock = expiring
    _beat_until_lost(registry, clock, "ab", "c")
    # c is lost and has neither inline options nor measurements: planned around, not an error.
    req = RoundRequest((RoundNode("a", 3200, options=OPTIONS), RoundNode("b", 3200, options=OPTIONS),
                        RoundNode("c", 3200)), round_id="r1", workload={"name": "resnet18"}, apply=True)
    out = rounds.plan(req)
    assert [p.id for p in out.plan.nodes] == ["a", "b"] and "c (lost" in out.reason
    registry.heartbeat("c")  # c comes back, still without options: the re-plan plans around it
    re = rounds.update_node_budget("a", 35.0).outcome
    assert re.plan.feasible and [p.id for p in re.plan.nodes] == ["a", "b"] and "c (no options" in re.reason
    with pytest.raises(FailedPrecondition, match=r"nodes\[2\].options"):
        rounds.plan(req)  # a fresh request is strict


def test_standby_and_bad_requests(setup):
    store, registry, rounds = setup
    with pytest.raises(InvalidArgument, match="objective"):
        rounds.plan(_request("a", objective="fastest"))
    with pytest.raises(InvalidArgument, match=r"nodes\[1\].node_id"):
        rounds.plan(_request("aa"))
    with pytest.raises(InvalidArgument, match=r"nodes\[0\].options.power_w\[1\]"):
        rounds.plan(_request("a", options=OptionTable.from_rows([(FAST, 32, 100.0, 42.0), (MID, 32, 150.0, -1.0)])))
    rounds.lease.release()
    with pytest.raises(NotLeader):
        rounds.plan(_request("a"))


def _beat_until_lost(registry, clock, keep, lost):
    for _ in range(3):  # 1.5 s in all: ``lost``'s 1 s heartbeat runs out, ``keep`` beat every 0.5 s
        clock.advance(0.5)
        for n in keep:
            registry.heartbeat(n)
    assert not registry.get(lost).live and all(registry.get(n).live for n in keep)


def test_membership_change_replans_only_changed_nodes(expiring):
    store, registry, rounds, clock = expiring
    # site 100 W: two nodes fit at FAST (84 W), three need MID somewhere
    out = rounds.plan(_request("abc", site_power_budget_w=100.0))
    assert out.plan.feasible and sorted(p.mode for p in out.plan.nodes).count(MID) >= 1
    first = {p.id: p.mode for p in out.plan.nodes}
    for n in "abc":
        registry.heartbeat(n)
    assert rounds.replan_after_membership_change() is None  # nothing changed
    _beat_until_lost(registry, clock, "ab", "c")
    lost = rounds.replan_after_membership_change()
    assert lost.plan.feasible and [p.id for p in lost.plan.nodes] == ["a", "b"] and "c (lost" in lost.reason
    assert [p.mode for p in lost.plan.nodes] == [FAST, FAST]
    # only the nodes whose config changed get a new revision; c keeps its old config
    revs = {p.node_id: (p.revision, p.changed) for p in lost.published}
    assert all(changed == (first[n] != FAST) for n, (_, changed) in revs.items())
    assert rounds.configs.revision("c") == 1
    for n in "ab":
        registry.heartbeat(n)
    assert rounds.replan_after_membership_change() is None  # the new members were stored
    # c re-registers: RegisterNode's hook re-plans for that node (a node outside the round: nothing)
    registry.register(NodeRecord("c", device=spec_to_dict(get_spec("orin-agx")), power_budget_w=50.0))
    registry.register(NodeRecord("d", device=spec_to_dict(get_spec("orin-agx"))))
    assert rounds.replan_after_membership_change("d") is None
    back = rounds.replan_after_membership_change("c")
    assert back.plan.feasible and [p.id for p in back.plan.nodes] == ["a", "b", "c"]
    assert back.plan.total_power_w <= 100.0
    assert rounds.replan_after_membership_change("c") is None


def test_membership_check_without_a_round_and_on_a_standby(setup):
    store, registry, rounds = setup
    assert rounds.replan_after_membership_change() is None
    rounds.lease.release()
    with pytest.raises(NotLeader):
        rounds.replan_after_membership_change()


def test_batch_constraints_survive_the_replan(setup):
    store, registry, rounds = setup
    options = OptionTable.from_rows([(FAST, 8, 30.0, 42.0), (FAST, 32, 100.0, 42.0), (MID, 32, 150.0, 30.0)])
    # b=8 at FAST: 400 × 30 ms = 12 s vs b=32: 100 × 100 ms = 10 s; with r_8 = 0.5, b=8 takes 6 s
    req = RoundRequest((RoundNode("a", 3200, options=options, batch_sizes=(32,)), RoundNode("b", 3200, options=options)),
                       round_id="r2", workload={"name": "resnet18"}, apply=True, batch_efficiency={8: 0.5, 32: 1.0})
    out = rounds.plan(req)
    assert [(p.id, p.batch_size) for p in out.plan.nodes] == [("a", 32), ("b", 8)]
    assert out.plan.nodes[1].time_s == pytest.approx(6.0)
    last = rounds.last_round()
    assert last.batch_efficiency == {8: 0.5, 32: 1.0} and last.nodes[0].batch_sizes == (32,)
    re = rounds.update_node_budget("b", 35.0).outcome  # b drops to MID: only b=32 is there
    assert [(p.id, p.batch_size) for p in re.plan.nodes] == [("a", 32), ("b", 32)]
    with pytest.raises(InvalidArgument, match=r"nodes\[0\].batch_sizes\[0\]"):
        rounds.plan(replace(req, nodes=(RoundNode("a", 3200, options=options, batch_sizes=(0,)),)))
    with pytest.raises(InvalidArgument, match=r"batch_efficiency\[8\]"):
        rounds.plan(replace(req, batch_efficiency={8: -1.0}))
    # inf survives the JSON of the stored round (as null)
    rounds.plan(replace(req, batch_efficiency={8: float("inf"), 32: 1.0}))
    assert rounds.last_round().batch_efficiency == {8: float("inf"), 32: 1.0}
