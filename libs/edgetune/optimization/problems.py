"""Fulcrum's three optimisation problems (Fulcrum, §4) over observed time and power.

A *configuration* is a power mode and a batch size. Each problem evaluates a configuration
from observed points (:class:`Observations`, keyed by mode, role and batch size) and picks the
best feasible one (:meth:`Problem.solve`). Only observations are ever read here, so a decision
is always a point that was measured (a strategy that predicts must still profile its pick).

``TrainProblem(power_budget_w)``
    Maximise training throughput 1/t_tr (minimise minibatch time) s.t. p_tr ≤ P̂.
``InferProblem(power_budget_w, latency_budget_ms, arrival_rps)``
    Requests arrive at α; a minibatch of β waits for β requests, so its first request waits
    (β−1)/α before the minibatch runs: peak latency λ = (β−1)/α + t_in(pm, β). The device keeps
    up only if t_in ≤ β/α. Minimise λ s.t. λ ≤ L̂, p_in ≤ P̂ and keep-up; per mode the best β is
    the one with the least λ, the smaller β on a tie (the paper: "the smallest inference
    minibatch size that satisfies the latency and power constraints").
``ConcurrentProblem(power_budget_w, latency_budget_ms, arrival_rps, train_workload, infer_workload)``
    Managed interleaving: τ training minibatches, then one inference minibatch of β, once per
    β arrivals. The window between inference minibatches is β/α, of which t_in is inference, so
    τ = ⌊(β/α − t_in) / t_tr⌋ (the paper gives no closed form; this is the count that fits
    without delaying the next inference minibatch, which keeps λ = (β−1)/α + t_in). Training
    throughput θ = τ·α/β minibatches/s; interleaved minibatch time t_tr + t_in; power
    max(p_tr, p_in) (the paper measured both). Maximise θ s.t. λ ≤ L̂, power ≤ P̂, keep-up and
    τ ≥ 1 (no training minibatch fitting is no concurrent training); ties (equal θ) go to the
    lower λ, i.e. the smaller β — the paper's "smaller β on a τ tie".

Bad budgets raise :class:`~edgetune.errors.InvalidArgument` naming the field.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from edgetune import validation
from edgetune.base.mode import PowerMode
from edgetune.errors import InvalidArgument

#: Fulcrum's inference minibatch sizes.
INFER_BATCH_SIZES: tuple[int, ...] = (1, 4, 16, 32, 64)
#: Fulcrum's training minibatch size (all workloads, Table 3).
TRAIN_BATCH_SIZE = 16
#: Slack when comparing against budgets (float noise of CSV round trips).
_EPS = 1e-9

ROLE_TRAIN, ROLE_INFER = "train", "infer"

ModeKey = tuple[int, float, float, float]


def mode_key(mode: PowerMode) -> ModeKey:
    return (int(mode.cores), float(mode.cpu_mhz), float(mode.gpu_mhz), float(mode.emc_mhz))


# --------------------------------------------------------------------------- observations


@dataclass(frozen=True)
class Point:
    """One observed (or predicted) minibatch time and power."""

    time_ms: float
    power_w: float

    @classmethod
    def of(cls, value: Point | Mapping[str, Any]) -> Point:
        if isinstance(value, Point):
            return value
        try:
            return cls(float(value["time_ms"]), float(value["power_w"]))
        except KeyError as exc:
            raise InvalidArgument("measurement", f"missing {exc.args[0]!r}", "time_ms, power_w") from None


class Observations:
    """Observed points keyed by (mode, role, batch size); a later point for the same key wins."""

    def __init__(self) -> None:
        self._points: dict[tuple[ModeKey, str, int], Point] = {}

    def add(self, mode: PowerMode, role: str, batch_size: int, point: Point | Mapping[str, Any]) -> None:
        self._points[(mode_key(mode), role, int(batch_size))] = Point.of(point)

    def get(self, mode: PowerMode, role: str, batch_size: int) -> Point | None:
        return self._points.get((mode_key(mode), role, int(batch_size)))

    def has(self, mode: PowerMode, role: str, batch_size: int) -> bool:
        return (mode_key(mode), role, int(batch_size)) in self._points

    def __len__(self) -> int:
        return len(self._points)

    def items(self) -> Iterator[tuple[PowerMode, str, int, Point]]:
        for (m, role, b), p in self._points.items():
            yield PowerMode(*m), role, b, p

    def update(self, other: Observations) -> None:
        """Add every point of ``other`` (its points win on a shared key)."""
        self._points.update(other._points)

    def copy(self) -> Observations:
        out = Observations()
        out._points = dict(self._points)
        return out

    def keys_for(self, role: str) -> list[tuple[ModeKey, int]]:
        """(mode, batch size) keys observed for ``role``, in insertion order."""
        return [(m, b) for (m, r, b) in self._points if r == role]

    @classmethod
    def from_rows(cls, rows: Iterable[Mapping[str, Any]], role_of: Mapping[str, str] | None = None,
                  default_role: str = ROLE_TRAIN) -> Observations:
        """From profile-table rows. ``role_of`` maps (workload) → role to keep only the problem's workloads."""
        obs = cls()
        for r in rows:
            role = r.get("role") or default_role
            if role_of is not None:
                wanted = role_of.get(role)
                if wanted is not None and r.get("workload", wanted) != wanted:
                    continue
            obs.add(PowerMode.from_mapping(r), role, int(r["batch_size"]), r)
        return obs


