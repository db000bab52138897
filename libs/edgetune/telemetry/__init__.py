"""Live telemetry of a Jetson: per-rail power, energy counters, temperatures, clocks, throttling.

- ``sample``   :class:`TelemetrySample` (one reading of everything) and the throttling rule
- ``thermal``  thermal zones under ``/sys/class/thermal`` (type, temp, trip points)
- ``sampler``  :class:`TelemetrySampler`: a background thread at a fixed rate (1 Hz default) that
  integrates power into monotonically increasing energy counters and hands each sample on
- ``jtop``     jetson-stats (``jtop``) as an optional reading backend, same fields as sysfs

A device gives its readings through :meth:`edgetune.devices.base.Device.telemetry`; the sysfs
backend reads the files, the simulator answers from its model (including a hot board).
"""

from edgetune.telemetry.sample import Clocks, TelemetrySample, ZoneReading, throttle_reasons
from edgetune.telemetry.sampler import EnergyCounter, TelemetrySampler

__all__ = ["Clocks", "EnergyCounter", "TelemetrySample", "TelemetrySampler", "ZoneReading", "throttle_reasons"]
