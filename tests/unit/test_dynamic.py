"""Dynamic arrival rates (libs/edgetune/optimization/dynamic.py): per-window re-solving that reuses
earlier profiles, against the simulator's Orin AGX truth table (MobileNetV3 inference, 441 modes)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from edgetune.devices.replay import ReplayDevice
from edgetune.devices.simulated.tables import truth_table
from edgetune.errors import InvalidArgument
from edgetune.optimization.dynamic import DynamicSolver, estimate_rates, window_rates, with_arrival_rate
from edgetune.optimization.interleaving import MMPP, PiecewisePoisson
from edgetune.optimization.problems import ConcurrentProblem, InferProblem, TrainProblem
from edgetune.optimization.strategies import SearchStrategy, make_strategy, run_search, search_space
from edgetune.powermodes.grids import named_grid
from edgetune.powermodes.specs import get_spec
from edgetune.tables import Table

FAST_ALS = {"epochs": 40, "refit_epochs": 10}
# 40 W, 100 ms: MobileNetV3 bs 1 takes 18 ms at best, so β = 1 keeps up to ≈ 55 rps only;
# above that the optimum moves to β = 4 (the paper's Fig. 13b shift past 60 rps)
BASE = InferProblem(40, 100, 40)


@pytest.fixture(scope="module")
def table() -> Table:
    grid = named_grid(get_spec("orin-agx"), "fulcrum")
    rows = truth_table("orin-agx", "mobilenetv3", "infer", grid.array(), [1, 4, 16, 32, 64])
    rows += truth_table("orin-agx", "resnet18", "train", grid.array(), [16])
    return Table(list(rows[0].keys()), rows, "truth.csv")


@pytest.fixture(scope="module")
def truth(table):
    return BASE.observations_from_rows(table.rows)


def _meets(decision, rate, truth) -> bool:
    ev = with_arrival_rate(BASE, rate).evaluate(decision.mode, decision.batch_size, truth)
    return ev is not None and ev.feasible


# -- GMD ------------------------------------------------------------------------------------------
def test_rate_up_gmd_backtracks_to_a_larger_beta_for_fewer_profiles_than_a_cold_start(table, truth):
    solver = DynamicSolver("gmd", ReplayDevice(table), BASE, 300)
    low, n_low, _ = solver.solve_at(40)
    assert low.feasible and low.batch_size == 1 and _meets(low, 40, truth)
    high, n_high, _ = solver.solve_at(75)
    assert high.feasible and high.batch_size > low.batch_size and _meets(high, 75, truth)
    assert not _meets(low, 75, truth)  # the old decision cannot keep up any more

    dev = ReplayDevice(table)
    space, prob = search_space(dev, with_arrival_rate(BASE, 75))
    cold = run_search(make_strategy("gmd", prob, space), dev, prob)
    assert cold.decision.feasible
    assert n_high < cold.profiled  # only new points cost a profile
    assert solver.profiled == n_low + n_high
    # back down: the earlier profiles answer, nothing new is measured
    again, n_again, action = solver.solve_at(40)
    assert n_again == 0 and action == "reuse" and again.batch_size == 1


def test_cold_solver_recounts_profiles(table):
    warm = DynamicSolver("gmd", ReplayDevice(table), BASE, 300)
    cold = DynamicSolver("gmd", ReplayDevice(table), BASE, 300, reuse=False)
    for rate in (40, 75, 40, 75):
        warm.solve_at(rate)
        cold.solve_at(rate)
    assert warm.profiled < cold.profiled


# -- ALS ------------------------------------------------------------------------------------------
def test_als_reuses_its_samples_and_extends_without_a_random_phase(table, truth):
    solver = DynamicSolver("als", ReplayDevice(table), BASE, 300, strategy_options=FAST_ALS)
    first, n_first, action = solver.solve_at(40)
    assert action == "search" and 0 < n_first <= 145
    assert solver.covered_rate_rps == (30.0, 90.0)
    store_before = solver.observations.copy()
    inside, n_inside, action = solver.solve_at(80)  # within the sampled range: answered as is
    assert n_inside == 0 and action == "reuse" and inside.feasible and _meets(inside, 80, truth)

    beyond, n_beyond, action = solver.solve_at(110)  # past the range: a few more points
    assert action == "extend"
    assert 0 < n_beyond <= 4 * 5  # one round of 4 quadrants × 5 picks, no 25-point random phase
    assert solver.covered_rate_rps[1] >= 110
    new = [(m, b) for m, _, b, _ in solver.observations.items() if not store_before.has(m, "infer", b)]
    assert len(new) == n_beyond
    assert beyond.feasible and _meets(beyond, 110, truth)
    _, n_repeat, action = solver.solve_at(110)
    assert n_repeat == 0 and action == "reuse"


def test_als_extension_strategy_skips_the_initial_phase(table):
    dev = ReplayDevice(table)
    space, prob = search_space(dev, BASE)
    base = make_strategy("als", prob, space, initial=10, rounds=1, **FAST_ALS)
    run_search(base, dev, prob)
    ext = make_strategy("als", prob, space, initial=0, rounds=1, rate_range_rps=[90, 120], **FAST_ALS)
    assert ext.budget == 20
    ext.warm_start(base.obs)
    first = ext.ask()
    assert 0 < len(first) <= 5  # the first quadrant's picks, not a random draw of 25
    assert all(not base.obs.has(t.mode, "infer", t.batch_size) for t in first)


# -- traces ---------------------------------------------------------------------------------------
def test_replay_poisson_trace_meets_budgets_at_the_true_rates(table):
    rates = [40.0, 45.0, 75.0, 80.0, 42.0, 70.0]
    trace = PiecewisePoisson(rates, 60.0, seed=3)
    solver = DynamicSolver("gmd", ReplayDevice(table), BASE, 60.0, headroom=0.03)
    windows = solver.replay(trace, 360.0)
    assert [w.true_rate_rps for w in windows] == rates
    for w in windows:
        assert abs(w.estimated_rate_rps - w.true_rate_rps) < 0.25 * w.true_rate_rps
        assert w.oracle is not None and w.oracle.feasible
        assert w.meets_budgets, f"window {w.index} at {w.true_rate_rps} rps"
        assert w.excess_pct >= -1e-9
    assert [w.decision.batch_size for w in windows] == [1, 1, 4, 4, 1, 4]
    assert windows[-1].cumulative_profiles == sum(w.new_profiles for w in windows) == solver.profiled
    assert windows[1].new_profiles == 0  # the same β = 1 path, already profiled
    row = windows[2].as_row()
    assert row["batch_size"] == 4 and row["meets_budgets"] is True
    json.dumps(row)


def test_bursty_trace_true_rates_and_concurrent_problem(table):
    trace = MMPP((100.0, 40.0), (900.0, 1500.0), seed=4)
    mean, peak = window_rates(trace, 3600.0, 300.0)
    assert set(np.round(peak, 6)) <= {40.0, 100.0}
    assert np.all((mean >= 40.0 - 1e-9) & (mean <= peak + 1e-9))
    est = estimate_rates(trace.times_s(3600.0), 3600.0, 300.0)
    assert np.max(np.abs(est - mean)) < 5.0

    concurrent = ConcurrentProblem(40, 500, 60, "resnet18", "mobilenetv3", train_batch_size=16)
    solver = DynamicSolver("gmd", ReplayDevice(table), concurrent, 300.0)
    windows = solver.replay(trace, 3600.0)
    assert len(windows) == 12
    solvable = [w for w in windows if w.oracle.feasible]
    assert sum(w.meets_budgets for w in solvable) >= 0.8 * len(solvable)
    assert solver.profiled < 15 * 2 * 3  # far less than three cold GMD15 searches
    assert all(w.excess_pct >= -1e-9 for w in windows if w.meets_budgets)


def test_warm_start_state_round_trip(table):
    dev = ReplayDevice(table)
    space, prob = search_space(dev, with_arrival_rate(BASE, 75))
    solver = DynamicSolver("gmd", ReplayDevice(table), BASE, 300)
    solver.solve_at(40)
    gmd = make_strategy("gmd", prob, space)
    gmd.warm_start(solver.observations)
    trials = gmd.ask()
    assert trials  # backtracking needs something new
    state = json.loads(json.dumps(gmd.state_dict()))
    assert len(state["prior"]) == len(solver.observations)
    again = SearchStrategy.from_state(state)
    assert [str(t.mode) for t in again.ask()] == [str(t.mode) for t in trials]


def test_bad_arguments(table):
    with pytest.raises(InvalidArgument):
        DynamicSolver("gmd", ReplayDevice(table), TrainProblem(30), 300)
    with pytest.raises(InvalidArgument):
        DynamicSolver("gmd", ReplayDevice(table), BASE, 0)
    with pytest.raises(InvalidArgument):
        DynamicSolver("gmd", ReplayDevice(table), BASE, 300, headroom=1.5)


def test_gmd_search_backtracking_finds_what_the_papers_misses(table, truth):
    # 17 W: the modes GMD visits at bs=1 within 17 W draw more than 17 W at bs=4, so the paper's
    # backtracking (same modes, larger β) finds nothing at 75 rps; searching at β=4 does
    paper = DynamicSolver("gmd", ReplayDevice(table), InferProblem(17, 100, 30), 300)
    search = DynamicSolver("gmd", ReplayDevice(table), InferProblem(17, 100, 30), 300,
                           strategy_options={"backtrack": "search"})
    for solver in (paper, search):
        assert solver.solve_at(30)[0].feasible
    assert not paper.solve_at(75)[0].feasible
    found, new, _ = search.solve_at(75)
    assert found.feasible and found.batch_size == 4 and new <= 11
    ev = with_arrival_rate(InferProblem(17, 100, 30), 75).evaluate(found.mode, 4, truth)
    assert ev.feasible
    with pytest.raises(InvalidArgument):
        make_strategy("gmd", BASE, search.space, backtrack="sideways")
