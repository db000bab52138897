"""Seed 004's problems (libs/edgetune/optimization/problems.py): formulas on hand-computed cases."""

from __future__ import annotations

import math

import pytest

from edgetune.base.mode import PowerMode
from edgetune.errors import InvalidArgument
from edgetune.optimization.problem_registry import problem_from_dict
from edgetune.optimization.problems import (
    ConcurrentProblem,
    InferProblem,
    Observations,
    Point,
    TrainProblem,
)

A = PowerMode(4, 422.4, 114.75, 665.6)
B = PowerMode(8, 1344.0, 726.75, 2133.0)
C = PowerMode(12, 2201.6, 1300.5, 3199.0)


def _obs(points: dict) -> Observations:
    obs = Observations()
    for (mode, role, bs), (t, p) in points.items():
        obs.add(mode, role, bs, Point(t, p))
    return obs


# -- training -------------------------------------------------------------------------------------
def test_train_picks_the_fastest_mode_within_the_power_budget():
    obs = _obs({(A, "train", 16): (490.0, 14.7), (B, "train", 16): (96.0, 28.4), (C, "train", 16): (60.0, 51.1)})
    d = TrainProblem(30).solve(obs)
    assert d.feasible and d.mode == B and d.batch_size == 16
    assert d.evaluation.objective == 96.0
    assert TrainProblem(60).solve(obs).mode == C
    assert TrainProblem(51.1).solve(obs).mode == C  # the budget is inclusive


def test_train_tie_goes_to_lower_power_and_nothing_feasible_says_why():
    obs = _obs({(A, "train", 16): (100.0, 20.0), (B, "train", 16): (100.0, 18.0)})
    assert TrainProblem(25).solve(obs).mode == B
    d = TrainProblem(10).solve(obs)
    assert not d.feasible and d.mode is None
    assert "10 W" in d.reason and "18.0 W" in d.reason
    assert d.as_json(profiled=2) == {"feasible": False, "reason": d.reason, "profiled": 2}


def test_train_problem_only_reads_its_batch_size():
    obs = _obs({(A, "train", 16): (100.0, 20.0), (B, "train", 32): (50.0, 20.0)})
    assert TrainProblem(25, train_batch_size=16).solve(obs).mode == A


# -- inference ------------------------------------------------------------------------------------
def test_infer_peak_latency_and_keep_up_by_hand():
    p = InferProblem(power_budget_w=30, latency_budget_ms=100, arrival_rps=50)
    assert p.peak_latency_ms(4, 30.0) == pytest.approx(3 / 50 * 1000 + 30)  # 90 ms
    assert p.window_ms(4) == pytest.approx(80.0)
    obs = _obs({(B, "infer", 1): (25.0, 20.0), (B, "infer", 4): (30.0, 22.0), (B, "infer", 16): (60.0, 25.0)})
    ev1 = p.evaluate(B, 1, obs)
    assert ev1.latency_ms == pytest.approx(25.0) and not ev1.keeps_up  # 25 ms > 1/50 s
    ev4 = p.evaluate(B, 4, obs)
    assert ev4.latency_ms == pytest.approx(90.0) and ev4.keeps_up and ev4.feasible
    ev16 = p.evaluate(B, 16, obs)
    assert ev16.latency_ms == pytest.approx(15 / 50 * 1000 + 60) and not ev16.meets_latency
    d = p.solve(obs)
    assert d.feasible and d.batch_size == 4 and d.evaluation.latency_ms == pytest.approx(90.0)
    assert set(d.as_json(3)) == {"feasible", "mode", "batch_size", "profiled", "time_ms", "power_w", "latency_ms"}


def test_infer_prefers_least_latency_then_lower_power():
    p = InferProblem(40, 500, 100)
    # β=4: 30 + 20 = 50 ms; β=16 at C: 150 + 10 → 160 ms; A β=4 slower: 30 + 35
    obs = _obs({(B, "infer", 4): (20.0, 20.0), (C, "infer", 16): (10.0, 30.0), (A, "infer", 4): (35.0, 15.0)})
    assert (p.solve(obs).mode, p.solve(obs).batch_size) == (B, 4)
    # equal latency: the lower power wins (batch sizes 1, 4, 16, … cannot tie when both keep up)
    obs2 = _obs({(B, "infer", 4): (20.0, 20.0), (C, "infer", 4): (20.0, 19.0)})
    assert p.solve(obs2).mode == C


def test_infer_power_budget_binds():
    p = InferProblem(20, 500, 50)
    obs = _obs({(C, "infer", 4): (10.0, 30.0), (A, "infer", 4): (60.0, 14.0)})
    d = p.solve(obs)
    assert d.mode == A and d.evaluation.power_w == 14.0


