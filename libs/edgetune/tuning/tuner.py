"""NodeTuner: one node's workload and budgets in, verified configurations and its option table out.

The workflow, against the narrow interfaces of :mod:`.protocols`:

1. **profile** ``policy.n_initial`` random candidate modes (and ``policy.held_out`` more, kept
   out of training to calibrate the predictions);
2. **explore**: transfer the reference to what was profiled, predict every candidate, and for
   ``policy.explore_rounds`` rounds profile ``policy.per_round`` modes on the predicted front within
   the budget range (:class:`~edgetune.optimization.frontier.FrontierSampler`; a round whose band is
   empty widens it), transferring again after each; then calibrate σ by the held-out relative power
   error (:mod:`.safety`);
3. **select and verify** per budget: the selector chooses from the calibrated predictions at
   ``policy.risk``; the choice is measured on the device; over budget → learn from the miss
   (drop it and every mode dominating it; its measurement joins the profiles and the model is
   refitted; widen the error by what the refitted model still misses there) and select again, at most
   ``policy.max_attempts`` misses. When no mode's power bound fits (σ widened by misses, or a
   budget below the profiled range), the mode with the lowest bound is measured instead, if its
   predicted mean fits: the measurement decides, as for any choice, and the decision's notes say so.
   What verification measured is evidence: a choice whose measured time is off its prediction by more
   than ``policy.verify_time_tol`` joins the profiles, the model is refitted and the selection redone —
   while the profile budget (``policy.profiles`` modes measured in all) lasts, and once per budget past
   it, within ``policy.max_attempts`` choices (a re-budgeted 12-profile job kept a choice 3.6x slower than
   the best when its first budget had spent the profiles: experiments/controller_transfer.py); and
   while unmeasured modes may fit the budget and beat the best measured one (by ``refine_gain``, with
   probability ``refine_fit_p`` of fitting), a round around the budget profiles the most promising
   of them and the selection is redone. The answer is the fastest (objective) mode *measured*
   within budget — the verified choice, or a profiled mode that measured better — so a transfer far
   off cannot settle on a choice slower than what the device already showed;
4. **option table**: the modes not ruled out with their safe power, for round planning.

``edgetune tune`` (a local device), the demo (the services over gRPC) and the tests run this
class; the estimator service runs the same fit / transfer pipeline.
"""

from __future__ import annotations

import copy
import dataclasses
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from edgetune.base.objective import Objective
from edgetune.base.records import Decision, ModeKey, OptionTable, Points, Predictions, mode_key, mode_label
from edgetune.base.risk import upper_bound
from edgetune.errors import FailedPrecondition
from edgetune.estimation.methods import TRANSFER_METHODS
from edgetune.optimization.frontier import FrontierSampler
from edgetune.tuning.fleet import NODE_METHOD, NODE_PARAMS
from edgetune.tuning.policy import TuningPolicy
from edgetune.tuning.protocols import Estimator, Measurer, ModelRef, Selector
from edgetune.tuning.safety import SafetyState, held_out_power_error

#: ``on_round(round, picks, profiled so far)`` after each transfer (round 0: the initial modes).
RoundFn = Callable[[int, int, int], None]


#: A refit for one point more starts from the node's fine-tuned model for this share of the policy's epochs: as
#: accurate above the profiled power as a transfer from the reference, at a fifth of its CPU (60 of 300 epochs:
#: 0.36 s against 1.98 s, power MAPE above 34 W 3.3 % against 3.5 %; experiments/few_profile_misses.py's case).
#: (The estimator batches such refits across nodes: :func:`edgetune.estimation.bundle.transfer_tables`.)
WARM_EPOCHS_SHARE = 0.2


