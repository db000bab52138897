"""Which workload a device runs for a name: a zoo name, or a user's ``MODULE:FUNCTION``.

One rule for the CLI (``profile``, ``tune``) and the profiler agent alike: a name without
``:`` must be one the device knows (its profiles, its recorded table, or any zoo model on a
real board); a ``MODULE:FUNCTION`` is loaded and checked
(:func:`edgetune.workloads.user.load_workload`), made runnable on the device (the simulator
costs its layers; a real board's runner finds the loaded model by id), and from then on
called by its id. torch is imported only for a user workload or a real board's zoo list.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from edgetune.base.roles import Role
from edgetune.base.workload import is_user_workload
from edgetune.devices.base import Device
from edgetune.devices.simulated.profiles import profile_for_workload
from edgetune.errors import InvalidArgument


def known_workloads(device: Device) -> list[str]:
    """Names ``device`` runs: its own list, else (a real board) every zoo model."""
    known = device.workloads()
    if known:
        return known
    from edgetune.workloads.registry import workload_names  # imports torch: only when needed

    return workload_names()


def resolve_workload(device: Device, name: str, role: Role | str = Role.TRAIN, *,
                     allowed_path: Sequence[Path] | None = None, field: str = "workload") -> str:
    """The name ``device`` runs ``name`` under; ``InvalidArgument(field)`` when it cannot.

    ``allowed_path``: where a user module may be imported from (an agent's ``--workload-path``;
    ``None``: ``sys.path``, as the CLI does). A user workload without a loss runs only as
    ``infer``.
    """
    r = Role.parse(role)
    if not is_user_workload(name):
        known = known_workloads(device)
        if name not in known:
            raise InvalidArgument(field, f"unknown workload {name!r}", ", ".join(known) + ", or MODULE:FUNCTION")
        return name
    from edgetune.workloads.user import load_workload  # deferred: torch

    try:
        wl = load_workload(name, allowed_path)
        if r is Role.TRAIN and not wl.trainable:
            raise InvalidArgument("workload", f"{name}: loss_fn is None, so it runs only as an inference workload",
                                  "--role infer, or return a loss_fn")
        if device.backend == "sim":
            profile_for_workload(wl)
    except InvalidArgument as exc:
        raise exc.renamed(field) from None
    known = device.workloads()
    if device.backend not in ("sim", "sysfs") and known and wl.workload_id not in known:
        # a recorded table answers only for what it recorded
        raise InvalidArgument(field, f"{name} (id {wl.workload_id}) is not in this device's table",
                              ", ".join(known))
    return wl.workload_id
