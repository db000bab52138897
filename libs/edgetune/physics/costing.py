"""Layer-by-layer costing of any network (its layer records) on a Jetson model in one power mode.

The Jetsons' minibatch model (:mod:`edgetune.physics.model`, the simulator's) prices a whole
workload from a calibrated profile; this module prices an arbitrary network from its layers,
which is what the layer-wise estimators (NeuralPower, THOR) profile against and the energy
RPC fits THOR with. It shares the device's hardware constants and rail power with the
simulator (:mod:`edgetune.physics`), never loading the simulated device itself. Each leaf-module call (see
:mod:`edgetune.workloads.layers`) becomes GPU kernels on a roofline whose
compute efficiency depends on the layer's shape, not only its FLOPs:

* GEMM-like layers (conv, linear, matmul) run as ``M × N`` output tiles of ``TILE_M × TILE_N``
  (``M`` = batch × output pixels, ``N`` = output channels per group, ``K`` = reduction length).
  Tiles are thread blocks, ``CTAS_PER_SM`` per SM: a layer with few tiles leaves SMs idle,
  and the last wave of a large one is partly empty (wave quantisation: time steps up as
  channels grow). Partly filled tiles waste lanes (small channel counts), and a short ``K``
  does not amortise loading the tiles (``K / (K + K_HALF)``). So efficiency is a saturating,
  stepped function of channels × spatial size × batch: small layers burn more energy per FLOP.
* Depthwise convolutions run at ``DEPTHWISE_EFF`` of peak; element-wise layers (norm,
  activation, pooling) are memory-bound and need enough threads to saturate DRAM.
* Every kernel costs a launch on the CPU main thread (``launch_us`` at the reference clock,
  stretched at lower ``cpu_mhz``), and every module call eager PyTorch's host work
  (``OP_HOST_US``: Python, dispatcher, autograd); host work overlaps the GPU
  (``smax(..., 3)``), so a small layer is CPU-bound and its time follows ``cpu_mhz``, not
  its FLOPs.
* Training adds the backward (2 × forward compute and traffic; no input gradient for the
  first parametric layer, no backward before it) and an SGD update per parameter tensor,
  plus a per-iteration overhead (loss, optimizer bookkeeping, sync) that is CPU-bound.

Power of each layer comes from the same per-rail DVFS model as the simulator's (same rails,
voltages, leakage, base and uncore power), evaluated at the layer's own GPU busy share
(weighted by SM occupancy), CPU main-thread share and DRAM traffic share. Energy per
iteration = Σ time × power; ``energy_above_idle_j`` subtracts the mode's idle power, which
is what THOR profiles. Everything is deterministic; :meth:`LayerCostModel.measure` adds
seeded measurement noise (a 500-iteration run's mean, so a small relative error).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from edgetune.base.mode import PowerMode
from edgetune.errors import InvalidArgument
from edgetune.physics.hardware import REF_CPU_MHZ, HardwareModel, hardware_for
from edgetune.physics.layers import LayerRecord
from edgetune.physics.model import GPU_STALL_ACTIVITY, PhysicalModel, as_mode_array, smax, voltage
from edgetune.powermodes.spec import DeviceSpec
from edgetune.powermodes.specs import get_spec

#: Output tile of one thread block of a GEMM-like kernel (rows = batch × pixels, cols = channels).
TILE_M = 64
TILE_N = 64
#: Smallest tile edge cuBLAS-like kernels use, and the shortest reduction worth a split-K block.
MIN_TILE = 16
SPLIT_K_MIN = 256
#: Resident thread blocks per SM.
CTAS_PER_SM = 2
#: Reduction length at which a tile's main loop reaches half its steady efficiency.
K_HALF = 24.0
#: Share of the device's effective peak a perfectly shaped GEMM reaches.
GEMM_PEAK_EFF = 0.8
#: Share of peak a depthwise convolution reaches (direct kernel, no data reuse across channels).
DEPTHWISE_EFF = 0.06
#: Elements one thread block of an element-wise kernel handles.
ELEMS_PER_CTA = 2048
#: Shortest GPU time of any kernel (ms): launch latency on the GPU side, tail of the grid.
KERNEL_MIN_MS = 0.004
#: Host work of one module call in eager PyTorch (Python, dispatcher, autograd node), µs at the
#: reference CPU clock, forward and again backward; and per SGD-updated layer.
OP_HOST_US = 30.0
UPDATE_HOST_US = 10.0
#: CPU main thread's busy share while it waits on the GPU (blocking sync, allocator).
CPU_WAIT_BUSY = 0.2
#: Per-iteration work outside the layers: loss, zero_grad, optimizer loop, sync (ref-CPU ms).
ITER_HOST_MS = 0.6
ITER_KERNELS = 6
#: SMs per device model (public specs); unknown devices: one SM per 0.5 GFLOP/s/MHz.
SM_COUNT = {"orin-agx": 16, "xavier-agx": 8, "orin-nano": 8, "nano": 1, "tx2-nx": 2}


@dataclass(frozen=True)
class LayerCost:
    """One layer's share of a forward (inference) or training iteration."""

    name: str
    module_type: str
    kind: str
    flops: float  # executed FLOPs (forward, or forward + backward when training)
    time_ms: float
    power_w: float
    idle_power_w: float
    occupancy: float  # SM occupancy of its compute kernels (0..1)
    t_compute_ms: float
    t_memory_ms: float
    t_launch_ms: float

    @property
    def energy_j(self) -> float:
        return self.power_w * self.time_ms / 1000.0

    @property
    def energy_above_idle_j(self) -> float:
        return (self.power_w - self.idle_power_w) * self.time_ms / 1000.0


