"""The measurement protocol: warm-up, power stabilisation, sampling, integration, ordering.

- ``protocol``  ``ProfileConfig``, ``Profiler`` (measure one point / profile many), ``Measurement``
- ``settling``  sliding-window detection of power stabilisation after a mode change
- ``stats``     trapezoid energy, power statistics, NeuralPower's repetition rule
- ``order``     descending-frequency order (PowerTrain) and the power-cap search order (Ahmed et al.)
- ``events``    what a running profile reports: progress, a measurement or a skipped point
"""

from edgetune.profiling.events import PointSkipped, ProfileEvent, ProfileProgress
from edgetune.profiling.order import (
    CapPoint,
    CapSearch,
    CapSearchResult,
    descending_order,
    fastest_under_cap,
    gpu_levels,
    run_cap_search,
)
from edgetune.profiling.protocol import (
    ROW_COLUMNS,
    Measurement,
    PowerLimitExceeded,
    ProfileConfig,
    Profiler,
    ProgressEvent,
    measurement_id,
)
from edgetune.profiling.stats import integrate_energy_j, repetitions

__all__ = [
    "CapPoint", "CapSearch", "CapSearchResult", "Measurement", "PointSkipped", "PowerLimitExceeded", "ProfileConfig",
    "ProfileEvent", "ProfileProgress", "Profiler", "ProgressEvent", "ROW_COLUMNS", "descending_order",
    "fastest_under_cap", "gpu_levels", "integrate_energy_j", "measurement_id",
    "repetitions", "run_cap_search",
]
