"""TuningJob records: what a client asks for (the spec) and how far each target node got (the status).

The store-backed resource (``TuningJobs``, the leader's ``StatusWriter``) is the control plane's
(:mod:`edgetune.control.tuningjobs`); the wire form is :mod:`edgetune.proto.serde.tuning`; a job
file becomes a spec through :mod:`edgetune.tuning.jobfile`. Phase names are Kubernetes-style
(``Succeeded``, ``Applied``): :class:`JobPhase`, :class:`NodePhase`. The objective is the selectors'
:class:`~edgetune.base.objective.Objective`, stored and read as the job file spells it (``min-time``);
the profiling method keeps the job file's spelling (``cap-search``): :class:`TuningMethod`.
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, ClassVar

from edgetune import validation
from edgetune.base.objective import Objective
from edgetune.base.roles import Role
from edgetune.base.workload import WorkloadRef
from edgetune.errors import InvalidArgument
from edgetune.store.records import UnknownSchema

#: Events kept per node (oldest dropped first).
MAX_EVENTS = 20
#: Points profiled per node when the job says nothing.
DEFAULT_PROFILES = 50

_NAME = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")


class JobPhase(StrEnum):
    PENDING = "Pending"
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    CANCELLED = "Cancelled"

    @property
    def done(self) -> bool:
        """Nothing changes the job any more (unless a budget or a node does)."""
        return self in (JobPhase.SUCCEEDED, JobPhase.FAILED, JobPhase.CANCELLED)


class NodePhase(StrEnum):
    PENDING = "Pending"
    PROFILING = "Profiling"
    ESTIMATING = "Estimating"
    SELECTING = "Selecting"
    VERIFYING = "Verifying"
    APPLIED = "Applied"
    FAILED = "Failed"

    @property
    def terminal(self) -> bool:
        return self in (NodePhase.APPLIED, NodePhase.FAILED)


class TuningMethod(StrEnum):
    """How a job's nodes are profiled: frontier rounds, random modes, or CapSearch's order under the cap."""

    FRONTIER = "frontier"
    RANDOM = "random"
    CAP_SEARCH = "cap-search"


def _names(values: type[StrEnum]) -> str:
    return ", ".join(v.value for v in values)


def _schema(doc: Any, record: str, version: int) -> Mapping[str, Any]:
    if not isinstance(doc, Mapping) or doc.get("schema") != version:
        raise UnknownSchema(record, doc.get("schema") if isinstance(doc, Mapping) else type(doc).__name__, version)
    return doc


@dataclass(frozen=True)
class TuningJobSpec:
    """What a client asks for (tuning.proto's TuningJobSpec); :meth:`check` says what is wrong."""

    SCHEMA_VERSION: ClassVar[int] = 1

    name: str
    workload: str
    #: A :class:`~edgetune.base.roles.Role`'s value (``train``, ``infer``), as every record that is stored says it.
    role: str = Role.TRAIN.value
    batch_sizes: tuple[int, ...] = (16,)
    nodes: tuple[str, ...] = ()
    selector_device: str = ""
    selector_labels: Mapping[str, str] = field(default_factory=dict)
    #: One of :data:`~edgetune.base.objective.JOB_OBJECTIVES` (``min-energy`` needs a time budget).
    objective: Objective = Objective.MIN_TIME
    time_budget_ms: float | None = None
    power_budget_w: float | None = None
    node_power_budget_w: Mapping[str, float] = field(default_factory=dict)
    risk: float | None = None
    profiles: int = DEFAULT_PROFILES
    method: TuningMethod = TuningMethod.FRONTIER
    reference_model_id: str = ""
    cancelled: bool = False

    def check(self) -> TuningJobSpec:
        """The spec with its objective and method as enums (given as a job file spells them, or as
        enums), or InvalidArgument naming the field (``spec.nodes[1]``)."""
        if not isinstance(self.name, str) or not _NAME.match(self.name):
            raise InvalidArgument("spec.name", f"{self.name!r} is not a DNS label",
                                  "lowercase letters, digits and '-', at most 63, e.g. mnv3-train")
        validation.identifier(self.workload, "spec.workload.name")
        # a MODULE:FUNCTION's form only: the nodes import it (the coordinator never does)
        WorkloadRef.parse(self.workload, "spec.workload.name")
        if self.role not in {r.value for r in Role}:
            raise InvalidArgument("spec.workload.role", f"{self.role!r}", ", ".join(r.value for r in Role))
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
        objective = Objective.from_job_name(self.objective, "spec.objective")
        if objective == Objective.MIN_ENERGY and self.time_budget_ms is None:
            raise InvalidArgument("spec.time_budget_ms", "min-energy needs a time budget", "> 0 ms")
        validation.optional(validation.time_budget_ms, self.time_budget_ms, "spec.time_budget_ms")
        validation.optional(validation.power_budget_w, self.power_budget_w, "spec.power_budget_w")
        for node, budget in self.node_power_budget_w.items():
            validation.power_budget_w(budget, f"spec.node_power_budget_w[{node}]")
        validation.optional(validation.risk, self.risk, "spec.risk")
        validation.count(self.profiles, "spec.profiles", minimum=3, maximum=100_000)
        if self.method not in tuple(TuningMethod):
            raise InvalidArgument("spec.method", f"{self.method!r}", _names(TuningMethod))
        method = TuningMethod(self.method)
        if method == TuningMethod.CAP_SEARCH and objective != Objective.MIN_TIME:
            # it applies the fastest point under the cap
            raise InvalidArgument("spec.objective", f"{objective.job_name!r} with method cap-search",
                                  Objective.MIN_TIME.job_name)
        return replace(self, objective=objective, method=method)

    def budget_for(self, node_id: str, registered_w: float | None) -> float | None:
        """The node's power budget: per node, else the job's, else the node's registered one."""
        if node_id in self.node_power_budget_w:
            return float(self.node_power_budget_w[node_id])
        return self.power_budget_w if self.power_budget_w is not None else registered_w

    def to_dict(self) -> dict[str, Any]:
        return {"schema": self.SCHEMA_VERSION, "name": self.name, "workload": self.workload,
                "role": self.role, "batch_sizes": list(self.batch_sizes), "nodes": list(self.nodes),
                "selector_device": self.selector_device, "selector_labels": dict(self.selector_labels),
                "objective": self.objective.job_name, "time_budget_ms": self.time_budget_ms,
                "power_budget_w": self.power_budget_w, "node_power_budget_w": dict(self.node_power_budget_w),
                "risk": self.risk, "profiles": self.profiles, "method": TuningMethod(self.method).value,
                "reference_model_id": self.reference_model_id, "cancelled": self.cancelled}

    @classmethod
    def from_dict(cls, doc: Any) -> TuningJobSpec:
        d = _schema(doc, cls.__name__, cls.SCHEMA_VERSION)
        return cls(d["name"], d["workload"], d["role"], tuple(d["batch_sizes"]), tuple(d["nodes"]),
                   d["selector_device"], dict(d["selector_labels"]), Objective.from_job_name(d["objective"]),
                   d["time_budget_ms"], d["power_budget_w"], dict(d["node_power_budget_w"]), d["risk"],
                   int(d["profiles"]), TuningMethod(d["method"]), d["reference_model_id"], bool(d["cancelled"]))

    def same_request(self, other: TuningJobSpec) -> bool:
        return replace(self, cancelled=False) == replace(other, cancelled=False)


class ConditionType(StrEnum):
    """What a condition is about (Kubernetes-style: each type once per job or node, its status True / False)."""

    #: Job: target ids (or the selector) that match no registered node; the message names them.
    NO_MATCHING_NODES = "NoMatchingNodes"
    #: Node: no option fits the budget (True), with the reason; False once one does.
    INFEASIBLE = "Infeasible"
    #: Node: the applied configuration was measured within its budget.
    VERIFIED = "Verified"
    #: Node: the applied configuration was measured off its prediction or over its budget (a re-tune follows).
    DRIFTED = "Drifted"
    #: Node: failed for another reason (lost, no reference, a service's error); the message says why.
    FAILED = "Failed"


class EventType(StrEnum):
    NORMAL = "Normal"
    WARNING = "Warning"


@dataclass(frozen=True)
class Condition:
    """One condition of a job or node: ``status`` ``True`` / ``False`` / ``Unknown`` (as Kubernetes spells it);
    ``last_transition_s`` is when ``status`` last changed (epoch seconds), not when it was last written."""

    type: ConditionType
    status: str
    reason: str = ""
    message: str = ""
    last_transition_s: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"type": ConditionType(self.type).value, "status": self.status, "reason": self.reason,
                "message": self.message, "last_transition_s": self.last_transition_s}

    def to_json(self) -> dict[str, Any]:
        """The CLI's JSON: ``{type, status, reason, message, last_transition}`` (ISO 8601, UTC)."""
        return {"type": ConditionType(self.type).value, "status": self.status, "reason": self.reason,
                "message": self.message, "last_transition": _iso(self.last_transition_s)}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Condition:
        return cls(ConditionType(d["type"]), str(d["status"]), str(d["reason"]), str(d["message"]),
                   float(d["last_transition_s"]))

    @property
    def true(self) -> bool:
        return self.status == "True"


