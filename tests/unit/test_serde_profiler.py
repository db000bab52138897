"""edgetune.proto.serde.profiler: the node agent's records to profiler.proto messages and back (equal
records), and the refusals naming the field."""

from __future__ import annotations

from dataclasses import replace

import pytest

from edgetune.base.mode import PowerMode
from edgetune.base.roles import Role
from edgetune.devices.base import DeviceInfo, PowerSample
from edgetune.errors import InvalidArgument
from edgetune.powermodes.specs import get_spec
from edgetune.profiling import Measurement, PointSkipped, ProfileProgress
from edgetune.proto.serde import profiler as serde
from edgetune.proto.serde.common import mode_to_proto
from edgetune.proto.v1 import common_pb2, profiler_pb2
from edgetune.store import MeasurementRecord, ProfileJob

ORIN = get_spec("orin-agx")
LOW, HIGH = ORIN.minimum(), ORIN.maxn()
WL = common_pb2.Workload(name="resnet18")

JOBS = [
    ProfileJob("resnet18", random_modes=5),  # every other field its default
    ProfileJob("mobilenetv3", Role.INFER, modes=(LOW, HIGH), batch_sizes=(8, 32), n_minibatches=5,
               warmup_minibatches=0, sample_rate_hz=4.0, power_limit_w=25.0, descending_order=True),
    ProfileJob("sensor_cnn:make", random_modes=20, random_grid="fulcrum", seed=7, batch_sizes=(16, 64)),
]


@pytest.mark.parametrize("job", JOBS, ids=["defaults", "listed", "random"])
def test_a_profile_job_round_trips_through_a_profile_request(job):
    msg = serde.profile_job_to_proto(job)
    assert serde.profile_job_from_proto(msg) == job
    assert serde.profile_job_from_proto(msg, "request.") == job  # the prefix only names fields


def test_a_requests_zero_values_are_the_jobs_defaults():
    job = serde.profile_job_from_proto(profiler_pb2.ProfileRequest(workload=WL, random_modes=3))
    assert job == ProfileJob("resnet18", Role.TRAIN, random_modes=3, random_grid="full", seed=0, batch_sizes=(16,),
                             n_minibatches=40, warmup_minibatches=1, sample_rate_hz=1.0, power_limit_w=None)
    sized = serde.profile_job_from_proto(profiler_pb2.ProfileRequest(
        workload=common_pb2.Workload(name="resnet18", batch_size=32), random_modes=3, warmup_minibatches=-1))
    assert sized.batch_sizes == (32,) and sized.warmup_minibatches == 0  # -1 on the wire: no warm-up
    assert serde.profile_job_to_proto(sized).warmup_minibatches == -1


def _mode(**kw) -> common_pb2.PowerMode:
    return common_pb2.PowerMode(**{**HIGH.as_dict(), **kw})


@pytest.mark.parametrize(("msg", "field"), [
    (profiler_pb2.ProfileRequest(random_modes=2), "workload.name"),
    (profiler_pb2.ProfileRequest(workload=common_pb2.Workload(name="not a:spec!"), random_modes=2), "workload.name"),
    (profiler_pb2.ProfileRequest(workload=common_pb2.Workload(name="resnet18", role=9), random_modes=2),
     "workload.role"),
    (profiler_pb2.ProfileRequest(workload=WL), "modes"),
    (profiler_pb2.ProfileRequest(workload=WL, random_modes=2, modes=[_mode()]), "random_modes"),
    (profiler_pb2.ProfileRequest(workload=WL, modes=[_mode(), _mode(cores=0)]), "modes[1].cores"),
    (profiler_pb2.ProfileRequest(workload=WL, random_modes=-1), "random_modes"),
    (profiler_pb2.ProfileRequest(workload=WL, random_modes=2, random_grid=99), "random_grid"),
    (profiler_pb2.ProfileRequest(workload=WL, random_modes=2, batch_sizes=[16, 16]), "batch_sizes[1]"),
    (profiler_pb2.ProfileRequest(workload=common_pb2.Workload(name="resnet18", batch_size=-4), random_modes=2),
     "workload.batch_size"),
    (profiler_pb2.ProfileRequest(workload=WL, random_modes=2, n_minibatches=-1), "n_minibatches"),
    (profiler_pb2.ProfileRequest(workload=WL, random_modes=2, warmup_minibatches=-2), "warmup_minibatches"),
    (profiler_pb2.ProfileRequest(workload=WL, random_modes=2, sample_rate_hz=-1), "sample_rate_hz"),
    (profiler_pb2.ProfileRequest(workload=WL, random_modes=2, power_limit_w=0), "power_limit_w"),
    (profiler_pb2.ProfileRequest(workload=WL, random_modes=2, seed=-1), "seed"),
])
def test_a_bad_profile_request_is_refused_naming_the_field(msg, field):
    for prefix in ("", "request."):
        with pytest.raises(InvalidArgument) as err:
            serde.profile_job_from_proto(msg, prefix)
        assert err.value.field == prefix + field


