"""TuningJob records and the reconcile loop's parts on MemoryStore: spec checks, desired state vs the
leader's fenced status, watching a job, the job-stream measurer's replay, the profiling schedule."""

from __future__ import annotations

import threading
import time
from dataclasses import replace

import numpy as np
import pytest

from edgetune.base.workload import WorkloadRef
from edgetune.control.jobs import JobQueue
from edgetune.control.leader import LeaderLease
from edgetune.control.reconcile import QueueMeasurer, point_job_id, policy_for
from edgetune.control.tuningjobs import NODE_KIND, STATUS_KIND, JobGone, StatusWriter, TuningJobs
from edgetune.errors import InvalidArgument, NotFound
from edgetune.profiling.protocol import measurement_id
from edgetune.store import LeaseLost, MeasurementRecord, MemoryStore, ProfileJob
from edgetune.store.records import UnknownSchema
from edgetune.tuning.jobs import MAX_EVENTS, NodeStatus, TuningJobSpec


def _spec(**kw) -> TuningJobSpec:
    base = {"name": "mnv3-train", "workload": "mobilenetv3", "nodes": ("a", "b"), "profiles": 12,
            "node_power_budget_w": {"a": 20.0}}
    return TuningJobSpec(**{**base, **kw})


@pytest.mark.parametrize(("changes", "field"), [
    ({"name": "Bad_Name"}, "spec.name"),
    ({"nodes": ("a", "b", "a")}, "spec.nodes[2]"),
    ({"nodes": ("a", "")}, "spec.nodes[1]"),
    ({"nodes": ()}, "spec.nodes"),
    ({"selector_device": "orin-agx"}, "spec.nodes"),
    ({"objective": "min-energy"}, "spec.time_budget_ms"),
    ({"risk": 0.9}, "spec.risk"),
    ({"profiles": 1}, "spec.profiles"),
    ({"node_power_budget_w": {"a": -1.0}}, "spec.node_power_budget_w[a]"),
    ({"batch_sizes": (0,)}, "spec.batch_sizes[0]"),
    ({"method": "cap_search"}, "spec.method"),
    ({"method": "cap-search", "objective": "min-energy", "time_budget_ms": 100.0}, "spec.objective"),
])
def test_spec_errors_name_the_field(changes, field):
    with pytest.raises(InvalidArgument) as err:
        _spec(**changes).check()
    assert err.value.field == field


def test_budget_for_node_then_job_then_registered():
    spec = _spec(power_budget_w=15.0)
    assert spec.budget_for("a", 30.0) == 20.0
    assert spec.budget_for("b", 30.0) == 15.0
    assert _spec().budget_for("b", 30.0) == 30.0
    assert _spec().budget_for("b", None) is None


def test_submit_is_idempotent_and_a_different_spec_is_refused():
    jobs = TuningJobs(MemoryStore())
    first = jobs.submit(_spec())
    assert jobs.submit(_spec()).revision == first.revision  # a retried call changes nothing
    with pytest.raises(InvalidArgument) as err:
        jobs.submit(_spec(profiles=20))
    assert err.value.field == "spec.name"
    assert first.phase == "Pending" and [v.spec.name for v in jobs.list()] == ["mnv3-train"]
    assert jobs.cancel("mnv3-train").phase == "Cancelled"
    with pytest.raises(NotFound):
        jobs.get("ghost")


def test_status_is_written_by_the_lease_holder_only():
    store = MemoryStore()
    jobs = TuningJobs(store)
    jobs.submit(_spec())
    leader = LeaderLease(store, "coordinator", holder_id="r0", lease_ms=5000)
    assert leader.try_acquire()
    writer = StatusWriter(jobs, "mnv3-train", leader.fence)
    status = writer.ensure(["a", "b"], {"a": "orin-agx", "b": "orin-nano"})
    assert set(status.nodes) == {"a", "b"} and status.nodes["a"].device == "orin-agx"
    writer.update("a", lambda s: s.with_event("profiling", phase="Profiling"))
    assert jobs.get("mnv3-train").phase == "Running"
    deposed = StatusWriter(jobs, "mnv3-train", LeaderLease(store, "coordinator", holder_id="r1").fence)
    with pytest.raises(LeaseLost):
        deposed.update("a", lambda s: s.with_event("late write", phase="Failed"))
    for phase in ("Applied", "Applied"):
        writer.update("a", lambda s, p=phase: s.with_event(p, phase=p))
    writer.update("b", lambda s: s.with_event("applied", phase="Applied"))
    assert jobs.get("mnv3-train").phase == "Succeeded"
    writer.update("b", lambda s: s.with_event("failed", phase="Failed", reason="no mode fits"))
    assert jobs.get("mnv3-train").phase == "Failed"


