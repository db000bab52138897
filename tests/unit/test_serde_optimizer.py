"""``edgetune.proto.serde.optimizer``: every optimizer record survives record -> message -> record, and
a bad field is refused with an InvalidArgument naming it."""

from __future__ import annotations

import math

import numpy as np
import pytest

from edgetune.base.mode import PowerMode
from edgetune.base.records import BatchEfficiency, Predictions
from edgetune.errors import FailedPrecondition, InvalidArgument
from edgetune.estimation.records import PredictSpec
from edgetune.optimization.records import (
    Asked,
    Best,
    BudgetSweep,
    ConcurrentQuery,
    JointQuery,
    LutRow,
    NextProfilesQuery,
    SearchPoint,
    SearchRequest,
    SelectQuery,
    Started,
    Subset,
    TellResult,
    Told,
    Verdict,
)
from edgetune.proto.serde import optimizer as serde
from edgetune.proto.v1 import common_pb2, optimizer_pb2

MODE = PowerMode(8, 1344.0, 624.75, 3199.0)
OTHER = PowerMode(4, 729.6, 306.0, 2133.0)
POOL = Predictions(np.array([MODE.as_tuple(), OTHER.as_tuple()]), [16, 16], [100.0, 180.0], [25.0, 12.5],
                   [2.0, 3.0], [1.0, 0.5])


def _wire(msg):
    """The message as sent and received: serialized and parsed again."""
    return type(msg).FromString(msg.SerializeToString())


def _same_rows(a: Predictions, b: Predictions) -> None:
    for name in ("modes", "batch_size", "time_ms", "power_w", "time_std_ms", "power_std_w"):
        x, y = getattr(a, name), getattr(b, name)
        assert (x is None) == (y is None), name
        if x is not None:
            np.testing.assert_array_equal(x, y)


def _refusal(fn, *args) -> InvalidArgument:
    with pytest.raises(InvalidArgument) as caught:
        fn(*args)
    return caught.value


# --- round trips ----------------------------------------------------------------------------------
@pytest.mark.parametrize("verdict", [
    Verdict(True, mode=MODE, batch_size=16, time_ms=100.0, power_w=25.0, energy_j=2.5, power_budget_w=30.0,
            power_upper_w=26.6),
    Verdict(True, mode=MODE, batch_size=16, time_ms=100.0, power_w=25.0, latency_ms=80.0, infer_batch_size=4,
            tau_train=3, train_minibatches_per_s=1.5, profiled=12, power_budget_w=30.0, latency_budget_ms=100.0,
            arrival_rps=20.0),
    Verdict(True, batch_size=64, power_w=14.0, mode_id="921.6", time_to_target_s=300.0, power_budget_w=15.0),
    Verdict(False, reason="nothing fits 5 W", power_budget_w=5.0, time_budget_ms=50.0, time_upper_ms=1.0),
    Verdict(False),
])
def test_verdicts_round_trip(verdict):
    assert serde.verdict_from_proto(_wire(serde.verdict_to_proto(verdict))) == verdict


def test_pool_and_subsets_round_trip():
    pool, risk = serde.pareto_from_proto(_wire(serde.pareto_to_proto(POOL, 0.05)))
    _same_rows(pool, POOL)
    assert risk == 0.05
    assert serde.pareto_from_proto(serde.pareto_to_proto(POOL))[1] is None  # 0 on the wire: means only
    subset = Subset((1, 0), POOL.subset([1, 0]))
    for to, back in ((serde.front_to_proto, serde.front_from_proto), (serde.picks_to_proto, serde.picks_from_proto)):
        got = back(_wire(to(subset)))
        assert got.indices == (1, 0)
        _same_rows(got.rows, subset.rows)


def test_select_round_trips():
    for query in (SelectQuery(POOL, "energy", 30.0, 150.0, 0.1, BudgetSweep(17.0, 50.0, 1.0)),
                  SelectQuery(POOL, "power", time_budget_ms=150.0), SelectQuery(POOL)):
        got = serde.select_from_proto(_wire(serde.select_to_proto(query)))
        _same_rows(got.pool, query.pool)
        assert (got.objective, got.power_budget_w, got.time_budget_ms, got.risk, got.sweep) == \
            (query.objective, query.power_budget_w, query.time_budget_ms, query.risk, query.sweep)


