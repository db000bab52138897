"""Two concurrent inferences (libs/edgetune/optimization/multi_infer.py): the urgent + non-urgent
formulation on hand-computed cases, and the strategies through the unchanged ask/tell interface."""

from __future__ import annotations

import json

import pytest

from edgetune.base.mode import PowerMode
from edgetune.devices.replay import ReplayDevice
from edgetune.devices.simulated.tables import truth_table
from edgetune.optimization.multi_infer import ROLE_BACKGROUND, ROLE_URGENT, UrgentPlusBatchProblem
from edgetune.optimization.problem_registry import problem_from_dict
from edgetune.optimization.problems import Observations, Point
from edgetune.optimization.strategies import SearchStrategy, make_strategy, run_search, search_space
from edgetune.powermodes.grids import named_grid
from edgetune.powermodes.specs import get_spec
from edgetune.tables import Table

A = PowerMode(4, 422.4, 114.75, 665.6)
B = PowerMode(8, 1344.0, 726.75, 2133.0)
FAST_GUIDE = {"epochs": 40, "refit_epochs": 10}


def _obs(points: dict) -> Observations:
    obs = Observations()
    for (mode, role, bs), (t, p) in points.items():
        obs.add(mode, role, bs, Point(t, p))
    return obs


def _problem(power=30.0, lat=500.0, rate=40.0, b_nu=16) -> UrgentPlusBatchProblem:
    return UrgentPlusBatchProblem(power, lat, rate, urgent_workload="mobilenetv3", nonurgent_workload="resnet18",
                                  nonurgent_batch_size=b_nu)


# -- formulas -------------------------------------------------------------------------------------
def test_formulas_by_hand():
    # α = 40 rps, β = 8: window β/α = 200 ms; t_u = 50 ms leaves 150 ms; t_nu = 40 ms → τ = 3;
    # θ_nu = τ·b_nu·α/β = 3·16·40/8 = 240 samples/s; λ = 7/40 s + 50 ms = 225 ms; power max(22, 25)
    p = _problem()
    obs = _obs({(A, ROLE_URGENT, 8): (50.0, 22.0), (A, ROLE_BACKGROUND, 16): (40.0, 25.0)})
    ev = p.evaluate(A, 8, obs)
    assert ev.tau_train == 3
    assert ev.objective == pytest.approx(240.0)  # samples/s
    assert ev.train_minibatches_per_s == pytest.approx(15.0)  # non-urgent minibatches/s
    assert ev.latency_ms == pytest.approx(225.0)
    assert ev.power_w == 25.0 and ev.time_ms == 90.0
    assert ev.feasible
    assert p.samples_per_s(8, 3) == pytest.approx(240.0)
    # the non-urgent power binds the budget like training power does
    assert not _problem(power=24.0).evaluate(A, 8, obs).meets_power
    # λ over budget
    assert not _problem(lat=200.0).evaluate(A, 8, obs).meets_latency


def test_no_nonurgent_minibatch_fits_is_infeasible_and_says_so():
    p = _problem()
    # window 200 ms, t_u 50 ms: 150 ms left, a 160 ms non-urgent minibatch does not fit
    obs = _obs({(A, ROLE_URGENT, 8): (50.0, 22.0), (A, ROLE_BACKGROUND, 16): (160.0, 25.0)})
    ev = p.evaluate(A, 8, obs)
    assert ev.tau_train == 0 and not ev.trains and not ev.feasible
    d = p.decide(ev)
    assert not d.feasible and "non-urgent" in d.reason
    assert "non-urgent" in p.solve(obs).reason


def test_maximises_nonurgent_throughput_smaller_beta_on_tie():
    p = _problem(lat=1000.0)
    obs = _obs({
        (A, ROLE_URGENT, 4): (20.0, 20.0), (A, ROLE_URGENT, 8): (30.0, 20.0), (A, ROLE_BACKGROUND, 16): (40.0, 20.0),
        (B, ROLE_URGENT, 4): (10.0, 28.0), (B, ROLE_URGENT, 8): (15.0, 28.0), (B, ROLE_BACKGROUND, 16): (20.0, 28.0),
    })
    # A: β=4 window 100 ms → τ=2 → 2·16·40/4 = 320; β=8 window 200 → τ=4 → 320 (tie → β=4, lower λ)
    # B: β=4 → τ=4 → 640; β=8 → τ=9 → 720 (best)
    d = p.solve(obs)
    assert d.feasible and d.mode == B and d.batch_size == 8
    assert d.extras["nonurgent_samples_per_s"] == pytest.approx(720.0) and d.extras["tau_nonurgent"] == 9
    d_a = _problem(power=25.0, lat=1000.0).solve(obs)  # B over 25 W
    assert d_a.mode == A and d_a.batch_size == 4
    out = d.as_json(profiled=6)
    assert out["nonurgent_samples_per_s"] == pytest.approx(720.0) and out["latency_ms"] == d.evaluation.latency_ms
    json.dumps(out)


