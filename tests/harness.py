"""Starting edgetune's servers and Redis for the service and integration tests, in one place.

Imported as ``harness`` (``tests/conftest.py`` puts this directory on ``sys.path``):

- :func:`coordinator`: a coordinator replica in this process, started, stopped on exit;
- :class:`InProcessCluster`: the control plane (coordinator, estimator, optimizer) and simulated
  agents as gRPC servers in this process over one in-memory store: what a LocalCluster runs as
  processes, for the tests about behaviour rather than process life;
- :func:`serving`: a ``(server, servicer)`` pair from a service's ``create_server``, started,
  stopped on exit;
- :func:`durable_redis` / :func:`restart_redis`: a redis-server on TCP with an AOF fsynced on
  every write, and the same one again on its port after a stop (the fault tests' outages);
- :func:`references`: ``edgetune up``'s reference models on a cluster's estimator, each fitted once per
  run and copied into the stores of the clusters after it;
- :func:`free_port` / :func:`wait_serving`: a port for a service run as its own process, and a
  channel to it once it serves;
- :func:`wait_for` / :func:`wait_job`: poll until something holds, failing after a timeout.

Test defaults are short (a 1 s lease, a 0.5 s grace, a 100 ms watch block) so that a suite on
two shared cores neither waits long at shutdown nor misses a change.
"""

from __future__ import annotations

import fcntl
import os
import pickle
import socket
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import grpc

from edgetune.clients.coordinator import CoordinatorClient
from edgetune.estimation.repository import BLOB_KIND
from edgetune.localrun.controlplane import REFERENCE_EPOCHS, REFERENCE_POINTS, fit_references
from edgetune.localrun.processes import SupervisorError, wait_process_serving
from edgetune.proto.v1 import tuning_pb2
from edgetune.services.common.server import ServiceServer
from edgetune.services.coordinator.server import Coordinator, create_coordinator, start
from edgetune.services.estimator.server import create_server as create_estimator
from edgetune.services.optimizer.server import create_server as create_optimizer
from edgetune.services.profiler.server import create_server as create_agent
from edgetune.services.profiler.server import link_to_coordinator
from edgetune.store import EmbeddedRedisServer, MemoryStore, Store
from edgetune.tuning.protocols import reference_model_id

T = TypeVar("T")

#: What a test replica gets unless it says otherwise.
COORDINATOR_DEFAULTS: dict[str, Any] = {"port": 0, "lease_ms": 1000, "grace_s": 0.5, "watch_block_ms": 100}
#: The reconcile loop's transfer epochs in the clusters of tests about process life, faults and wiring (the
#: coordinator's --transfer-epochs, as `make demo --quick` runs it): a third of the estimator's CPU per
#: transfer. Tests of decision quality (test_up_jobs) keep the tuning policy's (0).
QUICK_TRANSFER_EPOCHS = 100
#: The same as LocalCluster's coordinator flags.
QUICK_TRANSFER_ARGS = ("--transfer-epochs", str(QUICK_TRANSFER_EPOCHS))


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


@dataclass
class Served:
    """A service's server running in this process: ``address`` as a process's would be."""

    name: str
    server: ServiceServer
    servicer: Any

    @property
    def address(self) -> str:
        return self.server.address


