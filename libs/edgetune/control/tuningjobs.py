"""TuningJobs in the store: desired state (the spec) and observed state (the status).

The records are the library's (:mod:`edgetune.tuning.jobs`); revisioned docs in the
:class:`~edgetune.store.Store`:

- ``tuning-job-spec/<name>``: written by any replica (``SubmitTuningJob``, ``CancelTuningJob``):
  what the client wants. Create-only on submit (a second submit of the same spec is a no-op, a
  different spec under the name of a job still running is an error); a cancel sets ``cancelled``.
  A cancelled job's name can be submitted again (any spec): the doc is replaced and its
  ``generation`` goes up by one, and the leader tunes every node again for it (a node that had
  Failed after a backoff that grows with its failures: :func:`retry_backoff_s`).
- ``tuning-job-status/<name>``: the job's own part of the status (its target nodes in order, its
  conditions) and ``tuning-job-node/<name>/<node>``: one doc per target node. Written only by the
  leader's reconcile loop, fenced by its lease, so a deposed leader's late write fails instead of
  overwriting its successor's. One doc per node, so a node's change writes that node's doc alone: with
  the whole status in one doc, 1,000 nodes' changes each rewrote 1,000 nodes' records (200 CPU s of
  the leader's for one job's status writes, against ~4 s now).

Every doc carries a ``"schema"`` (:class:`~edgetune.store.records.UnknownSchema` on a newer one; a
status of schema 1, its nodes held inline, is still read, and the leader's next pass writes it out
in the new form). A job's revision is the highest of its docs' revisions (revisions come from one
namespace-wide counter, so it only grows); :meth:`TuningJobs.wait` polls it, which works on every
backend alike.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any, TypeVar

from edgetune.errors import FailedPrecondition, InvalidArgument, NotFound
from edgetune.store import DocWrite, Fence, RevisionConflict, Store
from edgetune.store.records import UnknownSchema
from edgetune.tuning.jobs import (
    Condition,
    ConditionType,
    NodePhase,
    NodeStatus,
    TuningJobSpec,
    TuningJobStatus,
    TuningJobView,
    condition,
    set_condition,
)

SPEC_KIND = "tuning-job-spec"
STATUS_KIND = "tuning-job-status"
NODE_KIND = "tuning-job-node"
#: The stored forms: a job's status doc (2: its nodes in their own docs; 1: inline) and a node's doc.
STATUS_SCHEMA, NODE_SCHEMA = 2, 1
T = TypeVar("T")
#: A Failed node of an older generation waits this long (doubling with each failure, at most the cap).
RETRY_BASE_S, RETRY_CAP_S = 1.0, 60.0


def retry_backoff_s(failures: int) -> float:
    """How long after its last failure a Failed node is tried again for a changed spec."""
    return 0.0 if failures <= 0 else min(RETRY_CAP_S, RETRY_BASE_S * 2.0 ** (failures - 1))


def node_key(name: str, node_id: str) -> str:
    """A node's status doc key (a job name is a DNS label, so the first ``/`` splits it)."""
    return f"{name}/{node_id}"


def _node_doc(node: NodeStatus) -> dict[str, Any]:
    return {**node.to_dict(), "schema": NODE_SCHEMA}


def _node_of(doc: Any) -> NodeStatus:
    if not isinstance(doc, Mapping) or doc.get("schema") != NODE_SCHEMA:
        raise UnknownSchema("NodeStatus", doc.get("schema") if isinstance(doc, Mapping) else type(doc).__name__,
                            NODE_SCHEMA)
    return NodeStatus.from_dict(doc)


class _JobDoc:
    """A job's status doc as read: its nodes' ids in order, its conditions, and (schema 1) nodes inline."""

    def __init__(self, doc: Any) -> None:
        version = doc.get("schema") if isinstance(doc, Mapping) else type(doc).__name__
        if version not in (1, STATUS_SCHEMA):
            raise UnknownSchema("TuningJobStatus", version, STATUS_SCHEMA)
        self.updated_s = float(doc["updated_s"])
        self.cancelled = bool(doc["cancelled"])
        self.conditions = tuple(Condition.from_dict(c) for c in doc.get("conditions", ()))
        self.inline = ({n["node_id"]: NodeStatus.from_dict(n) for n in doc["nodes"]} if version == 1 else {})
        self.node_ids: list[str] = list(self.inline) if version == 1 else [str(n) for n in doc["nodes"]]


