"""What a running profile reports, point by point: a :class:`ProfileProgress` before each point and
at the end, then the point's :class:`~edgetune.profiling.protocol.Measurement`, or a
:class:`PointSkipped` when the point drew more than the profile's power limit (the protocol already
went back to the previous mode)."""

from __future__ import annotations

from dataclasses import dataclass

from edgetune.base.mode import PowerMode
from edgetune.profiling.protocol import Measurement


@dataclass(frozen=True)
class ProfileProgress:
    """``stage`` ``measuring`` before point ``done`` + 1 of ``total`` (``message`` names it), ``done`` at the end."""

    stage: str
    done: int
    total: int
    message: str = ""


@dataclass(frozen=True)
class PointSkipped:
    """A point not measured: it drew more than the power limit (``reason`` says how much)."""

    mode: PowerMode
    batch_size: int
    reason: str


#: One event of a profile, in the order they come.
ProfileEvent = ProfileProgress | PointSkipped | Measurement
