"""Synthetic fleets for timing the planner (``make bench`` calls :func:`bench_plan`)."""

from __future__ import annotations

import time

import numpy as np

from edgetune.planning.fleet import Fleet, NodeOptions
from edgetune.planning.planner import plan_round


def synthetic_fleet(n_nodes: int, n_modes: int = 40, batch_sizes=(8, 16, 32, 64, 128), n_device_types: int = 3,
                    objective: str = "makespan", site_fraction: float | None = 0.5, seed: int = 0) -> Fleet:
    """``n_nodes`` nodes over a few device types; each type's table is n_modes × batch sizes.

    Time falls and power rises with a mode's speed (with noise, so fronts are irregular);
    the site budget sits ``site_fraction`` of the way from the least to the greatest total power.
    """
    rng = np.random.default_rng(seed)
    tables = []
    for d in range(n_device_types):
        speed = rng.uniform(0.2, 1.0, n_modes) * (1 + d)
        base_w = rng.uniform(5, 15)
        batch = np.repeat(np.asarray(batch_sizes, dtype=np.int64), n_modes)
        sp = np.tile(speed, len(batch_sizes))
        time_ms = batch * 4.0 / sp * rng.uniform(0.9, 1.1, batch.size)
        power_w = base_w + 30 * sp ** 1.7 * rng.uniform(0.95, 1.05, batch.size) + 0.05 * np.sqrt(batch)
        modes = np.column_stack([np.full(batch.size, 8), 1000 * sp, 600 * sp, np.full(batch.size, 3199.0)])
        tables.append((batch, time_ms, power_w, modes))
    nodes = []
    for i in range(n_nodes):
        batch, time_ms, power_w, modes = tables[i % n_device_types]
        budget = float(np.quantile(power_w, rng.uniform(0.3, 1.0)))
        nodes.append(NodeOptions(f"n{i}", int(rng.integers(500, 5000)), batch, time_ms, power_w, budget, modes))
    fleet = Fleet(nodes, objective)
    if site_fraction is not None:
        lo = sum(float(n.power_w[n.power_w <= n.power_budget_w].min()) for n in nodes)
        hi = sum(float(n.power_w[n.power_w <= n.power_budget_w].max()) for n in nodes)
        fleet.site_power_budget_w = lo + site_fraction * (hi - lo)
    return fleet


def bench_plan(n_nodes: int, repeats: int = 1, **fleet_args) -> dict:
    """Seconds to plan a synthetic round of ``n_nodes`` nodes, for both objectives."""
    out: dict = {"n_nodes": n_nodes}
    for objective in ("makespan", "energy"):
        fleet = synthetic_fleet(n_nodes, objective=objective, **fleet_args)
        best = float("inf")
        for _ in range(repeats):
            t0 = time.perf_counter()
            plan = plan_round(fleet)
            best = min(best, time.perf_counter() - t0)
        out[objective] = {"seconds": best, "feasible": plan.feasible, "exact": plan.exact,
                          "options": sum(len(n) for n in fleet.nodes)}
    return out
