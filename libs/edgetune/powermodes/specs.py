"""Built-in DeviceSpecs: the real frequency tables of the Jetson models edgetune knows.

Tables are those the kernel lists (``scaling_available_frequencies`` for the CPU cluster,
``available_frequencies`` for the GPU devfreq and the EMC table), in MHz. They are the
reference for simulation and planning; a real node discovers its own tables (JetPack
versions differ) through ``SysfsJetson``.

Counts that the papers rely on (docs/papers.md): Orin AGX 32 GB 12 × 29 × 13 × 4 = 18,096
modes; Xavier AGX 8 × 29 × 14 × 9 = 29,232; Nano GPU 76.8 … 921.6 MHz (12 steps).

Presets are written as the caps their nvpmodel.conf sets (CPU in kHz there, GPU / EMC in Hz;
here in MHz) and floored to the tables by :meth:`Preset.from_caps`, the way cpufreq / devfreq
resolve a cap between two table entries; ``None`` is nvpmodel's "no cap" (``-1``, or ``0`` for
the EMC). Where a value comes from, and how sure it is, is said next to it.
"""

from __future__ import annotations

from dataclasses import replace

from edgetune.errors import InvalidArgument
from edgetune.powermodes.spec import DeviceSpec, Preset


def _khz(*values_khz: int) -> tuple[float, ...]:
    return tuple(round(v / 1000.0, 2) for v in values_khz)


def _with_presets(spec: DeviceSpec, *caps: tuple) -> DeviceSpec:
    """``spec`` with presets built from (id, name, cores, cpu_cap, gpu_cap, emc_cap, budget_w) caps in MHz."""
    return replace(spec, presets=tuple(Preset.from_caps(spec, *c) for c in caps))


# Orin (A78AE) and Xavier (Carmel) cpufreq tables step by 76.8 MHz from 115.2 MHz to 2188.8 MHz,
# then end on the SoC's top bin (2201.6 on Orin, 2265.6 on Xavier): 29 entries each.
_A78_CARMEL_CPU_KHZ = tuple(115200 + 76800 * i for i in range(28))

# Jetson AGX Orin Developer Kit, module P3701-0000: 32 GB of memory but the 64 GB module's
# compute (12 A78AE cores, 2048 CUDA cores, GPU up to 1.3 GHz) — the board PowerTrain and Fulcrum
# used. (The production 32 GB module P3701-0004 has 8 cores and a 930 MHz GPU; not this spec.)
# Tables: the 13 GPU and 4 EMC rates and the CPU entries 268.8 … 2112.0, 2201.6 appear verbatim in
# the PowerTrain authors' profiling script (sysfs values in Hz / kHz); 18,096 = 12 × 29 × 13 × 4.
# Presets: nvpmodel_p3701_0000.conf has MAXN, MODE_15W, MODE_30W, MODE_50W (IDs 0-3; an NVIDIA
# forum thread on this devkit confirms 15W = 4 cores online, 30W = 8, 50W and MAXN = 12). The
# caps are those of the Jetson Linux power-mode table; the 15 W EMC cap (3199) is not verified.
ORIN_AGX = _with_presets(
    DeviceSpec(
        name="orin-agx",
        display_name="Jetson AGX Orin Developer Kit 32GB (P3701-0000)",
        soc="t234",
        core_counts=tuple(range(1, 13)),
        cpu_mhz=_khz(*_A78_CARMEL_CPU_KHZ, 2201600),  # 115.2 … 2188.8, 2201.6
        gpu_mhz=_khz(114750, 216750, 318750, 420750, 522750, 624750, 726750, 828750, 930750,
                     1032750, 1134750, 1236750, 1300500),
        emc_mhz=_khz(204000, 665600, 2133000, 3199000),
        idle_power_w=7.5,
        max_power_w=60.0,
        notes="nvpmodel_p3701_0000.conf; 12 cores in three 4-core clusters",
    ),
    (0, "MAXN", 12, None, None, None, None),
    (1, "MODE_15W", 4, 1113.6, 420.75, 3199.0, 15.0),
    (2, "MODE_30W", 8, 1728.0, 624.75, 3199.0, 30.0),
    (3, "MODE_50W", 12, 1497.6, 828.75, 3199.0, 50.0),
)

