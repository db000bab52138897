"""Frontier sampling (libs/edgetune/optimization/frontier.py): which modes to profile for safe selections."""

from __future__ import annotations

import numpy as np
import pytest

from edgetune.devices.simulated.tables import truth_table
from edgetune.errors import InvalidArgument
from edgetune.optimization.frontier import FrontierSampler, next_frontier_modes
from edgetune.optimization.pareto import pareto_mask
from edgetune.powermodes.grids import named_grid
from edgetune.powermodes.specs import get_spec


@pytest.fixture(scope="module")
def table() -> tuple[np.ndarray, np.ndarray]:
    """(time_ms, power_w) of ResNet18 training on the 441-mode fulcrum grid of the simulated Orin AGX."""
    grid = named_grid(get_spec("orin-agx"), "fulcrum").array()
    rows = truth_table("orin-agx", "resnet18", "train", grid, [16])
    return np.array([r["time_ms"] for r in rows]), np.array([r["power_w"] for r in rows])


def test_picks_are_unprofiled_front_modes_in_the_range(table):
    t, p = table
    front = np.flatnonzero(pareto_mask(t, p))
    profiled = list(front[::4])
    picks = next_frontier_modes(t, p, profiled, 5, power_range_w=(20, 40))
    assert len(picks) == 5 and len(set(picks)) == 5
    assert set(picks) <= set(front) - set(profiled)
    assert ((p[picks] >= 18) & (p[picks] <= 41)).all()  # the range widened by 2 W below, 1 W above


def test_picks_spread_by_power_away_from_what_was_profiled(table):
    t, p = table
    front = np.flatnonzero(pareto_mask(t, p))
    low = front[p[front] < 20]  # everything profiled so far is low-power
    picks = next_frontier_modes(t, p, list(low), 3)
    # the first pick is the front mode farthest in power from the profiled ones: the top of the front
    assert p[picks[0]] == p[front].max()
    assert np.min(np.abs(np.diff(np.sort(p[picks])))) > 1.0  # not three neighbours


def test_a_profiled_front_moves_on_to_the_next_front(table):
    t, p = table
    front = np.flatnonzero(pareto_mask(t, p))
    picks = next_frontier_modes(t, p, list(front), 4)
    assert len(picks) == 4 and not set(picks) & set(front)
    rest = np.setdiff1d(np.arange(t.size), front)
    assert set(picks) <= set(rest[pareto_mask(t[rest], p[rest])])


def test_sampler_covers_the_front_better_than_random(table):
    """With the true table as the 'prediction', frontier sampling leaves smaller power gaps along
    the front in the budget range than the same number of random modes (the point of it)."""
    t, p = table
    sampler = FrontierSampler(t.size, n_initial=5, rounds=5, per_round=3, power_range_w=(15, 45), seed=1)
    first = sampler.ask()
    assert len(first) == 5 and len(set(first)) == 5
    while not sampler.done:
        assert len(sampler.ask(t, p)) == 3
    assert len(sampler.profiled) == sampler.budget == 20 and len(set(sampler.profiled)) == 20
    assert sampler.ask(t, p).size == 0  # done

    front = np.flatnonzero(pareto_mask(t, p) & (p >= 15) & (p <= 45))

    def worst_gap_w(profiled) -> float:
        """The largest distance in power from a front mode to the nearest profiled power."""
        q = p[np.asarray(profiled)]
        return float(np.max(np.min(np.abs(p[front][:, None] - q[None, :]), axis=1)))

    random_gaps = [worst_gap_w(np.random.default_rng(s).choice(t.size, 20, replace=False)) for s in range(20)]
    assert worst_gap_w(sampler.profiled) < np.median(random_gaps)
    on_front = np.isin(sampler.profiled, np.flatnonzero(pareto_mask(t, p))).sum()
    assert on_front >= 15  # every round's picks lie on the front


def test_rounds_need_predictions_and_bad_values_name_the_field(table):
    t, p = table
    sampler = FrontierSampler(t.size, seed=0)
    sampler.ask()
    with pytest.raises(InvalidArgument, match="pred_time_ms"):
        sampler.ask()
    with pytest.raises(InvalidArgument, match="pred_power_w"):
        sampler.ask(t, p[:-1])
    with pytest.raises(InvalidArgument, match="k"):
        next_frontier_modes(t, p, [], 0)
    with pytest.raises(InvalidArgument, match="power_range_w"):
        next_frontier_modes(t, p, [], 2, power_range_w=(40, 20))
    with pytest.raises(InvalidArgument, match="profiled"):
        next_frontier_modes(t, p, [t.size], 2)
    with pytest.raises(InvalidArgument, match="below_w"):
        next_frontier_modes(t, p, [], 2, power_range_w=(20, 40), below_w=-1)
    with pytest.raises(InvalidArgument, match="n_initial"):
        FrontierSampler(10, n_initial=11)
    with pytest.raises(InvalidArgument, match="per_round"):
        FrontierSampler(10, per_round=0)


def test_run_frontier_sampling_measures_each_round_refits_and_returns_the_last_predictions(table):
    from edgetune.optimization.frontier import run_frontier_sampling

    t, p = table
    measured: list[np.ndarray] = []
    refits = []

    def refit():  # "predictions": the truth, shifted by the number of profiles so far
        refits.append(sum(len(m) for m in measured))
        return {"time_ms": t + refits[-1], "power_w": p}

    rounds = []
    sampler = FrontierSampler(len(t), n_initial=4, rounds=3, per_round=2, power_range_w=(20, 40), seed=1)
    pred = run_frontier_sampling(sampler, measured.append, refit, lambda k, picks: rounds.append((k, len(picks))))
    assert [len(m) for m in measured] == [4, 2, 2, 2] and refits == [4, 6, 8, 10]
    assert rounds == [(0, 4), (1, 2), (2, 2), (3, 2)]
    assert np.array_equal(pred["time_ms"], t + 10)  # the last refit's
    assert len(set(np.concatenate(measured).tolist())) == 10  # no mode profiled twice


def test_an_empty_band_is_widened_not_taken_for_the_end(table):
    from edgetune.optimization.frontier import run_frontier_sampling

    t, p = table
    measured: list[np.ndarray] = []
    # a budget between two predicted power levels with nothing in its band (the 18.8 W table, where an
    # empty round 1 ended the sampling after the 10 random modes): the band is doubled until it holds modes
    gap = float(p.max()) + 20.0
    sampler = FrontierSampler(len(t), n_initial=3, rounds=5, per_round=2, power_range_w=(gap, gap), seed=0)
    run_frontier_sampling(sampler, measured.append, lambda: {"time_ms": t, "power_w": p})
    assert [len(m) for m in measured] == [3, 2, 2, 2, 2, 2]
    assert sampler.widened > 0
    picked = np.concatenate(measured[1:])
    front = pareto_mask(t, p)
    # the front's top, in the first doubled band that reaches it (2 W below the budget -> 32 W for a 20 W gap)
    assert front[picked].all() and p[picked].min() >= gap - 32.0


def test_run_frontier_sampling_ends_early_only_when_every_mode_is_profiled(table):
    from edgetune.optimization.frontier import run_frontier_sampling

    t, p = table
    t, p = t[:7], p[:7]
    measured: list[np.ndarray] = []
    sampler = FrontierSampler(len(t), n_initial=3, rounds=5, per_round=2, power_range_w=(500, 600), seed=0)
    run_frontier_sampling(sampler, measured.append, lambda: {"time_ms": t, "power_w": p})
    assert sum(len(m) for m in measured) == 7 and len(set(np.concatenate(measured).tolist())) == 7
