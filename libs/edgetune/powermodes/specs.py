"""Built-in DeviceSpecs: the real frequency tables of the Jetson models edgetune knows.

Tables are those the kernel lists (``scaling_available_frequencies`` for the CPU cluster,
``available_frequencies`` for the GPU devfreq and the EMC table), in MHz. They are the
reference for simulation and planning; a real node discovers its own tables (JetPack
versions differ) through ``SysfsJetson``.

Counts that the papers rely on (REFERENCE.md): Orin AGX 32 GB 12 × 29 × 13 × 4 = 18,096
modes; Xavier AGX 8 × 29 × 14 × 9 = 29,232; Nano GPU 76.8 … 921.6 MHz (12 steps).
"""

from __future__ import annotations

from edgetune.errors import InvalidArgument
from edgetune.powermodes.spec import DeviceSpec, Preset


def _khz(*values_khz: int) -> tuple[float, ...]:
    return tuple(round(v / 1000.0, 2) for v in values_khz)


# Orin and Xavier CPU clusters step by 76.8 MHz from 115.2 MHz.
_CARMEL_A78_CPU_KHZ = tuple(115200 + 76800 * i for i in range(28))

ORIN_AGX = DeviceSpec(
    name="orin-agx",
    display_name="Jetson AGX Orin 32GB",
    soc="t234",
    core_counts=tuple(range(1, 13)),
    cpu_mhz=_khz(*_CARMEL_A78_CPU_KHZ, 2201600),  # 115.2 … 2188.8, 2201.6
    gpu_mhz=_khz(114750, 216750, 318750, 420750, 522750, 624750, 726750, 828750, 930750,
                 1032750, 1134750, 1236750, 1300500),
    emc_mhz=_khz(204000, 665600, 2133000, 3199000),
    presets=(
        Preset(0, "MAXN", 12, 2201.6, 1300.5, 3199.0, None),
        Preset(1, "MODE_15W", 4, 1113.6, 420.75, 3199.0, 15.0),
        Preset(2, "MODE_30W", 8, 1728.0, 624.75, 3199.0, 30.0),
        Preset(3, "MODE_50W", 12, 1497.6, 828.75, 3199.0, 50.0),
    ),
    idle_power_w=7.5,
    max_power_w=60.0,
)

XAVIER_AGX = DeviceSpec(
    name="xavier-agx",
    display_name="Jetson AGX Xavier 32GB",
    soc="t194",
    core_counts=tuple(range(1, 9)),
    cpu_mhz=_khz(*_CARMEL_A78_CPU_KHZ, 2265600),  # 115.2 … 2188.8, 2265.6
    gpu_mhz=_khz(114750, 216750, 318750, 420750, 522750, 624750, 675750, 828750, 905250,
                 1032750, 1198500, 1236750, 1338750, 1377000),
    emc_mhz=_khz(204000, 408000, 665600, 800000, 1065600, 1331200, 1600000, 1866000, 2133000),
    presets=(
        Preset(0, "MAXN", 8, 2265.6, 1377.0, 2133.0, None),
        Preset(1, "MODE_10W", 2, 1190.4, 522.75, 1066.0, 10.0),
        Preset(2, "MODE_15W", 4, 1190.4, 675.75, 1333.0, 15.0),
        Preset(3, "MODE_30W_ALL", 8, 1190.4, 905.25, 1600.0, 30.0),
    ),
    idle_power_w=8.0,
    max_power_w=50.0,
)

ORIN_NANO = DeviceSpec(
    name="orin-nano",
    display_name="Jetson Orin Nano 8GB",
    soc="t234",
    core_counts=tuple(range(1, 7)),
    cpu_mhz=_khz(115200, 192000, 268800, 345600, 422400, 499200, 576000, 652800, 729600,
                 806400, 883200, 960000, 1036800, 1113600, 1190400, 1267200, 1344000,
                 1420800, 1497600, 1510400),
    gpu_mhz=_khz(306000, 408000, 510000, 612000, 624750),
    emc_mhz=_khz(204000, 665600, 2133000),
    presets=(
        Preset(0, "15W", 6, 1510.4, 624.75, 2133.0, 15.0),
        Preset(1, "7W", 4, 960.0, 408.0, 2133.0, 7.0),
    ),
    idle_power_w=4.5,
    max_power_w=15.0,
)

NANO = DeviceSpec(
    name="nano",
    display_name="Jetson Nano 4GB",
    soc="t210",
    core_counts=(1, 2, 3, 4),
    cpu_mhz=_khz(102000, 204000, 307200, 403200, 518400, 614400, 710400, 825600, 921600,
                 1036800, 1132800, 1224000, 1326000, 1428000, 1479000),
    gpu_mhz=_khz(76800, 153600, 230400, 307200, 384000, 460800, 537600, 614400, 691200,
                 768000, 844800, 921600),
    emc_mhz=_khz(204000, 408000, 665600, 800000, 1065600, 1331200, 1600000),
    presets=(
        Preset(0, "MAXN", 4, 1479.0, 921.6, 1600.0, 10.0),
        Preset(1, "5W", 2, 918.0, 640.0, 1600.0, 5.0),
    ),
    idle_power_w=1.6,
    max_power_w=10.0,
)

TX2_NX = DeviceSpec(
    name="tx2-nx",
    display_name="Jetson TX2 NX",
    soc="t186",
    core_counts=tuple(range(1, 7)),
    cpu_mhz=_khz(345600, 499200, 652800, 806400, 960000, 1113600, 1267200, 1420800, 1574400,
                 1728000, 1881600, 2035200),
    gpu_mhz=_khz(114750, 216750, 318750, 420750, 522750, 624750, 726750, 854250, 930750,
                 1032750, 1122000, 1236750, 1300500),
    emc_mhz=_khz(204000, 408000, 665600, 800000, 1062400, 1331200, 1600000, 1866000),
    presets=(
        Preset(0, "MAXN", 6, 2035.2, 1300.5, 1866.0, None),
        Preset(1, "MODE_10W_DESKTOP", 4, 1420.8, 854.25, 1866.0, 10.0),
        Preset(2, "MODE_15W_DESKTOP", 6, 1420.8, 1122.0, 1866.0, 15.0),
    ),
    idle_power_w=2.5,
    max_power_w=20.0,
)

#: Every built-in spec by CLI name.
SPECS: dict[str, DeviceSpec] = {s.name: s for s in (ORIN_AGX, XAVIER_AGX, ORIN_NANO, NANO, TX2_NX)}


def get_spec(name: str) -> DeviceSpec:
    """The built-in spec called ``name`` (``orin-agx``, ``xavier-agx``, ``orin-nano``, ``nano``, ``tx2-nx``)."""
    try:
        return SPECS[name]
    except KeyError:
        raise InvalidArgument("device", f"unknown device {name!r}", ", ".join(SPECS)) from None