def test_a_node_status_read_again_at_its_revision_is_not_built_again_and_a_new_write_is_seen():
    store = MemoryStore()
    jobs, other = TuningJobs(store), TuningJobs(store)  # a reader and the leader's writer
    jobs.submit(_spec())
    leader = LeaderLease(store, "coordinator", holder_id="r0", lease_ms=5000)
    assert leader.try_acquire()
    writer = StatusWriter(other, "mnv3-train", leader.fence)
    writer.ensure(["a", "b"], {"a": "orin-agx", "b": "orin-agx"})
    first = jobs.get("mnv3-train")
    assert first.status is not None and jobs.get("mnv3-train").status.nodes["a"] is first.status.nodes["a"]
    updated = writer.update("a", lambda s: s.with_event("profiling", phase="Profiling"))
    again = jobs.get("mnv3-train")
    assert again.status is not None and again.status.nodes["a"].phase == "Profiling"
    assert again.status.nodes["b"] is first.status.nodes["b"]  # unchanged: reused
    assert again.revision > first.revision and again.status.updated_s == updated.updated_s
    # what the writer wrote is what a read of that revision gives, without building it from the doc
    written = other.status("mnv3-train")[0]
    assert written is not None and written.nodes["a"] is updated
    # deleted and created again: its revisions count from 1 again, the old record is not taken for the new one
    jobs.delete("mnv3-train")
    assert store.list_docs(NODE_KIND) == []  # the nodes' docs go with the job
    jobs.submit(_spec())
    StatusWriter(other, "mnv3-train", leader.fence).ensure(["b"], {"b": "orin-nano"})
    renewed = jobs.get("mnv3-train").status
    assert renewed is not None and set(renewed.nodes) == {"b"} and renewed.nodes["b"].device == "orin-nano"


def test_a_status_of_the_old_form_is_read_and_written_out_one_doc_per_node():
    store = MemoryStore()
    jobs = TuningJobs(store)
    jobs.submit(_spec())
    applied = NodeStatus("a", "orin-agx").with_event("config published", phase="Applied")
    store.put_doc(STATUS_KIND, "mnv3-train", {  # as edgetune wrote it before nodes had docs of their own
        "schema": 1, "name": "mnv3-train", "cancelled": False, "updated_s": 5.0, "conditions": [],
        "nodes": [applied.to_dict(), NodeStatus("b", "orin-agx").to_dict()]})
    view = jobs.get("mnv3-train")
    assert view.status is not None and view.status.nodes["a"] == applied and view.phase == "Running"
    StatusWriter(jobs, "mnv3-train", lambda: None).ensure(["a", "b"], {})  # type: ignore[arg-type, return-value]
    assert sorted(store.list_docs(NODE_KIND)) == ["mnv3-train/a", "mnv3-train/b"]
    assert store.get_doc(STATUS_KIND, "mnv3-train").doc["nodes"] == ["a", "b"]
    after = jobs.get("mnv3-train")
    assert after.status is not None and after.status.nodes == view.status.nodes and after.revision > view.revision
    store.put_doc(STATUS_KIND, "mnv3-train", {"schema": 3, "nodes": []})
    with pytest.raises(UnknownSchema):
        jobs.get("mnv3-train")


def test_events_are_bounded_and_records_round_trip():
    st = NodeStatus("a")
    for i in range(MAX_EVENTS + 5):
        st = st.with_event(f"e{i}", profiled=i)
    assert len(st.events) == MAX_EVENTS and st.events[-1].message == f"e{MAX_EVENTS + 4}"
    assert NodeStatus.from_dict(st.to_dict()) == st
    assert TuningJobSpec.from_dict(_spec().to_dict()) == _spec()


