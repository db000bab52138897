"""Online tuning inside the user's own training loop (Zeus-style: no separate profiling phase).

    from edgetune.online import OnlineTuner
    with OnlineTuner(device="sim:orin-agx", model=model, power_budget_w=20.0,
                     profiles=20, steps_per_profile=5, seed=0) as tuner:
        for step in range(n_steps):
            with tuner.step(batch_size=16):
                ...  # the user's own training step
        decision = tuner.decision()

The tuner is an explicit state machine driven by the user's steps:

``PROFILING``  each measurement *window* switches to one power mode and samples power from the
               switch on; it lets the first steps pass (``warmup_steps``) and waits until power has
               settled — the profiler's settle rule (:mod:`edgetune.profiling.settling`) on the
               samples: two consecutive ``settle_window_s`` windows agree within
               ``settle_tolerance`` — or ``settle_s`` seconds of the device's clock have passed (a
               Jetson's power takes up to 2-3 s to follow a DVFS switch; a small step settles
               sooner). Then it measures ``steps_per_profile`` steps: time per step, and power from
               the start of the rule's last window (the stretch found settled) over at least
               ``min_window_s``. The modes the workflow asks for at once are measured in order of
               predicted power, so each switch is a small step. Every step is the user's real training.
``SELECTING``  the shared node-tuning workflow (:class:`edgetune.tuning.NodeTuner`, the same
               :class:`~edgetune.tuning.TuningPolicy`, frontier rounds, calibrated safe selection
               and miss handling as ``edgetune tune`` and TuningJobs) transfers the reference
               predictor to the windows measured so far and asks for the next modes, or selects.
               It runs on a worker thread; the user's step waits for it (a transfer is seconds),
               so the measurements and the simulator's noise do not depend on thread timing.
``VERIFYING``  a window in the chosen mode, measured like a profile but after the expected step in
               power has decayed to :data:`VERIFY_TAIL_W` (at most :data:`VERIFY_SETTLE_FACTOR` ×
               ``settle_s``) and over at least :data:`VERIFY_WINDOW_S` (its one measurement accepts the choice
               against the budget) — or sooner, once the later half of its samples decides beyond their
               noise and the largest tail left (:data:`VERIFY_EARLY_Z`); its steps are timed from the
               warm-up on. Over its budget, the workflow
               learns from the miss and selects again (at most ``max_attempts`` choices).
``STEADY``     the verified mode is kept for the rest of the run; each step costs a timer read
               and a trace entry (``make bench``: ``online_tuner_step_overhead``).
``DONE``       the ``with`` block ended: the device is back in the mode it started in.
``FAILED``     the workflow raised or no mode fits the budget: the original mode is restored at
               once and training goes on in it; :meth:`OnlineTuner.decision` says why.

The original mode is restored on exit, on an exception in the loop, and on SIGINT / SIGTERM
(the handler restores first, then does what the previous handler did: ``KeyboardInterrupt`` for
SIGINT, ``SystemExit(143)`` for a default SIGTERM).

Step time: on a device with a real clock (a Jetson through sysfs) it is the wall time of the
step's body, with ``torch.cuda.synchronize()`` before and after when CUDA is available; on a
device with a virtual clock (the simulator, a replayed table) it is the device's costing of the
workload: for a ``torch.nn.Module`` the simulator's layer costing of that module
(:func:`edgetune.devices.simulated.profiles.profile_from_module`), so the loop runs end to end
without a Jetson. The workload's id names its measurements in the store (``store=``): the one
formula of :func:`edgetune.base.workload.workload_id`, ``NAME-HASH`` with the hash of the module's
structure and NAME the class name, or ``workload=`` (a ``MODULE:FUNCTION`` there gives the id the
CLI and the agents give that entry: ``models.make-HASH``).
"""

from __future__ import annotations

import collections
import functools
import inspect
import math
import queue
import signal
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

import numpy as np

from edgetune import validation
from edgetune.base.clocks import VirtualClock
from edgetune.base.mode import MODE_FIELDS, PowerMode
from edgetune.base.records import Decision, Points
from edgetune.base.roles import Role
from edgetune.base.workload import id_name, workload_id
from edgetune.devices.base import Device
from edgetune.devices.factory import open_device
from edgetune.devices.sampling import PowerSample, PowerSampler
from edgetune.devices.simulated.profiles import get_profile, profile_from_module, register_profile
from edgetune.devices.simulated.tables import truth_table
from edgetune.errors import InvalidArgument
from edgetune.localrun.controlplane import (
    REFERENCE_BATCH_SIZE,
    REFERENCE_EPOCHS,
    REFERENCE_POINTS,
    REFERENCE_WORKLOAD,
)
from edgetune.powermodes.grids import named_grid
from edgetune.powermodes.specs import get_spec
from edgetune.profiling.protocol import measurement_id
from edgetune.profiling.settling import SettleDetector, window_size
from edgetune.profiling.stats import mean_std, power_stats
from edgetune.store.records import MeasurementRecord
from edgetune.tables import points_table
from edgetune.tuning.policy import TuningPolicy, default_policy
from edgetune.tuning.protocols import ModelRef
from edgetune.tuning.tuner import NodeTuner

