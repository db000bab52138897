"""The coordinator's entry point: ``python -m edgetune.services.coordinator.server`` or
``edgetune serve coordinator --port P --redis URL [--lease-ms MS] [--heartbeat-ttl-s S]``.

Every replica serves every RPC; the one holding the leader lease plans (a standby forwards
PlanRound / UpdateBudget to it) and runs the TuningJob reconcile loop
(:class:`~edgetune.control.reconcile.Reconciler`, which calls ``--estimator`` and
``--optimizer``). All state is in Redis, so a
restarted replica resumes where the last one stopped. Shutdown (SIGTERM / SIGINT): config
watches end, health goes NOT_SERVING, in-flight RPCs get ``--grace-s``, then the Kubernetes
watch stops, the lease is released (the standby takes over at once) and the store closes.

Membership re-plans: the leader checks every heartbeat interval (TTL / 3) whether a node of
the last applied round was lost or came back, and re-plans the round when so
(:class:`~edgetune.control.rounds.MembershipCheck`); a RegisterNode of a node in that round re-plans at once.

Flags (each also read from ``EDGETUNE_<NAME>``): ``--redis``, ``--lease-ms``,
``--heartbeat-ttl-s``, ``--replica-id``, ``--advertise``, ``--estimator``, ``--optimizer``, ``--reconcile-s``,
``--drift-check-s``, ``--drift-time-tolerance``, ``--kube`` (``none``, ``incluster``,
``kubeconfig``), ``--kube-selector`` and the common server flags.
"""

from __future__ import annotations

import argparse
import logging
import os
import socket
import sys
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import grpc
from prometheus_client import Gauge

from edgetune import validation
from edgetune.control import kube
from edgetune.control.configs import ConfigStore
from edgetune.control.leader import DEFAULT_LEASE_MS, LeaderLease, default_holder_id
from edgetune.control.reconcile import DriftPolicy, Reconciler, remote_services
from edgetune.control.registry import DEFAULT_HEARTBEAT_TTL_S, NodeRegistry
from edgetune.control.rounds import MembershipCheck, RoundCoordinator
from edgetune.errors import FailedPrecondition, InvalidArgument
from edgetune.identity import ClientSecurity, ServerSecurity
from edgetune.proto.v1 import coordinator_pb2_grpc, nodejobs_pb2_grpc
from edgetune.services.common import add_option, add_server_options, server_kwargs
from edgetune.services.common.config import client_security, env_name
from edgetune.services.common.entry import run_main
from edgetune.services.common.errors import register_status, status_for
from edgetune.services.common.lost import LostRecordsInterceptor
from edgetune.services.common.server import ServiceServer
from edgetune.services.common.stores import OwnedStore
from edgetune.services.coordinator import metrics
from edgetune.services.coordinator.nodejobs import NodeJobsServicer
from edgetune.services.coordinator.servicer import CoordinatorServicer
from edgetune.store import CONNECTION_ERRORS, NodeRecord, Store

log = logging.getLogger("edgetune.coordinator")

DEFAULT_PORT = 50054
#: PlanRound with inline options: 4,368 PowerTrain modes are ~0.2 MB a node, past gRPC's 4 MB at ~20 nodes.
MAX_REQUEST_BYTES = 64 * 1024 * 1024
#: Handler threads: one per open WatchConfig (one per agent; a thread waiting on an in-process event,
#: not a Redis connection) plus headroom for unary RPCs.
DEFAULT_MAX_WORKERS = 2048
KUBE_MODES = ("auto", "none", "incluster", "kubeconfig")
#: In a pod with its ServiceAccount token mounted (the chart's ``coordinator.nodeAccess``).
SERVICE_ACCOUNT_TOKEN = "/var/run/secrets/kubernetes.io/serviceaccount/token"

LEADER = Gauge("edgetune_coordinator_leader", "1 while this replica holds the leader lease.")

# The store unreachable (restart, failover) is transient: clients should retry, not treat it as a bug.
for _error in CONNECTION_ERRORS:
    if status_for(_error("")) is None:
        register_status(_error, grpc.StatusCode.UNAVAILABLE)


