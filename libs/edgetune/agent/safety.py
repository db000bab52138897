"""The agent's safety net: power modes it changes always come back.

Three layers, from the library's :class:`~edgetune.devices.guard.ModeGuard` outwards:

- :class:`GuardedDevice` is the device as the Profiler and the RPCs see it: every ``apply``
  goes through the guard, so the mode to return to is on disk (fsync'd) *before* the first
  change, whoever makes it (ApplyPowerMode or a profile point).
- :class:`ModeKeeper` owns the guard, the device and a per-device ``flock`` (two agents on
  one device would restore each other's modes). ``restore()`` first puts back exactly what
  the backend changed (``device.restore()``: on sysfs the governors and min/max files as
  found, not just pinned clocks), then lets the guard re-apply the recorded mode if needed
  and clear the record. The server runs it on graceful shutdown (SIGTERM / SIGINT).
- :func:`open_guarded_device` runs ``guard.recover()`` on start, for a previous agent that
  died with a mode applied (SIGKILL, OOM, power loss), then opens a fresh device object so
  that the backend's own restore snapshot is the recovered state, never the crashed one.
"""

from __future__ import annotations

import fcntl
import hashlib
import logging
import os
import re
import threading
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from edgetune.base.clocks import Clock
from edgetune.base.mode import PowerMode
from edgetune.base.roles import Role
from edgetune.devices.base import Device
from edgetune.devices.guard import ModeGuard
from edgetune.devices.sampling import PowerSampler, PowerSensor
from edgetune.errors import FailedPrecondition
from edgetune.powermodes.spec import DeviceSpec
from edgetune.telemetry.sample import TelemetrySample

log = logging.getLogger(__name__)

ModeListener = Callable[[PowerMode], None]


def default_state_dir() -> Path:
    """Where mode records live when ``--state-dir`` is not given: ``/var/lib/edgetune`` for
    root (the DaemonSet mounts it from the host, so a record survives the pod), else the
    user's XDG state directory."""
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        return Path("/var/lib/edgetune")
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return Path(base) / "edgetune"


def state_file_name(device_spec: str) -> str:
    """A file name per device spec: ``sim:orin-agx`` -> ``profiler-mode-sim-orin-agx.json``;
    paths (sysfs roots, replay tables) get a short hash so two roots never share a record."""
    kind, _, arg = device_spec.strip().partition(":")
    slug = re.sub(r"[^A-Za-z0-9]+", "-", kind).strip("-").lower() or "device"
    if arg:
        if kind == "sim":
            slug += "-" + re.sub(r"[^A-Za-z0-9]+", "-", arg).strip("-").lower()
        else:
            real = os.path.realpath(arg)
            slug += "-" + hashlib.sha256(real.encode()).hexdigest()[:10]
    return f"profiler-mode-{slug}.json"


class GuardedDevice(Device):
    """``device`` with every ``apply`` routed through ``guard`` (and reported to ``on_mode``).

    Everything else is delegated unchanged, so the measurement protocol runs on it as on the
    device itself.
    """

    def __init__(self, device: Device, guard: ModeGuard, on_mode: ModeListener | None = None) -> None:
        self.inner = device
        self.guard = guard
        self.on_mode = on_mode
        self.backend = device.backend

    @property
    def spec(self) -> DeviceSpec:
        return self.inner.spec

    @property
    def clock(self) -> Clock:
        return self.inner.clock

    def current_mode(self) -> PowerMode:
        return self.inner.current_mode()

    def apply(self, mode: PowerMode) -> PowerMode:
        applied = self.guard.apply(mode)
        if self.on_mode is not None:
            self.on_mode(applied)
        return applied

    def run(self, workload: str, role: Role | str, batch_size: int, n_minibatches: int) -> list[float]:
        return self.inner.run(workload, role, batch_size, n_minibatches)

    def power_sensor(self) -> PowerSensor:
        return self.inner.power_sensor()

    def sampler(self, rate_hz: float = 1.0) -> PowerSampler:
        return self.inner.sampler(rate_hz)

    def telemetry(self) -> TelemetrySample:  # read-only: never waits for the device
        return self.inner.telemetry()

    def workloads(self) -> list[str]:
        return self.inner.workloads()

    def restore(self) -> None:  # the keeper decides when; the protocol never calls this
        self.inner.restore()

    def saved_state(self) -> dict[str, str | None] | None:
        return self.inner.saved_state()

    def restore_saved(self, state: dict[str, str | None]) -> None:
        self.inner.restore_saved(state)

    def close(self) -> None:  # the keeper owns the device's life cycle
        pass


