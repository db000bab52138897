"""The physical model: minibatch time and board power for arrays of power modes.

Time of one minibatch (all terms in ms, every array over modes)::

    t_compute = GFLOP / (gflops_per_mhz * f_gpu * gpu_eff * b / (b + batch_half))
    t_memory  = MB / bandwidth(f_emc)                        # roofline: 204 / 665 MHz EMC is slow
    t_gpu     = smax(t_compute, t_memory; 2)                 # smooth roofline corner
    t_main    = (kernels * launch_us + host_ms) * cpu_factor # launch-bound main thread
    t_step    = smax(t_main, t_gpu; 3) + fixed_ms            # launches overlap kernels
    t_data    = data_ms * b * cpu_factor / smin(workers, cores)
    t_pipe    = smax(t_data, t_step; overlap_p)              # DataLoader overlaps the step
    t_share   = (data work + main work) / cores              # few cores: processes time-share
    time      = smax(t_pipe, t_share; 6)

with ``smax(a, b; p) = (a^p + b^p)^(1/p)``: time falls with each clock and then saturates
once another term dominates, so the knee sits where the CPU and GPU terms are equal
(f_cpu / f_gpu about 1-3 for the vision workloads). ``cpu_factor`` mixes a CPU-clock part
and a DRAM-stall part, so memory frequency slows the data pipeline too.

Power (W) = base + (P_cpu + P_gpu + P_emc) / efficiency, each rail
``dyn_w * (f/f_max) * (V(f)/V_max)^2 * (idle_frac + (1 - idle_frac) * busy)`` plus leakage
``~V^3`` per online core, ``~V^2`` on the GPU rail while it runs (power-gated at idle), and
an uncore ``active_w`` while a workload runs. ``busy`` is the rail's
utilisation over the minibatch: GPU compute time / minibatch time (the idle SMs of small
batches count less, memory stalls not at all), busy CPU core-equivalents (compute part only), DRAM traffic time. A faster
clock therefore raises power even when the unit waits (clock tree, imperfect gating), and
every utilisation rises when the minibatch gets shorter.

Calibration (Orin AGX, batch 16 unless noted; tests/unit/test_simulated.py checks them):

=====================================================  ==============  ==================
anchor                                                 target          model
=====================================================  ==============  ==================
ResNet18 train MAXN                                    60 ms, 51.1 W   see test output
ResNet18 train 4c/422.4/114.75/665.6                   490 ms, 14.7 W
ResNet18 train 2c/268.8/114.75/204 (PowerTrain min)    2150 ms, 11.8 W
MobileNetV3 / YOLOv8n / BERT-base / LSTM train MAXN    96 / 188 / 940 / 11 ms, BERT 57 W
MobileNetV3 infer MAXN bs1 / bs32 / bs64               18 / 54 / 102 ms, 20.9 / 38.2 / 39.5 W
MobileNetV3 infer 4c/422.4/114.75/665.6 bs64           1026 ms, 14 W
BERT-large infer MAXN bs1 / bs32                       66 / 1940 ms, 56 / 61.8 W
=====================================================  ==============  ==================
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, TypeVar

import numpy as np

from edgetune.errors import InvalidArgument
from edgetune.physics.hardware import REF_BW_GBS, REF_CPU_MHZ, HardwareModel, Rail
from edgetune.powermodes.spec import DeviceSpec


class MinibatchWork(Protocol):
    """The device-independent work of one minibatch that :meth:`PhysicalModel.evaluate` prices (the
    simulator's ``RoleProfile`` is one; the layer costing builds its own): a protocol, so that the
    physics needs no device backend."""

    @property
    def gflop_per_sample(self) -> float: ...
    @property
    def gpu_eff(self) -> float: ...
    @property
    def batch_half(self) -> float: ...
    @property
    def gpu_mb_per_sample(self) -> float: ...
    @property
    def gpu_mb_fixed(self) -> float: ...
    @property
    def kernels(self) -> int: ...
    @property
    def host_ms(self) -> float: ...
    @property
    def data_ms_per_sample(self) -> float: ...
    @property
    def data_mem_frac(self) -> float: ...
    @property
    def workers(self) -> float: ...
    @property
    def overlap_p(self) -> float: ...
    @property
    def fixed_ms(self) -> float: ...
    @property
    def gpu_activity(self) -> float: ...
    @property
    def cpu_activity(self) -> float: ...

#: Share of full dynamic power that an under-occupied GPU (small batch) burns while computing.
GPU_STALL_ACTIVITY = 0.3
#: Share of the main thread's work that waits on DRAM.
MAIN_MEM_FRAC = 0.1
#: Share of the data pipeline's DRAM-stall time that shows up as EMC traffic.
DATA_TRAFFIC_SHARE = 0.25


F = TypeVar("F", float, np.ndarray)


def smax(a: F, b: F, p: float) -> F:
    """Smooth maximum ``(a^p + b^p)^(1/p)``: ``a + b`` at p = 1, ``max(a, b)`` as p grows."""
    return (a**p + b**p) ** (1.0 / p)


def smin(a: np.ndarray | float, b: np.ndarray | float, p: float = 6.0) -> np.ndarray:
    """Smooth minimum ``(a^-p + b^-p)^(-1/p)`` of positive numbers."""
    return (np.asarray(a, dtype=float) ** -p + np.asarray(b, dtype=float) ** -p) ** (-1.0 / p)


def voltage(rail: Rail, f_rel: np.ndarray) -> np.ndarray:
    """DVFS voltage at relative frequency ``f / f_max`` (flat low, rising towards the top)."""
    return rail.v_min + (rail.v_max - rail.v_min) * np.clip(f_rel, 0.0, 1.0) ** rail.gamma


@dataclass(frozen=True)
class Breakdown:
    """Noise-free time and power for an array of modes, with the terms behind them."""

    time_ms: np.ndarray
    power_w: np.ndarray
    idle_power_w: np.ndarray
    t_gpu_ms: np.ndarray
    t_data_ms: np.ndarray
    t_main_ms: np.ndarray
    gpu_util: np.ndarray
    cpu_busy_cores: np.ndarray


def as_mode_array(modes) -> np.ndarray:
    """``(n, 4)`` float array [cores, cpu_mhz, gpu_mhz, emc_mhz] from modes, tuples or an array."""
    if isinstance(modes, np.ndarray):
        arr = modes.astype(float, copy=False)
    else:
        rows = [m.as_tuple() if hasattr(m, "as_tuple") else tuple(m) for m in modes]
        arr = np.asarray(rows, dtype=float)
    arr = np.atleast_2d(arr)
    if arr.ndim != 2 or arr.shape[1] != 4:
        raise InvalidArgument("modes", f"expected an (n, 4) array, got shape {arr.shape}",
                              "columns cores, cpu_mhz, gpu_mhz, emc_mhz")
    return arr


class PhysicalModel:
    """Time and power of one device model (spec + hardware constants), vectorised over modes."""

    def __init__(self, spec: DeviceSpec, hw: HardwareModel) -> None:
        self.spec = spec
        self.hw = hw
        self._f_max = np.array([spec.cpu_mhz[-1], spec.gpu_mhz[-1], spec.emc_mhz[-1]], dtype=float)
        if hw.base_w is not None:
            self.base_w = hw.base_w
        else:
            # The spec's idle power is the board at idle in its lowest mode: the always-on rest.
            rails_idle = self._rails_idle_w(as_mode_array([spec.minimum().as_tuple()]))[0]
            self.base_w = max(spec.idle_power_w - rails_idle / hw.efficiency, 0.2 * spec.idle_power_w)

    # -- power pieces ------------------------------------------------------------------------
    def _rel(self, m: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return m[:, 1] / self._f_max[0], m[:, 2] / self._f_max[1], m[:, 3] / self._f_max[2]

    def _cpu_scale(self, rc: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        v = voltage(self.hw.cpu, rc) / self.hw.cpu.v_max
        return self.hw.cpu.dyn_w * rc * v**2, self.hw.cpu.leak_w * v**3

    def _rails_idle_w(self, m: np.ndarray) -> np.ndarray:
        hw = self.hw
        rc, _, re = self._rel(m)
        cpu_dyn, cpu_leak = self._cpu_scale(rc)
        ve = voltage(hw.emc, re) / hw.emc.v_max
        p_cpu = m[:, 0] * (cpu_leak + cpu_dyn * hw.cpu_idle_frac)
        p_emc = hw.emc.dyn_w * re * ve**2 * hw.emc.idle_frac
        return p_cpu + p_emc  # the GPU rail is power-gated at idle

    def idle_power_w(self, modes) -> np.ndarray:
        m = as_mode_array(modes)
        return self.base_w + self._rails_idle_w(m) / self.hw.efficiency

    # -- the model ---------------------------------------------------------------------------
    def evaluate(self, prof: MinibatchWork, modes, batch_size: int) -> Breakdown:
        hw = self.hw
        m = as_mode_array(modes)
        cores, f_cpu, f_gpu, f_emc = m[:, 0], m[:, 1], m[:, 2], m[:, 3]
        b = float(batch_size)

        # Time ----------------------------------------------------------------------------
        bw_gbs = hw.bw_gbs_per_mhz * f_emc
        mem_stretch = REF_BW_GBS / bw_gbs  # DRAM stalls vs the calibration point
        cpu_stretch = REF_CPU_MHZ / (f_cpu * hw.cpu_perf)

        occupancy = b / (b + prof.batch_half)
        t_compute = 1000.0 * prof.gflop_per_sample * b / (hw.gpu_gflops_per_mhz * f_gpu * prof.gpu_eff * occupancy)
        traffic_mb = prof.gpu_mb_per_sample * b + prof.gpu_mb_fixed
        t_memory = traffic_mb / bw_gbs
        t_gpu = smax(t_compute, t_memory, 2.0)

        main_ref_ms = prof.kernels * hw.launch_us / 1000.0 + prof.host_ms
        t_main = main_ref_ms * ((1 - MAIN_MEM_FRAC) * cpu_stretch + MAIN_MEM_FRAC * mem_stretch)
        t_step = smax(t_main, t_gpu, 3.0) + prof.fixed_ms

        phi = prof.data_mem_frac
        data_work = prof.data_ms_per_sample * b * ((1 - phi) * cpu_stretch + phi * mem_stretch)
        t_data = data_work / smin(prof.workers, cores)
        t_pipe = smax(t_data, t_step, prof.overlap_p)
        t_share = (data_work + t_main) / cores
        time_ms = smax(t_pipe, t_share, 6.0)

        # Power ---------------------------------------------------------------------------
        rc, rg, re = self._rel(m)
        cpu_dyn, cpu_leak = self._cpu_scale(rc)
        busy_cores = (prof.data_ms_per_sample * b * (1 - phi) + main_ref_ms * (1 - MAIN_MEM_FRAC)) * cpu_stretch / time_ms
        p_cpu = cores * cpu_leak + cpu_dyn * (
            hw.cpu.idle_frac * cores + (1 - hw.cpu.idle_frac) * busy_cores * prof.cpu_activity)

        vg = voltage(hw.gpu, rg) / hw.gpu.v_max
        gpu_util = t_gpu / time_ms
        # Energy follows useful work: full-occupancy compute counts fully, the idle SMs of a
        # small batch at GPU_STALL_ACTIVITY; SMs waiting on DRAM are clock-gated (idle_frac),
        # so faster memory never lowers GPU power.
        t_full = t_compute * occupancy
        gpu_busy = (GPU_STALL_ACTIVITY * t_compute + (1 - GPU_STALL_ACTIVITY) * t_full) / time_ms
        p_gpu = hw.gpu.leak_w * vg**2 + hw.gpu.dyn_w * rg * vg**2 * prof.gpu_activity * (
            hw.gpu.idle_frac + (1 - hw.gpu.idle_frac) * gpu_busy)

        ve = voltage(hw.emc, re) / hw.emc.v_max
        traffic = np.minimum(1.0, (t_memory + DATA_TRAFFIC_SHARE * prof.data_ms_per_sample * b * phi * mem_stretch)
                             / time_ms)
        p_emc = hw.emc.dyn_w * re * ve**2 * (hw.emc.idle_frac + (1 - hw.emc.idle_frac) * traffic)

        power_w = self.base_w + hw.active_w + (p_cpu + p_gpu + p_emc) / hw.efficiency
        return Breakdown(
            time_ms=time_ms, power_w=power_w, idle_power_w=self.idle_power_w(m), t_gpu_ms=t_gpu,
            t_data_ms=t_data, t_main_ms=t_main, gpu_util=gpu_util, cpu_busy_cores=busy_cores,
        )