def _measurement() -> Measurement:
    return Measurement(id="m-1", device="orin-agx", node="jetson-7", workload="resnet18", role="train", mode=LOW,
                       batch_size=16, time_ms=120.5, time_std_ms=1.5, power_w=14.25, power_std_w=0.5,
                       peak_power_w=16.0, energy_j=68.4, energy_per_minibatch_j=1.71, idle_power_w=6.0,
                       energy_above_idle_j=40.0, samples=5, n_minibatches=40, duration_s=4.8, settled=True,
                       settle_s=1.0)


def test_progress_and_skipped_events_round_trip():
    for event in (ProfileProgress("measuring", 3, 20, "4c/422/115/665 batch 16"), ProfileProgress("done", 20, 20),
                  PointSkipped(HIGH, 32, "52.10 W is over the 25.00 W limit")):
        assert serde.profile_event_from_proto(serde.profile_event_to_proto(event)) == event


def test_a_measurement_event_comes_back_as_the_record_it_stores():
    m = _measurement()
    msg = serde.profile_event_to_proto(m, timestamp_s=1_700_000_000.5)
    assert msg.measurement.timestamp.ToNanoseconds() == 1_700_000_000_500_000_000
    back = serde.profile_event_from_proto(msg)
    assert isinstance(back, MeasurementRecord)
    assert (back.id, back.device_model, back.node_id, back.workload, back.role, back.mode, back.batch_size) == \
        ("m-1", "orin-agx", "jetson-7", "resnet18", "train", LOW, 16)
    assert (back.time_ms, back.power_w) == (m.time_ms, m.power_w)
    assert back.extra["energy_j"] == pytest.approx(m.energy_j) and back.extra["peak_power_w"] == m.peak_power_w


def test_an_event_with_nothing_set_is_refused():
    with pytest.raises(InvalidArgument) as err:
        serde.profile_event_from_proto(profiler_pb2.ProfileEvent())
    assert err.value.field == "event"
    with pytest.raises(InvalidArgument) as err:
        serde.profile_event_from_proto(profiler_pb2.ProfileEvent(skipped=profiler_pb2.ProfileSkipped(batch_size=4)))
    assert err.value.field == "skipped.mode.cores"


def test_device_info_round_trips():
    spec = replace(ORIN, extra={})  # ``extra`` is library-internal: never sent (and not compared)
    info = DeviceInfo(spec, "sim", HIGH, ("resnet18", "mobilenetv3"), ("VDD_IN",), "jetson-7")
    back = serde.device_info_from_proto(serde.device_info_to_proto(info))
    assert back == info and back.spec.core_counts == ORIN.core_counts and back.spec.presets == ORIN.presets
    with pytest.raises(InvalidArgument) as err:
        serde.device_info_from_proto(profiler_pb2.GetDeviceResponse(spec=serde.device_info_to_proto(info).spec))
    assert err.value.field == "current_mode.cores"


@pytest.mark.parametrize("target", [HIGH, "MODE_30W", 0])
def test_an_apply_target_round_trips(target):
    assert serde.apply_target_from_proto(serde.apply_request_to_proto(target)) == target


def test_an_apply_request_without_a_target_or_with_a_bad_mode_is_refused():
    with pytest.raises(InvalidArgument) as err:
        serde.apply_target_from_proto(profiler_pb2.ApplyPowerModeRequest())
    assert err.value.field == "target"
    with pytest.raises(InvalidArgument) as err:
        serde.apply_target_from_proto(profiler_pb2.ApplyPowerModeRequest(mode=_mode(emc_mhz=-1)))
    assert err.value.field == "mode.emc_mhz"


def test_mode_changes_round_trip():
    assert serde.applied_from_proto(serde.applied_to_proto(LOW, HIGH)) == (LOW, HIGH)
    assert serde.restored_from_proto(serde.restored_to_proto(HIGH, True)) == (HIGH, True)
    with pytest.raises(InvalidArgument) as err:
        serde.applied_from_proto(profiler_pb2.ApplyPowerModeResponse(applied=mode_to_proto(LOW)))
    assert err.value.field == "previous.cores"


def test_power_samples_round_trip_with_and_without_rails():
    for sample in (PowerSample(12.5, 14.25), PowerSample(12.5, 14.25, {"VDD_IN": 14.25, "VDD_GPU_SOC": 6.5})):
        msg = serde.power_sample_to_proto(sample, timestamp_s=1_700_000_000.25)
        assert msg.timestamp.ToNanoseconds() == 1_700_000_000_250_000_000
        assert serde.power_sample_from_proto(msg) == sample
    assert not serde.power_sample_to_proto(PowerSample(0.0, 5.0)).HasField("timestamp")
    request = serde.stream_power_request(50.0, 3, True)
    assert (request.sample_rate_hz, request.max_samples, request.include_rails) == (50.0, 3, True)


def test_a_page_of_modes():
    page = serde.power_modes_page_to_proto([LOW, HIGH], "next", 441)
    assert [PowerMode(m.cores, m.cpu_mhz, m.gpu_mhz, m.emc_mhz) for m in page.modes] == [LOW, HIGH]
    assert (page.next_page_token, page.total_size) == ("next", 441)
