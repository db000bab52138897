"""The node agent's Prometheus metrics: its mode, profiles, points and telemetry (the profiler
service adds only the gRPC ones every service has).

They live in prometheus_client's default registry, which the agent server's metrics endpoint
serves. One agent runs per device, so they carry no device label (Prometheus adds the pod /
node). :class:`~edgetune.agent.node.NodeAgent` and the coordinator link count them; the
telemetry ones are refreshed by the agent's continuous sampler (:class:`TelemetryExporter`,
``--telemetry-hz``, 1 Hz by default), idle or not; the table in ``services/profiler/README.md``
lists every metric. The names keep the ``edgetune_profiler_`` prefix dashboards query.
"""

from __future__ import annotations

import threading

from prometheus_client import Counter, Gauge
from prometheus_client.metrics import MetricWrapperBase

from edgetune.base.mode import PowerMode
from edgetune.telemetry.sample import TelemetrySample

MODE_CORES = Gauge("edgetune_profiler_mode_cores", "Online CPU cores of the current power mode.")
MODE_CPU_MHZ = Gauge("edgetune_profiler_mode_cpu_mhz", "CPU frequency of the current power mode (MHz).")
MODE_GPU_MHZ = Gauge("edgetune_profiler_mode_gpu_mhz", "GPU frequency of the current power mode (MHz).")
MODE_EMC_MHZ = Gauge("edgetune_profiler_mode_emc_mhz", "Memory (EMC) frequency of the current power mode (MHz).")
POWER_W = Gauge("edgetune_profiler_power_w", "Board / module power, last reading (W): telemetry, stream or profile.")
PROFILES = Counter("edgetune_profiler_profiles_total",
                   "Profiles (Profile RPCs and profiling jobs) by outcome (completed, cancelled, failed).",
                   ["outcome"])
POINTS = Counter("edgetune_profiler_points_total",
                 "Profiled points by outcome (measured, skipped over the power limit).", ["outcome"])
THROTTLED_POINTS = Counter("edgetune_profiler_throttled_points_total",
                           "Profile attempts measured while the board throttled (each one re-measured or flagged).")
MEASURED_POWER_W = Gauge("edgetune_profiler_measured_power_w", "Mean power of the last profiled point (W).")
MEASURED_TIME_MS = Gauge("edgetune_profiler_measured_time_ms", "Mean minibatch time of the last profiled point (ms).")
CONFIG_POWER_BUDGET_W = Gauge("edgetune_profiler_config_power_budget_w",
                              "Power budget of the config the coordinator last pushed (W); the selected mode's "
                              "predicted power is within it.")

# -- continuous telemetry ---------------------------------------------------------------------
RAIL_POWER_W = Gauge("edgetune_profiler_rail_power_w", "Power of one INA3221 rail (W).", ["rail"])
ENERGY_J = Counter("edgetune_profiler_energy_joules",
                   "Energy drawn since the agent started, per rail and rail=\"total\" (J).", ["rail"])
TEMPERATURE_C = Gauge("edgetune_profiler_temperature_celsius", "Temperature of one thermal zone (°C).", ["zone"])
TRIP_C = Gauge("edgetune_profiler_thermal_trip_celsius",
               "First throttling trip point of one thermal zone (°C).", ["zone"])
CLOCK_MHZ = Gauge("edgetune_profiler_clock_mhz", "Clock running now (MHz), per domain cpu / gpu / emc.", ["clock"])
ONLINE_CORES = Gauge("edgetune_profiler_online_cores", "CPU cores online now.")
THROTTLED = Gauge("edgetune_profiler_throttled",
                  "1 while a clock runs below the applied mode's or a thermal zone is past its trip point.")
TELEMETRY_SAMPLES = Counter("edgetune_profiler_telemetry_samples_total", "Telemetry samples taken.")


def set_mode(mode: PowerMode) -> None:
    MODE_CORES.set(mode.cores)
    MODE_CPU_MHZ.set(mode.cpu_mhz)
    MODE_GPU_MHZ.set(mode.gpu_mhz)
    MODE_EMC_MHZ.set(mode.emc_mhz)


class TelemetryExporter:
    """A :class:`~edgetune.telemetry.sampler.TelemetrySampler` listener that sets the gauges and
    advances the energy counters by what was integrated since the last sample."""

    def __init__(self) -> None:
        self._exported_j: dict[str, float] = {}
        self._lock = threading.Lock()

    def __call__(self, sample: TelemetrySample, joules: dict[str, float]) -> None:
        TELEMETRY_SAMPLES.inc()
        if sample.power_w is not None:
            POWER_W.set(sample.power_w)
        for rail, w in sample.rails_w.items():
            RAIL_POWER_W.labels(rail).set(w)
        with self._lock:
            for rail, total_j in joules.items():
                delta = total_j - self._exported_j.get(rail, 0.0)
                counter = ENERGY_J.labels(rail)  # created at 0 on first sight
                if delta > 0:
                    counter.inc(delta)
                    self._exported_j[rail] = total_j
        for z in sample.zones:
            TEMPERATURE_C.labels(z.name).set(z.temp_c)
            if z.trip_c is not None:
                TRIP_C.labels(z.name).set(z.trip_c)
        for name in ("cpu", "gpu", "emc"):
            value = getattr(sample.clocks, f"{name}_mhz")
            if value is not None:
                CLOCK_MHZ.labels(name).set(value)
        if sample.clocks.cores is not None:
            ONLINE_CORES.set(sample.clocks.cores)
        THROTTLED.set(1 if sample.throttled else 0)


def exported_metric_names() -> set[str]:
    """Every sample name this module's metrics expose (counters with their ``_total``)."""
    names: set[str] = set()
    for obj in list(globals().values()):
        if isinstance(obj, MetricWrapperBase):
            for family in obj.describe():
                names.add(family.name + "_total" if family.type == "counter" else family.name)
    return names
