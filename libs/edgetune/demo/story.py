"""The demo's shared state and helpers: what the story learns about each node as the steps run
(:class:`Story`, :class:`NodeResult`), how much work it does (:class:`Options`), and the small
helpers every step uses (profiling on an agent, mode keys, baselines). The nodes are tuned by the
coordinator's reconcile loop (one TuningJob, :func:`job_spec`) under the library's
:class:`~edgetune.tuning.TuningPolicy` (:func:`demo_policy`: its risk); the round's option tables
are the nodes' measurements (:func:`edgetune.demo.rounds.round_options`)."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np

from edgetune.base.mode import PowerMode
from edgetune.base.objective import Objective
from edgetune.base.records import Predictions, mode_key
from edgetune.base.roles import Role
from edgetune.demo.suite import Agent, NodeSpec, Suite
from edgetune.planning.planner import RoundPlan
from edgetune.powermodes.spec import DeviceSpec, Preset
from edgetune.profiling import ProfileProgress
from edgetune.store import MeasurementRecord, ProfileJob
from edgetune.tuning.jobs import NodePhase, NodeStatus, TuningJobSpec, TuningJobView, TuningMethod
from edgetune.tuning.policy import TuningPolicy, default_policy
from edgetune.tuning.protocols import ModelRef

RPC_TIMEOUT_S = 300.0
ROUND_NOTE = ("Round time = ceil(samples / batch) × measured minibatch time; plans choose among the modes "
              "measured on each node's agent (the job's profiles and verifications, the held-out checks, the "
              "applied configs), at their measured power, and compare with every node at its fastest of those. On these simulated Jetsons the fastest mode within a budget is nearly the "
              "least-energy one (race to idle), so the energy objective saves little: it slows only nodes off the "
              "critical path.")
REFERENCE_WORKLOAD = "resnet18"

ModeKey = tuple[int, float, float, float]
Tick = Callable[[str, int, int], None]  # (task name, done, total)


def key(mode: PowerMode) -> ModeKey:
    return (int(mode.cores), round(mode.cpu_mhz, 3), round(mode.gpu_mhz, 3), round(mode.emc_mhz, 3))


def label(mode: PowerMode) -> str:
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
    transfer_epochs: int = 0  # 0: the tuning policy's (TuningPolicy.transfer_epochs)
    gp_restarts: int = 0  # 0: the estimator's default
    seed: int = 0
    budget_change: tuple[str, float] = ("orin-2", 16.0)
    concurrent_node: str = "orin-1"
    concurrent: tuple[float, float] = (600.0, 40.0)  # latency budget ms, arrival rate rps
    infer_workload: str = "resnet18"


def demo_policy(options: Options) -> TuningPolicy:
    """The library's policy with the demo's schedule: ``modes`` random modes (no frontier rounds) and
    ``held_out`` more to check; risk, verification attempts and transfer method as the policy has them
    (the coordinator's reconcile loop runs the library's policy too)."""
    return default_policy().with_(n_initial=options.modes, rounds=0, held_out=options.held_out, seed=options.seed)


def job_name(options: Options) -> str:
    return f"demo-{options.workload}"


def job_spec(options: Options, policy: TuningPolicy, fleet: tuple[NodeSpec, ...]) -> TuningJobSpec:
    """The demo's one TuningJob: every node of the fleet, ``modes`` random profiles, at the policy's risk.
    Each node's budget is written in the job, so a later ``UpdateBudget`` is the round's to act on
    (the planned round re-plans), not the job's."""
    return TuningJobSpec(
        name=job_name(options), workload=options.workload, role=Role.TRAIN.value, batch_sizes=(options.batch_size,),
        nodes=tuple(n.node_id for n in fleet), objective=Objective.MIN_TIME,
        node_power_budget_w={n.node_id: n.budget_w for n in fleet}, risk=policy.risk, profiles=options.modes,
        method=TuningMethod.RANDOM)


@dataclass(frozen=True)
class Point:
    """A mode with its time and power: the coordinator's choice as predicted (``power_upper_w``: its
    safe bound) or as it measured it on the agent (what the report reads of a node's job status)."""

    mode: PowerMode
    time_ms: float
    power_w: float
    power_upper_w: float | None = None

    @property
    def energy_j(self) -> float:
        return energy_j(self.time_ms, self.power_w)