def _job_status(name: str, nodes: dict[str, NodeStatus], cancelled: bool, written_s: float,
                conditions: tuple[Condition, ...]) -> TuningJobStatus:
    """The job's status from its own doc's fields and its nodes'; updated when the last of its docs was."""
    return TuningJobStatus(name, nodes, cancelled, max([written_s, *(st.updated_s for st in nodes.values())]),
                           conditions)


def _job_doc(name: str, node_ids: Sequence[str], conditions: Sequence[Condition], updated_s: float,
             cancelled: bool = False) -> dict[str, Any]:
    return {"schema": STATUS_SCHEMA, "name": name, "cancelled": cancelled, "updated_s": updated_s,
            "nodes": list(node_ids), "conditions": [c.to_dict() for c in conditions]}


class TuningJobs:
    """The jobs in a store (module docstring)."""

    def __init__(self, store: Store) -> None:
        self.store = store
        #: name -> node -> ((revision, written at), status) last read: a status is read far more often than it
        #: changes (every pass, every GetTuningJob), so a node's doc read again at its revision is not built
        #: again. The write time too: a job deleted and created again counts its revisions from 1 again.
        self._parsed: dict[str, dict[str, tuple[tuple[int, Any], NodeStatus]]] = {}
        self._parsed_lock = threading.Lock()

    def submit(self, spec: TuningJobSpec) -> TuningJobView:
        """Create the job (any replica) from a checked spec (:meth:`TuningJobSpec.check`, which the wire's
        :func:`~edgetune.proto.serde.tuning.spec_from_proto` runs). The same spec again returns the job
        as it is (a retried call)."""
        doc = {**spec.to_dict(), "created_s": time.time(), "generation": 1}
        for _ in range(10):
            try:
                self.store.put_doc(SPEC_KIND, spec.name, doc, expected_revision=0)
                return self.get(spec.name)
            except RevisionConflict:
                pass
            got = self.store.get_doc(SPEC_KIND, spec.name, missing_ok=True)
            if got is None:  # deleted meanwhile: create it
                continue
            current = TuningJobSpec.from_dict(got.doc)
            if current.cancelled:  # the name is free again: this spec replaces the cancelled one
                again = {**doc, "generation": int(got.doc.get("generation", 1)) + 1}
                try:
                    self.store.put_doc(SPEC_KIND, spec.name, again, expected_revision=got.revision)
                except RevisionConflict:
                    continue
                return self.get(spec.name)
            if not current.same_request(spec):
                raise InvalidArgument("spec.name", f"a different job {spec.name!r} exists already and is not "
                                      "cancelled", f"a new name, or `edgetune job cancel {spec.name}` and then "
                                      "submit again (a cancelled job's name takes a new spec)") from None
            return self.get(spec.name)
        raise FailedPrecondition(f"spec.name: tuning job {spec.name!r} changed by others while submitting; try again")

    def cancel(self, name: str) -> TuningJobView:
        """Mark the job cancelled (desired state, any replica): the leader stops working on it."""
        for _ in range(10):
            got = self.store.get_doc(SPEC_KIND, name, missing_ok=True)
            if got is None:
                raise NotFound(f"name: no tuning job {name!r}")
            try:
                self.store.put_doc(SPEC_KIND, name, {**got.doc, "cancelled": True}, expected_revision=got.revision)
                break
            except RevisionConflict:
                continue
        return self.get(name)

    def delete(self, name: str) -> TuningJobView:
        """Remove the job (any replica): its status, its nodes' statuses, then its spec; the leader drops what
        it held for it at its next pass, and the name is free. The job as it was, cancelled; NotFound when
        there is none."""
        view = self.get(name)
        self.store.delete_doc(STATUS_KIND, name)
        prefix = node_key(name, "")
        for key in self.store.list_docs(NODE_KIND):  # every node doc of the job, listed in its status or not
            if key.startswith(prefix):
                self.store.delete_doc(NODE_KIND, key)
        self.store.delete_doc(SPEC_KIND, name)
        with self._parsed_lock:
            self._parsed.pop(name, None)
        return replace(view, spec=replace(view.spec, cancelled=True))

    def created_s(self, name: str) -> float:
        """When the job of that name was created (which job it is: a name deleted and taken again is
        another job); NotFound when there is none."""
        got = self.store.get_doc(SPEC_KIND, name, missing_ok=True)
        if got is None:
            raise NotFound(f"name: no tuning job {name!r}")
        return float(got.doc.get("created_s", 0.0))

    def get(self, name: str, *, status: bool = True) -> TuningJobView:
        """The job (``status=False``: its spec alone, the view's status None)."""
        got = self.store.get_doc(SPEC_KIND, name, missing_ok=True)
        if got is None:
            raise NotFound(f"name: no tuning job {name!r}")
        spec = TuningJobSpec.from_dict(got.doc)
        job_status, st_rev = self.status(name) if status else (None, 0)
        return TuningJobView(spec, job_status, max(got.revision, st_rev), st_rev, float(got.doc.get("created_s", 0.0)),
                             int(got.doc.get("generation", 1)))

    def names(self) -> list[str]:
        return sorted(self.store.list_docs(SPEC_KIND))

    def list(self, *, statuses: bool = True) -> list[TuningJobView]:
        """Every job; ``statuses=False``: their specs alone (each view's status None), for a caller that
        reads a job's status itself (the leader's pass: a 1,000-node status read once, not twice)."""
        out = []
        for name in self.names():
            try:
                out.append(self.get(name, status=statuses))
            except NotFound:  # deleted between the listing and the read
                continue
        return out

    def status(self, name: str) -> tuple[TuningJobStatus | None, int]:
        """The job's status as stored (None before the first write) and its revision (0 then): the highest
        of its docs'."""
        read = self.read(name)
        if read is None:
            return None, 0
        job, revision, nodes = read
        statuses = {n: st for n, (st, _) in nodes.items()}
        return (_job_status(name, statuses, job.cancelled, job.updated_s, job.conditions),
                max([revision, *(rev for _, rev in nodes.values())]))

    def read(self, name: str) -> tuple[_JobDoc, int, dict[str, tuple[NodeStatus, int]]] | None:
        """The job's status doc, its revision, and each listed node's status with its doc's revision (0: held
        inline in a schema-1 status, no doc of its own yet), in the doc's order; None before the first write."""
        st = self.store.get_doc(STATUS_KIND, name, missing_ok=True)
        if st is None:
            with self._parsed_lock:
                self._parsed.pop(name, None)
            return None
        job = _JobDoc(st.doc)
        if job.inline:
            return job, st.revision, {n: (node, 0) for n, node in job.inline.items()}
        with self._parsed_lock:
            held = self._parsed.get(name, {})
        parsed: dict[str, tuple[tuple[int, Any], NodeStatus]] = {}
        nodes: dict[str, tuple[NodeStatus, int]] = {}
        for node_id, got in zip(job.node_ids, self.store.get_docs(NODE_KIND, [node_key(name, n) for n in job.node_ids]),
                                strict=True):
            if got is None:  # listed, and deleted since (the job is being deleted)
                continue
            which = (got.revision, got.doc.get("updated_s") if isinstance(got.doc, dict) else None)
            old = held.get(node_id)
            node = old[1] if old is not None and old[0] == which else _node_of(got.doc)
            parsed[node_id] = (which, node)
            nodes[node_id] = (node, got.revision)
        with self._parsed_lock:
            self._parsed[name] = parsed
        return job, st.revision, nodes

    def node(self, name: str, node_id: str) -> tuple[NodeStatus | None, int]:
        """One node's status as stored and its doc's revision ((None, 0) when it has none)."""
        got = self.store.get_doc(NODE_KIND, node_key(name, node_id), missing_ok=True)
        return (None, 0) if got is None else (_node_of(got.doc), got.revision)

    def put_node(self, name: str, node: NodeStatus, fence: Fence | None, expected_revision: int | None = None) -> int:
        """The leader's write of one node's status (fenced: a deposed leader's write raises LeaseLost); with
        ``expected_revision`` only over that revision of its doc (else RevisionConflict)."""
        revision = self.store.put_doc(NODE_KIND, node_key(name, node.node_id), _node_doc(node),
                                      expected_revision=expected_revision, fence=fence)
        with self._parsed_lock:  # what was written is what the next read of that revision gives
            self._parsed.setdefault(name, {})[node.node_id] = ((revision, node.updated_s), node)
        return revision

    def put_job(self, name: str, node_ids: Sequence[str], conditions: Sequence[Condition], fence: Fence | None,
                expected_revision: int | None = None) -> int:
        """The leader's write of the job's own part of its status (its nodes' ids in order, its conditions)."""
        return self.store.put_doc(STATUS_KIND, name, _job_doc(name, node_ids, conditions, time.time()),
                                  expected_revision=expected_revision, fence=fence)

    def wait(self, name: str, after_revision: int, *, timeout_s: float,
             should_stop: Callable[[], bool] = lambda: False, poll_s: float = 0.1) -> TuningJobView | None:
        """The job once its revision is above ``after_revision``; None after ``timeout_s`` or on stop."""
        deadline = time.monotonic() + timeout_s
        while True:
            view = self.get(name)
            if view.revision > after_revision:
                return view
            if should_stop() or time.monotonic() >= deadline:
                return None
            time.sleep(poll_s)


