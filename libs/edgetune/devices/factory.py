"""open_device: one string names a backend (docs/contract.md ``--device``).

- ``sim:<name>``       :class:`~edgetune.devices.simulated.SimulatedJetson` of a built-in spec
- ``sysfs[:ROOT]``     :class:`~edgetune.devices.sysfs.SysfsJetson` on ``/`` (or a sysroot)
- ``replay:FILE.csv``  :class:`~edgetune.devices.replay.ReplayDevice` of a profile table

Keyword arguments go to the backend's constructor; those it does not take are dropped, so a
command can pass ``seed=`` whatever the backend (only the simulator and replay use it).
"""

from __future__ import annotations

import inspect
from typing import Any

from edgetune.devices.base import Device
from edgetune.devices.replay import ReplayDevice
from edgetune.devices.simulated.device import SimulatedJetson
from edgetune.devices.sysfs import SysfsJetson
from edgetune.errors import InvalidArgument
from edgetune.powermodes.specs import SPECS, UNTABULATED

ALLOWED = f"sim:<{'|'.join(SPECS)}>, sysfs[:ROOT], replay:FILE.csv"


def _construct(cls: type, *args: Any, **kw: Any) -> Device:
    params = inspect.signature(cls).parameters
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    return cls(*args, **(kw if takes_any else {k: v for k, v in kw.items() if k in params}))


def open_device(spec: str, **kw: Any) -> Device:
    """The Device that ``spec`` names; ``InvalidArgument`` (field ``device``) for anything else."""
    text = (spec or "").strip()
    kind, _, arg = text.partition(":")
    if kind == "sim" and arg:
        if arg in UNTABULATED:
            raise InvalidArgument("device", f"cannot simulate {arg!r}: {UNTABULATED[arg]}", ALLOWED)
        if arg not in SPECS:
            raise InvalidArgument("device", f"unknown simulated device {arg!r}", ALLOWED)
        # each backend imported when chosen: the simulator pulls in its physical model

        return _construct(SimulatedJetson, arg, **kw)
    if kind == "sysfs":
        # each backend imported when chosen: sysfs reads the board at import, replay reads tables

        return _construct(SysfsJetson, arg or "/", **kw)
    if kind == "replay" and arg:
        return _construct(ReplayDevice, arg, **kw)
    raise InvalidArgument("device", f"unknown device {text!r}", ALLOWED)
