"""jetson-stats (``jtop``) as an optional telemetry backend: the same :class:`TelemetrySample`.

Where the jtop service runs (``systemctl status jtop``, socket ``/run/jtop.sock``) and the
``jetson`` extra is installed (``pip install 'edgetune[jetson]'``), :class:`JtopReader` reads power,
temperatures and clocks through jtop's client instead of sysfs; ``edgetune device --watch --jtop``
uses it. Otherwise sysfs (:meth:`edgetune.devices.sysfs.SysfsJetson.telemetry`) is the backend.

Field mapping (jtop's documented units, jetson-stats 4.x - 7.x): ``power['rail'][name]['power']``
mW per rail and ``power['tot']['power']`` mW total; ``temperature[name]['temp']`` °C (``online``
false: skipped; ``max`` / ``crit`` °C where the sensor has them); ``cpu['cpu'][k]['freq']``
``{min, max, cur}`` kHz and ``online``; GPU ``freq`` ``{min, max, cur}`` kHz; ``memory['EMC']['cur']``
kHz. A clock whose ``min == max`` counts as pinned (what edgetune's ``apply`` writes).

jtop cannot be pointed at a fake sysroot, so the tests cannot run it against
``tests/fixtures/sysroots``: its service reads fixed absolute paths (``/sys/...``; with
``JTOP_TESTING`` set, a hard-coded ``/fake_sys/...`` at the filesystem root, which temperatures
ignore and keep reading ``/sys``), runs as root under systemd and answers only over
``/run/jtop.sock``. ``tests/unit/test_telemetry.py`` instead feeds :func:`sample_from_jtop` the
values jtop reports for a fake sysroot's files (its units and rounding) and checks that both
backends give the same fields.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from edgetune.errors import FailedPrecondition, InvalidArgument
from edgetune.telemetry.sample import Clocks, TelemetrySample, ZoneReading

#: The jtop service's socket (jetson-stats ``service.py``).
JTOP_SOCKET = "/run/jtop.sock"


@dataclass(frozen=True)
class JtopSnapshot:
    """The jtop client's properties of one refresh, as it returns them (plain dicts)."""

    power: Mapping[str, Any] = field(default_factory=dict)
    temperature: Mapping[str, Any] = field(default_factory=dict)
    cpu: Mapping[str, Any] = field(default_factory=dict)
    gpu: Mapping[str, Any] = field(default_factory=dict)
    memory: Mapping[str, Any] = field(default_factory=dict)


def _pin_mhz(freq: Mapping[str, Any] | None) -> float | None:
    if not freq or freq.get("min") is None or freq.get("min") != freq.get("max"):
        return None
    return float(freq["min"]) / 1000.0


def _cur_mhz(freq: Mapping[str, Any] | None) -> float | None:
    return None if not freq or freq.get("cur") is None else float(freq["cur"]) / 1000.0


def sample_from_jtop(snap: JtopSnapshot, t_s: float, trips_c: Mapping[str, float] | None = None) -> TelemetrySample:
    """``snap`` as a :class:`TelemetrySample`. ``trips_c``: trip points by zone name, for the
    thermal zones jtop reports without one (matched on jtop's shortened names: ``cpu-thermal`` -> ``cpu``)."""
    rails = {name: float(r["power"]) / 1000.0 for name, r in (snap.power.get("rail") or {}).items()
             if r.get("online", True) and r.get("power") is not None}
    tot = snap.power.get("tot") or {}
    power_w = float(tot["power"]) / 1000.0 if tot.get("power") is not None else None
    short: dict[str, float] = {}
    for zone, trip_c in (trips_c or {}).items():
        short[zone] = trip_c
        short[zone.split("-")[0] if "-" in zone else zone.split("_")[0]] = trip_c
    zones = []
    for name, t in snap.temperature.items():
        if not t.get("online", True):
            continue
        trip: float | None = t.get("max") or t.get("crit") or short.get(name)
        zones.append(ZoneReading(name, float(t["temp"]), None if trip is None else float(trip)))
    cores = [c for c in snap.cpu.get("cpu", []) if c.get("online", False)]
    cpu0: Mapping[str, Any] = next(iter(cores), {})
    gpu: Mapping[str, Any] = next(iter(snap.gpu.values()), {}) if snap.gpu else {}
    emc: Mapping[str, Any] = snap.memory.get("EMC") or {}
    return TelemetrySample(
        t_s=t_s, power_w=power_w, rails_w=rails, zones=tuple(zones),
        clocks=Clocks(len(cores) if snap.cpu else None, _cur_mhz(cpu0.get("freq")), _cur_mhz(gpu.get("freq")),
                      None if emc.get("cur") is None else float(emc["cur"]) / 1000.0),
        pinned=Clocks(None, _pin_mhz(cpu0.get("freq")), _pin_mhz(gpu.get("freq")), None),
        backend="jtop",
    )


def jtop_available() -> bool:
    """jetson-stats importable and its service's socket present."""
    try:
        import jtop  # type: ignore[import-not-found]  # noqa: F401  # optional: the jetson extra, on a Jetson only
    except ImportError:
        return False
    return os.path.exists(JTOP_SOCKET)


#: Where telemetry is read from: the device backend (sysfs, simulator, ...), jtop, or jtop when
#: its service runs on a sysfs device and the device otherwise.
TELEMETRY_SOURCES = ("auto", "device", "jtop")


def telemetry_reader(device: Any, source: str = "auto"):
    """A no-argument callable giving :class:`TelemetrySample`s of ``device`` from ``source``."""
    if source not in TELEMETRY_SOURCES:
        raise InvalidArgument("telemetry_source", f"unknown telemetry source {source!r}", ", ".join(TELEMETRY_SOURCES))
    if source == "jtop" or (source == "auto" and getattr(device, "backend", "") == "sysfs" and jtop_available()):
        return JtopReader(device).read
    return device.telemetry


class JtopReader:
    """Reads telemetry through a running jtop service; ``read()`` gives a :class:`TelemetrySample`."""

    def __init__(self, device: Any = None, interval_s: float = 1.0) -> None:
        try:
            from jtop import jtop  # optional: the jetson extra, on a Jetson only
        except ImportError:
            raise FailedPrecondition("jetson-stats is not installed: pip install 'edgetune[jetson]'") from None
        if not os.path.exists(JTOP_SOCKET):
            raise FailedPrecondition(f"the jtop service is not running ({JTOP_SOCKET} missing): "
                                     "sudo systemctl start jtop, or read through sysfs (without --jtop)")
        self._trips: dict[str, float] = {}
        if device is not None:  # jtop has no trip points for thermal zones: take them from the device
            try:
                self._trips = {z.name: z.trip_c for z in device.telemetry().zones if z.trip_c is not None}
            except Exception:  # noqa: BLE001 - trip points are an extra, never a reason to fail
                self._trips = {}
        self._jetson = jtop(interval=interval_s)
        self._jetson.start()

    def read(self) -> TelemetrySample:
        j = self._jetson
        snap = JtopSnapshot(power=j.power, temperature=j.temperature, cpu=j.cpu, gpu=j.gpu, memory=j.memory)
        return sample_from_jtop(snap, time.monotonic(), self._trips)

    def close(self) -> None:
        self._jetson.close()
