"""INA3221 power monitors on Jetson boards: finding the rails and reading them as watts.

Two kernel drivers expose the same chips:

- ``ina3221`` (hwmon; JetPack 5 and 6): ``/sys/bus/i2c/drivers/ina3221/<bus>-<addr>/hwmon/hwmonN/``
  with ``inK_label`` (rail name), ``inK_input`` (bus voltage, mV) and ``currK_input`` (mA).
  ``NC`` channels are not connected and channel 7 is the "sum of shunt voltages": both skipped.
- ``ina3221x`` (iio; JetPack 4 and older): ``/sys/bus/i2c/drivers/ina3221x/<bus>-<addr>/iio:deviceN/``
  with ``rail_name_K``, ``in_powerK_input`` (mW), ``in_voltageK_input`` (mV), ``in_currentK_input`` (mA).

Jetson Thor's carrier board measures its system input with an INA238 instead (``ina238`` hwmon
driver: ``in1_input`` mV, ``curr1_input`` mA, ``power1_input`` µW); jetson-stats
(``jtop/core/power.py``, ``list_all_ina238_ports``) reads it as one rail, ``VIN``, and so does
:func:`find_rails`.

Total power follows jetson-stats (``jtop/core/power.py``): when the board has an input rail
(``VDD_IN`` on Orin NX / Nano, ``POM_5V_IN`` on Nano / TX2) that rail *is* the board power; otherwise
(AGX Orin, AGX Xavier) the module power is the sum of the rails.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from edgetune.devices.sampling import PowerSensor
from edgetune.devices.sysfs_layout import read_text, rel_glob, rpath

#: Rails that measure the whole board's input; when present they are the total.
TOTAL_RAILS = ("VDD_IN", "POM_5V_IN", "VIN")
#: Name of the INA238 system-input rail (Thor), as jetson-stats calls it.
INA238_RAIL = "VIN"
#: hwmon channel of the INA3221 "sum of shunt voltages" (not a rail).
_SUM_CHANNEL = 7


@dataclass(frozen=True)
class Rail:
    name: str
    kind: str  # "hwmon", "iio" or "ina238"
    voltage_file: str | None  # relative paths; mV
    current_file: str | None  # mA
    power_file: str | None = None  # iio: mW, ina238: µW
    power_unit_w: float = 1e-3  # watts per unit of power_file


def find_rails(root: str) -> list[Rail]:
    """Every connected INA3221 rail under ``root``, ordered by device then channel."""
    rails: list[Rail] = []
    seen_dirs: set[str] = set()
    device_dirs = rel_glob(root, "sys/bus/i2c/drivers/ina3221*/*-*") + rel_glob(root, "sys/bus/i2c/drivers/ina238/*-*")
    # Devices bound under /sys/bus/i2c/devices whose name says ina3221 / ina238 (jetson-stats' way).
    for d in rel_glob(root, "sys/bus/i2c/devices/*"):
        name = read_text(root, f"{d}/name") or ""
        if "ina3221" in name or "ina238" in name:
            device_dirs.append(d)
    for dev in device_dirs:
        real = os.path.realpath(rpath(root, dev))
        if real in seen_dirs:
            continue
        seen_dirs.add(real)
        for hw in rel_glob(root, f"{dev}/hwmon/hwmon*"):
            if "ina238" in (read_text(root, f"{hw}/name") or read_text(root, f"{dev}/name") or ""):
                rails.extend(_ina238_rail(root, hw))
            else:
                rails.extend(_hwmon_rails(root, hw))
        for iio in rel_glob(root, f"{dev}/iio:device*") + rel_glob(root, f"{dev}/iio_device"):
            rails.extend(_iio_rails(root, iio))
    return rails


def _hwmon_rails(root: str, base: str) -> list[Rail]:
    out = []
    for label_rel in rel_glob(root, f"{base}/in*_label"):
        m = re.fullmatch(r"in(\d+)_label", os.path.basename(label_rel))
        if not m:
            continue
        n = int(m.group(1))
        label = read_text(root, label_rel) or ""
        if n == _SUM_CHANNEL or not label or label.upper() == "NC" or "sum of shunt" in label.lower():
            continue
        volt, curr = f"{base}/in{n}_input", f"{base}/curr{n}_input"
        if os.path.isfile(rpath(root, volt)) and os.path.isfile(rpath(root, curr)):
            out.append(Rail(label, "hwmon", volt, curr))
    return sorted(out, key=lambda r: r.voltage_file or "")


def _ina238_rail(root: str, base: str) -> list[Rail]:
    def opt(rel: str) -> str | None:
        return rel if os.path.isfile(rpath(root, rel)) else None

    power = opt(f"{base}/power1_input")
    volt, curr = opt(f"{base}/in1_input"), opt(f"{base}/curr1_input")
    if power or (volt and curr):
        return [Rail(INA238_RAIL, "ina238", volt, curr, power, 1e-6)]
    return []


def _iio_rails(root: str, base: str) -> list[Rail]:
    out = []
    for name_rel in rel_glob(root, f"{base}/rail_name_*"):
        m = re.fullmatch(r"rail_name_(\d+)", os.path.basename(name_rel))
        if not m:
            continue
        n = int(m.group(1))
        label = read_text(root, name_rel) or ""
        if not label or label.upper() == "NC":
            continue

        def opt(rel: str) -> str | None:
            return rel if os.path.isfile(rpath(root, rel)) else None

        power = opt(f"{base}/in_power{n}_input")
        volt, curr = opt(f"{base}/in_voltage{n}_input"), opt(f"{base}/in_current{n}_input")
        if power or (volt and curr):
            out.append(Rail(label, "iio", volt, curr, power))
    return sorted(out, key=lambda r: r.power_file or r.voltage_file or "")


class Ina3221Sensor(PowerSensor):
    """Reads the rails on every call (a few small sysfs reads; no caching, no thread)."""

    def __init__(self, root: str, rails: list[Rail]) -> None:
        if not rails:
            raise ValueError("an INA3221 sensor needs at least one rail")
        self.root = root
        self.rails = list(rails)
        self.total_rail = next((r.name for r in self.rails if r.name in TOTAL_RAILS), None)

    def _read_number(self, rel: str | None) -> float:
        if rel is None:
            raise OSError("no such attribute")
        with open(rpath(self.root, rel), "rb") as fh:
            # "32760 ma" style values exist on old drivers: keep the first token.
            return float(fh.read().split()[0])

    def rail_power_w(self, rail: Rail) -> float:
        if rail.power_file is not None:
            return self._read_number(rail.power_file) * rail.power_unit_w
        return self._read_number(rail.voltage_file) * self._read_number(rail.current_file) / 1e6  # mV*mA -> W

    def read_total_and_rails(self) -> tuple[float, dict[str, float]]:
        """Total power and every rail, from one pass over the files."""
        rails = {r.name: self.rail_power_w(r) for r in self.rails}
        if self.total_rail is not None:
            return rails[self.total_rail], rails
        return sum(rails.values()), rails

    def read_w(self) -> float:
        if self.total_rail is not None:
            rail = next(r for r in self.rails if r.name == self.total_rail)
            return self.rail_power_w(rail)
        return sum(self.rail_power_w(r) for r in self.rails)

    def rails_w(self) -> dict[str, float]:
        return {r.name: self.rail_power_w(r) for r in self.rails}

    def describe(self) -> list[dict]:
        return [{"rail": r.name, "kind": r.kind, "power_file": r.power_file, "voltage_file": r.voltage_file,
                 "current_file": r.current_file, "is_total": r.name == self.total_rail} for r in self.rails]