# Jetson AGX Xavier (T194). GPU table verbatim from gv11b available_frequencies as recorded in
# public Xavier scripts (114750000 … 1377000000 Hz, 14 entries); CPU 29 entries as above;
# EMC 9 rates 204 … 2133 MHz; 29,232 = 8 × 29 × 14 × 9 (docs/papers.md, PowerTrain).
# Presets: nvpmodel_t194.conf (MAXN and MODE_10W / 15W / 30W_ALL / 30W_6CORE / 30W_4CORE /
# 30W_2CORE, IDs 0-6). Caps from the Jetson Linux table reproduced by JetsonHacks: cores
# 8/2/4/8/6/4/2, CPU 1200/1200/1200/1450/1780/2100 MHz, GPU 520/670/900 MHz, EMC 1066/1333/1600
# MHz; the governor floors them (GPU 520 -> 420.75, CPU 1450 -> 1420.8, EMC 1333 -> 1331.2).
XAVIER_AGX = _with_presets(
    DeviceSpec(
        name="xavier-agx",
        display_name="Jetson AGX Xavier 32GB",
        soc="t194",
        core_counts=tuple(range(1, 9)),
        cpu_mhz=_khz(*_A78_CARMEL_CPU_KHZ, 2265600),  # 115.2 … 2188.8, 2265.6
        gpu_mhz=_khz(114750, 216750, 318750, 420750, 522750, 624750, 675750, 828750, 905250,
                     1032750, 1198500, 1236750, 1338750, 1377000),
        emc_mhz=_khz(204000, 408000, 665600, 800000, 1065600, 1331200, 1600000, 1866000, 2133000),
        idle_power_w=8.0,
        max_power_w=50.0,
        notes="nvpmodel_t194.conf; 4 Carmel clusters of 2 cores",
    ),
    (0, "MAXN", 8, None, None, None, None),
    (1, "MODE_10W", 2, 1200.0, 520.2, 1066.0, 10.0),
    (2, "MODE_15W", 4, 1200.0, 670.0, 1333.0, 15.0),
    (3, "MODE_30W_ALL", 8, 1200.0, 900.0, 1600.0, 30.0),
    (4, "MODE_30W_6CORE", 6, 1450.0, 900.0, 1600.0, 30.0),
    (5, "MODE_30W_4CORE", 4, 1780.0, 900.0, 1600.0, 30.0),
    (6, "MODE_30W_2CORE", 2, 2100.0, 900.0, 1600.0, 30.0),
)

# Jetson Orin Nano 8GB (P3767-0003, JetPack 5 / 6 before "Super"). nvpmodel_p3767_0003.conf
# defines exactly 15W (ID 0) and 7W (ID 1); jetson_clocks --show on a 15 W devkit reports CPU max
# 1510400 kHz on 6 cores, GPU 306000000 … 624750000 Hz and EMC max 2133000000 Hz (public log).
# The 7 W caps (4 cores, 960 MHz CPU, 408 MHz GPU) are from the Jetson Linux table, not verified.
ORIN_NANO = _with_presets(
    DeviceSpec(
        name="orin-nano",
        display_name="Jetson Orin Nano 8GB (P3767-0003)",
        soc="t234",
        core_counts=tuple(range(1, 7)),
        cpu_mhz=_khz(115200, 192000, 268800, 345600, 422400, 499200, 576000, 652800, 729600,
                     806400, 883200, 960000, 1036800, 1113600, 1190400, 1267200, 1344000,
                     1420800, 1497600, 1510400),
        gpu_mhz=_khz(306000, 408000, 510000, 612000, 624750),
        emc_mhz=_khz(204000, 665600, 2133000),
        idle_power_w=4.5,
        max_power_w=15.0,
        notes="nvpmodel_p3767_0003.conf",
    ),
    (0, "15W", 6, 1510.4, 624.75, 2133.0, 15.0),
    (1, "7W", 4, 960.0, 408.0, 2133.0, 7.0),
)

# Jetson Nano 4GB (T210). CPU table (15 entries, 102000 … 1479000 kHz) and GPU table (12 entries,
# 76800000 … 921600000 Hz) verbatim in several public Nano scripts; EMC max 1600 MHz per
# jetson_clocks --show. Presets verbatim from nvpmodel_t210_jetson-nano.conf (see
# tests/fixtures/nvpmodel/): MAXN (the 10 W mode) uncapped; 5W: 2 cores, CPU_A57 MAX_FREQ 918000
# (-> 825.6 MHz), GPU MAX_FREQ 640000000 (-> 614.4 MHz, the "7 W -> 614" of docs/papers.md, Ahmed et al.),
# EMC MAX_FREQ 1600000000.
NANO = _with_presets(
    DeviceSpec(
        name="nano",
        display_name="Jetson Nano 4GB",
        soc="t210",
        core_counts=(1, 2, 3, 4),
        cpu_mhz=_khz(102000, 204000, 307200, 403200, 518400, 614400, 710400, 825600, 921600,
                     1036800, 1132800, 1224000, 1326000, 1428000, 1479000),
        gpu_mhz=_khz(76800, 153600, 230400, 307200, 384000, 460800, 537600, 614400, 691200,
                     768000, 844800, 921600),
        emc_mhz=_khz(204000, 408000, 665600, 800000, 1065600, 1331200, 1600000),
        idle_power_w=1.6,
        max_power_w=10.0,
        notes="nvpmodel_t210_jetson-nano.conf",
    ),
    (0, "MAXN", 4, None, None, None, 10.0),
    (1, "5W", 2, 918.0, 640.0, 1600.0, 5.0),
)

