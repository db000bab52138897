"""Starting edgetune's servers and Redis for the service and integration tests, in one place.

Imported as ``harness`` (``tests/conftest.py`` puts this directory on ``sys.path``):

- :func:`coordinator`: a coordinator replica in this process, started, stopped on exit;
- :func:`serving`: a ``(server, servicer)`` pair from a service's ``create_server``, started,
  stopped on exit;
- :func:`durable_redis` / :func:`restart_redis`: a redis-server on TCP with an AOF fsynced on
  every write, and the same one again on its port after a stop (the fault tests' outages);
- :func:`free_port` / :func:`wait_serving`: a port for a service run as its own process, and a
  channel to it once it serves;
- :func:`wait_for` / :func:`wait_job`: poll until something holds, failing after a timeout.

Test defaults are short (a 1 s lease, a 0.5 s grace, a 100 ms watch block) so that a suite on
two shared cores neither waits long at shutdown nor misses a change.
"""

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import grpc

from edgetune.localrun.processes import SupervisorError, wait_process_serving
from edgetune.proto.v1 import tuning_pb2
from edgetune.services.common.server import ServiceServer
from edgetune.services.coordinator.server import Coordinator, create_coordinator, start
from edgetune.store import EmbeddedRedisServer, Store

T = TypeVar("T")

#: What a test replica gets unless it says otherwise.
COORDINATOR_DEFAULTS: dict[str, Any] = {"port": 0, "lease_ms": 1000, "grace_s": 0.5, "watch_block_ms": 100}


@contextmanager
def coordinator(store: Store, *, leader: bool = True, **options: Any) -> Iterator[Coordinator]:
    """A started coordinator replica over ``store`` (``options``: ``create_coordinator``'s, over
    :data:`COORDINATOR_DEFAULTS`); with ``leader``, once it holds the lease. Stopped on exit."""
    c = start(create_coordinator(store=store, **{**COORDINATOR_DEFAULTS, **options}))
    try:
        if leader:
            assert c.lease.wait_leader(3.0), "the replica did not take the lease"
        yield c
    finally:
        c.server.stop(0)


@contextmanager
def serving(created: tuple[ServiceServer, T]) -> Iterator[tuple[ServiceServer, T]]:
    """``created`` (a ``create_server``'s server and servicer) started; the server stopped on exit."""
    server, servicer = created
    server.start()
    try:
        yield server, servicer
    finally:
        server.stop(0)


def durable_redis(data_dir: Path, port: int = 0) -> EmbeddedRedisServer:
    """A started redis-server on ``port`` (0: a free one) keeping its data in ``data_dir`` (AOF,
    fsynced on every write: a stop loses nothing)."""
    server = EmbeddedRedisServer(port=port, dir=data_dir, appendfsync="always")
    server.start()
    return server


def restart_redis(server: EmbeddedRedisServer, *, pause_s: float = 0.0,
                  before_start: Callable[[Path], None] = lambda _dir: None) -> EmbeddedRedisServer:
    """Stop ``server`` (SIGTERM: it flushes its AOF) and start a new one on its port and data
    directory; ``before_start(data_dir)`` runs in between (say, to delete the data)."""
    assert server.data_dir is not None and server.port is not None
    port, data_dir = server.port, server.data_dir
    server.stop()
    time.sleep(pause_s)
    before_start(data_dir)
    return durable_redis(data_dir, port)


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now (for a process told its port on the command line)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_serving(address: str, proc: subprocess.Popen, timeout_s: float = 30.0) -> grpc.Channel:
    """A channel to the service ``proc`` runs at ``address`` once it answers health checks; a process
    that exits or never serves fails the test with its stderr."""
    try:
        wait_process_serving(address, proc, timeout_s=timeout_s)
    except SupervisorError as exc:
        raise AssertionError(str(exc)) from None
    return grpc.insecure_channel(address)


def wait_for(predicate: Callable[[], T | None], timeout_s: float, what: str = "it", poll_s: float = 0.1) -> T:
    """``predicate()``'s first truthy value, polled every ``poll_s``; AssertionError after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not (result := predicate()):
        assert time.monotonic() < deadline, f"timed out after {timeout_s:g} s waiting for {what}"
        time.sleep(poll_s)
    return result


def finished(job: tuning_pb2.TuningJob) -> bool:
    return job.phase in (tuning_pb2.JOB_PHASE_SUCCEEDED, tuning_pb2.JOB_PHASE_FAILED)


def wait_job(stub: Any, name: str, timeout_s: float, until: Callable[[tuning_pb2.TuningJob], bool] = finished,
             poll_s: float = 0.3) -> tuning_pb2.TuningJob:
    """Tuning job ``name`` once ``until(job)`` (default: it finished); UNAVAILABLE (the store or the
    leader away for a while) is retried until ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    job = None
    while time.monotonic() < deadline:
        try:
            job = stub.GetTuningJob(tuning_pb2.GetTuningJobRequest(name=name), timeout=5)
            if until(job):
                return job
        except grpc.RpcError as exc:
            if exc.code() != grpc.StatusCode.UNAVAILABLE:
                raise
        time.sleep(poll_s)
    raise AssertionError(f"job {name} did not get there in {timeout_s:g} s: {job}")
