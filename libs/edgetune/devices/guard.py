"""ModeGuard: apply power modes so that the original mode always comes back.

Changing clocks on a shared edge node is only acceptable if it is undone. The guard
restores the mode it found:

- on normal exit and on exceptions (context manager / ``restore()``),
- on SIGTERM and SIGINT (``install_signal_handlers``: restore, then exit),
- after a hard crash (SIGKILL, power loss), where no code runs: before the first change the
  guard writes the mode to return to, and every file the device will write as found (its
  ``saved_state``), into a small state file (written to a temp file,
  fsync'd, renamed — so it is either the old or the new record, never half of one). On its
  next start the agent calls ``recover()``, which puts those files back byte for byte (or, for
  a backend without files, applies the recorded mode) and clears the record.

Every mode goes through ``device.apply``, which validates against the device's discovered
tables before anything is written.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
import threading
from pathlib import Path
from types import FrameType

from edgetune.base.mode import PowerMode
from edgetune.devices.base import Device

log = logging.getLogger(__name__)


class ModeGuard:
    def __init__(self, device: Device, state_path: str | os.PathLike) -> None:
        self.device = device
        self.state_path = Path(state_path)
        self._lock = threading.RLock()

    # -- the record ------------------------------------------------------------------------
    def recorded_mode(self) -> PowerMode | None:
        try:
            data = json.loads(self.state_path.read_text())
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:  # a torn or foreign file: say so, do not guess
            log.warning("ignoring unreadable mode record %s: %s", self.state_path, exc)
            return None
        return PowerMode.from_mapping(data["restore_mode"])

    def recorded_files(self) -> dict[str, str | None] | None:
        """The device's files as found before the first change (None: the record has none)."""
        try:
            files = json.loads(self.state_path.read_text()).get("files")
        except (OSError, ValueError, AttributeError):
            return None
        return dict(files) if isinstance(files, dict) else None

    def _write_record(self, mode: PowerMode) -> None:
        self.state_path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.state_path.with_suffix(self.state_path.suffix + ".tmp")
        payload: dict = {"restore_mode": mode.as_dict(), "device": self.device.spec.name, "pid": os.getpid()}
        files = self.device.saved_state()  # every file the device will write, as found
        if files is not None:
            payload["files"] = files
        with open(tmp, "w") as fh:
            json.dump(payload, fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, self.state_path)
        try:  # make the rename itself durable
            dir_fd = os.open(self.state_path.parent, os.O_RDONLY)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)
        except OSError:
            pass

    def _clear_record(self) -> None:
        try:
            self.state_path.unlink()
        except FileNotFoundError:
            pass

    # -- operations ------------------------------------------------------------------------
    def recover(self) -> PowerMode | None:
        """On start: if a previous run died with a mode applied, put the recorded mode back."""
        with self._lock:
            mode = self.recorded_mode()
            if mode is None:
                return None
            log.warning("restoring power mode %s left by a previous run", mode)
            files = self.recorded_files()
            if files is not None:  # every file back as found (ranges, online states, locks), not just the mode
                self.device.restore_saved(files)
            if self.device.current_mode() != mode:
                self.device.apply(mode)
            self._clear_record()
            return mode

    def apply(self, mode: PowerMode) -> PowerMode:
        """Validate and apply ``mode``, recording the mode to return to before the first change."""
        with self._lock:
            target = self.device.spec.validate(mode)  # refuse before recording anything
            if self.recorded_mode() is None:
                self._write_record(self.device.current_mode())
            return self.device.apply(target)

    def restore(self) -> PowerMode | None:
        """Apply the recorded mode (if any change was made) and clear the record."""
        with self._lock:
            mode = self.recorded_mode()
            if mode is None:
                return None
            if self.device.current_mode() != mode:
                self.device.apply(mode)
            self._clear_record()
            return mode

    @property
    def active(self) -> bool:
        """True while a changed mode is in force (a record exists)."""
        return self.recorded_mode() is not None

    def install_signal_handlers(self, signals: tuple[int, ...] = (signal.SIGTERM, signal.SIGINT)) -> None:
        """Restore on these signals, then exit with 128 + signal number. Main thread only."""

        def handler(signum: int, frame: FrameType | None) -> None:
            try:
                self.restore()
            finally:
                sys.exit(128 + signum)

        for s in signals:
            signal.signal(s, handler)

    def __enter__(self) -> ModeGuard:
        self.recover()
        return self

    def __exit__(self, *exc: object) -> None:
        self.restore()