# --------------------------------------------------------------------------- evaluations


@dataclass(frozen=True)
class Evaluation:
    """One configuration judged by a problem from observed points."""

    mode: PowerMode
    batch_size: int
    time_ms: float  # train: t_tr; infer: t_in; concurrent: t_tr + t_in
    power_w: float  # train: p_tr; infer: p_in; concurrent: max(p_tr, p_in)
    objective: float  # train: t_tr (min); infer: λ (min); concurrent: θ (max)
    meets_power: bool
    meets_latency: bool = True
    keeps_up: bool = True
    trains: bool = True  # concurrent: τ ≥ 1
    latency_ms: float | None = None
    train_minibatches_per_s: float | None = None
    tau_train: int | None = None

    @property
    def feasible(self) -> bool:
        return self.meets_power and self.meets_latency and self.keeps_up and self.trains


@dataclass(frozen=True)
class Solution:
    """A problem's solution: the best feasible observed configuration, or why there is none (not the
    tuning workflow's :class:`~edgetune.base.records.Decision`, a verified choice for one budget)."""

    feasible: bool
    evaluation: Evaluation | None = None
    reason: str = ""
    problem: str = ""
    extras: dict[str, Any] = field(default_factory=dict)

    @property
    def mode(self) -> PowerMode | None:
        return self.evaluation.mode if self.evaluation else None

    @property
    def batch_size(self) -> int | None:
        return self.evaluation.batch_size if self.evaluation else None

    def as_json(self, profiled: int | None = None) -> dict[str, Any]:
        """docs/contract.md's ``edgetune search`` object."""
        if not self.feasible or self.evaluation is None:
            out: dict[str, Any] = {"feasible": False, "reason": self.reason}
            if profiled is not None:
                out["profiled"] = profiled
            return out
        ev = self.evaluation
        out = {"feasible": True, "mode": ev.mode.as_dict(), "batch_size": ev.batch_size}
        if profiled is not None:
            out["profiled"] = profiled
        out["time_ms"] = ev.time_ms
        out["power_w"] = ev.power_w
        if self.problem in ("infer", "concurrent"):
            out["latency_ms"] = ev.latency_ms
        if self.problem == "concurrent":
            out["train_minibatches_per_s"] = ev.train_minibatches_per_s
            out["tau_train"] = ev.tau_train
        out.update(self.extras)  # problem-specific fields (e.g. the non-urgent throughput of urgent_batch)
        return out


# --------------------------------------------------------------------------- problems


