"""Profiling job queues on the in-memory store: at-least-once delivery, no duplicates."""

from __future__ import annotations

import pytest

from edgetune.base.mode import PowerMode
from edgetune.base.roles import Role
from edgetune.control.jobs import REFUSAL_TTL_S, JobQueue, measurement_record
from edgetune.errors import InvalidArgument
from edgetune.store import DeadJob, ProfileJob, UnknownSchema


def _rows(job, n=2):
    """What an agent writes for a job: ids derived from the job, so a re-run repeats them."""
    return [{"id": f"{job.job_id}-{i}", "device": "orin-agx", "node": job.node_id, "workload": "resnet18",
             "role": "train", "cores": 12, "cpu_mhz": 2201.6, "gpu_mhz": 1300.5, "emc_mhz": 3199.0,
             "batch_size": 32, "time_ms": 100.0 + i, "power_w": 30.0} for i in range(n)]


def test_submit_claim_complete(store):
    q = JobQueue(store)
    job_id = q.submit("n1", {"modes": [[12, 2201.6, 1300.5, 3199.0]], "workload": "resnet18"})
    assert q.backlog("n1") == 1
    [job] = q.claim("n1", "agent-1", block_ms=0)
    assert job.job_id == job_id and job.payload["workload"] == "resnet18" and job.deliveries == 1
    assert q.pending_count("n1") == 1 and q.backlog("n1") == 0
    assert q.complete(job, _rows(job)) == 2
    assert q.pending_count("n1") == 0
    assert store.count_measurements("orin-agx", "resnet18", "train", "n1") == 2
    assert q.claim("n1", "agent-1", block_ms=50) == []  # nothing left: blocks briefly, returns empty


def test_submit_is_idempotent_by_job_id(store):
    q = JobQueue(store)
    assert q.submit("n1", {"x": 1}, job_id="j-1") == "j-1"
    assert q.submit("n1", {"x": 1}, job_id="j-1") == "j-1"  # a retried submit
    assert len(q.claim("n1", "a", block_ms=0, count=10)) == 1


def test_streams_are_per_node(store):
    q = JobQueue(store)
    q.submit("n1", {"k": "for n1"})
    q.submit("n2", {"k": "for n2"})
    assert [j.payload["k"] for j in q.claim("n2", "a", block_ms=0, count=5)] == ["for n2"]


def test_dead_consumer_jobs_are_redelivered_without_duplicates(store, clock):
    q = JobQueue(store, idle_timeout_ms=200, clock=clock)
    ids = [q.submit("n1", {"i": i}) for i in range(20)]
    # agent-1 takes 5 jobs, finishes 2, then dies with 3 un-acked.
    taken = q.claim("n1", "agent-1", block_ms=0, count=5)
    for job in taken[:2]:
        q.complete(job, _rows(job))
    orphaned = {j.job_id for j in taken[2:]}
    # agent-2 drains the rest; the orphans come back once they have been idle 200 ms.
    done: dict[str, int] = {j.job_id: 1 for j in taken[:2]}
    for _ in range(20):
        if len(done) == 20:
            break
        clock.advance(0.05)
        for job in q.claim("n1", "agent-2", block_ms=0, count=4):
            if job.job_id in orphaned:
                assert job.deliveries == 2
            done[job.job_id] = done.get(job.job_id, 0) + 1
            q.complete(job, _rows(job))
    assert set(done) == set(ids)  # nothing lost
    assert all(v == 1 for v in done.values())  # nothing delivered twice to the live agent
    # the zombie agent-1 wakes up and completes an orphan anyway: its writes duplicate nothing
    assert q.complete(taken[2], _rows(taken[2])) == 0
    assert store.count_measurements("orin-agx", "resnet18", "train", "n1") == 40
    assert q.pending_count("n1") == 0


def test_poison_job_goes_to_the_dead_letter_queue(store, clock):
    q = JobQueue(store, idle_timeout_ms=20, max_deliveries=2, clock=clock)
    q.submit("n1", {"poison": True}, job_id="bad")
    assert q.claim("n1", "a1", block_ms=0)[0].deliveries == 1
    clock.advance(0.03)
    assert q.claim("n1", "a2", block_ms=0)[0].deliveries == 2
    clock.advance(0.03)
    assert q.claim("n1", "a3", block_ms=0) == []  # third delivery would exceed max_deliveries
    assert q.dead_jobs("n1") == [DeadJob("bad", {"poison": True}, 3)]
    assert q.pending_count("n1") == 0