def set_condition(conditions: tuple[Condition, ...], type: ConditionType, status: bool, reason: str = "",
                  message: str = "", *, now_s: float | None = None) -> tuple[Condition, ...]:
    """``conditions`` with ``type`` set; its last transition kept while its status stays the same (and the
    tuple itself returned when nothing changed, so a caller can skip the write)."""
    value = "True" if status else "False"
    old = next((c for c in conditions if c.type == type), None)
    if old is not None and (old.status, old.reason, old.message) == (value, reason, message):
        return conditions
    at = old.last_transition_s if old is not None and old.status == value else (time.time() if now_s is None else now_s)
    new = Condition(type, value, reason, message, at)
    if old is None:
        return (*conditions, new)
    return tuple(new if c.type == type else c for c in conditions)


def condition(conditions: tuple[Condition, ...], type: ConditionType) -> Condition | None:
    return next((c for c in conditions if c.type == type), None)


def _iso(at_s: float) -> str | None:
    if not at_s:
        return None
    return datetime.fromtimestamp(at_s, tz=UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


@dataclass(frozen=True)
class TuningEvent:
    """One thing that happened to a node in a job (``reason`` a short CamelCase word, ``message`` the detail)."""

    at_s: float
    message: str
    type: EventType = EventType.NORMAL
    reason: str = ""

    def to_json(self, node_id: str) -> dict[str, Any]:
        """``{time, node, type, reason, message}`` (``edgetune job events --json``)."""
        return {"time": _iso(self.at_s), "node": node_id, "type": EventType(self.type).value, "reason": self.reason,
                "message": self.message}


#: A node's chosen mode as (cores, cpu_mhz, gpu_mhz, emc_mhz).
ModeTuple = tuple[float, float, float, float]


@dataclass(frozen=True)
class NodeStatus:
    """One target node's progress (tuning.proto's NodeTuningStatus)."""

    node_id: str
    device: str = ""
    phase: NodePhase = NodePhase.PENDING
    reason: str = ""
    profiled: int = 0
    mode: ModeTuple | None = None
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
    conditions: tuple[Condition, ...] = ()
    #: The spec generation this status was tuned for (a resubmitted job's nodes start again; 1 before
    #: generations existed).
    generation: int = 1
    #: Times the node went Failed in this job (the retry backoff grows with it).
    failures: int = 0

    @property
    def terminal(self) -> bool:
        return NodePhase(self.phase).terminal

    def with_event(self, message: str, *, now_s: float | None = None, event_reason: str = "",
                   warning: bool = False, **changes: Any) -> NodeStatus:
        """A copy with ``changes`` and one more event (the oldest dropped past :data:`MAX_EVENTS`);
        ``event_reason`` is the event's reason word (``reason`` in ``changes`` is the node's)."""
        now = time.time() if now_s is None else now_s
        kind = EventType.WARNING if warning else EventType.NORMAL
        events = (*self.events, TuningEvent(now, message, kind, event_reason))[-MAX_EVENTS:]
        return replace(self, **changes, events=events, updated_s=now, started_s=self.started_s or now)

    def with_condition(self, type: ConditionType, status: bool, reason: str = "", message: str = "") -> NodeStatus:
        return replace(self, conditions=set_condition(self.conditions, type, status, reason, message))

    def condition(self, type: ConditionType) -> Condition | None:
        return condition(self.conditions, type)

    def to_dict(self) -> dict[str, Any]:
        return {"node_id": self.node_id, "device": self.device, "phase": NodePhase(self.phase).value,
                "reason": self.reason, "profiled": self.profiled,
                "mode": list(self.mode) if self.mode is not None else None,
                "batch_size": self.batch_size, "power_budget_w": self.power_budget_w,
                "predicted_time_ms": self.predicted_time_ms, "predicted_power_w": self.predicted_power_w,
                "predicted_power_upper_w": self.predicted_power_upper_w,
                "measured_time_ms": self.measured_time_ms, "measured_power_w": self.measured_power_w,
                "config_revision": self.config_revision, "started_s": self.started_s, "updated_s": self.updated_s,
                "events": [[e.at_s, e.message, EventType(e.type).value, e.reason] for e in self.events],
                "drift_epoch": self.drift_epoch, "conditions": [c.to_dict() for c in self.conditions],
                "generation": self.generation, "failures": self.failures}

    def to_json(self) -> dict[str, Any]:
        """The node in the CLI's JSON (docs/contract.md; :meth:`TuningJobView.to_json`)."""
        m = self.mode
        return {
            "id": self.node_id, "device": self.device, "phase": NodePhase(self.phase).value,
            "mode": None if m is None else {"cores": int(m[0]), "cpu_mhz": m[1], "gpu_mhz": m[2], "emc_mhz": m[3]},
            "batch_size": self.batch_size or None, "power_budget_w": self.power_budget_w, "profiled": self.profiled,
            "predicted": {"time_ms": self.predicted_time_ms, "power_w": self.predicted_power_w,
                          "power_upper_w": self.predicted_power_upper_w},
            "measured": {"time_ms": self.measured_time_ms, "power_w": self.measured_power_w},
            "reason": self.reason, "conditions": [c.to_json() for c in self.conditions],
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> NodeStatus:
        mode = d.get("mode")
        return cls(d["node_id"], d["device"], NodePhase(d["phase"]), d["reason"], int(d["profiled"]),
                   None if mode is None else (float(mode[0]), float(mode[1]), float(mode[2]), float(mode[3])),
                   int(d["batch_size"]), d["power_budget_w"], d["predicted_time_ms"], d["predicted_power_w"],
                   d["predicted_power_upper_w"], d["measured_time_ms"], d["measured_power_w"],
                   int(d["config_revision"]), float(d["started_s"]), float(d["updated_s"]),
                   tuple(_event(e) for e in d["events"]),
                   # absent in records written before drift re-tunes / conditions
                   int(d.get("drift_epoch", 0)), tuple(Condition.from_dict(c) for c in d.get("conditions", ())),
                   int(d.get("generation", 1)), int(d.get("failures", 0)))


def _event(e: Any) -> TuningEvent:
    """A stored event: ``[at_s, message]`` (before event types) or ``[at_s, message, type, reason]``."""
    if len(e) == 2:
        return TuningEvent(float(e[0]), str(e[1]))
    return TuningEvent(float(e[0]), str(e[1]), EventType(e[2]), str(e[3]))


@dataclass(frozen=True)
class TuningJobStatus:
    """The leader's view of a job: one :class:`NodeStatus` per target node (stored as one doc per node and
    one for the job: :mod:`edgetune.control.tuningjobs`)."""

    name: str
    nodes: Mapping[str, NodeStatus] = field(default_factory=dict)
    cancelled: bool = False
    updated_s: float = 0.0
    #: The job's own conditions (``NoMatchingNodes``); each node has its own.
    conditions: tuple[Condition, ...] = ()


def job_phase(spec: TuningJobSpec, status: TuningJobStatus | None, generation: int = 1) -> JobPhase:
    """The job's phase from its nodes' (one rule: the API and the CLI read it). A job some of whose
    target ids match no node (``NoMatchingNodes``) is not Succeeded: it waits for them (Running); a node
    whose status is of an older ``generation`` (the job was submitted again) counts as Pending."""
    if spec.cancelled:
        return JobPhase.CANCELLED
    if status is None or not status.nodes:
        return JobPhase.PENDING
    phases = [NodePhase.PENDING if n.generation < generation else n.phase for n in status.nodes.values()]
    if all(p == NodePhase.APPLIED for p in phases):
        unmatched = condition(status.conditions, ConditionType.NO_MATCHING_NODES)
        return JobPhase.RUNNING if unmatched is not None and unmatched.true else JobPhase.SUCCEEDED
    if all(NodePhase(p).terminal for p in phases):
        return JobPhase.FAILED
    if all(p == NodePhase.PENDING for p in phases):
        return JobPhase.PENDING
    return JobPhase.RUNNING


@dataclass(frozen=True)
class TuningJobView:
    """A job as read: its spec, the leader's status (None before the leader saw it), its revision."""

    spec: TuningJobSpec
    status: TuningJobStatus | None
    revision: int
    status_revision: int = 0
    created_s: float = 0.0
    #: The spec's generation: 1 when created, one more each time a cancelled job is submitted again.
    generation: int = 1

    @property
    def phase(self) -> JobPhase:
        return job_phase(self.spec, self.status, self.generation)

    @property
    def nodes(self) -> tuple[NodeStatus, ...]:
        """The target nodes' statuses, in the leader's order (none before it saw the job)."""
        return tuple(self.status.nodes.values()) if self.status is not None else ()

    @property
    def updated_s(self) -> float:
        """When the leader last wrote the status (the creation time before that)."""
        return self.status.updated_s if self.status is not None else self.created_s

    def to_json(self) -> dict[str, Any]:
        """The CLI's JSON of a job (``edgetune job get --json``; docs/contract.md): ``{"name", "phase",
        "nodes": [{"id", "device", "phase", "mode", "batch_size", "power_budget_w", "profiled",
        "predicted", "measured", "reason", "conditions"}], "conditions"}``."""
        return {"name": self.spec.name, "phase": self.phase.value, "nodes": [n.to_json() for n in self.nodes],
                "conditions": [c.to_json() for c in self.conditions]}

    @property
    def conditions(self) -> tuple[Condition, ...]:
        """The job's own conditions (``NoMatchingNodes``)."""
        return self.status.conditions if self.status is not None else ()

    def events(self) -> list[tuple[str, TuningEvent]]:
        """Every node's recent events as (node id, event), oldest first."""
        out = [(n.node_id, e) for n in self.nodes for e in n.events]
        return sorted(out, key=lambda pair: pair[1].at_s)
