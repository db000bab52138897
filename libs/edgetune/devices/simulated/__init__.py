"""SimulatedJetson: a physical time / power model of the Jetsons, on a virtual clock.

- ``profiles``  per-workload work: GPU FLOPs and DRAM traffic, launches, CPU data pipeline
- ``hardware``  per-device constants: compute per MHz, bandwidth per MHz, DVFS rails
- ``model``     vectorised minibatch time (roofline + pipeline overlap) and rail power
- ``device``    the Device backend: noise, warm-up, power settling, virtual-time sampler
- ``tables``    noise-free ground-truth profile tables (``truth_table``)
"""

from edgetune.devices.simulated.device import SimulatedJetson
from edgetune.devices.simulated.profiles import PROFILES, get_profile
from edgetune.devices.simulated.tables import truth_table

__all__ = ["PROFILES", "SimulatedJetson", "get_profile", "truth_table"]
