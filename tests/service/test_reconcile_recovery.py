"""Level-triggered recovery and conditions of the reconcile loop, in one process (the leader's
:class:`~edgetune.control.reconcile.Reconciler` on MemoryStore with the estimation library, the library's
selector, and an agent thread per node running each queued point on the simulated board's truth; the
boards of ``test_reconcile_drift``).

The acceptance story of issue 26: a node re-budgeted to 1 W goes Failed with an ``Infeasible`` condition
saying why and what would work; re-budgeted to a feasible budget it is Applied again from the stored
predictions, without profiling; a job naming an unregistered node says so within one pass; a cancelled
job's name takes a changed spec.
"""

from __future__ import annotations

import time

import pytest
from harness import wait_for
from test_reconcile_drift import BUDGET_W, DEVICE, WORKLOAD, Board, _leader, _node
from test_reconcile_drift import estimator as estimator  # the module-scoped fixture: a fitted Orin reference

from edgetune.control import reconcile
from edgetune.control.configs import ConfigStore
from edgetune.control.reconcile import Reconciler
from edgetune.control.registry import NodeRegistry
from edgetune.control.tuningjobs import TuningJobs
from edgetune.errors import InvalidArgument
from edgetune.powermodes.specs import get_spec
from edgetune.store import MemoryStore, NodeRecord, spec_to_dict
from edgetune.tuning.jobs import ConditionType, JobPhase, NodePhase, TuningJobSpec
from edgetune.tuning.local import LibraryEstimator, LibrarySelector


@pytest.fixture()
def plane(estimator):
    store = MemoryStore()
    registry = NodeRegistry(store, heartbeat_ttl_s=120)
    registry.register(NodeRecord("orin-agx-1", device=spec_to_dict(get_spec(DEVICE)), power_budget_w=BUDGET_W))
    lease = _leader(store)
    rec = Reconciler(store, registry, ConfigStore(store), lease, estimator, LibrarySelector(), interval_s=0.1,
                     point_timeout_s=60, transfer_epochs=40)
    board = Board(store, "orin-agx-1")
    board.thread.start()
    rec.start()
    try:
        yield store, registry, rec, board
    finally:
        rec.stop()
        board.stop.set()
        board.thread.join(2)
        lease.stop()


def _settled(jobs: TuningJobs, name: str, node_id: str, budget_w: float):
    """The node once it is Applied or Failed for ``budget_w``."""
    return wait_for(lambda: (n := _node(jobs, name, node_id)) is not None and n.power_budget_w == budget_w
                    and n.phase in (NodePhase.APPLIED, NodePhase.FAILED) and n, 60, f"{node_id} settled at {budget_w} W")


def test_an_impossible_budget_says_why_and_a_feasible_one_recovers_without_profiling(plane):
    store, registry, rec, board = plane
    jobs = TuningJobs(store)
    jobs.submit(TuningJobSpec("recover", WORKLOAD, nodes=("orin-agx-1",), profiles=10, method="random"))
    first = _settled(jobs, "recover", "orin-agx-1", BUDGET_W)
    assert first.phase == NodePhase.APPLIED, first.reason
    verified = first.condition(ConditionType.VERIFIED)
    assert verified is not None and verified.true and f"<= budget {BUDGET_W:g} W" in verified.message
    profiled, ran = first.profiled, len(board.ran)

    registry.update_budget("orin-agx-1", 1.0)  # what UpdateBudget writes
    rec.wake()
    failed = _settled(jobs, "recover", "orin-agx-1", 1.0)
    assert failed.phase == NodePhase.FAILED
    infeasible = failed.condition(ConditionType.INFEASIBLE)
    assert infeasible is not None and infeasible.true and infeasible.reason == "NoFeasibleMode"
    assert "1 W" in infeasible.message and "least predicted power" in infeasible.message, infeasible.message
    assert "edgetune node budget orin-agx-1 WATTS" in infeasible.message
    assert jobs.get("recover").phase == JobPhase.FAILED

    registry.update_budget("orin-agx-1", 20.0)  # feasible again: re-selected from the stored predictions
    rec.wake()
    again = _settled(jobs, "recover", "orin-agx-1", 20.0)
    assert again.phase == NodePhase.APPLIED, again.reason
    assert again.measured_power_w is not None and again.measured_power_w <= 20.0
    assert again.profiled == profiled  # no new profiling: only the choice was measured (verification)
    assert len(board.ran) - ran <= 3
    conditions = {c.type: c for c in again.conditions}
    assert not conditions[ConditionType.INFEASIBLE].true and conditions[ConditionType.VERIFIED].true
    assert conditions[ConditionType.INFEASIBLE].last_transition_s >= infeasible.last_transition_s
    reasons = [e.reason for e in again.events]
    assert "BudgetChanged" in reasons and "Infeasible" in reasons and reasons[-1] == "Published"
    assert jobs.get("recover").phase == JobPhase.SUCCEEDED