#: Mode grid the choice is made from (``candidates=`` overrides): Fulcrum's coarse grid, as TuningJobs use.
#: Finer grids measured worse with 20 profiles (experiments/online_tuning.py, 5 seeds): the full grid
#: 6-38 % from the best at 15 W and 6-59 % at 20 W (fulcrum: 1 % at 20 W), the powertrain grid 3-32 %
#: at 15 W — more modes whose predictions err fast. At 15 W fulcrum's best is 4.8 % off the full grid's.
DEFAULT_GRID = "fulcrum"
#: Most seconds of the device's clock a window waits after a switch for power to settle before it
#: measures anyway (PowerTrain: 2-3 s to settle); it measures as soon as the settle rule holds.
DEFAULT_SETTLE_S = 2.5
#: The settle rule (:mod:`edgetune.profiling.settling`): two consecutive windows of power samples
#: whose means differ by at most max(tolerance · mean, tolerance_w). A window must confirm a small
#: step in power within a second, and a budget is met to a tenth of a watt: 0.3 s windows of 15
#: samples (50 Hz) agreeing to 0.5 % (0.075 W at 15 W). On the simulated Orin (the 1-D CNN of
#: experiments/online_tuning.py) windows then waited 0.3-2 s and read power 0.15 W off the truth on
#: average (0.4 s windows: 0.13 W; 0.25 s at 1 %: 0.21 W; a fixed 2.5 s wait: 0.07 W, 3x the steps).
DEFAULT_SETTLE_WINDOW_S = 0.3
DEFAULT_SETTLE_TOLERANCE = 0.005
DEFAULT_SETTLE_TOLERANCE_W = 0.05
#: Least measured stretch of a window, so the sampler sees several samples of short steps.
DEFAULT_MIN_WINDOW_S = 0.5
#: A verification window waits (no settle rule: with the sensor's noise it can hold while a tail of
#: tenths of a watt remains) until the expected step in power has decayed to this (module docs), at most
#: this many ``settle_s``: after ``settle_s`` a 6.3 W step (the last profile at 13.7 W, the choice at
#: 20 W) still read 0.1 W low on the simulated Orin, enough to accept a choice drawing 20.045 W under a
#: 20 W budget; the tail of that step is 0.02 W after 3.6 s.
VERIFY_TAIL_W = 0.02
VERIFY_SETTLE_FACTOR = 2.0
#: Least measured stretch of a verification window: its mean power accepts or rejects the choice, so
#: it averages ~100 samples (a 0.5 s window's mean still erred by 0.05 W: a 20.045 W choice read < 20 W).
VERIFY_WINDOW_S = 2.0
#: A verification ends sooner when what it sampled already decides: the second half of the samples since
#: its switch (at least this many) puts the choice inside or outside the budget by more than
#: VERIFY_EARLY_Z standard errors of their mean plus the largest tail the settling above could still leave
#: in that half. A choice clearly inside its budget needs no 5 s to say so (experiments/online_tuning.py).
VERIFY_EARLY_MIN_SAMPLES = 25
VERIFY_EARLY_Z = 3.0
#: The tail is reckoned for a board this many times slower to settle than ``settle_s`` says (time constant
#: ``settle_s / 4`` times this): on any board at least that quick the early decision errs on the safe side.
VERIFY_EARLY_SLOW = 2.0
#: Most device-clock seconds between two such looks (a virtual-clock device runs that many steps a call).
VERIFY_EARLY_CHECK_S = 0.1
#: Power sampler rate during a window, settling included (an INA3221 read is cheap; the settle rule
#: needs many samples a window to tell a fading transient from the sensor's noise).
DEFAULT_SAMPLE_RATE_HZ = 50.0
#: Most steps a virtual-clock device runs in one call.
MAX_CHUNK = 256
#: Steps kept in the trace (a long run keeps its latest steps).
TRACE_LIMIT = 200_000
#: Budgets the frontier samples are spread over: [this × budget, budget] (as TuningJobs do).
POWER_RANGE_FRAC = 0.7


class State(str, Enum):  # noqa: UP042 - str() of members is the value
    PROFILING = "PROFILING"
    SELECTING = "SELECTING"
    VERIFYING = "VERIFYING"
    STEADY = "STEADY"
    DONE = "DONE"
    FAILED = "FAILED"


@dataclass(frozen=True)
class Window:
    """One measured window: ``steps`` steps in ``mode`` (after the steps that waited for power to settle)."""

    index: int
    purpose: str  # "profile" or "verify"
    mode: PowerMode
    batch_size: int
    first_step: int  # the step the window switched at
    steps: int  # measured steps
    time_ms: float
    time_std_ms: float
    power_w: float  # mean over the settled stretch (a verification its samples decided early: the level they imply)
    power_std_w: float
    peak_power_w: float
    samples: int
    settle_s: float  # device-clock seconds from the switch until it measured (settled, or settle_s)


@dataclass(frozen=True)
class StepRecord:
    """One step of the trace: its number, the tuner's state and mode then, and its time."""

    step: int
    state: str
    mode: tuple[float, ...]
    batch_size: int
    time_ms: float
    measured: bool  # inside a window's measured stretch


@dataclass(frozen=True)
class OnlineDecision:
    """What the tuner decided (:meth:`OnlineTuner.decision` gives it as a dict)."""

    state: str
    workload: str
    power_budget_w: float
    feasible: bool
    mode: PowerMode | None
    batch_size: int
    profiled: int  # windows measured for the transfer
    windows: int  # all windows, verification ones included
    predicted_time_ms: float | None
    predicted_power_w: float | None
    predicted_power_upper_w: float | None
    measured_time_ms: float | None
    measured_power_w: float | None
    attempts: int
    steady_steps: int
    steady_time_ms: float | None  # mean step time in the steady state
    reason: str = ""
    notes: tuple[str, ...] = field(default_factory=tuple)

    def to_dict(self) -> dict[str, Any]:
        return {
            "state": self.state, "workload": self.workload, "power_budget_w": self.power_budget_w,
            "feasible": self.feasible, "mode": None if self.mode is None else self.mode.as_dict(),
            "batch_size": self.batch_size, "profiled": self.profiled, "windows": self.windows,
            "predicted": {"time_ms": self.predicted_time_ms, "power_w": self.predicted_power_w,
                          "power_upper_w": self.predicted_power_upper_w},
            "measured": {"time_ms": self.measured_time_ms, "power_w": self.measured_power_w},
            "steady": {"steps": self.steady_steps, "time_ms": self.steady_time_ms},
            "attempts": self.attempts, "reason": self.reason, "notes": list(self.notes),
        }