def test_the_wire_objectives_are_the_selectors():
    assert serde.objective_from_proto(optimizer_pb2.OBJECTIVE_MIN_POWER) == "power"
    assert serde.objective_from_proto(optimizer_pb2.OBJECTIVE_UNSPECIFIED) == "time"
    assert serde.objective_to_proto("energy") == optimizer_pb2.OBJECTIVE_MIN_ENERGY


def test_next_profiles_round_trips():
    query = NextProfilesQuery(POOL, (OTHER,), 3, 10.0, 30.0)
    got = serde.next_profiles_from_proto(_wire(serde.next_profiles_to_proto(query)))
    _same_rows(got.pool, POOL)
    assert (got.profiled, got.count, got.power_low_w, got.power_high_w) == ((OTHER,), 3, 10.0, 30.0)


def test_joint_round_trips():
    lut = (LutRow(16, "921.6", 12.0, 14.0, MODE), LutRow(64, "1300.5", 8.0, 18.5))
    for cap in (15.0, None):
        query = JointQuery(lut, BatchEfficiency({16: 10.0, 64: math.inf}), cap)
        assert serde.joint_from_proto(_wire(serde.joint_to_proto(query))) == query


def test_joint_efficiency_reads_r_alone_and_never():
    rows = [common_pb2.BatchEfficiency(batch_size=16, r=0.5), common_pb2.BatchEfficiency(batch_size=64)]
    assert serde.efficiency_from_proto(rows) == BatchEfficiency({16: 0.5, 64: math.inf})


def test_concurrent_round_trips():
    query = ConcurrentQuery(POOL, POOL.subset([0]), 30.0, 100.0, 20.0)
    got = serde.concurrent_from_proto(_wire(serde.concurrent_to_proto(query)))
    _same_rows(got.train, query.train)
    _same_rows(got.infer, query.infer)
    assert (got.power_budget_w, got.latency_budget_ms, got.arrival_rps) == (30.0, 100.0, 20.0)


def test_search_round_trips():
    for request in (
        SearchRequest("gmd", "concurrent", 30.0, 100.0, 20.0, "orin-agx", "fulcrum", (), (16,), (1, 4, 8),
                      "resnet18", "mobilenetv3", 40, 3),
        SearchRequest("random", "train", 20.0, modes=(MODE, OTHER)),
    ):
        assert serde.search_from_proto(_wire(serde.search_to_proto(request))) == request


def test_session_answers_round_trip():
    started = Started("abc123", 40)
    assert serde.started_from_proto(_wire(serde.started_to_proto(started))) == started
    asked = Asked((SearchPoint(MODE, "train", 16, "resnet18"), SearchPoint(OTHER, "infer", 4)), False)
    assert serde.asked_from_proto(_wire(serde.asked_to_proto(asked))) == asked
    result = TellResult(6, True)
    assert serde.tell_result_from_proto(_wire(serde.tell_result_to_proto(result))) == result
    best = Best(Verdict(True, mode=MODE, batch_size=16, time_ms=1.0, power_w=2.0, profiled=6, power_budget_w=3.0), True)
    assert serde.best_from_proto(_wire(serde.best_to_proto(best))) == best
    assert serde.ask_from_proto(serde.ask_to_proto("abc123", 5)) == ("abc123", 5)


def test_tell_round_trips():
    told = [Told("measurements[0]", MODE, "train", 16, "resnet18", 100.0, 25.0),
            Told("measurements[1]", OTHER, None, 4, "", 40.0, 0.0)]
    assert serde.tell_from_proto(_wire(serde.tell_to_proto("s1", told))) == ("s1", told)


# --- refusals ---------------------------------------------------------------------------------------
def test_candidates_refusals_name_the_field():
    assert _refusal(serde.pool_from_proto, optimizer_pb2.Candidates()).field == "candidates"
    with pytest.raises(FailedPrecondition, match="candidates.model"):
        serde.pool_from_proto(optimizer_pb2.Candidates(model=optimizer_pb2.ModelCandidates(model_id="m")))
    msg = serde.pool_to_proto(POOL)
    msg.table.power_w[1] = -1.0
    assert _refusal(serde.pool_from_proto, msg).field == "candidates.table.power_w[1]"


