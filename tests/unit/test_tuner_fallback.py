"""NodeTuner when no mode's power bound fits the budget (σ widened by misses, or a budget at the low end
of what was profiled): the mode with the lowest bound is measured if its predicted mean fits, and the
device's measurement decides; a mode predicted over the budget is never measured.

The predictions are the simulator's noise-free values with a wide σ (30 % of the power), so every
bound is far above its mean; the measurements come from the simulated board through the profiling
protocol, as ``edgetune tune`` makes them.
"""

from __future__ import annotations

import numpy as np
import pytest

from edgetune.base.records import Predictions
from edgetune.base.risk import upper_bound
from edgetune.devices.simulated.device import SimulatedJetson
from edgetune.devices.simulated.tables import truth_table
from edgetune.powermodes.grids import modes_array
from edgetune.powermodes.specs import ORIN_AGX
from edgetune.profiling.protocol import ProfileConfig, Profiler
from edgetune.tuning.local import DeviceMeasurer, LibraryEstimator, LibrarySelector
from edgetune.tuning.policy import TuningPolicy
from edgetune.tuning.tuner import NodeTuner

WORKLOAD = "mobilenetv3"


@pytest.fixture()
def tuner() -> tuple[NodeTuner, list[str]]:
    grid = modes_array(ORIN_AGX, "fulcrum")[::40]
    rows = truth_table(ORIN_AGX, WORKLOAD, "train", grid, [16])
    power_w = np.array([r["power_w"] for r in rows])
    measured: list[str] = []
    profiler = Profiler(SimulatedJetson(ORIN_AGX, seed=1), ProfileConfig(n_minibatches=5, warmup_minibatches=1))
    measurer = DeviceMeasurer(profiler, WORKLOAD, on_measurement=lambda _m, purpose: measured.append(purpose))
    t = NodeTuner(TuningPolicy(risk=0.05, max_attempts=3), measurer, LibraryEstimator(), LibrarySelector(),
                  base=None, candidates=grid, batch_size=16, device=ORIN_AGX.name, workload=WORKLOAD)
    t.predictions = Predictions(grid, np.full(len(grid), 16), np.array([r["time_ms"] for r in rows]), power_w,
                                None, 0.3 * power_w)
    return t, measured


def test_no_bound_fits_the_lowest_bound_is_measured_and_applied_when_within_budget(tuner):
    t, measured = tuner
    pred = t.predictions
    assert pred is not None and pred.power_std_w is not None
    low = int(np.argmin(pred.power_w))
    budget_w = float(pred.power_w[low]) * 1.1  # the mean fits; mean + 1.645 · 30 % does not, for any mode
    assert np.all(upper_bound(pred.power_w, pred.power_std_w, t.policy.risk) > budget_w)
    decision = t.select_and_verify(budget_w)
    assert measured == ["verify"]
    assert decision.feasible and decision.within_budget, decision
    assert decision.index == low and decision.measured_power_w is not None
    assert "lowest bound" in decision.reason and decision.notes


def test_a_mode_predicted_over_the_budget_is_never_measured(tuner):
    t, measured = tuner
    assert t.predictions is not None
    budget_w = float(t.predictions.power_w.min()) * 0.9
    decision = t.select_and_verify(budget_w)
    assert not decision.feasible and decision.measured_power_w is None
    assert measured == []
    assert "upper bound" in decision.reason, decision.reason