class ModeKeeper:
    """Applies and restores modes on one device for the agent (see the module docstring)."""

    def __init__(self, device: Device, state_path: str | os.PathLike, on_mode: ModeListener | None = None) -> None:
        self.device = device
        self.state_path = Path(state_path)
        self.on_mode = on_mode
        self.guard = ModeGuard(device, self.state_path)
        self.guarded = GuardedDevice(device, self.guard, on_mode)
        self._lock_file: IO[Any] | None = None
        self._restore_lock = threading.Lock()

    # -- one agent per device --------------------------------------------------------------
    def lock_device(self) -> None:
        """Take the per-device lock file next to the record; FailedPrecondition if another agent
        holds it. The kernel drops the lock when the process dies, however it dies."""
        self.state_path.parent.mkdir(parents=True, exist_ok=True)
        path = self.state_path.with_suffix(".lock")
        fh = open(path, "a+")
        try:
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            fh.seek(0)
            holder = fh.read().strip() or "?"
            fh.close()
            raise FailedPrecondition(f"another profiler agent (pid {holder}) manages this device "
                                     f"(lock {path}); stop it first") from None
        fh.seek(0)
        fh.truncate()
        fh.write(str(os.getpid()))
        fh.flush()
        self._lock_file = fh

    def unlock_device(self) -> None:
        if self._lock_file is not None:
            fcntl.flock(self._lock_file.fileno(), fcntl.LOCK_UN)
            self._lock_file.close()
            self._lock_file = None

    # -- modes -----------------------------------------------------------------------------
    @property
    def active(self) -> bool:
        """A changed mode is in force (the guard holds a record of the mode to return to)."""
        return self.guard.active

    def apply(self, mode: PowerMode) -> tuple[PowerMode, PowerMode]:
        """Validate and apply ``mode``; returns (applied, previous)."""
        previous = self.device.current_mode()
        return self.guarded.apply(mode), previous

    def restore(self) -> tuple[PowerMode, bool]:
        """Back to the mode found before the first change; returns (mode now, whether it changed).

        Exact backend restore first (governors, ranges, lock files as found), then the guard
        re-applies its record if the mode still differs and clears it.
        """
        with self._restore_lock:
            before = self.device.current_mode()
            recorded = self.guard.recorded_mode()
            self.device.restore()
            self.guard.restore()
            now = self.device.current_mode()
        if self.on_mode is not None:
            self.on_mode(now)
        changed = recorded is not None and before != recorded
        if changed:
            log.info("power mode restored", extra={"mode": now.label(), "from": before.label()})
        return now, changed

    def close(self) -> None:
        """Restore the mode (if changed) and release the device lock: the shutdown hook."""
        try:
            self.restore()
        finally:
            self.unlock_device()


def open_guarded_device(open_device: Callable[[], Device], state_path: str | os.PathLike,
                        on_mode: ModeListener | None = None) -> tuple[ModeKeeper, PowerMode | None]:
    """Open the device, take its lock, recover a mode left by a crashed agent.

    Returns the keeper (over a device object opened after recovery) and the recovered mode
    (``None`` when the previous run ended cleanly).
    """
    keeper = ModeKeeper(open_device(), state_path, on_mode)
    keeper.lock_device()
    try:
        recovered = keeper.guard.recover()
        if recovered is not None:
            # Not device.close(): that would put back the crashed state this object snapshotted
            # while recovering. A fresh object snapshots the recovered one on its first change.
            fresh = ModeKeeper(open_device(), state_path, on_mode)
            fresh._lock_file, keeper._lock_file = keeper._lock_file, None  # hand the lock over
            keeper = fresh
    except BaseException:
        keeper.unlock_device()
        raise
    return keeper, recovered
