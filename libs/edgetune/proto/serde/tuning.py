"""``tuning.proto`` <-> the TuningJob records of :mod:`edgetune.tuning.jobs` (SubmitProfiling's request is a
:class:`~edgetune.store.ProfileJob`: :mod:`edgetune.proto.serde.profiler`).

- a spec: :func:`spec_from_proto` (what a server accepts: checked, errors name ``spec.<field>``),
  :func:`spec_to_proto`;
- a job as read (:class:`~edgetune.tuning.jobs.TuningJobView`): :func:`job_to_proto`,
  :func:`job_from_proto`, and one node's status :func:`node_status_to_proto`,
  :func:`node_status_from_proto`.

What the wire does not carry: a node's ``drift_epoch`` and the status document's revision; a job's
``cancelled`` travels as its phase, and a status the leader wrote with no node yet reads back as none.
"""

from __future__ import annotations

from edgetune.base.mode import PowerMode
from edgetune.base.objective import Objective
from edgetune.base.roles import Role
from edgetune.errors import InvalidArgument
from edgetune.proto.serde.common import (
    mode_from_proto,
    mode_to_proto,
    optional_value,
    role_from_proto,
    role_to_proto,
    timestamp_from_proto,
    timestamp_to_proto,
)
from edgetune.proto.v1 import common_pb2, tuning_pb2
from edgetune.tuning.jobs import (
    DEFAULT_PROFILES,
    JobPhase,
    NodePhase,
    NodeStatus,
    TuningEvent,
    TuningJobSpec,
    TuningJobStatus,
    TuningJobView,
    TuningMethod,
)

# --- enums --------------------------------------------------------------------------------------

OBJECTIVES: dict[Objective, tuning_pb2.TuningObjective.ValueType] = {
    Objective.MIN_TIME: tuning_pb2.TUNING_OBJECTIVE_MIN_TIME,
    Objective.MIN_ENERGY: tuning_pb2.TUNING_OBJECTIVE_MIN_ENERGY,
}
METHODS: dict[TuningMethod, tuning_pb2.TuningMethod.ValueType] = {
    TuningMethod.FRONTIER: tuning_pb2.TUNING_METHOD_FRONTIER,
    TuningMethod.RANDOM: tuning_pb2.TUNING_METHOD_RANDOM,
    TuningMethod.CAP_SEARCH: tuning_pb2.TUNING_METHOD_CAP_SEARCH,
}
JOB_PHASES: dict[JobPhase, tuning_pb2.JobPhase.ValueType] = {
    phase: tuning_pb2.JobPhase.Value(f"JOB_PHASE_{phase.name}") for phase in JobPhase}
NODE_PHASES: dict[NodePhase, tuning_pb2.NodePhase.ValueType] = {
    phase: tuning_pb2.NodePhase.Value(f"NODE_PHASE_{phase.name}") for phase in NodePhase}
_OBJECTIVE_OF = {v: k for k, v in OBJECTIVES.items()} | {tuning_pb2.TUNING_OBJECTIVE_UNSPECIFIED: Objective.MIN_TIME}
_METHOD_OF = {v: k for k, v in METHODS.items()} | {tuning_pb2.TUNING_METHOD_UNSPECIFIED: TuningMethod.FRONTIER}
_JOB_PHASE_OF = {v: k for k, v in JOB_PHASES.items()} | {tuning_pb2.JOB_PHASE_UNSPECIFIED: JobPhase.PENDING}
_NODE_PHASE_OF = {v: k for k, v in NODE_PHASES.items()} | {tuning_pb2.NODE_PHASE_UNSPECIFIED: NodePhase.PENDING}


# --- specs --------------------------------------------------------------------------------------


def _spec_of(msg: tuning_pb2.TuningJobSpec, cancelled: bool = False) -> TuningJobSpec:
    """The spec a message says, unchecked (unset fields read as their defaults)."""
    if msg.objective not in _OBJECTIVE_OF:
        raise InvalidArgument("spec.objective", f"unknown value {msg.objective}", "MIN_TIME, MIN_ENERGY")
    if msg.method not in _METHOD_OF:
        raise InvalidArgument("spec.method", f"unknown value {msg.method}", "FRONTIER, RANDOM, CAP_SEARCH")
    sizes = tuple(msg.batch_sizes) or ((msg.workload.batch_size,) if msg.workload.batch_size else (16,))
    return TuningJobSpec(
        name=msg.name, workload=msg.workload.name,
        role=role_from_proto(msg.workload.role, "spec.workload.role", default=Role.TRAIN).value,
        batch_sizes=sizes, nodes=tuple(msg.nodes), selector_device=msg.selector.device,
        selector_labels=dict(msg.selector.labels), objective=_OBJECTIVE_OF[msg.objective],
        time_budget_ms=optional_value(msg, "time_budget_ms"), power_budget_w=optional_value(msg, "power_budget_w"),
        node_power_budget_w=dict(msg.node_power_budget_w), risk=optional_value(msg, "risk"),
        profiles=msg.profiles or DEFAULT_PROFILES, method=_METHOD_OF[msg.method],
        reference_model_id=msg.reference_model_id, cancelled=cancelled)


