"""GMD: Fulcrum's gradient-descent based multi-dimensional search (Fulcrum, §5.1, Algorithm 1).

Training (budget 10)
    Profile the grid's midpoint (Orin fulcrum grid: 8c/1344/727/2133). If it is over the power
    budget, probe each dimension at its lowest value (others at the midpoint), else at its
    highest: four one-dimension probes. Each probe and the midpoint give a slope ratio
    ρ_d = Δtime/Δpower (oriented as time saved per watt spent raising the dimension). Then,
    one dimension at a time, bisect its remaining range by power — the largest value whose
    profiled power fits the budget, pruning the half that cannot hold the optimum because power
    rises monotonically along every dimension — and move the base point there. The dimension
    with the largest ρ is bisected first when spending watts (see below for shedding them).
    Every profiled point within the budget is a candidate; the best candidate is returned.
Inference (budget 11)
    The same search at bs=1 (budget 10). If no candidate meets latency and keep-up, backtrack:
    the modes visited within the power budget, by increasing latency, are tried at larger
    batch sizes (the smallest that can keep up first) until one meets every budget.
Concurrent (budget 15 profiling runs)
    Branch and bound on the batch size: from bs=64 down, profile MAXN's inference minibatch;
    a batch size MAXN cannot serve within the latency budget is eliminated (every other mode is
    slower). The budget counts runs, and a mode's training and inference points are two, so
    the multi-dimensional search walks the *training* workload alone under the power budget
    (one run per mode; training sets the system's power and throughput), keeping
    ``CONCURRENT_INFER_RESERVE`` runs; then the walk's modes within power, fastest training
    first, are measured at the retained bs, a mode that misses only the latency budget being
    retried at the next smaller bs. (Walking the combined workload, two runs per mode, and
    counting configurations, it profiled 26–29 runs for a budget of 15; walking it within 15
    runs solved 88–89 % of the sampled problems, the training walk 92.5–97.5 %.)

Choices where the paper leaves room (all documented in the report):

- ρ's denominator is floored at ``POWER_EPS_W`` (the paper's "thresholding logic" against a
  negligible power change inflating a slope): a free speed-up stays attractive but finite.
- When the midpoint is over budget, power has to be *shed*. Algorithm 1 bisects the
  largest-ρ dimension first in both directions (``shed_order="paper"``): that pins the most
  time-sensitive dimension low while the others stay at the midpoint, and on the simulator's
  Orin tables it lands up to 2–3× off optimal at low budgets (median unchanged). The default
  ``shed_order="efficiency"`` reads the same rule in the shedding direction — lower first the
  dimension with the *smallest* ρ (least time lost per watt saved) — and keeps the worst case
  within ~1.2–1.7× (experiments/fulcrum_search.py reports both). Spending watts (midpoint
  within budget) always goes largest ρ first, as in the paper.
- A dimension that a single move cannot bring within budget (its lowest value is still over)
  is set to its lowest value and the search goes on from there.
- *Flat dimensions are not bisected* when spending watts: if a dimension's highest value
  (profiled as the line's first point) saves less than ``FLAT_GAIN`` (5 %) of the base point's
  time, no value in between can save more, so the line stops there instead of bisecting its
  power boundary. After the walk has shed watts in another dimension (e.g. CPU at its lowest),
  the midpoint's slope ratio of a dimension (GPU) can promise time that the new base point no
  longer has to give; on the 147 training problems of ``experiments/fulcrum_search.py`` the
  bisections spent 2–3 of GMD10's runs on such flat lines. Mean excess 4.6 → 3.3 %, worst
  70 → 29 %, median 0.15 → 0.09 % (every workload's median ≤ 1.8 % before and after). The same
  rule holds in the inference walk (the runs go to backtracking: found 93.8 → 94.7 % of 320
  problems) and the concurrent training walk (same found share and median).
- Queueing alone, (β−1)/α > L̂, eliminates a batch size without profiling it.
- ``backtrack="search"`` (inference; default ``"paper"``): when the paper's backtracking finds
  nothing, run the multi-dimensional search at the next larger β with the trials left (useful
  when warm-started: see :meth:`GMD._search_larger`).
- ``refine=True`` (default): training and concurrent searches spend budget left after the
  space is exhausted on local moves from the best candidate, kept when they are better and
  within budget. First the points within two grid steps per dimension that a local linear
  model of the profiled points (power and log time in the grid indices, nearer points weighing
  more) predicts within the power budget and faster, fastest first; then the fixed order — one
  step up in a dimension, or one step up in a high-ρ dimension paired with one step down in a
  low-ρ one. The fixed order alone spent its runs on steps up from a point where the budget
  binds, mostly over it: training GMD10's median excess on MobileNetV3 was 3.4 %, with the
  model 0.2 % (every workload ≤ 1.8 %). Concurrent refinement keeps the fixed order only.
  ``refine=False`` stops where Algorithm 1 does.
- A space that is not a full grid (a replay table that recorded some modes only): the grid is
  the product of the recorded values, and a grid point that was not recorded stands for the
  recorded mode nearest to it (fewest index steps; ties: the lower-power side, then grid
  order), so the moves and bisections go on over what can be measured.
"""

