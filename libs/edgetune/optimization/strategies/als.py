"""ALS: Fulcrum's active-learning based sampling (Fulcrum, §5.3, Algorithm 2).

ALS profiles a set of configurations that serves *every* problem of a workload (any budget,
latency, rate), guided by a predictor (Fulcrum's NN; here a GP by default, see below) but
decided on observations only:

Training (50 = 10 + 8 × 5)
    Profile 10 modes: the least-power mode and 9 random ones. Each round: fit time and power
    guides (:mod:`.guide`) on what was profiled, predict every unprofiled mode, keep those on
    the *predicted* (time, power) Pareto front, and profile the 5 whose predicted power is
    farthest from every profiled power
    (``PickMaxK`` of the minimum distance — power diversity, not time diversity, because the
    front's time falls steeply at low power). 8 rounds.
Inference (≤ 145 = 25 + 6 rounds × 4 quadrants × 5)
    The latency-budget and arrival-rate ranges are halved into 4 quadrants. Start with 25
    random modes, 5 per batch size. Each round visits the quadrants in turn: predict every
    unprofiled (mode, β), drop those that no problem of the quadrant could use — conservatively:
    only those that cannot keep up with the quadrant's lowest rate or cannot meet its largest
    latency budget at any of its rates — build the predicted (peak latency at the quadrant's
    middle rate, power) front and profile 5 by distance — to the profiled configurations *of the
    same β* and to the picks before it (greedy), in (power, log time) — then refit.
Concurrent (145 runs: 25 + rounds × 4 quadrants × 10, rounds while runs are left)
    As inference, but the front is predicted training throughput (θ at the quadrant's middle
    rate, continuous in τ) against predicted power max(p_tr, p_in) *and predicted peak latency*
    (at the middle rate), and 10 per quadrant. A trial profiles the inference point and, once per
    mode, the training point, so the picks rank distance (in power, log t_in, log t_tr) *per
    profiling run*: a configuration at a mode whose training point is measured costs one run,
    one at a new mode two. The paper's 3 rounds of 10 configurations leave runs unspent when
    configurations cost one run; rounds go on until the 145 runs are spent.

Extension (``initial=0, rounds=k``, after :meth:`~SearchStrategy.warm_start` with earlier
samples): no new random phase — the guides are fitted on every earlier observation and k more
rounds of quadrant picks run over the given (new) rate range; the dynamic-rate solver uses it
when the arrival rate leaves the range ALS sampled for (Fulcrum §5.4).

Departures that decide which problems ALS can solve (``experiments/fulcrum_search.py``):

- *The least-power mode* (every dimension at its lowest value; power rises along every
  dimension) is one of training's 10 initial modes. Training's only constraint is power, so
  that mode decides whether the tightest budgets have any answer; the asymmetric loss
  over-predicts power, so the predicted front's low end looks "already covered" by the least
  power observed and the rounds never went below it — ALS missed the 15 W ResNet-18 problem
  that every other strategy solved.
- *Concurrent: latency is a third objective of the quadrant front.* On (θ, power) alone a
  small β is always dominated — the larger β of the same mode leaves more spare time per
  window — so β = 4 configurations were only ever profiled at random, yet a latency budget
  below (16−1)/α is served by β ≤ 4 only (e.g. 390 ms at 30 rps: the optimum is β = 4 at ~35 W,
  and ALS had profiled β = 4 only below 25 W). A configuration is useful to some problem of
  the quadrant exactly when nothing beats it on throughput, power *and* latency.
- *Power distance per β* (both quadrant kinds): power is max(p_tr, p_in) in the concurrent
  problem, mostly the mode's training power whatever β, so a mode profiled at β = 64 made
  every β look covered at its power. Each candidate's distance is to the profiled
  configurations of its own batch size.

On 300 sampled problems per workload and 4 seeds, with the budget counted in configurations
(236–254 runs), concurrent found rose from 95.2 / 95.3 %
(ResNet-18 + MobileNet / MobileNet + MobileNet) to ~96.5 / 96 %, inference stays ≥ 99.4 %
(mean latency excess of ResNet-18 falls from 8.6 % to 1.4 %), training reaches 100 %.

*Within 145 profiling runs* (the budget counts runs: a concurrent configuration at a new mode
is two) that ALS solved 92.8 / 93.8 % (160 problems, every problem answered by each of 4 seeds;
paper > 95 %). Three changes bring it to 97.2 / 96.6 %:

- *A GP guide* (:class:`~.guide.GPGuide`, ``guide="gp"``, the default; ``guide="mlp"`` is
  Fulcrum's NN): the NN fitted on 50–100 points predicted the low-power modes' inference power
  3–5 W high, so the modes that answer tight power budgets at high rates — the problems ALS
  missed — looked like a power band already sampled.
- *Greedy, run-aware picks* (:func:`pick_spread`): each pick counts as observed for the next
  (ranking by distance took pairs of neighbours), distance is in (power, log times) — equal
  power, different trade-off — and per profiling run.
- *Rounds while runs are left* (above).

Each alone does little (the GP with the old picks: 90.6 / 91.2 %; the picks with the NN:
97.0 / 93.9 %). Training (ALS50, GP guide) keeps 100 % found and ≤ 0.7 % median excess;
inference 99.7–100 %.

Choices: guides are refitted warm (all observations; the NN for fewer epochs, the GP from the
last fit's hyper-parameters) rather than trained on the new points only; observed values stand
in for predictions where a point was profiled. Decisions come from
:meth:`Problem.solve` over the observations — the predicted front never decides anything.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from edgetune.base.mode import PowerMode
from edgetune.errors import InvalidArgument
from edgetune.optimization.pareto import nondominated, pareto_mask, pick_far
from edgetune.optimization.problems import ROLE_INFER, ROLE_TRAIN, ConcurrentProblem
from edgetune.optimization.strategies.base import SearchGen, SearchStrategy
from edgetune.optimization.strategies.guide import GPGuide, Guide, MLPGuide

#: Seed 004's problem ranges, the default quadrant bounds.
LATENCY_RANGE_MS = (50.0, 1000.0)
RATE_RANGE_RPS = (30.0, 90.0)

#: (initial configurations, rounds, picks per quadrant or round) per problem kind.
ALS_SCHEDULE = {"train": (10, 8, 5), "infer": (25, 6, 5), "concurrent": (25, 3, 10)}

GuideFactory = Callable[[np.ndarray, int], Guide]
#: Guides ALS can fit (``guide=``): a Matérn GP (default) or Fulcrum's MLP.
GUIDES = ("gp", "mlp")
#: Most quadrant rounds when the budget decides how many run.
MAX_ROUNDS = 100


def mode_features(modes: Sequence[PowerMode]) -> np.ndarray:
    """[cores, 1/cpu, 1/gpu, 1/emc] (periods in ns): minibatch time is close to linear in clock
    periods, so the small guide fits 50 points far better than on raw MHz (test MAPE on the
    simulator's MobileNet inference table, 250 points: ~7 % against ~20 %)."""
    x = np.asarray([m.as_tuple() for m in modes], dtype=np.float64).reshape(-1, 4)
    return np.column_stack([x[:, 0], 1000.0 / x[:, 1:]])


def config_features(modes: Sequence[PowerMode], batch_sizes: Sequence[int] | np.ndarray) -> np.ndarray:
    """[cores, cpu, gpu, emc, log2 β] — batch size on a log scale, as time grows sub-linearly in it."""
    x = mode_features(modes)
    return np.column_stack([x, np.log2(np.asarray(batch_sizes, dtype=np.float64))])


def least_power_index(modes: Sequence[PowerMode]) -> int:
    """The mode lowest in every dimension (least rank sum when the space lacks that corner):
    power rises along every dimension, so no mode draws less."""
    x = np.asarray([m.as_tuple() for m in modes], dtype=np.float64).reshape(-1, 4)
    ranks = np.column_stack([np.unique(x[:, d], return_inverse=True)[1] for d in range(x.shape[1])])
    return int(np.argmin(ranks.sum(axis=1)))


#: Scale of log time in the picks' distance: a 10 % time difference counts as far as 1 W.
LOG_TIME_SCALE = 0.1


def pick_spread(features: np.ndarray, groups: np.ndarray, observed: np.ndarray, observed_groups: np.ndarray,
                k: int, cost: np.ndarray | None = None, mode_of: np.ndarray | None = None) -> np.ndarray:
    """Positions of ``k`` candidates picked greedily farthest (Euclidean, in ``features``) from the
    observed configurations of their own group and from the picks before them.

    ``cost``: profiling runs per candidate (a concurrent configuration at a mode whose training
    point is unmeasured costs 2); the distance is divided by it, and once a mode is picked its
    other candidates cost 1 (``mode_of``: each candidate's mode). Counting each pick as observed
    keeps two picks from landing side by side, which ranking by distance alone did.
    """
    feats = np.asarray(features, dtype=float)
    feats = feats.reshape(feats.shape[0], -1)
    seen = np.asarray(observed, dtype=float).reshape(-1, feats.shape[1])

    def nearest(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return np.sqrt(((a[:, None, :] - b[None, :, :]) ** 2).sum(axis=2)).min(axis=1)

    dist = np.full(feats.shape[0], np.inf)
    for g in np.unique(groups):
        mine, theirs = groups == g, seen[observed_groups == g]
        if theirs.size:
            dist[mine] = nearest(feats[mine], theirs)
    runs = np.ones(feats.shape[0]) if cost is None else np.asarray(cost, dtype=float).copy()
    chosen: list[int] = []
    for _ in range(min(k, feats.shape[0])):
        score = dist / runs
        score[chosen] = -np.inf
        j = int(np.argmax(score))
        chosen.append(j)
        same = groups == groups[j]
        dist[same] = np.minimum(dist[same], nearest(feats[same], feats[j:j + 1]))
        if mode_of is not None:
            runs[mode_of == mode_of[j]] = 1.0
    return np.asarray(chosen, dtype=int)


class ALS(SearchStrategy):
    """Fulcrum's ALS (module docstring)."""

    name = "als"

    def __init__(self, problem, space, *, budget=None, seed=0,
                 latency_range_ms: Sequence[float] | None = None, rate_range_rps: Sequence[float] | None = None,
                 epochs: int = 300, refit_epochs: int = 60, guide_factory: GuideFactory | None = None,
                 initial: int | None = None, rounds: int | None = None, guide: str = "gp", **options: Any) -> None:
        if guide not in GUIDES:
            raise InvalidArgument("guide", f"unknown guide {guide!r}", ", ".join(GUIDES))
        lat = _range("latency_range_ms", latency_range_ms or LATENCY_RANGE_MS)
        rate = _range("rate_range_rps", rate_range_rps or RATE_RANGE_RPS)
        # quadrants must cover the problem at hand, whatever the defaults say
        if hasattr(problem, "latency_budget_ms"):
            lat = (min(lat[0], problem.latency_budget_ms), max(lat[1], problem.latency_budget_ms))
            rate = (min(rate[0], problem.arrival_rps), max(rate[1], problem.arrival_rps))
        n_init, n_rounds, _ = ALS_SCHEDULE[problem.kind]
        self.n_init = n_init if initial is None else _count("initial", initial)
        self.rounds = n_rounds if rounds is None else _count("rounds", rounds)
        self._fixed_rounds = rounds is not None
        extra: dict[str, Any] = {k: v for k, v in (("initial", initial), ("rounds", rounds)) if v is not None}
        if guide != "gp":  # only a non-default guide is saved: older states stay identical
            extra["guide"] = guide
        super().__init__(problem, space, budget=budget, seed=seed, latency_range_ms=list(lat),
                         rate_range_rps=list(rate), epochs=epochs, refit_epochs=refit_epochs, **extra, **options)
        self.latency_range_ms, self.rate_range_rps = lat, rate
        self._guide_factory = guide_factory or (
            (lambda x, s: GPGuide(x, seed=s)) if guide == "gp" else
            (lambda x, s: MLPGuide(x, seed=s, epochs=epochs, refit_epochs=refit_epochs)))
        self.per_pick = ALS_SCHEDULE[problem.kind][2]

    def default_budget(self) -> int:
        # called from the base constructor: n_init / rounds are set before it
        k = ALS_SCHEDULE[self.problem.kind][2]
        return self.n_init + self.rounds * k * (1 if self.problem.kind == "train" else 4)

    def _guide(self, x_domain: np.ndarray, salt: int) -> Guide:
        return self._guide_factory(x_domain, self.seed * 1000 + salt)

    def _search(self) -> SearchGen:
        if self.problem.kind == "train":
            yield from self._train()
        else:
            yield from self._quadrants()

    # -- training ----------------------------------------------------------------------------
    def _train(self) -> SearchGen:
        rng = np.random.default_rng(self.seed)
        modes = list(self.space.modes)
        bs = self.space.train_batch_size
        x = mode_features(modes)
        first = np.empty(0, dtype=int)
        if self.n_init > 0:  # the least-power mode, then random ones (none when extending)
            anchor = least_power_index(modes)
            rest = np.array([i for i in range(len(modes)) if i != anchor], dtype=int)
            first = np.concatenate([[anchor], rng.choice(rest, size=min(self.n_init - 1, rest.size), replace=False)])
        if len(first):
            yield from self.measure([(modes[i], bs) for i in sorted(first)])
        t_guide, p_guide = self._guide(x, 1), self._guide(x, 2)
        for _ in range(self.rounds):
            if self.remaining <= 0:
                return
            seen = np.array([self.obs.has(m, ROLE_TRAIN, bs) for m in modes])
            if seen.all() or not seen.any():
                return
            pts = [p for i in np.flatnonzero(seen) if (p := self.obs.get(modes[i], ROLE_TRAIN, bs)) is not None]
            t_obs = np.array([p.time_ms for p in pts])
            p_obs = np.array([p.power_w for p in pts])
            t_guide.fit(x[seen], t_obs)
            p_guide.fit(x[seen], p_obs)
            test = np.flatnonzero(~seen)
            t_pred, p_pred = t_guide.predict(x[test]), p_guide.predict(x[test])
            front = test[pareto_mask(t_pred, p_pred)]
            p_front = p_pred[pareto_mask(t_pred, p_pred)]
            picks = front[pick_far(p_front, p_obs, self.per_pick)]
            yield from self.measure([(modes[i], bs) for i in sorted(picks)])

    # -- inference and concurrent: quadrants -------------------------------------------------
    def _quadrants(self) -> SearchGen:
        rng = np.random.default_rng(self.seed)
        prob = self.problem
        concurrent = isinstance(prob, ConcurrentProblem)
        modes = list(self.space.modes)
        sizes = list(self.space.infer_batch_sizes)
        cfg_modes = [m for m in modes for _ in sizes]
        cfg_bs = np.array([b for _ in modes for b in sizes])
        xc = config_features(cfg_modes, cfg_bs)
        xm = mode_features(modes)
        mode_pos = np.repeat(np.arange(len(modes)), len(sizes))

        first = rng.choice(len(modes), size=min(self.n_init, len(modes)), replace=False)
        if len(first):
            yield from self.measure([(modes[i], sizes[j % len(sizes)]) for j, i in enumerate(first)])

        t_in_g, p_in_g = self._guide(xc, 1), self._guide(xc, 2)
        t_tr_g, p_tr_g = (self._guide(xm, 3), self._guide(xm, 4)) if concurrent else (None, None)
        tbs = self.space.train_batch_size
        # rounds go on while the budget lasts (configurations at measured modes cost one run, so
        # the schedule's rounds leave runs over), unless the caller fixed the rounds (an extension)
        n_rounds = self.rounds if self._fixed_rounds else MAX_ROUNDS
        for _ in range(n_rounds):
            picked = False
            for lat_hi, rate_lo, rate_hi in self._quadrant_bounds():
                if self.remaining <= 0:
                    return
                seen = np.array([self.observed(m, int(b)) for m, b in zip(cfg_modes, cfg_bs, strict=True)])
                if seen.all():
                    return
                t_in, p_in = self._predict(cfg_modes, cfg_bs, ROLE_INFER, xc, t_in_g, p_in_g)
                if t_tr_g is not None and p_tr_g is not None:  # concurrent
                    t_tr_m, p_tr_m = self._predict(modes, [tbs] * len(modes), ROLE_TRAIN, xm, t_tr_g, p_tr_g)
                    t_tr, p_tr = t_tr_m[mode_pos], p_tr_m[mode_pos]
                # conservative pruning: some rate of the quadrant keeps up and meets its largest budget
                rate_star = np.minimum(rate_hi, 1000.0 * cfg_bs / t_in)
                lat_star = (cfg_bs - 1) / rate_star * 1000.0 + t_in
                keep = ~seen & (rate_star >= rate_lo) & (lat_star <= lat_hi)
                if not keep.any():
                    continue
                rate_mid = 0.5 * (rate_lo + rate_hi)
                latency = (cfg_bs - 1) / rate_mid * 1000.0 + t_in
                idx = np.flatnonzero(keep)
                if concurrent:
                    spare = 1.0 - t_in * rate_mid / (1000.0 * cfg_bs)
                    theta = np.where(spare > 0, spare * 1000.0 / t_tr, 0.0)
                    power = np.maximum(p_tr, p_in)
                    # latency is an objective too: a tighter budget needs a smaller β, which θ never prefers
                    on_front = idx[nondominated(np.column_stack([-theta[idx], power[idx], latency[idx]]))]
                else:  # the objective is the latency itself
                    power = p_in
                    on_front = idx[pareto_mask(latency[idx], power[idx])]
                # distance in (power, log times): configurations of equal power that trade time
                # differently serve different problems
                cols = [power, np.log(t_in) / LOG_TIME_SCALE]
                cost = None
                if concurrent:
                    cols.append(np.log(t_tr) / LOG_TIME_SCALE)
                    trained = np.array([self.obs.has(m, ROLE_TRAIN, tbs) for m in modes])
                    cost = np.where(trained[mode_pos[on_front]], 1.0, 2.0)
                feats = np.column_stack(cols)
                picks = on_front[pick_spread(feats[on_front], cfg_bs[on_front], feats[seen], cfg_bs[seen],
                                             self.per_pick, cost, mode_pos[on_front])]
                picked = True
                yield from self.measure([(cfg_modes[i], int(cfg_bs[i])) for i in sorted(picks)])
            if not picked:
                return  # no quadrant has a configuration left to pick

    def _quadrant_bounds(self) -> list[tuple[float, float, float]]:
        """(largest latency budget, lowest rate, highest rate) of each quadrant, round-robin order."""
        l0, l1 = self.latency_range_ms
        r0, r1 = self.rate_range_rps
        lm, rm = 0.5 * (l0 + l1), 0.5 * (r0 + r1)
        return [(lm, r0, rm), (lm, rm, r1), (l1, r0, rm), (l1, rm, r1)]

    def _predict(self, modes: Sequence[PowerMode], batch_sizes: Sequence[int] | np.ndarray, role: str, x: np.ndarray,
                 t_guide: Guide, p_guide: Guide) -> tuple[np.ndarray, np.ndarray]:
        """Time and power per row: observed where profiled, else the refitted guides' prediction."""
        pts = [self.obs.get(m, role, int(b)) for m, b in zip(modes, batch_sizes, strict=True)]
        seen = np.array([p is not None for p in pts])
        t = np.full(len(pts), np.nan)
        p = np.full(len(pts), np.nan)
        if seen.any():
            t[seen] = [q.time_ms for q in pts if q is not None]
            p[seen] = [q.power_w for q in pts if q is not None]
            t_guide.fit(x[seen], t[seen])
            p_guide.fit(x[seen], p[seen])
            if (~seen).any():
                t[~seen] = t_guide.predict(x[~seen])
                p[~seen] = p_guide.predict(x[~seen])
        else:  # nothing to learn from: no preference
            t[:], p[:] = 1.0, 1.0
        return np.maximum(t, 1e-6), p


def _count(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidArgument(name, f"{value!r} must be a non-negative integer", ">= 0")
    return int(value)


def _range(name: str, value: Sequence[float]) -> tuple[float, float]:
    try:
        lo, hi = (float(v) for v in value)
    except (TypeError, ValueError):
        raise InvalidArgument(name, f"{value!r} is not a (low, high) pair") from None
    if not (math.isfinite(lo) and math.isfinite(hi) and 0 < lo < hi):
        raise InvalidArgument(name, f"{value!r} must satisfy 0 < low < high")
    return lo, hi