# -- concurrent -----------------------------------------------------------------------------------
def test_concurrent_tau_throughput_latency_power_by_hand():
    p = ConcurrentProblem(40, 600, 40, "resnet18", "mobilenetv3", train_batch_size=16)
    # β=16 at 40 rps: window 400 ms; t_in 100 → 300 ms spare; t_tr 70 → τ = 4; θ = 4·40/16 = 10/s
    assert p.window_ms(16) == pytest.approx(400.0)
    assert p.tau(16, 70.0, 100.0) == 4
    assert p.throughput(16, 4) == pytest.approx(10.0)
    obs = _obs({(B, "train", 16): (70.0, 30.0), (B, "infer", 16): (100.0, 33.0)})
    ev = p.evaluate(B, 16, obs)
    assert ev.tau_train == 4 and ev.train_minibatches_per_s == pytest.approx(10.0)
    assert ev.latency_ms == pytest.approx(15 / 40 * 1000 + 100)  # 475 ms
    assert ev.time_ms == pytest.approx(170.0)  # interleaved minibatch time t_tr + t_in
    assert ev.power_w == 33.0  # max(p_tr, p_in)
    assert ev.feasible
    js = p.decide(ev).as_json(2)
    assert set(js) == {"feasible", "mode", "batch_size", "profiled", "time_ms", "power_w", "latency_ms",
                       "train_minibatches_per_s", "tau_train"}
    assert js["tau_train"] == 4


def test_concurrent_exact_fit_counts_and_no_training_is_infeasible():
    p = ConcurrentProblem(40, 2000, 40, train_batch_size=16)
    assert p.tau(16, 100.0, 100.0) == 3  # 300 / 100 exactly
    obs = _obs({(B, "train", 16): (500.0, 20.0), (B, "infer", 16): (100.0, 20.0)})
    ev = p.evaluate(B, 16, obs)
    assert ev.tau_train == 0 and not ev.trains and not ev.feasible
    assert not p.solve(obs).feasible and "training minibatch" in p.solve(obs).reason


def test_concurrent_maximises_throughput_smaller_beta_on_tie():
    p = ConcurrentProblem(50, 2000, 40, train_batch_size=16)
    # β=16: window 400, t_in 100 → τ = 3 (t_tr 100), θ = 3·40/16 = 7.5
    # β=32: window 800, t_in 200 → τ = 6, θ = 6·40/32 = 7.5 (tie: β=16 has the lower latency)
    # β=64: window 1600, t_in 410 → τ = 11, θ = 6.875
    obs = _obs({(B, "train", 16): (100.0, 25.0), (B, "infer", 16): (100.0, 20.0),
                (B, "infer", 32): (200.0, 22.0), (B, "infer", 64): (410.0, 24.0)})
    d = p.solve(obs)
    assert d.batch_size == 16 and d.evaluation.train_minibatches_per_s == pytest.approx(7.5)
    # a power budget below the training power excludes the mode whatever β
    assert not ConcurrentProblem(24, 2000, 40, train_batch_size=16).solve(obs).feasible


def test_concurrent_keep_up_failure():
    p = ConcurrentProblem(50, 5000, 100, train_batch_size=16)
    obs = _obs({(B, "train", 16): (10.0, 25.0), (B, "infer", 4): (50.0, 20.0)})  # window 40 ms < 50 ms
    ev = p.evaluate(B, 4, obs)
    assert not ev.keeps_up and ev.tau_train == 0 and not ev.feasible


# -- input checking and persistence -------------------------------------------------------------
@pytest.mark.parametrize("build, field", [
    (lambda: TrainProblem(-1), "power_budget_w"),
    (lambda: TrainProblem(0), "power_budget_w"),
    (lambda: TrainProblem(math.nan), "power_budget_w"),
    (lambda: TrainProblem(10, train_batch_size=0), "train_batch_size"),
    (lambda: InferProblem(10, -5, 30), "latency_budget_ms"),
    (lambda: InferProblem(10, 100, 0), "arrival_rps"),
    (lambda: ConcurrentProblem(10, 100, -1), "arrival_rps"),
    (lambda: InferProblem("x", 100, 30), "power_budget_w"),
])
def test_bad_input_names_the_field(build, field):
    with pytest.raises(InvalidArgument) as exc:
        build()
    assert exc.value.field == field


@pytest.mark.parametrize("problem", [
    TrainProblem(20, 16, "resnet18"), InferProblem(20, 300, 60, "mobilenetv3"),
    ConcurrentProblem(30, 800, 40, "resnet18", "mobilenetv3", 16),
])
def test_problem_dict_round_trip(problem):
    again = problem_from_dict(problem.to_dict())
    assert type(again) is type(problem) and again.to_dict() == problem.to_dict()


def test_observations_from_rows_and_missing_points():
    rows = [{"cores": 8, "cpu_mhz": 1344.0, "gpu_mhz": 726.75, "emc_mhz": 2133.0, "batch_size": 16,
             "time_ms": 96.0, "power_w": 28.4, "role": "train", "workload": "resnet18"}]
    obs = Observations.from_rows(rows)
    assert obs.get(B, "train", 16) == Point(96.0, 28.4)
    assert ConcurrentProblem(40, 600, 40, train_batch_size=16).evaluate(B, 16, obs) is None
    with pytest.raises(InvalidArgument):
        obs.add(B, "train", 16, {"time_ms": 1.0})
