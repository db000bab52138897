"""The demo's shared state and helpers: what the story learns about each node as the steps run
(:class:`Story`, :class:`NodeResult`), how much work it does (:class:`Options`), and the small
helpers every step uses (profiling on an agent, mode keys, baselines, the calibrated predictions)."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np

from edgetune.demo.suite import Agent, NodeSpec, Suite
from edgetune.optimization.select import z_score
from edgetune.proto.v1 import (
    common_pb2,
    coordinator_pb2,
    estimator_pb2,
    optimizer_pb2,
    profiler_pb2,
)

TRAIN, INFER = common_pb2.ROLE_TRAIN, common_pb2.ROLE_INFER
#: Safe selection: the probability that a chosen mode's power exceeds its budget (as ``--risk`` and
#: ``SelectRequest.risk``); a mode fits when predicted power + RISK_Z × its std does.
RISK = 0.05
RISK_Z = z_score(RISK)  # 1.645
RPC_TIMEOUT_S = 300.0
ROUND_NOTE = ("Round time = ceil(samples / batch) × predicted minibatch time; plans use the safe power (mean + "
              "1.645 σ). On these simulated Jetsons the fastest mode within a budget is nearly the least-energy "
              "one (race to idle), so the energy objective saves little: it slows only nodes off the critical "
              "path.")
REFERENCE_WORKLOAD = "resnet18"

ModeKey = tuple[int, float, float, float]
Tick = Callable[[str, int, int], None]  # (task name, done, total)


def key(mode: common_pb2.PowerMode) -> ModeKey:
    return (int(mode.cores), round(mode.cpu_mhz, 3), round(mode.gpu_mhz, 3), round(mode.emc_mhz, 3))


def label(mode: common_pb2.PowerMode) -> str:
    return f"{mode.cores}c/{mode.cpu_mhz:g}/{mode.gpu_mhz:g}/{mode.emc_mhz:g}"


def energy_j(time_ms: float, power_w: float) -> float:
    return time_ms * power_w / 1000.0


@dataclass
class Options:
    """How much work the story does (``--quick`` shrinks the fits, ``--modes`` the profiles)."""

    workload: str = "mobilenetv3"
    modes: int = 50
    held_out: int = 20
    batch_size: int = 16
    reference_modes: int = 2000  # reference table rows per device model (PowerTrain grid sample)
    reference_epochs: int = 60
    transfer_epochs: int = 0  # 0: the estimator's default (300)
    gp_restarts: int = 0  # 0: the estimator's default
    seed: int = 0
    budget_change: tuple[str, float] = ("orin-2", 16.0)
    concurrent_node: str = "orin-1"
    concurrent: tuple[float, float] = (600.0, 40.0)  # latency budget ms, arrival rate rps
    infer_workload: str = "resnet18"


@dataclass
class NodeResult:
    node: NodeSpec
    spec: common_pb2.DeviceSpec | None = None
    address: str = ""
    backend: str = ""
    grid_modes: int = 0
    profiled: list[common_pb2.Measurement] = field(default_factory=list)
    held_out: list[common_pb2.Measurement] = field(default_factory=list)
    stored: int = 0
    model: estimator_pb2.ModelInfo | None = None
    predictions: list[common_pb2.Prediction] = field(default_factory=list)
    front: list[common_pb2.Prediction] = field(default_factory=list)
    decision: common_pb2.Decision | None = None
    verified: common_pb2.Measurement | None = None
    attempts: int = 0
    maxn: common_pb2.Measurement | None = None
    preset: common_pb2.Measurement | None = None
    preset_name: str = ""
    notes: list[str] = field(default_factory=list)
    #: Relative power error on the held-out modes, added to the predicted std (see calibrate()).
    power_rel_err: float = 0.0
    #: Modes measured over the node's budget (and those at or above their clocks): never planned again.
    excluded: set[ModeKey] = field(default_factory=set)
    #: Each applied round config measured on the agent: revision, mode, power, budget.
    config_checks: list[dict] = field(default_factory=list)

    def predicted(self) -> dict[ModeKey, common_pb2.Prediction]:
        return {key(p.mode): p for p in self.predictions}

    @property
    def within_budget(self) -> bool:
        return self.verified is not None and self.verified.power_w <= self.node.budget_w


@dataclass
class RoundResult:
    label: str
    objective: str
    response: coordinator_pb2.PlanRoundResponse
    fastest_energy_j: float
    fastest_makespan_s: float
    deadline_s: float | None = None


@dataclass
class Story:
    suite: Suite
    options: Options
    fleet: tuple[NodeSpec, ...]
    nodes: dict[str, NodeResult] = field(default_factory=dict)
    references: dict[str, estimator_pb2.ModelInfo] = field(default_factory=dict)
    rounds: list[RoundResult] = field(default_factory=list)
    budget_change: dict = field(default_factory=dict)
    concurrent: dict = field(default_factory=dict)
    round_id: str = ""  # the applied round
    #: Each node's power budget now (the budget change updates it).
    budgets: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.budgets = self.budgets or {n.node_id: n.budget_w for n in self.fleet}

    def workload(self, role: int = TRAIN, name: str | None = None, batch: int | None = None) -> common_pb2.Workload:
        return common_pb2.Workload(name=name or self.options.workload, role=role,
                                   batch_size=batch or self.options.batch_size)

    def agent(self, node_id: str) -> Agent:
        return self.suite.agents[node_id]


# --- helpers ----------------------------------------------------------------------------------------
def profile(agent: Agent, request: profiler_pb2.ProfileRequest, tick: Callable[[int, int], None] | None = None,
            ) -> list[common_pb2.Measurement]:
    """Run one Profile stream on an agent; measurements in order (skipped points are dropped)."""
    out = []
    for event in agent.stub.Profile(request, timeout=RPC_TIMEOUT_S):
        kind = event.WhichOneof("event")
        if kind == "measurement":
            out.append(event.measurement)
        elif kind == "progress" and tick is not None:
            tick(event.progress.done, event.progress.total)
    return out


def parallel(items: Iterable, fn: Callable, workers: int) -> list:
    with ThreadPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(fn, items))


def maxn_mode(spec: common_pb2.DeviceSpec) -> common_pb2.PowerMode:
    """Every core on and every clock at its top: the mode an operator runs when power is no object."""
    return common_pb2.PowerMode(cores=max(spec.core_counts), cpu_mhz=max(spec.cpu_mhz), gpu_mhz=max(spec.gpu_mhz),
                                emc_mhz=max(spec.emc_mhz))


def operator_preset(spec: common_pb2.DeviceSpec, budget_w: float) -> common_pb2.Preset | None:
    """The nvpmodel preset an operator would pick for a budget: the largest nominal budget within it."""
    fitting = [p for p in spec.presets if p.HasField("budget_w") and p.budget_w <= budget_w]
    return max(fitting, key=lambda p: p.budget_w) if fitting else None


def preset_mode(preset: common_pb2.Preset) -> common_pb2.PowerMode:
    return common_pb2.PowerMode(cores=preset.cores, cpu_mhz=preset.cpu_max_mhz, gpu_mhz=preset.gpu_max_mhz,
                                emc_mhz=preset.emc_max_mhz)


def mape_pct(pred: np.ndarray, true: np.ndarray) -> float:
    return float(np.mean(np.abs(pred - true) / np.abs(true)) * 100.0) if len(true) else math.nan


def candidates(rows: list[common_pb2.Prediction]) -> optimizer_pb2.Candidates:
    return optimizer_pb2.Candidates(table=optimizer_pb2.CandidateTable(rows=rows))


def dominates(a: common_pb2.PowerMode, b: common_pb2.PowerMode) -> bool:
    """``a`` has at least ``b``'s cores and every clock: it draws at least ``b``'s power."""
    return (a.cores >= b.cores and a.cpu_mhz >= b.cpu_mhz and a.gpu_mhz >= b.gpu_mhz
            and a.emc_mhz >= b.emc_mhz)


def calibrate(res: NodeResult) -> float:
    """The held-out modes' relative power error (RMS of (measured − predicted) / predicted), added in
    quadrature to every predicted power std: σ' = √(σ² + (rel × power)²). A model overconfident away
    from its training modes (the GP's σ can be a tenth of its real error there) then selects with an
    honest margin that scales with the power, as the errors do."""
    pred = res.predicted()
    err = [(m.power_w - pred[key(m.mode)].power_w) / pred[key(m.mode)].power_w
           for m in res.held_out if key(m.mode) in pred]
    res.power_rel_err = float(np.sqrt(np.mean(np.square(err)))) if err else 0.0
    return res.power_rel_err


def learn_from_miss(res: NodeResult, mode: common_pb2.PowerMode, predicted_w: float,
                    measured: common_pb2.Measurement | None) -> None:
    """A mode measured over budget: drop it and every mode at or above its clocks (they draw at least
    its power), and widen the node's error term so that the safety margin (RISK_Z × error × power)
    covers the relative miss seen there (the model under-predicts in that region)."""
    res.excluded |= {key(p.mode) for p in res.predictions if dominates(p.mode, mode)}
    if measured is not None and predicted_w > 0:
        res.power_rel_err = max(res.power_rel_err, (measured.power_w - predicted_w) / predicted_w / RISK_Z)


def calibrated(res: NodeResult) -> list[common_pb2.Prediction]:
    """The node's predictions with the calibrated power std, minus the excluded modes."""
    out = []
    for p in res.predictions:
        if key(p.mode) in res.excluded:
            continue
        q = common_pb2.Prediction()
        q.CopyFrom(p)
        q.power_std_w = math.hypot(p.power_std_w if p.HasField("power_std_w") else 0.0,
                                   res.power_rel_err * p.power_w)
        out.append(q)
    return out
