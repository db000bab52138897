"""Thermal zones as the kernel lists them: ``/sys/class/thermal/thermal_zoneN/{type,temp,trip_point_K_*}``.

Temperatures are millidegrees Celsius. Each zone's first trip point of type ``passive`` (where
the thermal governor starts lowering clocks), else its lowest ``hot`` / ``critical`` one, is the
zone's throttle threshold. ``/sys/class/thermal`` entries are links to
``/sys/devices/virtual/thermal`` on a real board; both places are searched. A zone whose ``temp``
cannot be read (tj-thermal is disabled on some P3767 boards and reads empty) is skipped.
"""

from __future__ import annotations

import os
import re

from edgetune.devices.sysfs_layout import read_text, rel_glob
from edgetune.telemetry.sample import ZoneReading

ZONE_DIRS = ("sys/class/thermal", "sys/devices/virtual/thermal")
_TRIP = re.compile(r"trip_point_(\d+)_type$")
#: Trip types in the order they count as "throttling starts here".
_TRIP_ORDER = ("passive", "hot", "critical")


def find_zones(root: str) -> list[str]:
    """Relative folders of every thermal zone under ``root`` (first location that has any)."""
    for base in ZONE_DIRS:
        zones = rel_glob(root, f"{base}/thermal_zone[0-9]*")
        if zones:
            return sorted(zones, key=lambda z: int(re.sub(r"\D", "", os.path.basename(z)) or 0))
    return []


def _trip_c(root: str, zone: str) -> float | None:
    trips: list[tuple[int, float]] = []
    for type_rel in rel_glob(root, f"{zone}/trip_point_*_type"):
        m = _TRIP.search(type_rel)
        kind = (read_text(root, type_rel) or "").lower()
        temp = read_text(root, f"{zone}/trip_point_{m.group(1)}_temp") if m else None
        if kind in _TRIP_ORDER and temp and temp.lstrip("-").isdigit():
            trips.append((_TRIP_ORDER.index(kind), int(temp) / 1000.0))
    return min(trips)[1] if trips else None


def zone_info(root: str, zones: list[str]) -> dict[str, tuple[str, float | None]]:
    """Zone folder -> (type, first throttling trip °C): the static part, read once."""
    return {z: (read_text(root, f"{z}/type") or os.path.basename(z), _trip_c(root, z)) for z in zones}


def read_zones(root: str, zones: list[str],
               info: dict[str, tuple[str, float | None]] | None = None) -> tuple[ZoneReading, ...]:
    """Every readable zone's temperature now (``info``: :func:`zone_info`, to skip re-reading it)."""
    info = info if info is not None else zone_info(root, zones)
    out = []
    for zone in zones:
        name, trip_c = info[zone]
        temp = read_text(root, f"{zone}/temp")
        try:
            temp_c = int(temp or "") / 1000.0
        except ValueError:
            continue
        out.append(ZoneReading(name, temp_c, trip_c))
    return tuple(out)
