"""The Optimizer service through generated client stubs: in-process servers on 127.0.0.1:0 over
an embedded Redis, and one optimizer as a separate process (``python -m
edgetune.services.optimizer.server``) sharing an embedded Redis over TCP with the test.

Every answer is checked against the library called directly: Pareto fronts, selections and
sweeps, Ahmed et al.'s joint selection, Fulcrum's concurrent problem, and whole search sessions
driven by a client that profiles the asked points on a ReplayDevice of a simulator truth table.
"""

from __future__ import annotations

import dataclasses
import json
import os
import queue
import signal
import subprocess
import sys
import threading

import grpc
import numpy as np
import pytest
from click.testing import CliRunner
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from edgetune.base.mode import PowerMode
from edgetune.base.records import BatchEfficiency, Predictions
from edgetune.base.risk import z_score
from edgetune.cli.optimize import command as optimize_cli
from edgetune.clients.optimizer import OptimizerClient
from edgetune.clients.tuning import OptimizerSelector
from edgetune.devices.replay import ReplayDevice
from edgetune.devices.simulated.tables import COLUMNS, truth_table
from edgetune.errors import FailedPrecondition
from edgetune.estimation.records import PredictSpec
from edgetune.optimization.frontier import next_frontier_modes
from edgetune.optimization.joint import JointLUT, joint_select
from edgetune.optimization.pareto import pareto_front
from edgetune.optimization.problems import ConcurrentProblem, InferProblem, Observations, Point, TrainProblem
from edgetune.optimization.records import SearchRequest, SelectQuery, Told
from edgetune.optimization.select import Candidates, MinEnergy, MinPower, MinTime
from edgetune.optimization.sessions import REVISION_CONFLICTS, SessionStore, space_ref
from edgetune.optimization.strategies import SearchSpace, make_strategy, run_search
from edgetune.powermodes.grids import named_grid
from edgetune.powermodes.specs import get_spec
from edgetune.proto.serde.common import mode_from_proto, mode_to_proto
from edgetune.proto.serde.tables import table_from_proto, table_to_proto
from edgetune.proto.v1 import common_pb2, optimizer_pb2, optimizer_pb2_grpc
from edgetune.services.optimizer.server import create_server
from edgetune.services.optimizer.servicer import ModelPools
from edgetune.store import EmbeddedRedisServer, open_store
from edgetune.tables import Table
from edgetune.validation import budget_sweep

ORIN = get_spec("orin-agx")
FULCRUM = named_grid(ORIN, "fulcrum")
INFER_SIZES = (1, 4, 16, 32, 64)
ROLE = {common_pb2.ROLE_TRAIN: "train", common_pb2.ROLE_INFER: "infer"}
ROLE_ENUM = {name: value for value, name in ROLE.items()}


# --- fixtures ---------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def store():
    s = open_store("embedded")
    yield s
    s.close()


def _start(store):
    server, servicer = create_server(port=0, host="127.0.0.1", metrics_port=None, store=store, grace_s=1.0,
                                     max_workers=8)
    server.start()
    return server, grpc.insecure_channel(server.address)


@pytest.fixture
def optimizer(store):
    server, channel = _start(store)
    yield optimizer_pb2_grpc.OptimizerStub(channel)
    channel.close()
    server.stop(0)


@pytest.fixture(scope="module")
def truth():
    """Simulator truth on the 441-mode Fulcrum grid: resnet18 training (bs 16), mobilenetv3
    inference (Fulcrum's five batch sizes), as one ReplayDevice and the raw rows."""
    train = truth_table(ORIN, "resnet18", "train", FULCRUM.modes(), [16])
    infer = truth_table(ORIN, "mobilenetv3", "infer", FULCRUM.modes(), INFER_SIZES)
    return ReplayDevice(Table(list(COLUMNS), train + infer)), train, infer


def _table(rows, power_std=None) -> optimizer_pb2.Candidates:
    arrays = Predictions.from_rows(rows)
    if power_std is not None:
        arrays = dataclasses.replace(arrays, power_std_w=np.asarray(power_std, dtype=float))
    return optimizer_pb2.Candidates(table=table_to_proto(arrays))


def _cands(rows, power_std=None) -> Candidates:
    return Candidates(np.array([r["time_ms"] for r in rows]), np.array([r["power_w"] for r in rows]),
                      None, power_std)


def _same_row(decision: common_pb2.Decision, row: dict) -> None:
    assert decision.feasible
    assert mode_from_proto(decision.mode).as_dict() == PowerMode.from_mapping(row).as_dict()
    assert (decision.batch_size, decision.time_ms, decision.power_w) == (row["batch_size"], row["time_ms"],
                                                                         row["power_w"])


def _code(call, request, code: grpc.StatusCode, field: str) -> str:
    with pytest.raises(grpc.RpcError) as info:
        call(request)
    assert info.value.code() == code, info.value.details()
    assert field in info.value.details(), info.value.details()
    return info.value.details()


# --- health, reflection -----------------------------------------------------------------------------
def test_health_serving_and_reflection_lists_the_optimizer(store):
    server, channel = _start(store)
    try:
        health = health_pb2_grpc.HealthStub(channel)
        for service in ("", "edgetune.v1.Optimizer"):
            assert health.Check(health_pb2.HealthCheckRequest(service=service)).status == \
                health_pb2.HealthCheckResponse.SERVING
        refl = reflection_pb2_grpc.ServerReflectionStub(channel)
        answer = next(refl.ServerReflectionInfo(iter([reflection_pb2.ServerReflectionRequest(list_services="")])))
        names = {s.name for s in answer.list_services_response.service}
        assert {"edgetune.v1.Optimizer", "grpc.health.v1.Health"} <= names
    finally:
        channel.close()
        server.stop(0)