@dataclass(frozen=True)
class NetworkCost:
    """All layers of one iteration (plus the per-iteration overhead when training)."""

    layers: tuple[LayerCost, ...]
    idle_power_w: float
    training: bool

    @property
    def time_ms(self) -> float:
        return sum(c.time_ms for c in self.layers)

    @property
    def energy_j(self) -> float:
        return sum(c.energy_j for c in self.layers)

    @property
    def energy_above_idle_j(self) -> float:
        return sum(c.energy_above_idle_j for c in self.layers)

    @property
    def power_w(self) -> float:
        """Time-weighted mean power of the iteration."""
        return 1000.0 * self.energy_j / self.time_ms

    @property
    def flops(self) -> float:
        return sum(c.flops for c in self.layers)


def _resolve_spec(spec: DeviceSpec | str) -> DeviceSpec:
    return get_spec(spec) if isinstance(spec, str) else spec


class LayerCostModel:
    """Costs layer records on one device model; ``mode=None`` means the spec's MAXN."""

    def __init__(self, spec: DeviceSpec | str = "xavier-agx", hw: HardwareModel | None = None) -> None:
        self.spec = _resolve_spec(spec)
        self.hw = hw or hardware_for(self.spec)
        self.physical = PhysicalModel(self.spec, self.hw)
        self.n_sm = SM_COUNT.get(self.hw.name, max(1, round(self.hw.gpu_gflops_per_mhz / 0.5)))
        self.slots = self.n_sm * CTAS_PER_SM

    # -- pieces --------------------------------------------------------------------------
    def _mode(self, mode: PowerMode | None) -> PowerMode:
        if mode is None:
            return self.spec.maxn()
        return self.spec.validate(mode)

    def _waves(self, ctas: float) -> tuple[float, float]:
        """(wave efficiency, share of SMs a sub-wave grid fills)."""
        ctas = max(1.0, ctas)
        waves = math.ceil(ctas / self.slots)
        return ctas / (waves * self.slots), min(1.0, ctas / self.slots)

    def _gemm_shape(self, m: float, n: float, k: float, groups: int) -> tuple[float, float]:
        """(share of peak, SM occupancy) of a GEMM with output m × n per group and reduction k.

        Like cuBLAS: tiles shrink to the problem (never below ``MIN_TILE``), and a grid too
        small for the GPU splits its reduction across blocks (split-K) when ``k`` is long.
        """
        tm = min(TILE_M, max(MIN_TILE, 2 ** math.ceil(math.log2(max(m, 1)))))
        tn = min(TILE_N, max(MIN_TILE, 2 ** math.ceil(math.log2(max(n, 1)))))
        tiles = math.ceil(m / tm) * math.ceil(n / tn) * groups
        split = max(1, min(math.ceil(self.slots / tiles), int(k // SPLIT_K_MIN)))
        wave_eff, occ = self._waves(tiles * split)
        fill = (m / (math.ceil(m / tm) * tm)) * (n / (math.ceil(n / tn) * tn))
        # small tiles reuse less data per load: efficiency ∝ tile area share
        tile_eff = (tm * tn / (TILE_M * TILE_N)) ** 0.25
        k_split = k / split
        return GEMM_PEAK_EFF * wave_eff * fill * tile_eff * k_split / (k_split + K_HALF), occ * fill

    def _forward_terms(self, r: LayerRecord, peak_gflops: float, bw_gbs: float) -> tuple[float, float, float]:
        """Forward (t_compute_ms, t_memory_ms, occupancy) of one record on the GPU."""
        fill_mem = self._waves(r.out_numel / ELEMS_PER_CTA)[1]
        # few threads cannot keep DRAM busy: achieved bandwidth grows with the grid
        t_memory = r.bytes_moved / (bw_gbs * 1e9 * (0.15 + 0.85 * fill_mem)) * 1e3
        if r.flops <= 0:
            return 0.0, t_memory, fill_mem
        if r.kind == "conv" and r.groups > 1 and r.groups == r.c_in:
            wave_eff, fill = self._waves(r.out_numel / ELEMS_PER_CTA)
            eff, occ = DEPTHWISE_EFF * wave_eff, fill
        else:
            n_total = r.out_shape[1] if r.kind == "conv" else r.out_shape[-1]
            m = r.out_numel / n_total
            n = n_total / r.groups
            k = r.flops / (2.0 * r.out_numel)
            eff, occ = self._gemm_shape(m, n, k, r.groups)
        t_compute = r.flops / (peak_gflops * 1e9 * eff) * 1e3
        return t_compute, t_memory, float(min(1.0, occ))

    def _power_w(self, m: np.ndarray, gpu_busy: float, cpu_busy: float, traffic: float) -> float:
        """Board power with the GPU / CPU / EMC rails at the given busy shares (the simulator's rails)."""
        hw = self.hw
        rc, rg, re = self.physical._rel(m)
        cpu_dyn, cpu_leak = self.physical._cpu_scale(rc)
        cores = m[:, 0]
        p_cpu = cores * cpu_leak + cpu_dyn * (hw.cpu.idle_frac * cores + (1 - hw.cpu.idle_frac) * cpu_busy)
        vg = voltage(hw.gpu, rg) / hw.gpu.v_max
        p_gpu = hw.gpu.leak_w * vg**2 + hw.gpu.dyn_w * rg * vg**2 * (
            hw.gpu.idle_frac + (1 - hw.gpu.idle_frac) * gpu_busy)
        ve = voltage(hw.emc, re) / hw.emc.v_max
        p_emc = hw.emc.dyn_w * re * ve**2 * (hw.emc.idle_frac + (1 - hw.emc.idle_frac) * min(1.0, traffic))
        return float((self.physical.base_w + hw.active_w + (p_cpu + p_gpu + p_emc) / hw.efficiency)[0])

    def _layer(self, name: str, module_type: str, kind: str, flops: float, t_compute: float, t_memory: float,
               kernels: float, host_ms: float, occ: float, m: np.ndarray, idle_w: float) -> LayerCost:
        cores, f_cpu, f_gpu, f_emc = m[0]
        cpu_stretch = REF_CPU_MHZ / (f_cpu * self.hw.cpu_perf)
        t_launch = (kernels * self.hw.launch_us / 1000.0 + host_ms) * cpu_stretch
        t_gpu = smax(t_compute, t_memory, 2.0) + kernels * KERNEL_MIN_MS if kernels else 0.0
        time_ms = float(smax(t_launch, t_gpu, 3.0)) if t_gpu > 0 else t_launch
        gpu_share = t_gpu / time_ms
        compute_share = t_compute / (t_compute + t_memory) if t_compute + t_memory > 0 else 0.0
        # under-filled SMs still switch part of the chip (GPU_STALL_ACTIVITY), full ones all of it
        gpu_busy = gpu_share * (GPU_STALL_ACTIVITY + (1 - GPU_STALL_ACTIVITY) * occ * compute_share)
        launch_share = min(1.0, t_launch / time_ms)
        cpu_busy = launch_share + CPU_WAIT_BUSY * (1 - launch_share)
        power = self._power_w(m, gpu_busy, cpu_busy, t_memory / time_ms)
        return LayerCost(name, module_type, kind, flops, time_ms, power, idle_w, occ, t_compute, t_memory, t_launch)

    # -- public --------------------------------------------------------------------------
    def idle_power_w(self, mode: PowerMode | None = None) -> float:
        return float(self.physical.idle_power_w(as_mode_array([self._mode(mode).as_tuple()]))[0])

    def cost_records(self, records: Sequence[LayerRecord], mode: PowerMode | None = None, training: bool = True) -> NetworkCost:
        """Cost layer records (``extract_layers`` output) for one iteration in ``mode``.

        ``training`` adds backward, SGD update and the per-iteration overhead; otherwise a
        forward (inference) pass of the layers only.
        """
        md = self._mode(mode)
        m = as_mode_array([md.as_tuple()])
        idle_w = self.idle_power_w(md)
        peak_gflops = self.hw.gpu_gflops_per_mhz * md.gpu_mhz
        bw_gbs = self.hw.bw_gbs_per_mhz * md.emc_mhz
        out = []
        seen_param = False
        for r in records:
            t_c, t_m, occ = self._forward_terms(r, peak_gflops, bw_gbs)
            flops, kernels, host_us = float(r.flops), 1.0, OP_HOST_US
            has_params = r.params > 0
            if training:
                # backward: input grad (not before / for the first parametric layer) + weight grad
                input_grad = seen_param
                weight_grad = has_params
                bwd_parts = (1.0 if input_grad else 0.0) + (1.0 if weight_grad else 0.0)
                if r.flops <= 0:  # element-wise: one kernel, ~2x traffic, only if a grad flows
                    bwd_parts = 2.0 if (input_grad or has_params) else 0.0
                    t_m_b, t_c_b, k_b = t_m * bwd_parts, 0.0, 1.0 if bwd_parts else 0.0
                else:
                    t_c_b, t_m_b, k_b = t_c * bwd_parts, t_m * bwd_parts, bwd_parts
                upd_bytes = 3.0 * r.bytes_weights
                t_u = upd_bytes / (bw_gbs * 1e9 * 0.5) * 1e3 if has_params else 0.0
                n_tensors = 1 if has_params else 0  # one (foreach) update kernel per layer
                flops += r.flops * (bwd_parts if r.flops > 0 else 0.0)
                t_c, t_m = t_c + t_c_b, t_m + t_m_b + t_u
                kernels += k_b + n_tensors
                host_us += (OP_HOST_US if k_b else 0.0) + (UPDATE_HOST_US if has_params else 0.0)
                seen_param = seen_param or has_params
            out.append(self._layer(r.name, r.module_type, r.kind, flops, t_c, t_m, kernels, host_us / 1000.0, occ,
                                   m, idle_w))
        if training:
            out.append(self._layer("<iteration>", "overhead", "other", 0.0, 0.0, 0.0,
                                   float(ITER_KERNELS), ITER_HOST_MS, 0.0, m, idle_w))
        return NetworkCost(tuple(out), idle_w, training)

    def measure(self, cost: NetworkCost, rng: np.random.Generator | None = None,
                noise_cv: float = 0.02) -> tuple[float, float]:
        """A profiled (time_ms, energy_above_idle_j) per iteration, with seeded relative noise.

        ``noise_cv`` is the relative std of a long run's mean (THOR: 500 iterations); power
        sensors add their own error on top of the time jitter, so energy gets both.
        """
        if noise_cv < 0:
            raise InvalidArgument("noise_cv", f"{noise_cv} must not be negative", ">= 0")
        if rng is None or noise_cv == 0:
            return cost.time_ms, cost.energy_above_idle_j
        t_err = rng.normal(0.0, noise_cv / 2)
        e_err = t_err + rng.normal(0.0, noise_cv * math.sqrt(3) / 2)
        return cost.time_ms * max(0.5, 1 + t_err), cost.energy_above_idle_j * max(0.5, 1 + e_err)