class NodeTuner:
    """Tunes one node (module docstring). Stages may be called one by one (the demo's steps) or
    all at once with :meth:`tune`. ``base`` (the reference to transfer) may be set after profiling."""

    def __init__(self, policy: TuningPolicy, measurer: Measurer, estimator: Estimator, selector: Selector, *,
                 base: ModelRef | None, candidates: np.ndarray, batch_size: int, device: str, workload: str,
                 role: str = "train", model_id: str = "", power_range_w: Sequence[float] | None = None,
                 transfer_epochs: int | None = None, transfer_params: dict[str, str] | None = None,
                 on_round: RoundFn | None = None) -> None:
        self.policy = policy
        self.measurer, self.estimator, self.selector = measurer, estimator, selector
        self.base = base
        self.candidates = np.asarray(candidates, dtype=float).reshape(-1, 4)
        self.batch_size = int(batch_size)
        self.device, self.workload, self.role = device, workload, role
        self.model_id = model_id or f"{device}/{workload}/{role}/{policy.transfer_method}"
        self.method = policy.transfer_method  # how the node adapts ``base`` (a fleet's model: its own, use_fleet)
        # given: the caller's (a coordinator flag); else the policy's, for the methods that fine-tune an MLP
        self.transfer_epochs = transfer_epochs or (policy.transfer_epochs if policy.transfer_method in TRANSFER_METHODS
                                                    else None)
        self.transfer_params = dict(transfer_params or {})
        self.on_round = on_round
        self.sampler = FrontierSampler(len(self.candidates), n_initial=policy.n_initial, rounds=policy.explore_rounds,
                                       per_round=policy.per_round, power_range_w=power_range_w, seed=policy.seed)
        self.points = Points.empty(device, workload, role)  # what the transfer learns from
        self.held_out = Points.empty(device, workload, role)  # measured only to calibrate
        self.model: ModelRef | None = None
        self.predictions: Predictions | None = None
        self.safety = SafetyState()
        self.decisions: list[Decision] = []
        self._verified: dict[ModeKey, tuple[float, float]] = {}  # mode -> measured (time, power)
        self._index = {mode_key(m): i for i, m in enumerate(self.candidates)}

    # -- 1. profile ---------------------------------------------------------------------------------
    def profile_initial(self) -> Points:
        """The initial random modes and the held-out ones, in one measurement run."""
        picks = self.sampler.ask()
        rest = np.setdiff1d(np.arange(len(self.candidates)), picks)
        n_held = min(self.policy.held_out, rest.size)
        held = np.sort(np.random.default_rng(self.policy.seed + 1).choice(rest, n_held, replace=False))
        measured = self.measurer.measure(self.candidates[np.concatenate([picks, held])], self.batch_size,
                                         seed=self.policy.seed, purpose="profile")
        held_keys = {mode_key(self.candidates[i]) for i in held}
        is_held = np.array([mode_key(m) in held_keys for m in measured.modes], dtype=bool)
        self.points = self.points + measured.subset(np.flatnonzero(~is_held))
        self.held_out = self.held_out + measured.subset(np.flatnonzero(is_held))
        return measured

    # -- 2. explore ---------------------------------------------------------------------------------
    def explore(self) -> Predictions:
        """Transfer, then the frontier rounds (each profiles, then transfers again); then calibrate."""
        if not len(self.points):
            self.profile_initial()
        pred = self._refit(len(self.points))
        while not self.sampler.done:
            picks = self.sampler.ask(pred.time_ms, pred.power_w)
            if picks.size == 0:  # every mode profiled (an empty band is widened, not taken for the end)
                break
            self.points = self.points + self.measurer.measure(self.candidates[picks], self.batch_size,
                                                              seed=self.policy.seed + self.sampler.rounds_done,
                                                              purpose="profile")
            pred = self._refit(picks.size)
        self.calibrate()
        return pred

    def _refit(self, n_picks: int, *, announce: bool = True, warm: bool = False) -> Predictions:
        """Transfer again on every point. ``warm`` (one more point, from verification): fine-tune the node's own
        model, not the reference, for :data:`WARM_EPOCHS_SHARE` of the epochs, when the method fine-tunes."""
        if self.base is None:
            raise RuntimeError("the tuner has no reference model to transfer yet (set base)")
        if not len(self.points):  # an estimator given no rows transfers on every stored row of the device instead
            raise FailedPrecondition(f"no point was measured on the {self.points.device or 'device'} (each profile "
                                     "skipped or lost): there is nothing of this node's to transfer on")
        base, epochs = self.base, self.transfer_epochs
        if warm and self.model is not None and self.transfer_epochs:
            base, epochs = self.model, max(1, round(self.transfer_epochs * WARM_EPOCHS_SHARE))
        self.model = self.estimator.transfer(base, self.points, model_id=self.model_id,
                                             method=self.method, seed=self.policy.seed,
                                             transfer_epochs=epochs, params=self.transfer_params)
        self.predictions = self.estimator.predict(self.model, self.candidates, self.batch_size)
        if self.on_round is not None and announce:  # (refits while verifying are told in the decision's notes)
            self.on_round(self.sampler.rounds_done, n_picks, len(self.points))
        return self.predictions

    def use_fleet(self, model: ModelRef) -> None:
        """Transfer from a fleet's shared model from now on (:mod:`.fleet`): it was fine-tuned on the pooled
        profiles of this node's peers, so this node fits only its own residual on top (``fleet.NODE_METHOD``)."""
        self.base, self.method = model, NODE_METHOD
        self.transfer_epochs = None  # nothing of the fleet model is fine-tuned again, a warm refit neither
        self.transfer_params = dict(NODE_PARAMS)

    def refresh(self, near: Sequence[float], n_points: int, *, seed: int = 0) -> Predictions:
        """The board changed (drift): measure the ``n_points`` candidates nearest ``near`` (clocks
        scaled by each column's largest value; ``near`` itself included when a candidate), let their
        new measurements replace the old ones at the same modes, forget what verification measured,
        and transfer again. Misses learned so far stay learned."""
        scale = np.maximum(self.candidates.max(axis=0), 1e-9)
        dist = np.linalg.norm((self.candidates - np.asarray(near, dtype=float).reshape(1, 4)) / scale, axis=1)
        picks = np.sort(np.argsort(dist, kind="stable")[:max(1, int(n_points))])
        fresh = self.measurer.measure(self.candidates[picks], self.batch_size, seed=seed, purpose="profile")
        renewed = {mode_key(m) for m in fresh.modes}
        self.points = self.points.subset([i for i, m in enumerate(self.points.modes) if mode_key(m) not in renewed])
        self.points = self.points + fresh
        self._verified.clear()
        return self._refit(len(fresh))

    def calibrate(self) -> float:
        """Set the error term to the held-out relative power error (0 without held-out modes)."""
        self.safety.power_rel_err = self.held_out_error()
        return self.safety.power_rel_err

    def held_out_error(self) -> float:
        """RMS relative power error of the predictions on the held-out modes."""
        pred = self._pred()
        trained = {mode_key(m) for m in self.points.modes}  # a held-out mode later profiled is not held out
        held = self.held_out.subset([i for i, m in enumerate(self.held_out.modes) if mode_key(m) not in trained])
        return held_out_power_error(*pred.power_at(held))

    def with_policy(self, policy: TuningPolicy) -> NodeTuner:
        """A tuner that shares this one's profiles, model, predictions and calibration but selects
        afresh under ``policy`` (another risk or retry limit): no misses, no decisions yet."""
        other = copy.copy(self)
        other.policy = policy
        other.safety = SafetyState(power_rel_err=self.held_out_error() if self.predictions is not None else 0.0)
        other.decisions = []
        other._verified = dict(self._verified)  # what the device measured stays measured
        return other

    # -- 3. select and verify -----------------------------------------------------------------------
    def select_and_verify(self, budget_w: float, *, keep_error: bool = True) -> Decision:
        """The safe choice for ``budget_w``, measured on the device; a miss is learned from and the
        selection repeated, at most ``policy.max_attempts`` misses; evidence and rounds around the
        budget while the profile budget lasts (evidence once past it); the best mode measured within budget
        (module docstring).

        ``keep_error=False`` (a sweep of what-if budgets) keeps the error term a miss widened for
        this budget's attempts only; the modes it ruled out stay ruled out below the measured power.
        """
        error_before = self.safety.power_rel_err
        notes: list[str] = []
        decision = Decision(budget_w, False, reason="no attempt")
        attempt = misses = 0
        beyond = True  # one re-selection on time evidence past the profile budget, within max_attempts
        while misses < self.policy.max_attempts:
            pred = self._pred()
            attempt += 1
            allowed = self.safety.allowed(len(pred), budget_w)
            pool = pred.with_power_std(self.safety.power_std_w(pred)).subset(allowed)
            choice = self.selector.select(pool, budget_w, risk=self.policy.risk, objective=self.policy.objective)
            if choice.feasible and choice.index is not None:
                picked, bound_w, why = choice.index, choice.power_bound_w, choice.reason
            else:
                fallback = self._safest(pool, budget_w)
                if fallback is None:
                    decision = Decision(budget_w, False, attempts=attempt, notes=tuple(notes),
                                        reason=choice.reason or f"no predicted mode fits {budget_w:g} W")
                    break
                picked, bound_w = fallback
                why = (f"no mode's power bound fits {budget_w:g} W at risk {self.policy.risk:g}; measuring the mode "
                       f"with the lowest bound ({bound_w:.2f} W), its predicted mean within budget")
                notes.append(f"attempt {attempt}: {why}")
            i = int(allowed[picked])
            mode = self.candidates[i]
            measured = self._measure_choice(mode, attempt)
            decision = Decision(budget_w, True, i, tuple(float(v) for v in mode), int(pred.batch_size[i]),
                                float(pred.time_ms[i]), float(pred.power_w[i]), bound_w,
                                None if measured is None else measured[0], None if measured is None else measured[1],
                                attempt, why, tuple(notes))
            if decision.within_budget:
                past = self.profiles_left() < 1
                if self._learn_from_time(i, notes, attempt, beyond=beyond and attempt < self.policy.max_attempts):
                    beyond = beyond and not past
                    continue
                if self._round_near_budget(budget_w, notes, attempt):
                    continue
                break
            misses += 1
            refitted = measured is not None and self._join_profiles(i)
            # against the refitted model when the miss joined its profiles: the error term widens by what the
            # refit did not explain (against the old prediction, one miss at the top clocks made every later
            # choice keep a margin of its whole error)
            dropped = self.learn_from_miss(i, decision.measured_power_w)
            got = f"{decision.measured_power_w:.2f} W" if measured is not None else "nothing (skipped)"
            upper = f" (≤ {choice.power_bound_w:.2f} W)" if choice.power_bound_w is not None else ""
            joined = "; it joins the profiles and the model is refitted" if refitted else ""
            notes.append(f"attempt {attempt}: {mode_label(mode)} predicted {pred.power_w[i]:.2f} W{upper}, "
                         f"measured {got} > {budget_w:g} W; dropped it and {dropped - 1} modes at or above its "
                         f"clocks{joined}; error term now {100 * self.safety.power_rel_err:.1f} %")
            if misses == self.policy.max_attempts:
                notes.append(f"no mode verified within budget after {attempt} attempts")
        decision = self._keep_best_measured(decision, budget_w, notes)
        if not keep_error:
            self.safety.power_rel_err = error_before
        self.decisions.append(decision)
        return decision

    # -- what was measured decides ---------------------------------------------------------------------
    def measured_modes(self) -> dict[ModeKey, tuple[int, float, float]]:
        """Every mode measured for this node (profiles, then verified choices): candidate row, time, power."""
        out: dict[ModeKey, tuple[int, float, float]] = {}
        for m, t, p in zip(self.points.modes, self.points.time_ms, self.points.power_w, strict=True):
            i = self._index.get(mode_key(m))
            if i is not None:
                out[mode_key(m)] = (i, float(t), float(p))
        for key, (t, p) in self._verified.items():
            i = self._index.get(key)
            if i is not None:
                out[key] = (i, t, p)
        return out

    def profiles_left(self) -> int:
        """Modes the profile budget (``policy.profiles``) still allows to measure (held-out ones apart)."""
        return max(0, self.policy.profiles - len(self.measured_modes()))

    def _score(self, time_ms: Any, power_w: Any) -> Any:
        """The objective's value (smaller is better) of time and power (numbers or arrays); None: the
        objective is not one that measured time and power decide (e.g. least power within a time budget)."""
        if self.policy.objective is Objective.MIN_TIME:
            return time_ms
        if self.policy.objective is Objective.MIN_ENERGY:
            return time_ms * power_w
        return None

    def _best_measured(self, budget_w: float) -> tuple[int, float, float] | None:
        """The measured mode with the best objective value among those measured within ``budget_w`` whose
        predicted power bound fits it too (one measurement alone would favour modes measured low by noise:
        the fastest of them sits at the budget's edge), not ruled out for it."""
        if self._score(1.0, 1.0) is None:
            return None
        pred = self._pred()
        bound = upper_bound(pred.power_w, self.safety.power_std_w(pred), self.policy.risk)
        ruled_out = self.safety.excluded(len(self.candidates), budget_w)
        fits = [v for v in self.measured_modes().values()
                if v[2] <= budget_w and bound[v[0]] <= budget_w and not ruled_out[v[0]]]
        return min(fits, key=lambda v: (self._score(v[1], v[2]), v[0])) if fits else None

    def _keep_best_measured(self, decision: Decision, budget_w: float, notes: list[str]) -> Decision:
        """``decision``, or the best mode measured within budget when it measured better (or none was verified)."""
        best = self._best_measured(budget_w)
        if best is None:
            return dataclasses.replace(decision, notes=tuple(notes))
        j, t, p = best
        if decision.within_budget and decision.index is not None and decision.measured_time_ms is not None:
            if decision.index == j or self._score(t, p) > (1.0 - self.policy.swap_gain) * self._score(
                    decision.measured_time_ms, decision.measured_power_w):
                return dataclasses.replace(decision, notes=tuple(notes))
            notes.append(f"{mode_label(self.candidates[decision.index])} measured {decision.measured_time_ms:.1f} ms; "
                         f"{mode_label(self.candidates[j])} measured {t:.1f} ms at {p:.2f} W: the best measured "
                         "within budget is kept")
        else:
            notes.append(f"the best mode measured within budget is kept: {mode_label(self.candidates[j])}, "
                         f"{t:.1f} ms at {p:.2f} W")
        pred = self._pred()
        std = self.safety.power_std_w(pred)
        return Decision(budget_w, True, j, tuple(float(v) for v in self.candidates[j]), int(pred.batch_size[j]),
                        float(pred.time_ms[j]), float(pred.power_w[j]),
                        float(upper_bound(pred.power_w[j:j + 1], std[j:j + 1], self.policy.risk)[0]), t, p,
                        max(decision.attempts, 1), "the best mode measured within budget", tuple(notes))

    def _can_learn(self) -> bool:
        return self.base is not None and self.model is not None

    def _learn_from_time(self, index: int, notes: list[str], attempt: int, *, beyond: bool = False) -> bool:
        """A verified choice far off its predicted time joins the profiles and the model is refitted
        (True: select again). Not when it was profiled already (the model saw it) or nothing can be refitted,
        nor when the profile budget is spent unless ``beyond`` (the budget's one re-selection past it)."""
        key = mode_key(self.candidates[index])
        pred = self._pred()
        t_pred = float(pred.time_ms[index])
        t_meas, p_meas = self._verified[key]
        if (not self._can_learn() or (self.profiles_left() < 1 and not beyond) or t_pred <= 0
                or abs(t_meas - t_pred) / t_pred <= self.policy.verify_time_tol):
            return False  # (one measurement is kept for verifying the next choice)
        if not self._join_profiles(index):
            return False
        notes.append(f"attempt {attempt}: {mode_label(self.candidates[index])} measured {t_meas:.1f} ms, predicted "
                     f"{t_pred:.1f} ms (off by more than {100 * self.policy.verify_time_tol:.0f} %): it joins the "
                     "profiles, the model is refitted and the selection redone")
        return True

    def _join_profiles(self, index: int) -> bool:
        """Candidate ``index``'s verification measurement joins the profiles and the model is refitted (no new
        measurement: the profile budget counts it already). False: it was profiled, or nothing can be refitted."""
        key = mode_key(self.candidates[index])
        if not self._can_learn() or key not in self._verified or any(mode_key(m) == key for m in self.points.modes):
            return False
        t_meas, p_meas = self._verified[key]
        self.points = self.points + Points(self.candidates[index].reshape(1, 4), np.asarray([self.batch_size]),
                                           np.asarray([t_meas]), np.asarray([p_meas]), self.points.device,
                                           self.points.workload, self.points.role)
        self._refit(1, announce=False, warm=True)
        return True

    def _round_near_budget(self, budget_w: float, notes: list[str], attempt: int) -> bool:
        """Profile the unmeasured modes most likely to fit ``budget_w`` and beat the best measured one, while
        the profile budget lasts (one measurement kept for verifying the next choice); True: select again."""
        left = self.profiles_left() - 1
        best = self._best_measured(budget_w)
        if left <= 0 or best is None or not self._can_learn():
            return False
        pred = self._pred()
        score = np.asarray(self._score(pred.time_ms, np.maximum(pred.power_w, 0.0)), dtype=float)
        # against the model's value at the best measured mode: its one measurement may sit low by noise
        gain = 1.0 - score / max(float(score[best[0]]), float(self._score(best[1], best[2])))
        std = np.maximum(self.safety.power_std_w(pred), 1e-9)
        z = (budget_w - pred.power_w) / std
        fit_p = 0.5 * (1.0 + np.vectorize(math.erf)(z / math.sqrt(2.0)))
        measured = {v[0] for v in self.measured_modes().values()}
        unmeasured = np.ones(len(pred), dtype=bool)
        unmeasured[list(measured)] = False
        ok = (unmeasured & ~self.safety.excluded(len(pred), budget_w) & (gain >= self.policy.refine_gain)
              & (fit_p >= self.policy.refine_fit_p))
        cands = np.flatnonzero(ok)
        if not cands.size:
            return False
        value = fit_p[cands] * gain[cands]
        picks = cands[np.argsort(-value, kind="stable")[:min(self.policy.per_round, left)]]
        self.points = self.points + self.measurer.measure(self.candidates[picks], self.batch_size,
                                                          seed=self.policy.seed + 500 + attempt, purpose="profile")
        notes.append(f"attempt {attempt}: {cands.size} unmeasured modes may fit {budget_w:g} W and beat the best "
                     f"measured ({best[1]:.1f} ms); profiled {picks.size} of them around the budget, refitted")
        self._refit(int(picks.size), announce=False)
        return True

    def _safest(self, pool: Predictions, budget_w: float) -> tuple[int, float] | None:
        """When no mode's power bound fits: the row of ``pool`` with the lowest bound (mean + z·σ), if its
        predicted mean is within ``budget_w`` (else None: nothing worth measuring). The device's
        measurement then decides, as for any choice; a mode predicted over budget is never measured."""
        std = pool.power_std_w if pool.power_std_w is not None else np.zeros(len(pool))
        bound = upper_bound(pool.power_w, std, self.policy.risk)
        if not len(bound):
            return None
        j = int(np.argmin(bound))
        return (j, float(bound[j])) if pool.power_w[j] <= budget_w else None

    def _measure_choice(self, mode: np.ndarray, attempt: int) -> tuple[float, float] | None:
        key = mode_key(mode)
        if key not in self._verified:
            got = self.measurer.measure(mode.reshape(1, 4), self.batch_size, seed=self.policy.seed + 99 + attempt,
                                        purpose="verify")
            if not len(got):
                return None
            self._verified[key] = (float(got.time_ms[0]), float(got.power_w[0]))
        return self._verified[key]

    def learn_from_miss(self, index: int, measured_w: float | None) -> int:
        """Candidate ``index`` measured over its budget (:meth:`SafetyState.learn_from_miss`)."""
        pred = self._pred()
        return self.safety.learn_from_miss(self.candidates, index, float(pred.power_w[index]), measured_w,
                                           self.policy.risk)

    def learn_from_miss_at(self, mode: Sequence[float], measured_w: float | None) -> int:
        """The same for a mode given by its clocks (e.g. a round's config measured over budget)."""
        i = self._index.get(mode_key(mode))
        return 0 if i is None else self.learn_from_miss(i, measured_w)

    # -- 4. the node's options ----------------------------------------------------------------------
    def option_table(self) -> OptionTable:
        """Every mode not ruled out, with its safe power (mean + z(1 - risk) · calibrated σ)."""
        return self.safety.option_table(self._pred(), self.policy.risk)

    # -- all of it -----------------------------------------------------------------------------------
    def tune(self, budgets_w: Sequence[float]) -> list[Decision]:
        """Profile, explore, and a verified decision per budget (in the order given). Budgets are tried
        lowest first; with several, each is a what-if: a miss's widened error holds for its own
        budget's attempts, the modes it ruled out for every budget below the measured power."""
        if self.predictions is None:
            self.explore()
        order = sorted(range(len(budgets_w)), key=lambda j: budgets_w[j])
        keep = len(budgets_w) == 1
        out: dict[int, Decision] = {j: self.select_and_verify(float(budgets_w[j]), keep_error=keep) for j in order}
        return [out[j] for j in range(len(budgets_w))]

    def _pred(self) -> Predictions:
        if self.predictions is None:
            raise RuntimeError("explore() first: there are no predictions yet")
        return self.predictions