def test_wait_returns_on_a_change():
    jobs = TuningJobs(MemoryStore())
    view = jobs.submit(_spec())
    assert jobs.wait("mnv3-train", view.revision, timeout_s=0.2) is None
    threading.Timer(0.2, lambda: jobs.cancel("mnv3-train")).start()
    changed = jobs.wait("mnv3-train", view.revision, timeout_s=5.0)
    assert changed is not None and changed.phase == "Cancelled"


def _agent(store: MemoryStore, node_id: str, stop: threading.Event, ran: list[str],
           ids: list[str] | None = None) -> None:
    """A simulated agent: claims the node's jobs, writes the measurement under the id the real agent
    would (run key = job id; keyed by the name asked for), power = cores + GHz of the GPU,
    acknowledges. ``ids``: the workload ids its rows carry, one per point in turn (a user
    workload's, as the agent that loaded it reports); default the name asked for."""
    queue = JobQueue(store)
    while not stop.is_set():
        for job in queue.claim(node_id, "agent", block_ms=50):
            ran.append(job.job_id)
            point = ProfileJob.from_dict(job.payload)
            mode, b = point.modes[0], point.batch_sizes[0]
            mid = measurement_id("orin-agx", node_id, point.workload, "train", mode, b, job.job_id)
            recorded = ids[(len(ran) - 1) % len(ids)] if ids else point.workload
            queue.complete(job, [MeasurementRecord(mid, "orin-agx", recorded, "train", mode, b,
                                                   100.0 / mode.cores, mode.cores + mode.gpu_mhz / 1000,
                                                   node_id)])


def test_queue_measurer_replays_stored_points_without_profiling_again():
    store = MemoryStore()
    stop, ran = threading.Event(), []
    agent = threading.Thread(target=_agent, args=(store, "a", stop, ran), daemon=True)
    agent.start()
    try:
        counts: list[int] = []

        def measurer() -> QueueMeasurer:
            return QueueMeasurer(store, JobQueue(store), "job", "a", "orin-agx", WorkloadRef.parse("mobilenetv3"), "train",
                                 should_stop=lambda: False, on_purpose=lambda p: None, on_points=counts.append,
                                 timeout_s=10, poll_s=0.02)

        modes = np.array([[4, 1000, 500, 2000], [8, 2000, 900, 3000]], dtype=float)
        first = measurer()
        got = first.measure(modes, 16)
        assert first.queued == 2 and len(ran) == 2
        assert np.allclose(got.modes, modes) and np.allclose(got.power_w, [4.5, 8.9])
        again = measurer()  # a new leader re-running the tuner
        replay = again.measure(modes, 16)
        assert again.queued == 0 and len(ran) == 2  # nothing profiled twice
        assert np.allclose(replay.time_ms, got.time_ms)
        verify = measurer().measure(modes[:1], 16, purpose="verify")  # another purpose: its own job
        assert len(verify) == 1 and len(ran) == 3
        assert counts == [2, 2, 1]
        assert point_job_id("job", "a", modes[0], 16, "profile") != point_job_id("job", "a", modes[0], 16, "verify")
    finally:
        stop.set()
        agent.join(2)


def _user_measurer(store: MemoryStore) -> QueueMeasurer:
    return QueueMeasurer(store, JobQueue(store), "job", "a", "orin-agx", WorkloadRef.parse("pkg.sensor_cnn:make"),
                         "train", should_stop=lambda: False, on_purpose=lambda p: None, on_points=lambda n: None,
                         timeout_s=10, poll_s=0.02)


def test_queue_measurer_resolves_a_user_workloads_id_once_from_the_node():
    """A MODULE:FUNCTION's id is pending until the node's first measurement reports it; points are
    asked for (and keyed) by the name, the measured points carry the id from then on."""
    store = MemoryStore()
    stop, ran = threading.Event(), []
    wid = "sensor_cnn.make-0123456789"
    agent = threading.Thread(target=_agent, args=(store, "a", stop, ran, [wid]), daemon=True)
    agent.start()
    try:
        measurer = _user_measurer(store)
        assert not measurer.workload.resolved and measurer.workload.recorded_as == "pkg.sensor_cnn:make"
        got = measurer.measure(np.array([[4, 1000, 500, 2000], [8, 2000, 900, 3000]], dtype=float), 16)
        assert measurer.workload == WorkloadRef("pkg.sensor_cnn:make", wid) and got.workload == wid
        assert measurer.queued == 2 and len(ran) == 2
    finally:
        stop.set()
        agent.join(2)


