"""The reconcile loop's drift trigger, and its target selector and cache pruning, in one process: the
leader's :class:`~edgetune.control.reconcile.Reconciler` on MemoryStore with the estimation
library and the library's selector, and an agent thread that runs each queued point on the simulated
board's truth (the measurement under the id the real agent writes). The board can be made hotter and
slower after the node is Applied: the loop's periodic check measures the applied configuration, sees
it off its prediction / over its budget, profiles near the choice under a new drift epoch and selects
again within the budget.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import pytest
from harness import wait_for

from edgetune.base.records import Points
from edgetune.control.configs import ConfigStore
from edgetune.control.jobs import JobQueue
from edgetune.control.leader import LeaderLease
from edgetune.control.reconcile import DriftPolicy, Reconciler, drift_reason
from edgetune.control.registry import NodeRegistry
from edgetune.control.tuningjobs import TuningJobs
from edgetune.devices.simulated.tables import truth_table
from edgetune.errors import InvalidArgument
from edgetune.powermodes.grids import named_grid
from edgetune.powermodes.specs import get_spec
from edgetune.profiling.protocol import measurement_id
from edgetune.store import MeasurementRecord, MemoryStore, NodeRecord, ProfileJob, spec_to_dict
from edgetune.tuning.jobs import NodeStatus, TuningJobSpec
from edgetune.tuning.local import LibraryEstimator, LibrarySelector
from edgetune.tuning.protocols import reference_model_id

DEVICE, WORKLOAD, BUDGET_W = "orin-agx", "mobilenetv3", 25.0


class Board:
    """A simulated board behind a node's job stream; ``hot`` scales its power and time (a hotter, slower board)."""

    def __init__(self, store: MemoryStore, node_id: str) -> None:
        self.store, self.node_id = store, node_id
        self.power_factor, self.time_factor = 1.0, 1.0
        self.ran: list[str] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        queue = JobQueue(self.store)
        while not self.stop.is_set():
            for job in queue.claim(self.node_id, "agent", block_ms=50):
                self.ran.append(job.job_id)
                point = ProfileJob.from_dict(job.payload)
                mode, b = point.modes[0], point.batch_sizes[0]
                row = truth_table(DEVICE, WORKLOAD, "train", np.asarray([mode.as_tuple()], dtype=float), [b])[0]
                mid = measurement_id(DEVICE, self.node_id, WORKLOAD, "train", mode, b, job.job_id)
                queue.complete(job, [MeasurementRecord(mid, DEVICE, WORKLOAD, "train", mode, b,
                                                       row["time_ms"] * self.time_factor,
                                                       row["power_w"] * self.power_factor, self.node_id)])


@pytest.fixture(scope="module")
def estimator() -> LibraryEstimator:
    """The estimation library holding a ResNet18 reference of the Orin AGX (``reference-orin-agx-train``)."""
    est = LibraryEstimator()
    grid = named_grid(get_spec(DEVICE), "fulcrum").array()[::3]
    rows = truth_table(DEVICE, "resnet18", "train", grid, [16])
    est.fit(Points(grid, np.full(len(grid), 16), np.array([r["time_ms"] for r in rows]),
                   np.array([r["power_w"] for r in rows]), DEVICE, "resnet18", "train"),
            model_id=reference_model_id(DEVICE), method="nn", epochs=60)
    return est


def _leader(store: MemoryStore) -> LeaderLease:
    lease = LeaderLease(store, "coordinator", lease_ms=5000, holder_id="test")
    lease.start()
    deadline = time.monotonic() + 10
    while not lease.is_leader and time.monotonic() < deadline:
        time.sleep(0.05)
    return lease


@contextmanager
def leader_loop(store: MemoryStore, registry: NodeRegistry, estimator: LibraryEstimator, node_ids: Iterable[str],
                **settings: Any) -> Iterator[tuple[Reconciler, dict[str, Board]]]:
    """The leader's loop over ``store`` (every 0.1 s) and a running board per node; all stopped on exit."""
    lease = _leader(store)
    rec = Reconciler(store, registry, ConfigStore(store), lease, estimator, LibrarySelector(), interval_s=0.1,
                     point_timeout_s=60, transfer_epochs=40, **settings)
    boards = {n: Board(store, n) for n in node_ids}
    for b in boards.values():
        b.thread.start()
    rec.start()
    try:
        yield rec, boards
    finally:
        rec.stop()
        for b in boards.values():
            b.stop.set()
            b.thread.join(2)
        lease.stop()


