"""A job file (YAML, :data:`JOB_SCHEMA` ``job.schema.json``) <-> a :class:`~edgetune.tuning.jobs.TuningJobSpec`.

:func:`load_job_file` reads and checks a file, :func:`spec_from_doc` a decoded document, and
:func:`spec_to_doc` writes a spec back (a spec read from a file and written back reads the same).
The schema catches unknown keys and wrong types; the rest (exactly one of ``nodes`` /
``selector``, ``time_budget_ms`` with ``min-energy``, budgets and risk in range, distinct batch
sizes) is checked here with :mod:`edgetune.validation`'s rules, every error naming ``FILE:key``.
What only the coordinator can check (the name a DNS label, the profiling budget's minimum) it
checks on submit (:meth:`TuningJobSpec.check`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from edgetune import validation
from edgetune.base.objective import Objective
from edgetune.base.roles import Role
from edgetune.base.workload import WorkloadRef
from edgetune.errors import InvalidArgument
from edgetune.schemas import check
from edgetune.tuning.jobs import DEFAULT_PROFILES, TuningJobSpec, TuningMethod

JOB_SCHEMA = "job"


def load_job_file(path: str | Path) -> TuningJobSpec:
    """Read, schema-check and convert a job file (InvalidArgument naming the key on any problem)."""
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


def spec_from_doc(doc: Any, source: str = "job") -> TuningJobSpec:
    """A decoded job file -> its spec; errors name ``source:key.path``."""
    check(doc, JOB_SCHEMA, source)
    workload = doc["workload"]
    name = validation.identifier(workload["name"], f"{source}:workload.name")
    # a MODULE:FUNCTION's form; the nodes import it from their --workload-path
    WorkloadRef.parse(name, f"{source}:workload.name")
    batch_sizes: tuple[int, ...] = (16,)
    if "batch_sizes" in workload:
        sizes = workload["batch_sizes"]
        batch_sizes = tuple(validation.batch_sizes([sizes] if isinstance(sizes, int) else sizes,
                                                   f"{source}:workload.batch_sizes"))
    has_nodes, has_selector = "nodes" in doc, "selector" in doc
    if has_nodes == has_selector:
        raise InvalidArgument(f"{source}:nodes", "both nodes and selector given" if has_nodes else "is missing",
                              "target nodes: either nodes (a list of ids) or selector (device, labels)")
    nodes: tuple[str, ...] = ()
    selector: dict[str, Any] = {}
    if has_nodes:
        ids = [validation.identifier(n, f"{source}:nodes[{i}]") for i, n in enumerate(doc["nodes"])]
        for i, n in enumerate(ids):
            if n in ids[:i]:
                raise InvalidArgument(f"{source}:nodes[{i}]", f"{n!r} repeats nodes[{ids.index(n)}]", "distinct node ids")
        nodes = tuple(ids)
    else:
        selector = doc["selector"]
        if not selector:
            raise InvalidArgument(f"{source}:selector", "is empty", "device, labels (at least one)")
    objective = Objective.from_job_name(doc.get("objective", Objective.MIN_TIME.job_name), f"{source}:objective")
    time_budget_ms = None
    if "time_budget_ms" in doc:
        time_budget_ms = validation.time_budget_ms(doc["time_budget_ms"], f"{source}:time_budget_ms")
    elif objective == Objective.MIN_ENERGY:
        raise InvalidArgument(f"{source}:time_budget_ms", "is missing", "a time budget in ms (objective min-energy)")
    budget = doc.get("power_budget_w")
    power_budget_w = None
    node_power_budget_w: dict[str, float] = {}
    if isinstance(budget, dict):
        node_power_budget_w = {str(node_id): validation.power_budget_w(watts, f"{source}:power_budget_w.{node_id}")
                               for node_id, watts in budget.items()}
    elif budget is not None:
        power_budget_w = validation.power_budget_w(budget, f"{source}:power_budget_w")
    risk = validation.risk(doc["risk"], f"{source}:risk") if "risk" in doc else None
    profiles = validation.count(doc["profiles"], f"{source}:profiles") if "profiles" in doc else DEFAULT_PROFILES
    return TuningJobSpec(
        name=doc["name"], workload=name, role=Role(workload.get("role", Role.TRAIN)).value, batch_sizes=batch_sizes,
        nodes=nodes, selector_device=selector.get("device", ""), selector_labels=dict(selector.get("labels", {})),
        objective=objective, time_budget_ms=time_budget_ms, power_budget_w=power_budget_w,
        node_power_budget_w=node_power_budget_w, risk=risk, profiles=profiles,
        method=TuningMethod(doc.get("method", TuningMethod.FRONTIER)),
        reference_model_id=doc.get("reference_model", ""))


def spec_to_doc(spec: TuningJobSpec) -> dict[str, Any]:
    """A spec as a job file's document (defaults spelt out)."""
    workload: dict[str, Any] = {"name": spec.workload, "role": spec.role,
                                "batch_sizes": list(spec.batch_sizes)}
    doc: dict[str, Any] = {"name": spec.name, "workload": workload}
    if spec.nodes:
        doc["nodes"] = list(spec.nodes)
    else:
        selector: dict[str, Any] = {}
        if spec.selector_device:
            selector["device"] = spec.selector_device
        if spec.selector_labels:
            selector["labels"] = dict(spec.selector_labels)
        doc["selector"] = selector
    doc["objective"] = spec.objective.job_name
    if spec.time_budget_ms is not None:
        doc["time_budget_ms"] = spec.time_budget_ms
    if spec.node_power_budget_w:
        doc["power_budget_w"] = dict(spec.node_power_budget_w)
    elif spec.power_budget_w is not None:
        doc["power_budget_w"] = spec.power_budget_w
    if spec.risk is not None:
        doc["risk"] = spec.risk
    doc["profiles"] = spec.profiles
    doc["method"] = TuningMethod(spec.method).value
    if spec.reference_model_id:
        doc["reference_model"] = spec.reference_model_id
    return doc