def test_queue_measurer_refuses_an_id_that_changes_half_way():
    """The node's code changed between two points: its later measurements describe another model, so
    the node fails saying so instead of mixing them under one name."""
    store = MemoryStore()
    stop, ran = threading.Event(), []
    ids = ["sensor_cnn.make-0123456789", "sensor_cnn.make-abcdef0123"]
    agent = threading.Thread(target=_agent, args=(store, "a", stop, ran, ids), daemon=True)
    agent.start()
    try:
        measurer = _user_measurer(store)
        measurer.measure(np.array([[4, 1000, 500, 2000]], dtype=float), 16)
        with pytest.raises(InvalidArgument, match="node a: pkg.sensor_cnn:make was measured as "
                                                  "sensor_cnn.make-0123456789, now as sensor_cnn.make-abcdef0123"):
            measurer.measure(np.array([[8, 2000, 900, 3000]], dtype=float), 16)
        assert measurer.workload.id == ids[0]
    finally:
        stop.set()
        agent.join(2)


def test_policy_follows_the_profiling_budget():
    small = policy_for(_spec(profiles=12, risk=0.1))
    assert small.profiles == 12 and small.risk == 0.1 and small.objective == "time"
    assert policy_for(_spec(profiles=50)).profiles == 50
    rand = policy_for(_spec(profiles=20, method="random"))
    assert rand.rounds == 0 and rand.n_initial == 20


def test_targets_by_ids_device_and_labels():
    """A job's target nodes: by id (in the job's order, unregistered ones left out) or by selector
    (device model and every label must match)."""
    from edgetune.control.configs import ConfigStore
    from edgetune.control.reconcile import Reconciler
    from edgetune.control.registry import NodeRegistry
    from edgetune.store import NodeRecord

    store = MemoryStore()
    rec = Reconciler(store, NodeRegistry(store), ConfigStore(store), LeaderLease(store, "coordinator"), None, None)
    live = {n.node_id: n for n in (
        NodeRecord("orin-agx-1", device={"name": "orin-agx"}, labels={"rack": "a", "zone": "x"}),
        NodeRecord("orin-agx-2", device={"name": "orin-agx"}, labels={"rack": "b"}),
        NodeRecord("nano-1", device={"name": "nano"}, labels={"rack": "a"}))}

    def ids(**kw) -> list[str]:
        return [n.node_id for n in rec.targets(_spec(**kw), live)]

    assert ids(nodes=("nano-1", "gone", "orin-agx-2")) == ["nano-1", "orin-agx-2"]
    assert ids(nodes=(), selector_device="orin-agx") == ["orin-agx-1", "orin-agx-2"]
    assert ids(nodes=(), selector_labels={"rack": "a"}) == ["orin-agx-1", "nano-1"]
    assert ids(nodes=(), selector_device="orin-agx", selector_labels={"rack": "a", "zone": "x"}) == ["orin-agx-1"]
    assert ids(nodes=(), selector_device="orin-agx", selector_labels={"zone": "y"}) == []
    assert ids(nodes=(), selector_device="xavier-agx") == []


def test_a_service_away_or_busy_is_retried_not_a_node_failure():
    """UNAVAILABLE / DEADLINE_EXCEEDED from the Estimator or Optimizer: the loop retries the node (a real
    failed call, through the typed client, to an address nobody serves); any other error fails it."""
    import grpc

    from edgetune.clients.calls import CallFailed, Status
    from edgetune.clients.estimator import EstimatorClient
    from edgetune.control.reconcile import _transient

    with grpc.insecure_channel("127.0.0.1:1") as channel:
        with pytest.raises(CallFailed) as err:
            EstimatorClient(channel, timeout_s=2).list_models()
    assert err.value.code in (Status.UNAVAILABLE, Status.DEADLINE_EXCEEDED)
    assert _transient(err.value)
    assert not _transient(CallFailed(Status.INVALID_ARGUMENT, "model_id: bad"))
    assert not _transient(ValueError("a bug")) and not _transient(InvalidArgument("x", "bad"))


class _Killed(BaseException):
    """Stands for the coordinator's SIGKILL: nothing of the leader runs afterwards."""