# --- Pareto, selection --------------------------------------------------------------------------------
def test_pareto_front_equals_the_library(optimizer, truth):
    _, train, _ = truth
    rows = truth_table(ORIN, "resnet18", "train", FULCRUM.modes(), [8, 16, 32])
    got = optimizer.ParetoFront(optimizer_pb2.ParetoFrontRequest(candidates=_table(rows)))
    want = pareto_front([r["time_ms"] for r in rows], [r["power_w"] for r in rows])[::-1]
    assert list(got.indices) == list(want) and len(want) > 5
    front = table_from_proto(got.front)
    assert list(front.power_w) == sorted(front.power_w)  # ascending power
    for j, i in enumerate(got.indices):
        assert (front.time_ms[j], front.power_w[j], front.batch_size[j]) == (rows[i]["time_ms"], rows[i]["power_w"],
                                                                             rows[i]["batch_size"])
        assert front.mode(j) == PowerMode.from_mapping(rows[i])
    # std-aware: the front of the upper bounds
    std = np.linspace(0.0, 3.0, len(rows))
    got = optimizer.ParetoFront(optimizer_pb2.ParetoFrontRequest(candidates=_table(rows, std), risk=0.05))
    want = pareto_front([r["time_ms"] for r in rows],
                        np.array([r["power_w"] for r in rows]) + z_score(0.05) * std)[::-1]
    assert list(got.indices) == list(want)


def test_next_profiles_equals_the_library_and_names_bad_fields(optimizer):
    rows = truth_table(ORIN, "resnet18", "train", FULCRUM.modes(), [16])
    profiled = [PowerMode.from_mapping(r) for r in rows[::30]]
    request = optimizer_pb2.NextProfilesRequest(candidates=_table(rows), profiled=[mode_to_proto(m) for m in profiled],
                                                count=4, power_low_w=20, power_high_w=40)
    got = optimizer.NextProfiles(request)
    want = next_frontier_modes([r["time_ms"] for r in rows], [r["power_w"] for r in rows], list(range(0, len(rows), 30)),
                               4, power_range_w=(20, 40))
    assert list(got.indices) == list(want) and len(want) == 4
    picks = table_from_proto(got.picks)
    assert [picks.mode(j) for j in range(len(picks))] == [PowerMode.from_mapping(rows[i]) for i in want]
    assert not {picks.mode(j) for j in range(len(picks))} & set(profiled)
    # defaults: count 0 -> 5, no range -> any power
    assert len(optimizer.NextProfiles(optimizer_pb2.NextProfilesRequest(candidates=_table(rows))).picks.time_ms) == 5
    bad = optimizer_pb2.NextProfilesRequest(candidates=_table(rows), count=-1)
    _code(optimizer.NextProfiles, bad, grpc.StatusCode.INVALID_ARGUMENT, "count")
    bad = optimizer_pb2.NextProfilesRequest(candidates=_table(rows), power_low_w=40, power_high_w=20)
    _code(optimizer.NextProfiles, bad, grpc.StatusCode.INVALID_ARGUMENT, "power_low_w")
    mixed = truth_table(ORIN, "resnet18", "train", FULCRUM.modes(), [8, 16])
    _code(optimizer.NextProfiles, optimizer_pb2.NextProfilesRequest(candidates=_table(mixed)),
          grpc.StatusCode.INVALID_ARGUMENT, "batch sizes")


@pytest.mark.parametrize(("objective", "selector", "power", "time_ms"), [
    (optimizer_pb2.OBJECTIVE_MIN_TIME, MinTime(), 30.0, None),
    (optimizer_pb2.OBJECTIVE_UNSPECIFIED, MinTime(), 22.5, None),
    (optimizer_pb2.OBJECTIVE_MIN_POWER, MinPower(), None, 150.0),
    (optimizer_pb2.OBJECTIVE_MIN_ENERGY, MinEnergy(), 40.0, None),
])
def test_select_equals_the_library(optimizer, truth, objective, selector, power, time_ms):
    _, train, _ = truth
    budgets = common_pb2.Budgets()
    if power is not None:
        budgets.power_budget_w = power
    if time_ms is not None:
        budgets.time_budget_ms = time_ms
    got = optimizer.Select(optimizer_pb2.SelectRequest(candidates=_table(train), objective=objective, budgets=budgets))
    want = selector.select(_cands(train), power, time_ms)
    assert len(got.decisions) == 1
    d = got.decisions[0]
    _same_row(d, train[want.index])
    assert d.energy_j == pytest.approx(d.time_ms * d.power_w / 1000)
    assert d.budgets.HasField("power_budget_w") == (power is not None)


def test_power_budget_sweep_17_50_1_equals_the_library(optimizer, truth):
    _, train, _ = truth
    got = optimizer.Select(optimizer_pb2.SelectRequest(
        candidates=_table(train), sweep=optimizer_pb2.BudgetSweep(start=17, stop=50, step=1)))
    budgets = budget_sweep("17:50:1")
    want = MinTime().sweep(_cands(train), budgets)
    assert len(got.decisions) == len(budgets) == 34
    for d, b, w in zip(got.decisions, budgets, want, strict=True):
        assert d.budgets.power_budget_w == b
        assert d.feasible == w.feasible
        if w.feasible:
            _same_row(d, train[w.index])
        else:
            assert d.reason == w.reason and "closest" in d.reason
    times = [d.time_ms for d in got.decisions]
    assert all(d.feasible for d in got.decisions) and times == sorted(times, reverse=True) and times[0] > times[-1]
    # a sweep that starts below every mode: infeasible budgets first, with the closest option
    low = optimizer.Select(optimizer_pb2.SelectRequest(
        candidates=_table(train), sweep=optimizer_pb2.BudgetSweep(start=10, stop=20, step=2.5))).decisions
    assert [d.budgets.power_budget_w for d in low] == [10, 12.5, 15, 17.5, 20]
    assert [d.feasible for d in low] == [False, False, True, True, True] and "closest" in low[0].reason
    # MIN_POWER sweeps the time budget instead
    got = optimizer.Select(optimizer_pb2.SelectRequest(
        candidates=_table(train), objective=optimizer_pb2.OBJECTIVE_MIN_POWER,
        sweep=optimizer_pb2.BudgetSweep(start=60, stop=200, step=20)))
    for d, tb in zip(got.decisions, range(60, 201, 20), strict=True):
        w = MinPower().select(_cands(train), None, float(tb))
        assert d.budgets.time_budget_ms == tb and d.feasible == w.feasible
        if w.feasible:
            _same_row(d, train[w.index])


