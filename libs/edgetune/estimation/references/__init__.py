"""Shipped reference models: time and power predictors of a reference workload on a device,
fitted on the simulator's grid of that device, so that ``estimate transfer`` (and a tuning
job's default reference) can start from them without hours of profiling a board.

Each is a :class:`~edgetune.estimation.bundle.TimePowerModel` file in this package, named
``DEVICE-WORKLOAD-ROLE.vN.model``. This module is the catalogue, data only (no torch, so the
control plane can name and pick references): :data:`REFERENCES` lists them, :func:`find_reference`
finds one by device name (``orin-agx``) or by full name (``orin-agx-resnet18-train``),
:func:`shipped_for` picks a device's, :func:`reference_path` gives its file;
:func:`edgetune.estimation.bundle.load_reference` loads one.
``tools/make_references.py`` regenerates them (bump :data:`REFERENCE_VERSION` when what
they are fitted on changes).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from edgetune.errors import InvalidArgument
from edgetune.validation import shown

#: Version of the shipped files (part of their names).
REFERENCE_VERSION = 1
#: How ``--base`` names a shipped reference on the CLI.
PREFIX = "reference:"


@dataclass(frozen=True)
class Reference:
    device: str
    workload: str = "resnet18"
    role: str = "train"
    batch_size: int = 16
    grid: str = "powertrain"  # the simulator's grid it is fitted on
    method: str = "nn"

    @property
    def name(self) -> str:
        return f"{self.device}-{self.workload}-{self.role}"

    @property
    def filename(self) -> str:
        return f"{self.name}.v{REFERENCE_VERSION}.model"


REFERENCES: tuple[Reference, ...] = (Reference("orin-agx"), Reference("xavier-agx"))


def find_reference(name: str, field: str = "reference") -> Reference:
    """The shipped reference called ``name`` (its device, or its full name; ``reference:`` may lead, and
    ``@VERSION`` follow: the id a transfer from it records carries the version)."""
    text = name
    name, at, version = name.partition("@")
    if at and version != str(REFERENCE_VERSION):
        raise InvalidArgument(field, f"{shown(text)}: the shipped references are version {REFERENCE_VERSION}",
                              f"{name} or {name}@{REFERENCE_VERSION}")
    name = name[len(PREFIX):] if name.startswith(PREFIX) else name
    for ref in REFERENCES:
        if name in (ref.device, ref.name):
            return ref
    raise InvalidArgument(field, f"no shipped reference model {shown(name)}",
                          ", ".join(PREFIX + r.device for r in REFERENCES))


def shipped_for(device: str, role: str = "train") -> Reference | None:
    """The shipped reference of a device model and role (what a tuning job naming none transfers from), or None."""
    return next((ref for ref in REFERENCES if ref.device == device and ref.role == role), None)


def reference_path(name: str, field: str = "reference") -> str:
    """The file of a shipped reference (inside the installed package)."""
    ref = find_reference(name, field)
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), ref.filename)

