"""Search budgets are hard limits on profiling runs: one run is one (power mode, batch size) of
one role measured. GMD and ALS, on every problem kind (concurrent included, where a trial at a
new mode measures two points), never profile more than their budget — counted by the driver
from what the replayed device was asked, not by the strategy itself."""

from __future__ import annotations

import pytest

from edgetune.devices.replay import ReplayDevice
from edgetune.devices.simulated import truth_table
from edgetune.optimization.problems import ConcurrentProblem, InferProblem, TrainProblem
from edgetune.optimization.strategies import make_strategy, run_search, search_space
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


def test_als145_concurrent_profiles_at_most_145_runs(table):
    # counting configurations, ALS145 profiled 236-254 runs on concurrent problems
    res, dev, strat = _search(table, ConcurrentProblem(30, 800, 40), "als", **FAST_GUIDE)
    assert strat.budget == 145
    assert len(dev.runs) == res.profiled <= 145
    assert res.profiled > 100  # and it uses its budget, it is not merely cut short at the start


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