def test_a_cancelled_jobs_name_takes_a_changed_spec_and_its_nodes_are_tuned_again(plane):
    store, _registry, rec, _board = plane
    jobs = TuningJobs(store)
    jobs.submit(TuningJobSpec("again", WORKLOAD, nodes=("orin-agx-1",), profiles=10, method="random",
                              power_budget_w=1.0))  # nothing fits: Failed
    failed = _settled(jobs, "again", "orin-agx-1", 1.0)
    assert failed.phase == NodePhase.FAILED and failed.failures == 1
    changed = TuningJobSpec("again", WORKLOAD, nodes=("orin-agx-1",), profiles=10, method="random",
                            power_budget_w=22.0)
    with pytest.raises(InvalidArgument) as err:  # a running job keeps its spec; the message says what works
        jobs.submit(changed)
    assert "edgetune job cancel again" in str(err.value)
    jobs.cancel("again")
    view = jobs.submit(changed)
    assert view.generation == 2 and not view.spec.cancelled and view.spec.power_budget_w == 22.0
    rec.wake()
    done = _settled(jobs, "again", "orin-agx-1", 22.0)  # after the Failed node's backoff (1 s)
    assert done.phase == NodePhase.APPLIED and done.generation == 2, done.reason
    assert any(e.reason == "SpecChanged" for e in done.events)


def test_a_target_matching_no_node_is_a_condition_within_one_pass(estimator):
    store = MemoryStore()
    registry = NodeRegistry(store, heartbeat_ttl_s=120)
    registry.register(NodeRecord("orin-agx-1", device=spec_to_dict(get_spec(DEVICE)), power_budget_w=BUDGET_W))
    lease = _leader(store)
    rec = Reconciler(store, registry, ConfigStore(store), lease, LibraryEstimator(), LibrarySelector())
    jobs = TuningJobs(store)
    try:
        jobs.submit(TuningJobSpec("typo", WORKLOAD, nodes=("nano-9",)))
        jobs.submit(TuningJobSpec("nothing", WORKLOAD, selector_device="xavier-agx"))
        rec.run_once()  # one pass, no loop
        typo = jobs.get("typo")
        cond = next(c for c in typo.conditions if c.type == ConditionType.NO_MATCHING_NODES)
        assert cond.true and cond.reason == "NodesNotRegistered"
        assert cond.message.startswith("nano-9 matched no registered node (registered: orin-agx-1)")
        assert typo.phase == JobPhase.PENDING and typo.to_json()["conditions"][0]["type"] == "NoMatchingNodes"
        nothing = next(c for c in jobs.get("nothing").conditions if c.type == ConditionType.NO_MATCHING_NODES)
        assert nothing.true and "selector device=xavier-agx matches no registered node" in nothing.message
        revision = jobs.get("typo").revision
        rec.run_once()  # an unchanged condition is not written again (watchers are not woken for nothing)
        assert jobs.get("typo").revision == revision

        registry.register(NodeRecord("nano-9", device=spec_to_dict(get_spec("nano")), power_budget_w=5.0))
        time.sleep(0.01)
        rec.run_once()
        cond = next(c for c in jobs.get("typo").conditions if c.type == ConditionType.NO_MATCHING_NODES)
        assert not cond.true and cond.reason == "AllMatched"
    finally:
        rec.stop()
        lease.stop()


def test_a_pass_starts_a_bounded_number_of_workers_and_the_next_pass_comes_at_once(monkeypatch):
    store = MemoryStore()
    registry = NodeRegistry(store, heartbeat_ttl_s=120)
    ids = [f"orin-agx-{i}" for i in range(5)]
    for node_id in ids:
        registry.register(NodeRecord(node_id, device=spec_to_dict(get_spec(DEVICE)), power_budget_w=BUDGET_W))
    lease = _leader(store)
    rec = Reconciler(store, registry, ConfigStore(store), lease, LibraryEstimator(), LibrarySelector())
    monkeypatch.setattr(reconcile, "MAX_STARTS_PER_PASS", 3)
    monkeypatch.setattr(rec, "_work", lambda spec, node, stop, rebudget, check: stop.wait(10))  # a worker that waits
    try:
        TuningJobs(store).submit(TuningJobSpec("many", WORKLOAD, nodes=tuple(ids)))
        rec.run_once()
        assert rec.cached()["workers"] == 3 and rec._wake.is_set()  # the rest at the next pass, woken now
        rec._wake.clear()
        rec.run_once()
        assert rec.cached()["workers"] == 5 and not rec._wake.is_set()
    finally:
        rec.stop()
        lease.stop()
