"""NodeTuner when the transferred model is far off: verification checks what it measured.

The issue's 18.8 W YOLO-like case in miniature: a transfer predicts a few slow modes to run ~4.4x faster
than they do (210 ms predicted, 933 ms measured there); their power fits the budget, so the selection
picks one. Before, verification accepted it because its power fit and the tuner settled 3.9x slow. Now a
choice whose measured time is far off its prediction joins the profiles, the model is refitted and the
selection redone, within the profile budget; the answer is the best mode measured within budget, and
the decision keeps what was predicted apart from what was measured.

The device is a table lookup and the "transfer" a stand-in that is exact on every profiled mode (as a
GP through its points) and, elsewhere, off by the trap factor on the trap modes: no torch, seconds.
"""

from __future__ import annotations

import numpy as np
import pytest

from edgetune.base.records import Points, Predictions, mode_key
from edgetune.errors import FailedPrecondition, InvalidArgument
from edgetune.optimization.frontier import FrontierSampler
from edgetune.tuning.local import LibrarySelector
from edgetune.tuning.policy import TuningPolicy
from edgetune.tuning.protocols import ModelRef
from edgetune.tuning.tuner import NodeTuner

TRAP_FACTOR = 210.0 / 933.0  # predicted / measured at the chosen mode


def table() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """200 modes (10 CPU x 20 GPU clocks): time falls with both clocks, power rises with both."""
    cpu, gpu = np.meshgrid(np.linspace(400, 2200, 10), np.linspace(100, 1300, 20), indexing="ij")
    cpu, gpu = cpu.ravel(), gpu.ravel()
    modes = np.column_stack([np.full(cpu.size, 8), cpu, gpu, np.full(cpu.size, 3199.0)])
    time_ms = 40.0 + 60_000.0 / gpu + 120_000.0 / cpu
    power_w = 8.0 + 0.02 * gpu + 0.006 * cpu
    return modes, time_ms, power_w


class TableDevice:
    """Measures from the table (exact values); records what it measured and why."""

    def __init__(self, modes: np.ndarray, time_ms: np.ndarray, power_w: np.ndarray) -> None:
        self.at = {mode_key(m): i for i, m in enumerate(modes)}
        self.time_ms, self.power_w = time_ms, power_w
        self.log: list[tuple[str, int]] = []

    def measure(self, modes: np.ndarray, batch_size: int, *, seed: int = 0, purpose: str = "profile") -> Points:
        idx = [self.at[mode_key(m)] for m in np.asarray(modes).reshape(-1, 4)]
        self.log += [(purpose, i) for i in idx]
        return Points(np.asarray(modes).reshape(-1, 4), np.full(len(idx), batch_size), self.time_ms[idx],
                      self.power_w[idx], "dev", "w", "train")


class TrapEstimator:
    """Exact on profiled modes, exact power everywhere (σ 2 %), time x TRAP_FACTOR on unprofiled trap modes."""

    where = "test"

    def __init__(self, modes, time_ms, power_w, trap: np.ndarray) -> None:
        self.modes, self.time_ms, self.power_w, self.trap = modes, time_ms, power_w, trap
        self.known: set = set()

    def transfer(self, base, points, *, model_id, method, seed=0, transfer_epochs=None, params=None) -> ModelRef:
        self.known = {mode_key(m) for m in points.modes}
        return ModelRef(model_id, "trap", has_std=True, n_train=len(points))

    def predict(self, model, modes, batch_size) -> Predictions:
        off = np.array([self.trap[i] and mode_key(m) not in self.known for i, m in enumerate(self.modes)])
        t = self.time_ms * np.where(off, TRAP_FACTOR, 1.0)
        return Predictions(self.modes, np.full(len(self.modes), batch_size), t, self.power_w, 0.02 * t,
                           0.02 * self.power_w)

    def fit(self, *a, **k):  # pragma: no cover - not used
        raise NotImplementedError

    def find(self, model_id):  # pragma: no cover - not used
        return None