class Problem(ABC):
    """A seed-004 problem: evaluates configurations from observations and picks the best."""

    kind: ClassVar[str]
    #: Roles a configuration needs observed (concurrent: both).
    roles: ClassVar[tuple[str, ...]]

    def __init__(self, power_budget_w: float, train_batch_size: int | None = None) -> None:
        self.power_budget_w = validation.power_budget_w(power_budget_w)
        self.train_batch_size = (validation.batch_size(train_batch_size, "train_batch_size")
                                 if train_batch_size is not None else None)

    # -- what a strategy needs to know ---------------------------------------------------------
    def workload_for(self, role: str) -> str | None:
        """The workload profiled for ``role`` (``None``: the table's only one)."""
        return None

    def points_for(self, batch_size: int) -> tuple[tuple[str, int], ...]:
        """(role, batch size) points a configuration with ``batch_size`` needs observed."""
        return ((self.roles[0], batch_size),)

    #: The :meth:`to_dict` field holding the fixed (not tuned) batch size of the background role.
    fixed_batch_field: ClassVar[str] = "train_batch_size"

    def device_role(self, role: str) -> str:
        """The role ``role``'s workload was profiled in (a two-inference problem runs an
        inference workload in the training slot); the problem's own role by default."""
        return role

    def workload_field(self, role: str) -> str:
        """The :meth:`to_dict` field naming ``role``'s workload."""
        return f"{role}_workload"

    def observations_from_rows(self, rows: Iterable[Mapping[str, Any]]) -> Observations:
        """This problem's points from profile-table rows (each role's workload, profiled role and,
        for the background role, its fixed batch size), keyed by the problem's roles."""
        rows = list(rows)
        obs = Observations()
        for role in self.roles:
            workload, drole = self.workload_for(role), self.device_role(role)
            fixed = self.train_batch_size if role == ROLE_TRAIN else None
            for r in rows:
                if workload is not None and r.get("workload", workload) != workload:
                    continue
                if (r.get("role") or drole) != drole:
                    continue
                if fixed is not None and int(r["batch_size"]) != fixed:
                    continue
                obs.add(PowerMode.from_mapping(r), role, int(r["batch_size"]), r)
        return obs

    @property
    def tunes_batch_size(self) -> bool:
        """Whether the batch size is a decision (inference) or fixed (training)."""
        return ROLE_INFER in self.roles

    # -- evaluation --------------------------------------------------------------------------
    @abstractmethod
    def evaluate(self, mode: PowerMode, batch_size: int, obs: Observations) -> Evaluation | None:
        """The configuration judged from ``obs``; ``None`` when a needed point is missing."""

    @abstractmethod
    def rank(self, ev: Evaluation) -> tuple:
        """Sort key among feasible evaluations: lower is better."""

    def configurations(self, obs: Observations) -> list[tuple[PowerMode, int]]:
        """Every (mode, batch size) that ``obs`` lets this problem evaluate."""
        role = ROLE_INFER if self.tunes_batch_size else ROLE_TRAIN
        keys = obs.keys_for(role)
        if not self.tunes_batch_size and self.train_batch_size is not None:
            keys = [k for k in keys if k[1] == self.train_batch_size]
        return [(PowerMode(*m), b) for m, b in keys]

    def evaluations(self, obs: Observations) -> list[Evaluation]:
        out = []
        for mode, b in self.configurations(obs):
            ev = self.evaluate(mode, b, obs)
            if ev is not None:
                out.append(ev)
        return out

    def solve(self, obs: Observations) -> Solution:
        """The best feasible observed configuration, or ``feasible=False`` with the reason."""
        evs = self.evaluations(obs)
        feasible = [e for e in evs if e.feasible]
        if feasible:
            return Solution(True, min(feasible, key=self.rank), problem=self.kind)
        return Solution(False, None, self.explain(evs), problem=self.kind)

    def decide(self, ev: Evaluation | None) -> Solution:
        """A Solution for one given evaluation (baselines that commit to a configuration)."""
        if ev is None:
            return Solution(False, None, "the chosen configuration was not profiled", problem=self.kind)
        if ev.feasible:
            return Solution(True, ev, problem=self.kind)
        return Solution(False, None, f"the chosen configuration {ev.mode} bs={ev.batch_size} misses: "
                        + self._misses(ev), problem=self.kind)

    # -- explanations ------------------------------------------------------------------------
    def explain(self, evs: list[Evaluation]) -> str:
        if not evs:
            return "nothing was profiled"
        parts = [f"within {self.power_budget_w:g} W: {sum(e.meets_power for e in evs)}"
                 f" (least power seen {min(e.power_w for e in evs):.1f} W)"]
        parts += self._explain_extra(evs)
        return f"no profiled configuration meets every budget ({len(evs)} evaluated; " + "; ".join(parts) + ")"

    def _explain_extra(self, evs: list[Evaluation]) -> list[str]:
        return []

    def _misses(self, ev: Evaluation) -> str:
        out = []
        if not ev.meets_power:
            out.append(f"power {ev.power_w:.1f} W > {self.power_budget_w:g} W")
        if not ev.keeps_up:
            out.append("cannot keep up with the arrival rate")
        if not ev.meets_latency and ev.latency_ms is not None:
            out.append(f"latency {ev.latency_ms:.1f} ms over budget")
        if not ev.trains:
            out.append("no training minibatch fits between inference minibatches")
        return ", ".join(out) or "nothing"

    # -- persistence -------------------------------------------------------------------------
    @abstractmethod
    def to_dict(self) -> dict[str, Any]:
        ...

    def describe(self) -> str:
        return ", ".join(f"{k}={v}" for k, v in self.to_dict().items())


