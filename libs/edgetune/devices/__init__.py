"""Device backends behind one small interface (``Device``).

- ``base``       the interface, roles, clocks, power sensors and samplers
- ``sampling``   the threaded power sampler for real-time devices
- ``sysfs``      ``SysfsJetson``: a real Jetson through /sys (cpufreq, devfreq, INA3221)
- ``simulated``  ``SimulatedJetson``: a physical time / power model calibrated to the papers
- ``replay``     ``ReplayDevice``: answers from a recorded profile table
- ``factory``    ``open_device("sim:orin-agx" | "sysfs" | "replay:table.csv")``
"""

from edgetune.devices.base import (
    Clock,
    Device,
    PowerSample,
    PowerSampler,
    PowerSensor,
    RealClock,
    Role,
    VirtualClock,
)

__all__ = ["Clock", "Device", "PowerSample", "PowerSampler", "PowerSensor", "RealClock", "Role", "VirtualClock"]