def spec_from_proto(msg: tuning_pb2.TuningJobSpec) -> TuningJobSpec:
    """The checked spec a client submits (InvalidArgument naming ``spec.<field>``)."""
    return _spec_of(msg).check()


def spec_to_proto(spec: TuningJobSpec) -> tuning_pb2.TuningJobSpec:
    """The spec as a message (``cancelled`` is not part of it: a job's phase says it)."""
    msg = tuning_pb2.TuningJobSpec(
        name=spec.name, workload=common_pb2.Workload(name=spec.workload,
                                                     role=common_pb2.Role.ValueType(role_to_proto(spec.role))),
        batch_sizes=list(spec.batch_sizes), nodes=list(spec.nodes),
        selector=tuning_pb2.NodeSelector(device=spec.selector_device, labels=dict(spec.selector_labels)),
        objective=OBJECTIVES[Objective.from_job_name(spec.objective, "spec.objective")], node_power_budget_w=dict(spec.node_power_budget_w),
        profiles=spec.profiles, method=METHODS[TuningMethod(spec.method)],
        reference_model_id=spec.reference_model_id)
    for name in ("time_budget_ms", "power_budget_w", "risk"):
        value = getattr(spec, name)
        if value is not None:
            setattr(msg, name, value)
    return msg


# --- status -------------------------------------------------------------------------------------

_OPTIONAL_STATUS = ("power_budget_w", "predicted_time_ms", "predicted_power_w", "predicted_power_upper_w",
                    "measured_time_ms", "measured_power_w")


def node_status_to_proto(st: NodeStatus) -> tuning_pb2.NodeTuningStatus:
    msg = tuning_pb2.NodeTuningStatus(
        node_id=st.node_id, device=st.device, phase=NODE_PHASES[NodePhase(st.phase)], reason=st.reason,
        profiled=st.profiled, batch_size=st.batch_size, config_revision=st.config_revision,
        events=[tuning_pb2.TuningEvent(at=timestamp_to_proto(e.at_s), message=e.message) for e in st.events])
    if st.mode is not None:
        msg.mode.CopyFrom(mode_to_proto(PowerMode(int(st.mode[0]), st.mode[1], st.mode[2], st.mode[3])))
    for name in _OPTIONAL_STATUS:
        value = getattr(st, name)
        if value is not None:
            setattr(msg, name, value)
    if st.started_s:
        msg.started.CopyFrom(timestamp_to_proto(st.started_s))
    if st.updated_s:
        msg.updated.CopyFrom(timestamp_to_proto(st.updated_s))
    return msg


def node_status_from_proto(msg: tuning_pb2.NodeTuningStatus) -> NodeStatus:
    mode = None
    if msg.HasField("mode") and msg.mode.cores:
        m = mode_from_proto(msg.mode, f"nodes[{msg.node_id}].mode")
        mode = (float(m.cores), m.cpu_mhz, m.gpu_mhz, m.emc_mhz)
    return NodeStatus(
        node_id=msg.node_id, device=msg.device, phase=_NODE_PHASE_OF.get(msg.phase, NodePhase.PENDING),
        reason=msg.reason, profiled=msg.profiled, mode=mode, batch_size=msg.batch_size,
        **{name: optional_value(msg, name) for name in _OPTIONAL_STATUS},
        config_revision=msg.config_revision, started_s=timestamp_from_proto(msg.started),
        updated_s=timestamp_from_proto(msg.updated),
        events=tuple(TuningEvent(timestamp_from_proto(e.at), e.message) for e in msg.events))


def job_to_proto(view: TuningJobView) -> tuning_pb2.TuningJob:
    msg = tuning_pb2.TuningJob(spec=spec_to_proto(view.spec), phase=JOB_PHASES[view.phase],
                               nodes=[node_status_to_proto(n) for n in view.nodes], revision=view.revision)
    if view.created_s:
        msg.created.CopyFrom(timestamp_to_proto(view.created_s))
    if view.updated_s:
        msg.updated.CopyFrom(timestamp_to_proto(view.updated_s))
    return msg


def job_from_proto(msg: tuning_pb2.TuningJob) -> TuningJobView:
    """A job as a server sent it (its spec not checked again)."""
    spec = _spec_of(msg.spec, cancelled=msg.phase == tuning_pb2.JOB_PHASE_CANCELLED)
    nodes = [node_status_from_proto(n) for n in msg.nodes]
    status = (TuningJobStatus(spec.name, {n.node_id: n for n in nodes}, updated_s=timestamp_from_proto(msg.updated))
              if nodes else None)
    return TuningJobView(spec, status, msg.revision, created_s=timestamp_from_proto(msg.created))