def test_safe_selection_with_std_is_the_library_ucb(optimizer, truth):
    _, train, _ = truth
    rng = np.random.default_rng(3)
    std = rng.uniform(0.2, 2.0, len(train))
    risk = 0.05  # the probability of exceeding the budget, as on the CLI and in the library
    req = optimizer_pb2.SelectRequest(candidates=_table(train, std), budgets=common_pb2.Budgets(power_budget_w=30.0),
                                      risk=risk)
    d = optimizer.Select(req).decisions[0]
    safe = MinTime(risk=risk).select(_cands(train, std), 30.0)
    naive = MinTime().select(_cands(train, std), 30.0)
    _same_row(d, train[safe.index])
    assert d.power_upper_w == pytest.approx(d.power_w + 1.6448536 * std[safe.index])
    assert d.power_upper_w <= 30.0 and safe.index != naive.index  # the bound changed the choice
    # risk 0: means only, no bound reported
    d0 = optimizer.Select(optimizer_pb2.SelectRequest(candidates=_table(train, std),
                                                      budgets=common_pb2.Budgets(power_budget_w=30.0))).decisions[0]
    _same_row(d0, train[naive.index])
    assert not d0.HasField("power_upper_w")


def test_risk_means_the_same_on_the_cli_and_over_grpc(optimizer, tmp_path):
    """The issue's table: budget 21.5 W, sigma 0.5 W, risk 0.05. A 5 % risk needs 21 + 1.645 * 0.5 =
    21.82 W > 21.5 W, so the 21 W mode is out and both transports pick the 12 W one, with one bound."""
    rows = [  # mode, time_ms, power_w, power_std_w
        ((4, 1113.6, 612.0, 2133.0), 90.0, 12.0, 0.5),
        ((8, 1728.0, 1020.0, 3199.0), 40.0, 21.0, 0.5),
    ]
    path = tmp_path / "t.csv"
    path.write_text("cores,cpu_mhz,gpu_mhz,emc_mhz,batch_size,time_ms,power_w,power_std_w\n" + "".join(
        f"{m[0]},{m[1]},{m[2]},{m[3]},16,{t},{p},{s}\n" for m, t, p, s in rows))
    cli = CliRunner().invoke(optimize_cli, ["select", "--table", str(path), "--power-budget", "21.5",
                                            "--risk", "0.05", "--json"])
    assert cli.exit_code == 0, cli.output
    by_cli = json.loads(cli.stdout)
    # The columns written out by hand: what a client in any language sends.
    table = common_pb2.PredictionTable(cores=[m[0] for m, *_ in rows], cpu_mhz=[m[1] for m, *_ in rows],
                                       gpu_mhz=[m[2] for m, *_ in rows], emc_mhz=[m[3] for m, *_ in rows],
                                       batch_size=[16, 16], time_ms=[r[1] for r in rows],
                                       power_w=[r[2] for r in rows], power_std_w=[r[3] for r in rows])
    d = optimizer.Select(optimizer_pb2.SelectRequest(
        candidates=optimizer_pb2.Candidates(table=table),
        budgets=common_pb2.Budgets(power_budget_w=21.5), risk=0.05)).decisions[0]
    assert by_cli["power_w"] == d.power_w == 12.0  # not the 21 W mode a multiplier of 0.05 would allow
    assert by_cli["mode"] == mode_from_proto(d.mode).as_dict()
    assert by_cli["power_upper_w"] == pytest.approx(d.power_upper_w) == pytest.approx(12.0 + 1.6448536 * 0.5)


# --- joint (Ahmed et al.) ---------------------------------------------------------------------------------
ANCHOR_ROWS = [
    (8, "307", 100.0, 4.0), (8, "460", 70.0, 4.4), (8, "614", 55.0, 5.2),
    (32, "153", 150.0, 4.2), (32, "307", 80.0, 4.8), (32, "460", 56.0, 5.6), (32, "614", 35.0, 6.6),
]


def _joint(cap=None, passes=((8, 10.0), (32, 15.0)), rows=ANCHOR_ROWS):
    req = optimizer_pb2.SelectJointRequest(
        lut=[optimizer_pb2.LutRow(batch_size=b, mode_id=m, time_s=t, power_w=p) for b, m, t, p in rows],
        efficiency=[common_pb2.BatchEfficiency(batch_size=b, passes_to_target=n) for b, n in passes])
    if cap is not None:
        req.power_cap_w = cap
    return req


def test_select_joint_ahmed_b8_at_4_5_w_b32_at_7_w(optimizer):
    low = optimizer.SelectJoint(_joint(4.5)).decision
    assert (low.feasible, low.batch_size, low.mode_id, low.time_to_target_s, low.power_w) == (True, 8, "460", 700.0, 4.4)
    high = optimizer.SelectJoint(_joint(7.0)).decision
    assert (high.batch_size, high.mode_id, high.time_to_target_s) == (32, "614", 525.0)
    assert high.budgets.power_budget_w == 7.0
    lut, eff = JointLUT.from_rows(ANCHOR_ROWS), BatchEfficiency.from_pairs({8: 10, 32: 15})
    for cap in (4.2, 4.5, 5.0, 6.0, 7.0, None):
        got, want = optimizer.SelectJoint(_joint(cap)).decision, joint_select(lut, eff, cap)
        assert (got.batch_size, got.mode_id, got.time_to_target_s) == (want.batch_size, want.mode,
                                                                       want.time_to_target_s)
    # a cap below every row: infeasible, with the reason and the closest option
    none = optimizer.SelectJoint(_joint(3.0)).decision
    assert not none.feasible and "3 W" in none.reason and "closest is batch size 8 at mode 307" in none.reason
    # a batch size that never reaches the target (passes absent) is never chosen
    only8 = optimizer.SelectJoint(optimizer_pb2.SelectJointRequest(
        lut=_joint().lut, efficiency=[common_pb2.BatchEfficiency(batch_size=8, passes_to_target=10),
                                      common_pb2.BatchEfficiency(batch_size=32)], power_cap_w=7.0)).decision
    assert (only8.batch_size, only8.mode_id) == (8, "614")


