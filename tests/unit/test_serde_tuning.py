"""``proto.serde.tuning``: TuningJob specs, node statuses and jobs round-trip through their messages
(record -> message -> record equal), unset fields read as the defaults, and bad input is refused
naming the field; SubmitProfiling's request (a ProfileJob: :mod:`edgetune.proto.serde.profiler`) is
refused the same way."""

from __future__ import annotations

import pytest

from edgetune.base.objective import JOB_OBJECTIVES, Objective
from edgetune.errors import InvalidArgument
from edgetune.proto.serde import tuning as serde
from edgetune.proto.serde.profiler import profile_job_from_proto
from edgetune.proto.v1 import common_pb2, profiler_pb2, tuning_pb2
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

SPECS = [
    TuningJobSpec("mnv3-train", "mobilenetv3", nodes=("orin-agx-1", "nano-1"), risk=0.05, profiles=12,
                  node_power_budget_w={"orin-agx-1": 25.0, "nano-1": 7.0}),
    TuningJobSpec("e", "resnet18", "infer", batch_sizes=(8, 32), selector_device="nano",
                  selector_labels={"rack": "a"}, objective=Objective.MIN_ENERGY, time_budget_ms=250.0,
                  power_budget_w=9.5, method=TuningMethod.RANDOM, reference_model_id="ref-orin-train"),
    TuningJobSpec("cap", "pkg.models:make", batch_sizes=(32, 16), nodes=("a",), method=TuningMethod.CAP_SEARCH),
]


@pytest.mark.parametrize("spec", SPECS, ids=[s.name for s in SPECS])
def test_spec_round_trips(spec):
    msg = serde.spec_to_proto(spec)
    assert serde.spec_from_proto(tuning_pb2.TuningJobSpec.FromString(msg.SerializeToString())) == spec


def test_unset_spec_fields_read_as_the_defaults():
    msg = tuning_pb2.TuningJobSpec(name="a", workload=common_pb2.Workload(name="lstm"), nodes=["n"])
    spec = serde.spec_from_proto(msg)
    assert spec.role == "train" and spec.batch_sizes == (16,) and spec.profiles == DEFAULT_PROFILES
    assert spec.objective == Objective.MIN_TIME and spec.method == TuningMethod.FRONTIER
    assert spec.risk is None and spec.power_budget_w is None and spec.time_budget_ms is None
    msg.workload.batch_size = 64  # the workload's batch size when the list is empty
    assert serde.spec_from_proto(msg).batch_sizes == (64,)


def _spec_msg(**fields) -> tuning_pb2.TuningJobSpec:
    msg = tuning_pb2.TuningJobSpec(name="a", workload=common_pb2.Workload(name="lstm"), nodes=["n"])
    for name, value in fields.items():
        if name == "role":
            msg.workload.role = value
        else:
            setattr(msg, name, value)
    return msg


@pytest.mark.parametrize(("fields", "field"), [
    ({"objective": 9}, "spec.objective"),
    ({"method": 9}, "spec.method"),
    ({"role": 7}, "spec.workload.role"),
    ({"name": "Bad_Name"}, "spec.name"),
    ({"risk": 0.9}, "spec.risk"),
    ({"profiles": 1}, "spec.profiles"),
    ({"power_budget_w": 0.0}, "spec.power_budget_w"),
    ({"objective": tuning_pb2.TUNING_OBJECTIVE_MIN_ENERGY}, "spec.time_budget_ms"),
])
def test_a_bad_spec_is_refused_naming_the_field(fields, field):
    with pytest.raises(InvalidArgument) as err:
        serde.spec_from_proto(_spec_msg(**fields))
    assert err.value.field == field


def test_every_phase_has_its_wire_value():
    assert {tuning_pb2.JobPhase.Name(v) for v in serde.JOB_PHASES.values()} == {
        f"JOB_PHASE_{p.name}" for p in JobPhase}
    assert {tuning_pb2.NodePhase.Name(v) for v in serde.NODE_PHASES.values()} == {
        f"NODE_PHASE_{p.name}" for p in NodePhase}
    assert set(serde.OBJECTIVES) == set(JOB_OBJECTIVES) and set(serde.METHODS) == set(TuningMethod)