def test_measurement_records_need_ids_and_fill_the_node():
    [row] = _rows(type("J", (), {"job_id": "j", "node_id": "n9"})(), 1)
    record = measurement_record(row, "n1")
    assert (record.device_model, record.node_id, record.mode.cores) == ("orin-agx", "n9", 12)
    assert measurement_record({k: v for k, v in row.items() if k != "node"}, "n1").node_id == "n1"
    with pytest.raises(InvalidArgument, match="measurement.id"):
        measurement_record({k: v for k, v in row.items() if k != "id"}, "n1")


def test_a_refused_job_is_acknowledged_and_its_reason_kept(store, clock):
    q = JobQueue(store)
    q.submit("n1", {"workload": {"name": "sensor_cnn:bad"}}, job_id="j1")
    (job,) = q.claim("n1", "agent-a", block_ms=0)
    assert q.refusal("n1", "j1") is None
    assert q.refuse(job, "workload.name: sensor_cnn:bad: the model's forward pass raised")
    assert q.pending_count("n1") == 0 and q.claim("n1", "agent-a", block_ms=0) == []  # never re-delivered
    assert q.refusal("n1", "j1") == "workload.name: sensor_cnn:bad: the model's forward pass raised"
    assert q.refusal("n2", "j1") is None
    clock.advance(REFUSAL_TTL_S + 1)  # kept for a while, not for ever
    assert q.refusal("n1", "j1") is None


def test_a_profile_job_is_the_payload_claimed_as_submitted(store):
    q = JobQueue(store)
    job = ProfileJob("mobilenetv3", Role.INFER, modes=(PowerMode(12, 2201.6, 1300.5, 3199.0),), batch_sizes=(8, 16),
                     n_minibatches=10, warmup_minibatches=0, seed=3, power_limit_w=30.0, descending_order=True)
    q.submit("n1", job.to_dict(), job_id="p1")
    (claimed,) = q.claim("n1", "agent-a", block_ms=0)
    assert ProfileJob.from_dict(claimed.payload) == job
    drawn = ProfileJob("resnet18", random_modes=20, random_grid="fulcrum", seed=7)
    assert ProfileJob.from_json(drawn.to_json()) == drawn


def test_an_unreadable_profile_job_is_refused_naming_the_field():
    good = ProfileJob("resnet18", random_modes=2).to_dict()
    for change, field in (({"workload": ""}, "job.workload"), ({"role": "eval"}, "job.role"),
                          ({"random_modes": 0}, "job.modes"),
                          ({"modes": [{"cores": 4, "cpu_mhz": 1.0, "gpu_mhz": 2.0, "emc_mhz": 3.0}]}, "job.modes"),
                          ({"random_modes": 0, "modes": [{"cores": 4}]}, "job.modes[0]"),
                          ({"batch_sizes": []}, "job.batch_sizes"), ({"n_minibatches": 0}, "job.n_minibatches"),
                          ({"sample_rate_hz": 1e9}, "job.sample_rate_hz"), ({"power_limit_w": -1}, "job.power_limit_w"),
                          ({"seed": -1}, "job.seed")):
        with pytest.raises(InvalidArgument) as err:
            ProfileJob.from_dict({**good, **change})
        assert err.value.field == field, change
    # a ProfileRequest's proto-JSON (the payload before jobs had a schema) or a newer writer's job
    for payload in ({"workload": {"name": "resnet18", "role": "ROLE_TRAIN"}, "random_modes": 2},
                    {**good, "schema": 2}):
        with pytest.raises(UnknownSchema):
            ProfileJob.from_dict(payload)


def test_a_consumer_looks_for_stale_jobs_once_a_tenth_of_the_idle_timeout(store, clock, monkeypatch):
    looked = []
    reclaim = store.reclaim_jobs
    monkeypatch.setattr(store, "reclaim_jobs", lambda *a, **kw: looked.append(a) or reclaim(*a, **kw))
    q = JobQueue(store, idle_timeout_ms=1000, clock=clock)
    for _ in range(5):  # an idle agent asking again and again
        assert q.claim("n1", "a", block_ms=0) == []
    assert len(looked) == 1
    assert q.claim("n1", "b", block_ms=0) == [] and len(looked) == 2  # each consumer looks on its own
    clock.advance(0.1)
    q.claim("n1", "a", block_ms=0)
    assert len(looked) == 3