class CoordinatorServer(ServiceServer):
    """A ServiceServer that ends config watches before the graceful stop waits for RPCs."""

    servicer: CoordinatorServicer
    lost_jobs: LostRecordsInterceptor

    def stop(self, grace_s: float | None = None) -> None:
        if getattr(self, "servicer", None) is not None:
            self.servicer.stopping.set()
            self.servicer.configs.hub.wake()  # every watch sees it now, not at its next check
        super().stop(grace_s)


@dataclass
class Coordinator:
    """The parts of one running replica (for tests and embedding)."""

    server: CoordinatorServer
    servicer: CoordinatorServicer
    store: Store
    lease: LeaderLease
    watcher: kube.KubeNodeWatcher | None = None
    membership: MembershipCheck | None = None
    reconciler: Reconciler | None = None


def _kube_watcher(mode: str, selector: str, registry: NodeRegistry) -> kube.KubeNodeWatcher | None:
    if mode not in KUBE_MODES:
        raise InvalidArgument("kube", f"{mode!r}", ", ".join(KUBE_MODES))
    if mode == "auto":
        in_pod = bool(os.environ.get("KUBERNETES_SERVICE_HOST")) and os.path.exists(SERVICE_ACCOUNT_TOKEN)
        mode = "incluster" if in_pod else "none"
    if mode == "none":
        return None
    from kubernetes import client, config  # deferred: kubernetes

    try:
        if mode == "incluster":
            config.load_incluster_config()
        else:
            config.load_kube_config()
    except config.ConfigException as exc:
        raise FailedPrecondition(f"--kube {mode}: cannot load the Kubernetes configuration: {exc}") from None

    def flag_nodes(statuses: dict[str, kube.KubeNodeStatus]) -> None:
        kube.apply_to_registry(registry, statuses)

    return kube.KubeNodeWatcher(client.CoreV1Api(), selector, on_change=flag_nodes)


