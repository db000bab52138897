"""One telemetry reading and the rule that says whether a board is throttling.

A board throttles when a clock runs below the one the applied mode pinned (the BPMP / thermal
governor capped it) or when a thermal zone is at or past its first trip point (where the
kernel's passive cooling starts lowering clocks). :func:`throttle_reasons` is the one place this
rule lives; every backend fills a :class:`TelemetrySample` and calls it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

#: A pinned clock counts as throttled when it runs more than this fraction below its pin
#: (sysfs rounds kHz / Hz readings, and cur_freq on Orin is sampled from counters).
CLOCK_TOLERANCE = 0.02


@dataclass(frozen=True)
class ZoneReading:
    """One thermal zone: its type (``cpu-thermal``), temperature and first trip point (°C)."""

    name: str
    temp_c: float
    trip_c: float | None = None

    @property
    def past_trip(self) -> bool:
        return self.trip_c is not None and self.temp_c >= self.trip_c


@dataclass(frozen=True)
class Clocks:
    """Clocks in MHz and online cores; ``None`` where unknown (or, for a pin, not pinned)."""

    cores: int | None = None
    cpu_mhz: float | None = None
    gpu_mhz: float | None = None
    emc_mhz: float | None = None

    def as_dict(self) -> dict[str, float | int | None]:
        return {"cores": self.cores, "cpu_mhz": self.cpu_mhz, "gpu_mhz": self.gpu_mhz, "emc_mhz": self.emc_mhz}


@dataclass(frozen=True)
class TelemetrySample:
    """Everything one telemetry read sees. ``t_s`` is on the device's clock."""

    t_s: float
    power_w: float | None
    rails_w: dict[str, float] = field(default_factory=dict)
    zones: tuple[ZoneReading, ...] = ()
    clocks: Clocks = Clocks()
    #: The clocks the applied mode pins (None for a clock left to its governor).
    pinned: Clocks = Clocks()
    backend: str = ""

    @property
    def throttle_reasons(self) -> tuple[str, ...]:
        return throttle_reasons(self.clocks, self.pinned, self.zones)

    @property
    def throttled(self) -> bool:
        return bool(self.throttle_reasons)

    @property
    def max_temp_c(self) -> float | None:
        return max((z.temp_c for z in self.zones), default=None)

    def as_dict(self) -> dict:
        return {
            "t_s": self.t_s, "backend": self.backend, "power_w": self.power_w, "rails_w": dict(self.rails_w),
            "zones": [{"name": z.name, "temp_c": z.temp_c, "trip_c": z.trip_c} for z in self.zones],
            "clocks": self.clocks.as_dict(), "pinned": self.pinned.as_dict(),
            "throttled": self.throttled, "throttle_reasons": list(self.throttle_reasons),
        }


def throttle_reasons(clocks: Clocks, pinned: Clocks, zones: tuple[ZoneReading, ...] | list[ZoneReading],
                     tolerance: float = CLOCK_TOLERANCE) -> tuple[str, ...]:
    """Why the board counts as throttled (empty: it does not)."""
    out = [f"{z.name} {z.temp_c:.1f} °C >= trip {z.trip_c:.1f} °C" for z in zones if z.past_trip]
    for name in ("cpu_mhz", "gpu_mhz", "emc_mhz"):
        cur, pin = getattr(clocks, name), getattr(pinned, name)
        if cur is not None and pin is not None and cur < pin * (1.0 - tolerance):
            out.append(f"{name[:3]} {cur:g} MHz < applied {pin:g} MHz")
    return tuple(out)
