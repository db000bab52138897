"""Tuning jobs between their file / JSON forms and ``edgetune.v1`` messages: the one place.

- a job file (YAML, :data:`JOB_SCHEMA` ``job.schema.json``) -> ``TuningJobSpec``:
  :func:`load_job_file`, :func:`spec_from_doc`; and back, :func:`spec_to_doc` (a spec read from
  a file and written back reads the same);
- a ``TuningJob`` -> :class:`JobView` (typed), whose :meth:`JobView.to_json` is the CLI's JSON
  (CONTRACT: ``{"name", "phase", "nodes": [{"id", "device", "phase", "mode", "batch_size",
  "power_budget_w", "profiled", "predicted", "measured", "reason"}]}``), and back,
  :func:`job_from_view`.

Phase names are Kubernetes-style (``Succeeded``, ``Applied``): :data:`JOB_PHASES`,
:data:`NODE_PHASES`. The schema catches unknown keys and wrong types; the rest (exactly one of
``nodes`` / ``selector``, ``time_budget_ms`` with ``min-energy``, budgets and risk in range,
distinct batch sizes) is checked here with :mod:`edgetune.validation`'s rules.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from edgetune import validation
from edgetune.base.workload import is_user_workload, parse_spec
from edgetune.errors import InvalidArgument
from edgetune.proto.v1 import common_pb2, tuning_pb2
from edgetune.schemas import check

JOB_SCHEMA = "job"

OBJECTIVES: dict[str, int] = {"min-time": tuning_pb2.TUNING_OBJECTIVE_MIN_TIME,
                              "min-energy": tuning_pb2.TUNING_OBJECTIVE_MIN_ENERGY}
METHODS: dict[str, int] = {"frontier": tuning_pb2.TUNING_METHOD_FRONTIER, "random": tuning_pb2.TUNING_METHOD_RANDOM,
                           "cap-search": tuning_pb2.TUNING_METHOD_CAP_SEARCH}
ROLES: dict[str, int] = {"train": common_pb2.ROLE_TRAIN, "infer": common_pb2.ROLE_INFER}
JOB_PHASES: dict[int, str] = {
    tuning_pb2.JOB_PHASE_UNSPECIFIED: "Pending",
    tuning_pb2.JOB_PHASE_PENDING: "Pending",
    tuning_pb2.JOB_PHASE_RUNNING: "Running",
    tuning_pb2.JOB_PHASE_SUCCEEDED: "Succeeded",
    tuning_pb2.JOB_PHASE_FAILED: "Failed",
    tuning_pb2.JOB_PHASE_CANCELLED: "Cancelled",
}
NODE_PHASES: dict[int, str] = {
    tuning_pb2.NODE_PHASE_UNSPECIFIED: "Pending",
    tuning_pb2.NODE_PHASE_PENDING: "Pending",
    tuning_pb2.NODE_PHASE_PROFILING: "Profiling",
    tuning_pb2.NODE_PHASE_ESTIMATING: "Estimating",
    tuning_pb2.NODE_PHASE_SELECTING: "Selecting",
    tuning_pb2.NODE_PHASE_VERIFYING: "Verifying",
    tuning_pb2.NODE_PHASE_APPLIED: "Applied",
    tuning_pb2.NODE_PHASE_FAILED: "Failed",
}
#: Job phases after which nothing changes any more.
TERMINAL_JOB_PHASES = ("Succeeded", "Failed", "Cancelled")


def _key(mapping: Mapping[int, str], name: str) -> int:
    return next(k for k, v in mapping.items() if v == name and k != 0)


# --------------------------------------------------------------------------- job files


def load_job_file(path: str | Path) -> tuning_pb2.TuningJobSpec:
    """Read, schema-check and convert a job file (InvalidArgument naming the key on any problem)."""
    import yaml  # only when a file is read

    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise InvalidArgument(str(path), f"cannot read: {exc.strerror or exc}", "a readable YAML job file") from None
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise InvalidArgument(p.name, f"is not YAML: {str(exc).splitlines()[0]}", "a YAML job file") from None
    return spec_from_doc(doc, p.name)


def spec_from_doc(doc: Any, source: str = "job") -> tuning_pb2.TuningJobSpec:
    """A decoded job file -> ``TuningJobSpec``; errors name ``source:key.path``."""
    check(doc, JOB_SCHEMA, source)
    spec = tuning_pb2.TuningJobSpec(name=doc["name"])
    workload = doc["workload"]
    spec.workload.name = validation.identifier(workload["name"], f"{source}:workload.name")
    if is_user_workload(spec.workload.name):  # its form; the nodes import it from their --workload-path
        try:
            parse_spec(spec.workload.name)
        except InvalidArgument as exc:
            raise exc.renamed(f"{source}:workload.name") from None
    spec.workload.role = ROLES[workload.get("role", "train")]  # type: ignore[assignment]
    if "batch_sizes" in workload:
        sizes = workload["batch_sizes"]
        spec.batch_sizes.extend(validation.batch_sizes([sizes] if isinstance(sizes, int) else sizes,
                                                       f"{source}:workload.batch_sizes"))
    has_nodes, has_selector = "nodes" in doc, "selector" in doc
    if has_nodes == has_selector:
        raise InvalidArgument(f"{source}:nodes", "both nodes and selector given" if has_nodes else "is missing",
                              "target nodes: either nodes (a list of ids) or selector (device, labels)")
    if has_nodes:
        ids = [validation.identifier(n, f"{source}:nodes[{i}]") for i, n in enumerate(doc["nodes"])]
        for i, n in enumerate(ids):
            if n in ids[:i]:
                raise InvalidArgument(f"{source}:nodes[{i}]", f"{n!r} repeats nodes[{ids.index(n)}]", "distinct node ids")
        spec.nodes.extend(ids)
    else:
        selector = doc["selector"]
        if not selector:
            raise InvalidArgument(f"{source}:selector", "is empty", "device, labels (at least one)")
        spec.selector.device = selector.get("device", "")
        spec.selector.labels.update(selector.get("labels", {}))
    objective = doc.get("objective", "min-time")
    spec.objective = OBJECTIVES[objective]  # type: ignore[assignment]
    if "time_budget_ms" in doc:
        spec.time_budget_ms = validation.time_budget_ms(doc["time_budget_ms"], f"{source}:time_budget_ms")
    elif objective == "min-energy":
        raise InvalidArgument(f"{source}:time_budget_ms", "is missing", "a time budget in ms (objective min-energy)")
    budget = doc.get("power_budget_w")
    if isinstance(budget, dict):
        for node_id, watts in budget.items():
            spec.node_power_budget_w[str(node_id)] = validation.power_budget_w(
                watts, f"{source}:power_budget_w.{node_id}")
    elif budget is not None:
        spec.power_budget_w = validation.power_budget_w(budget, f"{source}:power_budget_w")
    if "risk" in doc:
        spec.risk = validation.risk(doc["risk"], f"{source}:risk")
    if "profiles" in doc:
        spec.profiles = validation.count(doc["profiles"], f"{source}:profiles")
    spec.method = METHODS[doc.get("method", "frontier")]  # type: ignore[assignment]
    if "reference_model" in doc:
        spec.reference_model_id = doc["reference_model"]
    return spec


def spec_to_doc(spec: tuning_pb2.TuningJobSpec) -> dict[str, Any]:
    """A ``TuningJobSpec`` as a job file's document (defaults spelt out)."""
    roles = {v: k for k, v in ROLES.items()}
    workload: dict[str, Any] = {"name": spec.workload.name, "role": roles.get(spec.workload.role, "train")}
    if spec.batch_sizes:
        workload["batch_sizes"] = list(spec.batch_sizes)
    doc: dict[str, Any] = {"name": spec.name, "workload": workload}
    if spec.nodes:
        doc["nodes"] = list(spec.nodes)
    else:
        selector: dict[str, Any] = {}
        if spec.selector.device:
            selector["device"] = spec.selector.device
        if spec.selector.labels:
            selector["labels"] = dict(spec.selector.labels)
        doc["selector"] = selector
    objectives = {v: k for k, v in OBJECTIVES.items()}
    doc["objective"] = objectives.get(spec.objective, "min-time")
    if spec.HasField("time_budget_ms"):
        doc["time_budget_ms"] = spec.time_budget_ms
    if spec.node_power_budget_w:
        doc["power_budget_w"] = dict(spec.node_power_budget_w)
    elif spec.HasField("power_budget_w"):
        doc["power_budget_w"] = spec.power_budget_w
    if spec.HasField("risk"):
        doc["risk"] = spec.risk
    if spec.profiles:
        doc["profiles"] = spec.profiles
    methods = {v: k for k, v in METHODS.items()}
    doc["method"] = methods.get(spec.method, "frontier")
    if spec.reference_model_id:
        doc["reference_model"] = spec.reference_model_id
    return doc


