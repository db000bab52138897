"""The safe (power-UCB) selector backs off to lower-power modes when the power std is large."""

from __future__ import annotations

import numpy as np

from edgetune.optimization.select import Candidates, MinTime, safe_least_time, z_score


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
