"""The request limits and their rules, without a server: the descriptor walk, node ids, parameters,
device tables, capped messages, cooperative stopping."""

from __future__ import annotations

import math
import threading

import pytest

from edgetune import stopping, validation
from edgetune.errors import InvalidArgument
from edgetune.proto.v1 import common_pb2, coordinator_pb2, estimator_pb2, tuning_pb2
from edgetune.services.common.limits import LimitsInterceptor, ResourceExhausted, check_request


def _refused(msg) -> InvalidArgument:
    with pytest.raises(InvalidArgument) as info:
        check_request(msg)
    return info.value


def test_the_walk_names_the_field_at_any_depth():
    ok = coordinator_pb2.PlanRoundRequest(nodes=[coordinator_pb2.NodeRound(
        node_id="n-1.a:b", options=common_pb2.PredictionTable(time_ms=[1.0, math.inf]))])
    check_request(ok)  # infinity keeps its meaning; only NaN is refused in a list
    bad = coordinator_pb2.PlanRoundRequest(nodes=[coordinator_pb2.NodeRound(
        node_id="n", options=common_pb2.PredictionTable(time_ms=[1.0, 2.0, math.nan]))])
    assert _refused(bad).field == "nodes[0].options.time_ms[2]"
    assert _refused(coordinator_pb2.PlanRoundRequest(nodes=[coordinator_pb2.NodeRound(node_id="a/b")])).field \
        == "nodes[0].node_id"
    assert _refused(tuning_pb2.TuningJobSpec(nodes=["ok", "x" * 129])).field == "nodes[1]"
    assert _refused(coordinator_pb2.PlanRoundRequest(round_id="r" * 5000)).field == "round_id"
    assert _refused(estimator_pb2.FitRequest(params={f"k{i}": "v" for i in range(2000)})).field == "params"
    assert _refused(tuning_pb2.TuningJobSpec(node_power_budget_w={"n": math.nan})).field \
        == "node_power_budget_w['n']"
    check_request(coordinator_pb2.HeartbeatRequest())  # unset fields are not checked


def test_an_oversized_value_is_never_echoed():
    huge = "z" * (2 * 2**20)
    exc = _refused(coordinator_pb2.HeartbeatRequest(node_id=huge))
    assert exc.field == "node_id" and len(str(exc)) < 300 and "z" * 100 not in str(exc)
    long_message = InvalidArgument("f", "m" * 10_000, "a" * 10_000)
    assert len(long_message.message) <= 1024 and len(long_message.allowed or "") <= 1024
    assert len(validation.shown("q" * 10_000)) < 120


@pytest.mark.parametrize("value", ["", " n", "a" * 129, "a/b", "-x", "n\n", "é"])
def test_node_ids(value):
    with pytest.raises(InvalidArgument):
        validation.node_id(value)


def test_parameters_take_the_type_of_their_default():
    assert validation.parameter(0.01, 0.001, "params.lr") == 0.01
    assert validation.parameter(5, 100, "params.epochs") == 5
    for value, default, name in (("banana", 0.001, "params.lr"), (math.nan, 0.001, "params.lr"),
                                 (0.0, 0.001, "params.transfer_lr"), (-1.0, 0.1, "params.dropout"),
                                 (1.5, 100, "params.epochs"), (10**9, 100, "params.epochs"),
                                 (1, True, "params.flag"), (3, "all", "params.transfer_mode")):
        with pytest.raises(InvalidArgument) as info:
            validation.parameter(value, default, name)
        assert info.value.field == name


def test_device_tables():
    validation.device_tables([1, 2], {"cpu_mhz": [100.0], "gpu_mhz": [1.0], "emc_mhz": [2.0]})
    for cores, cpu, field in (([0], [1.0], "device.core_counts[0]"), ([1], [math.nan], "device.cpu_mhz[0]"),
                              ([1], [1.0, -2.0], "device.cpu_mhz[1]"), ([1], [], "device.cpu_mhz"),
                              ([1], [1.0] * 2000, "device.cpu_mhz")):
        with pytest.raises(InvalidArgument) as info:
            validation.device_tables(cores, {"cpu_mhz": cpu, "gpu_mhz": [1.0], "emc_mhz": [1.0]})
        assert info.value.field == field


def test_admission_counts_heavy_calls():
    limits = LimitsInterceptor(max_heavy=2)
    limits.slots.acquire("", "admin")  # anonymous (no authentication): one admin, every slot
    limits.slots.acquire("", "admin")
    assert limits.in_flight == 2
    with pytest.raises(ResourceExhausted):
        limits.slots.acquire("", "admin")
    limits.slots.release("", "admin")
    limits.slots.acquire("", "admin")
    assert limits.in_flight == 2


def test_heavy_slots_are_shared_by_role_and_caller():
    slots = LimitsInterceptor(max_heavy=4).slots
    slots.acquire("token:vera", "viewer")
    slots.acquire("token:val", "viewer")
    with pytest.raises(ResourceExhausted, match="kept for operators"):  # viewers hold half at most
        slots.acquire("token:vic", "viewer")
    slots.acquire("token:alice", "operator")
    slots.release("token:vera", "viewer")
    slots.release("token:val", "viewer")
    slots.acquire("token:alice", "operator")
    slots.acquire("token:alice", "operator")
    with pytest.raises(ResourceExhausted, match="this caller already runs 3"):  # one caller never takes all
        slots.acquire("token:alice", "operator")
    slots.acquire("token:bob", "operator")
    assert slots.running == 4
    with pytest.raises(ResourceExhausted, match="4 heavy calls"):
        slots.acquire("token:root", "admin")


def test_stopping_is_per_thread_and_only_inside_stop_when():
    stopping.check()  # outside: never stops
    seen: list[bool] = []

    def other() -> None:
        try:
            stopping.check()
            seen.append(False)
        except stopping.Stopped:
            seen.append(True)

    with stopping.stop_when(lambda: True):
        with pytest.raises(stopping.Stopped):
            stopping.check()
        t = threading.Thread(target=other)
        t.start()
        t.join()
    assert seen == [False]  # another thread's work is not this caller's
    stopping.check()
