"""PowerMode: one point of a Jetson's power-mode space.

A mode is four knobs: online CPU cores and the CPU, GPU and memory (EMC) frequency in MHz.
It means nothing on its own: validate it against a :class:`~edgetune.powermodes.spec.DeviceSpec`
before applying it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

#: Column names of a mode in tables (docs/contract.md), in order.
MODE_FIELDS: tuple[str, ...] = ("cores", "cpu_mhz", "gpu_mhz", "emc_mhz")


@dataclass(frozen=True, order=True)
class PowerMode:
    cores: int
    cpu_mhz: float
    gpu_mhz: float
    emc_mhz: float

    def as_dict(self) -> dict[str, float | int]:
        return {"cores": self.cores, "cpu_mhz": self.cpu_mhz, "gpu_mhz": self.gpu_mhz, "emc_mhz": self.emc_mhz}

    def as_tuple(self) -> tuple[int, float, float, float]:
        return (self.cores, self.cpu_mhz, self.gpu_mhz, self.emc_mhz)

    @classmethod
    def from_mapping(cls, row: Mapping[str, Any]) -> PowerMode:
        return cls(int(row["cores"]), float(row["cpu_mhz"]), float(row["gpu_mhz"]), float(row["emc_mhz"]))

    def label(self) -> str:
        """Short human form used in plots and logs: ``8c/1344/727/2133``."""
        return f"{self.cores}c/{self.cpu_mhz:g}/{self.gpu_mhz:g}/{self.emc_mhz:g}"

    def __str__(self) -> str:
        return self.label()