@pytest.fixture()
def case():
    modes, time_ms, power_w = table()
    budget_w = float(np.quantile(power_w, 0.25))
    policy = TuningPolicy(risk=0.2, n_initial=6, rounds=2, per_round=3, refine_profiles=6, seed=3)
    assert policy.explore_rounds == 0 and policy.profiles == 12
    initial = set(FrontierSampler(len(modes), n_initial=6, rounds=0, seed=3).ask().tolist())
    # trap: the slowest-CPU modes at high GPU clocks that still fit the budget, none among the initial draw
    fits = power_w <= budget_w - 0.5
    low_cpu = modes[:, 1] == modes[:, 1].min()
    cands = [i for i in np.flatnonzero(fits & low_cpu)[::-1] if i not in initial][:2]
    trap = np.zeros(len(modes), dtype=bool)
    trap[cands] = True
    device = TableDevice(modes, time_ms, power_w)
    estimator = TrapEstimator(modes, time_ms, power_w, trap)
    tuner = NodeTuner(policy, device, estimator, LibrarySelector(), base=ModelRef("base", "ref"), candidates=modes,
                      batch_size=16, device="dev", workload="w", power_range_w=(budget_w, budget_w))
    best = int(np.flatnonzero(power_w <= budget_w)[np.argmin(time_ms[power_w <= budget_w])])
    return tuner, device, trap, budget_w, best, time_ms


def test_a_choice_far_off_its_predicted_time_is_evidence_and_the_selection_is_redone(case):
    tuner, device, trap, budget_w, best, time_ms = case
    tuner.explore()
    # the trap works: the first selection is a trap mode, predicted ~4.4x faster than it runs
    first = tuner.selector.select(tuner.predictions, budget_w, risk=0.2, objective=tuner.policy.objective)
    assert first.index is not None and trap[first.index]
    decision = tuner.select_and_verify(budget_w)
    assert decision.feasible and decision.within_budget
    assert not trap[decision.index]
    assert time_ms[decision.index] <= 1.10 * time_ms[best], (time_ms[decision.index], time_ms[best])  # was 3.9x
    assert any("joins the profiles" in n for n in decision.notes), decision.notes
    assert len({i for _, i in device.log}) <= tuner.policy.profiles  # within the profile budget
    # measured and predicted values are kept apart: the measured time is the device's, not the model's
    assert decision.measured_time_ms == pytest.approx(time_ms[decision.index])
    assert decision.predicted_time_ms is not None


def test_without_profile_budget_left_the_best_measured_mode_is_kept(case):
    tuner, device, trap, budget_w, best, time_ms = case
    tuner.policy = tuner.policy.with_(refine_profiles=0, rounds=0)  # 6 profiles, all spent on the initial draw
    assert tuner.policy.profiles == 6
    tuner.explore()
    decision = tuner.select_and_verify(budget_w)
    assert decision.within_budget and not trap[decision.index]
    # the trap was measured (a choice is always verified), then the best measured within budget was kept
    assert ("verify", int(np.flatnonzero(trap)[-1])) in device.log or ("verify", int(np.flatnonzero(trap)[0])) in \
        device.log
    # the fastest of the measured modes within budget whose predicted bound (σ 2 %, risk 0.2) fits too
    fits = [i for _, i in device.log if device.power_w[i] * (1 + 0.8416 * 0.02) <= budget_w]
    assert time_ms[decision.index] == pytest.approx(min(time_ms[fits]))
    assert any("best measured" in n or "best mode measured" in n for n in decision.notes), decision.notes


@pytest.mark.parametrize("max_attempts, choices", [(5, 2), (1, 1)])
def test_with_the_profiles_spent_far_off_evidence_reselects_once_within_the_retry_limit(case, max_attempts, choices):
    # a 12-profile job re-budgeted after its first budget spent the profiles (experiments/controller_transfer.py:
    # a choice measured 1.9x its predicted time was kept, 3.6x slower than the best): the evidence still refits
    # the model and the selection is redone once, a measured choice like a miss's, within policy.max_attempts
    tuner, device, trap, budget_w, best, time_ms = case
    tuner.policy = tuner.policy.with_(refine_profiles=0, rounds=0, max_attempts=max_attempts)
    tuner.explore()
    assert tuner.profiles_left() == 0
    decision = tuner.select_and_verify(budget_w)
    verified = [i for purpose, i in device.log if purpose == "verify"]
    assert len(verified) == choices and trap[verified[0]] and decision.attempts == choices
    assert any("joins the profiles" in n for n in decision.notes) == (choices > 1), decision.notes
    assert decision.within_budget and not trap[decision.index]  # the best measured within budget, as before


def test_a_tuner_fine_tunes_for_the_policys_epochs_unless_told_and_only_methods_that_fine_tune(case):
    tuner = case[0]
    assert tuner.transfer_epochs == tuner.policy.transfer_epochs == 300
    told = NodeTuner(tuner.policy, tuner.measurer, tuner.estimator, tuner.selector, base=tuner.base,
                     candidates=tuner.candidates, batch_size=16, device="dev", workload="w", transfer_epochs=40)
    assert told.transfer_epochs == 40
    ref_gp = NodeTuner(tuner.policy.with_(transfer_method="ref+gp"), tuner.measurer, tuner.estimator, tuner.selector,
                       base=tuner.base, candidates=tuner.candidates, batch_size=16, device="dev", workload="w")
    assert ref_gp.transfer_epochs is None  # ref+gp fine-tunes nothing: the estimator refuses epochs for it
    with pytest.raises(InvalidArgument, match="transfer_epochs"):
        tuner.policy.with_(transfer_epochs=0)


