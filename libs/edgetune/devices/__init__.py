"""Device backends behind one small interface (``Device``).

- ``base``       the interface, power sensors and samplers (roles and clocks: :mod:`edgetune.base`)
- ``sampling``   the threaded power sampler for real-time devices
- ``sysfs``      ``SysfsJetson``: a real Jetson through /sys (cpufreq, devfreq, INA3221)
- ``sysfs_layout``, ``thermal``  where a Jetson's files are; its thermal zones
- ``simulated``  ``SimulatedJetson``: a physical time / power model calibrated to the papers
- ``replay``     ``ReplayDevice``: answers from a recorded profile table
- ``factory``    ``open_device("sim:orin-agx" | "sysfs" | "replay:table.csv")``
- ``workloads``  which workload a device runs for a name
"""

from edgetune.devices.base import Device
from edgetune.devices.sampling import PowerSample, PowerSampler, PowerSensor

__all__ = ["Device", "PowerSample", "PowerSampler", "PowerSensor"]
