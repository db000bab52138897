"""Running a strategy against a replayed device: the offline evaluation loop of Fulcrum.

:func:`search_space` reads what a :class:`~edgetune.devices.replay.ReplayDevice` recorded for
a problem's workloads (modes present for every role the problem needs, inference batch sizes,
the training batch size, nvpmodel presets) and :func:`run_search` feeds a strategy's trials
through ``device.lookup``, counting every distinct measured point — (mode, batch size,
workload, role) — as one profile, and stopping the strategy before ``max_profiles`` would be
exceeded.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from edgetune import validation
from edgetune.base.mode import PowerMode
from edgetune.errors import InvalidArgument
from edgetune.optimization.problem_registry import problem_from_dict
from edgetune.optimization.problems import (
    ROLE_INFER,
    ROLE_TRAIN,
    TRAIN_BATCH_SIZE,
    Problem,
    Solution,
    mode_key,
)
from edgetune.optimization.strategies.base import PresetMode, SearchSpace, SearchStrategy
from edgetune.powermodes.grids import ModeGrid


class ReplayLike(Protocol):
    """What the driver needs of a device (:class:`~edgetune.devices.replay.ReplayDevice` has it)."""

    def lookup(self, mode: PowerMode, batch_size: int, workload: str | None = None, role: Any = None) -> dict: ...

    def modes(self, workload: str | None = None, role: Any = None, batch_size: int | None = None) -> list: ...

    def batch_sizes(self, mode: PowerMode | None = None, workload: str | None = None, role: Any = None) -> list: ...


@dataclass
class SearchResult:
    decision: Solution
    profiled: int  # distinct (mode, batch size, workload, role) points measured
    trials: int  # configurations the strategy asked for
    strategy: SearchStrategy

    def as_json(self) -> dict[str, Any]:
        return self.decision.as_json(self.profiled)


def _role_arg(device: ReplayLike, role: str) -> str | None:
    return role if getattr(device, "has_role", True) else None


def workloads_with_role(device: ReplayLike, role: str) -> list[str]:
    """The recorded workloads that have ``role`` rows (all of them when the table has no role column)."""
    names = device.workloads() if hasattr(device, "workloads") else []
    return [w for w in names if device.modes(w, _role_arg(device, role))]


def resolve_workloads(device: ReplayLike, problem: Problem) -> Problem:
    """``problem`` with each role's workload named: the given one, else the table's only one for that role."""
    d = problem.to_dict()
    for role in problem.roles:
        field = problem.workload_field(role)
        if d.get(field) is not None or not getattr(device, "has_workload", False):
            continue
        names = workloads_with_role(device, problem.device_role(role))
        if len(names) != 1:
            raise InvalidArgument(field, f"the table holds {len(names)} workloads with {role} rows; name one",
                                  ", ".join(names) or "none")
        d[field] = names[0]
    return problem_from_dict(d)


def search_space(device: ReplayLike, problem: Problem) -> tuple[SearchSpace, Problem]:
    """The space a problem can search on ``device``, and the problem with workloads and training batch size resolved."""
    problem = resolve_workloads(device, problem)
    mode_sets = []
    for role in problem.roles:
        found = device.modes(problem.workload_for(role), _role_arg(device, problem.device_role(role)))
        if not found:
            raise InvalidArgument("role", f"the table has no {role} rows"
                                  + (f" for workload {problem.workload_for(role)!r}" if problem.workload_for(role) else ""))
        mode_sets.append({mode_key(m) for m in found})
    keys = set.intersection(*mode_sets)
    if not keys:
        raise InvalidArgument("modes", "no mode was recorded for both the training and the inference workload")
    modes = sorted(PowerMode(*k) for k in keys)
    grid = ModeGrid.from_modes(modes, name="table", device=getattr(getattr(device, "spec", None), "name", ""))
    modes = [m for m in grid.modes() if mode_key(m) in keys]  # grid order

    infer_sizes: tuple[int, ...] = ()
    if ROLE_INFER in problem.roles:
        infer_sizes = tuple(device.batch_sizes(None, problem.workload_for(ROLE_INFER),
                                               _role_arg(device, problem.device_role(ROLE_INFER))))
    train_bs = getattr(problem, "train_batch_size", None)
    if ROLE_TRAIN in problem.roles:
        recorded = device.batch_sizes(None, problem.workload_for(ROLE_TRAIN),
                                      _role_arg(device, problem.device_role(ROLE_TRAIN)))
        if train_bs is None:
            # the user's training batch size is not ours to tune: the table's only one, else Fulcrum's 16
            train_bs = recorded[0] if len(recorded) == 1 else (TRAIN_BATCH_SIZE if TRAIN_BATCH_SIZE in recorded
                                                               else None)
            if train_bs is None:
                raise InvalidArgument(problem.fixed_batch_field, "the table records several training batch sizes; name one",
                                      ", ".join(map(str, recorded)))
        elif train_bs not in recorded:
            raise InvalidArgument(problem.fixed_batch_field, f"{train_bs} was not recorded",
                                  ", ".join(map(str, recorded)))
        d = problem.to_dict()
        d[problem.fixed_batch_field] = train_bs
        problem = problem_from_dict(d)
    spec = getattr(device, "spec", None)
    presets = tuple(PresetMode(p.name, p.budget_w, p.mode()) for p in getattr(spec, "presets", ()))
    space = SearchSpace(grid, tuple(modes), infer_sizes or (1,), int(train_bs or TRAIN_BATCH_SIZE), presets,
                        max_power_w=getattr(spec, "max_power_w", None))
    return space, problem


def run_search(strategy: SearchStrategy, device: ReplayLike, problem: Problem | None = None,
               max_profiles: int | None = None) -> SearchResult:
    """Profile what ``strategy`` asks through ``device.lookup`` until it is done (or out of profiles)."""
    problem = problem or strategy.problem
    validation.optional(validation.count, max_profiles, "max_profiles")
    measured: set[tuple] = set()
    while not strategy.done:
        trials = strategy.ask()
        if not trials:
            break
        for trial in trials:
            # keyed by the profiled role: one measurement serves both slots of a two-inference problem
            keys = {role: (mode_key(trial.mode), b, problem.workload_for(role), problem.device_role(role))
                    for role, b in trial.points}
            new = [k for k in keys.values() if k not in measured]
            if max_profiles is not None and len(measured) + len(new) > max_profiles:
                strategy.stop()
                break
            measurement = {}
            for role, b in trial.points:
                measurement[role] = device.lookup(trial.mode, b, problem.workload_for(role),
                                                  _role_arg(device, problem.device_role(role)))
                measured.add(keys[role])
            strategy.tell(trial, measurement)
    return SearchResult(strategy.best(), len(measured), strategy.n_trials, strategy)
