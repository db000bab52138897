"""The optimizer's questions and answers as typed records (what ``edgetune.v1.Optimizer`` carries).

:mod:`edgetune.proto.serde.optimizer` maps them to and from the messages, the typed client
(:mod:`edgetune.clients.optimizer`) takes and returns them, and the library answers them
(:mod:`.answers` for the one-shot questions, :mod:`.sessions` for ask/tell searches).

Objectives are :class:`~edgetune.base.objective.Objective` s, problems and strategies their library
names (``train``, ``gmd``); ``risk`` is a probability (None: means only).
This module imports nothing heavy: clients read and write these records without torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from edgetune import validation
from edgetune.base.mode import PowerMode
from edgetune.base.objective import Objective
from edgetune.base.records import BatchEfficiency, Predictions
from edgetune.estimation.records import PredictSpec
from edgetune.store import MeasurementRecord


@dataclass(frozen=True)
class Verdict:
    """The optimizer's answer for one budget: the configuration chosen and its predicted values, or
    why nothing is feasible. Which fields are set depends on the question: a selection has a mode, a
    batch size, time, power, energy and (std-aware) ``power_upper_w``; a joint selection the LUT's
    ``mode_id`` and ``time_to_target_s``; a concurrent one ``infer_batch_size``, ``tau_train`` and
    ``train_minibatches_per_s``; a search ``profiled``. The budgets are the ones it answers."""

    feasible: bool
    reason: str = ""
    mode: PowerMode | None = None
    batch_size: int = 0
    time_ms: float = 0.0
    power_w: float = 0.0
    energy_j: float = 0.0
    latency_ms: float | None = None
    infer_batch_size: int | None = None
    tau_train: int | None = None
    train_minibatches_per_s: float | None = None
    profiled: int = 0
    power_budget_w: float | None = None
    time_budget_ms: float | None = None
    latency_budget_ms: float | None = None
    arrival_rps: float | None = None
    mode_id: str = ""
    time_to_target_s: float | None = None
    time_upper_ms: float | None = None
    power_upper_w: float | None = None


@dataclass(frozen=True)
class Subset:
    """Rows picked from a pool (a Pareto front, the next modes to profile): their rows in the pool, in
    the order picked, and the rows themselves."""

    indices: tuple[int, ...]
    rows: Predictions


@dataclass(frozen=True)
class BudgetSweep:
    """Budgets from ``start`` to ``stop`` inclusive in ``step`` s (``17:50:1`` is 34 budgets)."""

    start: float
    stop: float
    step: float = 1.0

    def budgets(self, field: str = "sweep") -> list[float]:
        return validation.budget_range(self.start, self.stop, self.step, field)


@dataclass(frozen=True)
class SelectQuery:
    """One option of ``pool`` per budget: least ``objective`` within the budgets at ``risk``; a sweep
    gives one per budget (of power; of time for the ``power`` objective). ``pool`` is the rows, or (over
    the wire) the model whose grid predictions they are, which the optimizer service reads from its
    estimator and keeps per model version."""

    pool: Predictions | PredictSpec
    objective: Objective = Objective.MIN_TIME
    power_budget_w: float | None = None
    time_budget_ms: float | None = None
    risk: float | None = None
    sweep: BudgetSweep | None = None


@dataclass(frozen=True)
class LutRow:
    """One profiled (batch size, mode) of Ahmed et al.'s LUT: time for s samples, peak power; ``mode``
    optional beside the opaque ``mode_id``."""

    batch_size: int
    mode_id: str
    time_s: float
    power_w: float
    mode: PowerMode | None = None


@dataclass(frozen=True)
class JointQuery:
    """Joint batch size and mode under an optional power cap (Ahmed et al., Algorithm 1)."""

    lut: tuple[LutRow, ...]
    efficiency: BatchEfficiency
    power_cap_w: float | None = None


@dataclass(frozen=True)
class ConcurrentQuery:
    """Training interleaved with inference on one device (Fulcrum): the measured rows of each role."""

    train: Predictions
    infer: Predictions
    power_budget_w: float
    latency_budget_ms: float
    arrival_rps: float


@dataclass(frozen=True)
class NextProfilesQuery:
    """The next modes worth profiling on a pool's predicted front (``count`` 0: the default; both power
    bounds 0: the whole range)."""

    pool: Predictions
    profiled: tuple[PowerMode, ...] = ()
    count: int = 0
    power_low_w: float = 0.0
    power_high_w: float = 0.0


@dataclass(frozen=True)
class SearchRequest:
    """An ask/tell search session: a strategy over a problem, in a space of modes (explicit, or a
    device's grid) and batch sizes. Budgets are those the problem needs; ``max_profiles`` 0 and empty
    batch sizes: the strategy's and the problem's defaults."""

    strategy: str
    problem: str
    power_budget_w: float | None = None
    latency_budget_ms: float | None = None
    arrival_rps: float | None = None
    device: str = ""
    grid: str = "full"
    modes: tuple[PowerMode, ...] = ()
    batch_sizes: tuple[int, ...] = ()
    infer_batch_sizes: tuple[int, ...] = ()
    train_workload: str = ""
    infer_workload: str = ""
    max_profiles: int = 0
    seed: int | None = None


@dataclass(frozen=True)
class Started:
    session_id: str
    max_profiles: int


@dataclass(frozen=True)
class SearchPoint:
    """A point a search asks to measure."""

    mode: PowerMode
    role: str
    batch_size: int
    workload: str = ""


@dataclass(frozen=True)
class Asked:
    points: tuple[SearchPoint, ...]
    done: bool


class Told(NamedTuple):
    """One measured point of a Tell; ``field`` is its place in the request (``measurements[2]``)."""

    field: str
    mode: PowerMode
    role: str | None  # None: whichever role the asked point has
    batch_size: int
    workload: str
    time_ms: float
    power_w: float

    @classmethod
    def measured(cls, field: str, m: MeasurementRecord) -> Told:
        """A stored measurement (a Profile's) as the point told at ``field``."""
        return cls(field, m.mode, m.role, m.batch_size, m.workload, m.time_ms, m.power_w)


@dataclass(frozen=True)
class TellResult:
    profiled: int
    done: bool


@dataclass(frozen=True)
class Best:
    verdict: Verdict
    done: bool
