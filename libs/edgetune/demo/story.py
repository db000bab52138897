"""The demo's steps, each a plain function returning data the report and the summary use."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from edgetune.devices.simulated import SimulatedJetson
from edgetune.optimization.pareto import pareto_front
from edgetune.optimization.select import Candidates, least_time
from edgetune.powermodes.grids import named_grid
from edgetune.powermodes.mode import PowerMode
from edgetune.powermodes.spec import DeviceSpec
from edgetune.powermodes.specs import SPECS, get_spec
from edgetune.profiling import Measurement, ProfileConfig, Profiler

#: The simulated fleet: node id → (device model, power budget in W).
FLEET: dict[str, tuple[str, float]] = {
    "orin-1": ("orin-agx", 30.0),
    "orin-2": ("orin-agx", 20.0),
    "xavier-1": ("xavier-agx", 25.0),
    "xavier-2": ("xavier-agx", 15.0),
    "orin-nano-1": ("orin-nano", 10.0),
    "nano-1": ("nano", 7.0),
}


def device_rows() -> list[dict]:
    """What edgetune knows of each device model: table sizes, mode counts, presets."""
    rows = []
    for spec in SPECS.values():
        rows.append({
            "device": spec.name,
            "name": spec.display_name,
            "cores": spec.max_cores,
            "cpu": len(spec.cpu_mhz),
            "gpu": len(spec.gpu_mhz),
            "emc": len(spec.emc_mhz),
            "full": spec.n_modes,
            "powertrain": named_grid(spec, "powertrain").n_modes,
            "fulcrum": named_grid(spec, "fulcrum").n_modes,
            "presets": ", ".join(p.name for p in spec.presets),
        })
    return rows


@dataclass
class NodeResult:
    node: str
    spec: DeviceSpec
    budget_w: float
    measurements: list[Measurement]
    #: Noise-free truth over the node's PowerTrain grid, for the plot's background.
    truth_modes: np.ndarray
    truth_time_ms: np.ndarray
    truth_power_w: np.ndarray
    chosen: Measurement | None = None
    maxn: Measurement | None = None
    preset: Measurement | None = None
    preset_name: str = ""
    notes: list[str] = field(default_factory=list)

    def measured(self) -> tuple[np.ndarray, np.ndarray]:
        return (np.array([m.time_ms for m in self.measurements]),
                np.array([m.power_w for m in self.measurements]))


def _preset_for_budget(spec: DeviceSpec, budget_w: float):
    """The nvpmodel preset an operator would pick: the largest nominal budget within ours."""
    fitting = [p for p in spec.presets if p.budget_w is not None and p.budget_w <= budget_w]
    return max(fitting, key=lambda p: p.budget_w) if fitting else None


def profile_node(node: str, device_name: str, budget_w: float, workload: str, n_modes: int,
                 seed: int, progress=None) -> NodeResult:
    """Profile ``n_modes`` random PowerTrain-grid modes, then select the fastest within budget."""
    spec = get_spec(device_name)
    device = SimulatedJetson(spec, seed=seed)
    grid = named_grid(spec, "powertrain")
    rng = np.random.default_rng(seed)
    picks = rng.choice(grid.n_modes, size=min(n_modes, grid.n_modes), replace=False)
    modes = [grid.mode_at(int(i)) for i in sorted(picks, reverse=True)]  # high → low clocks
    profiler = Profiler(device, ProfileConfig(node=node))
    measurements = profiler.profile(modes, workload, "train", [16], progress=progress)

    truth = grid.array()
    result = NodeResult(node, spec, budget_w, measurements, truth,
                        device.true_time_ms(truth, workload, "train", 16),
                        device.true_power_w(truth, workload, "train", 16))
    cands = Candidates([m.time_ms for m in measurements], [m.power_w for m in measurements])
    sel = least_time(cands, budget_w)
    if sel.feasible:
        result.chosen = measurements[sel.index]
    else:
        result.notes.append(sel.reason or "no profiled mode within budget")
    # Baselines, measured with the same protocol: MAXN and the preset an operator would pick.
    result.maxn = profiler.measure(spec.maxn(), workload, "train", 16)
    preset = _preset_for_budget(spec, budget_w)
    if preset is not None:
        result.preset_name = preset.name
        result.preset = profiler.measure(spec.validate(preset.mode()), workload, "train", 16)
    return result


def front_modes(result: NodeResult) -> list[PowerMode]:
    t, p = result.measured()
    return [result.measurements[i].mode for i in pareto_front(t, p)]