class _DyingStore(MemoryStore):
    """Killed right before or right after the config publish's write; ``between``: another publish
    to the same nodes lands first (after the leader read what it read), then killed after the write."""

    kill: str = ""

    def publish_configs(self, configs, **kw):
        if self.kill == "before":
            raise _Killed
        if self.kill == "between" and kw.get("docs"):
            super().publish_configs([replace(c, batch_size=c.batch_size + 1) for c in configs])
            self.kill = "after"
        out = super().publish_configs(configs, **kw)
        if self.kill == "after":
            raise _Killed
        return out


def _verified_on_a_dying_store():
    """A leader's reconciler whose node ``a`` is Verifying a decision, on a :class:`_DyingStore`; the
    reconciler, its store and config store, the job's spec, status writer and ``a``'s status."""
    from edgetune.control.configs import ConfigStore
    from edgetune.control.reconcile import Reconciler
    from edgetune.control.registry import NodeRegistry

    store = _DyingStore()
    configs = ConfigStore(store)
    lease = LeaderLease(store, "coordinator", holder_id="r0", lease_ms=5000)
    assert lease.try_acquire()
    rec = Reconciler(store, NodeRegistry(store), configs, lease, None, None)
    spec = _spec()
    rec.jobs.submit(spec)
    writer = rec._writer(spec.name)
    writer.ensure(["a"], {"a": "orin-agx"})
    decided = writer.update("a", lambda s: s.with_event("verified", phase="Verifying", mode=(4, 1200.0, 600.0, 2133.0),
                                                        batch_size=16, measured_power_w=18.0))
    return rec, store, configs, spec, writer, decided


@pytest.mark.parametrize("kill", ["before", "after"])
def test_a_kill_around_the_publish_never_leaves_a_config_without_its_applied_status(kill):
    """The tuned config and the node's Applied status (with its revision) are one atomic write: a
    leader killed before it leaves neither, killed after it leaves both; the next leader's publish
    of the same decision adds no revision."""
    from edgetune.store import NodeRecord

    rec, store, configs, spec, writer, decided = _verified_on_a_dying_store()
    node = NodeRecord("a", device={"name": "orin-agx"})
    store.kill = kill
    with pytest.raises(_Killed):
        rec._publish(spec, node, writer, decided, 20.0)
    status = rec.jobs.get(spec.name).status
    assert status is not None
    cfg = configs.get_or_none("a")
    if kill == "before":
        assert cfg is None and status.nodes["a"].phase == "Verifying"
    else:
        assert cfg is not None and cfg.revision == 1
        assert status.nodes["a"].phase == "Applied" and status.nodes["a"].config_revision == 1
    store.kill = ""  # the next leader publishes the same decision: one revision in all
    rec._publish(spec, node, writer, decided, 20.0)
    after = rec.jobs.get(spec.name).status
    assert after is not None and after.nodes["a"].phase == "Applied" and after.nodes["a"].config_revision == 1
    assert configs.revision("a") == 1


def test_the_applied_status_carries_the_revision_the_store_wrote_even_with_a_publish_in_between():
    """Another publish to the node lands between the leader's decision and its publish: the status
    written in the same atomic step as the config says the revision the store gave that config
    (not one guessed from what was read before), with nothing written after it to correct it."""
    from edgetune.store import NodeRecord

    rec, store, configs, spec, writer, decided = _verified_on_a_dying_store()
    store.kill = "between"
    with pytest.raises(_Killed):  # killed right after the write: only what that write holds counts
        rec._publish(spec, NodeRecord("a", device={"name": "orin-agx"}), writer, decided, 20.0)
    cfg = configs.get_or_none("a")
    status = rec.jobs.get(spec.name).status
    assert cfg is not None and cfg.revision == 2 and cfg.batch_size == 16  # the other publish got 1
    assert status is not None and status.nodes["a"].phase == "Applied" and status.nodes["a"].config_revision == 2