# --------------------------------------------------------------------------- job status


@dataclass(frozen=True)
class ModeView:
    cores: int
    cpu_mhz: float
    gpu_mhz: float
    emc_mhz: float


@dataclass(frozen=True)
class NodeView:
    """One node of a job as the CLI shows it (None: not known yet)."""

    id: str
    device: str
    phase: str
    mode: ModeView | None = None
    batch_size: int | None = None
    power_budget_w: float | None = None
    profiled: int = 0
    predicted_time_ms: float | None = None
    predicted_power_w: float | None = None
    predicted_power_upper_w: float | None = None
    measured_time_ms: float | None = None
    measured_power_w: float | None = None
    reason: str = ""
    events: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id, "device": self.device, "phase": self.phase,
            "mode": None if self.mode is None else {"cores": self.mode.cores, "cpu_mhz": self.mode.cpu_mhz,
                                                    "gpu_mhz": self.mode.gpu_mhz, "emc_mhz": self.mode.emc_mhz},
            "batch_size": self.batch_size, "power_budget_w": self.power_budget_w, "profiled": self.profiled,
            "predicted": {"time_ms": self.predicted_time_ms, "power_w": self.predicted_power_w,
                          "power_upper_w": self.predicted_power_upper_w},
            "measured": {"time_ms": self.measured_time_ms, "power_w": self.measured_power_w},
            "reason": self.reason,
        }


