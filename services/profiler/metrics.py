"""The profiler agent's own Prometheus metrics (beside the gRPC ones every service has).

They live in prometheus_client's default registry, which the server's metrics endpoint
serves. One agent runs per device, so they carry no device label.
"""

from __future__ import annotations

from prometheus_client import Counter, Gauge

from edgetune.powermodes.mode import PowerMode

MODE_CORES = Gauge("edgetune_profiler_mode_cores", "Online CPU cores of the current power mode.")
MODE_CPU_MHZ = Gauge("edgetune_profiler_mode_cpu_mhz", "CPU frequency of the current power mode (MHz).")
MODE_GPU_MHZ = Gauge("edgetune_profiler_mode_gpu_mhz", "GPU frequency of the current power mode (MHz).")
MODE_EMC_MHZ = Gauge("edgetune_profiler_mode_emc_mhz", "Memory (EMC) frequency of the current power mode (MHz).")
POWER_W = Gauge("edgetune_profiler_power_w", "Last board / module power reading (W).")
PROFILES = Counter("edgetune_profiler_profiles_total",
                   "Profile RPCs by outcome (completed, cancelled, failed).", ["outcome"])
POINTS = Counter("edgetune_profiler_points_total",
                 "Profiled points by outcome (measured, skipped over the power limit).", ["outcome"])


def set_mode(mode: PowerMode) -> None:
    MODE_CORES.set(mode.cores)
    MODE_CPU_MHZ.set(mode.cpu_mhz)
    MODE_GPU_MHZ.set(mode.gpu_mhz)
    MODE_EMC_MHZ.set(mode.emc_mhz)
