"""The Device interface every backend implements, its power sensors and samplers.

A backend answers five questions: what it is (``spec``), which mode it is in
(``current_mode``), how to switch (``apply`` — validated first), how long minibatches take
(``run``), and how much power it draws (``power_sensor`` / ``sampler``). The profiling
protocol is written once against this interface; only the backend changes between a real
Jetson (``SysfsJetson``), the physical model (``SimulatedJetson``) and a recorded table
(``ReplayDevice``).

Each device keeps a clock (:mod:`edgetune.base.clocks`): real time on a board, virtual time that
``run`` and ``settle`` advance on a simulated or replayed one.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

from edgetune.base.clocks import Clock
from edgetune.base.mode import PowerMode
from edgetune.base.roles import Role
from edgetune.errors import EdgetuneError, InvalidArgument
from edgetune.powermodes.spec import DeviceSpec
from edgetune.telemetry.sample import Clocks, TelemetrySample


# --- power ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class PowerSample:
    t_s: float  # on the device's clock
    power_w: float  # total board / module power
    rails_w: dict[str, float] | None = None  # per rail (VDD_GPU_SOC, VDD_CPU_CV, ...) when known


class PowerSensor(ABC):
    """Instantaneous power, as INA3221 / jtop report it."""

    @abstractmethod
    def read_w(self) -> float:
        """Total power now (W)."""

    def rails_w(self) -> dict[str, float]:
        """Per-rail power now (W); empty when the sensor has only a total."""
        return {}


class PowerSampler(ABC):
    """Collects power samples at a fixed rate while a workload runs.

    ``start()`` before the minibatches, ``stop()`` after; ``stop`` returns the samples taken
    in between (the first at the start instant). Real devices sample from a thread
    (``edgetune.devices.sampling.ThreadedSampler``); virtual-clock devices produce the
    samples their sensor would have given at those instants.
    """

    def __init__(self, rate_hz: float) -> None:
        if rate_hz <= 0:
            raise InvalidArgument("sample_rate_hz", f"{rate_hz} must be positive", "> 0")
        self.rate_hz = rate_hz

    @abstractmethod
    def start(self) -> None: ...

    @abstractmethod
    def stop(self) -> list[PowerSample]: ...


# --- the device -----------------------------------------------------------------------------
@dataclass(frozen=True)
class DeviceInfo:
    """A device as its node's agent describes it: the discovered ``spec``, the ``backend``
    (``sysfs``, ``sim``, ``replay``), the mode it is in, the workloads it runs, its power rails
    (empty without a power monitor) and the node id the agent records measurements under."""

    spec: DeviceSpec
    backend: str
    current_mode: PowerMode
    workloads: tuple[str, ...] = ()
    power_rails: tuple[str, ...] = ()
    node_id: str = ""


class Device(ABC):
    """A Jetson (real, simulated or replayed) that runs minibatches in a power mode."""

    #: Short backend name used in tables and logs: "sysfs", "sim", "replay".
    backend: str = ""

    @property
    @abstractmethod
    def spec(self) -> DeviceSpec: ...

    @property
    @abstractmethod
    def clock(self) -> Clock: ...

    @abstractmethod
    def current_mode(self) -> PowerMode: ...

    @abstractmethod
    def apply(self, mode: PowerMode) -> PowerMode:
        """Validate ``mode`` against ``spec`` and switch to it; return the mode as applied.

        Raises ``InvalidArgument`` (nothing changed) for a mode outside the tables.
        """

    @abstractmethod
    def run(self, workload: str, role: Role | str, batch_size: int, n_minibatches: int) -> list[float]:
        """Run ``n_minibatches`` of ``workload`` and return each one's time in ms."""

    @abstractmethod
    def power_sensor(self) -> PowerSensor: ...

    def sampler(self, rate_hz: float = 1.0) -> PowerSampler:
        """A sampler at ``rate_hz``; real devices sample from a thread on the real clock."""
        from edgetune.devices.sampling import ThreadedSampler

        return ThreadedSampler(self.power_sensor(), self.clock, rate_hz)

    def telemetry(self) -> TelemetrySample:
        """One reading of power, rails, temperatures, clocks and throttling (:mod:`edgetune.telemetry`).

        This default knows the power sensor and the current mode only: no thermal zones and no
        pinned clocks, so it never reports throttling. Backends that see more override it.
        """
        mode = self.current_mode()
        power_w: float | None = None
        rails: dict[str, float] = {}
        try:
            sensor = self.power_sensor()
            both = getattr(sensor, "read_total_and_rails", None)
            power_w, rails = both() if callable(both) else (sensor.read_w(), sensor.rails_w())
        except (EdgetuneError, OSError):  # no power monitor: the other fields still count
            pass
        clocks = Clocks(mode.cores, mode.cpu_mhz, mode.gpu_mhz, mode.emc_mhz)
        return TelemetrySample(self.clock.now_s(), power_w, dict(rails), (), clocks, Clocks(), self.backend)

    def restore(self) -> None:
        """Return to the mode the device was in when this object first changed it."""
        initial = getattr(self, "_initial_mode", None)
        if initial is not None and initial != self.current_mode():
            self.apply(initial)

    def saved_state(self) -> dict[str, str | None] | None:
        """What the device was like before its first change, as every file it will write and that
        file's exact content (``None``: absent), for a record that outlives the process; taken now if
        nothing was changed yet. ``None``: the backend has no such state (only the mode comes back)."""
        return None

    def restore_saved(self, state: dict[str, str | None]) -> None:
        """Put back a :meth:`saved_state` taken by an earlier process (recovery after a crash)."""
        raise NotImplementedError(f"{type(self).__name__} keeps no saved state")

    def workloads(self) -> list[str]:
        """Workload names this backend can run (empty: any zoo model)."""
        return []

    def close(self) -> None:
        """Release resources; restores the initial mode."""
        self.restore()

    def __enter__(self) -> Device:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
