"""TuningJobs in the store: desired state (the spec) and observed state (the status).

The records are the library's (:mod:`edgetune.tuning.jobs`); two revisioned docs per job in the
:class:`~edgetune.store.Store`:

- ``tuning-job-spec/<name>``: written by any replica (``SubmitTuningJob``, ``CancelTuningJob``):
  what the client wants. Create-only on submit (a second submit of the same spec is a no-op, a
  different spec under the name of a job still running is an error); a cancel sets ``cancelled``.
  A cancelled job's name can be submitted again (any spec): the doc is replaced and its
  ``generation`` goes up by one, and the leader tunes every node again for it (a node that had
  Failed after a backoff that grows with its failures: :func:`retry_backoff_s`).
- ``tuning-job-status/<name>``: written only by the leader's reconcile loop, fenced by its lease,
  so a deposed leader's late write fails instead of overwriting its successor's.

Both docs carry ``"schema": 1`` (:class:`~edgetune.store.records.UnknownSchema` on
a newer one). A job's revision is the higher of the two docs' revisions (revisions come from
one namespace-wide counter, so it only grows); :meth:`TuningJobs.wait` polls it, which works on
every backend alike.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import replace
from typing import Any, TypeVar

from edgetune.errors import FailedPrecondition, InvalidArgument, NotFound
from edgetune.store import DocWrite, Fence, RevisionConflict, Store
from edgetune.tuning.jobs import (
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
T = TypeVar("T")
#: A Failed node of an older generation waits this long (doubling with each failure, at most the cap).
RETRY_BASE_S, RETRY_CAP_S = 1.0, 60.0


def retry_backoff_s(failures: int) -> float:
    """How long after its last failure a Failed node is tried again for a changed spec."""
    return 0.0 if failures <= 0 else min(RETRY_CAP_S, RETRY_BASE_S * 2.0 ** (failures - 1))


class TuningJobs:
    """The jobs in a store (module docstring)."""

    def __init__(self, store: Store) -> None:
        self.store = store
        #: name -> ((revision, written at), status) last read: a status is read far more often than it changes
        #: (every pass, every GetTuningJob) and building 1,000 nodes' records takes ~0.2 s, so a write read again
        #: is reused. The write time too: a job deleted and created again counts its revisions from 1 again.
        self._parsed: dict[str, tuple[tuple[int, Any], TuningJobStatus]] = {}
        self._parsed_lock = threading.Lock()

    def _status_of(self, name: str, doc: Any, revision: int) -> TuningJobStatus:
        which = (revision, doc.get("updated_s") if isinstance(doc, dict) else None)
        with self._parsed_lock:
            held = self._parsed.get(name)
        if held is not None and held[0] == which:
            return held[1]
        status = TuningJobStatus.from_dict(doc)
        with self._parsed_lock:
            self._parsed[name] = (which, status)
        return status

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
        """Remove the job (any replica): its status, then its spec; the leader drops what it held for it at
        its next pass, and the name is free. The job as it was, cancelled; NotFound when there is none."""
        view = self.get(name)
        self.store.delete_doc(STATUS_KIND, name)
        self.store.delete_doc(SPEC_KIND, name)
        return replace(view, spec=replace(view.spec, cancelled=True))

    def get(self, name: str) -> TuningJobView:
        got = self.store.get_doc(SPEC_KIND, name, missing_ok=True)
        if got is None:
            raise NotFound(f"name: no tuning job {name!r}")
        spec = TuningJobSpec.from_dict(got.doc)
        st = self.store.get_doc(STATUS_KIND, name, missing_ok=True)
        status = self._status_of(name, st.doc, st.revision) if st is not None else None
        st_rev = st.revision if st is not None else 0
        return TuningJobView(spec, status, max(got.revision, st_rev), st_rev, float(got.doc.get("created_s", 0.0)),
                             int(got.doc.get("generation", 1)))

    def names(self) -> list[str]:
        return sorted(self.store.list_docs(SPEC_KIND))

    def list(self) -> list[TuningJobView]:
        out = []
        for name in self.names():
            try:
                out.append(self.get(name))
            except NotFound:  # deleted between the listing and the read
                continue
        return out

    def put_status(self, status: TuningJobStatus, fence: Fence | None, expected_revision: int | None = None) -> int:
        """The leader's write (fenced: a deposed leader's write raises LeaseLost); with ``expected_revision``
        only over that revision of the status (else RevisionConflict)."""
        revision = self.store.put_doc(STATUS_KIND, status.name, status.to_dict(), expected_revision=expected_revision,
                                      fence=fence)
        with self._parsed_lock:  # what was written is what the next read of that revision gives
            self._parsed[status.name] = ((revision, status.updated_s), status)
        return revision

    def status(self, name: str) -> tuple[TuningJobStatus | None, int]:
        """The job's status as stored (None before the first write) and its revision (0 then)."""
        st = self.store.get_doc(STATUS_KIND, name, missing_ok=True)
        return (self._status_of(name, st.doc, st.revision), st.revision) if st is not None else (None, 0)

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