#: Tries of a status change whose write lost a race with another writer (re-read, re-applied).
STATUS_WRITE_TRIES = 5


class JobGone(NotFound):
    """The job a status writer wrote for was deleted (and perhaps created again under its name)."""


class StatusWriter:
    """One job's status updates from the leader's node workers and its passes.

    Each node's status is its own doc, so workers of different nodes never wait on each other; one
    node's updates are serialised. The writer keeps each node's status as it last wrote it and writes over
    that revision only (compare-and-set): a doc changed by anyone else is read again and the change
    re-applied. Each :meth:`update` returns once its change is stored.
    """

    def __init__(self, jobs: TuningJobs, name: str, fence: Callable[[], Fence]) -> None:
        self.jobs, self.name, self.fence = jobs, name, fence
        self._lock = threading.Lock()  # one ensure at a time (the job's own doc)
        self._locks_lock = threading.Lock()
        self._node_locks: dict[str, threading.Lock] = {}
        #: node -> its status as last written or read, and its doc's revision (0: none yet)
        self._known: dict[str, tuple[NodeStatus, int]] = {}
        #: The creation time of the job this writer writes for (read first): a job deleted and created
        #: again under the same name is another job, which a late update of the old one must not touch.
        self._created_s: float | None = None

    def _check_job(self) -> None:
        try:
            created_s = self.jobs.created_s(self.name)
        except NotFound as exc:
            raise JobGone(str(exc)) from exc
        if self._created_s is None:
            self._created_s = created_s
        elif created_s != self._created_s:
            raise JobGone(f"name: tuning job {self.name!r} was deleted (the job of that name now is a new one)")

    def _node_lock(self, node_id: str) -> threading.Lock:
        with self._locks_lock:
            return self._node_locks.setdefault(node_id, threading.Lock())

    def _node(self, node_id: str) -> tuple[NodeStatus, int]:
        known = self._known.get(node_id)
        if known is None:
            self._check_job()
            node, revision = self.jobs.node(self.name, node_id)
            known = self._known[node_id] = (node or NodeStatus(node_id), revision)
        return known

    def _put(self, node: NodeStatus, expected_revision: int) -> NodeStatus:
        try:
            self._known[node.node_id] = (node, self.jobs.put_node(self.name, node, self.fence(), expected_revision))
        except BaseException:  # noqa: BLE001 - RevisionConflict, LeaseLost ...: what is stored is read again
            self._known.pop(node.node_id, None)
            raise
        return node

    def update(self, node_id: str, change: Callable[[NodeStatus], NodeStatus]) -> NodeStatus:
        with self._node_lock(node_id):
            for attempt in range(STATUS_WRITE_TRIES):
                old, revision = self._node(node_id)
                node = _counted(old, change(old))
                if revision and node == old:  # nothing to write (a read, a condition already so)
                    return old
                try:
                    return self._put(node, revision)
                except RevisionConflict:  # written by another: read it again, apply the change again
                    if attempt == STATUS_WRITE_TRIES - 1:
                        raise
            raise AssertionError("unreachable")

    def update_with(self, node_id: str, change: Callable[[NodeStatus], NodeStatus],
                    write: Callable[[DocWrite], T]) -> T:
        """As :meth:`update`, but the node's status doc is handed to ``write``, a publish of the node's config
        carrying it in ``docs=``: the two land in one atomic step, and the store writes the revision
        it gives that config into the node's ``config_revision``. Compare-and-set on the node's status
        revision, so nothing written meanwhile is lost (RevisionConflict instead)."""
        with self._node_lock(node_id):
            old, revision = self._node(node_id)
            node = _counted(old, change(old))
            try:
                return write(DocWrite(NODE_KIND, node_key(self.name, node_id), _node_doc(node),
                                      expected_revision=revision, config_revisions=((("config_revision",), node_id),)))
            finally:  # the doc written here gets a revision (and a config revision) this writer does not see
                self._known.pop(node_id, None)

    def ensure(self, node_ids: Sequence[str], devices: Mapping[str, str], generation: int = 1,
               no_match: tuple[str, str] | None = None) -> TuningJobStatus:
        """Every target node in the status (Pending when new), each node of an older spec generation
        Pending again (a Failed one once its backoff passed: :func:`retry_backoff_s`), and the job's
        ``NoMatchingNodes`` condition set from ``no_match`` ((reason, message), None: every target
        matched); the status as stored (written only where something changed)."""
        with self._lock:
            for attempt in range(STATUS_WRITE_TRIES):
                try:
                    return self._ensure(node_ids, devices, generation, no_match)
                except RevisionConflict:  # written by another meanwhile: read again
                    if attempt == STATUS_WRITE_TRIES - 1:
                        raise
            raise AssertionError("unreachable")

    def _ensure(self, node_ids: Sequence[str], devices: Mapping[str, str], generation: int,
                no_match: tuple[str, str] | None) -> TuningJobStatus:
        self._check_job()
        read = self.jobs.read(self.name)
        job, job_revision, stored = read if read is not None else (None, 0, {})
        now = time.time()
        nodes = {n: st for n, (st, _) in stored.items()}
        for n in node_ids:
            if n not in nodes:
                nodes[n] = self._create(NodeStatus(n, devices.get(n, ""), started_s=now, updated_s=now,
                                                   generation=generation))
        for n, (st, revision) in stored.items():
            if not revision:  # held inline (a schema-1 status): its own doc from now on
                nodes[n] = st = self._write(st, 0)
            if st.generation >= generation:
                continue
            if st.phase == NodePhase.FAILED and now - st.updated_s < retry_backoff_s(st.failures):
                continue
            nodes[n] = self._write(_restarted(st, generation, now), self._known[n][1] if not revision else revision)
        conditions = job.conditions if job is not None else ()
        if no_match is not None or condition(conditions, ConditionType.NO_MATCHING_NODES) is not None:
            conditions = set_condition(conditions, ConditionType.NO_MATCHING_NODES, no_match is not None,
                                       *(no_match or ("AllMatched", "")), now_s=now)
        if job is None or job.inline or list(nodes) != job.node_ids or conditions != job.conditions:
            self.jobs.put_job(self.name, list(nodes), conditions, self.fence(), expected_revision=job_revision)
            updated_s = now
        else:
            updated_s = job.updated_s
        return _job_status(self.name, nodes, job.cancelled if job is not None else False, updated_s, conditions)

    def _write(self, node: NodeStatus, expected_revision: int) -> NodeStatus:
        with self._node_lock(node.node_id):
            return self._put(node, expected_revision)

    def _create(self, node: NodeStatus) -> NodeStatus:
        """A new target's doc; the one stored when there is one already (an ensure whose job doc write
        lost a race created it, and is tried again)."""
        try:
            return self._write(node, 0)
        except RevisionConflict:
            stored, revision = self.jobs.node(self.name, node.node_id)
            if stored is None:
                raise
            self._known[node.node_id] = (stored, revision)
            return stored


def _restarted(st: NodeStatus, generation: int, now: float) -> NodeStatus:
    """A node of an older generation, Pending for the new spec (its events and failure count kept)."""
    return replace(st.with_event(f"the job was submitted again (generation {generation}): tuning anew",
                                 event_reason="SpecChanged", now_s=now),
                   phase=NodePhase.PENDING, reason="", generation=generation, drift_epoch=0, conditions=(),
                   config_revision=0)


def _counted(old: NodeStatus, new: NodeStatus) -> NodeStatus:
    """``new`` with its failures counted: one more each time the node goes Failed."""
    if new.phase == NodePhase.FAILED and old.phase != NodePhase.FAILED:
        return replace(new, failures=new.failures + 1)
    return new