from __future__ import annotations

import itertools
from collections.abc import Generator, Iterable
from typing import Any

import numpy as np

from edgetune.base.mode import PowerMode
from edgetune.errors import InvalidArgument
from edgetune.optimization.problems import (
    ROLE_INFER,
    ROLE_TRAIN,
    Evaluation,
    LatencyProblem,
    Problem,
    TrainProblem,
)
from edgetune.optimization.strategies.base import Batch, SearchGen, SearchStrategy

#: The paper's budgets (configurations profiled).
GMD_BUDGETS = {"train": 10, "infer": 11, "concurrent": 15}
#: Budget of the multi-dimensional search inside inference / concurrent GMD.
GMD_SEARCH_TRIES = 10
#: Runs a concurrent search keeps for inference points after its training walk.
CONCURRENT_INFER_RESERVE = 4
#: Refinement: how far (grid steps per dimension) a predicted move may go, and the model's bandwidth.
REFINE_STEPS = 2
REFINE_BANDWIDTH_STEPS = 3.0
#: Floor of |Δpower| in a slope ratio: below this a power change is measurement noise.
POWER_EPS_W = 0.25
#: A dimension whose highest value saves less than this share of the time at the base point is
#: not bisected when spending watts (time falls monotonically along a dimension, so no value in
#: between saves more): its runs go to the dimensions and refinement moves left.
FLAT_GAIN = 0.05

Idx = tuple[int, int, int, int]