@dataclass(frozen=True)
class JobView:
    name: str
    phase: str
    nodes: tuple[NodeView, ...] = field(default_factory=tuple)
    revision: int = 0

    @property
    def done(self) -> bool:
        return self.phase in TERMINAL_JOB_PHASES

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "phase": self.phase, "nodes": [n.to_json() for n in self.nodes]}


def _optional(msg: Any, name: str) -> float | None:
    return float(getattr(msg, name)) if msg.HasField(name) else None


def node_view(status: tuning_pb2.NodeTuningStatus) -> NodeView:
    mode = None
    if status.HasField("mode") and status.mode.cores:
        mode = ModeView(status.mode.cores, status.mode.cpu_mhz, status.mode.gpu_mhz, status.mode.emc_mhz)
    return NodeView(
        id=status.node_id, device=status.device, phase=NODE_PHASES.get(status.phase, "Pending"), mode=mode,
        batch_size=status.batch_size or None, power_budget_w=_optional(status, "power_budget_w"),
        profiled=status.profiled, predicted_time_ms=_optional(status, "predicted_time_ms"),
        predicted_power_w=_optional(status, "predicted_power_w"),
        predicted_power_upper_w=_optional(status, "predicted_power_upper_w"),
        measured_time_ms=_optional(status, "measured_time_ms"), measured_power_w=_optional(status, "measured_power_w"),
        reason=status.reason, events=tuple(e.message for e in status.events))


def job_view(job: tuning_pb2.TuningJob) -> JobView:
    """A ``TuningJob`` as the CLI shows it."""
    return JobView(job.spec.name, JOB_PHASES.get(job.phase, "Pending"), tuple(node_view(n) for n in job.nodes),
                   job.revision)


def job_from_view(view: JobView) -> tuning_pb2.TuningJob:
    """The message a :class:`JobView` shows (events kept as messages; timestamps are not in a view)."""
    job = tuning_pb2.TuningJob(phase=_key(JOB_PHASES, view.phase), revision=view.revision)  # type: ignore[arg-type]
    job.spec.name = view.name
    for n in view.nodes:
        status = job.nodes.add(node_id=n.id, device=n.device, phase=_key(NODE_PHASES, n.phase),
                               reason=n.reason, profiled=n.profiled, batch_size=n.batch_size or 0)
        if n.mode is not None:
            status.mode.CopyFrom(common_pb2.PowerMode(cores=n.mode.cores, cpu_mhz=n.mode.cpu_mhz,
                                                      gpu_mhz=n.mode.gpu_mhz, emc_mhz=n.mode.emc_mhz))
        for name, value in (("power_budget_w", n.power_budget_w), ("predicted_time_ms", n.predicted_time_ms),
                            ("predicted_power_w", n.predicted_power_w),
                            ("predicted_power_upper_w", n.predicted_power_upper_w),
                            ("measured_time_ms", n.measured_time_ms), ("measured_power_w", n.measured_power_w)):
            if value is not None:
                setattr(status, name, value)
        for message in n.events:
            status.events.add(message=message)
    return job
