"""The ask/tell interface every search strategy implements, and the space it searches.

``ask()`` returns the trials (configurations) to profile next — empty when the strategy is
done; ``tell(trial, measurement)`` hands back what was measured; ``best()`` is the decision
from observed points only (:meth:`Problem.solve`). The same object runs offline against a
:class:`~edgetune.devices.replay.ReplayDevice` (:func:`~edgetune.optimization.strategies.driver.run_search`)
and online against profiler agents.

Strategies are written as generators (:meth:`SearchStrategy._search`) that yield batches of
trials and read the answers from ``self.obs`` when resumed: the algorithm reads top to bottom
like the paper's pseudo-code instead of an explicit state machine. The base class

- drops points that were already observed (a configuration profiled once is reused for free),
- enforces the budget as a hard limit on profiling runs (trials that would exceed it are cut,
  and the strategy is done when it is spent),
- starts warm from points profiled earlier (:meth:`warm_start`; the dynamic-rate solver re-solves
  each window this way, so only points never profiled before cost a profile),
- persists a session as its configuration plus the told history (:meth:`state_dict`) and
  resumes it by replaying that history into a fresh generator (:meth:`from_state`): every
  strategy is deterministic given its seed and the measurements, so the replay lands in
  exactly the state the session was in (verified trial by trial).

A *trial* is one configuration: a mode and the batch size the problem decides (training: the
fixed training batch size; inference and concurrent: the inference minibatch size β). It lists
the (role, batch size) points still to measure — concurrent trials need the training point of
the mode and the inference point of (mode, β). Budgets count *profiling runs*: one run is one
(power mode, batch size) of one role measured, so a concurrent trial at a mode whose training
point is not yet profiled costs two runs, and one whose training point is known costs one.
``spent`` never exceeds ``budget`` (concurrent GMD15: at most 15 runs, not 15 configurations
of up to two runs each); ``profiled`` (distinct points measured) is what the driver and the
CLI report, and it is at most ``spent``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Generator, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from edgetune import validation
from edgetune.base.mode import PowerMode
from edgetune.errors import FailedPrecondition, InvalidArgument
from edgetune.optimization.problem_registry import problem_from_dict
from edgetune.optimization.problems import (
    INFER_BATCH_SIZES,
    ModeKey,
    Observations,
    Point,
    Problem,
    Solution,
    mode_key,
)
from edgetune.powermodes.grids import ModeGrid

# --------------------------------------------------------------------------- trials


@dataclass(frozen=True)
class Trial:
    """One configuration to profile: ``mode`` at ``batch_size``, measuring ``points``."""

    number: int
    mode: PowerMode
    batch_size: int
    points: tuple[tuple[str, int], ...]  # (role, batch size) still to measure

    def to_dict(self) -> dict[str, Any]:
        return {"number": self.number, "mode": self.mode.as_dict(), "batch_size": self.batch_size,
                "points": [list(p) for p in self.points]}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Trial:
        return cls(int(d["number"]), PowerMode.from_mapping(d["mode"]), int(d["batch_size"]),
                   tuple((str(r), int(b)) for r, b in d["points"]))


#: What ``tell`` accepts: one Point / row for a one-point trial, or {role: Point / row}.
Measurement = Point | Mapping[str, Any]


# --------------------------------------------------------------------------- space


@dataclass(frozen=True)
class PresetMode:
    name: str
    budget_w: float | None
    mode: PowerMode


@dataclass(frozen=True)
class SearchSpace:
    """What can be profiled: the grid, the modes actually available, the inference batch sizes."""

    grid: ModeGrid
    modes: tuple[PowerMode, ...]  # available modes (a replay table may not hold the whole product)
    infer_batch_sizes: tuple[int, ...] = INFER_BATCH_SIZES
    train_batch_size: int = 16
    presets: tuple[PresetMode, ...] = ()
    max_power_w: float | None = None  # the device's peak (MAXN's nominal budget for the preset baseline)
    _available: frozenset = field(default=frozenset(), repr=False, compare=False)

    def __post_init__(self) -> None:
        if not self.modes:
            raise InvalidArgument("modes", "the search space has no modes")
        object.__setattr__(self, "_available", frozenset(mode_key(m) for m in self.modes))

    @classmethod
    def from_grid(cls, grid: ModeGrid, infer_batch_sizes: Sequence[int] = INFER_BATCH_SIZES,
                  train_batch_size: int = 16, presets: Sequence[PresetMode] = ()) -> SearchSpace:
        return cls(grid, tuple(grid.modes()), tuple(sorted(infer_batch_sizes)), train_batch_size, tuple(presets))

    def available(self, mode: PowerMode) -> bool:
        return mode_key(mode) in self._available

    def batch_sizes(self, problem: Problem) -> tuple[int, ...]:
        """The batch sizes a configuration of ``problem`` may take."""
        return self.infer_batch_sizes if problem.tunes_batch_size else (self.train_batch_size,)

    def configurations(self, problem: Problem) -> list[tuple[PowerMode, int]]:
        """Every (mode, batch size) of the space, modes outer."""
        return [(m, b) for m in self.modes for b in self.batch_sizes(problem)]

    def to_dict(self) -> dict[str, Any]:
        g = self.grid
        return {"grid": {"cores": list(g.cores), "cpu_mhz": list(g.cpu_mhz), "gpu_mhz": list(g.gpu_mhz),
                         "emc_mhz": list(g.emc_mhz), "name": g.name, "device": g.device},
                "modes": [list(m.as_tuple()) for m in self.modes],
                "infer_batch_sizes": list(self.infer_batch_sizes), "train_batch_size": self.train_batch_size,
                "presets": [{"name": p.name, "budget_w": p.budget_w, "mode": p.mode.as_dict()} for p in self.presets],
                "max_power_w": self.max_power_w}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> SearchSpace:
        g = d["grid"]
        grid = ModeGrid.from_values(g["cores"], g["cpu_mhz"], g["gpu_mhz"], g["emc_mhz"], g.get("name", ""),
                                    g.get("device", ""))
        return cls(grid, tuple(PowerMode(int(m[0]), *map(float, m[1:])) for m in d["modes"]),
                   tuple(int(b) for b in d["infer_batch_sizes"]), int(d["train_batch_size"]),
                   tuple(PresetMode(p["name"], p["budget_w"], PowerMode.from_mapping(p["mode"]))
                         for p in d.get("presets", ())), d.get("max_power_w"))


# --------------------------------------------------------------------------- strategy

#: Items a search generator yields: (mode, batch size) measures every point the problem needs;
#: (mode, batch size, points) only those (role, batch size) points (GMD's MAXN check).
Batch = list[tuple[PowerMode, int] | tuple[PowerMode, int, tuple[tuple[str, int], ...]]]
SearchGen = Generator[Batch, None, None]


class SearchStrategy(ABC):
    """Optuna-style ask/tell search over (mode, batch size) configurations."""

    #: Registry name (``gmd``, ``als``, ``random``, ...).
    name: ClassVar[str]

    def __init__(self, problem: Problem, space: SearchSpace, *, budget: int | None = None, seed: int = 0,
                 **options: Any) -> None:
        self.problem = problem
        self.space = space
        validation.optional(validation.count, budget, "budget")
        self.budget = int(budget) if budget is not None else self.default_budget()
        self.seed = int(seed)
        self.options = dict(options)
        self.obs = Observations()
        self._gen: SearchGen | None = None
        self._pending: list[Trial] = []
        self._history: list[tuple[Trial, dict[str, Point]]] = []
        self._n_trials = 0  # trials handed out (each measures something new)
        self._n_runs = 0  # profiling runs handed out: (mode, role, batch size) points, the budget's unit
        self._next_number = 0
        self._done = False
        self._prior: list[tuple[PowerMode, str, int, Point]] = []  # warm-start points (state_dict "prior")

    # -- for subclasses ----------------------------------------------------------------------
    @abstractmethod
    def default_budget(self) -> int:
        """Trials this strategy uses when no budget is given (the paper's)."""

    @abstractmethod
    def _search(self) -> SearchGen:
        """Yield batches of (mode, batch size) to profile; read results from ``self.obs``."""

    @property
    def remaining(self) -> int:
        """Profiling runs left in the budget."""
        return max(0, self.budget - self._n_runs)

    @property
    def spent(self) -> int:
        """Profiling runs handed out so far (never more than ``budget``)."""
        return self._n_runs

    def observed(self, mode: PowerMode, batch_size: int) -> bool:
        """Whether every point of the configuration has been observed."""
        return all(self.obs.has(mode, r, b) for r, b in self.problem.points_for(batch_size))

    def measure(self, configs: Iterable[tuple[PowerMode, int]],
                points: tuple[tuple[str, int], ...] | None = None) -> Generator[Batch, None, None]:
        """Sub-generator: profile ``configs`` (those not yet observed) as one batch.

        ``points`` restricts every config to those (role, batch size) points.
        """
        todo: Batch = []
        for m, b in configs:
            wanted = points if points is not None else self.problem.points_for(b)
            if self.space.available(m) and not all(self.obs.has(m, *p) for p in wanted):
                todo.append((m, b) if points is None else (m, b, points))
        if todo:
            yield todo

    # -- warm start --------------------------------------------------------------------------
    def warm_start(self, obs: Observations) -> None:
        """Start from points profiled earlier (another search of the same workloads, e.g. at
        another arrival rate): they are observed, so asking them again costs nothing, and only
        new points become trials. Call before the first :meth:`ask`."""
        if self._gen is not None or self._history:
            raise FailedPrecondition("warm_start must come before the first ask()")
        for mode, role, b, p in obs.items():
            self.obs.add(mode, role, b, p)
            self._prior.append((mode, role, b, p))

    # -- ask / tell --------------------------------------------------------------------------
    @property
    def done(self) -> bool:
        return self._done

    @property
    def n_trials(self) -> int:
        return self._n_trials

    def ask(self) -> list[Trial]:
        """The trials to profile next (the same ones again until all are told); empty when done."""
        if self._done:
            return []
        if self._pending:
            return list(self._pending)
        if self.remaining <= 0:
            self._done = True
            return []
        if self._gen is None:
            self._gen = self._search()
        while True:
            try:
                batch = next(self._gen)
            except StopIteration:
                self._done = True
                return []
            trials: list[Trial] = []
            seen: set[tuple[ModeKey, int]] = set()
            claimed: set[tuple[ModeKey, str, int]] = set()  # points an earlier trial of this batch measures
            for item in batch:
                mode, b = item[0], int(item[1])
                wanted = item[2] if len(item) > 2 else self.problem.points_for(b)
                key = (mode_key(mode), b)
                points = tuple(p for p in wanted if not self.obs.has(mode, *p) and (key[0], *p) not in claimed)
                if not points or key in seen or not self.space.available(mode):
                    continue
                if len(points) > self.remaining - sum(len(t.points) for t in trials):
                    continue  # over budget: a cheaper trial later in the batch may still fit
                seen.add(key)
                claimed.update((key[0], *p) for p in points)
                trials.append(Trial(self._next_number, mode, int(b), points))
                self._next_number += 1
            if trials:
                self._n_trials += len(trials)
                self._n_runs += sum(len(t.points) for t in trials)
                self._pending = trials
                return list(trials)
            if self.remaining <= 0:
                self._done = True
                return []

    def tell(self, trial: Trial, measurement: Measurement | None) -> None:
        """Record what ``trial`` measured (``None``: the measurement failed; nothing is recorded)."""
        idx = next((i for i, t in enumerate(self._pending) if t.number == trial.number), None)
        if idx is None:
            raise InvalidArgument("trial", f"trial {trial.number} is not pending",
                                  ", ".join(str(t.number) for t in self._pending) or "none pending")
        pending = self._pending.pop(idx)
        got = self._points_of(pending, measurement)
        for (role, b), point in got.items():
            self.obs.add(pending.mode, role, b, point)
        self._history.append((pending, {f"{r}:{b}": p for (r, b), p in got.items()}))

    def stop(self) -> None:
        """End the search now (the driver ran out of profiles); ``best()`` stays valid."""
        self._pending = []
        self._done = True

    def best(self) -> Solution:
        """The best feasible observed configuration (never a prediction)."""
        return self.problem.solve(self.obs)

    @staticmethod
    def _points_of(trial: Trial, measurement: Measurement | None) -> dict[tuple[str, int], Point]:
        if measurement is None:
            return {}
        if isinstance(measurement, Point) or ("time_ms" in measurement and "power_w" in measurement):
            if len(trial.points) != 1:
                raise InvalidArgument("measurement", f"trial {trial.number} needs one point per role",
                                      ", ".join(r for r, _ in trial.points))
            return {trial.points[0]: Point.of(measurement)}
        out = {}
        for role, b in trial.points:
            value = measurement.get(role, measurement.get(f"{role}:{b}"))
            if value is not None:
                out[(role, b)] = Point.of(value)
        return out

    # -- persistence -------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """JSON-serialisable session: configuration, told history, trials still pending."""
        state = {
            "strategy": self.name, "budget": self.budget, "seed": self.seed, "options": dict(self.options),
            "problem": self.problem.to_dict(), "space": self.space.to_dict(),
            "history": [{"trial": t.to_dict(), "measurement": {k: [p.time_ms, p.power_w] for k, p in m.items()}}
                        for t, m in self._history],
            "pending": [t.to_dict() for t in self._pending], "done": self._done,
        }
        if self._prior:  # only warm-started sessions carry it: older states stay byte-identical
            state["prior"] = [[m.as_dict(), r, b, p.time_ms, p.power_w] for m, r, b, p in self._prior]
        return state

    @classmethod
    def from_state(cls, state: Mapping[str, Any], problem: Problem | None = None,
                   space: SearchSpace | None = None) -> SearchStrategy:
        """Resume a session saved by :meth:`state_dict` (replays its history deterministically),
        whichever strategy it ran."""
        klass = cls if getattr(cls, "name", None) == state.get("strategy") else _strategy_named(state["strategy"])
        problem = problem or problem_from_dict(state["problem"])
        space = space or SearchSpace.from_dict(state["space"])
        strat = klass(problem, space, budget=state["budget"], seed=state["seed"], **state.get("options", {}))
        if state.get("prior"):
            prior = Observations()
            for m, r, b, t, p in state["prior"]:
                prior.add(PowerMode.from_mapping(m), r, int(b), Point(float(t), float(p)))
            strat.warm_start(prior)
        for rec in state["history"]:
            trial = Trial.from_dict(rec["trial"])
            if not any(t.number == trial.number for t in strat._pending):
                strat.ask()
            match = next((t for t in strat._pending if t.number == trial.number), None)
            if match is None or match != trial:
                raise FailedPrecondition(f"saved {state['strategy']} session does not replay: trial {trial.number} "
                                         f"was {trial.mode} bs={trial.batch_size}, replay asks "
                                         f"{[str(t.mode) for t in strat._pending]}")
            meas = {k: Point(*v) for k, v in rec["measurement"].items()}
            strat.tell(match, meas)
        if state.get("pending") and not strat._pending:
            strat.ask()
        if state.get("done"):
            strat._done = True
            strat._pending = []
        return strat


def _strategy_named(name: str) -> type[SearchStrategy]:
    """The strategy class called ``name``, found among SearchStrategy's subclasses.

    The class hierarchy is the registry here: the package imports every strategy before this
    module is used, and looking names up in :mod:`.registry` instead would import it back.
    """
    found: dict[str, type[SearchStrategy]] = {}
    stack = list(SearchStrategy.__subclasses__())
    while stack:
        klass = stack.pop()
        found.setdefault(getattr(klass, "name", ""), klass)
        stack.extend(klass.__subclasses__())
    if name not in found:
        raise InvalidArgument("strategy", f"unknown strategy {name!r}", ", ".join(sorted(n for n in found if n)))
    return found[name]