class TrainProblem(Problem):
    """Least training minibatch time with p_tr ≤ P̂."""

    kind = "train"
    roles = (ROLE_TRAIN,)

    def __init__(self, power_budget_w: float, train_batch_size: int | None = None,
                 train_workload: str | None = None) -> None:
        super().__init__(power_budget_w, train_batch_size)
        self.train_workload = train_workload

    def workload_for(self, role: str) -> str | None:
        return self.train_workload

    def evaluate(self, mode: PowerMode, batch_size: int, obs: Observations) -> Evaluation | None:
        p = obs.get(mode, ROLE_TRAIN, batch_size)
        if p is None:
            return None
        return Evaluation(mode, int(batch_size), p.time_ms, p.power_w, objective=p.time_ms,
                          meets_power=p.power_w <= self.power_budget_w + _EPS)

    def rank(self, ev: Evaluation) -> tuple:
        return (ev.time_ms, ev.power_w, mode_key(ev.mode))

    def to_dict(self) -> dict[str, Any]:
        return {"problem": self.kind, "power_budget_w": self.power_budget_w,
                "train_batch_size": self.train_batch_size, "train_workload": self.train_workload}


class LatencyProblem(Problem):
    """Shared by inference and concurrent: arrival rate, latency budget, peak latency, keep-up."""

    def __init__(self, power_budget_w: float, latency_budget_ms: float, arrival_rps: float,
                 train_batch_size: int | None = None) -> None:
        super().__init__(power_budget_w, train_batch_size)
        self.latency_budget_ms = validation.latency_budget_ms(latency_budget_ms)
        self.arrival_rps = validation.arrival_rps(arrival_rps)

    def peak_latency_ms(self, batch_size: int, infer_time_ms: float) -> float:
        """λ = (β−1)/α + t_in, in ms."""
        return (batch_size - 1) / self.arrival_rps * 1000.0 + infer_time_ms

    def window_ms(self, batch_size: int) -> float:
        """β/α: the time β requests take to arrive (the most t_in may take to keep up)."""
        return batch_size / self.arrival_rps * 1000.0

    def keeps_up(self, batch_size: int, infer_time_ms: float) -> bool:
        return infer_time_ms <= self.window_ms(batch_size) * (1 + _EPS)

    def _explain_extra(self, evs: list[Evaluation]) -> list[str]:
        return [f"keep up with {self.arrival_rps:g} rps: {sum(e.keeps_up for e in evs)}",
                f"within {self.latency_budget_ms:g} ms latency: {sum(e.meets_latency for e in evs)}"]


