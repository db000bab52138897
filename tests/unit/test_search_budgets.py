"""Search budgets are hard limits on profiling runs: one run is one (power mode, batch size) of
one role measured. GMD and ALS, on every problem kind (concurrent included, where a trial at a
new mode measures two points), never profile more than their budget — counted by the driver
from what the replayed device was asked, not by the strategy itself."""

from __future__ import annotations

import numpy as np
import pytest

from edgetune.devices.replay import ReplayDevice
from edgetune.devices.simulated.tables import truth_table
from edgetune.optimization.problems import ConcurrentProblem, InferProblem, Observations, TrainProblem
from edgetune.optimization.strategies import make_strategy, run_search, search_space
from edgetune.optimization.strategies.als import pick_spread
from edgetune.optimization.strategies.base import SearchStrategy
from edgetune.powermodes.grids import named_grid
from edgetune.powermodes.specs import get_spec
from edgetune.tables import Table

FAST_GUIDE = {"epochs": 30, "refit_epochs": 8}


class CountingDevice(ReplayDevice):
    """A replay device that counts every lookup (every profiling run the search paid for)."""

    def __init__(self, table: Table) -> None:
        super().__init__(table)
        self.runs: list[tuple] = []

    def lookup(self, mode, batch_size, workload=None, role=None):  # type: ignore[override]
        self.runs.append((mode.as_tuple(), batch_size, workload, role))
        return super().lookup(mode, batch_size, workload, role)


@pytest.fixture(scope="module")
def table() -> Table:
    grid = named_grid(get_spec("orin-agx"), "fulcrum")
    rows = truth_table("orin-agx", "resnet18", "train", grid.array(), [16])
    rows += truth_table("orin-agx", "mobilenetv3", "infer", grid.array(), [1, 4, 16, 32, 64])
    return Table(list(rows[0].keys()), rows, "truth.csv")


def _search(table, problem, name, budget=None, **opts):
    dev = CountingDevice(table)
    space, prob = search_space(dev, problem)
    strat = make_strategy(name, prob, space, budget=budget, **opts)
    res = run_search(strat, dev, prob)
    return res, dev, strat


@pytest.mark.parametrize("problem", [ConcurrentProblem(30, 800, 40), ConcurrentProblem(25, 1000, 30),
                                     ConcurrentProblem(40, 500, 60), ConcurrentProblem(20, 300, 80)])
def test_gmd15_concurrent_profiles_at_most_15_runs(table, problem):
    # counting configurations, these searches profiled 26-29 runs
    res, dev, strat = _search(table, problem, "gmd")
    assert strat.budget == 15
    assert len(dev.runs) == len(set(dev.runs)) == res.profiled <= 15
    assert strat.spent <= 15


@pytest.mark.parametrize("budget", [1, 2, 3, 7, 10])
def test_gmd_any_budget_is_a_hard_limit(table, budget):
    for problem in (TrainProblem(25), InferProblem(25, 200, 60), ConcurrentProblem(30, 800, 40)):
        res, dev, _ = _search(table, problem, "gmd", budget=budget)
        assert len(dev.runs) <= budget, problem.describe()


@pytest.fixture(scope="module")
def als_concurrent(table):
    return _search(table, ConcurrentProblem(30, 800, 40), "als")


def test_als145_concurrent_profiles_at_most_145_runs(als_concurrent):
    # counting configurations, ALS145 profiled 236-254 runs on concurrent problems
    res, dev, strat = als_concurrent
    assert strat.budget == 145
    assert len(dev.runs) == res.profiled <= 145
    assert res.profiled > 100  # and it uses its budget, it is not merely cut short at the start


def test_als145_concurrent_solves_the_papers_share_within_its_runs(table, als_concurrent):
    """Fulcrum: ALS145 finds a solution for > 95 % of concurrent problems. Within 145 runs the
    MLP-guided ALS with distance-ranked picks solved 93.8 % (this seed, 160 problems); the GP
    guide and greedy run-aware picks solve ≥ 97 % on every seed tried."""
    _, _, strat = als_concurrent
    truth = Observations.from_rows(table.rows)
    rng = np.random.default_rng(4)
    problems: list[ConcurrentProblem] = []
    while len(problems) < 80:
        p = ConcurrentProblem(float(rng.integers(10, 51)), float(rng.choice(np.arange(50, 1001, 10))),
                              float(rng.choice(np.arange(30, 91, 5))), "resnet18", "mobilenetv3")
        if p.solve(truth).feasible:
            problems.append(p)
    found = np.mean([p.solve(strat.obs).feasible for p in problems])
    assert found > 0.95


