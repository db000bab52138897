"""SimulatedJetson: a physical time / power model of the Jetsons, on a virtual clock.

- ``profiles``  per-workload work: GPU FLOPs and DRAM traffic, launches, CPU data pipeline
- ``device``    the Device backend: noise, warm-up, power settling, virtual-time sampler
- ``tables``    noise-free ground-truth profile tables (``truth_table``)

The per-device constants and the physical model that prices a profile live in
:mod:`edgetune.physics` (``hardware``, ``model``), shared with the layer costing of the
estimator's energy RPC, which never loads this package. The exports load on first use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from edgetune.devices.simulated.device import SimulatedJetson
    from edgetune.devices.simulated.profiles import PROFILES, get_profile
    from edgetune.devices.simulated.tables import truth_table

__all__ = ["PROFILES", "SimulatedJetson", "get_profile", "truth_table"]

_HOME = {"SimulatedJetson": "device", "PROFILES": "profiles", "get_profile": "profiles", "truth_table": "tables"}


def __getattr__(name: str) -> Any:
    if name not in _HOME:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{_HOME[name]}"), name)
    globals()[name] = value  # once: later lookups are plain module attributes
    return value