def test_dict_round_trip_and_roles():
    p = _problem()
    d = p.to_dict()
    assert d["problem"] == "urgent_batch" and d["urgent_workload"] == "mobilenetv3"
    assert d["nonurgent_workload"] == "resnet18" and d["nonurgent_batch_size"] == 16
    q = problem_from_dict(d)
    assert isinstance(q, UrgentPlusBatchProblem) and q.to_dict() == d
    assert p.kind == "concurrent"  # the strategies' algorithm family
    assert p.device_role(ROLE_BACKGROUND) == "infer" and p.workload_for(ROLE_BACKGROUND) == "resnet18"


# -- strategies on the simulator ------------------------------------------------------------------
@pytest.fixture(scope="module")
def table() -> Table:
    grid = named_grid(get_spec("orin-agx"), "fulcrum")
    rows = truth_table("orin-agx", "resnet18", "infer", grid.array(), [16])
    rows += truth_table("orin-agx", "mobilenetv3", "infer", grid.array(), [1, 4, 16, 32, 64])
    return Table(list(rows[0].keys()), rows, "truth.csv")


def _run(table, problem, name, **opts):
    dev = ReplayDevice(table)
    space, prob = search_space(dev, problem)
    strat = make_strategy(name, prob, space, seed=0, **opts)
    return run_search(strat, dev, prob), prob


PROBLEMS = [(30, 800, 60), (20, 1000, 40), (40, 500, 90), (15, 2000, 30)]


@pytest.mark.parametrize("budgets", PROBLEMS[:2])
def test_exhaustive_finds_the_optimum(table, budgets):
    res, prob = _run(table, _problem(*budgets), "exhaustive")
    truth = prob.observations_from_rows(table.rows)
    assert len(truth) == 441 * 5 + 441
    opt = prob.solve(truth)
    assert opt.feasible and res.decision.evaluation == opt.evaluation
    assert res.profiled == 441 * 6  # both workloads were profiled as inference, counted once each


def test_gmd_within_budget_and_near_optimal(table):
    for budgets in PROBLEMS:
        res, prob = _run(table, _problem(*budgets), "gmd")
        truth = prob.observations_from_rows(table.rows)
        opt = prob.solve(truth)
        assert res.trials <= 15
        if not opt.feasible:
            assert not res.decision.feasible
            continue
        assert res.decision.feasible
        ev = prob.evaluate(res.decision.mode, res.decision.batch_size, truth)
        assert ev.feasible and ev == res.decision.evaluation
        # loose: τ is an integer, one non-urgent minibatch fewer per window is a big step in %
        assert ev.objective >= 0.6 * opt.evaluation.objective


def test_random_and_als_run_through_the_same_interface(table):
    res, prob = _run(table, _problem(30, 800, 60), "random-50")
    # the budget counts profiling runs: a trial at a new mode measures both workloads' points
    assert res.strategy.spent == 50 and res.profiled <= 50 < 2 * res.trials
    assert res.decision.problem == "urgent_batch"
    res, prob = _run(table, _problem(30, 800, 60), "als", initial=10, rounds=1, **FAST_GUIDE)
    assert res.trials <= 10 + 4 * 10 and res.decision.feasible
    truth = prob.observations_from_rows(table.rows)
    assert prob.evaluate(res.decision.mode, res.decision.batch_size, truth).feasible


def test_state_dict_round_trip(table):
    dev = ReplayDevice(table)
    space, prob = search_space(dev, _problem(30, 800, 60))
    gmd = make_strategy("gmd", prob, space)
    for _ in range(3):
        for t in gmd.ask():
            gmd.tell(t, {r: dev.lookup(t.mode, b, prob.workload_for(r), "infer") for r, b in t.points})
    state = json.loads(json.dumps(gmd.state_dict()))
    again = SearchStrategy.from_state(state)
    assert isinstance(again.problem, UrgentPlusBatchProblem)
    assert [str(t.mode) for t in again.ask()] == [str(t.mode) for t in gmd.ask()]
