"""measurement_to_proto / measurement_from_proto: a profiling Measurement to the wire and back to
the stored record (whose row is the CONTRACT profile-table row)."""

from __future__ import annotations

import pytest

from edgetune.devices.simulated.device import SimulatedJetson
from edgetune.errors import InvalidArgument
from edgetune.profiling import ProfileConfig, Profiler
from edgetune.proto.serde.common import measurement_from_proto, measurement_to_proto
from edgetune.proto.v1 import common_pb2
from edgetune.store import MeasurementRecord


@pytest.fixture(scope="module")
def measurement():
    device = SimulatedJetson("orin-agx", seed=3)
    mode = device.spec.minimum()
    return Profiler(device, ProfileConfig(n_minibatches=10, node="n1")).measure(mode, "resnet18", "infer", 8)


def test_to_proto_carries_every_field(measurement):
    m = measurement
    msg = measurement_to_proto(m, timestamp_s=1_700_000_000.25)
    assert msg.id == m.id and msg.node_id == "n1" and msg.device == "orin-agx" and msg.workload == "resnet18"
    assert msg.role == common_pb2.ROLE_INFER and msg.batch_size == 8 and msg.minibatches == 10
    assert (msg.mode.cores, msg.mode.cpu_mhz, msg.mode.gpu_mhz, msg.mode.emc_mhz) == m.mode.as_tuple()
    assert msg.time_ms == m.time_ms and msg.power_w == m.power_w and msg.peak_power_w == m.peak_power_w
    assert msg.energy_j == pytest.approx(m.energy_per_minibatch_j)  # the proto's energy is per minibatch
    assert msg.timestamp.ToNanoseconds() == 1_700_000_000_250_000_000
    assert measurement_to_proto(m, node_id="other").node_id == "other"
    assert not measurement_to_proto(m).HasField("timestamp")


def test_round_trip_gives_the_stored_record_and_the_profile_row(measurement):
    record = measurement_from_proto(measurement_to_proto(measurement))
    assert isinstance(record, MeasurementRecord)
    stored = MeasurementRecord.from_row(measurement.to_row())  # what the agent stores of it
    assert (record.id, record.device_model, record.node_id, record.workload, record.role, record.mode,
            record.batch_size, record.time_ms, record.power_w) == (
        stored.id, stored.device_model, stored.node_id, stored.workload, stored.role, stored.mode,
        stored.batch_size, stored.time_ms, stored.power_w)
    row = record.to_row()
    expected = measurement.to_row()
    for key, value in row.items():
        assert value == pytest.approx(expected[key]) if isinstance(value, float) else value == expected[key], key
    assert list(row)[:7] == ["cores", "cpu_mhz", "gpu_mhz", "emc_mhz", "batch_size", "time_ms", "power_w"]
    assert MeasurementRecord.from_json(record.to_json()) == record  # and it stores as it came


def test_from_proto_refuses_a_message_without_a_mode_role_or_id(measurement):
    with pytest.raises(InvalidArgument, match="measurement.mode.cores"):
        measurement_from_proto(common_pb2.Measurement(role=common_pb2.ROLE_TRAIN))
    msg = measurement_to_proto(measurement)
    msg.role = common_pb2.ROLE_UNSPECIFIED
    with pytest.raises(InvalidArgument, match="event.measurement.role"):
        measurement_from_proto(msg, "event.measurement")
    msg = measurement_to_proto(measurement)
    msg.id = ""
    with pytest.raises(InvalidArgument, match="measurement.id"):
        measurement_from_proto(msg)
