"""The tuning policy: every knob of the node-tuning workflow in one object.

``edgetune tune``, the demo and the estimator service read their defaults from
:data:`DEFAULT_POLICY` when they run (:func:`default_policy`), so a change here changes all three.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

from edgetune import validation
from edgetune.base.objective import Objective
from edgetune.base.risk import z_score
from edgetune.errors import InvalidArgument
from edgetune.estimation.methods import check_method
from edgetune.optimization.frontier import N_INITIAL, PER_ROUND, ROUNDS


@dataclass(frozen=True)
class TuningPolicy:
    """How a node is tuned: what is profiled, how predictors are learned, how a choice is made safe."""

    #: Probability that a chosen configuration's power exceeds its budget (one-sided): a choice fits
    #: when ``power_w + z(1 - risk) · σ`` does, σ the calibrated power std. 0.05 is z = 1.645.
    risk: float = 0.05
    #: What the selection minimises (least time within the power budget, ...); its name (``time``) is taken too.
    objective: Objective = Objective.MIN_TIME
    #: Choices measured on the device per budget; a miss (over budget) is learned from and the
    #: selection repeated, at most this many times in all.
    max_attempts: int = 5
    #: Extra random modes profiled only to measure the predictions' relative power error, which
    #: widens every predicted σ (0: no held-out calibration).
    held_out: int = 0
    #: Frontier schedule: random modes first, then rounds × per_round on the predicted front.
    n_initial: int = N_INITIAL
    rounds: int = ROUNDS
    per_round: int = PER_ROUND
    #: Of the schedule's profiles, how many the frontier rounds leave to verification: a chosen mode
    #: whose measured time is far off its prediction joins the profiles and the selection is redone,
    #: and rounds around the budget profile modes that may fit and beat the best measured one.
    refine_profiles: int = PER_ROUND
    #: A verified choice whose measured time is off its prediction by more than this fraction is
    #: evidence: it joins the profiles, the model is refitted and the selection made again.
    verify_time_tol: float = 0.15
    #: Rounds around the budget profile an unmeasured mode only if it may beat the best measured
    #: one within budget by this fraction (predicted) with at least ``refine_fit_p`` probability of
    #: fitting the budget (its calibrated power std).
    refine_gain: float = 0.02
    refine_fit_p: float = 0.2
    #: A profiled mode replaces the verified choice only when it measured at least this much better
    #: (one measurement each: less is noise; the harness saw a 1.4 % noisy edge cost 6 % on the truth).
    swap_gain: float = 0.05
    #: How a reference model is adapted to a node's profiles (the estimator service's default too).
    #: nn+gp, not ref+gp (``estimate transfer``'s default), measured on the TuningJob path
    #: (experiments/controller_transfer.py, 5 seeds): equal at a job's default 50 profiles (1.00-1.13x
    #: the best time within budget), but with 12 profiles ref+gp's GP extrapolates poorly below the
    #: profiled band (1.15x / 1.45x the best at 25 / 18 W, two of five 18 W budgets failed; nn+gp
    #: 1.04x / 1.48x, none failed).
    transfer_method: str = "nn+gp"
    #: Epochs of fine-tuning the reference MLP in a node's transfer (methods that fine-tune one). 100 would
    #: cost a third of the estimator's CPU and was as accurate on average (simulator, 4 devices x 3 workloads
    #: x 4 nodes, nn+gp: time MAPE 14.6 -> 13.3 %, power 6.2 -> 6.2 %; real sets at 10 / 20 points: time
    #: 5.17 -> 5.05 %), but it made a decision worse: `up`'s job on the Nano at 6 W (an Orin reference, 12
    #: profiles) chose a mode 45 % slower than the best within budget instead of 25 % (the best draws 5.9x W).
    #: Kept at the NN's 300 until issue 27's decision harness compares the two; a fleet short of estimator
    #: CPU may lower it (the coordinator's --transfer-epochs).
    transfer_epochs: int = 300
    #: Fraction of a reference fit's rows held out to score it (the estimator service's default).
    validation_fraction: float = 0.1
    #: Seed of the random draws (initial and held-out modes).
    seed: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "risk", validation.risk(self.risk, "risk"))
        object.__setattr__(self, "objective", Objective.parse(self.objective))  # its name in, the enum kept
        for name, least in (("max_attempts", 1), ("held_out", 0), ("n_initial", 1), ("rounds", 0),
                            ("per_round", 1), ("refine_profiles", 0), ("transfer_epochs", 1)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                raise InvalidArgument(name, f"{value!r} is not an integer >= {least}", f">= {least}")
        check_method(self.transfer_method, "transfer_method")
        if not (math.isfinite(self.validation_fraction) and 0 <= self.validation_fraction < 1):
            raise InvalidArgument("validation_fraction", f"{self.validation_fraction!r}", "0 <= fraction < 1")
        for name, most in (("verify_time_tol", math.inf), ("refine_gain", 1.0), ("refine_fit_p", 1.0),
                           ("swap_gain", 1.0)):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and math.isfinite(value) and 0 <= value < most):
                raise InvalidArgument(name, f"{value!r}", "0 <= fraction" + (" < 1" if most == 1.0 else ""))

    @property
    def z(self) -> float:
        """The std multiplier of :attr:`risk`: z(1 - risk) of the standard normal."""
        return z_score(self.risk)

    @property
    def profiles(self) -> int:
        """Modes measured at most (profiles and verified choices; held-out ones not counted), except that a
        choice is always verified: a sweep of budgets may measure choices beyond it, per budget at most
        ``max_attempts`` (a miss, or one choice far off its predicted time, is selected again)."""
        return self.n_initial + self.rounds * self.per_round

    @property
    def explore_rounds(self) -> int:
        """Frontier rounds before selection: :attr:`rounds` less those that :attr:`refine_profiles` keeps back."""
        return max(0, self.rounds - math.ceil(self.refine_profiles / self.per_round))

    def with_(self, **changes: Any) -> TuningPolicy:
        """A copy with ``changes`` (checked like a new policy)."""
        return replace(self, **changes)


#: The policy every entry point starts from; they read it when they run (tests may replace it).
DEFAULT_POLICY = TuningPolicy()


def default_policy() -> TuningPolicy:
    """:data:`DEFAULT_POLICY` as it is now."""
    return DEFAULT_POLICY