class GMD(SearchStrategy):
    """Fulcrum's GMD (module docstring)."""

    name = "gmd"

    def __init__(self, problem, space, *, budget=None, seed=0, shed_order: str = "efficiency",
                 refine: bool = True, backtrack: str = "paper", **options: Any) -> None:
        if shed_order not in ("efficiency", "paper"):
            raise InvalidArgument("shed_order", f"unknown order {shed_order!r}", "efficiency, paper")
        if backtrack not in ("paper", "search"):
            raise InvalidArgument("backtrack", f"unknown backtracking {backtrack!r}", "paper, search")
        extra = {"backtrack": backtrack} if backtrack != "paper" else {}  # older states stay identical
        super().__init__(problem, space, budget=budget, seed=seed, shed_order=shed_order, refine=bool(refine),
                         **extra, **options)
        self.shed_order = shed_order
        self.refine = bool(refine)
        self.backtrack = backtrack
        self.grid = space.grid
        self.rho: dict[int, float] = {}
        self.search_batch_size: int | None = None  # the bs the multi-dimensional search ran at
        self._stand_in: dict[Idx, PowerMode] = {}  # grid point -> nearest recorded mode (sparse spaces)
        self._walk: Problem | None = None  # the problem a concurrent search's training walk solves

    @property
    def _walked(self) -> Problem:
        """The problem the multi-dimensional search is on: the training walk's, else the problem."""
        return self._walk if self._walk is not None else self.problem

    def measure(self, configs: Iterable[tuple[PowerMode, int]],
                points: tuple[tuple[str, int], ...] | None = None) -> Generator[Batch, None, None]:
        """During the training walk, a configuration is its training point only."""
        if self._walk is not None and points is None:
            points = self._walk.points_for(self.space.train_batch_size)
        return super().measure(configs, points)

    def observed(self, mode: PowerMode, batch_size: int) -> bool:
        if self._walk is not None:
            return all(self.obs.has(mode, r, b) for r, b in self._walk.points_for(batch_size))
        return super().observed(mode, batch_size)

    def default_budget(self) -> int:
        return GMD_BUDGETS[self.problem.kind]

    # -- grid helpers ------------------------------------------------------------------------
    def _mode(self, idx: Idx) -> PowerMode:
        g = self.grid
        mode = PowerMode(g.cores[idx[0]], g.cpu_mhz[idx[1]], g.gpu_mhz[idx[2]], g.emc_mhz[idx[3]])
        return mode if self.space.available(mode) else self._nearest_recorded(idx)

    def _nearest_recorded(self, idx: Idx) -> PowerMode:
        """The recorded mode standing for grid point ``idx`` in a sparse space (module docstring)."""
        if idx not in self._stand_in:
            def steps(m: PowerMode) -> tuple[int, int]:
                at = self.grid.indices(m)
                # ties go to the side with fewer steps up (the lower-power side)
                return (sum(abs(a - b) for a, b in zip(at, idx, strict=True)),
                        sum(max(a - b, 0) for a, b in zip(at, idx, strict=True)))
            self._stand_in[idx] = min(self.space.modes, key=steps)
        return self._stand_in[idx]

    @staticmethod
    def _moved(idx: Idx, dim: int, value: int) -> Idx:
        out = list(idx)
        out[dim] = value
        return tuple(out)  # type: ignore[return-value]

    def _start(self) -> Idx:
        """The grid midpoint (in a sparse space, the recorded mode nearest to it)."""
        return self.grid.indices(self._mode(self.grid.indices(self.grid.midpoint())))

    # -- what a point says -------------------------------------------------------------------
    @property
    def _latency_problem(self) -> LatencyProblem:
        """The inference / concurrent problem: only those reach the latency-bound search paths."""
        if not isinstance(self.problem, LatencyProblem):
            raise TypeError(f"a {self.problem.kind} problem has no latency budget")
        return self.problem

    def _eval(self, idx: Idx, beta: int) -> Evaluation | None:
        return self._walked.evaluate(self._mode(idx), beta, self.obs)

    def _power(self, idx: Idx, beta: int) -> float | None:
        ev = self._eval(idx, beta)
        return ev.power_w if ev is not None else None

    def _fits(self, idx: Idx, beta: int) -> bool:
        p = self._power(idx, beta)
        return p is not None and p <= self._walked.power_budget_w + 1e-9

    def _proxy(self, idx: Idx, beta: int) -> float:
        """What the line search minimises: the problem's time (concurrent: time per training minibatch)."""
        mode = self._mode(idx)
        if self._walked.kind == "concurrent":
            tr = self.obs.get(mode, ROLE_TRAIN, self.space.train_batch_size)
            inf = self.obs.get(mode, ROLE_INFER, beta)
            if tr is None or inf is None:
                return float("inf")
            spare = 1.0 - inf.time_ms / self._latency_problem.window_ms(beta)  # share of time left to training
            return tr.time_ms / max(spare, 1e-6)
        ev = self._eval(idx, beta)
        return ev.time_ms if ev is not None else float("inf")

    def _key(self, idx: Idx, beta: int) -> tuple:
        """Line-search preference: fully feasible first (by the problem's rank), then the proxy."""
        ev = self._eval(idx, beta)
        if ev is not None and ev.feasible:
            return (0, self._walked.rank(ev))
        return (1, (self._proxy(idx, beta), ev.power_w if ev else float("inf")))

    def _slope_point(self, idx: Idx, beta: int, role: str) -> tuple[float, float] | None:
        p = self.obs.get(self._mode(idx), role, beta if role == ROLE_INFER else self.space.train_batch_size)
        return (p.time_ms, p.power_w) if p is not None else None

    def _dominant(self, idx: Idx, beta: int) -> str:
        """The role whose power sets the system's power at ``idx`` (concurrent); else the only role."""
        if self._walked.kind == "train":
            return ROLE_TRAIN
        if self._walked.kind == "infer":
            return ROLE_INFER
        tr = self._slope_point(idx, beta, ROLE_TRAIN)
        inf = self._slope_point(idx, beta, ROLE_INFER)
        if tr is None or inf is None:
            return ROLE_TRAIN if inf is None else ROLE_INFER
        return ROLE_TRAIN if tr[1] >= inf[1] else ROLE_INFER

    def _rho(self, a: Idx, b: Idx, dim: int, beta: int) -> float:
        """Time saved per watt spent raising ``dim`` between points a and b (dominant workload at a)."""
        role = self._dominant(a, beta)
        pa, pb = self._slope_point(a, beta, role), self._slope_point(b, beta, role)
        if pa is None or pb is None or a[dim] == b[dim]:
            return 0.0
        (t_lo, p_lo), (t_hi, p_hi) = (pa, pb) if a[dim] < b[dim] else (pb, pa)
        return (t_lo - t_hi) / max(p_hi - p_lo, POWER_EPS_W)

    # -- the search --------------------------------------------------------------------------
    def _search(self) -> SearchGen:
        kind = self.problem.kind
        if kind == "train":
            yield from self._multidim(self.space.train_batch_size, self.budget, refine=self.refine)
        elif kind == "infer":
            yield from self._infer()
        else:
            yield from self._concurrent()

    def _multidim(self, beta: int, tries: int, refine: bool) -> Generator[Batch, None, list[Idx]]:
        """Algorithm 1 at batch size ``beta`` with at most ``tries`` trials; returns the visited points."""
        self.search_batch_size = beta
        stop_at = self.spent + tries  # in profiling runs (a concurrent mode costs two)
        shape = self.grid.shape
        base = self._start()
        visited: list[Idx] = [base]
        yield from self.measure([(self._mode(base), beta)])
        if self._power(base, beta) is None:
            return visited
        up = self._fits(base, beta)
        probes: dict[int, Idx] = {}
        for d in range(4):
            target = shape[d] - 1 if up else 0
            if target != base[d]:
                probes[d] = self._moved(base, d, target)
        if self.spent < stop_at:
            room = stop_at - self.spent
            yield from self.measure([(self._mode(q), beta) for q in list(probes.values())[:room]])
        visited += list(probes.values())
        self.rho = {d: self._rho(base, q, d, beta) for d, q in probes.items()}
        left = set(probes)
        while left and self.spent < stop_at:
            d = self._next_dim(left, feasible=self._fits(base, beta))
            left.discard(d)
            base = yield from self._line(base, d, beta, stop_at, visited)
        if refine:
            yield from self._refine(beta, stop_at, visited)
        return visited

    def _next_dim(self, dims: set[int], feasible: bool) -> int:
        if feasible or self.shed_order == "paper":  # spend watts where they buy the most time
            return max(sorted(dims), key=lambda d: self.rho.get(d, 0.0))
        return min(sorted(dims), key=lambda d: self.rho.get(d, 0.0))  # shed where watts cost least time

    def _line(self, base: Idx, d: int, beta: int, stop_at: int, visited: list[Idx]) -> Generator[Batch, None, Idx]:
        """Bisect dimension ``d`` from ``base`` by power; return the new base."""
        n = self.grid.shape[d]
        up = self._fits(base, beta)
        end = self._moved(base, d, n - 1 if up else 0)
        if end == base:
            return base
        if not self.observed(self._mode(end), beta):
            if self.spent >= stop_at:
                return base
            yield from self.measure([(self._mode(end), beta)])
            visited.append(end)
        if self._power(end, beta) is None:
            return base
        if up and self._fits(end, beta):
            return min((base, end), key=lambda q: self._key(q, beta))
        if up and self._proxy(end, beta) >= (1.0 - FLAT_GAIN) * self._proxy(base, beta):
            return base  # the dimension's top buys (almost) no time from here: bisecting it cannot either
        if not up and not self._fits(end, beta):
            return end  # the whole dimension cannot bring power within budget: shed it all
        lo, hi = (base[d], n - 1) if up else (0, base[d])  # lo fits, hi does not
        prev = end
        while hi - lo > 1 and self.spent < stop_at:
            q = self._moved(base, d, (lo + hi) // 2)
            yield from self.measure([(self._mode(q), beta)])
            visited.append(q)
            if self._power(q, beta) is None:
                break
            if self._fits(q, beta):
                lo = q[d]
            else:
                hi = q[d]
            self.rho[d] = self._rho(prev, q, d, beta)  # the slope near the boundary (L 44)
            prev = q
        line = [self._moved(base, d, v) for v in range(n)]
        fitting = [q for q in line if self._fits(q, beta)]
        return min(fitting, key=lambda q: self._key(q, beta)) if fitting else base

    def _refine(self, beta: int, stop_at: int, visited: list[Idx]) -> SearchGen:
        """Spend left-over trials on local moves around the best candidate (module docstring)."""
        shape = self.grid.shape
        tried: set[Idx] = set()
        while self.spent < stop_at:
            fitting = [q for q in visited if self._fits(q, beta)]
            if not fitting:
                return
            best = min(fitting, key=lambda q: self._key(q, beta))
            by_rho = sorted(range(4), key=lambda d: -self.rho.get(d, 0.0))
            moves: list[Idx] = []
            for d in by_rho:
                if best[d] + 1 < shape[d]:
                    moves.append(self._moved(best, d, best[d] + 1))
            for d_up in by_rho:
                for d_down in reversed(by_rho):
                    if d_up != d_down and best[d_up] + 1 < shape[d_up] and best[d_down] > 0:
                        moves.append(self._moved(self._moved(best, d_up, best[d_up] + 1), d_down, best[d_down] - 1))
            if self._walked.kind == "train":
                # moves a local model predicts within power and faster first; the fixed order after
                # them. Not for concurrent refinement: a warm-started search per window would spend
                # its whole budget every window on new moves (two runs each) the fixed list lacks
                moves = self._predicted_moves(best, beta, visited) + moves
            moves = [q for q in moves if q not in tried and self.space.available(self._mode(q))
                     and not self.observed(self._mode(q), beta)]
            if not moves:
                return
            q = moves[0]
            tried.add(q)
            yield from self.measure([(self._mode(q), beta)])
            visited.append(q)

    def _predicted_moves(self, best: Idx, beta: int, visited: list[Idx]) -> list[Idx]:
        """Points within ``REFINE_STEPS`` of ``best`` in every dimension that a local linear model
        predicts within the power budget and faster than ``best``, fastest first.

        The model: power and log time linear in the grid indices, least squares over the profiled
        points weighted by exp(−steps from ``best`` / ``REFINE_BANDWIDTH_STEPS``). The fixed order
        (one step up, then up-and-down pairs by ρ) spent most of its runs on moves over budget:
        the walk ends where the budget binds, so a step up rarely fits."""
        rows, p_obs, t_obs = [], [], []
        for q in dict.fromkeys(visited):
            ev = self._eval(q, beta)
            t = self._proxy(q, beta)
            if ev is None or not np.isfinite(t):
                continue
            rows.append(q)
            p_obs.append(ev.power_w)
            t_obs.append(np.log(t))
        if len(rows) < 3:
            return []
        x = np.asarray(rows, dtype=float) - np.asarray(best, dtype=float)
        w = np.exp(-np.abs(x).sum(axis=1) / REFINE_BANDWIDTH_STEPS)  # nearer points weigh more
        a = np.column_stack([np.ones(len(rows)), x]) * np.sqrt(w)[:, None]
        reg = 1e-3 * np.eye(5)
        reg[0, 0] = 0.0
        coef_p = np.linalg.solve(a.T @ a + reg, a.T @ (np.asarray(p_obs) * np.sqrt(w)))
        coef_t = np.linalg.solve(a.T @ a + reg, a.T @ (np.asarray(t_obs) * np.sqrt(w)))
        p0 = self._power(best, beta) or 0.0
        t0 = np.log(self._proxy(best, beta))
        budget = self._walked.power_budget_w
        shape = self.grid.shape
        cands: list[tuple[float, float, Idx]] = []
        for delta in itertools.product(range(-REFINE_STEPS, REFINE_STEPS + 1), repeat=4):
            if not any(delta):
                continue
            move: Idx = (best[0] + delta[0], best[1] + delta[1], best[2] + delta[2], best[3] + delta[3])
            if not all(0 <= v < n for v, n in zip(move, shape, strict=True)):
                continue
            dp = float(np.dot(coef_p[1:], delta))
            dt = float(np.dot(coef_t[1:], delta))
            if p0 + dp <= budget + 1e-9 and dt < 0:
                cands.append((t0 + dt, p0 + dp, move))
        cands.sort()
        return [q for _, _, q in cands]

    # -- inference ---------------------------------------------------------------------------
    def _infer(self) -> SearchGen:
        sizes = self.space.infer_batch_sizes
        b0 = sizes[0]
        visited = yield from self._multidim(b0, min(GMD_SEARCH_TRIES, self.budget - 1), refine=False)
        if self.problem.solve(self.obs).feasible:
            return
        yield from self._backtrack_infer(visited, b0)
        if self.backtrack == "search" and not self.problem.solve(self.obs).feasible:
            yield from self._search_larger(b0)

    def _search_larger(self, b0: int) -> SearchGen:
        """``backtrack="search"``: the multi-dimensional search itself at the next larger β.

        The paper's backtracking only retries modes visited at bs=1, and those that fit the power
        budget at bs=1 often draw too much at a larger β. Searching at the larger β finds the modes
        that fit there. It needs trials left over, which a cold GMD11 rarely has but a warm-started
        one (the bs=1 walk already profiled) does: the dynamic-rate solver's case."""
        prob = self._latency_problem
        for beta in (b for b in self.space.infer_batch_sizes if b > b0):
            if prob.peak_latency_ms(beta, 0.0) > prob.latency_budget_ms or self.remaining <= 0:
                return  # queueing alone breaks the budget, and only grows with β
            yield from self._multidim(beta, self.remaining, refine=False)
            if prob.solve(self.obs).feasible:
                return

    def _backtrack_infer(self, visited: list[Idx], b0: int) -> SearchGen:
        """Retry modes within power at larger batch sizes, fastest first (§5.1.3)."""
        prob = self._latency_problem
        cands = sorted({q for q in visited if self._fits(q, b0)}, key=lambda q: self._proxy(q, b0))
        best_lat = float("inf")
        for q in cands:
            t1 = self._proxy(q, b0)
            for beta in (b for b in self.space.infer_batch_sizes if b > b0):
                floor_lat = prob.peak_latency_ms(beta, t1)  # t_in(β) ≥ t_in(b0): λ can only be higher
                if floor_lat > prob.latency_budget_ms or floor_lat >= best_lat:
                    break
                if not prob.keeps_up(beta, t1):
                    continue
                if self.remaining <= 0:
                    return
                yield from self.measure([(self._mode(q), beta)])
                ev = self._eval(q, beta)
                if ev is None:
                    return
                if ev.feasible:
                    best_lat = min(best_lat, ev.latency_ms or float("inf"))
                    break
                if not ev.meets_power or (ev.keeps_up and not ev.meets_latency):
                    break  # a larger β only draws more power and waits longer
                # cannot keep up yet: a larger β might

    # -- concurrent --------------------------------------------------------------------------
    def _concurrent(self) -> SearchGen:
        prob = self._latency_problem
        maxn = self.grid.indices(self.grid.maxn())
        chosen = None
        for beta in sorted(self.space.infer_batch_sizes, reverse=True):
            if prob.peak_latency_ms(beta, 0.0) > prob.latency_budget_ms:
                continue  # queueing alone breaks the budget: no profile needed
            if self.remaining <= 0:
                return
            yield from self.measure([(self._mode(maxn), beta)], points=((ROLE_INFER, beta),))
            p = self.obs.get(self._mode(maxn), ROLE_INFER, beta)
            if p is None:
                return
            if not prob.keeps_up(beta, p.time_ms):
                return  # MAXN cannot keep up; smaller β keep up even less (sublinear time)
            if prob.peak_latency_ms(beta, p.time_ms) <= prob.latency_budget_ms:
                chosen = beta
                break
        if chosen is None:
            return
        # the walk runs on the training point alone (one run per mode, not two): training sets
        # the system's power and throughput; the inference point is measured for the candidates
        visited = yield from self._train_walk(max(self.remaining - CONCURRENT_INFER_RESERVE, 1))
        self.search_batch_size = chosen
        yield from self._concurrent_candidates(visited, chosen)
        best = self.problem.solve(self.obs)
        if self.refine and self.remaining > 0 and best.feasible and best.mode is not None \
                and best.batch_size is not None:
            yield from self._refine(best.batch_size, self.spent + self.remaining,
                                    [q for q in visited] + [self.grid.indices(best.mode)])

    def _train_walk(self, tries: int) -> Generator[Batch, None, list[Idx]]:
        """Algorithm 1 on the concurrent problem's training workload under its power budget."""
        concurrent = self._latency_problem
        self._walk = TrainProblem(concurrent.power_budget_w, train_batch_size=self.space.train_batch_size,
                                  train_workload=concurrent.workload_for(ROLE_TRAIN))
        try:
            visited = yield from self._multidim(self.space.train_batch_size, tries, refine=False)
        finally:
            self._walk = None
        return visited

    def _concurrent_candidates(self, visited: list[Idx], chosen: int) -> SearchGen:
        """The walk's modes within power, fastest training first, measured at the retained β; a
        mode that keeps up but misses the latency budget is retried at the next smaller β (§5.1.4)."""
        prob = self._latency_problem
        tbs = self.space.train_batch_size
        cands = []
        for q in dict.fromkeys(visited):
            p = self.obs.get(self._mode(q), ROLE_TRAIN, tbs)
            if p is not None and p.power_w <= prob.power_budget_w + 1e-9:
                cands.append((p.time_ms, q))
        cands.sort()
        smaller = sorted((b for b in self.space.infer_batch_sizes if b < chosen), reverse=True)
        for _, q in cands:
            for beta in [chosen, *smaller]:
                if self.remaining <= 0:
                    return
                yield from self.measure([(self._mode(q), beta)])
                ev = self._eval(q, beta)
                if ev is None or ev.feasible or ev.meets_latency or not (ev.meets_power and ev.keeps_up):
                    break  # only a latency miss can be helped by a smaller β (less queueing)

    def _backtrack_concurrent(self, visited: list[Idx], chosen: int) -> SearchGen:
        """Visited modes within power that keep up, retried at smaller β by increasing latency (§5.1.4)."""
        cands = []
        for q in set(visited):
            ev = self._eval(q, chosen)
            if ev is not None and ev.meets_power and ev.keeps_up:
                cands.append((ev.latency_ms, q))
        cands.sort()
        for beta in sorted((b for b in self.space.infer_batch_sizes if b < chosen), reverse=True):
            for _, q in cands:
                if self.remaining <= 0:
                    return
                yield from self.measure([(self._mode(q), beta)])
                ev = self._eval(q, beta)
                if ev is not None and ev.feasible:
                    return