@pytest.fixture()
def plane(estimator):
    """A leader with its loop (drift checks every 0.3 s), two registered Orin nodes with boards, a reference."""
    store = MemoryStore()
    registry = NodeRegistry(store, heartbeat_ttl_s=120)
    for node_id, labels in (("orin-agx-1", {"rack": "a"}), ("orin-agx-2", {"rack": "b"})):
        registry.register(NodeRecord(node_id, device=spec_to_dict(get_spec(DEVICE)), labels=labels,
                                     power_budget_w=BUDGET_W))
    with leader_loop(store, registry, estimator, ("orin-agx-1", "orin-agx-2"),
                     drift=DriftPolicy(check_s=0.3, near_points=4)) as (rec, boards):
        yield store, rec, boards


def _node(jobs: TuningJobs, name: str, node_id: str) -> NodeStatus | None:
    status = jobs.get(name).status
    return None if status is None else status.nodes.get(node_id)


def test_a_hotter_slower_board_is_re_tuned_within_its_budget(plane):
    store, rec, boards = plane
    jobs = TuningJobs(store)
    # the selector picks the node by its labels; the other Orin is not targeted
    jobs.submit(TuningJobSpec("drift", WORKLOAD, selector_device=DEVICE, selector_labels={"rack": "a"},
                              profiles=10, method="random"))
    first = wait_for(lambda: (n := _node(jobs, "drift", "orin-agx-1")) is not None and n.phase == "Applied" and n, 60)
    assert set(jobs.get("drift").status.nodes) == {"orin-agx-1"}  # type: ignore[union-attr]
    assert not boards["orin-agx-2"].ran
    assert first.measured_power_w is not None and first.measured_power_w <= BUDGET_W
    revision = store.config_revisions(["orin-agx-1"])["orin-agx-1"]
    board = boards["orin-agx-1"]

    # An unchanged board: checks measure the applied mode and find no drift.
    checks_before = len(board.ran)
    wait_for(lambda: len(board.ran) >= checks_before + 2, 20)
    assert _node(jobs, "drift", "orin-agx-1").drift_epoch == 0  # type: ignore[union-attr]

    # A hotter, slower board: the applied mode now draws 40 % more power and runs 30 % slower.
    board.power_factor, board.time_factor = 1.4, 1.3
    assert first.measured_power_w * 1.4 > BUDGET_W  # the applied choice is over budget now
    ran_before = len(board.ran)
    drifted = wait_for(lambda: (n := _node(jobs, "drift", "orin-agx-1")) is not None and n.drift_epoch >= 1 and n, 60)
    assert any(e.message.startswith("drift: measured") for e in drifted.events), drifted.events
    after = wait_for(lambda: (n := _node(jobs, "drift", "orin-agx-1")) is not None and n.phase in ("Applied", "Failed")
                     and n.drift_epoch >= 1 and n, 60)
    assert after.phase == "Applied", after
    assert after.measured_power_w is not None and after.measured_power_w <= BUDGET_W  # measured on the hot board
    assert after.mode != first.mode
    assert store.config_revisions(["orin-agx-1"])["orin-agx-1"] > revision
    # a few points near the old choice were profiled again (new job ids: measured, not read back)
    assert len(board.ran) - ran_before >= 4 + 1
    assert after.drift_epoch <= DriftPolicy().max_retunes
    assert not boards["orin-agx-2"].ran


def test_caches_of_cancelled_jobs_are_pruned(plane):
    store, rec, _ = plane
    jobs = TuningJobs(store)
    jobs.submit(TuningJobSpec("prune", WORKLOAD, nodes=("orin-agx-1", "orin-agx-2"), profiles=6, method="random"))
    wait_for(lambda: (s := jobs.get("prune").status) is not None and len(s.nodes) == 2
             and all(n.phase == "Applied" for n in s.nodes.values()), 60)
    cached = rec.cached()
    assert cached["tuners"] == 2 and cached["writers"] == 1 and cached["references"] == 1  # one device model
    jobs.cancel("prune")
    rec.wake()
    wait_for(lambda: rec.cached() == {"workers": 0, "tuners": 0, "writers": 0, "pools": 0, "references": 0,
                                      "checked": 0, "refreshed": 0}, 20)