def create_coordinator(port: int = DEFAULT_PORT, redis_url: str | None = "embedded", *,
                       lease_ms: int = DEFAULT_LEASE_MS, heartbeat_ttl_s: float = DEFAULT_HEARTBEAT_TTL_S,
                       replica_id: str = "", advertise: str = "", kube_mode: str = "none",
                       kube_selector: str = kube.JETSON_LABEL_SELECTOR, host: str = "",
                       metrics_port: int | None = None, grace_s: float = 10.0, ready_file: str | None = None,
                       max_workers: int = DEFAULT_MAX_WORKERS,
                       store: Store | None = None, watch_block_ms: int = 30_000,
                       membership_check_s: float | None = None, estimator: str = "", optimizer: str = "",
                       reconcile_s: float = 1.0, drift_check_s: float = 0.0,
                       drift_time_tolerance: float = DriftPolicy.time_tolerance,
                       transfer_epochs: int = 0, security: ServerSecurity | None = None,
                       client: ClientSecurity | None = None, health_port: int | None = None) -> Coordinator:
    """A replica, not yet started (``coordinator.server.start()``; the lease starts with it).

    ``store``: a Store to use instead of ``redis_url`` (the caller owns it).
    ``membership_check_s``: how often the leader checks the last round's nodes for lost /
    returned ones (None: the heartbeat interval, TTL / 3; 0: never).
    ``estimator`` / ``optimizer``: the services' addresses the leader's reconcile loop calls
    (empty: TuningJobs stay Pending saying so); ``reconcile_s``: its pass interval;
    ``drift_check_s`` / ``drift_time_tolerance``: how often an Applied node's configuration is measured
    again and the relative time miss that counts as drift (:class:`DriftPolicy`; 0 s: no checks);
    ``transfer_epochs``: the epochs of the loop's transfers (0: the tuning policy's).
    ``security``: TLS / authentication of this server; ``client``: how it calls the estimator,
    the optimizer and the leader replica (TLS, token). ``watch_block_ms``: how often an idle config
    watch checks whether its stream ended, a safety net only: a stream's end and the server's stop
    wake it at once.
    """
    owner = OwnedStore(store, redis_url)
    with owner as store:
        assert store is not None  # a required store (not optional=True): opened from redis_url if not given
        registry = NodeRegistry(store, heartbeat_ttl_s=heartbeat_ttl_s)
        configs = ConfigStore(store)
        lost_jobs = LostRecordsInterceptor(store)  # a job lost with Redis' data is DATA_LOSS, not NOT_FOUND
        server = CoordinatorServer("coordinator", host=host, port=port, metrics_port=metrics_port,
                                   grace_s=grace_s, max_workers=max_workers, ready_file=ready_file,
                                   options=[("grpc.max_receive_message_length", MAX_REQUEST_BYTES)],
                                   security=security, audit_store=store, health_port=health_port,
                                   interceptors=[lost_jobs])
        server.lost_jobs = lost_jobs
        # In the chart, the pod IP (downward API) is what another replica or a client can reach.
        # (A replica bound to one address is reached there: a standby forwards planning calls to it.)
        bound = server.host not in ("", "0.0.0.0", "::", "[::]")
        where = advertise or (f"{server.host}:{server.port}" if bound else
                              f"{os.environ.get('EDGETUNE_POD_IP') or socket.gethostname()}:{server.port}")
        lease = LeaderLease(store, "coordinator", lease_ms=lease_ms,
                            holder_id=f"{replica_id}@{where}" if replica_id else default_holder_id(where),
                            on_change=lambda leading: LEADER.set(1 if leading else 0))
        rounds = RoundCoordinator(store, registry, configs, lease)
        watcher = _kube_watcher(kube_mode, kube_selector, registry)

        # The estimator and optimizer are reached by their own names; server_name is for replicas (by IP).
        est, sel = remote_services(estimator, optimizer, replace(client, server_name="") if client else None)
        drift = DriftPolicy(check_s=drift_check_s, time_tolerance=drift_time_tolerance)
        if transfer_epochs:
            validation.count(transfer_epochs, "transfer_epochs", minimum=1, maximum=100_000)
        reconciler = Reconciler(store, registry, configs, lease, est, sel, interval_s=reconcile_s, drift=drift,
                                transfer_epochs=transfer_epochs or None)

        def on_register(record: NodeRecord) -> None:
            reconciler.wake()  # a node that matches a job (re)joins
            if watcher is not None:  # a node that registers after the last event gets its flag now
                kube.apply_to_registry(registry, watcher.statuses)
            if lease.is_leader:  # a node of the last round (re-)joins: re-plan it now (else the check will)
                try:
                    rounds.replan_after_membership_change(record.node_id)
                except Exception:  # the registration itself succeeded; the periodic check retries
                    log.exception("re-plan after the registration of %s failed", record.node_id)

        metrics.track(configs.hub)  # open watches and feed reads on the metrics endpoint
        servicer = CoordinatorServicer(registry, configs, rounds, lease, on_register=on_register,
                                       watch_block_ms=watch_block_ms, on_job_change=reconciler.wake,
                                       client=client)
        server.servicer = servicer
        server.add(servicer, coordinator_pb2_grpc.add_CoordinatorServicer_to_server)
        # Agents without a store credential claim and report their node's jobs here.
        server.add(NodeJobsServicer(store, servicer.stopping), nodejobs_pb2_grpc.add_NodeJobsServicer_to_server)
        interval = registry.heartbeat_interval_s if membership_check_s is None else membership_check_s
        membership = MembershipCheck(rounds, lease, interval) if interval > 0 else None
    # Hooks run last-registered first: kube watch, then the lease (released), then the store.
    owner.close_with(server)
    server.on_shutdown.append(lost_jobs.stop)
    server.on_shutdown.append(lease.stop)
    if watcher is not None:
        server.on_shutdown.append(watcher.stop)
    if membership is not None:
        server.on_shutdown.append(membership.stop)
    server.on_shutdown.append(reconciler.stop)
    return Coordinator(server, servicer, store, lease, watcher, membership, reconciler)


