"""Ground-truth profile tables from the noise-free model (docs/contract.md profile-table columns).

Experiments and tests build ``ReplayDevice`` tables from these rows: the expectation the
simulated device's noisy measurements scatter around.
"""

from __future__ import annotations

from collections.abc import Iterable

from edgetune import validation
from edgetune.base.roles import Role
from edgetune.devices.simulated.profiles import get_profile
from edgetune.physics.hardware import hardware_for
from edgetune.physics.model import PhysicalModel, as_mode_array
from edgetune.powermodes.spec import DeviceSpec
from edgetune.powermodes.specs import get_spec

#: Column order of the rows (docs/contract.md profile table, then the optional identity columns).
COLUMNS = ("cores", "cpu_mhz", "gpu_mhz", "emc_mhz", "batch_size", "time_ms", "power_w", "device", "workload", "role")


def truth_table(spec: DeviceSpec | str, workload: str, role: Role | str, modes, batch_sizes: Iterable[int]) -> list[dict]:
    """One row per (batch size, mode), batch sizes outer, modes in the given order.

    ``modes``: PowerModes, 4-tuples or an ``(n, 4)`` array [cores, cpu_mhz, gpu_mhz, emc_mhz].
    """
    spec = get_spec(spec) if isinstance(spec, str) else spec
    r = Role.parse(role)
    prof = get_profile(workload).role(r)
    arr = as_mode_array(modes)
    model = PhysicalModel(spec, hardware_for(spec))
    rows: list[dict] = []
    for b in batch_sizes:
        validation.batch_size(b)
        br = model.evaluate(prof, arr, int(b))
        for (c, fc, fg, fe), t, p in zip(arr.tolist(), br.time_ms.tolist(), br.power_w.tolist(), strict=True):
            rows.append({"cores": int(c), "cpu_mhz": fc, "gpu_mhz": fg, "emc_mhz": fe, "batch_size": int(b),
                         "time_ms": t, "power_w": p, "device": spec.name, "workload": workload, "role": r.value})
    return rows