def test_select_refusals_name_the_field():
    def select(**fields):
        return serde.select_from_proto(optimizer_pb2.SelectRequest(candidates=serde.pool_to_proto(POOL), **fields))

    assert _refusal(lambda: select(risk=0.9)).field == "risk"
    assert _refusal(lambda: select(objective=9)).field == "objective"
    assert _refusal(lambda: select(budgets=common_pb2.Budgets(power_budget_w=0))).field == "budgets.power_budget_w"
    assert _refusal(lambda: select(budgets=common_pb2.Budgets(time_budget_ms=float("nan")))).field == \
        "budgets.time_budget_ms"


def test_concurrent_refusals_name_the_missing_budget():
    msg = serde.concurrent_to_proto(ConcurrentQuery(POOL, POOL, 30.0, 100.0, 20.0))
    msg.budgets.ClearField("arrival_rps")
    assert _refusal(serde.concurrent_from_proto, msg).field == "budgets.arrival_rps"


@pytest.mark.parametrize("rows, field", [
    ([], "efficiency"),
    ([common_pb2.BatchEfficiency(batch_size=8, r=0.5), common_pb2.BatchEfficiency(batch_size=16, passes_to_target=3)],
     "efficiency"),
    ([common_pb2.BatchEfficiency(batch_size=0, r=1)], "efficiency[0].batch_size"),
    ([common_pb2.BatchEfficiency(batch_size=8, r=1), common_pb2.BatchEfficiency(batch_size=8, r=1)],
     "efficiency[1].batch_size"),
    ([common_pb2.BatchEfficiency(batch_size=8, r=-1)], "efficiency[0].r"),
])
def test_joint_efficiency_refusals_name_the_row(rows, field):
    assert _refusal(serde.efficiency_from_proto, rows).field == field


def test_joint_cap_refusal_names_the_field():
    msg = serde.joint_to_proto(JointQuery((LutRow(16, "a", 1.0, 1.0),), BatchEfficiency({16: 1.0}), 15.0))
    msg.power_cap_w = -3.0
    assert _refusal(serde.joint_from_proto, msg).field == "power_cap_w"


def test_search_refusals_name_the_field():
    ok = serde.search_to_proto(SearchRequest("gmd", "train", 20.0, device="orin-agx"))
    for mutate, field in ((lambda m: setattr(m, "strategy", 0), "strategy"),
                          (lambda m: setattr(m, "problem", 77), "problem"),
                          (lambda m: setattr(m, "grid", 42), "grid"),
                          (lambda m: setattr(m.budgets, "power_budget_w", float("inf")), "budgets.power_budget_w"),
                          (lambda m: m.modes.add(cores=0), "modes[0].cores")):
        msg = optimizer_pb2.StartSearchRequest()
        msg.CopyFrom(ok)
        mutate(msg)
        assert _refusal(serde.search_from_proto, msg).field == field
    with pytest.raises(FailedPrecondition, match="guide_model_id"):
        serde.search_from_proto(optimizer_pb2.StartSearchRequest(strategy=optimizer_pb2.STRATEGY_NN,
                                                                 problem=optimizer_pb2.PROBLEM_TRAIN,
                                                                 guide_model_id="m"))


@pytest.mark.parametrize("mutate, field", [
    (lambda m: setattr(m.mode, "cores", 0), "measurements[0].mode.cores"),
    (lambda m: setattr(m, "role", 9), "measurements[0].role"),
    (lambda m: setattr(m, "batch_size", 0), "measurements[0].batch_size"),
    (lambda m: setattr(m, "time_ms", 0.0), "measurements[0].time_ms"),
    (lambda m: setattr(m, "power_w", float("nan")), "measurements[0].power_w"),
])
def test_told_refusals_name_the_field(mutate, field):
    msg = serde.told_to_proto(Told("measurements[0]", MODE, "train", 16, "", 100.0, 25.0))
    mutate(msg)
    assert _refusal(serde.told_from_proto, 0, msg).field == field


def test_a_select_naming_its_candidates_by_model_round_trips():
    query = SelectQuery(PredictSpec("tuning-x@3", "orin-agx", grid="fulcrum", batch_sizes=(16,)), power_budget_w=30.0)
    assert serde.select_from_proto(_wire(serde.select_to_proto(query))) == query
    with pytest.raises(InvalidArgument, match="candidates.model.model_id"):
        serde.select_from_proto(optimizer_pb2.SelectRequest(candidates=optimizer_pb2.Candidates(
            model=optimizer_pb2.ModelCandidates(device="orin-agx"))))
