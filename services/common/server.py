"""The gRPC server every edgetune service runs on.

    server = build_server("profiler", port=args.port, metrics_port=9090)
    server.add(ProfilerServicer(device), profiler_pb2_grpc.add_ProfilerServicer_to_server)
    server.on_shutdown.append(device.restore)          # runs after in-flight RPCs end
    server.serve()                                     # start, handle SIGTERM/SIGINT, wait

What it adds around the servicers: a thread-pool ``grpc.server`` with the metrics and
error-mapping interceptors, gRPC health checking (SERVING per service and overall),
server reflection (the registered services, health and reflection), a Prometheus endpoint,
and graceful shutdown: health goes NOT_SERVING, new RPCs are refused, in-flight ones get
``grace_s`` to finish, then the ``on_shutdown`` hooks run, last registered first.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import threading
from collections.abc import Callable, Sequence
from concurrent import futures
from types import FrameType
from typing import Any

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from edgetune.errors import InvalidArgument
from edgetune.identity import ServerSecurity
from edgetune.services.common import reflection
from edgetune.services.common.auth import AuthInterceptor
from edgetune.services.common.errors import ErrorInterceptor
from edgetune.services.common.limits import LimitsInterceptor
from edgetune.services.common.metrics import MetricsInterceptor, start_metrics_server
from edgetune.services.common.pool import DEFAULT_IDLE_S, ElasticThreadPool
from edgetune.store import Store

log = logging.getLogger("edgetune.services.common.server")

HEALTH_SERVICE = health_pb2.DESCRIPTOR.services_by_name["Health"].full_name
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1", "[::1]")
ANY_HOSTS = ("0.0.0.0", "::", "[::]")


def listen_host(host: str, security: ServerSecurity) -> str:
    """Where a server may listen, or InvalidArgument (exit 2) when it could not tell its callers apart.

    - ``--insecure``: anywhere (it warns).
    - TLS with a way to know callers (``--tls-client-ca``, ``--auth-tokens``, ``--agent-jwks``): anywhere.
    - TLS alone: refused. Every caller would be an anonymous admin behind an encrypted channel.
    - Authentication without TLS: loopback by default; another address is refused (tokens would
      cross the network in clear text).
    - Neither: loopback only (the default host then); another address is refused.
    """
    if security.insecure:
        return host or "0.0.0.0"
    if security.tls and not security.authenticates:
        raise InvalidArgument("--tls-client-ca/--auth-tokens", "TLS alone cannot tell callers apart: every caller "
                              "would have every right", "give --tls-client-ca CA (client certificates) or "
                              "--auth-tokens FILE (bearer tokens), or --insecure to serve anonymous callers on purpose")
    if security.tls:
        return host or "0.0.0.0"
    if not host:
        return "127.0.0.1"
    if host not in LOOPBACK_HOSTS:
        if security.authenticates:
            raise InvalidArgument("--host", f"{host!r} would send bearer tokens over the network in clear text",
                                  "a loopback address, or give --tls-cert/--tls-key, or --insecure")
        raise InvalidArgument("--host", f"{host!r} would expose a service without TLS or authentication",
                              "a loopback address, or give --tls-cert/--tls-key with --auth-tokens or "
                              "--tls-client-ca, or --insecure")
    return host


class _NameRecorder:
    """Stands in for the grpc.Server during a generated ``add_XServicer_to_server`` call to
    learn the service names it registers (health and reflection need them)."""

    def __init__(self, server: grpc.Server) -> None:
        self._server = server
        self.names: list[str] = []

    def add_generic_rpc_handlers(self, handlers: Sequence[Any]) -> None:
        for h in handlers:
            name = h.service_name() if hasattr(h, "service_name") else None
            if name and name not in self.names:
                self.names.append(name)
        self._server.add_generic_rpc_handlers(handlers)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._server, name)


class ServiceServer:
    """A gRPC server with health, reflection, metrics and graceful shutdown (see module doc)."""

    def __init__(self, name: str, *, host: str = "", port: int = 0, max_workers: int = 16,
                 metrics_port: int | None = None, metrics_host: str | None = None, grace_s: float = 10.0,
                 ready_file: str | None = None,
                 interceptors: Sequence[grpc.ServerInterceptor] = (),
                 options: Sequence[tuple[str, Any]] = (),
                 security: ServerSecurity | None = None, audit_store: Store | None = None,
                 health_port: int | None = None, idle_thread_s: float = DEFAULT_IDLE_S,
                 max_heavy: int | None = None) -> None:
        """``host`` "" means every address when the server is TLS-secured or insecure, else loopback
        (:func:`listen_host`, which also refuses settings that cannot tell callers apart);
        ``audit_store`` receives the audit stream (:mod:`.auth`).
        ``health_port``: also serve gRPC health checking alone, in plain text, there (kubelet's
        gRPC probes speak no TLS); None: not. ``idle_thread_s``: how long an idle handler thread
        lives (:class:`~.pool.ElasticThreadPool`). ``max_heavy``: heavy calls admitted at once (None:
        ``EDGETUNE_MAX_HEAVY_RPCS`` or the default, :mod:`.limits`)."""
        self.name = name
        security = security or ServerSecurity()
        host = listen_host(host, security)
        tokens = security.tokens()  # read before anything listens: a bad file fails the start
        self.auth = AuthInterceptor(name, tokens=tokens, client_certs=bool(security.tls_client_ca), store=audit_store,
                                    agents=security.agent_verifier())
        self.grace_s = grace_s
        #: Called once on shutdown after in-flight RPCs finished (or the grace ran out), in
        #: reverse order; exceptions are logged and do not stop the others.
        self.on_shutdown: list[Callable[[], None]] = []
        self.service_names: list[str] = []
        self.health = health.HealthServicer()
        self.limits = LimitsInterceptor(max_heavy)  # request limits, heavy slots by role, watches per caller
        self.pool = ElasticThreadPool(max_workers, thread_name_prefix=f"{name}-rpc", idle_s=idle_thread_s)
        self._server = grpc.server(
            self.pool,  # an Executor; grpc only calls submit()
            # Metrics outermost so they see the code the error interceptor mapped to.
            # Auth innermost but for the limits: a refused call is counted and never reaches the
            # servicer; limits inside the error mapping: a refused request is INVALID_ARGUMENT /
            # RESOURCE_EXHAUSTED.
            interceptors=[MetricsInterceptor(), ErrorInterceptor(), self.auth, self.limits, *interceptors],
            options=list(options),
        )
        if security.tls:
            credentials = security.credentials()  # checks the PEM files, naming the flag, before the bind
            self.port = _bind(lambda: self._server.add_secure_port(f"{host}:{port}", credentials))
        else:
            self.port = _bind(lambda: self._server.add_insecure_port(f"{host}:{port}"))
        self.security = security
        _warn_about(name, host, security)
        self._health_server: grpc.Server | None = None
        self.health_port: int | None = None
        if health_port is not None:
            # Health only: nothing else is registered on this server, so plain text reveals nothing.
            self._health_server = grpc.server(futures.ThreadPoolExecutor(max_workers=2,
                                                                         thread_name_prefix=f"{name}-health"))
            health_pb2_grpc.add_HealthServicer_to_server(self.health, self._health_server)
            health_server = self._health_server
            self.health_port = _bind(lambda: health_server.add_insecure_port(f"{host}:{health_port}"))
            if self.health_port == 0:
                raise OSError(f"{name}: cannot serve health checks on {host}:{health_port} (in use?); "
                              f"choose another with --health-port N")
        if self.port == 0:
            raise OSError(f"{name}: cannot listen on {host}:{port} (in use?); choose another with --port N "
                          f"(env EDGETUNE_PORT; 0: any free port)")
        self._host = host
        self._metrics_request = metrics_port
        self._metrics_host = metrics_host or host
        self._metrics_httpd: Any = None
        self._ready_file = ready_file
        self.metrics_port: int | None = None
        self._started = False
        self._stopping = threading.Lock()
        self._stopped = threading.Event()
        self._signals_seen = 0
        self._previous_handlers: dict[int, Any] = {}

    # -- registration ----------------------------------------------------------------------
    def add(self, servicer: object, add_to_server: Callable[[Any, Any], None]) -> list[str]:
        """Register ``servicer`` with its generated ``add_XServicer_to_server``; return the
        service names it added (``["edgetune.v1.Profiler"]``)."""
        if self._started:
            raise RuntimeError("add services before start()")
        recorder = _NameRecorder(self._server)
        add_to_server(servicer, recorder)
        for n in recorder.names:
            if n not in self.service_names:
                self.service_names.append(n)
        return recorder.names

    @property
    def host(self) -> str:
        """The address it listens on (resolved: never "")."""
        return self._host

    @property
    def address(self) -> str:
        host = "127.0.0.1" if self._host in ("0.0.0.0", "[::]", "::") else self._host
        return f"{host}:{self.port}"

    # -- life cycle ------------------------------------------------------------------------
    def start(self) -> ServiceServer:
        if self._started:
            return self
        health_pb2_grpc.add_HealthServicer_to_server(self.health, self._server)
        reflection.enable([*self.service_names, HEALTH_SERVICE], self._server)
        if self._metrics_request is not None:
            self._metrics_httpd, self.metrics_port = start_metrics_server(self._metrics_request,
                                                                          self._metrics_host)
        self._server.start()
        if self._health_server is not None:
            self._health_server.start()
        self._started = True
        for n in self.service_names:
            self.health.set(n, health_pb2.HealthCheckResponse.SERVING)
        self.health.set("", health_pb2.HealthCheckResponse.SERVING)  # the server as a whole
        log.info("serving", extra={"service": self.name, "port": self.port,
                                   "metrics_port": self.metrics_port, "services": self.service_names})
        if self._ready_file:
            self._write_ready_file(self._ready_file)
        return self

    def _write_ready_file(self, path: str) -> None:
        """Renamed into place whole, so a reader never sees half a file."""
        record = {"service": self.name, "address": self.address, "port": self.port,
                  "metrics_port": self.metrics_port, "pid": os.getpid()}
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "w") as fh:
            json.dump(record, fh)
        os.replace(tmp, path)

    def stop(self, grace_s: float | None = None) -> None:
        """Graceful shutdown; safe to call twice and from any thread (only the first runs)."""
        if not self._stopping.acquire(blocking=False):
            self._stopped.wait()
            return
        grace = self.grace_s if grace_s is None else grace_s
        log.info("shutting down", extra={"service": self.name, "grace_s": grace})
        try:
            # NOT_SERVING first, so load balancers / probes drain us while RPCs finish.
            self.health.enter_graceful_shutdown()
            self._server.stop(grace).wait()
            if self._health_server is not None:
                self._health_server.stop(0)
            self.pool.shutdown(wait=False)  # idle handler threads end now, busy ones when their call does
            for hook in reversed(self.on_shutdown):
                try:
                    hook()
                except Exception:
                    log.exception("shutdown hook failed", extra={"hook": getattr(hook, "__qualname__", repr(hook))})
            if self._metrics_httpd is not None:
                self._metrics_httpd.shutdown()
                self._metrics_httpd.server_close()
        finally:
            self.restore_signal_handlers()
            self._stopped.set()
            log.info("stopped", extra={"service": self.name})

    def wait(self, timeout_s: float | None = None) -> bool:
        """Block until :meth:`stop` has finished (hooks included); False on timeout."""
        return self._stopped.wait(timeout_s)

    def serve(self) -> None:
        """start(), stop on SIGTERM / SIGINT, and wait for the shutdown to finish (hooks included).
        Left any other way (an exception while waiting), it stops at once, so the hooks still run."""
        # handlers first: a SIGTERM while starting (or right after "serving" is logged) stops
        # gracefully instead of killing the process with the default action
        self.install_signal_handlers()
        try:
            if not self._started:
                self.start()
            self.wait()
        finally:
            self.restore_signal_handlers()
            self.stop(0)  # no-op after a signal-driven stop

    def run(self, block: bool = True) -> ServiceServer:
        """What a service's ``serve(block=...)`` does: :meth:`serve` until stopped, or (``block=False``)
        :meth:`start` and return at once."""
        if not block:
            return self.start()
        self.serve()
        return self

    # -- signals ---------------------------------------------------------------------------
    def install_signal_handlers(self, signals: Sequence[int] = (signal.SIGTERM, signal.SIGINT)) -> None:
        """First signal: graceful stop in a thread. Second: stop now (grace 0)."""
        if threading.current_thread() is not threading.main_thread():
            log.warning("not in the main thread: no signal handlers installed")
            return
        for sig in signals:
            if sig not in self._previous_handlers:  # installed twice: keep the original to restore
                self._previous_handlers[sig] = signal.signal(sig, self._on_signal)

    def _on_signal(self, signum: int, _frame: FrameType | None) -> None:
        # Signal handlers run on the main thread between bytecodes: do no blocking work here.
        self._signals_seen += 1
        log.info("signal", extra={"service": self.name, "signal": signal.Signals(signum).name})
        if self._signals_seen == 1:
            threading.Thread(target=self.stop, name=f"{self.name}-shutdown", daemon=True).start()
        else:
            self._server.stop(0)  # in-flight RPCs are cancelled; the hooks still run in stop()

    def restore_signal_handlers(self) -> None:
        """Put back the handlers install_signal_handlers replaced (main thread only; stop() in
        the shutdown thread leaves them to serve(), which restores them on the main thread)."""
        if threading.current_thread() is not threading.main_thread():
            return
        for sig, previous in self._previous_handlers.items():
            signal.signal(sig, previous)
        self._previous_handlers.clear()


def _bind(add_port: Callable[[], int]) -> int:
    """The bound port, 0 when it could not be bound: gRPC raises RuntimeError there (older versions
    returned 0), which the caller turns into an OSError naming the flag (exit 2, no traceback)."""
    try:
        return add_port()
    except RuntimeError:
        return 0


def _warn_about(name: str, host: str, security: ServerSecurity) -> None:
    """What --insecure lets through (listen_host refuses the same settings without it)."""
    everywhere = host not in LOOPBACK_HOSTS
    if not security.insecure:
        return
    if not security.secured:
        log.warning("--insecure: serving without TLS or authentication; anyone who reaches %s controls it",
                    host, extra={"service": name, "host": host})
    elif security.tls and not security.authenticates:
        log.warning("--insecure: TLS without --auth-tokens or --tls-client-ca: every caller has every right",
                    extra={"service": name, "host": host})
    elif security.authenticates and not security.tls and everywhere:
        log.warning("--insecure: bearer tokens without TLS: tokens cross the network in clear text "
                    "(give --tls-cert/--tls-key)", extra={"service": name, "host": host})


def build_server(name: str, services: Sequence[tuple[object, Callable[[Any, Any], None]]] = (),
                 **kwargs: Any) -> ServiceServer:
    """A :class:`ServiceServer` with ``services`` (pairs of servicer and generated
    ``add_XServicer_to_server``) registered; keywords go to ServiceServer."""
    server = ServiceServer(name, **kwargs)
    for servicer, add in services:
        server.add(servicer, add)
    return server
