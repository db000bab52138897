"""Search strategies (libs/edgetune/optimization/strategies/) against replayed simulator truth tables.

Truth: the simulator's noise-free ``truth_table`` on the Orin AGX 441-mode Fulcrum grid —
resnet18 training (bs 16) and mobilenetv3 inference (bs 1, 4, 16, 32, 64). ALS and NN run
with short guide fits here (the budgets and the observed-only decisions are what is tested;
their accuracy is the experiment's business).
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from edgetune.devices.replay import ReplayDevice
from edgetune.devices.simulated.tables import truth_table
from edgetune.errors import InvalidArgument
from edgetune.optimization.problems import ConcurrentProblem, InferProblem, Observations, TrainProblem
from edgetune.optimization.strategies import (
    STRATEGIES,
    SearchStrategy,
    make_strategy,
    run_search,
    search_space,
)
from edgetune.optimization.strategies.als import ALS, config_features, mode_features
from edgetune.optimization.strategies.gmd import GMD
from edgetune.optimization.strategies.guide import Guide
from edgetune.powermodes.grids import named_grid
from edgetune.powermodes.specs import get_spec
from edgetune.tables import Table

FAST_GUIDE = {"epochs": 40, "refit_epochs": 10}


@pytest.fixture(scope="module")
def table() -> Table:
    grid = named_grid(get_spec("orin-agx"), "fulcrum")
    rows = truth_table("orin-agx", "resnet18", "train", grid.array(), [16])
    rows += truth_table("orin-agx", "mobilenetv3", "infer", grid.array(), [1, 4, 16, 32, 64])
    return Table(list(rows[0].keys()), rows, "truth.csv")


@pytest.fixture(scope="module")
def truth(table) -> Observations:
    return Observations.from_rows(table.rows)


def _run(table, problem, name, seed=0, max_profiles=None, **opts):
    dev = ReplayDevice(table)
    space, prob = search_space(dev, problem)
    strat = make_strategy(name, prob, space, seed=seed, **opts)
    return run_search(strat, dev, prob, max_profiles=max_profiles), prob


def _assert_observed_and_feasible(result, prob, truth):
    """A feasible decision is a configuration the strategy measured, and it meets every budget."""
    d = result.decision
    if not d.feasible:
        return
    strat = result.strategy
    for role, b in prob.points_for(d.batch_size):
        assert strat.obs.has(d.mode, role, b), "decision rests on a point that was never measured"
    ev = prob.evaluate(d.mode, d.batch_size, truth)
    assert ev.feasible and ev == d.evaluation


# -- the oracle -----------------------------------------------------------------------------------
@pytest.mark.parametrize("problem", [TrainProblem(25), TrainProblem(40), InferProblem(25, 200, 60),
                                     ConcurrentProblem(30, 800, 40)])
def test_exhaustive_finds_the_optimum(table, truth, problem):
    res, prob = _run(table, problem, "exhaustive")
    opt = prob.solve(truth)
    assert res.decision.feasible and res.decision.evaluation == opt.evaluation
    assert res.trials == len(res.strategy.space.configurations(prob))


def test_exhaustive_train_known_optimum(table):
    res, _ = _run(table, TrainProblem(25), "exhaustive")
    assert res.profiled == 441
    assert res.decision.evaluation.power_w <= 25
    # the table's optimum: nothing faster within 25 W
    faster = [r for r in table.rows if r["role"] == "train" and r["power_w"] <= 25
              and r["time_ms"] < res.decision.evaluation.time_ms]
    assert not faster


# -- GMD ------------------------------------------------------------------------------------------
def test_gmd_train_within_budget_and_near_optimal(table, truth):
    excess = []
    for budget in range(16, 51, 3):
        res, prob = _run(table, TrainProblem(budget), "gmd")
        assert res.trials <= 10 and res.profiled <= 10
        assert res.decision.feasible
        _assert_observed_and_feasible(res, prob, truth)
        excess.append(res.decision.evaluation.time_ms / prob.solve(truth).evaluation.time_ms - 1)
    assert max(excess) < 0.5  # loose per budget
    assert np.median(excess) < 0.10  # the paper's claim for GMD10


def test_gmd_starts_at_the_midpoint_and_probes_four_dimensions(table):
    dev = ReplayDevice(table)
    space, prob = search_space(dev, TrainProblem(25))
    gmd = make_strategy("gmd", prob, space)
    first = gmd.ask()
    assert [str(t.mode) for t in first] == ["8c/1344/726.75/2133"]
    gmd.tell(first[0], dev.lookup(first[0].mode, 16, "resnet18", "train"))
    probes = gmd.ask()
    assert len(probes) == 4  # midpoint over 25 W: each dimension at its lowest value
    assert {str(t.mode) for t in probes} == {"4c/1344/726.75/2133", "8c/422.4/726.75/2133",
                                              "8c/1344/114.75/2133", "8c/1344/726.75/665.6"}


def test_gmd_does_not_bisect_a_flat_dimension():
    """MobileNetV3 training at 18 W: the walk sheds cores, memory and CPU (to 4c/422/727/665,
    431 ms, 16.3 W); raising the GPU from there to its top saves < 1 % (429 ms, 19.8 W), so no
    GPU value in between is profiled. The run that bisection spent (4c/422/931/665, 430 ms) goes
    to a refinement move, which lands on the optimum (4c/1037/523/665, 253 ms): 70 % over before."""
    grid = named_grid(get_spec("orin-agx"), "fulcrum")
    rows = truth_table("orin-agx", "mobilenetv3", "train", grid.array(), [16])
    mb_table = Table(list(rows[0].keys()), rows, "truth.csv")
    res, prob = _run(mb_table, TrainProblem(18, train_workload="mobilenetv3"), "gmd")
    profiled = {str(m) for m, _, _, _ in res.strategy.obs.items()}
    assert "4c/422.4/1300.5/665.6" in profiled  # the line's top, profiled: it shows the line is flat
    assert not {"4c/422.4/930.75/665.6", "4c/422.4/1134.75/665.6", "4c/422.4/522.75/665.6"} & profiled
    assert res.profiled <= 10
    opt = prob.solve(Observations.from_rows(rows))
    assert res.decision.evaluation.time_ms <= 1.01 * opt.evaluation.time_ms


def test_gmd_infer_within_budget(table, truth):
    found = 0
    for budget, lat, rate in [(25, 200, 60), (20, 300, 40), (30, 100, 80), (15, 500, 30), (40, 60, 90)]:
        res, prob = _run(table, InferProblem(budget, lat, rate), "gmd")
        assert res.trials <= 11 and res.profiled <= 11
        _assert_observed_and_feasible(res, prob, truth)
        opt = prob.solve(truth)
        if res.decision.feasible:
            found += 1
            assert res.decision.evaluation.latency_ms <= opt.evaluation.latency_ms * 1.5
    assert found >= 4


def test_gmd_concurrent_within_budget(table, truth):
    for budget, lat, rate in [(30, 800, 40), (25, 1000, 30), (40, 500, 60)]:
        res, prob = _run(table, ConcurrentProblem(budget, lat, rate), "gmd")
        # the budget counts profiling runs: a configuration at a new mode measures both workloads (two)
        assert res.profiled <= 15 and res.strategy.spent <= 15
        _assert_observed_and_feasible(res, prob, truth)
        opt = prob.solve(truth)
        assert res.decision.feasible == opt.feasible
        if opt.feasible:
            # τ is an integer: one training minibatch fewer per window is a big step in %
            assert res.decision.evaluation.objective >= 0.45 * opt.evaluation.objective


# -- ALS, random, NN, fixed modes -----------------------------------------------------------------
def test_als_train_uses_50_profiles_and_decides_on_observations(table, truth):
    res, prob = _run(table, TrainProblem(30), "als", **FAST_GUIDE)
    # Algorithm 2's PickMaxK takes fewer than 5 when the predicted front has fewer points: with
    # these 40-epoch guides a round can come up short (the experiment's 300-epoch guides use 50)
    assert 40 <= res.trials <= 50 and res.profiled == res.trials
    _assert_observed_and_feasible(res, prob, truth)
    assert res.decision.evaluation.time_ms <= 1.25 * prob.solve(truth).evaluation.time_ms


def test_als_infer_stays_within_145(table, truth):
    res, prob = _run(table, InferProblem(25, 200, 60), "als", **FAST_GUIDE)
    assert 25 < res.trials <= 145 and res.profiled <= 145
    _assert_observed_and_feasible(res, prob, truth)
    assert res.decision.feasible


def test_als_train_profiles_the_least_power_mode(table, truth):
    """The tightest budget any mode meets is solved: the least-power mode is always profiled
    (without it the asymmetric-loss guide's over-predicted powers kept ALS above ~15.6 W and
    the 15 W ResNet-18 problem had no answer)."""
    least = min((r for r in table.rows if r["role"] == "train"), key=lambda r: r["power_w"])
    for seed in (0, 1, 2):
        res, prob = _run(table, TrainProblem(round(least["power_w"] + 0.005, 2)), "als", seed=seed, **FAST_GUIDE)
        first = res.strategy._history[:10]
        assert any(str(t.mode) == "4c/422.4/114.75/665.6" for t, _ in first)  # every dimension at its lowest
        assert res.trials <= 50 and res.decision.feasible
        _assert_observed_and_feasible(res, prob, truth)
    ext = make_strategy("als", prob, res.strategy.space, initial=0, rounds=1, **FAST_GUIDE)
    ext.warm_start(Observations())
    assert ext.ask() == []  # an extension adds no initial phase, anchor included


class _OracleGuide(Guide):
    """Predicts the truth table exactly (the NN's accuracy out of the way)."""

    def __init__(self, values: dict):
        self.values = values

    def fit(self, x, y):
        pass

    def predict(self, x):
        return np.array([self.values[tuple(np.round(row, 9))] for row in np.asarray(x)])


def _oracle_factory(space, truth, infer_sizes):
    modes = list(space.modes)
    xm = mode_features(modes)
    cfg = [(m, b) for m in modes for b in infer_sizes]
    xc = config_features([m for m, _ in cfg], [b for _, b in cfg])
    tables = {1: {}, 2: {}, 3: {}, 4: {}}  # ALS's salts: t_in, p_in, t_tr, p_tr
    for row, (m, b) in zip(xc, cfg, strict=True):
        p = truth.get(m, "infer", b)
        tables[1][tuple(np.round(row, 9))], tables[2][tuple(np.round(row, 9))] = p.time_ms, p.power_w
    for row, m in zip(xm, modes, strict=True):
        p = truth.get(m, "train", 16)
        tables[3][tuple(np.round(row, 9))], tables[4][tuple(np.round(row, 9))] = p.time_ms, p.power_w
    return lambda x, seed: _OracleGuide(tables[seed % 1000])


@pytest.mark.parametrize("seed", [0, 1])
def test_als_concurrent_samples_small_batches_for_tight_latency(table, truth, seed):
    """Tight latency at a low rate needs β = 4 at high power (θ = 1 training minibatch per
    window of 4 requests). On a (θ, power) front a small β is always dominated by the larger β
    of the same mode, so ALS profiled β = 4 only at random and missed these problems even with
    exact predictions; latency on the front and per-β power distance sample them."""
    dev = ReplayDevice(table)
    problems = [ConcurrentProblem(37, 390, 30), ConcurrentProblem(34, 200, 35), ConcurrentProblem(38, 150, 30),
                ConcurrentProblem(37, 100, 40)]
    space, p0 = search_space(dev, problems[0])
    als = make_strategy("als", p0, space, seed=seed,
                        guide_factory=_oracle_factory(space, truth, space.infer_batch_sizes))
    res = run_search(als, dev, p0)
    assert res.profiled <= 145
    solved = 0
    for problem in problems:
        _, prob = search_space(dev, problem)
        opt = prob.solve(truth)
        assert opt.feasible and opt.batch_size == 4
        dec = prob.solve(als.obs)
        solved += dec.feasible
        if dec.feasible:
            assert dec.evaluation.objective >= opt.evaluation.objective * (1 - 1e-9)
    # 145 runs (not 145 configurations of up to two runs) cover fewer configurations: with one seed
    # one of the four needles is missed; β = 4 is still sampled at high power for the rest
    assert solved >= 3


def test_random_respects_n(table, truth):
    res, prob = _run(table, TrainProblem(30), "random-37", seed=3)
    assert res.trials == 37 and res.profiled == 37
    _assert_observed_and_feasible(res, prob, truth)
    res, prob = _run(table, InferProblem(25, 200, 60), "random-20")
    assert res.profiled == 20 and len({str(t.mode) for t, _ in res.strategy._history}) == 4  # 4 modes × 5 bs


def test_nn_decision_is_the_observed_pick(table, truth):
    res, prob = _run(table, TrainProblem(35), "nn-30", epochs=60)
    assert res.trials <= 31
    strat = res.strategy
    assert strat.pick is not None and strat.obs.has(strat.pick[0], "train", 16)
    ev = prob.evaluate(strat.pick[0], strat.pick[1], truth)
    assert res.decision.feasible == ev.feasible
    _assert_observed_and_feasible(res, prob, truth)


def test_maxn_and_preset_baselines(table, truth):
    res, _ = _run(table, TrainProblem(60), "maxn")
    assert res.decision.feasible and str(res.decision.mode) == "12c/2201.6/1300.5/3199" and res.profiled == 1
    res, _ = _run(table, TrainProblem(20), "maxn")
    assert not res.decision.feasible and "power" in res.decision.reason
    res, prob = _run(table, TrainProblem(32), "preset")  # MODE_30W: 8 cores, CPU ≤ 1728, GPU ≤ 624.75
    assert res.decision.mode.cores == 8 and res.decision.mode.gpu_mhz <= 624.75
    _assert_observed_and_feasible(res, prob, truth)


@pytest.mark.parametrize("name", ["gmd", "random", "exhaustive", "maxn"])
def test_infeasible_budget_gives_feasible_false(table, name):
    res, _ = _run(table, TrainProblem(5), name)
    assert not res.decision.feasible and res.decision.reason
    assert res.as_json()["feasible"] is False and res.as_json()["profiled"] == res.profiled


def test_infeasible_latency_gives_feasible_false(table):
    for name in ("gmd", "random-50"):
        res, _ = _run(table, InferProblem(50, 10, 90), name)  # 10 ms: faster than any bs-1 minibatch
        assert not res.decision.feasible


def test_max_profiles_caps_what_is_measured(table):
    res, _ = _run(table, TrainProblem(30), "exhaustive", max_profiles=25)
    assert res.profiled == 25 and res.strategy.done
    res, _ = _run(table, ConcurrentProblem(30, 800, 40), "random-40", max_profiles=9)
    assert res.profiled <= 9


# -- ask / tell sessions --------------------------------------------------------------------------
def _drive(strat: SearchStrategy, dev: ReplayDevice, problem, stop_after: int | None = None) -> list[str]:
    """Ask/tell by hand; stop after ``stop_after`` told trials (None: to the end). Returns the trial log."""
    log = []
    while not strat.done:
        trials = strat.ask()
        if not trials:
            break
        for t in trials:
            if stop_after is not None and len(log) >= stop_after:
                return log
            meas = {r: dev.lookup(t.mode, b, problem.workload_for(r), r) for r, b in t.points}
            strat.tell(t, meas)
            log.append(f"{t.number}:{t.mode}:{t.batch_size}")
    return log


@pytest.mark.parametrize("name, problem, opts", [
    ("gmd", TrainProblem(25), {}),
    ("gmd", InferProblem(25, 200, 60), {}),
    ("gmd", ConcurrentProblem(30, 800, 40), {}),
    ("random", InferProblem(25, 200, 60), {"budget": 30}),
    ("als", TrainProblem(30), FAST_GUIDE),
])
def test_state_dict_round_trip_resumes_identically(table, name, problem, opts):
    dev = ReplayDevice(table)
    space, prob = search_space(dev, problem)
    budget = opts.get("budget")
    opts = {k: v for k, v in opts.items() if k != "budget"}

    straight = make_strategy(name, prob, space, seed=7, budget=budget, **opts)
    full_log = _drive(straight, dev, prob)

    session = make_strategy(name, prob, space, seed=7, budget=budget, **opts)
    half = max(1, len(full_log) // 2 + 1)
    first_log = _drive(session, dev, prob, stop_after=half)
    saved = json.loads(json.dumps(session.state_dict()))  # survives a JSON store
    resumed = SearchStrategy.from_state(saved)
    assert type(resumed) is type(session)
    rest_log = _drive(resumed, dev, prob)
    assert first_log + rest_log == full_log
    assert resumed.best() == straight.best()
    # any strategy class resumes any session: the saved name picks the class
    other = GMD if type(session) is not GMD else ALS
    assert type(other.from_state(saved)) is type(session)


def test_tell_rejects_unknown_trials(table):
    dev = ReplayDevice(table)
    space, prob = search_space(dev, TrainProblem(25))
    a = make_strategy("gmd", prob, space)
    b = make_strategy("random", prob, space, budget=3)
    trial = b.ask()[0]
    a.ask()
    with pytest.raises(InvalidArgument):
        a.tell(trial.__class__(99, trial.mode, 16, trial.points), {"train": {"time_ms": 1.0, "power_w": 1.0}})


def test_registry_and_names(table):
    assert {"gmd", "als", "random", "nn", "exhaustive", "maxn", "preset"} <= set(STRATEGIES)
    dev = ReplayDevice(table)
    space, prob = search_space(dev, TrainProblem(25))
    assert make_strategy("random-50", prob, space).budget == 50
    assert make_strategy("nn-250", prob, space).budget == 251
    assert make_strategy("gmd", prob, space).budget == 10
    with pytest.raises(InvalidArgument):
        make_strategy("simulated-annealing", prob, space)
    with pytest.raises(InvalidArgument):
        make_strategy("gmd-5", prob, space)