def test_a_node_lost_mid_profile_is_failed_with_a_reason_after_the_bound(estimator):
    """Its agent gone (no heartbeat, nobody consuming its points): the worker notices the lost heartbeat
    and waits; once the node has been lost for ``lost_fail_s`` it is Failed, saying so."""
    store = MemoryStore()
    registry = NodeRegistry(store, heartbeat_ttl_s=1.0)
    registry.register(NodeRecord("orin-agx-9", device=spec_to_dict(get_spec(DEVICE)), power_budget_w=BUDGET_W))
    lease = _leader(store)
    rec = Reconciler(store, registry, ConfigStore(store), lease, estimator, LibrarySelector(), interval_s=0.1,
                     point_timeout_s=60, lost_fail_s=2.0).start()
    jobs = TuningJobs(store)
    stop = threading.Event()

    def beat() -> None:  # the agent heartbeats until its node is being profiled, then dies
        while not stop.is_set():
            registry.heartbeat("orin-agx-9", state="ready")
            n = _node(jobs, "lost", "orin-agx-9")
            if n is not None and n.phase == "Profiling":
                return
            time.sleep(0.1)

    beater = threading.Thread(target=beat, daemon=True)
    try:
        jobs.submit(TuningJobSpec("lost", WORKLOAD, nodes=("orin-agx-9",), profiles=6, method="random"))
        beater.start()
        failed = wait_for(lambda: (n := _node(jobs, "lost", "orin-agx-9")) is not None and n.phase == "Failed" and n, 30)
        assert failed.reason.startswith("node lost: no heartbeat for"), failed.reason
        assert any("stopped heartbeating" in e.message for e in failed.events), failed.events
    finally:
        stop.set()
        rec.stop()
        lease.stop()


def test_drift_reason_tolerates_the_miss_verification_accepted():
    st = NodeStatus("n", predicted_time_ms=100.0, measured_time_ms=110.0)
    assert drift_reason(st, 120.0, 24.0, 25.0, 0.25) == ""  # 20 % off: within 10 % accepted + 25 %
    assert "ms vs predicted" in drift_reason(st, 140.0, 24.0, 25.0, 0.25)  # 40 % off
    assert "W > budget" in drift_reason(st, 100.0, 26.0, 25.0, 0.25)  # over the budget
    with pytest.raises(InvalidArgument):
        DriftPolicy(check_s=-1)


def test_a_job_naming_no_reference_transfers_from_the_shipped_one_and_says_so():
    """The estimator holds no reference: the Orin node's tuner transfers from the reference shipped with
    the package (its events name the file) and reaches Applied within its budget; an Orin Nano, for
    which none is shipped and the store holds no measurements, fails saying so, before any profiling."""
    store = MemoryStore()
    registry = NodeRegistry(store, heartbeat_ttl_s=120)
    registry.register(NodeRecord("orin-agx-1", device=spec_to_dict(get_spec(DEVICE)), power_budget_w=BUDGET_W))
    registry.register(NodeRecord("orin-nano-1", device=spec_to_dict(get_spec("orin-nano")), power_budget_w=10.0))
    lease = _leader(store)
    estimator = LibraryEstimator()
    rec = Reconciler(store, registry, ConfigStore(store), lease, estimator, LibrarySelector(), interval_s=0.1,
                     point_timeout_s=60, transfer_epochs=40)
    board = Board(store, "orin-agx-1")
    board.thread.start()
    rec.start()
    try:
        jobs = TuningJobs(store)
        jobs.submit(TuningJobSpec("shipped", WORKLOAD, nodes=("orin-agx-1", "orin-nano-1"), profiles=10,
                                  method="random"))
        done = wait_for(lambda: (s := jobs.get("shipped").status) is not None and len(s.nodes) == 2
                        and all(n.phase in ("Applied", "Failed") for n in s.nodes.values()) and s.nodes, 60)
        orin, nano = done["orin-agx-1"], done["orin-nano-1"]
        assert orin.phase == "Applied", orin.reason
        said = [e.message for e in orin.events if e.message.startswith("reference model ")]
        assert said == ["reference model reference:orin-agx: shipped with edgetune (orin-agx-resnet18-train.v1.model: "
                        "resnet18 train, batch size 16, fitted on the simulator's powertrain grid)"]
        assert orin.measured_power_w is not None and orin.measured_power_w <= BUDGET_W
        assert set(estimator.models) == {"reference:orin-agx", "tuning-shipped-orin-agx-1"}
        assert nano.phase == "Failed" and "none is shipped for orin-nano (train)" in nano.reason, nano.reason
        assert nano.profiled == 0
    finally:
        rec.stop()
        board.stop.set()
        board.thread.join(2)
        lease.stop()