class FlatTopEstimator(TrapEstimator):
    """A transfer that cannot predict above the power it was shown (the fleet bench's case: 12 random profiles
    all under 27 W, MAXN predicted 27 W and measured 44 W): power min(true, highest profiled), time exact."""

    calls: list[tuple[str, int | None]]

    def transfer(self, base, points, *, model_id, method, seed=0, transfer_epochs=None, params=None) -> ModelRef:
        self.calls = [*getattr(self, "calls", []), (base.model_id, transfer_epochs)]
        return super().transfer(base, points, model_id=model_id, method=method, seed=seed,
                                transfer_epochs=transfer_epochs, params=params)

    def predict(self, model, modes, batch_size) -> Predictions:
        top = max((self.power_w[i] for i, m in enumerate(self.modes) if mode_key(m) in self.known), default=0.0)
        p = np.minimum(self.power_w, top)
        return Predictions(self.modes, np.full(len(self.modes), batch_size), self.time_ms, p, 0.02 * self.time_ms,
                           0.02 * p)


def test_a_miss_joins_the_profiles_and_widens_only_by_what_the_refit_left():
    modes, time_ms, power_w = table()
    budget_w = float(np.quantile(power_w, 0.75))
    low = np.flatnonzero(power_w < np.quantile(power_w, 0.3))  # every profile well under the budget
    policy = TuningPolicy(risk=0.05, n_initial=6, rounds=0, refine_profiles=0, seed=3)
    device = TableDevice(modes, time_ms, power_w)
    estimator = FlatTopEstimator(modes, time_ms, power_w, np.zeros(len(modes), dtype=bool))
    tuner = NodeTuner(policy, device, estimator, LibrarySelector(), base=ModelRef("base", "ref"), candidates=modes,
                      batch_size=16, device="dev", workload="w", power_range_w=(budget_w, budget_w),
                      model_id="node")
    tuner.points = device.measure(modes[low[::max(1, low.size // 6)][:6]], 16)
    tuner._refit(6)
    decision = tuner.select_and_verify(budget_w)
    first_miss = next(i for purpose, i in device.log if purpose == "verify")
    assert power_w[first_miss] > budget_w  # the flat top's pick: the fastest mode, far over the budget
    assert decision.within_budget and any("joins the profiles" in n for n in decision.notes), decision.notes
    assert mode_key(modes[first_miss]) in {mode_key(m) for m in tuner.points.modes}
    # the first transfer from the reference; the refit for the miss fine-tunes the node's own model, briefly
    assert estimator.calls[0] == ("base", 300) and estimator.calls[1] == ("node", 60), estimator.calls
    # against the refitted model the miss is explained: no margin of its whole error (~45 % here) remains
    assert tuner.safety.power_rel_err < 0.05
    best = time_ms[power_w <= budget_w].min()
    assert time_ms[decision.index] <= 1.10 * best, (time_ms[decision.index], best)


class SkippingDevice(TableDevice):
    """Skips every point it is asked for (each one refused or lost): nothing comes back."""

    def measure(self, modes: np.ndarray, batch_size: int, *, seed: int = 0, purpose: str = "profile") -> Points:
        super().measure(modes, batch_size, seed=seed, purpose=purpose)
        return Points.empty("dev", "w", "train")


def test_a_node_with_no_point_measured_transfers_on_nothing_else(case):
    tuner, _device, _trap, budget_w, _best, _time_ms = case
    modes, time_ms, power_w = table()
    skipping = SkippingDevice(modes, time_ms, power_w)
    calls: list[int] = []
    tuner.estimator.transfer = lambda base, points, **kw: calls.append(len(points))  # type: ignore[method-assign]
    empty = NodeTuner(tuner.policy, skipping, tuner.estimator, tuner.selector, base=tuner.base, candidates=modes,
                      batch_size=16, device="dev", workload="w", power_range_w=(budget_w, budget_w))
    with pytest.raises(FailedPrecondition) as err:
        empty.explore()
    assert "no point was measured" in str(err.value) and skipping.log  # it asked, nothing came back
    assert calls == []  # an estimator given no rows would transfer on every stored row of the device instead