def split_profiles(profiles: int, policy: TuningPolicy) -> TuningPolicy:
    """``policy`` spending ``profiles`` windows: the policy's random modes first (at most all of
    them), the rest in frontier rounds of the policy's size; a remainder joins the random ones."""
    n = validation.count(profiles, "profiles")
    n_initial = min(policy.n_initial, n)
    rest = n - n_initial
    per_round = min(policy.per_round, rest) if rest else policy.per_round
    rounds = rest // per_round if rest else 0
    return policy.with_(n_initial=n_initial + rest - rounds * per_round, rounds=rounds, per_round=per_round)


@functools.lru_cache(maxsize=8)
def simulated_reference(device: str, role: str = "train", epochs: int | None = None, seed: int = 0) -> Any:
    """The reference predictor of a simulated device model (a ``TimePowerModel``): the one
    ``edgetune up`` fits — the reference workload's truth on a sample of the device's modes —
    fitted once per process."""
    from edgetune.estimation.bundle import TimePowerModel  # deferred: torch, sklearn

    spec = get_spec(device)
    grid = named_grid(spec, "fulcrum").array()
    rng = np.random.default_rng(seed)
    grid = grid[np.sort(rng.choice(len(grid), min(REFERENCE_POINTS, len(grid)), replace=False))]
    rows = truth_table(spec, REFERENCE_WORKLOAD, role, grid, [REFERENCE_BATCH_SIZE])
    points = Points(grid, np.full(len(rows), REFERENCE_BATCH_SIZE), np.asarray([r["time_ms"] for r in rows]),
                    np.asarray([r["power_w"] for r in rows]), spec.name, REFERENCE_WORKLOAD, role)
    return TimePowerModel.fit_table(points_table(points), "nn", seed, epochs=epochs or REFERENCE_EPOCHS)


class _Cancelled(Exception):
    """The tuner closed while the workflow waited for measurements."""


@dataclass
class _Request:
    """Modes the workflow asked to measure; the user's steps measure them one window each."""

    modes: list[PowerMode]
    batch_size: int
    purpose: str
    expected_w: list[float] = field(default_factory=list)  # predicted power of each mode (the switch's size)
    windows: list[Window] = field(default_factory=list)
    done: threading.Event = field(default_factory=threading.Event)
    cancelled: bool = False


class _WindowMeasurer:
    """The workflow's :class:`~edgetune.tuning.protocols.Measurer`: hands the modes to the loop and
    waits until the user's steps have measured them (runs on the worker thread)."""

    def __init__(self, tuner: OnlineTuner) -> None:
        self.tuner = tuner

    def measure(self, modes: np.ndarray, batch_size: int, *, seed: int = 0, purpose: str = "profile") -> Points:
        arr = np.asarray(modes, dtype=float).reshape(-1, 4)
        order, expected_w = self._settling_order(arr, int(batch_size))
        req = _Request([PowerMode(int(m[0]), float(m[1]), float(m[2]), float(m[3])) for m in arr[order]],
                       int(batch_size), purpose, [float(expected_w[i]) for i in order])
        self.tuner._requests.put(req)
        req.done.wait()
        if req.cancelled:
            raise _Cancelled()
        w = req.windows
        return Points(np.asarray([x.mode.as_tuple() for x in w], dtype=float).reshape(-1, 4),
                      np.asarray([x.batch_size for x in w]), np.asarray([x.time_ms for x in w]),
                      np.asarray([x.power_w for x in w]), self.tuner.device.spec.name, self.tuner.workload,
                      self.tuner.role)

    def _settling_order(self, modes: np.ndarray, batch_size: int) -> tuple[np.ndarray, np.ndarray]:
        """The order to measure ``modes`` in, and their predicted power (the latest transfer's, else
        the reference's): by that power, from the end nearest the current mode's. Each switch is then
        a small step in power, which settles sooner and leaves less of the previous mode in a window."""
        nt = self.tuner.tuner
        current = np.asarray(self.tuner.device.current_mode().as_tuple(), dtype=float).reshape(1, 4)
        power_w = nt.estimator.predict(nt.model or nt.base, np.vstack([modes, current]), batch_size).power_w
        order = np.argsort(power_w[:-1], kind="stable")
        if abs(power_w[order[-1]] - power_w[-1]) < abs(power_w[order[0]] - power_w[-1]):
            order = order[::-1]
        return order, np.asarray(power_w[:-1], dtype=float)


