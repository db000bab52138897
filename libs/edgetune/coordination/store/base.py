"""Store: the one interface over a Redis server, whichever backend started or found it.

A ``Store`` wraps a ``redis.Redis`` client (``decode_responses=False``: blobs are bytes) and
a namespace (``edgetune`` by default). Every key it writes is ``<namespace>:<part>:<part>...``;
parts are percent-escaped for ``%`` and ``:`` so any string (a node id with colons, say)
is one part and a key splits back into its parts unambiguously.

Key layout (``ns`` = namespace)::

    ns:meas:<id>                                  hash: doc (JSON), seq, device_model, workload, role, node_id
    ns:meas-index:<device>:<workload>:<role>      zset: measurement ids scored by write sequence
    ns:meas-index:<device>:<workload>:<role>:<node>   same, per node
    ns:meas-seq                                   counter behind the scores
    ns:blob:<kind>:<part>...:<version>            hash: data (bytes), meta (JSON), created_s
    ns:blob-latest:<kind>:<part>...               latest version number (int)
    ns:blob-index:<kind>                          set of the escaped, joined key parts
    ns:doc:<kind>:<key>                           hash: doc (JSON), rev
    ns:doc-index:<kind>                           set of doc keys
    ns:doc-rev                                    counter that hands out revisions
    ns:kv:<part>...                               JSON values, usually with a TTL (heartbeats)

Everything else (job streams, leader locks) is built by the coordination layer with
``store.key(...)`` and ``store.client``. Multi-key scripts assume one Redis node (or a
Sentinel-managed primary), not Redis Cluster.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple, cast
from urllib.parse import urlsplit, urlunsplit

import redis

from edgetune.errors import FailedPrecondition, InvalidArgument, NotFound

DEFAULT_NAMESPACE = "edgetune"

#: Roles a measurement may have (CONTRACT.md: ``role`` is ``train`` or ``infer``).
ROLES: tuple[str, ...] = ("train", "infer")

KeyLike = str | int | Sequence[str | int]


class RevisionConflict(FailedPrecondition):
    """``put_doc`` / ``delete_doc`` was given an ``expected_revision`` that is no longer current.

    ``current`` is the revision found (0 when the doc does not exist): re-read, merge, retry.
    """

    def __init__(self, kind: str, key: str, expected: int, current: int) -> None:
        self.kind, self.key, self.expected, self.current = kind, key, expected, current
        super().__init__(
            f"doc {kind}/{key}: expected revision {expected}, found {current or 'none (missing)'}"
        )


class VersionedDoc(NamedTuple):
    doc: Any
    revision: int


class BlobRef(NamedTuple):
    key_parts: tuple[str, ...]
    latest_version: int


def escape_part(part: str | int) -> str:
    """One key part, with ``%`` and ``:`` escaped so that ``:`` only ever separates parts."""
    if isinstance(part, bool) or not isinstance(part, str | int):
        raise InvalidArgument("key", f"a key part must be a string or int, got {type(part).__name__}")
    text = str(part)
    if not text:
        raise InvalidArgument("key", "empty key part", allowed="non-empty strings")
    return text.replace("%", "%25").replace(":", "%3A")


def unescape_part(text: str) -> str:
    return text.replace("%3A", ":").replace("%25", "%")


def redact_url(url: str) -> str:
    """The URL without its password, for logs, errors and ``info()``."""
    try:
        parts = urlsplit(url)
        if parts.password is None:
            return url
        netloc = parts.netloc.rsplit("@", 1)[1]
        user = f"{parts.username}:***@" if parts.username else ":***@"
        return urlunsplit(parts._replace(netloc=user + netloc))
    except ValueError:
        return "<unparseable url>"


def _glob_escape(text: str) -> str:
    # SCAN MATCH patterns treat * ? [ ] \ specially; prefixes come from user-given parts.
    return "".join("\\" + c if c in "*?[]\\" else c for c in text)


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _dumps(value: Any, field: str) -> bytes:
    try:
        return json.dumps(value, separators=(",", ":")).encode()
    except (TypeError, ValueError) as exc:
        raise InvalidArgument(field, f"not JSON-serialisable: {exc}") from None


# Write the measurement only when its hash does not exist yet, and index it in the same
# atomic step, so a retried or duplicated write can never index twice or half-write.
_PUT_MEASUREMENT = """
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
local seq = redis.call('INCR', KEYS[2])
redis.call('HSET', KEYS[1], 'doc', ARGV[1], 'seq', seq, 'device_model', ARGV[2],
           'workload', ARGV[3], 'role', ARGV[4], 'node_id', ARGV[5])