# --- concurrent (Fulcrum) -----------------------------------------------------------------------------
def _small_concurrent(truth, n_modes=40):
    _, train, infer = truth
    keep = {m.as_tuple() for m in FULCRUM.modes()[::max(1, len(FULCRUM.modes()) // n_modes)]}
    tr = [r for r in train if PowerMode.from_mapping(r).as_tuple() in keep]
    inf = [r for r in infer if PowerMode.from_mapping(r).as_tuple() in keep]
    return tr, inf


def _concurrent_request(tr, inf, power=30.0, latency=200.0, rate=30.0):
    return optimizer_pb2.SelectConcurrentRequest(
        train=_table(tr), infer=_table(inf),
        budgets=common_pb2.Budgets(power_budget_w=power, latency_budget_ms=latency, arrival_rps=rate))


def test_select_concurrent_equals_the_problem(optimizer, truth):
    tr, inf = _small_concurrent(truth)
    got = optimizer.SelectConcurrent(_concurrent_request(tr, inf)).decision
    obs = Observations()
    for role, rows in (("train", tr), ("infer", inf)):
        for r in rows:
            obs.add(PowerMode.from_mapping(r), role, r["batch_size"], Point(r["time_ms"], r["power_w"]))
    want = ConcurrentProblem(30.0, 200.0, 30.0, train_batch_size=16).solve(obs)
    ev = want.evaluation
    assert want.feasible and got.feasible
    assert mode_from_proto(got.mode) == ev.mode
    assert (got.batch_size, got.infer_batch_size, got.tau_train) == (16, ev.batch_size, ev.tau_train)
    assert (got.latency_ms, got.train_minibatches_per_s, got.time_ms, got.power_w) == (
        ev.latency_ms, ev.train_minibatches_per_s, ev.time_ms, ev.power_w)
    assert got.latency_ms <= 200.0 and got.power_w <= 30.0 and got.tau_train >= 1


def test_latency_budget_below_any_latency_is_a_clear_infeasible_decision(optimizer, truth):
    tr, inf = _small_concurrent(truth)
    d = optimizer.SelectConcurrent(_concurrent_request(tr, inf, latency=0.5)).decision
    assert not d.feasible and "within 0.5 ms latency: 0" in d.reason
    assert d.budgets.latency_budget_ms == 0.5


def test_one_row_tables_are_valid_choices(optimizer, truth):
    _, train, infer = truth
    one = _table(train[:1])
    assert list(optimizer.ParetoFront(optimizer_pb2.ParetoFrontRequest(candidates=one)).indices) == [0]
    _same_row(optimizer.Select(optimizer_pb2.SelectRequest(candidates=one)).decisions[0], train[0])
    d = optimizer.SelectJoint(_joint(rows=ANCHOR_ROWS[:1], passes=((8, 10.0),))).decision
    assert (d.feasible, d.batch_size, d.mode_id) == (True, 8, "307")
    # one training row and one inference row of the same mode
    row = next(r for r in infer if r["batch_size"] == 4 and PowerMode.from_mapping(r) == PowerMode.from_mapping(train[-1]))
    d = optimizer.SelectConcurrent(_concurrent_request([train[-1]], [row], power=60.0, latency=1000.0, rate=10.0)).decision
    assert d.feasible and d.infer_batch_size == 4


# --- search sessions ---------------------------------------------------------------------------------
def _measure(device: ReplayDevice, point: optimizer_pb2.SearchPoint) -> common_pb2.Measurement:
    role = ROLE[point.role]
    row = device.lookup(mode_from_proto(point.mode), point.batch_size, point.workload, role)
    return common_pb2.Measurement(mode=point.mode, batch_size=point.batch_size, role=point.role,
                                  workload=point.workload, time_ms=row["time_ms"], power_w=row["power_w"])


def _drive(stub, session_id: str, device: ReplayDevice, max_batches: int | None = None, max_points: int = 0) -> bool:
    """Ask / profile / Tell until done (or ``max_batches`` Tells); True when done."""
    batches = 0
    while max_batches is None or batches < max_batches:
        ask = stub.Ask(optimizer_pb2.AskRequest(session_id=session_id, max_points=max_points))
        if ask.done:
            return True
        assert ask.points, "not done, yet nothing to profile"
        told = stub.Tell(optimizer_pb2.TellRequest(session_id=session_id,
                                                   measurements=[_measure(device, p) for p in ask.points]))
        batches += 1
        if told.done:
            return True
    return False


SEARCHES = {
    # (strategy enum, library name, problem enum, budgets, budget)
    "gmd-train": (optimizer_pb2.STRATEGY_GMD, "gmd", optimizer_pb2.PROBLEM_TRAIN, dict(power_budget_w=30.0), 0),
    "random-train": (optimizer_pb2.STRATEGY_RANDOM, "random", optimizer_pb2.PROBLEM_TRAIN,
                     dict(power_budget_w=25.0), 12),
    "gmd-infer": (optimizer_pb2.STRATEGY_GMD, "gmd", optimizer_pb2.PROBLEM_INFER,
                  dict(power_budget_w=25.0, latency_budget_ms=60.0, arrival_rps=100.0), 0),
    "gmd-concurrent": (optimizer_pb2.STRATEGY_GMD, "gmd", optimizer_pb2.PROBLEM_CONCURRENT,
                       dict(power_budget_w=30.0, latency_budget_ms=200.0, arrival_rps=30.0), 0),
    "random-concurrent": (optimizer_pb2.STRATEGY_RANDOM, "random", optimizer_pb2.PROBLEM_CONCURRENT,
                          dict(power_budget_w=45.0, latency_budget_ms=300.0, arrival_rps=30.0), 20),
    "als-train": (optimizer_pb2.STRATEGY_ALS, "als", optimizer_pb2.PROBLEM_TRAIN, dict(power_budget_w=30.0), 20),
    "exhaustive-train": (optimizer_pb2.STRATEGY_EXHAUSTIVE, "exhaustive", optimizer_pb2.PROBLEM_TRAIN,
                         dict(power_budget_w=30.0), 0),
}


def _start_request(key: str, seed: int = 7) -> optimizer_pb2.StartSearchRequest:
    strategy, _, problem, budgets, budget = SEARCHES[key]
    return optimizer_pb2.StartSearchRequest(
        strategy=strategy, problem=problem, budgets=common_pb2.Budgets(**budgets), device="orin-agx",
        grid=common_pb2.GRID_FULCRUM, batch_sizes=[16], infer_batch_sizes=list(INFER_SIZES),
        train_workload="resnet18", infer_workload="mobilenetv3", max_profiles=budget, seed=seed)


def _in_process(key: str, device: ReplayDevice, seed: int = 7):
    _, name, problem_enum, b, budget = SEARCHES[key]
    if problem_enum == optimizer_pb2.PROBLEM_TRAIN:
        problem = TrainProblem(b["power_budget_w"], 16, "resnet18")
    elif problem_enum == optimizer_pb2.PROBLEM_INFER:
        problem = InferProblem(b["power_budget_w"], b["latency_budget_ms"], b["arrival_rps"], "mobilenetv3")
    else:
        problem = ConcurrentProblem(b["power_budget_w"], b["latency_budget_ms"], b["arrival_rps"], "resnet18",
                                    "mobilenetv3", 16)
    space = SearchSpace.from_grid(FULCRUM, INFER_SIZES, train_batch_size=16)
    return run_search(make_strategy(name, problem, space, budget=budget or None, seed=seed), device)


def _assert_same_decision(got: common_pb2.Decision, result) -> None:
    want = result.decision
    assert got.feasible == want.feasible, (got, want)
    assert got.profiled == result.profiled
    if not want.feasible:
        assert got.reason == want.reason
        return
    ev = want.evaluation
    assert mode_from_proto(got.mode) == ev.mode
    assert (got.time_ms, got.power_w) == (ev.time_ms, ev.power_w)
    if want.problem == "concurrent":
        assert (got.infer_batch_size, got.tau_train, got.latency_ms) == (ev.batch_size, ev.tau_train, ev.latency_ms)
    else:
        assert got.batch_size == ev.batch_size
    if want.problem == "infer":
        assert got.latency_ms == ev.latency_ms


@pytest.mark.parametrize("key", ["gmd-train", "random-train", "gmd-infer", "gmd-concurrent", "random-concurrent",
                                 pytest.param("als-train", marks=pytest.mark.slow)])
def test_search_session_reaches_the_in_process_decision(optimizer, truth, key):
    device = truth[0]
    start = optimizer.StartSearch(_start_request(key))
    want = _in_process(key, device)
    assert start.max_profiles == want.strategy.budget
    assert _drive(optimizer, start.session_id, device)
    best = optimizer.Best(optimizer_pb2.BestRequest(session_id=start.session_id))
    assert best.done
    _assert_same_decision(best.decision, want)
    assert want.decision.feasible  # the budgets above leave something to find
    # Ask after the end: nothing more; a stray Tell is refused, a repeated one is still a no-op
    assert optimizer.Ask(optimizer_pb2.AskRequest(session_id=start.session_id)).done
    fresh = next(m for m in FULCRUM.modes() if not want.strategy.obs.has(m, "train", 16))
    stray = common_pb2.Measurement(mode=mode_to_proto(fresh), batch_size=16, role=common_pb2.ROLE_TRAIN,
                                   time_ms=10.0, power_w=60.0)
    _code(optimizer.Tell, optimizer_pb2.TellRequest(session_id=start.session_id, measurements=[stray]),
          grpc.StatusCode.FAILED_PRECONDITION, "the search is done")
    mode, role, b, point = next(want.strategy.obs.items())
    repeat = common_pb2.Measurement(mode=mode_to_proto(mode), batch_size=b, role=ROLE_ENUM[role],
                                    time_ms=point.time_ms, power_w=point.power_w)
    assert optimizer.Tell(optimizer_pb2.TellRequest(session_id=start.session_id,
                                                    measurements=[repeat])).profiled == want.profiled
    # EndSearch returns the same decision and removes the session
    end = optimizer.EndSearch(optimizer_pb2.EndSearchRequest(session_id=start.session_id))
    assert end.decision == best.decision
    _code(optimizer.Best, optimizer_pb2.BestRequest(session_id=start.session_id), grpc.StatusCode.NOT_FOUND,
          "session_id")


def test_the_typed_client_and_the_tuning_selector_speak_records(store, truth):
    """OptimizerClient: records in, records out, the same answers as the stub; OptimizerSelector (the
    tuner's remote selector) gives the library's choice; a whole search session through the client."""
    server, channel = _start(store)
    try:
        client = OptimizerClient(channel)
        device, train, _ = truth
        pool = Predictions.from_rows(train)
        pool_std = dataclasses.replace(pool, power_std_w=np.full(len(pool), 1.5))
        (verdict,) = client.select(SelectQuery(pool_std, "time", power_budget_w=25.0, risk=0.05))
        want = MinTime(risk=0.05).select(_cands(train, np.full(len(train), 1.5)), 25.0)
        assert verdict.feasible and verdict.mode == pool.mode(want.index)
        assert verdict.power_upper_w == pytest.approx(want.power_bound_w) and verdict.power_budget_w == 25.0
        choice = OptimizerSelector(channel).select(pool_std, 25.0, risk=0.05, objective="time")
        assert (choice.feasible, choice.index) == (True, want.index)
        assert choice.power_bound_w == pytest.approx(want.power_bound_w)
        front = client.pareto_front(pool)
        assert list(front.indices) == [int(i) for i in pareto_front(pool.time_ms, pool.power_w)[::-1]]

        started = client.start_search(SearchRequest("gmd", "train", 30.0, device="orin-agx", grid="fulcrum",
                                                    batch_sizes=(16,), train_workload="resnet18", seed=7))
        while True:
            asked = client.ask(started.session_id)
            if asked.done:
                break
            told = []
            for i, p in enumerate(asked.points):
                row = device.lookup(p.mode, p.batch_size, p.workload, p.role)
                told.append(Told(f"measurements[{i}]", p.mode, p.role, p.batch_size, p.workload, row["time_ms"],
                                 row["power_w"]))
            if client.tell(started.session_id, told).done:
                break
        result = _in_process("gmd-train", device)
        best = client.best(started.session_id)
        assert best.done and best.verdict.feasible and best.verdict.mode == result.decision.evaluation.mode
        assert best.verdict.profiled == result.profiled
        assert client.end_search(started.session_id) == best.verdict
    finally:
        channel.close()
        server.stop(0)


def test_ask_max_points_and_partial_tells(optimizer, truth):
    """Points asked one at a time (a concurrent trial's two points told separately) reach the same decision."""
    device = truth[0]
    start = optimizer.StartSearch(_start_request("gmd-concurrent"))
    assert _drive(optimizer, start.session_id, device, max_points=1)
    _assert_same_decision(optimizer.Best(optimizer_pb2.BestRequest(session_id=start.session_id)).decision,
                          _in_process("gmd-concurrent", device))


def test_tell_is_idempotent_and_refuses_points_not_asked(optimizer, store, truth):
    device = truth[0]
    sid = optimizer.StartSearch(_start_request("gmd-train")).session_id
    ask = optimizer.Ask(optimizer_pb2.AskRequest(session_id=sid))
    ms = [_measure(device, p) for p in ask.points]
    rev0 = store.get_doc("optimizer-session", sid).revision
    first = optimizer.Tell(optimizer_pb2.TellRequest(session_id=sid, measurements=ms))
    rev1 = store.get_doc("optimizer-session", sid).revision
    again = optimizer.Tell(optimizer_pb2.TellRequest(session_id=sid, measurements=ms))  # a client retry
    assert first.profiled == again.profiled == len(ms)
    assert rev1 > rev0 and store.get_doc("optimizer-session", sid).revision == rev1  # the retry wrote nothing
    doc = store.get_doc("optimizer-session", sid).doc
    assert len(doc["strategy"]["history"]) == len(ms) and "space" not in doc["strategy"]
    changed = common_pb2.Measurement()
    changed.CopyFrom(ms[0])
    changed.time_ms += 1.0
    _code(optimizer.Tell, optimizer_pb2.TellRequest(session_id=sid, measurements=[changed]),
          grpc.StatusCode.INVALID_ARGUMENT, "measurements[0]: ")
    asked = {mode_from_proto(p.mode) for p in optimizer.Ask(optimizer_pb2.AskRequest(session_id=sid)).points}
    other = next(m for m in FULCRUM.modes() if m not in asked and m != mode_from_proto(ms[0].mode))
    stray = common_pb2.Measurement(mode=mode_to_proto(other), batch_size=16, role=common_pb2.ROLE_TRAIN,
                                   time_ms=100.0, power_w=20.0)
    msg = _code(optimizer.Tell, optimizer_pb2.TellRequest(session_id=sid, measurements=[stray]),
                grpc.StatusCode.INVALID_ARGUMENT, "measurements[0]: no pending trial asks for")
    assert "allowed:" in msg  # lists what is pending
    wrong_wl = common_pb2.Measurement()
    wrong_wl.CopyFrom(_measure(device, optimizer.Ask(optimizer_pb2.AskRequest(session_id=sid)).points[0]))
    wrong_wl.workload = "bert-base"
    _code(optimizer.Tell, optimizer_pb2.TellRequest(session_id=sid, measurements=[wrong_wl]),
          grpc.StatusCode.INVALID_ARGUMENT, "measurements[0].workload")
    optimizer.EndSearch(optimizer_pb2.EndSearchRequest(session_id=sid))


def test_restart_in_process_resumes_the_session(store, truth):
    """Start on server A, Ask/Tell a few batches (the last one half told), stop A; server B on the same
    store continues to the decision an uninterrupted run reaches."""
    device = truth[0]
    server_a, channel_a = _start(store)
    stub_a = optimizer_pb2_grpc.OptimizerStub(channel_a)
    sid = stub_a.StartSearch(_start_request("gmd-concurrent")).session_id
    assert not _drive(stub_a, sid, device, max_batches=2)
    half = stub_a.Ask(optimizer_pb2.AskRequest(session_id=sid, max_points=1)).points
    stub_a.Tell(optimizer_pb2.TellRequest(session_id=sid, measurements=[_measure(device, half[0])]))
    channel_a.close()
    server_a.stop(0)

    server_b, channel_b = _start(store)
    try:
        stub_b = optimizer_pb2_grpc.OptimizerStub(channel_b)
        rest = stub_b.Ask(optimizer_pb2.AskRequest(session_id=sid)).points
        assert half[0] not in rest  # the told half is remembered
        assert _drive(stub_b, sid, device)
        _assert_same_decision(stub_b.Best(optimizer_pb2.BestRequest(session_id=sid)).decision,
                              _in_process("gmd-concurrent", device))
    finally:
        channel_b.close()
        server_b.stop(0)


def test_two_replicas_share_a_session_without_corrupting_it(store, truth):
    """Two live servers on one store: alternate Tells between them, and race the same Tell on both."""
    device = truth[0]
    (server_a, channel_a), (server_b, channel_b) = _start(store), _start(store)
    try:
        stubs = [optimizer_pb2_grpc.OptimizerStub(c) for c in (channel_a, channel_b)]
        sid = stubs[0].StartSearch(_start_request("gmd-infer")).session_id
        turn = 0
        while True:
            ask = stubs[turn % 2].Ask(optimizer_pb2.AskRequest(session_id=sid))
            if ask.done:
                break
            req = optimizer_pb2.TellRequest(session_id=sid, measurements=[_measure(device, p) for p in ask.points])
            answers: queue.Queue = queue.Queue()
            threads = [threading.Thread(target=lambda s=s, r=req, q=answers: q.put(s.Tell(r))) for s in stubs]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            results = [answers.get_nowait() for _ in threads]
            assert results[0].profiled == results[1].profiled  # the loser retried and found it recorded
            turn += 1
        _assert_same_decision(stubs[1].Best(optimizer_pb2.BestRequest(session_id=sid)).decision,
                              _in_process("gmd-infer", device))
    finally:
        for channel, server in ((channel_a, server_a), (channel_b, server_b)):
            channel.close()
            server.stop(0)


def _spawn_optimizer(redis_url: str) -> tuple[subprocess.Popen, str, threading.Thread]:
    """``python -m edgetune.services.optimizer.server`` on port 0; its address from the 'serving' log line."""
    cmd = [sys.executable, "-m", "edgetune.services.optimizer.server", "--host", "127.0.0.1", "--port", "0",
           "--metrics-port", "0", "--redis", redis_url, "--grace-s", "2"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})
    found: queue.Queue = queue.Queue()

    def read() -> None:  # keep draining stderr so the child never blocks on a full pipe
        for line in proc.stderr:
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if rec.get("msg") == "serving":
                found.put(rec["port"])
        found.put(None)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    port = found.get(timeout=60)
    assert port, f"the optimizer process exited with {proc.poll()}"
    return proc, f"127.0.0.1:{port}", reader


def test_restart_on_a_separate_process_resumes_the_session(truth):
    device = truth[0]
    with EmbeddedRedisServer(port=0) as redis_server:
        shared = open_store(redis_server.url)
        try:
            server_a, channel_a = _start(shared)
            stub_a = optimizer_pb2_grpc.OptimizerStub(channel_a)
            sid = stub_a.StartSearch(_start_request("random-train", seed=11)).session_id
            assert not _drive(stub_a, sid, device, max_batches=0)  # nothing told yet
            ask = stub_a.Ask(optimizer_pb2.AskRequest(session_id=sid, max_points=5))
            stub_a.Tell(optimizer_pb2.TellRequest(session_id=sid, measurements=[_measure(device, p) for p in ask.points]))
            channel_a.close()
            server_a.stop(0)

            proc, address, reader = _spawn_optimizer(redis_server.url)
            try:
                with grpc.insecure_channel(address) as channel_b:
                    grpc.channel_ready_future(channel_b).result(timeout=30)
                    stub_b = optimizer_pb2_grpc.OptimizerStub(channel_b)
                    assert _drive(stub_b, sid, device)
                    best = stub_b.Best(optimizer_pb2.BestRequest(session_id=sid))
                    _assert_same_decision(best.decision, _in_process("random-train", device, seed=11))
                    assert best.decision.profiled == 12
            finally:
                proc.send_signal(signal.SIGTERM)
                assert proc.wait(timeout=30) == 0
                reader.join(timeout=5)
            # the session doc is still in the shared store: a third server (in-process) reads it too
            server_c, channel_c = _start(shared)
            try:
                stub_c = optimizer_pb2_grpc.OptimizerStub(channel_c)
                assert stub_c.Best(optimizer_pb2.BestRequest(session_id=sid)).decision == best.decision
            finally:
                channel_c.close()
                server_c.stop(0)
        finally:
            shared.close()


def test_a_lost_revision_race_is_retried_on_the_winner_state(store, truth):
    """Replica B reads a session, replica A writes it before B does: B's write conflicts, and B redoes
    its change on A's revision (the step runs twice, the second time on a newer revision)."""
    device = truth[0]
    a, b = SessionStore(store), SessionStore(store)
    space = SearchSpace.from_grid(FULCRUM, train_batch_size=16)
    s = a.create(make_strategy("gmd", TrainProblem(30.0, 16, "resnet18"), space),
                 space_ref("orin-agx", "fulcrum", None, 16, [1]))
    seen: list[int] = []
    conflicts = REVISION_CONFLICTS._value.get()

    def tell_first(sess):
        seen.append(sess.revision)
        if len(seen) == 1:  # another replica writes in between B's read and B's write
            a.change(s.session_id, lambda other: (None, True))
        trial = sess.pending()[0]
        sess.strategy.tell(trial, device.lookup(trial.mode, 16, "resnet18", "train"))
        return sess.profiled, True

    assert b.change(s.session_id, tell_first) == 1
    assert len(seen) == 2 and seen[1] > seen[0]
    assert REVISION_CONFLICTS._value.get() == conflicts + 1
    found = store.get_doc("optimizer-session", s.session_id)
    assert len(found.doc["strategy"]["history"]) == 1
    assert a.read(s.session_id, lambda x: x.profiled) == 1  # A rebuilds B's write from the store


def test_idle_sessions_expire(store):
    now = [1000.0]
    sessions = SessionStore(store, ttl_s=60.0, clock=lambda: now[0])
    space = SearchSpace.from_grid(FULCRUM, train_batch_size=16)
    s = sessions.create(make_strategy("gmd", TrainProblem(30.0, 16), space), space_ref("orin-agx", "fulcrum", None, 16, [1]))
    assert sessions.read(s.session_id, lambda x: x.profiled) == 0
    now[0] += 61.0
    with pytest.raises(Exception, match="expired after 60 s idle"):
        sessions.read(s.session_id, lambda x: x.profiled)
    assert store.get_doc("optimizer-session", s.session_id, missing_ok=True) is None


# --- bad input -----------------------------------------------------------------------------------------
def test_bad_input_names_the_field(optimizer, truth):
    _, train, _ = truth
    INVALID, PRECONDITION, NOT_FOUND = (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.FAILED_PRECONDITION,
                                        grpc.StatusCode.NOT_FOUND)
    rows = _table(train[:3])
    sel = optimizer.Select
    _code(sel, optimizer_pb2.SelectRequest(candidates=rows, budgets=common_pb2.Budgets(power_budget_w=-1)), INVALID,
          "budgets.power_budget_w")
    _code(sel, optimizer_pb2.SelectRequest(candidates=rows, budgets=common_pb2.Budgets(time_budget_ms=float("nan"))),
          INVALID, "budgets.time_budget_ms")
    _code(sel, optimizer_pb2.SelectRequest(), INVALID, "candidates: no candidates given")
    _code(sel, optimizer_pb2.SelectRequest(candidates=optimizer_pb2.Candidates(table=common_pb2.PredictionTable())),
          INVALID, "candidates.table: is empty")
    bad = _table(train[:3])
    bad.table.time_ms[1] = -5
    _code(sel, optimizer_pb2.SelectRequest(candidates=bad), INVALID, "candidates.table.time_ms[1]")
    bad = _table(train[:3])
    bad.table.power_w[0] = float("nan")
    _code(sel, optimizer_pb2.SelectRequest(candidates=bad), INVALID, "candidates.table.power_w[0]")
    bad = _table(train[:3])
    bad.table.cores[2] = 0
    _code(sel, optimizer_pb2.SelectRequest(candidates=bad), INVALID, "candidates.table.cores[2]")
    bad = _table(train[:3])
    del bad.table.gpu_mhz[2]
    _code(sel, optimizer_pb2.SelectRequest(candidates=bad), INVALID, "candidates.table.gpu_mhz: has 2 values")
    _code(sel, optimizer_pb2.SelectRequest(candidates=rows, risk=-1), INVALID, "risk")
    # risk is a probability: the old multiplier (1.645) and anything past 0.5 are refused
    _code(sel, optimizer_pb2.SelectRequest(candidates=rows, risk=1.645), INVALID, "risk")
    _code(sel, optimizer_pb2.SelectRequest(candidates=rows, risk=0.7), INVALID, "0 < risk <= 0.5")
    _code(optimizer.ParetoFront, optimizer_pb2.ParetoFrontRequest(candidates=rows, risk=1.645), INVALID, "risk")
    _code(sel, optimizer_pb2.SelectRequest(candidates=rows, risk=float("nan")), INVALID, "risk")
    _code(sel, optimizer_pb2.SelectRequest(candidates=rows, objective=42), INVALID, "objective")
    _code(sel, optimizer_pb2.SelectRequest(candidates=rows, sweep=optimizer_pb2.BudgetSweep(start=17, stop=50)),
          INVALID, "sweep")
    _code(sel, optimizer_pb2.SelectRequest(candidates=rows, sweep=optimizer_pb2.BudgetSweep(start=-3, stop=5, step=1)),
          INVALID, "sweep")
    model = optimizer_pb2.Candidates(model=optimizer_pb2.ModelCandidates(model_id="m1", device="orin-agx"))
    _code(sel, optimizer_pb2.SelectRequest(candidates=model), PRECONDITION, "candidates.model: ")
    _code(optimizer.ParetoFront, optimizer_pb2.ParetoFrontRequest(), INVALID, "candidates")

    joint = optimizer.SelectJoint
    _code(joint, _joint(-1.0), INVALID, "power_cap_w")
    _code(joint, optimizer_pb2.SelectJointRequest(efficiency=_joint().efficiency), INVALID, "lut: is empty")
    _code(joint, _joint(rows=[ANCHOR_ROWS[0], ANCHOR_ROWS[0]]), INVALID, "lut[1].mode_id")
    _code(joint, _joint(rows=[(0, "307", 1.0, 1.0)]), INVALID, "lut[0].batch_size")
    _code(joint, _joint(passes=((8, -2.0),)), INVALID, "efficiency[0].passes_to_target")

    conc = optimizer.SelectConcurrent
    tr, inf = _small_concurrent(truth, 5)
    _code(conc, _concurrent_request(tr, inf, rate=0.0), INVALID, "budgets.arrival_rps")
    _code(conc, _concurrent_request(tr, inf, power=-1.0), INVALID, "budgets.power_budget_w")
    req = _concurrent_request(tr, inf)
    req.budgets.ClearField("latency_budget_ms")
    _code(conc, req, INVALID, "budgets.latency_budget_ms: is required")
    _code(conc, _concurrent_request(tr + tr[:1], inf), INVALID, f"train.table[{len(tr)}]")

    start = optimizer.StartSearch
    good = _start_request("gmd-infer")
    for field, change, code in [
        ("strategy", lambda r: setattr(r, "strategy", 0), INVALID),
        ("strategy", lambda r: setattr(r, "strategy", 99), INVALID),
        ("problem", lambda r: setattr(r, "problem", 0), INVALID),
        ("budgets.power_budget_w", lambda r: setattr(r.budgets, "power_budget_w", -5), INVALID),
        ("budgets.arrival_rps", lambda r: setattr(r.budgets, "arrival_rps", 0), INVALID),
        ("budgets.latency_budget_ms", lambda r: r.budgets.ClearField("latency_budget_ms"), INVALID),
        ("device", lambda r: setattr(r, "device", "cray-1"), INVALID),
        ("grid", lambda r: setattr(r, "grid", 42), INVALID),
        ("modes", lambda r: setattr(r, "device", ""), INVALID),
        ("batch_sizes", lambda r: r.batch_sizes.append(32), INVALID),
        ("infer_batch_sizes[0]", lambda r: r.infer_batch_sizes.__setitem__(0, 0), INVALID),
        ("max_profiles", lambda r: setattr(r, "max_profiles", -1), INVALID),
        ("modes[0].gpu_mhz", lambda r: r.modes.append(common_pb2.PowerMode(cores=4, cpu_mhz=1000, gpu_mhz=-1,
                                                                           emc_mhz=2133)), INVALID),
        ("modes[0].cores", lambda r: r.modes.append(common_pb2.PowerMode(cores=13, cpu_mhz=2201.6, gpu_mhz=1300.5,
                                                                         emc_mhz=3199)), INVALID),
        ("guide_model_id", lambda r: setattr(r, "guide_model_id", "m1"), PRECONDITION),
    ]:
        req = optimizer_pb2.StartSearchRequest()
        req.CopyFrom(good)
        change(req)
        _code(start, req, code, field)

    for call, req in [(optimizer.Ask, optimizer_pb2.AskRequest(session_id="nope")),
                      (optimizer.Tell, optimizer_pb2.TellRequest(session_id="nope", measurements=[
                          common_pb2.Measurement(mode=mode_to_proto(ORIN.maxn()), batch_size=16, time_ms=1, power_w=1)])),
                      (optimizer.Best, optimizer_pb2.BestRequest(session_id="nope")),
                      (optimizer.EndSearch, optimizer_pb2.EndSearchRequest(session_id="nope"))]:
        _code(call, req, NOT_FOUND, "session_id")
    _code(optimizer.Best, optimizer_pb2.BestRequest(), INVALID, "session_id: is empty")
    sid = optimizer.StartSearch(good).session_id
    _code(optimizer.Tell, optimizer_pb2.TellRequest(session_id=sid), INVALID, "measurements: is empty")
    _code(optimizer.Ask, optimizer_pb2.AskRequest(session_id=sid, max_points=-1), INVALID, "max_points")
    point = optimizer.Ask(optimizer_pb2.AskRequest(session_id=sid)).points[0]
    neg = common_pb2.Measurement(mode=point.mode, batch_size=point.batch_size, role=point.role, time_ms=-1, power_w=5)
    _code(optimizer.Tell, optimizer_pb2.TellRequest(session_id=sid, measurements=[neg]), INVALID,
          "measurements[0].time_ms")
    optimizer.EndSearch(optimizer_pb2.EndSearchRequest(session_id=sid))


def test_edgetune_serve_optimizer_help_lists_its_flags():
    from click.testing import CliRunner

    from edgetune.cli import cli

    result = CliRunner().invoke(cli, ["serve", "optimizer", "--help"])
    assert result.exit_code == 0
    for flag in ("--port", "--redis", "--metrics-port", "--session-ttl-s", "--host"):
        assert flag in result.output
    bad = CliRunner().invoke(cli, ["serve", "optimizer", "--port", "0", "--metrics-port", "0", "--redis", "ftp://x"])
    assert bad.exit_code == 2 and "redis: unsupported store URL" in bad.output


def test_a_select_by_model_reads_the_estimators_rows_once_per_version():

    rows = Predictions(np.array([[4, 1000.0, 500.0, 2000.0], [8, 2000.0, 900.0, 3000.0]]), np.array([16, 16]),
                       np.array([100.0, 60.0]), np.array([20.0, 35.0]))
    asked: list[PredictSpec] = []
    pools = ModelPools(lambda spec: asked.append(spec) or rows)
    versioned, latest = PredictSpec("m@2", grid="full"), PredictSpec("m", grid="full")
    assert pools(versioned) is rows and pools(versioned) is rows and len(asked) == 1  # a version never changes
    pools(latest)
    pools(latest)
    assert len(asked) == 3  # "the latest" is read each time
    with pytest.raises(FailedPrecondition, match="candidates.model"):
        ModelPools(None)(versioned)