def test_als_small_budget_is_a_hard_limit(table):
    res, dev, _ = _search(table, ConcurrentProblem(30, 800, 40), "als", budget=31, **FAST_GUIDE)
    assert len(dev.runs) <= 31


def test_a_concurrent_trial_is_cut_when_only_one_run_is_left(table):
    """A trial at a new mode costs two runs: with one run left it is not handed out, while a
    trial whose training point is already measured (one run) still is."""
    dev = ReplayDevice(table)
    space, prob = search_space(dev, ConcurrentProblem(30, 800, 40))
    strat: SearchStrategy = make_strategy("random", prob, space, budget=3, seed=1)
    trials = strat.ask()
    assert sum(len(t.points) for t in trials) <= 3
    # the first mode's training point is shared by its batch sizes: measured once, not per β
    assert sum(1 for t in trials for role, _ in t.points if role == "train") == 1
    assert [len(t.points) for t in trials] == [2, 1]
    for t in trials:
        strat.tell(t, {r: dev.lookup(t.mode, b, prob.workload_for(r), prob.device_role(r)) for r, b in t.points})
    assert strat.ask() == [] and strat.done and strat.spent == 3


def test_exhaustive_counts_each_training_point_once(table):
    res, dev, strat = _search(table, ConcurrentProblem(30, 800, 40), "exhaustive")
    modes = len(strat.space.modes)
    assert strat.budget == modes * (len(strat.space.infer_batch_sizes) + 1) == res.profiled == len(dev.runs)


@pytest.mark.parametrize("workload", ["resnet18", "mobilenetv3", "yolov8n", "lstm"])
def test_gmd10_training_median_excess_within_3_percent(workload):
    """The project's target: GMD10 within 3 % of the optimum (median over every power budget with
    an answer). The fixed refinement order reached 3.4 % on MobileNetV3; moves chosen by a local
    model of the profiled points reach 0.2 %."""
    grid = named_grid(get_spec("orin-agx"), "fulcrum")
    rows = truth_table("orin-agx", workload, "train", grid.array(), [16])
    train_table = Table(list(rows[0].keys()), rows, "truth.csv")
    truth = Observations.from_rows(rows)
    excess = []
    for budget_w in range(10, 51):
        problem = TrainProblem(float(budget_w), train_workload=workload)
        opt = problem.solve(truth)
        if not opt.feasible:
            continue
        res, dev, _ = _search(train_table, problem, "gmd")
        assert len(dev.runs) <= 10 and res.decision.feasible
        excess.append(100.0 * (res.decision.evaluation.objective / opt.evaluation.objective - 1.0))
    assert len(excess) > 30
    assert float(np.median(excess)) <= 3.0


def test_pick_spread_counts_each_pick_as_observed():
    """Two candidates 0.1 W apart are both farthest from what was observed; ranking by distance
    took both, the greedy pick takes one and then the far end."""
    power = np.array([30.0, 30.1, 20.0, 25.0])
    picks = pick_spread(power, np.zeros(4, dtype=int), np.array([10.0]), np.array([0]), 2)
    assert picks.tolist() == [1, 2]


def test_pick_spread_ranks_by_distance_per_run():
    """A configuration at a measured mode costs one run, one at a new mode two: distance per run
    decides, and once a new mode is picked its other batch sizes cost one run."""
    seen, seen_groups = np.array([15.0, 20.0, 20.0, 20.0]), np.array([0, 1, 2, 3])
    # config 0: 6 W from the observed of its batch size, 1 run; config 1: 11 W, 2 runs
    power, groups = np.array([21.0, 31.0]), np.array([0, 1])
    assert pick_spread(power, groups, seen, seen_groups, 1).tolist() == [1]
    assert pick_spread(power, groups, seen, seen_groups, 1, np.array([1.0, 2.0]), np.array([0, 1])).tolist() == [0]
    # configs 0 and 2 share a new mode, config 1 is at another: after 0, config 2 costs one run
    power, groups, mode_of = np.array([30.0, 28.0, 27.0]), np.array([1, 2, 3]), np.array([7, 8, 7])
    cost = np.full(3, 2.0)
    assert pick_spread(power, groups, seen, seen_groups, 2, cost, mode_of).tolist() == [0, 2]
    assert pick_spread(power, groups, seen, seen_groups, 2, cost).tolist() == [0, 1]