class OnlineTuner:
    """Tunes the power mode while the user's loop trains (module docstring).

    ``device``: a :class:`~edgetune.devices.base.Device`, or a string of the CLI's forms
    (``sim:<name>``, ``sysfs[:ROOT]``, ``replay:FILE.csv``; opened with ``seed`` and closed on exit).
    ``model``: the ``torch.nn.Module`` being trained, or a zoo workload name. ``make_batch``:
    ``make_batch(batch_size) -> (inputs, targets)`` for the simulator's costing and the workload
    id; without it the inputs of the model's first forward call are used. ``reference``: the
    predictor to transfer (a ``TimePowerModel`` or a file of one); on a simulated device the
    default is :func:`simulated_reference`. ``candidates``: a grid name of the device's spec or an
    ``(n, 4)`` array of modes. ``store`` (a :class:`~edgetune.store.base.Store`)
    receives every window as a measurement of the workload's id (``node_id`` when given).
    ``on_window(window)`` sees each window when it is measured.
    """

    def __init__(self, device: Device | str, model: Any, power_budget_w: float, *, profiles: int = 20,
                 steps_per_profile: int = 5, seed: int = 0, role: str = "train", make_batch: Callable | None = None,
                 workload: str | None = None, reference: Any = None, candidates: str | np.ndarray = DEFAULT_GRID,
                 risk: float | None = None, policy: TuningPolicy | None = None, transfer_epochs: int | None = None,
                 warmup_steps: int = 1, settle_s: float = DEFAULT_SETTLE_S,
                 settle_window_s: float = DEFAULT_SETTLE_WINDOW_S, settle_tolerance: float = DEFAULT_SETTLE_TOLERANCE,
                 settle_tolerance_w: float = DEFAULT_SETTLE_TOLERANCE_W,
                 min_window_s: float = DEFAULT_MIN_WINDOW_S, sample_rate_hz: float = DEFAULT_SAMPLE_RATE_HZ,
                 store: Any = None, node_id: str | None = None, handle_signals: bool = True,
                 on_window: Callable[[Window], None] | None = None) -> None:
        self.power_budget_w = validation.power_budget_w(power_budget_w, "power_budget_w")
        self.steps_per_profile = validation.count(steps_per_profile, "steps_per_profile")
        self.role = Role.parse(role).value
        base = policy or default_policy()
        self.policy = split_profiles(profiles, base.with_(seed=int(seed), **({} if risk is None else {"risk": risk})))
        if isinstance(warmup_steps, bool) or not isinstance(warmup_steps, int) or warmup_steps < 0:
            raise InvalidArgument("warmup_steps", f"{warmup_steps!r} is not an integer >= 0", ">= 0")
        for name, value in (("settle_s", settle_s), ("min_window_s", min_window_s),
                            ("settle_tolerance", settle_tolerance), ("settle_tolerance_w", settle_tolerance_w)):
            if not (isinstance(value, int | float) and math.isfinite(value) and value >= 0):
                raise InvalidArgument(name, f"{value!r} is not a number >= 0", ">= 0")
        self.sample_rate_hz = validation.sample_rate_hz(sample_rate_hz)
        self._settle_per_window = window_size(settle_window_s, self.sample_rate_hz)
        self.settle_tolerance, self.settle_tolerance_w = float(settle_tolerance), float(settle_tolerance_w)
        if not isinstance(model, str) and not callable(getattr(model, "forward", None)):
            raise InvalidArgument("model", f"{type(model).__name__} is neither a torch.nn.Module nor a workload name",
                                  "a torch.nn.Module or a zoo workload name")
        if make_batch is not None and not callable(make_batch):
            raise InvalidArgument("make_batch", "is not callable", "make_batch(batch_size) -> (inputs, targets)")
        if workload is not None:  # the id's name part: checked now, not at the first step
            id_name(workload)
        self.warmup_steps, self.settle_s, self.min_window_s = warmup_steps, float(settle_s), float(min_window_s)
        self.seed = int(seed)
        self.model, self.make_batch, self._name = model, make_batch, workload
        self.transfer_epochs = transfer_epochs
        self.store, self.node_id, self.handle_signals, self.on_window = store, node_id, handle_signals, on_window
        self._reference, self._candidates_arg = reference, candidates
        if isinstance(device, str):
            self.device: Device = open_device(device, seed=self.seed)
            self._owns_device = True
        elif isinstance(device, Device):
            self.device, self._owns_device = device, False
        else:
            raise InvalidArgument("device", f"{type(device).__name__} is not a device", "a Device or a device string")
        if reference is None and self.device.backend != "sim":
            raise InvalidArgument("reference", f"no reference predictor for a {self.device.backend} device",
                                  "a TimePowerModel or its file (edgetune estimate fit)")
        self._virtual = isinstance(self.device.clock, VirtualClock)
        self._run_takes_warmup = "warmup" in _parameters(self.device.run)
        self.candidates = self._candidate_modes(candidates)
        self.state = State.PROFILING
        self.workload = model if isinstance(model, str) else ""
        self.batch_size = 0
        self.windows: list[Window] = []
        self._trace: collections.deque[tuple[int, str, tuple[float, ...], int, float, bool]] = collections.deque(
            maxlen=TRACE_LIMIT)
        self._steps = 0
        self._requests: queue.Queue[_Request] = queue.Queue()
        self._worker: threading.Thread | None = None
        self._worker_done = threading.Event()
        self._outcome: Decision | None = None
        self._error: BaseException | None = None
        self._request: _Request | None = None
        self._slot = 0  # mode of the request being measured
        self._window_steps = 0  # steps of the current window so far (settling + measured)
        self._switch_t = 0.0
        self._measured_ms: list[float] = []
        self._sampler: PowerSampler | None = None  # the window's: from the switch to the window's end
        self._detector: SettleDetector | None = None  # the settle rule over the window's samples
        self._measuring = False
        self._measure_t0 = 0.0  # the window's timed steps start here
        self._power_t0 = 0.0  # its power stretch starts here: the settle rule's last window, or now
        self._sample_times: collections.deque[float] = collections.deque()
        self._verify_samples: list[PowerSample] = []  # a verification's samples so far (its early look)
        self._early_level_w: float | None = None  # the level an early-decided verification's samples imply
        self._original: PowerMode | None = None
        self._restored = True
        self._previous_handlers: dict[int, Any] = {}
        self._captured: Any = None
        self._hook: Any = None
        self._steady_ms = 0.0
        self._steady_steps = 0
        self._sync = _cuda_sync() if not self._virtual else None
        self._buffer: list[float] = []  # a virtual-clock device's steps already run, last first
        self._buffer_bs = 0
        self._last_ms = 0.0
        self._mode_tuple: tuple[float, ...] = ()  # the mode last applied (the trace's)
        self.tuner: Any = None  # the NodeTuner, once the first step gave the batch size

    # -- the context ------------------------------------------------------------------------------
    def __enter__(self) -> OnlineTuner:
        self._original = self.device.current_mode()
        self._mode_tuple = self._original.as_tuple()
        self._restored = False
        if self.handle_signals and threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._previous_handlers[sig] = signal.getsignal(sig)
                signal.signal(sig, self._on_signal)
        if not isinstance(self.model, str) and self.make_batch is None:
            self._hook = self.model.register_forward_pre_hook(self._capture)
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop tuning and put the device back in its original mode (safe to call twice)."""
        for sig, handler in self._previous_handlers.items():
            signal.signal(sig, handler)
        self._previous_handlers.clear()
        if self._hook is not None:
            self._hook.remove()
            self._hook = None
        self._stop_sampler()
        self._cancel_worker()
        self._restore()
        if self.state is not State.FAILED:
            self.state = State.DONE
        if self._owns_device:
            self.device.close()

    def _on_signal(self, signum: int, frame: Any) -> None:
        self._restore()  # first: whatever the previous handler does, the device is safe
        self._stop_sampler()
        self._cancel_worker()
        self.state = State.DONE  # the loop may go on (a handler that returns): it trains untuned
        previous = self._previous_handlers.get(signum)
        if callable(previous):
            previous(signum, frame)
        elif signum == signal.SIGINT and previous != signal.SIG_IGN:
            raise KeyboardInterrupt
        elif previous != signal.SIG_IGN:
            raise SystemExit(128 + signum)

    def _restore(self) -> None:
        if self._restored or self._original is None:
            return
        self._restored = True
        self._apply(self._original)

    # -- one step ---------------------------------------------------------------------------------
    @contextmanager
    def step(self, batch_size: int) -> Iterator[None]:
        """Bracket one training step of ``batch_size`` samples (module docstring)."""
        if self._steady_fast(batch_size):
            sync = self._sync
            if sync is not None:
                sync()
            t0 = time.perf_counter()
            yield
            if sync is not None:
                sync()
            self._record_steady((time.perf_counter() - t0) * 1000.0)
            return
        self._before(batch_size)
        t0 = time.perf_counter()
        if self._sync is not None:
            self._sync()
        yield
        if self._sync is not None:
            self._sync()
        wall_ms = (time.perf_counter() - t0) * 1000.0
        self._after(batch_size, wall_ms)

    def _steady_fast(self, batch_size: int) -> bool:
        return self.state is State.STEADY and not self._virtual and batch_size == self.batch_size

    def _record_steady(self, time_ms: float) -> None:
        self._trace.append((self._steps, "STEADY", self._mode_tuple, self.batch_size, time_ms, False))
        self._steps += 1
        self._steady_ms += time_ms
        self._steady_steps += 1

    def _before(self, batch_size: int) -> None:
        validation.batch_size(batch_size)
        if self.batch_size == 0 or self.state not in (State.PROFILING, State.SELECTING, State.VERIFYING):
            return  # the first step (it tells the batch size), or no longer tuning
        if batch_size != self.batch_size:  # trained, not measured: the tuner tunes the first step's batch size
            if self._sampler is not None:  # another batch size draws other power: the window settles again
                self._stop_sampler()
                self._measured_ms = []
            return
        if self._request is None:
            self._next_request()
        if self._request is None or self._buffer:  # a virtual device's phase changes between its calls only
            return
        if self._sampler is None:  # back from steps of another batch size
            self._start_settling()
        if not self._measuring and self._window_steps >= self.warmup_steps and self._settled():
            self._start_measuring()

    def _after(self, batch_size: int, wall_ms: float) -> None:
        first = self._steps == 0
        if self._virtual:
            time_ms = self._device_step_ms(batch_size, first)
        else:
            time_ms = wall_ms
        measuring = self._measuring and batch_size == self.batch_size
        self._trace.append((self._steps, self.state.value, self._mode_tuple, batch_size, time_ms, measuring))
        self._steps += 1
        if self.state in (State.DONE, State.FAILED):
            return
        if self.state is State.STEADY:
            self._steady_ms += time_ms
            self._steady_steps += 1
            return
        if first:
            self._start_workflow(batch_size)
            return
        if self._request is None or batch_size != self.batch_size:
            return
        self._window_steps += 1
        if measuring:
            self._measured_ms.append(time_ms)
            if len(self._measured_ms) < self.steps_per_profile or self._buffer:
                return
            long_enough = self.device.clock.now_s() - self._power_t0 >= self._window_s() - 1e-9
            if long_enough or self._decided_early():
                self._finish_window()

    def _apply(self, mode: PowerMode) -> None:
        """Switch (when not already there) and remember the mode: reading it back costs sysfs reads."""
        if self.device.current_mode() != mode:
            mode = self.device.apply(mode)
        self._mode_tuple = mode.as_tuple()

    def _device_step_ms(self, batch_size: int, first: bool) -> float:
        """The step's time on a virtual-clock device. The device runs a phase's steps in one call
        (settling, measuring, steady: one model evaluation, not one per step) and hands them out one
        a step; phases change only between calls, so a window measures exactly its own steps."""
        if self.workload == "":
            self._register_workload(batch_size)
        if self._buffer and self._buffer_bs == batch_size:
            return self._buffer.pop()
        self._buffer = []  # another batch size: its time already passed on the device's clock
        kw = {"warmup": first} if self._run_takes_warmup else {}
        n = 1 if first else self._chunk(batch_size)
        times = [float(t) for t in self.device.run(self.workload, self.role, batch_size, n, **kw)]
        self._last_ms = sum(times) / len(times)
        self._buffer, self._buffer_bs = times[:0:-1], batch_size
        return times[0]

    def _chunk(self, batch_size: int) -> int:
        """Steps the next device call runs: what the current phase still needs (estimated from the
        last step times), at least one, at most :data:`MAX_CHUNK`."""
        est_ms = max(self._last_ms, 1e-3)
        now = self.device.clock.now_s()
        if self.state is State.STEADY:
            return MAX_CHUNK
        if self._request is None or batch_size != self.batch_size:
            return 1
        if self._measuring:
            left_s = self._window_s() - (now - self._power_t0)
            if self._verifying():  # look again soon: the samples may decide before the full window
                left_s = min(left_s, VERIFY_EARLY_CHECK_S)
            n = max(self.steps_per_profile - len(self._measured_ms), math.ceil(left_s * 1000.0 / est_ms))
        else:  # settling: one sample period at a time, so the rule sees each new sample when it comes
            left_s = min(1.0 / self.sample_rate_hz, self.settle_s - (now - self._switch_t))
            n = max(self.warmup_steps - self._window_steps, math.ceil(left_s * 1000.0 / est_ms))
        return int(min(max(n, 1), MAX_CHUNK))

    # -- windows ----------------------------------------------------------------------------------
    def _next_request(self) -> None:
        """Wait for the workflow's next modes (a transfer is running) or its outcome."""
        self.state = State.SELECTING
        while True:
            try:
                req = self._requests.get(timeout=0.05)
            except queue.Empty:
                if self._worker_done.is_set() and self._requests.empty():
                    self._settle_outcome()
                    return
                continue
            self._request, self._slot = req, 0
            self.state = State.VERIFYING if req.purpose == "verify" else State.PROFILING
            self._switch_to(req.modes[0])
            return

    def _switch_to(self, mode: PowerMode) -> None:
        self._stop_sampler()
        self._apply(mode)
        self._window_steps = 0
        self._start_settling()

    def _start_settling(self) -> None:
        """Sample from now on; the window measures once the settle rule holds on these samples."""
        self._switch_t = self.device.clock.now_s()
        self._measured_ms = []
        self._measuring = False
        self._detector = SettleDetector(self._settle_per_window, self.settle_tolerance, self.settle_tolerance_w)
        self._sample_times = collections.deque(maxlen=self._settle_per_window)
        self._verify_samples = []
        self._early_level_w = None
        self._power_t0 = math.inf
        self._sampler = self.device.sampler(self.sample_rate_hz)
        self._sampler.start()

    def _verify_wait_s(self) -> float:
        """How long a verification waits after its switch: until an exponential settling (time constant
        ``settle_s / 4``: a step is within ~2 % after ``settle_s``) of the expected step in power — the
        choice's predicted power against the last window's measured one — is within
        :data:`VERIFY_TAIL_W`; at most :data:`VERIFY_SETTLE_FACTOR` × ``settle_s``."""
        most_s = VERIFY_SETTLE_FACTOR * self.settle_s
        step_w = self._expected_step_w()
        if math.isinf(step_w):
            return most_s
        return min(most_s, self.settle_s / 4.0 * math.log(max(step_w / VERIFY_TAIL_W, 1.0)))

    def _expected_step_w(self) -> float:
        """The step in power a verification's switch is expected to make: the choice's predicted power
        against the last window's measured one (unknown before any window: infinite)."""
        req = self._request
        if req is None or not self.windows or self._slot >= len(req.expected_w):
            return math.inf
        return abs(req.expected_w[self._slot] - self.windows[-1].power_w)

    def _verifying(self) -> bool:
        return self._request is not None and self._request.purpose == "verify"

    def _window_s(self) -> float:
        """Least measured stretch of the current window: a verification's is longer (its mean decides)."""
        return max(self.min_window_s, VERIFY_WINDOW_S) if self._verifying() else self.min_window_s

    def _decided_early(self) -> bool:
        """A verification whose later half of samples since the switch puts the choice inside or outside
        the budget by more than :data:`VERIFY_EARLY_Z` standard errors plus the tail an exponential
        settling still leaves in that half — reckoned with a time constant :data:`VERIFY_EARLY_SLOW` times
        ``settle_s / 4`` and only once that much time has passed in the later half. The step the tail
        decays from is the larger of the expected one and the one the samples imply (the prediction may be
        what is wrong). The window then reports the level its samples imply for a board that settles as
        ``settle_s`` says (their mean plus that board's smaller tail): between the mean and the slow
        board's level, so on the same side of the budget as both — the truth's side on any board that
        settles no slower."""
        if not self._verifying() or self._sampler is None or not self.windows:
            return False
        self._verify_samples.extend(self._sampler.poll())
        half_s = (self.device.clock.now_s() - self._switch_t) / 2.0
        tau_s = VERIFY_EARLY_SLOW * self.settle_s / 4.0
        start_t = self._switch_t + half_s
        if half_s < tau_s or start_t >= self._power_t0:
            return False  # too soon to trust the model, or the full window's stretch has begun: it decides
        later = [x.power_w for x in self._verify_samples if x.t_s >= start_t]
        if len(later) < VERIFY_EARLY_MIN_SAMPLES:
            return False
        mean_w, std_w = mean_std(later)
        moved_w = mean_w - self.windows[-1].power_w
        left = _tail_share(half_s, tau_s)
        step_w = max(self._expected_step_w(), abs(moved_w) / (1.0 - left))  # expected, or what the samples imply
        margin_w = step_w * left + VERIFY_EARLY_Z * std_w / math.sqrt(len(later))
        if abs(mean_w - self.power_budget_w) <= margin_w:
            return False
        self._power_t0 = start_t
        nominal = _tail_share(half_s, self.settle_s / 4.0)  # the level for a board that settles as settle_s says
        self._early_level_w = mean_w + moved_w / (1.0 - nominal) * nominal
        return True

    def _settled(self) -> bool:
        """The settle rule holds on the samples since the switch, or ``settle_s`` has passed. Power
        is measured from the start of the rule's last window (the stretch it found settled).

        A verification times its steps from the warm-up on; its power stretch starts once the expected
        step's tail has decayed (:meth:`_verify_wait_s`, no settle rule: its one measured power accepts or
        rejects the choice against the budget, and the rule can hold while a large step's tail still biases
        the mean by tenths of a watt — a 20 W choice read 19.63 W, truly 20.05 W; a profile's error is one
        point among many in a fit, a verification's is the decision), unless its samples decide sooner
        (:meth:`_decided_early`)."""
        assert self._sampler is not None and self._detector is not None
        if self._verifying():
            self._verify_samples.extend(self._sampler.poll())
            self._power_t0 = self._switch_t + self._verify_wait_s()
            return True
        for sample in self._sampler.poll():
            self._sample_times.append(sample.t_s)
            if self._detector.add(sample.power_w):
                self._power_t0 = self._sample_times[-self._settle_per_window]
                return True
        if self.device.clock.now_s() - self._switch_t >= self.settle_s - 1e-9:
            self._power_t0 = self.device.clock.now_s()
            return True
        return False

    def _start_measuring(self) -> None:
        self._measuring = True
        self._measure_t0 = self.device.clock.now_s()

    def _stop_sampler(self) -> list:
        sampler, self._sampler = self._sampler, None
        self._measuring = False
        return sampler.stop() if sampler is not None else []

    def _finish_window(self) -> None:
        req = self._request
        assert req is not None
        t1 = self.device.clock.now_s()
        samples = self._stop_sampler()
        power = power_stats(samples, self._power_t0, t1)  # the settled stretch only
        power_w = power.power_w if self._early_level_w is None else self._early_level_w
        mean_ms, std_ms = mean_std(self._measured_ms)
        window = Window(len(self.windows), req.purpose, self.device.current_mode(), self.batch_size,
                        self._steps - self._window_steps, len(self._measured_ms), mean_ms, std_ms, power_w,
                        power.power_std_w, power.peak_power_w, power.samples, self._power_t0 - self._switch_t)
        self.windows.append(window)
        req.windows.append(window)
        self._store(window)
        if self.on_window is not None:
            self.on_window(window)
        self._slot += 1
        if self._slot < len(req.modes):
            self._switch_to(req.modes[self._slot])
            return
        self._request = None
        self._window_steps = 0
        req.done.set()  # the workflow goes on (transfer, or select) while the next step waits

    def _store(self, w: Window) -> None:
        if self.store is None:
            return

        device = self.device.spec.name
        run_key = f"online-{self.seed}-{w.index}"
        self.store.put_measurement(MeasurementRecord(
            measurement_id(device, self.node_id or "", self.workload, self.role, w.mode, w.batch_size, run_key),
            device, self.workload, self.role, w.mode, w.batch_size, w.time_ms, w.power_w, self.node_id,
            {"time_std_ms": w.time_std_ms, "power_std_w": w.power_std_w, "peak_power_w": w.peak_power_w,
             "samples": w.samples, "n_minibatches": w.steps, "purpose": w.purpose, "source": "online"}))

    # -- the workflow -----------------------------------------------------------------------------
    def _register_workload(self, batch_size: int) -> None:
        """The module's id and, on the simulator, its layer-costed profile (registered once)."""
        from edgetune.workloads.user import structure_hash  # imports torch: only for a module

        inputs = self._sample_inputs(batch_size)
        self.workload = workload_id(self._name or type(self.model).__name__, structure_hash(self.model, inputs))
        if self._virtual and hasattr(self.device, "true_time_ms"):
            try:
                get_profile(self.workload)
            except InvalidArgument:
                make_batch = self.make_batch or (lambda b: (_resized(inputs, b), None))
                register_profile(profile_from_module(self.model, make_batch, name=self.workload))

    def _sample_inputs(self, batch_size: int) -> Any:
        if self.make_batch is not None:
            inputs, _ = self.make_batch(batch_size)
            return inputs
        if self._captured is None:
            raise InvalidArgument("make_batch", f"{type(self.model).__name__} was not called in the first step, "
                                  "so its inputs are unknown", "make_batch(batch_size) -> (inputs, targets)")
        return self._captured

    def _capture(self, module: Any, args: tuple) -> None:
        if self._captured is None:
            self._captured = args[0] if len(args) == 1 else tuple(args)
        if self._hook is not None:
            self._hook.remove()
            self._hook = None

    def _candidate_modes(self, candidates: str | np.ndarray) -> np.ndarray:
        if isinstance(candidates, str):
            return named_grid(self.device.spec, candidates).array()
        arr = np.asarray(candidates, dtype=float)
        if arr.ndim != 2 or arr.shape[1] != len(MODE_FIELDS) or not len(arr):
            raise InvalidArgument("candidates", f"an array of shape {arr.shape}", "(n, 4): cores, cpu, gpu, emc MHz")
        for row in arr:
            self.device.spec.validate(PowerMode(int(row[0]), float(row[1]), float(row[2]), float(row[3])))
        return arr

    def _reference_model(self) -> Any:
        from edgetune.estimation.bundle import TimePowerModel  # deferred: torch, sklearn

        ref = self._reference
        if ref is None:  # a simulated device (checked when constructed)
            return simulated_reference(self.device.spec.name, self.role)
        if isinstance(ref, str | Path):
            return TimePowerModel.load(str(ref))
        return ref

    def _start_workflow(self, batch_size: int) -> None:
        from edgetune.tuning.local import LibraryEstimator, LibrarySelector  # deferred: torch, sklearn

        self.batch_size = batch_size
        if self.workload == "":
            self._register_workload(batch_size)
        estimator = LibraryEstimator()
        base = self._reference_model()
        base_ref: ModelRef = estimator.add(base, "reference")
        self.tuner = NodeTuner(self.policy, _WindowMeasurer(self), estimator, LibrarySelector(), base=base_ref,
                               candidates=self.candidates, batch_size=batch_size, device=self.device.spec.name,
                               workload=self.workload, role=self.role, model_id=f"online-{self.workload}",
                               power_range_w=(POWER_RANGE_FRAC * self.power_budget_w, self.power_budget_w),
                               transfer_epochs=self.transfer_epochs)
        self._worker = threading.Thread(target=self._work, name="edgetune-online-tuner", daemon=True)
        self._worker.start()

    def _work(self) -> None:
        try:
            tuner = self.tuner
            tuner.profile_initial()
            tuner.explore()
            self._outcome = tuner.select_and_verify(self.power_budget_w)
        except _Cancelled:
            pass
        except BaseException as exc:  # noqa: BLE001 - reported by decision(); training goes on
            self._error = exc
        finally:
            self._worker_done.set()

    def _settle_outcome(self) -> None:
        """The workflow ended: keep the verified choice, or restore the original mode."""
        d = self._outcome
        if d is not None and d.feasible and d.within_budget and d.mode is not None:
            self._apply(PowerMode(int(d.mode[0]), d.mode[1], d.mode[2], d.mode[3]))
            self.state = State.STEADY
            return
        self.state = State.FAILED
        if self._original is not None:
            self._apply(self._original)

    def _cancel_worker(self) -> None:
        while True:
            try:
                req = self._requests.get_nowait()
            except queue.Empty:
                break
            req.cancelled = True
            req.done.set()
        if self._request is not None:
            self._request.cancelled = True
            self._request.done.set()
            self._request = None
        # the workflow may be inside a transfer: it sees the cancellation at its next measurement
        if self._worker is not None and self._worker.is_alive():
            self._worker.join(timeout=0.5)
            while True:  # a request posted during the join
                try:
                    req = self._requests.get_nowait()
                except queue.Empty:
                    break
                req.cancelled = True
                req.done.set()

    # -- results ----------------------------------------------------------------------------------
    def decision(self) -> dict[str, Any]:
        """The decision as a dict: ``mode``, ``batch_size``, ``profiled``, ``predicted`` and ``measured``
        time / power, and the state, workload, attempts, steady-state step time and why (if failed)."""
        return self.result().to_dict()

    def result(self) -> OnlineDecision:
        d = self._outcome
        reason = ""
        if self._error is not None:
            reason = f"{type(self._error).__name__}: {self._error}"
        elif d is not None and not (d.feasible and d.within_budget):
            reason = d.reason or "; ".join(d.notes) or "measured over budget"
        elif d is None:
            reason = f"still {self.state.value.lower()}: {len(self.windows)} window(s) measured"
        ok = d is not None and d.feasible and d.within_budget and self._error is None
        mode = PowerMode(int(d.mode[0]), d.mode[1], d.mode[2], d.mode[3]) if ok and d and d.mode else None
        profiled = sum(w.purpose == "profile" for w in self.windows)
        steady = self._steady_ms / self._steady_steps if self._steady_steps else None
        return OnlineDecision(
            self.state.value, self.workload, self.power_budget_w, ok, mode, self.batch_size, profiled,
            len(self.windows), d.predicted_time_ms if d else None, d.predicted_power_w if d else None,
            d.power_upper_w if d else None, d.measured_time_ms if d else None, d.measured_power_w if d else None,
            d.attempts if d else 0, self._steady_steps, steady, reason, d.notes if d else ())

    def trace(self) -> list[StepRecord]:
        """Every step (the latest :data:`TRACE_LIMIT`): number, state, mode, batch size, time."""
        return [StepRecord(*row) for row in self._trace]

    def trace_rows(self) -> list[dict[str, Any]]:
        return [asdict(r) for r in self.trace()]


