"""TuningJob records and where they live: desired state (the spec) and observed state (the status).

Two revisioned docs per job in the :class:`~edgetune.store.Store`:

- ``tuning-job-spec/<name>``: written by any replica (``SubmitTuningJob``, ``CancelTuningJob``):
  what the client wants. Create-only on submit (a second submit of the same spec is a no-op, a
  different spec under the same name is an error); a cancel sets ``cancelled``.
- ``tuning-job-status/<name>``: written only by the leader's reconcile loop, fenced by its lease,
  so a deposed leader's late write fails instead of overwriting its successor's.

Both docs carry ``"schema": 1`` (:class:`~edgetune.store.records.UnknownSchema` on
a newer one). A job's revision is the higher of the two docs' revisions (revisions come from
one namespace-wide counter, so it only grows); :meth:`TuningJobs.wait` polls it, which works on
every backend alike.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar, TypeVar

from edgetune import validation
from edgetune.base.workload import is_user_workload, parse_spec
from edgetune.errors import InvalidArgument, NotFound
from edgetune.store import DocWrite, Fence, RevisionConflict, Store
from edgetune.store.records import UnknownSchema

SPEC_KIND = "tuning-job-spec"
STATUS_KIND = "tuning-job-status"
T = TypeVar("T")
#: Events kept per node (oldest dropped first).
MAX_EVENTS = 12
DEFAULT_PROFILES = 50
OBJECTIVES = ("min-time", "min-energy")
METHODS = ("frontier", "random", "cap-search")
ROLES = ("train", "infer")

NODE_PHASES = ("Pending", "Profiling", "Estimating", "Selecting", "Verifying", "Applied", "Failed")
TERMINAL_NODE_PHASES = ("Applied", "Failed")
JOB_PHASES = ("Pending", "Running", "Succeeded", "Failed", "Cancelled")

_NAME = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")


def _schema(doc: Any, record: str, version: int) -> Mapping[str, Any]:
    if not isinstance(doc, Mapping) or doc.get("schema") != version:
        raise UnknownSchema(record, doc.get("schema") if isinstance(doc, Mapping) else type(doc).__name__, version)
    return doc


@dataclass(frozen=True)
class TuningJobSpec:
    """What a client asks for (tuning.proto's TuningJobSpec, checked)."""

    SCHEMA_VERSION: ClassVar[int] = 1

    name: str
    workload: str
    role: str = "train"
    batch_sizes: tuple[int, ...] = (16,)
    nodes: tuple[str, ...] = ()
    selector_device: str = ""
    selector_labels: Mapping[str, str] = field(default_factory=dict)
    objective: str = "min-time"
    time_budget_ms: float | None = None
    power_budget_w: float | None = None
    node_power_budget_w: Mapping[str, float] = field(default_factory=dict)
    risk: float | None = None
    profiles: int = DEFAULT_PROFILES
    method: str = "frontier"
    reference_model_id: str = ""
    cancelled: bool = False

    def check(self) -> TuningJobSpec:
        """The spec, or InvalidArgument naming the field (``spec.nodes[1]``)."""
        if not isinstance(self.name, str) or not _NAME.match(self.name):
            raise InvalidArgument("spec.name", f"{self.name!r} is not a DNS label",
                                  "lowercase letters, digits and '-', at most 63, e.g. mnv3-train")
        validation.identifier(self.workload, "spec.workload.name")
        if is_user_workload(self.workload):  # its form only: the nodes import it (the coordinator never does)
            try:
                parse_spec(self.workload)
            except InvalidArgument as exc:
                raise exc.renamed("spec.workload.name") from None
        if self.role not in ROLES:
            raise InvalidArgument("spec.workload.role", f"{self.role!r}", ", ".join(ROLES))
        if not self.batch_sizes:
            raise InvalidArgument("spec.batch_sizes", "no batch size", "one or more sizes >= 1")
        validation.batch_sizes(self.batch_sizes, "spec.batch_sizes")
        for i, node in enumerate(self.nodes):
            if not isinstance(node, str) or not node:
                raise InvalidArgument(f"spec.nodes[{i}]", f"{node!r} is not a node id", "a registered node id")
        if len(set(self.nodes)) != len(self.nodes):
            dup = next(n for i, n in enumerate(self.nodes) if n in self.nodes[:i])
            raise InvalidArgument(f"spec.nodes[{self.nodes.index(dup, self.nodes.index(dup) + 1)}]",
                                  f"{dup!r} is listed twice", "each node once")
        selecting = bool(self.selector_device or self.selector_labels)
        if bool(self.nodes) == selecting:
            raise InvalidArgument("spec.nodes", "give target nodes by id or by selector (one of the two)",
                                  "nodes: [id, ...] or selector: {device: ...}")
        if self.objective not in OBJECTIVES:
            raise InvalidArgument("spec.objective", f"{self.objective!r}", ", ".join(OBJECTIVES))
        if self.objective == "min-energy" and self.time_budget_ms is None:
            raise InvalidArgument("spec.time_budget_ms", "min-energy needs a time budget", "> 0 ms")
        validation.optional(validation.time_budget_ms, self.time_budget_ms, "spec.time_budget_ms")
        validation.optional(validation.power_budget_w, self.power_budget_w, "spec.power_budget_w")
        for node, budget in self.node_power_budget_w.items():
            validation.power_budget_w(budget, f"spec.node_power_budget_w[{node}]")
        validation.optional(validation.risk, self.risk, "spec.risk")
        validation.count(self.profiles, "spec.profiles", minimum=3, maximum=100_000)
        if self.method not in METHODS:
            raise InvalidArgument("spec.method", f"{self.method!r}", ", ".join(METHODS))
        if self.method == "cap-search" and self.objective != "min-time":  # it applies the fastest point
            raise InvalidArgument("spec.objective", f"{self.objective!r} with method cap-search", "min-time")
        return self

    def budget_for(self, node_id: str, registered_w: float | None) -> float | None:
        """The node's power budget: per node, else the job's, else the node's registered one."""
        if node_id in self.node_power_budget_w:
            return float(self.node_power_budget_w[node_id])
        return self.power_budget_w if self.power_budget_w is not None else registered_w

    def to_dict(self) -> dict[str, Any]:
        return {"schema": self.SCHEMA_VERSION, "name": self.name, "workload": self.workload, "role": self.role,
                "batch_sizes": list(self.batch_sizes), "nodes": list(self.nodes),
                "selector_device": self.selector_device, "selector_labels": dict(self.selector_labels),
                "objective": self.objective, "time_budget_ms": self.time_budget_ms,
                "power_budget_w": self.power_budget_w, "node_power_budget_w": dict(self.node_power_budget_w),
                "risk": self.risk, "profiles": self.profiles, "method": self.method,
                "reference_model_id": self.reference_model_id, "cancelled": self.cancelled}

    @classmethod
    def from_dict(cls, doc: Any) -> TuningJobSpec:
        d = _schema(doc, cls.__name__, cls.SCHEMA_VERSION)
        return cls(d["name"], d["workload"], d["role"], tuple(d["batch_sizes"]), tuple(d["nodes"]),
                   d["selector_device"], dict(d["selector_labels"]), d["objective"], d["time_budget_ms"],
                   d["power_budget_w"], dict(d["node_power_budget_w"]), d["risk"], int(d["profiles"]), d["method"],
                   d["reference_model_id"], bool(d["cancelled"]))

    def same_request(self, other: TuningJobSpec) -> bool:
        return replace(self, cancelled=False) == replace(other, cancelled=False)


@dataclass(frozen=True)
class TuningEvent:
    at_s: float
    message: str


@dataclass(frozen=True)
class NodeStatus:
    """One target node's progress (tuning.proto's NodeTuningStatus)."""

    node_id: str
    device: str = ""
    phase: str = "Pending"
    reason: str = ""
    profiled: int = 0
    mode: tuple[float, float, float, float] | None = None
    batch_size: int = 0
    power_budget_w: float | None = None
    predicted_time_ms: float | None = None
    predicted_power_w: float | None = None
    predicted_power_upper_w: float | None = None
    measured_time_ms: float | None = None
    measured_power_w: float | None = None
    config_revision: int = 0
    started_s: float = 0.0
    updated_s: float = 0.0
    events: tuple[TuningEvent, ...] = ()
    #: Re-tunes after drift (the applied configuration measured off its prediction); each one's points
    #: get their own job ids, so they are measured anew rather than read back.
    drift_epoch: int = 0

    @property
    def terminal(self) -> bool:
        return self.phase in TERMINAL_NODE_PHASES

    def with_event(self, message: str, *, now_s: float | None = None, **changes: Any) -> NodeStatus:
        """A copy with ``changes`` and one more event (the oldest dropped past :data:`MAX_EVENTS`)."""
        now = time.time() if now_s is None else now_s
        events = (*self.events, TuningEvent(now, message))[-MAX_EVENTS:]
        return replace(self, **changes, events=events, updated_s=now, started_s=self.started_s or now)

    def to_dict(self) -> dict[str, Any]:
        return {"node_id": self.node_id, "device": self.device, "phase": self.phase, "reason": self.reason,
                "profiled": self.profiled, "mode": list(self.mode) if self.mode is not None else None,
                "batch_size": self.batch_size, "power_budget_w": self.power_budget_w,
                "predicted_time_ms": self.predicted_time_ms, "predicted_power_w": self.predicted_power_w,
                "predicted_power_upper_w": self.predicted_power_upper_w,
                "measured_time_ms": self.measured_time_ms, "measured_power_w": self.measured_power_w,
                "config_revision": self.config_revision, "started_s": self.started_s, "updated_s": self.updated_s,
                "events": [[e.at_s, e.message] for e in self.events], "drift_epoch": self.drift_epoch}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> NodeStatus:
        mode = d.get("mode")
        return cls(d["node_id"], d["device"], d["phase"], d["reason"], int(d["profiled"]),
                   None if mode is None else (float(mode[0]), float(mode[1]), float(mode[2]), float(mode[3])),
                   int(d["batch_size"]), d["power_budget_w"], d["predicted_time_ms"], d["predicted_power_w"],
                   d["predicted_power_upper_w"], d["measured_time_ms"], d["measured_power_w"],
                   int(d["config_revision"]), float(d["started_s"]), float(d["updated_s"]),
                   tuple(TuningEvent(float(a), str(m)) for a, m in d["events"]),
                   int(d.get("drift_epoch", 0)))  # absent in records written before drift re-tunes


@dataclass(frozen=True)
class TuningJobStatus:
    """The leader's view of a job: one :class:`NodeStatus` per target node."""

    SCHEMA_VERSION: ClassVar[int] = 1

    name: str
    nodes: Mapping[str, NodeStatus] = field(default_factory=dict)
    cancelled: bool = False
    updated_s: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"schema": self.SCHEMA_VERSION, "name": self.name, "cancelled": self.cancelled,
                "updated_s": self.updated_s, "nodes": [n.to_dict() for n in self.nodes.values()]}

    @classmethod
    def from_dict(cls, doc: Any) -> TuningJobStatus:
        d = _schema(doc, cls.__name__, cls.SCHEMA_VERSION)
        nodes = [NodeStatus.from_dict(n) for n in d["nodes"]]
        return cls(d["name"], {n.node_id: n for n in nodes}, bool(d["cancelled"]), float(d["updated_s"]))