# Jetson TX2 NX (T186, 2 Denver + 4 A57 cores). Tables of the TX2 family: CPU 345600 … 2035200 kHz
# (12), GP10B GPU 114750000 … 1300500000 Hz (13) and EMC 204 … 1866 MHz (the rates above the
# 102 MHz floor tiers), verbatim in public TX2 scripts. Presets: the T186 nvpmodel.conf (TX2
# devkit P2771, same SoC and tables; the TX2 NX P3636 file was not found): MAXN, MAXQ (7.5 W),
# MAXP_CORE_ALL / _ARM / _DENVER (15 W). Where clusters differ, the cap is the faster cluster's.
TX2_NX = _with_presets(
    DeviceSpec(
        name="tx2-nx",
        display_name="Jetson TX2 NX",
        soc="t186",
        core_counts=tuple(range(1, 7)),
        cpu_mhz=_khz(345600, 499200, 652800, 806400, 960000, 1113600, 1267200, 1420800, 1574400,
                     1728000, 1881600, 2035200),
        gpu_mhz=_khz(114750, 216750, 318750, 420750, 522750, 624750, 726750, 854250, 930750,
                     1032750, 1122000, 1236750, 1300500),
        emc_mhz=_khz(204000, 408000, 665600, 800000, 1062400, 1331200, 1600000, 1866000),
        idle_power_w=2.5,
        max_power_w=20.0,
        notes="T186 nvpmodel.conf (tests/fixtures/nvpmodel/nvpmodel_t186_tx2.conf)",
    ),
    (0, "MAXN", 6, None, None, None, None),
    (1, "MAXQ", 4, 1200.0, 850.0, 1331.2, 7.5),
    (2, "MAXP_CORE_ALL", 6, 1400.0, 1120.0, 1600.0, 15.0),
    (3, "MAXP_CORE_ARM", 4, 2000.0, 1120.0, 1600.0, 15.0),
    (4, "MAXP_CORE_DENVER", 2, 2035.2, 1120.0, 1600.0, 15.0),
)

# Jetson Orin NX 16GB (P3767-0000), JetPack 5 / 6 power modes (nvpmodel_p3767_0000.conf, not the
# "Super" file). Tables: CPU 115200 … 1958400 kHz in 76.8 MHz steps then 1984000 (26 entries) and
# GPU 306000000 … 918000000 Hz (7 entries), both verbatim in the comment header of a public Orin NX
# TensorRT GPU/DLA power benchmark script (lists read from scaling_available_frequencies and the
# ga10b devfreq available_frequencies). EMC: 204 / 665.6 / 2133 / 3199 MHz, the T234 EMC table of
# the AGX Orin (same memory controller); the NX's own possible_rates was not found, but its 10W
# model caps EMC at 2133000000 while the others lift the cap, and 3199 MHz x 2 x 16 B is the
# module's documented 102.4 GB/s. Presets verbatim from the conf (tests/fixtures/nvpmodel/
# nvpmodel_p3767_0000_orin_nx.conf): MAXN, 10W, 15W, 25W; 5,824 = 8 x 26 x 7 x 4 modes.
# (Orin NX 8GB, P3767-0001, has 6 cores and a lower GPU cap; its tables were not found.)
ORIN_NX = _with_presets(
    DeviceSpec(
        name="orin-nx",
        display_name="Jetson Orin NX 16GB (P3767-0000)",
        soc="t234",
        core_counts=tuple(range(1, 9)),
        cpu_mhz=_khz(*(115200 + 76800 * i for i in range(25)), 1984000),  # 115.2 … 1958.4, 1984.0
        gpu_mhz=_khz(306000, 408000, 510000, 612000, 714000, 816000, 918000),
        emc_mhz=_khz(204000, 665600, 2133000, 3199000),
        idle_power_w=4.0,
        max_power_w=25.0,
        notes="nvpmodel_p3767_0000.conf; two 4-core A78AE clusters (cpu0-3, cpu4-7)",
    ),
    (0, "MAXN", 8, None, None, None, None),
    (1, "10W", 4, 1190.4, 612.0, 2133.0, 10.0),
    (2, "15W", 4, 1651.2, 612.0, None, 15.0),
    (3, "25W", 8, 1497.6, 408.0, None, 25.0),
)