@dataclass
class InProcessCluster:
    """A LocalCluster's parts as gRPC servers in this process, on loopback, over one MemoryStore.

    The coordinator (with the Estimator and the Optimizer when ``tuning``: its reconcile loop runs
    TuningJobs) and simulated agents registered through their coordinator link, each with its own
    mode-restore state directory under ``workdir``. The servers are the services' own
    ``create_server`` / ``create_coordinator``: the same servicers, interceptors and agent loop as
    the processes, without a process start (an interpreter and torch) per service. Attributes as
    LocalCluster's: ``store``, ``channel`` and ``client`` (the coordinator's), ``coordinator`` / ``estimator`` /
    ``optimizer`` (with ``address``). A context manager; :meth:`close` stops agents first (they
    restore their modes), then the coordinator and the services.
    """

    workdir: Path
    tuning: bool = False
    #: The agents' workload path: directories a job's MODULE:FUNCTION workload is imported from.
    workload_path: tuple[Path, ...] = ()
    heartbeat_ttl_s: float = 6.0
    lease_ms: int = 2000
    grace_s: float = 0.5
    #: The reconcile loop's transfer epochs (0: the tuning policy's).
    transfer_epochs: int = QUICK_TRANSFER_EPOCHS
    store: Store = field(default_factory=MemoryStore)
    coordinator: Served | None = None
    estimator: Served | None = None
    optimizer: Served | None = None
    agents: dict[str, Served] = field(default_factory=dict)
    channel: grpc.Channel | None = None
    #: The coordinator's client on :attr:`channel` (records in and out).
    client: CoordinatorClient | None = None
    _replica: Coordinator | None = None
    _services: list[Served] = field(default_factory=list)

    def __enter__(self) -> InProcessCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self) -> InProcessCluster:
        """The Estimator (no Ray) and the Optimizer when ``tuning``, then the coordinator, leading."""
        try:
            if self.tuning:
                self.estimator = self.start_service("estimator")
                self.optimizer = self.start_service("optimizer")
            tuning = {"estimator": self.estimator.address, "optimizer": self.optimizer.address} \
                if self.estimator is not None and self.optimizer is not None else {}
            replica = start(create_coordinator(
                store=self.store, host="127.0.0.1", replica_id="local", heartbeat_ttl_s=self.heartbeat_ttl_s,
                transfer_epochs=self.transfer_epochs,
                **{**COORDINATOR_DEFAULTS, "lease_ms": self.lease_ms, "grace_s": self.grace_s}, **tuning))
            self._replica = replica
            self.coordinator = Served("coordinator", replica.server, replica.servicer)
            assert replica.lease.wait_leader(10.0), "the coordinator did not take the lease"
            self.channel = grpc.insecure_channel(replica.server.address)
            self.client = CoordinatorClient(self.channel)
        except BaseException:
            self.close()
            raise
        return self

    def start_service(self, name: str) -> Served:
        """The ``estimator`` (without Ray) or the ``optimizer`` on this cluster's store, started."""
        common = {"port": 0, "host": "127.0.0.1", "store": self.store, "grace_s": self.grace_s, "max_workers": 8}
        if name == "estimator":
            server, servicer = create_estimator(use_ray=False, **common)
        elif name == "optimizer":
            server, servicer = create_optimizer(**common)
        else:
            raise ValueError(f"no service {name!r} to start in this process")
        served = Served(name, server.start(), servicer)
        self._services.append(served)
        return served

    def start_agents(self, nodes: Mapping[str, tuple[str, float | None]], *, seed: int = 0,
                     job_idle_timeout_ms: int | None = None, timeout_s: float = 30.0) -> dict[str, Served]:
        """Agents ``node_id -> (simulated device model, power budget W or None)``, returned once each
        has registered with the coordinator (``seed``: the first agent's simulator seed, +1 per agent)."""
        assert self.coordinator is not None and self.client is not None, "the cluster is not started"
        client = self.client
        started = {node_id: self.start_agent(node_id, model, budget_w, seed=seed + i,
                                             job_idle_timeout_ms=job_idle_timeout_ms)
                   for i, (node_id, (model, budget_w)) in enumerate(nodes.items())}

        def registered() -> bool:
            listed = {n.node_id: n for n in client.nodes()}
            return all(n in listed and listed[n].state != "lost" for n in started)

        wait_for(registered, timeout_s, "the agents to register", poll_s=0.05)
        return started

    def start_agent(self, node_id: str, model: str, budget_w: float | None = None, *, seed: int = 0,
                    job_idle_timeout_ms: int | None = None) -> Served:
        """An agent on a simulated ``model`` linked to the coordinator (not waited for)."""
        assert self.coordinator is not None, "the cluster is not started"
        server, servicer = create_agent(f"sim:{model}", port=0, host="127.0.0.1", store=self.store,
                                        state_dir=self.workdir / f"state-{node_id}", node_id=node_id, seed=seed,
                                        grace_s=self.grace_s, workload_path=[os.fspath(p) for p in self.workload_path])
        server.start()
        agent = Served(f"agent-{node_id}", server, servicer)
        self.agents[node_id] = agent
        link = {} if job_idle_timeout_ms is None else {"job_idle_timeout_ms": job_idle_timeout_ms}
        try:
            link_to_coordinator(server, servicer, self.coordinator.address, server.address, power_budget_w=budget_w,
                                **link)
        except BaseException:
            server.stop(0)
            raise
        return agent

    def stop_agent(self, node_id: str) -> None:
        """Stop one agent as SIGTERM would: its link first, then profiles cancelled and its mode restored."""
        self.agents.pop(node_id).server.stop(self.grace_s)

    def close(self) -> None:
        for node_id in list(self.agents):  # agents first: they restore their modes
            self.stop_agent(node_id)
        if self.channel is not None:
            self.channel.close()
        if self._replica is not None:
            self._replica.server.stop(0)
        for served in reversed(self._services):
            served.server.stop(0)
        self._services.clear()
        self.store.close()


def references(store: Store, estimator_address: str, devices: Sequence[str], cache: Path, *,
               points: int = REFERENCE_POINTS, epochs: int = REFERENCE_EPOCHS) -> dict[str, str]:
    """``fit_references`` (what ``edgetune up`` fits: a training reference per device model) on the
    estimator at ``estimator_address``, whose store is ``store``, with each device's model fitted once
    per run: the first time through the estimator's Fit, its stored model (bytes and record) then
    kept in ``cache`` (the run's shared directory) and written into the next clusters' stores as the
    estimator wrote it. ``device -> model id``, as ``fit_references`` returns."""
    out: dict[str, str] = {}
    for device in dict.fromkeys(devices):
        path = cache / f"reference-{device}-{points}-{epochs}.pickle"
        with open(path.with_suffix(".lock"), "w") as lock:  # one worker fits, the other waits and reads
            fcntl.flock(lock, fcntl.LOCK_EX)
            if path.exists():
                parts, data, meta = pickle.loads(path.read_bytes())
                store.put_blob(BLOB_KIND, parts, data, meta)
            else:
                before = set(store.list_blobs(BLOB_KIND))
                fit_references(estimator_address, [device], points=points, epochs=epochs)
                (fitted,) = [b for b in store.list_blobs(BLOB_KIND) if b not in before]
                data, meta, _ = store.get_blob(BLOB_KIND, fitted.key_parts)
                path.with_suffix(".tmp").write_bytes(pickle.dumps((fitted.key_parts, data, meta)))
                path.with_suffix(".tmp").replace(path)
        out[device] = reference_model_id(device)
    return out


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