def _tail_share(half_s: float, tau_s: float) -> float:
    """The share of a power step still in the mean over [h, 2h] after the switch, for an exponential
    settling with time constant ``tau_s``: (1/h) ∫_h^2h e^(-t/tau) dt."""
    if tau_s <= 0:
        return 0.0
    return tau_s / half_s * (math.exp(-half_s / tau_s) - math.exp(-2 * half_s / tau_s))


def _parameters(fn: Callable) -> Sequence[str]:
    try:
        return list(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        return []


def _cuda_sync() -> Callable[[], None] | None:
    """``torch.cuda.synchronize`` when CUDA is there (a step's kernels finish inside its time)."""
    try:
        import torch  # deferred: torch
    except ImportError:
        return None
    return torch.cuda.synchronize if torch.cuda.is_available() else None


def _resized(inputs: Any, batch_size: int) -> Any:
    """Zeros shaped like ``inputs`` with ``batch_size`` rows (the simulator costs shapes only)."""
    import torch  # deferred: torch

    if isinstance(inputs, tuple | list):
        return tuple(_resized(t, batch_size) for t in inputs)
    return torch.zeros((batch_size, *inputs.shape[1:]), dtype=inputs.dtype)


__all__ = ["DEFAULT_GRID", "OnlineDecision", "OnlineTuner", "State", "StepRecord", "Window", "simulated_reference",
           "split_profiles"]