# Jetson Orin Nano 8GB (P3767-0003) with the JetPack 6.1+ "Super" power modes
# (nvpmodel_p3767_0003_super.conf, shipped with L4T R36.4: 15W, 25W, MAXN_SUPER). Tables: GPU
# 306000000 … 1020000000 Hz (8 devfreq points, 102 MHz apart) as swept in a public Orin Nano
# Super EMC/GPU estimator campaign script; 1020 MHz is the MAXN_SUPER GPU clock users report
# (jetson_clocks on MAXN_SUPER: "306-918 MHz under the governor -> 1020 MHz fixed"). CPU: the
# A78AE 76.8 MHz ladder from 115.2 MHz up to 1728.0 MHz (22 entries): the ladder is the T234
# cpufreq table of every Orin above, the 1.7 GHz top is NVIDIA's Super CPU clock, and the conf's
# caps (1497600, 1344000 kHz) are ladder entries; the board's own scaling_available_frequencies
# was not found verbatim. EMC 204 / 665.6 / 2133 / 3199 MHz: the T234 table; 2133000000 and
# 3199000000 are the conf's own 15W / 25W caps, and the campaign locks the EMC at 3199, 2133 and
# 665.6 MHz. 4,224 = 6 x 22 x 8 x 4 modes.
ORIN_NANO_SUPER = _with_presets(
    DeviceSpec(
        name="orin-nano-super",
        display_name="Jetson Orin Nano 8GB Super (P3767-0003, MAXN_SUPER)",
        soc="t234",
        core_counts=tuple(range(1, 7)),
        cpu_mhz=_khz(*(115200 + 76800 * i for i in range(22))),  # 115.2 … 1728.0
        gpu_mhz=_khz(*(306000 + 102000 * i for i in range(8))),  # 306 … 1020
        emc_mhz=_khz(204000, 665600, 2133000, 3199000),
        idle_power_w=4.5,
        max_power_w=25.0,
        notes="nvpmodel_p3767_0003_super.conf; one CPU clock per core in the conf",
    ),
    (0, "15W", 6, 1497.6, 612.0, 2133.0, 15.0),
    (1, "25W", 6, 1344.0, 918.0, 3199.0, 25.0),
    (2, "MAXN_SUPER", 6, None, None, None, None),
)

#: Jetson AGX Thor (T264, JetPack 7): what public sources confirm, and no more. Its cpufreq,
#: GPU devfreq and EMC tables and its nvpmodel_p3834_0008.conf power models were not found in
#: any public source reachable here, so there is no built-in Thor spec (a Thor node discovers
#: its own tables through SysfsJetson). Confirmed: 14 Neoverse-V3AE cores, CPU pinned at
#: 2601000 kHz in a public benchmark auditor, GPU 1575000000 Hz under MAXN in a public preflight
#: test, EMC 4266000000 Hz under jetson_clocks on the devfreq node /sys/class/devfreq/bwmgr (public
#: Thor benchmark scripts), GPU devfreq nodes /sys/class/devfreq/gpu-gpc-0 and gpu-nvd-0 (jetson-stats),
#: cpufreq policies on cpu0, 2, 4, … 12 (two-core clusters, per NVIDIA Sionna's Jetson tuning
#: guide), power models MAXN (ID 0), 120W (ID 1, default), 90W, 70W, and the dev kit's
#: compatible "nvidia,p3971-0089+p3834-0008" (upstream tegra.yaml binding).
THOR_KNOWN = {"cores": 14, "cpu_max_mhz": 2601.0, "gpu_max_mhz": 1575.0, "emc_max_mhz": 4266.0, "soc": "t264",
              "presets": ("MAXN", "120W", "90W", "70W")}

#: Every built-in spec by CLI name.
SPECS: dict[str, DeviceSpec] = {s.name: s for s in (ORIN_AGX, XAVIER_AGX, ORIN_NANO, NANO, TX2_NX, ORIN_NX,
                                                     ORIN_NANO_SUPER)}
#: Models edgetune recognises but has no table for: the name, and why.
UNTABULATED: dict[str, str] = {
    "thor": "the Jetson AGX Thor's frequency tables and nvpmodel power models are not published in any source "
            "edgetune could cite; run `edgetune device --device sysfs` on a Thor to discover them",
}


def get_spec(name: str) -> DeviceSpec:
    """The built-in spec called ``name`` (see :data:`SPECS`)."""
    try:
        return SPECS[name]
    except KeyError:
        if name in UNTABULATED:
            raise InvalidArgument("device", f"no built-in spec for {name!r}: {UNTABULATED[name]}",
                                  ", ".join(SPECS)) from None
        raise InvalidArgument("device", f"unknown device {name!r}", ", ".join(SPECS)) from None
