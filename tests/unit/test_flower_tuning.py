"""The Flower strategy's safety policy: the TuningJob it asks for (risk as a probability) and the
round options it plans from (each node's verified choice, or no round at all)."""

from __future__ import annotations

import pytest

pytest.importorskip("flwr", reason="the flower extra (flwr[simulation]) is not installed")

from edgetune.base.roles import Role  # noqa: E402
from edgetune.errors import FailedPrecondition, InvalidArgument  # noqa: E402
from edgetune.integrations.flower import Tuning, verified_options  # noqa: E402
from edgetune.tuning.jobs import (  # noqa: E402
    NodePhase,
    NodeStatus,
    TuningJobSpec,
    TuningJobStatus,
    TuningJobView,
    TuningMethod,
)

MODE = (8.0, 1497.6, 828.75, 3199.0)


def _node(node_id: str, phase=NodePhase.APPLIED, **fields) -> NodeStatus:
    return NodeStatus(node_id=node_id, phase=phase, mode=MODE, batch_size=32, **fields)


def _job(*nodes: NodeStatus) -> TuningJobView:
    spec = TuningJobSpec("j", "tiny", nodes=tuple(n.node_id for n in nodes))
    return TuningJobView(spec, TuningJobStatus("j", {n.node_id: n for n in nodes}), revision=1)


def test_the_job_spec_carries_the_risk_as_a_probability():
    spec = Tuning(risk=0.05, profiles=12, method="random", batch_sizes=(32,)).spec(
        "fl-tuning-1", "tiny", Role.TRAIN, ["b", "a"])
    assert spec.risk == 0.05 and spec.profiles == 12 and spec.method == TuningMethod.RANDOM
    assert spec.nodes == ("b", "a") and spec.batch_sizes == (32,) and spec.workload == "tiny"
    assert spec.check() == spec
    assert Tuning().spec("j", "tiny", Role.TRAIN, ["a"]).risk is None  # the policy's default


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
    job = _job(_node("a", measured_power_w=19.2, measured_time_ms=120.0, predicted_power_upper_w=19.6),
               _node("b", measured_power_w=9.8, measured_time_ms=300.0, predicted_power_upper_w=9.1))
    options = verified_options(job)
    assert sorted(options) == ["a", "b"]
    for node_id, power_w, time_ms in (("a", 19.6, 120.0), ("b", 9.8, 300.0)):
        o = options[node_id]
        assert len(o) == 1 and o.power_w[0] == power_w and o.time_ms[0] == time_ms and o.batch_size[0] == 32
        assert o.modes[0].tolist() == [8, 1497.6, 828.75, 3199.0]


@pytest.mark.parametrize("node", [
    _node("a", phase=NodePhase.FAILED, reason="no mode verified within budget after 5 attempts"),
    _node("a", phase=NodePhase.VERIFYING, measured_power_w=21.0),
    _node("a", phase=NodePhase.APPLIED)])  # applied but never measured: not verified
def test_a_node_without_a_verified_choice_stops_the_round(node):
    with pytest.raises(FailedPrecondition, match="tuning job j: node a is NODE_PHASE_"):
        verified_options(_job(node))