def start(coordinator: Coordinator) -> Coordinator:
    coordinator.server.start()
    coordinator.server.lost_jobs.start()
    coordinator.lease.start()
    if coordinator.watcher is not None:
        coordinator.watcher.start()
    if coordinator.membership is not None:
        coordinator.membership.start()
    if coordinator.reconciler is not None:
        coordinator.reconciler.start()
    log.info("coordinator ready", extra={"port": coordinator.server.port, "holder": coordinator.lease.holder_id,
                                         "lease_ms": coordinator.lease.lease_ms, "store": repr(coordinator.store)})
    return coordinator


def serve(port: int = DEFAULT_PORT, redis_url: str | None = "embedded", *, block: bool = True,
          **kwargs: Any) -> Coordinator:
    """Start a replica; with ``block`` serve until SIGTERM / SIGINT. Keywords: see :func:`create_coordinator`."""
    coordinator = create_coordinator(port, redis_url, **kwargs)
    if block:
        # before the lease is taken: a SIGTERM from then on releases it (serve() keeps these handlers)
        coordinator.server.install_signal_handlers()
    try:
        start(coordinator)
    except BaseException:
        coordinator.server.restore_signal_handlers()
        raise
    if not block:
        return coordinator
    coordinator.server.serve()
    return coordinator


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="edgetune serve coordinator",
                                     description="The edgetune federation coordinator.")
    add_server_options(parser, default_port=DEFAULT_PORT)
    if env_name("max_workers") not in os.environ:
        # Every agent's WatchConfig stream holds a handler thread: size the pool for a fleet.
        parser.set_defaults(max_workers=DEFAULT_MAX_WORKERS)
    add_option(parser, "redis", "embedded", "state store: redis://host:port/db, unix:///path, embedded[:/dir]")
    add_option(parser, "lease_ms", DEFAULT_LEASE_MS, "leader lease in ms (standby takes over within one lease)")
    add_option(parser, "heartbeat_ttl_s", DEFAULT_HEARTBEAT_TTL_S, "a node is lost this long after its last beat")
    add_option(parser, "replica_id", os.environ.get("EDGETUNE_POD_NAME", ""),
               "this replica's name in the lease (default: the pod name, else hostname-pid)")
    add_option(parser, "advertise", "", "address clients reach this replica at, named by standbys' errors "
               "(default: $EDGETUNE_POD_IP or the hostname, with the port)")
    add_option(parser, "kube", "auto", f"Kubernetes node awareness: {', '.join(KUBE_MODES)} "
               "(auto: incluster inside a pod with a ServiceAccount token, else none)")
    add_option(parser, "estimator", "", "Estimator service address the reconcile loop calls (host:port)")
    add_option(parser, "optimizer", "", "Optimizer service address the reconcile loop calls (host:port)")
    add_option(parser, "kube_selector", kube.JETSON_LABEL_SELECTOR, "label selector of the Jetson nodes")
    add_option(parser, "reconcile_s", 1.0, "seconds between the leader's reconcile passes over the tuning jobs")
    add_option(parser, "drift_check_s", 0.0, "seconds between measurements of an Applied node's configuration "
               "(drift checks; 0: none)")
    add_option(parser, "drift_time_tolerance", DriftPolicy.time_tolerance,
               "relative time miss, beyond the one verification accepted, that counts as drift")
    add_option(parser, "transfer_epochs", 0, "epochs of the reconcile loop's transfers (0: the tuning policy's)")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    return run_main("coordinator", argv, parse_args, lambda args: serve(
        redis_url=args.redis, lease_ms=args.lease_ms, heartbeat_ttl_s=args.heartbeat_ttl_s,
        replica_id=args.replica_id, advertise=args.advertise, kube_mode=args.kube,
        kube_selector=args.kube_selector, estimator=args.estimator, optimizer=args.optimizer,
        reconcile_s=args.reconcile_s, drift_check_s=args.drift_check_s,
        drift_time_tolerance=args.drift_time_tolerance, transfer_epochs=args.transfer_epochs,
        client=client_security(args), **server_kwargs(args)))


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
