"""The safe (power-UCB) selector backs off to lower-power modes when the power std is large;
``selection_margin`` calibrates a power margin on a replayed selection."""

from __future__ import annotations

import numpy as np
import pytest

from edgetune.base.risk import z_score
from edgetune.errors import InvalidArgument
from edgetune.optimization.select import Candidates, MinTime, safe_least_time, selection_margin


def test_safe_picks_lower_power_mode_when_std_is_large():
    # fast mode predicted just under the budget but uncertain; slow mode well under and certain
    cands = Candidates(time_ms=[50.0, 80.0], power_w=[19.0, 15.0], power_std_w=[2.0, 0.1])
    mean = MinTime().select(cands, 20.0)
    safe = safe_least_time(cands, 20.0, risk=0.05)
    assert mean.index == 0 and safe.index == 1
    assert safe.power_w < mean.power_w
    assert safe.power_bound_w == 15.0 + z_score(0.05) * 0.1


def test_safe_sweep_never_picks_more_power_than_mean_and_std_zero_is_mean():
    rng = np.random.default_rng(0)
    power = rng.uniform(10.0, 50.0, 500)
    time_ms = 1000.0 / power  # more power, less time: the least-time pick is the highest feasible power
    budgets = list(range(17, 51))
    big = Candidates(time_ms, power, power_std_w=np.full(500, 3.0))
    mean = MinTime().sweep(big, budgets)
    safe = MinTime(risk=0.05).sweep(big, budgets)
    for m, s in zip(mean, safe, strict=True):
        if s.feasible:
            assert s.power_w <= m.power_w + 1e-12
            assert s.power_bound_w <= s.power_budget_w
    assert sum(s.power_w < m.power_w for m, s in zip(mean, safe, strict=True) if s.feasible) > len(budgets) // 2
    zero = Candidates(time_ms, power, power_std_w=np.zeros(500))
    assert [s.index for s in MinTime(risk=0.05).sweep(zero, budgets)] == [m.index for m in mean]


def _options(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    """n options: true power 15-50 W, time falling with power (more power, faster) with some scatter."""
    power = rng.uniform(15.0, 50.0, n)
    time_ms = 3000.0 / power * np.exp(rng.normal(0.0, 0.1, n))
    return time_ms, power


def _over_rate(time_ms, pred, obs, margin, budgets, tol=0.0) -> float:
    sel = MinTime().sweep(Candidates(time_ms, np.maximum(pred + margin, 0.0)), budgets)
    over = [obs[s.index] > b + tol for b, s in zip(budgets, sel, strict=True) if s.feasible]
    return float(np.mean(over))


def test_selection_margin_is_the_least_margin_that_keeps_the_replayed_selection_within_budget():
    rng = np.random.default_rng(3)
    t, p = _options(rng, 60)
    pred = p + rng.normal(0.0, 1.0, p.size)  # held-out predictions with 1 W errors
    budgets = list(np.linspace(p.min(), p.max(), 64))
    margins = [selection_margin(t, pred, p, risk, step_w=0.05) for risk in (0.2, 0.1, 0.05)]
    assert margins == sorted(margins) and margins[-1] > 0.0  # less risk, more margin
    for risk, m in zip((0.2, 0.1, 0.05), margins, strict=True):
        assert _over_rate(t, pred, p, m, budgets) <= risk
        if m > 0:
            assert _over_rate(t, pred, p, m - 0.05, budgets) > risk  # nothing smaller on the grid does
    # exact predictions need no margin; a constant 2 W under-prediction needs close to (never more than) 2 W
    assert selection_margin(t, p, p, 0.05) == 0.0
    assert 1.5 < selection_margin(t, p - 2.0, p, 0.05, step_w=0.01) <= 2.0 + 1e-9
    # a tolerance (only excesses > tolerance count) can only lower the margin
    assert selection_margin(t, pred, p, 0.1, tolerance_w=1.0) <= selection_margin(t, pred, p, 0.1)


def test_selection_margin_controls_the_over_budget_rate_of_a_fresh_selection():
    # known noise (power errors N(0, 1.5 W)); the margin calibrated on one draw of 100 options keeps a new
    # selection over another 100 options from the same process within budget about 1 - risk of the time
    # (neither far above risk nor far below it: not needlessly conservative); no margin exceeds far more often
    risk, rates, bare = 0.1, [], []
    for seed in range(30):
        rng = np.random.default_rng(100 + seed)
        t, p = _options(rng, 100)
        m = selection_margin(t, p + rng.normal(0.0, 1.5, p.size), p, risk)
        t2, p2 = _options(rng, 100)
        pred2 = p2 + rng.normal(0.0, 1.5, p2.size)
        budgets = list(np.linspace(20.0, 45.0, 26))
        rates.append(_over_rate(t2, pred2, p2, m, budgets))
        bare.append(_over_rate(t2, pred2, p2, 0.0, budgets))
    assert risk - 0.05 <= np.mean(rates) <= risk + 0.05
    assert np.mean(bare) > 3 * risk


def test_selection_margin_refuses_bad_arguments_naming_the_field():
    t, p = _options(np.random.default_rng(0), 20)
    cases = [(dict(risk=0.0), "risk"), (dict(risk=0.7), "risk"), (dict(tolerance_w=-1.0), "tolerance_w"),
             (dict(step_w=0.0), "step_w"), (dict(max_margin_w=-2.0), "max_margin_w"),
             (dict(budgets_w=[20.0, -1.0]), "budgets_w[1]")]  # the bad entry is named
    for kw, field in cases:
        args = {"risk": 0.1, **kw}
        with pytest.raises(InvalidArgument) as exc:
            selection_margin(t, p, p, **args)
        assert exc.value.field == field
    with pytest.raises(InvalidArgument) as exc:
        selection_margin(t, p[:-1], p, 0.1)
    assert exc.value.field == "power_pred_w"
    with pytest.raises(InvalidArgument) as exc:
        selection_margin(t, p, p[:-1], 0.1)
    assert exc.value.field == "power_obs_w"
    with pytest.raises(InvalidArgument) as exc:
        selection_margin(t[:4], p[:4], p[:4], 0.1)
    assert exc.value.field == "time_ms"
