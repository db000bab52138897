"""Device constants of the simulated Jetsons: compute, bandwidth, DVFS curves, rail power.

The time model (``model.py``) needs, per device model, how fast its GPU does work per MHz,
how fast a CPU core is per MHz, how much DRAM bandwidth each EMC MHz buys, and how long a
kernel launch costs. The power model needs a voltage / frequency curve and a switched
capacitance (expressed as watts at the top of the table) for each rail, leakage, and the
always-on base power. Everything is relative to the Orin AGX, on which the workload
profiles are calibrated (docs/papers.md anchors); other devices scale by their public specs:

==============  ======================  ==============  ======================  ===========
device          CPU                     GPU             DRAM (max EMC)          cap (W)
==============  ======================  ==============  ======================  ===========
Orin AGX 32GB   12x A78AE               2048 Ampere     LPDDR5 256b 204.8 GB/s  60
Xavier AGX      8x Carmel (~0.85 A78)   512 Volta       LPDDR4x 256b 136.5 GB/s 50
Orin Nano 8GB   6x A78AE                1024 Ampere     LPDDR5 128b 68 GB/s     15
Nano 4GB        4x A57 (~0.45 A78)      128 Maxwell     LPDDR4 64b 25.6 GB/s    10
TX2 NX          2 Denver2 + 4 A57       256 Pascal      LPDDR4 128b 51.2 GB/s   20
Orin NX 16GB    8x A78AE @ 1984         1024 Ampere     LPDDR5 128b 102.4 GB/s  25
Orin Nano Super 6x A78AE @ 1728         1024 Ampere     LPDDR5 128b 102 GB/s    25
==============  ======================  ==============  ======================  ===========

The Orin NX 16GB and Orin Nano Super profiles are calibrated to NVIDIA's module figures only
(no measured profile of either was available): the Orin Nano's per-MHz GPU rate (same 1024-core
Ampere GPU), the A78AE core of the Orin AGX, the 128-bit LPDDR5 bandwidth at 3199 MHz, and rail
capacitances set so that ResNet-18 training at MAXN / MAXN_SUPER draws about the modules' 25 W
envelope (``tests/unit/test_simulated.py`` checks the envelope) and idle lands near 4-5 W.

``gpu_gflops_per_mhz`` is an *effective* dense training rate: CUDA-core FP32 plus what
TF32 / FP16 tensor cores add for convolutions and GEMMs (Orin AGX: 2048 cores x 2 FLOP = 4.1
GFLOP/s per MHz on CUDA cores, ~8 with tensor cores, i.e. ~10 TFLOP/s at 1.3 GHz; Xavier AGX
~2.6x less per MHz, as its ResNet training measures; Orin Nano half an Orin AGX; Nano and
TX2 NX CUDA cores only: 128 Maxwell / 256 Pascal x 2 FLOP x 0.8). ``bw_gbs_per_mhz`` is the
*achieved* bandwidth (~60 % of the bus peak) per EMC MHz. Voltage curves are
``V(f) = v_min + (v_max - v_min) * (f / f_max) ** gamma``: flat near the bottom of the table
and rising towards the top, as the Tegra DVFS tables do.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from edgetune.powermodes.spec import DeviceSpec

#: Reference point of the workload profiles: Orin AGX, A78AE core at its top clock.
REF_CPU_MHZ = 2201.6
#: DRAM bandwidth at which profile memory traffic fractions were calibrated (Orin AGX, EMC 3199).
REF_BW_GBS = 0.6 * 204.8


@dataclass(frozen=True)
class Rail:
    """One power rail: DVFS voltage curve and its capacitance as watts at (f_max, v_max)."""

    v_min: float  # V at the lowest frequency
    v_max: float  # V at the highest frequency
    gamma: float  # curvature of V(f)
    dyn_w: float  # dynamic power at f_max, v_max, fully busy, activity 1 (per core for the CPU)
    leak_w: float  # leakage at v_max (per online core for the CPU; GPU only while un-gated)
    idle_frac: float  # share of dynamic power a clocked-but-stalled unit still burns


@dataclass(frozen=True)
class HardwareModel:
    """Constants of one device model (see the module table)."""

    name: str
    gpu_gflops_per_mhz: float  # effective dense GFLOP/s per GPU MHz
    cpu_perf: float  # per-core speed per MHz relative to an A78AE
    bw_gbs_per_mhz: float  # DRAM GB/s per EMC MHz (bus width x 2 transfers, derated)
    launch_us: float  # one kernel launch on the main thread, at REF_CPU_MHZ on an A78AE
    cpu: Rail
    gpu: Rail
    emc: Rail  # memory controller + SOC rail (its voltage follows the EMC clock)
    #: Always-on power (regulators, DRAM self-refresh, PLLs, carrier) — derived from the
    #: spec's idle power at its lowest mode unless given.
    base_w: float | None = None
    #: Uncore power while a workload runs (CPU cluster out of deep idle, DRAM out of
    #: power-down, GPU partition of the SOC rail un-gated), at the lowest clocks.
    active_w: float = 0.0
    #: Regulator efficiency: rail power / efficiency is drawn at the module input.
    efficiency: float = 0.9
    #: Fraction of dynamic CPU power an online idle core burns (WFI, timer ticks).
    cpu_idle_frac: float = 0.02


_ORIN_AGX = HardwareModel(  # rails fitted to the docs/papers.md power anchors (model.py table)
    name="orin-agx",
    gpu_gflops_per_mhz=8.0,
    cpu_perf=1.0,
    bw_gbs_per_mhz=0.6 * 204.8 / 3199.0,
    launch_us=9.0,
    cpu=Rail(v_min=0.60, v_max=1.00, gamma=1.6, dyn_w=0.80, leak_w=0.06, idle_frac=0.12),
    gpu=Rail(v_min=0.62, v_max=0.98, gamma=1.7, dyn_w=37.5, leak_w=0.9, idle_frac=0.05),
    emc=Rail(v_min=0.90, v_max=0.96, gamma=0.63, dyn_w=12.0, leak_w=0.0, idle_frac=0.16),
    active_w=3.9,
)

_XAVIER_AGX = HardwareModel(
    name="xavier-agx",
    gpu_gflops_per_mhz=8.0 / 2.6,
    cpu_perf=0.85,
    bw_gbs_per_mhz=0.6 * 136.5 / 2133.0,
    launch_us=11.0,
    cpu=Rail(v_min=0.62, v_max=1.05, gamma=1.6, dyn_w=1.1, leak_w=0.08, idle_frac=0.12),
    gpu=Rail(v_min=0.65, v_max=1.00, gamma=1.7, dyn_w=24.0, leak_w=1.2, idle_frac=0.05),
    emc=Rail(v_min=0.85, v_max=0.95, gamma=0.6, dyn_w=8.0, leak_w=0.0, idle_frac=0.17),
    active_w=3.0,
)

_ORIN_NANO = HardwareModel(
    name="orin-nano",
    gpu_gflops_per_mhz=4.0,
    cpu_perf=1.0,
    bw_gbs_per_mhz=0.6 * 68.0 / 2133.0,
    launch_us=10.0,
    cpu=Rail(v_min=0.60, v_max=0.90, gamma=1.6, dyn_w=0.45, leak_w=0.03, idle_frac=0.12),
    gpu=Rail(v_min=0.62, v_max=0.85, gamma=1.7, dyn_w=6.0, leak_w=0.3, idle_frac=0.05),
    emc=Rail(v_min=0.85, v_max=0.92, gamma=0.6, dyn_w=2.5, leak_w=0.0, idle_frac=0.17),
    active_w=1.0,
)

_NANO = HardwareModel(  # GPU rail set for Ahmed et al.: ResNet18 b=64 fits 5 W up to 460.8 MHz, b=128 4.5 W at 307.2
    name="nano",
    gpu_gflops_per_mhz=128 * 2 * 0.8 / 1000 * 1.6,  # FP16 on Maxwell: 2x rate, partly usable
    cpu_perf=0.45,
    bw_gbs_per_mhz=0.6 * 25.6 / 1600.0,
    launch_us=22.0,
    cpu=Rail(v_min=0.80, v_max=1.12, gamma=1.5, dyn_w=0.50, leak_w=0.03, idle_frac=0.10),
    gpu=Rail(v_min=0.78, v_max=1.10, gamma=2.0, dyn_w=6.0, leak_w=0.35, idle_frac=0.05),
    emc=Rail(v_min=0.85, v_max=0.95, gamma=0.6, dyn_w=1.2, leak_w=0.0, idle_frac=0.17),
    active_w=0.5,
)

_TX2_NX = HardwareModel(
    name="tx2-nx",
    gpu_gflops_per_mhz=256 * 2 * 0.8 / 1000 * 1.6,
    cpu_perf=0.55,
    bw_gbs_per_mhz=0.6 * 51.2 / 1866.0,
    launch_us=16.0,
    cpu=Rail(v_min=0.75, v_max=1.10, gamma=1.5, dyn_w=0.8, leak_w=0.04, idle_frac=0.10),
    gpu=Rail(v_min=0.75, v_max=1.08, gamma=1.5, dyn_w=9.0, leak_w=0.5, idle_frac=0.05),
    emc=Rail(v_min=0.85, v_max=0.95, gamma=0.6, dyn_w=2.5, leak_w=0.0, idle_frac=0.17),
    active_w=1.0,
)

_ORIN_NX = HardwareModel(  # Orin Nano's GPU per MHz, AGX Orin's core, 102.4 GB/s at EMC 3199
    name="orin-nx",
    gpu_gflops_per_mhz=4.0,
    cpu_perf=1.0,
    bw_gbs_per_mhz=0.6 * 102.4 / 3199.0,
    launch_us=9.5,
    cpu=Rail(v_min=0.60, v_max=0.95, gamma=1.6, dyn_w=0.55, leak_w=0.04, idle_frac=0.12),
    gpu=Rail(v_min=0.62, v_max=0.90, gamma=1.7, dyn_w=15.0, leak_w=0.4, idle_frac=0.05),
    emc=Rail(v_min=0.88, v_max=0.95, gamma=0.6, dyn_w=4.0, leak_w=0.0, idle_frac=0.17),
    active_w=1.5,
)

_ORIN_NANO_SUPER = HardwareModel(  # the Orin Nano with MAXN_SUPER clocks and 102 GB/s
    name="orin-nano-super",
    gpu_gflops_per_mhz=4.0,
    cpu_perf=1.0,
    bw_gbs_per_mhz=0.6 * 102.0 / 3199.0,
    launch_us=10.0,
    cpu=Rail(v_min=0.60, v_max=0.92, gamma=1.6, dyn_w=0.5, leak_w=0.03, idle_frac=0.12),
    gpu=Rail(v_min=0.62, v_max=0.90, gamma=1.7, dyn_w=14.0, leak_w=0.35, idle_frac=0.05),
    emc=Rail(v_min=0.88, v_max=0.95, gamma=0.6, dyn_w=3.5, leak_w=0.0, idle_frac=0.17),
    active_w=1.2,
)

HARDWARE: dict[str, HardwareModel] = {h.name: h for h in (_ORIN_AGX, _XAVIER_AGX, _ORIN_NANO, _NANO, _TX2_NX,
                                                          _ORIN_NX, _ORIN_NANO_SUPER)}


def hardware_for(spec: DeviceSpec) -> HardwareModel:
    """The constants for ``spec``: by name, else by SoC, else the Orin AGX scaled to the envelope.

    Unknown specs (a discovered device with a new name) still simulate: the Orin AGX rails are
    scaled so that the top of the tables lands near the spec's ``max_power_w``.
    """
    if spec.name in HARDWARE:
        return HARDWARE[spec.name]
    by_soc = {"t234": _ORIN_AGX, "t194": _XAVIER_AGX, "t210": _NANO, "t186": _TX2_NX}
    base = by_soc.get(spec.soc, _ORIN_AGX)
    ref_max = {"t234": 60.0, "t194": 50.0, "t210": 10.0, "t186": 20.0}.get(spec.soc, 60.0)
    scale = (spec.max_power_w or ref_max) / ref_max
    return replace(
        base,
        name=spec.name,
        gpu=replace(base.gpu, dyn_w=base.gpu.dyn_w * scale, leak_w=base.gpu.leak_w * scale),
        emc=replace(base.emc, dyn_w=base.emc.dyn_w * scale),
    )