#: Tries of a group of status changes whose write lost a race with another writer (re-read, re-applied).
STATUS_WRITE_TRIES = 5


class JobGone(NotFound):
    """The job a status writer wrote for was deleted (and perhaps created again under its name)."""


class StatusWriter:
    """Serialises one job's status updates from the leader's node workers (one doc per job).

    Group commit: the changes the workers make while a write is under way are applied together and
    written in the next one, so a thousand nodes' events cost a few writes of the job's doc rather than
    one read and one write each. The writer keeps the status it last wrote and writes over that revision
    only (compare-and-set): a doc changed by anyone else is read again and the group's changes re-applied.
    Each :meth:`update` returns once its change is stored, as before.
    """

    def __init__(self, jobs: TuningJobs, name: str, fence: Callable[[], Fence]) -> None:
        self.jobs, self.name, self.fence = jobs, name, fence
        self._lock = threading.Lock()  # one write at a time
        self._queue_lock = threading.Lock()
        self._queue: list[tuple[str, Callable[[NodeStatus], NodeStatus], Future[NodeStatus]]] = []
        self._known: tuple[TuningJobStatus, int] | None = None  # the status as last written or read, its revision
        #: The creation time of the job this writer writes for (read first): a job deleted and created
        #: again under the same name is another job, which a late update of the old one must not touch.
        self._created_s: float | None = None

    def _current(self) -> tuple[TuningJobStatus, int]:
        if self._known is None:
            try:
                created_s = self.jobs.get(self.name).created_s
            except NotFound as exc:
                raise JobGone(str(exc)) from exc
            if self._created_s is None:
                self._created_s = created_s
            elif created_s != self._created_s:
                raise JobGone(f"name: tuning job {self.name!r} was deleted (the job of that name now is a new one)")
            status, revision = self.jobs.status(self.name)
            self._known = (status or TuningJobStatus(self.name), revision)
        return self._known

    def update(self, node_id: str, change: Callable[[NodeStatus], NodeStatus]) -> NodeStatus:
        mine: Future[NodeStatus] = Future()
        with self._queue_lock:
            self._queue.append((node_id, change, mine))
        with self._lock:
            if not mine.done():  # not written by the write that held the lock meanwhile
                self._write_queued()
        return mine.result()

    def _write_queued(self) -> None:
        with self._queue_lock:
            group, self._queue = self._queue, []
        for attempt in range(STATUS_WRITE_TRIES):
            try:
                status, revision = self._current()
                nodes = dict(status.nodes)
                done: list[tuple[Future[NodeStatus], NodeStatus]] = []
                for node_id, change, fut in group:
                    old = nodes.get(node_id) or NodeStatus(node_id)
                    node = _counted(old, change(old))
                    nodes[node_id] = node
                    done.append((fut, node))
                if nodes != status.nodes or not revision:  # else nothing to write (reads, conditions already so)
                    new = replace(status, nodes=nodes, updated_s=time.time())
                    self._known = (new, self.jobs.put_status(new, self.fence(), expected_revision=revision))
                for fut, node in done:
                    fut.set_result(node)
                return
            except RevisionConflict as exc:  # written by another: read it again, apply the group again
                self._known = None
                if attempt == STATUS_WRITE_TRIES - 1:
                    _fail(group, exc)
            except BaseException as exc:  # noqa: BLE001 - every waiting worker gets the error (LeaseLost ...)
                self._known = None
                _fail(group, exc)
                return

    def update_with(self, node_id: str, change: Callable[[NodeStatus], NodeStatus],
                    write: Callable[[DocWrite], T]) -> T:
        """As :meth:`update`, but the status doc is handed to ``write``, a publish of the node's config
        carrying it in ``docs=``: the two land in one atomic step, and the store writes the revision
        it gives that config into the node's ``config_revision``. Compare-and-set on the status
        revision read here, so nothing written meanwhile is lost (RevisionConflict instead)."""
        with self._lock:
            self._known = None  # read afresh: the doc written here gets a revision this writer does not see
            view = self.jobs.get(self.name)
            status = view.status or TuningJobStatus(self.name)
            old = status.nodes.get(node_id) or NodeStatus(node_id)
            node = _counted(old, change(old))
            nodes = {**status.nodes, node_id: node}
            doc = replace(status, nodes=nodes, updated_s=time.time()).to_dict()
            at = (("nodes", list(nodes).index(node_id), "config_revision"), node_id)
            return write(DocWrite(STATUS_KIND, self.name, doc, expected_revision=view.status_revision,
                                  config_revisions=(at,)))

    def ensure(self, node_ids: Sequence[str], devices: Mapping[str, str], generation: int = 1,
               no_match: tuple[str, str] | None = None) -> TuningJobStatus:
        """Every target node in the status (Pending when new), each node of an older spec generation
        Pending again (a Failed one once its backoff passed: :func:`retry_backoff_s`), and the job's
        ``NoMatchingNodes`` condition set from ``no_match`` ((reason, message), None: every target
        matched); the status as stored (written only when something changed)."""
        with self._lock:
            for attempt in range(STATUS_WRITE_TRIES):
                status, revision = self._current()
                now = time.time()
                nodes = dict(status.nodes)
                for n in node_ids:
                    if n not in nodes:
                        nodes[n] = NodeStatus(n, devices.get(n, ""), started_s=now, updated_s=now,
                                              generation=generation)
                for n, st in status.nodes.items():
                    if st.generation >= generation:
                        continue
                    if st.phase == NodePhase.FAILED and now - st.updated_s < retry_backoff_s(st.failures):
                        continue
                    nodes[n] = _restarted(st, generation, now)
                conditions = status.conditions
                if no_match is not None or condition(conditions, ConditionType.NO_MATCHING_NODES) is not None:
                    conditions = set_condition(conditions, ConditionType.NO_MATCHING_NODES, no_match is not None,
                                               *(no_match or ("AllMatched", "")), now_s=now)
                if nodes == status.nodes and conditions == status.conditions and revision:
                    return status
                status = replace(status, nodes=nodes, conditions=conditions, updated_s=now)
                try:
                    self._known = (status, self.jobs.put_status(status, self.fence(), expected_revision=revision))
                    return status
                except RevisionConflict:
                    self._known = None
                    if attempt == STATUS_WRITE_TRIES - 1:
                        raise
            raise AssertionError("unreachable")


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


def _fail(group: Sequence[tuple[str, Callable[[NodeStatus], NodeStatus], Future[NodeStatus]]],
          exc: BaseException) -> None:
    for _, _, fut in group:
        if not fut.done():
            fut.set_exception(exc)
