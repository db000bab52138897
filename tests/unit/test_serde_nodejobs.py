"""proto.serde.nodejobs: a queue job and a measurement row to their messages and back; the refusals."""

from __future__ import annotations

import pytest

from edgetune.errors import InvalidArgument
from edgetune.proto.serde.nodejobs import (
    acknowledged,
    job_from_proto,
    job_to_proto,
    measurements_from_proto,
)
from edgetune.proto.v1 import common_pb2, nodejobs_pb2
from edgetune.store import Job

MESSAGE = common_pb2.Measurement(
    id="feedfacefeedface", node_id="jetson-b", device="orin-agx", workload="resnet18", role=common_pb2.ROLE_TRAIN,
    mode=common_pb2.PowerMode(cores=8, cpu_mhz=1728.0, gpu_mhz=930.75, emc_mhz=3199.0), batch_size=16, time_ms=120.5,
    power_w=21.25, peak_power_w=24.0, energy_j=2.55, minibatches=20, samples=40)


def test_a_job_round_trips():
    job = Job(node_id="jetson-a", job_id="j-1", entry_id="1700000000000-0",
              payload={"workload": {"name": "resnet18"}, "random_modes": 4}, consumer="host-42", deliveries=2)
    assert job_from_proto(job_to_proto(job), "jetson-a", "host-42") == job


def test_a_measurement_becomes_a_record_of_the_jobs_node_whatever_it_names():
    (record,) = measurements_from_proto([MESSAGE], "jetson-a")
    assert record.node_id == "jetson-a" and record.id == MESSAGE.id and record.time_ms == MESSAGE.time_ms
    assert record.mode.gpu_mhz == 930.75 and record.batch_size == 16 and record.role == "train"


@pytest.mark.parametrize("payload, why", [("{", "not JSON"), ("[1, 2]", "a JSON list"), ("x" * 1_000_001, "characters")])
def test_a_bad_payload_names_the_field(payload, why):
    with pytest.raises(InvalidArgument, match=why) as err:
        job_from_proto(nodejobs_pb2.NodeJob(job_id="j", entry_id="1-0", payload_json=payload), "n", "c")
    assert err.value.field == "payload_json"


def test_bad_measurements_and_acknowledgements_name_the_field():
    bad = common_pb2.Measurement()
    bad.CopyFrom(MESSAGE)
    bad.id = ""
    with pytest.raises(InvalidArgument) as err:
        measurements_from_proto([MESSAGE, bad], "jetson-a")
    assert err.value.field.startswith("measurements[1]") and err.value.field.endswith("id")
    with pytest.raises(InvalidArgument) as err:
        measurements_from_proto([common_pb2.Measurement(id="x")], "jetson-a")
    assert err.value.field.startswith("measurements[0]")
    for job_id, entry_id, field in (("", "1-0", "job_id"), ("j", "", "entry_id")):
        with pytest.raises(InvalidArgument) as err:
            acknowledged("jetson-a", job_id, entry_id)
        assert err.value.field == field
