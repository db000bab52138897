"""DeviceSpec: what a Jetson model offers — frequency tables, core counts, nvpmodel presets.

Specs carry the real tables of each device model (as the kernel lists them in
``scaling_available_frequencies`` / ``available_frequencies``, rounded to MHz as they are
printed by jtop). Tables differ between JetPack versions, so a real device discovers its own
(``SysfsJetson.spec``) and the built-in specs are the reference for simulation and planning.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from dataclasses import dataclass, field

from edgetune.base.mode import PowerMode
from edgetune.errors import InvalidArgument

#: Relative tolerance when matching a frequency against a table (sysfs kHz vs MHz rounding).
FREQ_MATCH_REL_TOL = 1e-3


@dataclass(frozen=True)
class Preset:
    """An nvpmodel power model: an id, a name and the caps it sets."""

    id: int
    name: str
    cores: int
    cpu_max_mhz: float
    gpu_max_mhz: float
    emc_max_mhz: float
    #: Nominal power budget of the preset (``MODE_15W`` -> 15.0); ``None`` for MAXN.
    budget_w: float | None = None

    def mode(self) -> PowerMode:
        """The mode the preset runs at when the governors sit at their caps."""
        return PowerMode(self.cores, self.cpu_max_mhz, self.gpu_max_mhz, self.emc_max_mhz)

    @classmethod
    def from_caps(
        cls,
        spec: DeviceSpec,
        id: int,
        name: str,
        cores: int,
        cpu_cap_mhz: float | None,
        gpu_cap_mhz: float | None,
        emc_cap_mhz: float | None,
        budget_w: float | None = None,
    ) -> Preset:
        """A preset from nvpmodel-style caps, each floored to ``spec``'s table as the governor does.

        ``None`` means "no cap" (nvpmodel's ``-1``, or ``0`` for the EMC): the table's highest entry.
        """
        if cores not in spec.core_counts:
            raise InvalidArgument("cores", f"preset {name!r} puts {cores} cores online on {spec.name}",
                                  _describe(tuple(float(c) for c in spec.core_counts)))
        return cls(
            id, name, int(cores),
            spec.floor("cpu_mhz", cpu_cap_mhz), spec.floor("gpu_mhz", gpu_cap_mhz), spec.floor("emc_mhz", emc_cap_mhz),
            budget_w,
        )


@dataclass(frozen=True)
class DeviceSpec:
    """A device model's power-mode space.

    ``core_counts`` lists the valid numbers of online CPU cores (1..N on most Jetsons; the
    first core can never go offline). Frequency tables are ascending tuples in MHz.
    """

    name: str  # CLI name: "orin-agx"
    display_name: str  # "Jetson AGX Orin 32GB"
    core_counts: tuple[int, ...]
    cpu_mhz: tuple[float, ...]
    gpu_mhz: tuple[float, ...]
    emc_mhz: tuple[float, ...]
    presets: tuple[Preset, ...] = ()
    #: Board power at idle in the lowest mode and the highest power seen under load (W).
    idle_power_w: float = 0.0
    max_power_w: float = 0.0
    soc: str = ""  # "t234"
    notes: str = ""
    extra: dict = field(default_factory=dict, compare=False, hash=False)

    # -- sizes -----------------------------------------------------------------------------
    @property
    def max_cores(self) -> int:
        return max(self.core_counts)

    @property
    def n_modes(self) -> int:
        return len(self.core_counts) * len(self.cpu_mhz) * len(self.gpu_mhz) * len(self.emc_mhz)

    def table(self, dim: str) -> tuple[float, ...]:
        """The allowed values of one dimension (``cores``, ``cpu_mhz``, ``gpu_mhz``, ``emc_mhz``)."""
        if dim == "cores":
            return tuple(float(c) for c in self.core_counts)
        if dim in ("cpu_mhz", "gpu_mhz", "emc_mhz"):
            return getattr(self, dim)
        raise InvalidArgument("dimension", f"unknown dimension {dim!r}", "cores, cpu_mhz, gpu_mhz, emc_mhz")

    # -- special modes ---------------------------------------------------------------------
    def maxn(self) -> PowerMode:
        """Every core online, every clock at its highest entry."""
        return PowerMode(self.max_cores, self.cpu_mhz[-1], self.gpu_mhz[-1], self.emc_mhz[-1])

    def minimum(self) -> PowerMode:
        return PowerMode(min(self.core_counts), self.cpu_mhz[0], self.gpu_mhz[0], self.emc_mhz[0])

    def preset(self, key: int | str) -> Preset:
        for p in self.presets:
            if p.id == key or p.name == key:
                return p
        names = ", ".join(f"{p.id}:{p.name}" for p in self.presets) or "none"
        raise InvalidArgument("preset", f"{self.name} has no preset {key!r}", names)

    # -- validation ------------------------------------------------------------------------
    def snap(self, dim: str, value: float) -> float:
        """Return the table entry equal to ``value`` (within rounding) or raise naming the field."""
        table = self.table(dim)
        i = bisect_left(table, value)
        for j in (i - 1, i):
            if 0 <= j < len(table) and abs(table[j] - value) <= FREQ_MATCH_REL_TOL * max(table[j], 1.0):
                return table[j]
        raise InvalidArgument(dim, f"{value:g} is not a {self.name} {dim} value", _describe(table))

    def floor(self, dim: str, cap: float | None) -> float:
        """The highest table entry at or below ``cap``: what a governor runs at under that cap.

        cpufreq (``scaling_max_freq``) and devfreq (``max_freq``) both resolve a cap that falls
        between two table entries to the lower one. ``None`` means uncapped (the top entry); a cap
        below the lowest entry gives the lowest entry, since a clock cannot stop.
        """
        table = self.table(dim)
        if cap is None:
            return table[-1]
        # a cap printed in MHz may sit a hair below the kHz table value it names (1190.4 vs 1190.39)
        i = bisect_right(table, cap * (1 + FREQ_MATCH_REL_TOL * 1e-3))
        return table[max(i - 1, 0)]

    def index(self, dim: str, value: float) -> int:
        """Position of ``value`` in the ``dim`` table (within rounding); raises naming the field."""
        return self.table(dim).index(self.snap(dim, value))

    def validate(self, mode: PowerMode) -> PowerMode:
        """Check every field of ``mode`` against the tables; return it with exact table values.

        Raises :class:`InvalidArgument` naming the first bad field and the allowed values.
        """
        if int(mode.cores) != mode.cores or mode.cores not in self.core_counts:
            raise InvalidArgument("cores", f"{mode.cores} cores is not valid on {self.name}",
                                  _describe(tuple(float(c) for c in self.core_counts)))
        return PowerMode(
            int(mode.cores),
            self.snap("cpu_mhz", mode.cpu_mhz),
            self.snap("gpu_mhz", mode.gpu_mhz),
            self.snap("emc_mhz", mode.emc_mhz),
        )

    def contains(self, mode: PowerMode) -> bool:
        try:
            self.validate(mode)
        except InvalidArgument:
            return False
        return True


def _describe(table: tuple[float, ...]) -> str:
    vals = [f"{v:g}" for v in table]
    if len(vals) > 8:
        return f"{len(vals)} values: " + " ".join(vals[:3]) + " … " + " ".join(vals[-3:])
    return " ".join(vals)