APPLIED = NodeStatus("orin-agx-1", "orin-agx", NodePhase.APPLIED, reason="", profiled=12,
                     mode=(8.0, 1728.0, 624.75, 3199.0), batch_size=16, power_budget_w=25.0,
                     predicted_time_ms=101.5, predicted_power_w=21.0, predicted_power_upper_w=23.5,
                     measured_time_ms=99.0, measured_power_w=20.5, config_revision=3, started_s=1_700_000_000.5,
                     updated_s=1_700_000_042.25,
                     events=(TuningEvent(1_700_000_000.5, "tuning for 25 W"), TuningEvent(1_700_000_042.25, "applied")))
PROFILING = NodeStatus("nano-1", "nano", NodePhase.PROFILING, profiled=3, started_s=1_700_000_001.0,
                       updated_s=1_700_000_002.0)


@pytest.mark.parametrize("status", [APPLIED, PROFILING, NodeStatus("x"),
                                    NodeStatus("y", "nano", NodePhase.FAILED, reason="no power budget")])
def test_node_status_round_trips(status):
    msg = serde.node_status_to_proto(status)
    assert serde.node_status_from_proto(tuning_pb2.NodeTuningStatus.FromString(msg.SerializeToString())) == status


def test_a_bad_mode_in_a_status_is_refused_naming_the_node():
    msg = serde.node_status_to_proto(APPLIED)
    msg.mode.gpu_mhz = -1.0
    with pytest.raises(InvalidArgument) as err:
        serde.node_status_from_proto(msg)
    assert err.value.field == "nodes[orin-agx-1].mode.gpu_mhz"


JOBS = [
    TuningJobView(SPECS[0], TuningJobStatus("mnv3-train", {"orin-agx-1": APPLIED, "nano-1": PROFILING},
                                            updated_s=1_700_000_050.0), revision=7, created_s=1_699_999_999.0),
    TuningJobView(SPECS[1], None, revision=2, created_s=1_699_999_999.0),  # the leader has not seen it yet
    TuningJobView(SPECS[2], TuningJobStatus("cap", {"orin-agx-1": APPLIED}, updated_s=5.0), revision=9),
]


@pytest.mark.parametrize("job", JOBS, ids=["running", "pending", "succeeded"])
def test_job_round_trips(job):
    msg = serde.job_to_proto(job)
    assert msg.phase == serde.JOB_PHASES[job.phase]
    again = serde.job_from_proto(tuning_pb2.TuningJob.FromString(msg.SerializeToString()))
    assert again == job and again.phase == job.phase and again.to_json() == job.to_json()


def test_a_cancelled_job_reads_back_cancelled():
    job = TuningJobView(TuningJobSpec("c", "x", nodes=("a",), cancelled=True), None, revision=3)
    msg = serde.job_to_proto(job)
    assert msg.phase == tuning_pb2.JOB_PHASE_CANCELLED
    assert serde.job_from_proto(msg) == job


def _profile(**fields) -> profiler_pb2.ProfileRequest:
    base = {"workload": common_pb2.Workload(name="resnet18"), "random_modes": 3}
    return profiler_pb2.ProfileRequest(**{**base, **fields})


@pytest.mark.parametrize(("request_", "field"), [
    (_profile(workload=common_pb2.Workload()), "request.workload.name"),
    (_profile(workload=common_pb2.Workload(name="x:y z")), "request.workload.name"),
    (_profile(random_modes=0), "request.modes"),
    (_profile(random_modes=0, modes=[common_pb2.PowerMode(cores=0, cpu_mhz=1.0, gpu_mhz=1.0, emc_mhz=1.0)]),
     "request.modes[0].cores"),
    (_profile(batch_sizes=[8, 8]), "request.batch_sizes[1]"),
])
def test_a_bad_profiling_request_is_refused_naming_the_field(request_, field):
    with pytest.raises(InvalidArgument) as err:
        profile_job_from_proto(request_, "request.")
    assert err.value.field == field
