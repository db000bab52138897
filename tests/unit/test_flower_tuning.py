"""The Flower strategy's safety policy: the TuningJob it asks for (risk as a probability) and the
round options it plans from (each node's verified choice, or no round at all)."""

from __future__ import annotations

import pytest

pytest.importorskip("flwr", reason="the flower extra (flwr[simulation]) is not installed")

from edgetune.errors import FailedPrecondition, InvalidArgument  # noqa: E402
from edgetune.integrations.flower import Tuning, verified_options  # noqa: E402
from edgetune.proto.serde.tables import table_from_proto  # noqa: E402
from edgetune.proto.v1 import common_pb2, tuning_pb2  # noqa: E402

MODE = common_pb2.PowerMode(cores=8, cpu_mhz=1497.6, gpu_mhz=828.75, emc_mhz=3199.0)


def _node(node_id: str, phase=tuning_pb2.NODE_PHASE_APPLIED, **fields) -> tuning_pb2.NodeTuningStatus:
    return tuning_pb2.NodeTuningStatus(node_id=node_id, phase=phase, mode=MODE, batch_size=32, **fields)


def test_the_job_spec_carries_the_risk_as_a_probability():
    spec = Tuning(risk=0.05, profiles=12, method="random", batch_sizes=(32,)).spec(
        "fl-tuning-1", common_pb2.Workload(name="tiny", role=common_pb2.ROLE_TRAIN), ["b", "a"])
    assert spec.risk == 0.05 and spec.profiles == 12 and spec.method == tuning_pb2.TUNING_METHOD_RANDOM
    assert list(spec.nodes) == ["b", "a"] and list(spec.batch_sizes) == [32] and spec.workload.name == "tiny"
    assert not Tuning().spec("j", common_pb2.Workload(name="tiny"), ["a"]).HasField("risk")  # the policy's default


@pytest.mark.parametrize(("changes", "field"), [({"risk": 1.645}, "tuning.risk"), ({"risk": 0.0}, "tuning.risk"),
                                                ({"profiles": 9}, "tuning.profiles"),
                                                ({"method": "grid"}, "tuning.method"),
                                                ({"batch_sizes": (0,)}, "tuning.batch_sizes[0]"),
                                                ({"timeout_s": 0.0}, "tuning.timeout_s")])
def test_bad_tuning_settings_name_the_field(changes, field):
    with pytest.raises(InvalidArgument) as info:
        Tuning(**changes)
    assert info.value.field == field


def test_a_round_plans_each_nodes_verified_choice_at_the_safer_of_measured_and_bound():
    job = tuning_pb2.TuningJob(spec=tuning_pb2.TuningJobSpec(name="j"), nodes=[
        _node("a", measured_power_w=19.2, measured_time_ms=120.0, predicted_power_upper_w=19.6),
        _node("b", measured_power_w=9.8, measured_time_ms=300.0, predicted_power_upper_w=9.1)])
    options = {k: table_from_proto(v) for k, v in verified_options(job).items()}
    assert sorted(options) == ["a", "b"]
    for node_id, power_w, time_ms in (("a", 19.6, 120.0), ("b", 9.8, 300.0)):
        o = options[node_id]
        assert len(o) == 1 and o.power_w[0] == power_w and o.time_ms[0] == time_ms and o.batch_size[0] == 32
        assert o.modes[0].tolist() == [8, 1497.6, 828.75, 3199.0]


@pytest.mark.parametrize("node", [
    _node("a", phase=tuning_pb2.NODE_PHASE_FAILED, reason="no mode verified within budget after 5 attempts"),
    _node("a", phase=tuning_pb2.NODE_PHASE_VERIFYING, measured_power_w=21.0),
    _node("a", phase=tuning_pb2.NODE_PHASE_APPLIED)])  # applied but never measured: not verified
def test_a_node_without_a_verified_choice_stops_the_round(node):
    with pytest.raises(FailedPrecondition, match="tuning job j: node a"):
        verified_options(tuning_pb2.TuningJob(spec=tuning_pb2.TuningJobSpec(name="j"), nodes=[node]))