def test_a_resubmitted_job_restarts_its_nodes_a_failed_one_after_its_backoff():
    from dataclasses import replace

    from edgetune.control.tuningjobs import retry_backoff_s

    assert [retry_backoff_s(n) for n in (0, 1, 2, 3, 10)] == [0.0, 1.0, 2.0, 4.0, 60.0]
    store = MemoryStore()
    jobs = TuningJobs(store)
    jobs.submit(_spec())
    leader = LeaderLease(store, "coordinator", holder_id="r0", lease_ms=5000)
    assert leader.try_acquire()
    writer = StatusWriter(jobs, "mnv3-train", leader.fence)
    writer.ensure(["a", "b"], {"a": "orin-agx", "b": "orin-agx"})
    writer.update("a", lambda s: s.with_event("applied", phase="Applied"))
    failed = writer.update("b", lambda s: s.with_event("failed", phase="Failed", reason="no mode fits"))
    assert failed.failures == 1  # counted when it went Failed
    jobs.cancel("mnv3-train")
    view = jobs.submit(_spec(profiles=20))  # the cancelled name takes a changed spec
    # its nodes' statuses are the old generation's (Applied, Failed): they count as Pending, so a
    # `submit --wait` follows the new spec instead of returning the old outcome
    assert view.generation == 2 and view.spec.profiles == 20 and view.phase == "Pending"
    writer = StatusWriter(jobs, "mnv3-train", leader.fence)  # the leader's pass takes a new one (its _forget_job)
    status = writer.ensure(["a", "b"], {}, view.generation)
    assert status.nodes["a"].phase == "Pending" and status.nodes["a"].generation == 2
    assert status.nodes["b"].phase == "Failed"  # within its 1 s backoff
    writer.update("b", lambda s: replace(s, updated_s=s.updated_s - 1.5))
    status = writer.ensure(["a", "b"], {}, view.generation)
    assert status.nodes["b"].phase == "Pending" and status.nodes["b"].events[-1].reason == "SpecChanged"


def test_many_nodes_change_at_once_and_none_is_lost_each_write_one_node():
    store = MemoryStore()
    jobs = TuningJobs(store)
    ids = [f"n{i}" for i in range(40)]
    jobs.submit(TuningJobSpec(name="many", workload="mobilenetv3", nodes=tuple(ids), profiles=12))
    writes: list[str] = []
    real = jobs.put_node
    jobs.put_node = lambda name, node, fence, expected_revision=None: writes.append(node.node_id) or real(  # type: ignore[method-assign]
        name, node, fence, expected_revision)
    writer = StatusWriter(jobs, "many", lambda: None)  # type: ignore[arg-type, return-value]
    writer.ensure(ids, {})
    revision = jobs.get("many").revision

    def work(node_id: str) -> None:
        for k in range(5):
            writer.update(node_id, lambda s, k=k: s.with_event(f"step {k}"))
        writer.update(node_id, lambda s: s)  # no change: nothing written

    threads = [threading.Thread(target=work, args=(n,)) for n in ids]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    view = jobs.get("many")
    assert view.status is not None and view.revision > revision
    assert all([e.message for e in view.status.nodes[n].events][-5:] == [f"step {k}" for k in range(5)] for n in ids)
    assert sorted(writes) == sorted(ids + ids * 5)  # one write when created, one per change: each of one node
    # another writer in between (a new leader, say): the next change is applied over what it wrote
    other = StatusWriter(jobs, "many", lambda: None)  # type: ignore[arg-type, return-value]
    other.update("n0", lambda s: s.with_event("from the other"))
    writer.update("n0", lambda s: s.with_event("after"))
    final = jobs.get("many").status
    assert final is not None
    assert [e.message for e in final.nodes["n0"].events][-2:] == ["from the other", "after"]


def test_a_late_update_of_a_deleted_job_does_not_touch_the_job_created_under_its_name():
    store = MemoryStore()
    jobs = TuningJobs(store)
    jobs.submit(_spec())
    writer = StatusWriter(jobs, "mnv3-train", lambda: None)  # type: ignore[arg-type, return-value]
    writer.ensure(["a"], {"a": "orin-agx"})
    writer.update("a", lambda s: s.with_event("profiling", phase="Profiling"))
    jobs.delete("mnv3-train")
    time.sleep(0.01)  # another creation time
    jobs.submit(_spec(profiles=20))  # the name, free again, taken by another job
    with pytest.raises(JobGone):  # the old job's worker, still running, writes late
        writer.update("a", lambda s: s.with_event("applied", phase="Applied"))
    assert jobs.get("mnv3-train").status is None  # the new job untouched
    fresh = StatusWriter(jobs, "mnv3-train", lambda: None)  # type: ignore[arg-type, return-value]
    fresh.ensure(["a"], {"a": "orin-agx"})
    assert fresh.update("a", lambda s: s.with_event("profiling", phase="Profiling")).phase == "Profiling"
