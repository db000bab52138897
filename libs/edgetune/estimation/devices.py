"""Which devices a model may predict for, and the check that refuses modes of any other.

A model is fitted on one device and may be transferred to others; its file records each
(``TimePowerModel.device`` and the ``device`` of every fit / transfer in its history). A mode
table is refused when

* it has a ``device`` column naming a device the model was neither fitted nor transferred for, or
* every device the model knows is a built-in spec (``edgetune.powermodes.specs``) and a row is a
  mode of none of them (a core count or a CPU / GPU / EMC clock not in their tables) — e.g. an
  Orin AGX model asked for a Nano's 1-core, 102 MHz mode, which it used to answer at 11.7 W.

The error names the model's devices and, where a built-in spec has that mode, the device it
belongs to. Devices the specs do not know (custom tables) are trusted: nothing to check against.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

from edgetune.base.mode import MODE_FIELDS
from edgetune.errors import InvalidArgument
from edgetune.powermodes.specs import SPECS

#: Clocks within this many MHz of a table entry count as that entry (CSV round-trips, kHz → MHz).
TOLERANCE_MHZ = 0.5


def model_devices(device: str, history: Iterable[dict]) -> list[str]:
    """The model's device and every device in its fit / transfer history, in order, without blanks."""
    out: list[str] = []
    for name in [device, *(str(e.get("device", "")) for e in history)]:
        if name and name not in out:
            out.append(name)
    return out


def _mode_of(spec, row: np.ndarray) -> bool:
    cores, cpu, gpu, emc = row[:4]
    return (int(round(cores)) in spec.core_counts
            and all(np.min(np.abs(np.asarray(table) - v)) <= TOLERANCE_MHZ
                    for table, v in ((spec.cpu_mhz, cpu), (spec.gpu_mhz, gpu), (spec.emc_mhz, emc))))


def check_modes_device(devices: Sequence[str], x: np.ndarray, columns: Sequence[str],
                       table_devices: Iterable[str] = (), where: str = "modes") -> None:
    """Refuse modes that are not of ``devices`` (see the module docs); ``x`` has the model's ``columns``."""
    if not devices:
        return
    named = sorted({d for d in table_devices if d} - set(devices))
    if named:
        raise InvalidArgument(f"{where}:device", f"the modes are of {', '.join(named)} but the model was fitted or "
                              f"transferred for {', '.join(devices)}; transfer it to {named[0]} first",
                              ", ".join(devices))
    if tuple(columns[:4]) != MODE_FIELDS or any(d not in SPECS for d in devices):
        return
    specs = [SPECS[d] for d in devices]
    for i, row in enumerate(np.asarray(x, float)):
        if any(_mode_of(s, row) for s in specs):
            continue
        owner = next((s.name for s in SPECS.values() if _mode_of(s, row)), None)
        mode = f"{int(row[0])} cores, CPU {row[1]:g} / GPU {row[2]:g} / EMC {row[3]:g} MHz"
        whose = f"a mode of {owner}" if owner else "a mode of no known device"
        raise InvalidArgument(f"{where}:{i + 2}", f"{mode} is {whose}, but the model was fitted or transferred for "
                              f"{', '.join(devices)}; transfer it to that device first", ", ".join(devices))