class InferProblem(LatencyProblem):
    """Least peak latency λ with λ ≤ L̂, p_in ≤ P̂ and keep-up."""

    kind = "infer"
    roles = (ROLE_INFER,)

    def __init__(self, power_budget_w: float, latency_budget_ms: float, arrival_rps: float,
                 infer_workload: str | None = None) -> None:
        super().__init__(power_budget_w, latency_budget_ms, arrival_rps)
        self.infer_workload = infer_workload

    def workload_for(self, role: str) -> str | None:
        return self.infer_workload

    def evaluate(self, mode: PowerMode, batch_size: int, obs: Observations) -> Evaluation | None:
        p = obs.get(mode, ROLE_INFER, batch_size)
        if p is None:
            return None
        lat = self.peak_latency_ms(batch_size, p.time_ms)
        return Evaluation(mode, int(batch_size), p.time_ms, p.power_w, objective=lat,
                          meets_power=p.power_w <= self.power_budget_w + _EPS,
                          meets_latency=lat <= self.latency_budget_ms + _EPS,
                          keeps_up=self.keeps_up(batch_size, p.time_ms), latency_ms=lat)

    def rank(self, ev: Evaluation) -> tuple:
        return (ev.latency_ms, ev.batch_size, ev.power_w, mode_key(ev.mode))

    def to_dict(self) -> dict[str, Any]:
        return {"problem": self.kind, "power_budget_w": self.power_budget_w,
                "latency_budget_ms": self.latency_budget_ms, "arrival_rps": self.arrival_rps,
                "infer_workload": self.infer_workload}


class ConcurrentProblem(LatencyProblem):
    """Most training throughput under managed interleaving, within latency and power budgets."""

    kind = "concurrent"
    roles = (ROLE_TRAIN, ROLE_INFER)

    def __init__(self, power_budget_w: float, latency_budget_ms: float, arrival_rps: float,
                 train_workload: str | None = None, infer_workload: str | None = None,
                 train_batch_size: int | None = None) -> None:
        super().__init__(power_budget_w, latency_budget_ms, arrival_rps, train_batch_size)
        self.train_workload = train_workload
        self.infer_workload = infer_workload

    def workload_for(self, role: str) -> str | None:
        return self.train_workload if role == ROLE_TRAIN else self.infer_workload

    def points_for(self, batch_size: int) -> tuple[tuple[str, int], ...]:
        return ((ROLE_TRAIN, self.train_batch_size or TRAIN_BATCH_SIZE), (ROLE_INFER, batch_size))

    def tau(self, batch_size: int, train_time_ms: float, infer_time_ms: float) -> int:
        """τ = ⌊(β/α − t_in) / t_tr⌋ training minibatches per inference minibatch (0 if none fit)."""
        spare_ms = self.window_ms(batch_size) - infer_time_ms
        if spare_ms <= 0:
            return 0
        return int(math.floor(spare_ms / train_time_ms * (1 + _EPS)))

    def throughput(self, batch_size: int, tau: int) -> float:
        """θ = τ·α/β training minibatches per second."""
        return tau * self.arrival_rps / batch_size

    def evaluate(self, mode: PowerMode, batch_size: int, obs: Observations) -> Evaluation | None:
        pin = obs.get(mode, ROLE_INFER, batch_size)
        ptr = obs.get(mode, ROLE_TRAIN, self.train_batch_size or TRAIN_BATCH_SIZE)
        if pin is None or ptr is None:
            return None
        lat = self.peak_latency_ms(batch_size, pin.time_ms)
        up = self.keeps_up(batch_size, pin.time_ms)
        tau = self.tau(batch_size, ptr.time_ms, pin.time_ms) if up else 0
        theta = self.throughput(batch_size, tau)
        power = max(ptr.power_w, pin.power_w)
        return Evaluation(mode, int(batch_size), ptr.time_ms + pin.time_ms, power, objective=theta,
                          meets_power=power <= self.power_budget_w + _EPS,
                          meets_latency=lat <= self.latency_budget_ms + _EPS, keeps_up=up, trains=tau >= 1,
                          latency_ms=lat, train_minibatches_per_s=theta, tau_train=tau)

    def rank(self, ev: Evaluation) -> tuple:
        return (-ev.objective, ev.latency_ms, ev.batch_size, ev.power_w, mode_key(ev.mode))

    def _explain_extra(self, evs: list[Evaluation]) -> list[str]:
        return super()._explain_extra(evs) + [f"fit a training minibatch: {sum(e.trains for e in evs)}"]

    def to_dict(self) -> dict[str, Any]:
        return {"problem": self.kind, "power_budget_w": self.power_budget_w,
                "latency_budget_ms": self.latency_budget_ms, "arrival_rps": self.arrival_rps,
                "train_workload": self.train_workload, "infer_workload": self.infer_workload,
                "train_batch_size": self.train_batch_size}