redis.call('ZADD', KEYS[3], seq, ARGV[6])
if #KEYS >= 4 then redis.call('ZADD', KEYS[4], seq, ARGV[6]) end
return seq
"""

# Allocate the next version and write it in one step: readers never see a version
# number whose data is missing. The versioned key is derived here, hence one Redis node.
_PUT_BLOB = """
local v = redis.call('INCR', KEYS[1])
local t = redis.call('TIME')
redis.call('HSET', ARGV[1] .. ':' .. v, 'data', ARGV[2], 'meta', ARGV[3],
           'created_s', t[1] .. '.' .. string.format('%06d', tonumber(t[2])))
redis.call('SADD', KEYS[2], ARGV[4])
return v
"""


class Store:
    """Namespaced edgetune state on one Redis server. See the module docstring for the layout.

    Subclasses only decide how the client is made and what ``close()`` releases.
    """

    backend = "redis"

    def __init__(self, client: redis.Redis, *, namespace: str = DEFAULT_NAMESPACE, url: str = "") -> None:
        self.client = client
        self.namespace = escape_part(namespace)
        self.url = url
        self._put_measurement = client.register_script(_PUT_MEASUREMENT)
        self._put_blob = client.register_script(_PUT_BLOB)

    # -- keys ---------------------------------------------------------------------------

    def key(self, *parts: str | int) -> str:
        """``<namespace>:<part>:...`` with each part escaped; for streams, locks and the like."""
        if not parts:
            raise InvalidArgument("key", "at least one key part is needed")
        return ":".join((self.namespace, *(escape_part(p) for p in parts)))

    def split_key(self, key: str | bytes) -> tuple[str, ...]:
        """Inverse of :meth:`key`: the parts after the namespace."""
        text = key.decode() if isinstance(key, bytes) else key
        head, _, rest = text.partition(":")
        if head != self.namespace or not rest:
            raise InvalidArgument("key", f"{text!r} is not in namespace {self.namespace!r}")
        return tuple(unescape_part(p) for p in rest.split(":"))

    @staticmethod
    def _parts(key: KeyLike) -> tuple[str | int, ...]:
        return (key,) if isinstance(key, str | int) else tuple(key)

    # -- health -------------------------------------------------------------------------

    def ping(self) -> bool:
        return bool(self.client.ping())

    def info(self) -> dict[str, Any]:
        server = self.client.info("server")
        persistence = self.client.info("persistence")
        memory = self.client.info("memory")
        return {
            "backend": self.backend,
            "url": redact_url(self.url),
            "namespace": self.namespace,
            "redis_version": server.get("redis_version"),
            "uptime_s": server.get("uptime_in_seconds"),
            "aof_enabled": bool(persistence.get("aof_enabled")),
            "used_memory_bytes": memory.get("used_memory"),
        }

    def close(self) -> None:
        self.client.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({redact_url(self.url)!r}, namespace={self.namespace!r})"

    # -- measurements -------------------------------------------------------------------

    def _measurement_index(
        self, device_model: str, workload: str, role: str, node_id: str | None = None
    ) -> str:
        parts: tuple[str, ...] = (device_model, workload, role) + ((node_id,) if node_id else ())
        return self.key("meas-index", *parts)

    @staticmethod
    def _check_measurement(m: dict) -> tuple[str, str, str, str, str | None]:
        if not isinstance(m, dict):
            raise InvalidArgument("measurement", f"must be a dict, got {type(m).__name__}")
        for name in ("id", "device_model", "workload", "role"):
            value = m.get(name)
            if not isinstance(value, str) or not value:
                raise InvalidArgument(f"measurement.{name}", f"missing or not a non-empty string: {value!r}")
        if m["role"] not in ROLES:
            raise InvalidArgument("measurement.role", f"{m['role']!r}", allowed=", ".join(ROLES))
        node_id = m.get("node_id")
        if node_id is not None and (not isinstance(node_id, str) or not node_id):
            raise InvalidArgument("measurement.node_id", f"must be a non-empty string or absent: {node_id!r}")
        return m["id"], m["device_model"], m["workload"], m["role"], node_id

    def _measurement_call(self, m: dict, client: Any = None) -> Any:
        mid, device, workload, role, node_id = self._check_measurement(m)
        keys = [self.key("meas", mid), self.key("meas-seq"), self._measurement_index(device, workload, role)]
        if node_id:
            keys.append(self._measurement_index(device, workload, role, node_id))
        args: list[bytes | str] = [_dumps(m, "measurement"), device, workload, role, node_id or "", mid]
        return self._put_measurement(keys=keys, args=args, client=client)

    def put_measurement(self, m: dict) -> bool:
        """Store one measurement; True if new, False if its ``id`` was already stored (nothing changes).

        Required fields: ``id``, ``device_model``, ``workload``, ``role`` (train|infer);
        ``node_id`` is optional and indexed when present. Any other JSON fields are kept as-is.
        """
        return int(self._measurement_call(m)) > 0

    def put_measurements(self, ms: Iterable[dict]) -> int:
        """Store many in one round trip; returns how many were new."""
        ms = list(ms)
        for m in ms:  # validate all before writing any
            self._check_measurement(m)
        pipe = self.client.pipeline(transaction=False)
        for m in ms:
            self._measurement_call(m, client=pipe)
        return sum(1 for seq in pipe.execute() if int(seq) > 0)

    def get_measurement(self, measurement_id: str) -> dict | None:
        raw = self.client.hget(self.key("meas", measurement_id), "doc")
        return json.loads(raw) if raw is not None else None

    def get_measurements(
        self, device_model: str, workload: str, role: str, node_id: str | None = None
    ) -> list[dict]:
        """Measurements of (device model, workload, role), optionally of one node, in write order."""
        if role not in ROLES:
            raise InvalidArgument("role", f"{role!r}", allowed=", ".join(ROLES))
        ids: list[bytes] = self.client.zrange(
            self._measurement_index(device_model, workload, role, node_id), 0, -1
        )  # type: ignore[assignment]
        if not ids:
            return []
        pipe = self.client.pipeline(transaction=False)
        for mid in ids:
            pipe.hget(self.key("meas", _text(mid)), "doc")
        return [json.loads(raw) for raw in pipe.execute() if raw is not None]

    def count_measurements(
        self, device_model: str, workload: str, role: str, node_id: str | None = None
    ) -> int:
        return int(self.client.zcard(self._measurement_index(device_model, workload, role, node_id)))

    # -- versioned blobs (predictors) ---------------------------------------------------

    @staticmethod
    def _blob_parts(kind: str, key_parts: KeyLike) -> tuple[str | int, ...]:
        parts = Store._parts(key_parts)
        if not parts:
            raise InvalidArgument("key_parts", "at least one key part is needed")
        return (kind, *parts)

    def put_blob(self, kind: str, key_parts: KeyLike, data: bytes, meta: dict | None = None) -> int:
        """Store a new version of a blob (a serialised predictor, say); returns its version (1, 2, ...)."""
        if not isinstance(data, bytes | bytearray | memoryview):
            raise InvalidArgument("data", f"must be bytes, got {type(data).__name__}")
        parts = self._blob_parts(kind, key_parts)
        member = ":".join(escape_part(p) for p in parts[1:])
        version = self._put_blob(
            keys=[self.key("blob-latest", *parts), self.key("blob-index", kind)],
            args=[self.key("blob", *parts), bytes(data), _dumps(meta or {}, "meta"), member],
        )
        return int(version)

    def get_blob(self, kind: str, key_parts: KeyLike, version: int | None = None) -> tuple[bytes, dict, int]:
        """``(data, meta, version)`` of the given version, or of the latest when ``version`` is None."""
        parts = self._blob_parts(kind, key_parts)
        shown = "/".join(str(p) for p in parts)
        if version is None:
            latest = self.client.get(self.key("blob-latest", *parts))
            if latest is None:
                raise NotFound(f"blob {shown} does not exist")
            version = int(latest)
        elif isinstance(version, bool) or not isinstance(version, int) or version < 1:
            raise InvalidArgument("version", f"{version!r}", allowed="an int >= 1, or None for the latest")
        data, meta = cast(
            "list[bytes | None]", self.client.hmget(self.key("blob", *parts, version), ["data", "meta"])
        )
        if data is None or meta is None:
            raise NotFound(f"blob {shown} has no version {version}")
        return data, json.loads(meta), version

    def list_blobs(self, kind: str) -> list[BlobRef]:
        """Every blob of a kind with its latest version, sorted by key parts."""
        members = sorted(
            _text(m) for m in cast("set[bytes]", self.client.smembers(self.key("blob-index", kind)))
        )
        if not members:
            return []
        split = [tuple(unescape_part(p) for p in m.split(":")) for m in members]
        pipe = self.client.pipeline(transaction=False)
        for parts in split:
            pipe.get(self.key("blob-latest", kind, *parts))
        return [
            BlobRef(parts, int(v)) for parts, v in zip(split, pipe.execute(), strict=True) if v is not None
        ]

    # -- JSON docs with optimistic concurrency ------------------------------------------

    def put_doc(self, kind: str, key: str, doc: Any, expected_revision: int | None = None) -> int:
        """Write a JSON doc; returns its new revision.

        ``expected_revision``: None writes unconditionally; 0 creates (fails if it exists);
        n > 0 writes only if the current revision is n. A mismatch raises
        :class:`RevisionConflict`. Revisions come from one namespace-wide counter, so a doc
        deleted and re-created never reuses a revision a stale writer may still hold.
        """
        if expected_revision is not None and (
            isinstance(expected_revision, bool)
            or not isinstance(expected_revision, int)
            or expected_revision < 0
        ):
            raise InvalidArgument(
                "expected_revision", f"{expected_revision!r}", allowed="None, 0 (create) or a revision"
            )
        payload = _dumps(doc, "doc")
        doc_key, index_key = self.key("doc", kind, key), self.key("doc-index", kind)
        with self.client.pipeline(transaction=True) as pipe:
            while True:
                try:
                    pipe.watch(doc_key)
                    raw = pipe.hget(doc_key, "rev")
                    current = int(raw) if raw is not None else 0
                    if expected_revision is not None and current != expected_revision:
                        raise RevisionConflict(kind, key, expected_revision, current)
                    # Taken outside MULTI so the value is known; a lost race wastes a number, nothing else.
                    revision = int(self.client.incr(self.key("doc-rev")))
                    pipe.multi()
                    pipe.hset(doc_key, mapping={"doc": payload, "rev": revision})
                    pipe.sadd(index_key, escape_part(key))
                    pipe.execute()
                    return revision
                except redis.WatchError:
                    if expected_revision is not None:
                        # Someone wrote between our read and EXEC: report what is there now.
                        raw = self.client.hget(doc_key, "rev")
                        raise RevisionConflict(kind, key, expected_revision, int(raw or 0)) from None
                    continue  # unconditional write: last writer wins, just try again

    def get_doc(self, kind: str, key: str, *, missing_ok: bool = False) -> VersionedDoc | None:
        """``(doc, revision)``; a missing doc raises NotFound, or returns None with ``missing_ok``."""
        raw, rev = cast("list[bytes | None]", self.client.hmget(self.key("doc", kind, key), ["doc", "rev"]))
        if raw is None or rev is None:
            if missing_ok:
                return None
            raise NotFound(f"doc {kind}/{key} does not exist")
        return VersionedDoc(json.loads(raw), int(rev))

    def delete_doc(self, kind: str, key: str, expected_revision: int | None = None) -> bool:
        """Delete a doc; False if it did not exist. ``expected_revision`` as in :meth:`put_doc`."""
        doc_key, index_key = self.key("doc", kind, key), self.key("doc-index", kind)
        with self.client.pipeline(transaction=True) as pipe:
            while True:
                try:
                    pipe.watch(doc_key)
                    raw = pipe.hget(doc_key, "rev")
                    current = int(raw) if raw is not None else 0
                    if expected_revision is not None and current != expected_revision:
                        raise RevisionConflict(kind, key, expected_revision, current)
                    pipe.multi()
                    pipe.delete(doc_key)
                    pipe.srem(index_key, escape_part(key))
                    deleted, _ = pipe.execute()
                    return bool(deleted)
                except redis.WatchError:
                    if expected_revision is not None:
                        raw = self.client.hget(doc_key, "rev")
                        raise RevisionConflict(kind, key, expected_revision, int(raw or 0)) from None
                    continue

    def list_docs(self, kind: str) -> list[str]:
        members = cast("set[bytes]", self.client.smembers(self.key("doc-index", kind)))
        return sorted(unescape_part(_text(m)) for m in members)

    # -- small JSON values, usually with a TTL (heartbeats) -----------------------------

    def set_with_ttl(self, key: KeyLike, value: Any, ttl_s: float) -> None:
        """Set ``ns:kv:<key parts>`` to a JSON value that expires after ``ttl_s`` seconds (ms precision)."""
        if isinstance(ttl_s, bool) or not isinstance(ttl_s, int | float) or not ttl_s > 0:
            raise InvalidArgument("ttl_s", f"{ttl_s!r}", allowed="a number of seconds > 0")
        self.client.set(
            self.key("kv", *self._parts(key)), _dumps(value, "value"), px=max(1, round(ttl_s * 1000))
        )

    def set(self, key: KeyLike, value: Any) -> None:
        """Like :meth:`set_with_ttl` without expiry."""
        self.client.set(self.key("kv", *self._parts(key)), _dumps(value, "value"))

    def get(self, key: KeyLike) -> Any | None:
        """The JSON value, or None when missing or expired."""
        raw = self.client.get(self.key("kv", *self._parts(key)))
        return json.loads(raw) if raw is not None else None

    def ttl(self, key: KeyLike) -> float | None:
        """Seconds left, or None when the key is missing or has no expiry."""
        ms = self.client.pttl(self.key("kv", *self._parts(key)))
        return ms / 1000.0 if ms >= 0 else None

    def delete(self, key: KeyLike) -> bool:
        return bool(self.client.delete(self.key("kv", *self._parts(key))))

    def list_keys(self, *prefix: str | int) -> list[tuple[str, ...]]:
        """Key parts of every live ``kv`` key under ``prefix`` (e.g. ``list_keys("heartbeat")``), sorted."""
        base = self.key("kv", *prefix)
        found = set()
        for raw in self.client.scan_iter(match=_glob_escape(base) + ":*", count=500):
            found.add(self.split_key(raw)[1:])
        return sorted(found)


def wait_for_ping(client: redis.Redis, timeout_s: float, alive: Any = None) -> None:
    """Poll PING until it answers (a server loading its AOF answers LOADING: keep waiting).

    ``alive`` (optional callable) lets a caller that owns the process stop early when it died.
    """
    deadline = time.monotonic() + timeout_s
    delay = 0.005
    last: Exception | None = None
    while time.monotonic() < deadline:
        if alive is not None and not alive():
            raise FailedPrecondition("redis-server exited during start-up")
        try:
            if client.ping():
                return
        except (redis.ConnectionError, redis.TimeoutError, redis.BusyLoadingError, FileNotFoundError) as exc:
            last = exc
        time.sleep(delay)
        delay = min(delay * 2, 0.1)
    raise FailedPrecondition(f"redis did not answer PING within {timeout_s:g} s ({last})")