def job_phase(spec: TuningJobSpec, status: TuningJobStatus | None) -> str:
    """The job's phase from its nodes' (one rule: the API and the CLI read it)."""
    if spec.cancelled:
        return "Cancelled"
    if status is None or not status.nodes:
        return "Pending"
    phases = [n.phase for n in status.nodes.values()]
    if all(p == "Applied" for p in phases):
        return "Succeeded"
    if all(p in TERMINAL_NODE_PHASES for p in phases):
        return "Failed"
    if all(p == "Pending" for p in phases):
        return "Pending"
    return "Running"


@dataclass(frozen=True)
class TuningJobView:
    """A job as read: its spec, the leader's status (None before the leader saw it), its revision."""

    spec: TuningJobSpec
    status: TuningJobStatus | None
    revision: int
    status_revision: int = 0
    created_s: float = 0.0

    @property
    def phase(self) -> str:
        return job_phase(self.spec, self.status)


class TuningJobs:
    """The jobs in a store (module docstring)."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def submit(self, spec: TuningJobSpec) -> TuningJobView:
        """Create the job (any replica). The same spec again returns the job as it is (a retried call)."""
        spec = spec.check()
        doc = {**spec.to_dict(), "created_s": time.time()}
        try:
            self.store.put_doc(SPEC_KIND, spec.name, doc, expected_revision=0)
        except RevisionConflict:
            current = self.get(spec.name)
            if not current.spec.same_request(spec):
                raise InvalidArgument("spec.name", f"a different job {spec.name!r} exists already",
                                      "a new name, or cancel the existing job") from None
        return self.get(spec.name)

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

    def get(self, name: str) -> TuningJobView:
        got = self.store.get_doc(SPEC_KIND, name, missing_ok=True)
        if got is None:
            raise NotFound(f"name: no tuning job {name!r}")
        spec = TuningJobSpec.from_dict(got.doc)
        st = self.store.get_doc(STATUS_KIND, name, missing_ok=True)
        status = TuningJobStatus.from_dict(st.doc) if st is not None else None
        st_rev = st.revision if st is not None else 0
        return TuningJobView(spec, status, max(got.revision, st_rev), st_rev, float(got.doc.get("created_s", 0.0)))

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

    def put_status(self, status: TuningJobStatus, fence: Fence | None) -> int:
        """The leader's write (fenced: a deposed leader's write raises LeaseLost)."""
        return self.store.put_doc(STATUS_KIND, status.name, status.to_dict(), fence=fence)

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


class StatusWriter:
    """Serialises one job's status updates from the leader's node workers (one doc per job)."""

    def __init__(self, jobs: TuningJobs, name: str, fence: Callable[[], Fence]) -> None:
        self.jobs, self.name, self.fence = jobs, name, fence
        self._lock = threading.Lock()

    def update(self, node_id: str, change: Callable[[NodeStatus], NodeStatus]) -> NodeStatus:
        with self._lock:
            view = self.jobs.get(self.name)
            status = view.status or TuningJobStatus(self.name)
            node = status.nodes.get(node_id) or NodeStatus(node_id)
            node = change(node)
            nodes = {**status.nodes, node_id: node}
            self.jobs.put_status(replace(status, nodes=nodes, updated_s=time.time()), self.fence())
            return node

    def update_with(self, node_id: str, change: Callable[[NodeStatus], NodeStatus],
                    write: Callable[[DocWrite], T]) -> T:
        """As :meth:`update`, but the status doc is handed to ``write``, a publish of the node's config
        carrying it in ``docs=``: the two land in one atomic step, and the store writes the revision
        it gives that config into the node's ``config_revision``. Compare-and-set on the status
        revision read here, so nothing written meanwhile is lost (RevisionConflict instead)."""
        with self._lock:
            view = self.jobs.get(self.name)
            status = view.status or TuningJobStatus(self.name)
            node = change(status.nodes.get(node_id) or NodeStatus(node_id))
            nodes = {**status.nodes, node_id: node}
            doc = replace(status, nodes=nodes, updated_s=time.time()).to_dict()
            at = (("nodes", list(nodes).index(node_id), "config_revision"), node_id)
            return write(DocWrite(STATUS_KIND, self.name, doc, expected_revision=view.status_revision,
                                  config_revisions=(at,)))

    def ensure(self, node_ids: Sequence[str], devices: Mapping[str, str]) -> TuningJobStatus:
        """Every target node in the status (Pending when new); the status as stored."""
        with self._lock:
            view = self.jobs.get(self.name)
            status = view.status or TuningJobStatus(self.name)
            missing = [n for n in node_ids if n not in status.nodes]
            if missing or view.status is None:
                now = time.time()
                nodes = {**status.nodes, **{n: NodeStatus(n, devices.get(n, ""), started_s=now, updated_s=now)
                                            for n in missing}}
                status = replace(status, nodes=nodes, updated_s=now)
                self.jobs.put_status(status, self.fence())
            return status
