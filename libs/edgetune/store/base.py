"""The Store protocol: everything the control plane keeps, whatever the backend.

:class:`Store` is a ``typing.Protocol``. Its backends are :class:`~.memory.MemoryStore`
(plain Python, for unit tests), :class:`~.embedded.EmbeddedStore` (a private redis-server,
the default on one machine) and :class:`~.redis_store.RedisStore` (a Redis server by URL, a
cluster). ``tests/unit/test_store_contract.py`` runs one suite against all three; nothing
outside this package talks to Redis.

What it holds (records in :mod:`.records`):

- measurements, idempotent by id, indexed by (device model, workload, role[, node]);
- versioned blobs (models): ``put_blob`` returns 1, 2, ...; the latest is readable;
- JSON docs with a namespace-wide revision and compare-and-set (``expected_revision``),
  optionally fenced by a lease (only the leader writes);
- small JSON values with an optional TTL (heartbeats);
- per-node job queues: idempotent submit, at-least-once delivery to consumers, ack,
  re-delivery of what a dead consumer held, dead letters;
- per-node configs with per-node revisions, a change only when the digest differs,
  optionally fenced by a leader lease, and a blocking read of newer revisions; a config
  *epoch* (a millisecond timestamp set by the first publish, and again after the store lost
  its data) so that (epoch, revision) never goes backwards; a change feed of which nodes'
  configs changed (one reader per process serves every watch);
- atomic multi-key writes: a publish carries the docs, values and round it goes with
  (a round's configs and ``round:last``, a budget and the configs planned for it) and
  writes all of them or none;
- leases (leader election) with a TTL: acquire, renew and release by the holder only;
- the last applied round (re-planning).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, NamedTuple, Protocol, runtime_checkable
from urllib.parse import urlsplit, urlunsplit

from edgetune.errors import FailedPrecondition, InvalidArgument

from .records import ROLES, AuditRecord, DeadJob, Job, MeasurementRecord, NodeConfig, Published, RoundState

DEFAULT_NAMESPACE = "edgetune"

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


class LeaseLost(FailedPrecondition):
    """A write fenced by a lease found the lease held by someone else (``holder``; None: nobody)."""

    def __init__(self, name: str, holder: str | None) -> None:
        self.name, self.holder = name, holder
        super().__init__(f"lease {name!r} is not held by the writer (holder: {holder or 'nobody'})")


class VersionedDoc(NamedTuple):
    doc: Any
    revision: int


class BlobRef(NamedTuple):
    key_parts: tuple[str, ...]
    latest_version: int


#: Where a doc holds a config's revision: keys into nested objects, indexes into lists.
DocPath = tuple[str | int, ...]


class DocWrite(NamedTuple):
    """A doc written with a publish (``Store.publish_configs(docs=...)``), compare-and-set as ``put_doc``.

    ``config_revisions``: ``(path, node_id)`` pairs; the store writes the revision this same
    publish gives ``node_id``'s config into the doc at ``path`` (an int), in the same atomic step,
    so the doc never says a revision other than the one published (another writer may publish
    that node's config in between a read and this write)."""

    kind: str
    key: str
    doc: Any
    expected_revision: int | None = None
    config_revisions: tuple[tuple[DocPath, str], ...] = ()


class ConfigChanges(NamedTuple):
    """What ``Store.wait_config_changes`` saw: read on from ``cursor``.

    ``everything``: the feed cannot say what changed (the first read, or the feed was lost
    with the store's data): every watcher re-reads its node.
    """

    cursor: str
    node_ids: tuple[str, ...]
    everything: bool = False


class Fence(NamedTuple):
    """Write only while lease ``name`` is held by ``holder`` (checked atomically with the write)."""

    name: str
    holder: str


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


def key_parts(key: KeyLike) -> tuple[str | int, ...]:
    """A key given as one part or a sequence of parts, as a checked tuple of parts."""
    parts = (key,) if isinstance(key, str | int) else tuple(key)
    if not parts:
        raise InvalidArgument("key", "at least one key part is needed")
    for p in parts:
        escape_part(p)
    return parts


#: :func:`key_parts` under a name that does not shadow a ``key_parts`` argument.
parts_of = key_parts


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


def check_ttl(ttl_s: float) -> float:
    if isinstance(ttl_s, bool) or not isinstance(ttl_s, int | float) or not ttl_s > 0:
        raise InvalidArgument("ttl_s", f"{ttl_s!r}", allowed="a number of seconds > 0")
    return float(ttl_s)


def check_expected_revision(expected_revision: int | None) -> None:
    if expected_revision is not None and (
        isinstance(expected_revision, bool) or not isinstance(expected_revision, int) or expected_revision < 0
    ):
        raise InvalidArgument("expected_revision", f"{expected_revision!r}",
                              allowed="None, 0 (create) or a revision")


def check_version(version: int | None) -> None:
    if version is not None and (isinstance(version, bool) or not isinstance(version, int) or version < 1):
        raise InvalidArgument("version", f"{version!r}", allowed="an int >= 1, or None for the latest")


def stamp_config_revisions(write: DocWrite, node_ids: Sequence[str], value_of: Callable[[int], Any]) -> Any:
    """A copy of ``write.doc`` with ``value_of(i)`` at each ``config_revisions`` path, ``i`` the
    index in ``node_ids`` (the publish's configs) of the node named (its last, the one that stays);
    the input is checked first (every node published here, every path into the doc), so a bad
    stamp writes nothing."""
    doc = write.doc
    last = {n: i for i, n in enumerate(node_ids)}
    for path, node_id in write.config_revisions:
        if node_id not in last:
            raise InvalidArgument("docs.config_revisions", f"node {node_id!r} has no config in this publish",
                                  "a node whose config the same publish writes")
        if not path:
            raise InvalidArgument("docs.config_revisions", "an empty path", "a path into the doc")
        doc = _copy_along(doc, path, value_of(last[node_id]))
    return doc


def _copy_along(doc: Any, path: DocPath, value: Any) -> Any:
    """``doc`` with ``value`` at ``path``, copying only the containers on the way."""
    head, rest = path[0], path[1:]
    if isinstance(doc, dict) and isinstance(head, str) and (not rest or head in doc):
        return {**doc, head: _copy_along(doc[head], rest, value) if rest else value}
    if isinstance(doc, list) and isinstance(head, int) and not isinstance(head, bool) and 0 <= head < len(doc):
        return [*doc[:head], _copy_along(doc[head], rest, value) if rest else value, *doc[head + 1:]]
    raise InvalidArgument("docs.config_revisions", f"path part {head!r} is not in the doc",
                          "object keys and list indexes that exist (the last key may be new)")


def check_node_id(node_id: str) -> str:
    if not isinstance(node_id, str) or not node_id:
        raise InvalidArgument("node_id", f"{node_id!r} is not a node id", "a non-empty string")
    return node_id


def check_role(role: str) -> None:
    if role not in ROLES:
        raise InvalidArgument("role", f"{role!r}", allowed=", ".join(ROLES))


@runtime_checkable
class Store(Protocol):
    """The state store (see the module docstring). Every backend passes the contract suite."""

    #: "memory", "embedded" or "redis".
    backend: str
    namespace: str
    url: str

    # -- health -----------------------------------------------------------------------------
    def ping(self) -> bool: ...
    def info(self) -> dict[str, Any]: ...
    def close(self) -> None: ...
    def __enter__(self) -> Store: ...
    def __exit__(self, *exc: object) -> None: ...

    # -- measurements -----------------------------------------------------------------------
    def put_measurement(self, m: MeasurementRecord) -> bool:
        """Store one; True if new, False if its ``id`` was stored already (nothing changes)."""
        ...

    def put_measurements(self, ms: Iterable[MeasurementRecord]) -> int:
        """Store many (one round trip); how many were new."""
        ...

    def get_measurement(self, measurement_id: str) -> MeasurementRecord | None: ...

    def get_measurements_by_id(self, measurement_ids: Sequence[str]) -> list[MeasurementRecord | None]:
        """Each id's measurement (None where there is none), in the order asked (one round trip)."""
        ...

    def get_measurements(self, device_model: str, workload: str, role: str,
                         node_id: str | None = None) -> list[MeasurementRecord]:
        """Of (device model, workload, role), optionally of one node, in write order."""
        ...

    def count_measurements(self, device_model: str, workload: str, role: str,
                           node_id: str | None = None) -> int: ...

    # -- versioned blobs --------------------------------------------------------------------
    def put_blob(self, kind: str, key_parts: KeyLike, data: bytes, meta: dict[str, Any] | None = None) -> int:
        """A new version (1, 2, ...) of the blob, written with its JSON ``meta``."""
        ...

    def get_blob(self, kind: str, key_parts: KeyLike,
                 version: int | None = None) -> tuple[bytes, dict[str, Any], int]:
        """``(data, meta, version)``; the latest when ``version`` is None. NotFound when missing."""
        ...

    def latest_blob_version(self, kind: str, key_parts: KeyLike) -> int | None: ...

    def list_blobs(self, kind: str) -> list[BlobRef]:
        """Every blob of a kind with its latest version, sorted by key parts."""
        ...

    # -- JSON docs with compare-and-set -----------------------------------------------------
    def put_doc(self, kind: str, key: str, doc: Any, expected_revision: int | None = None, *,
                fence: Fence | None = None) -> int:
        """Write; the new revision. ``expected_revision``: None unconditional, 0 create only,
        n only if the current revision is n; else :class:`RevisionConflict`. Revisions come
        from one namespace-wide counter, so a re-created doc never reuses one. With ``fence``
        only while the lease is the writer's, checked atomically with the write, else
        :class:`LeaseLost` (a leader's reconcile writes)."""
        ...

    def get_doc(self, kind: str, key: str, *, missing_ok: bool = False) -> VersionedDoc | None: ...

    def get_docs(self, kind: str, keys: Sequence[str]) -> list[VersionedDoc | None]:
        """The docs of ``keys`` in order (None where missing), in one round trip."""
        ...

    def delete_doc(self, kind: str, key: str, expected_revision: int | None = None, *,
                   fence: Fence | None = None) -> bool:
        """Delete; False when missing. ``expected_revision`` and ``fence`` as in :meth:`put_doc`."""
        ...
    def list_docs(self, kind: str) -> list[str]: ...

    # -- small JSON values, optionally with a TTL -------------------------------------------
    def set(self, key: KeyLike, value: Any) -> None: ...
    def set_with_ttl(self, key: KeyLike, value: Any, ttl_s: float) -> None: ...

    def set_many(self, items: Sequence[tuple[KeyLike, Any, float | None]]) -> None:
        """``(key, value, ttl_s or None)`` each, written together (atomically)."""
        ...

    def get(self, key: KeyLike) -> Any | None:
        """The value, or None when missing or expired."""
        ...

    def get_many(self, keys: Sequence[KeyLike]) -> list[Any | None]: ...

    def ttl(self, key: KeyLike) -> float | None:
        """Seconds left; None when missing or without expiry."""
        ...

    def delete(self, key: KeyLike) -> bool: ...

    def list_keys(self, *prefix: str | int) -> list[tuple[str, ...]]:
        """Key parts of every live key under ``prefix``, sorted."""
        ...

    # -- job queues (one per node, at least once) -------------------------------------------
    def submit_job(self, node_id: str, job_id: str, payload: dict[str, Any], *, max_len: int) -> str:
        """Queue a job; the same ``job_id`` again queues nothing. Returns its entry id."""
        ...

    def read_jobs(self, node_id: str, consumer: str, *, count: int, block_ms: int) -> list[Job]:
        """Up to ``count`` never-delivered jobs for ``consumer``, waiting up to ``block_ms`` (0: not)."""
        ...

    def reclaim_jobs(self, node_id: str, consumer: str, *, idle_ms: int, count: int) -> list[Job]:
        """Jobs delivered to any consumer and not acknowledged for ``idle_ms``, handed to
        ``consumer``; ``deliveries`` counts this one."""
        ...

    def ack_job(self, node_id: str, entry_id: str) -> bool:
        """Done; False when it was acknowledged already."""
        ...

    def bury_job(self, job: Job) -> None:
        """Move a delivered job to the node's dead letters (and acknowledge it), atomically."""
        ...

    def pending_jobs(self, node_id: str) -> int:
        """Delivered, not acknowledged."""
        ...

    def job_backlog(self, node_id: str) -> int:
        """Not delivered yet."""
        ...

    def dead_jobs(self, node_id: str) -> list[DeadJob]: ...

    # -- node configs -----------------------------------------------------------------------
    def publish_configs(self, configs: Sequence[NodeConfig], *, fence: Fence | None = None,
                        log_len: int = 100, docs: Sequence[DocWrite] = (),
                        values: Sequence[tuple[KeyLike, Any, float | None]] = (),
                        round_state: RoundState | None = None) -> list[Published]:
        """Each node's config becomes current with revision+1 when its digest changed, and
        ``docs`` (compare-and-set; each doc's ``config_revisions`` get the revisions written
        here), ``values`` (``set_many``'s items) and ``round_state`` (``put_round``) are written
        with them: all in one atomic step or nothing. Returns each config's revision as written
        (the caller never predicts one). With
        ``fence``: only while the lease is held, else :class:`LeaseLost`; a doc at another
        revision than expected: :class:`RevisionConflict`. The first publish into an empty
        store sets the config epoch."""
        ...

    def get_config(self, node_id: str) -> NodeConfig | None: ...

    def get_configs(self, node_ids: Sequence[str]) -> dict[str, NodeConfig]:
        """The current config of each of ``node_ids`` that has one (with the store's epoch), all read in
        one consistent step: what the config push's hub reads for every node a publish changed."""
        ...

    def config_revisions(self, node_ids: Sequence[str]) -> dict[str, int]: ...

    def config_epoch(self) -> int:
        """The store's config epoch (0: nothing published since the store was empty)."""
        ...

    def wait_configs(self, node_id: str, after_revision: int, *, block_ms: int,
                     epoch: int = 0) -> list[NodeConfig]:
        """The configs newer than ``after_revision``, oldest first (the latest always; older
        ones while the log still holds them), waiting up to ``block_ms`` for one. ``epoch``:
        the epoch ``after_revision`` belongs to; when the store's differs (it lost its data
        since) the current config is newer whatever its revision. 0: the current epoch."""
        ...

    def wait_config_changes(self, cursor: str, *, block_ms: int) -> ConfigChanges:
        """Nodes whose config changed after ``cursor``, waiting up to ``block_ms`` for one;
        ``cursor`` "" starts now (``everything``: re-read all)."""
        ...

    # -- leases -----------------------------------------------------------------------------
    def acquire_lease(self, name: str, holder: str, ttl_ms: int) -> bool:
        """Take the lease if nobody holds it."""
        ...

    def renew_lease(self, name: str, holder: str, ttl_ms: int) -> bool:
        """Extend it, only while ``holder`` holds it."""
        ...

    def release_lease(self, name: str, holder: str) -> bool: ...
    def lease_holder(self, name: str) -> str | None: ...

    def lease_ttl_ms(self, name: str) -> int | None:
        """Milliseconds left; None when nobody holds it."""
        ...

    # -- the last applied round -------------------------------------------------------------
    def put_round(self, state: RoundState) -> None: ...
    def get_round(self) -> RoundState | None: ...

    def set_round_members(self, members: Sequence[str]) -> bool:
        """Record the round's plannable members; False when there is no round."""
        ...

    # -- audit ------------------------------------------------------------------------------
    def append_audit(self, record: AuditRecord, *, max_len: int) -> None:
        """Append to the audit stream, keeping its newest ``max_len`` records."""
        ...

    def audit_records(self, count: int) -> list[AuditRecord]:
        """The newest ``count`` audit records, oldest first."""
        ...

    # -- incarnation ------------------------------------------------------------------------
    def incarnation(self) -> str:
        """The id of the store's data since it was last empty: ``<random hex>@<ms it began>``. A store
        that lost its data (Redis restarted without persistence) answers a new one, so what was
        seen under the old one and is missing now was lost, not deleted (:mod:`.lost`)."""
        ...