@dataclass
class NodeResult:
    node: NodeSpec
    spec: DeviceSpec | None = None
    address: str = ""
    backend: str = ""
    grid_modes: int = 0
    #: The job's points as stored (profiles and verifications), and the modes the demo measured itself.
    profiled: list[MeasurementRecord] = field(default_factory=list)
    held_out: list[MeasurementRecord] = field(default_factory=list)
    stored: int = 0
    #: The node's status in the demo's TuningJob (phase, choice, predicted and measured), as the coordinator reports it.
    status: NodeStatus | None = None
    #: RMS relative error of the job model's power on the held-out modes (the report's calibration column).
    power_rel_err: float = 0.0
    model: ModelRef | None = None
    #: The transferred model's predictions of every grid mode, and the optimizer's front of them
    #: (columns, as the columnar tables cross the wire).
    predictions: Predictions | None = None
    front: Predictions | None = None
    attempts: int = 0
    maxn: MeasurementRecord | None = None
    preset: MeasurementRecord | None = None
    preset_name: str = ""
    notes: list[str] = field(default_factory=list)
    #: Each applied round config measured on the agent: revision, mode, power, budget (the report's rows) ...
    config_checks: list[dict] = field(default_factory=list)
    #: ... and those measurements themselves, which join the node's round options.
    round_checks: list[MeasurementRecord] = field(default_factory=list)

    @property
    def device_spec(self) -> DeviceSpec:
        """The spec discovery found (GetDevice); the later steps need it."""
        if self.spec is None:
            raise RuntimeError(f"{self.node.node_id}: no device spec (discovery did not run)")
        return self.spec

    @property
    def model_ref(self) -> ModelRef:
        """The transferred model; the steps after estimation need it."""
        if self.model is None:
            raise RuntimeError(f"{self.node.node_id}: no model (estimation did not run)")
        return self.model

    def predicted(self) -> dict[ModeKey, int]:
        """Each predicted mode's row in :attr:`predictions`."""
        modes = self.predictions.modes if self.predictions is not None else np.empty((0, 4))
        return {mode_key(m): i for i, m in enumerate(modes.tolist())}

    @property
    def decision(self) -> Point | None:
        """The coordinator's choice for the node as predicted (its job status); None without one
        (the node failed, or nothing fits its budget: :attr:`decision_reason` says why)."""
        s = self.status
        if s is None or s.phase == NodePhase.FAILED or s.mode is None or s.predicted_time_ms is None \
                or s.predicted_power_w is None:
            return None
        return Point(as_mode(s.mode), s.predicted_time_ms, s.predicted_power_w, s.predicted_power_upper_w)

    @property
    def verified(self) -> Point | None:
        """The choice as the coordinator measured it on the agent before applying it."""
        s = self.status
        if s is None or s.measured_power_w is None or s.mode is None:
            return None
        return Point(as_mode(s.mode), s.measured_time_ms or 0.0, s.measured_power_w)

    @property
    def within_budget(self) -> bool:
        return self.verified is not None and self.verified.power_w <= self.node.budget_w


@dataclass
class RoundResult:
    label: str
    objective: str
    round_id: str
    plan: RoundPlan
    fastest_energy_j: float
    fastest_makespan_s: float
    deadline_s: float | None = None


@dataclass
class Story:
    suite: Suite
    options: Options
    fleet: tuple[NodeSpec, ...]
    nodes: dict[str, NodeResult] = field(default_factory=dict)
    references: dict[str, ModelRef] = field(default_factory=dict)
    rounds: list[RoundResult] = field(default_factory=list)
    budget_change: dict = field(default_factory=dict)
    concurrent: dict = field(default_factory=dict)
    round_id: str = ""  # the applied round
    #: The applied energy round's deadline (verification may extend it: see rounds.verify_configs).
    round_deadline_s: float | None = None
    #: Each node's power budget now (the budget change updates it).
    budgets: dict[str, float] = field(default_factory=dict)

    #: How every node is tuned (:func:`demo_policy`).
    policy: TuningPolicy | None = None
    #: The demo's TuningJob as it ended, and each node's last phase seen while watching it.
    job: TuningJobView | None = None
    job_phases: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.budgets = self.budgets or {n.node_id: n.budget_w for n in self.fleet}
        self.policy = self.policy or demo_policy(self.options)

    @property
    def tuning(self) -> TuningPolicy:
        assert self.policy is not None
        return self.policy

    def profile_job(self, modes: Iterable[PowerMode], *, seed: int, role: Role = Role.TRAIN,
                    workload: str | None = None, batch_size: int | None = None) -> ProfileJob:
        """A Profile of ``modes`` on an agent: the story's workload (or ``workload``) at its batch size."""
        return ProfileJob(workload or self.options.workload, role, modes=tuple(modes),
                          batch_sizes=(batch_size or self.options.batch_size,), seed=seed)

    def agent(self, node_id: str) -> Agent:
        return self.suite.agents[node_id]


# --- helpers ----------------------------------------------------------------------------------------
def profile(agent: Agent, job: ProfileJob, tick: Callable[[int, int], None] | None = None,
            ) -> list[MeasurementRecord]:
    """Run one Profile stream on an agent; measurements in order (skipped points are dropped)."""
    out = []
    for event in agent.profiler.profile(job, timeout_s=RPC_TIMEOUT_S):
        if isinstance(event, MeasurementRecord):
            out.append(event)
        elif isinstance(event, ProfileProgress) and tick is not None:
            tick(event.done, event.total)
    return out


def parallel(items: Iterable, fn: Callable, workers: int) -> list:
    with ThreadPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(fn, items))


def maxn_mode(spec: DeviceSpec) -> PowerMode:
    """Every core on and every clock at its top: the mode an operator runs when power is no object."""
    return PowerMode(max(spec.core_counts), max(spec.cpu_mhz), max(spec.gpu_mhz), max(spec.emc_mhz))


def operator_preset(spec: DeviceSpec, budget_w: float) -> Preset | None:
    """The nvpmodel preset an operator would pick for a budget: the largest nominal budget within it."""
    fitting = [(p.budget_w, p) for p in spec.presets if p.budget_w is not None and p.budget_w <= budget_w]
    return max(fitting, key=lambda bp: bp[0])[1] if fitting else None


def as_mode(mode: tuple[float, float, float, float]) -> PowerMode:
    """A job status's mode (a tuple of the four knobs) as a PowerMode."""
    return PowerMode(int(mode[0]), mode[1], mode[2], mode[3])


def mape_pct(pred: np.ndarray, true: np.ndarray) -> float:
    return float(np.mean(np.abs(pred - true) / np.abs(true)) * 100.0) if len(true) else math.nan
