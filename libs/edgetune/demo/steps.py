"""The demo's story, steps 1–5, through the services' gRPC APIs: discovery, profiling, estimation,
Pareto fronts, safe selection verified on the agents (steps 6–8: :mod:`.rounds`, :mod:`.concurrent`).

Each step is a function of the shared :class:`~edgetune.demo.story.Story` that calls the services,
records what it learned on the story and returns a one-line headline. The console (``__main__``)
prints the headlines and tables; the report (``report``) draws from the same records.
"""

from __future__ import annotations

import threading
import time

import numpy as np

from edgetune.demo.story import (
    REFERENCE_WORKLOAD,
    RISK,
    RPC_TIMEOUT_S,
    TRAIN,
    NodeResult,
    Story,
    Tick,
    calibrate,
    calibrated,
    candidates,
    energy_j,
    key,
    label,
    learn_from_miss,
    mape_pct,
    maxn_mode,
    operator_preset,
    parallel,
    preset_mode,
    profile,
)
from edgetune.demo.suite import NodeSpec, registered
from edgetune.devices.simulated import truth_table
from edgetune.powermodes.grids import named_grid
from edgetune.powermodes.specs import get_spec
from edgetune.proto.v1 import (
    common_pb2,
    coordinator_pb2,
    estimator_pb2,
    optimizer_pb2,
    profiler_pb2,
)


# --- 1. discovery -----------------------------------------------------------------------------------
def discover(story: Story) -> str:
    """GetDevice on every agent; ListNodes on the coordinator (agents registered themselves)."""
    listed: dict[str, coordinator_pb2.NodeInfo] = {}
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        listed = registered(story.suite)
        if all(n.node_id in listed for n in story.fleet):
            break
        time.sleep(0.2)
    missing = [n.node_id for n in story.fleet if n.node_id not in listed]
    if missing:
        raise RuntimeError(f"agents never registered with the coordinator: {', '.join(missing)}")
    for node in story.fleet:
        reply = story.agent(node.node_id).stub.GetDevice(profiler_pb2.GetDeviceRequest(), timeout=10)
        res = NodeResult(node, spec=reply.spec, address=story.agent(node.node_id).child.address,
                         backend=reply.backend,
                         grid_modes=named_grid(get_spec(reply.spec.name), "powertrain").n_modes)
        if listed[node.node_id].power_budget_w != node.budget_w:
            res.notes.append(f"registered budget {listed[node.node_id].power_budget_w:g} W")
        story.nodes[node.node_id] = res
    models = sorted({n.device for n in story.fleet})
    return (f"{len(story.nodes)} agents answered GetDevice ({len(models)} device models: {', '.join(models)}); "
            f"all {len(listed)} registered with the coordinator and heartbeating")


def discovery_rows(story: Story) -> list[dict]:
    listed = registered(story.suite)
    rows = []
    for r in story.nodes.values():
        info = listed.get(r.node.node_id)
        rows.append({"node": r.node.node_id, "device": r.spec.display_name, "backend": r.backend,
                     "address": r.address, "cores": max(r.spec.core_counts),
                     "clocks (cpu/gpu/emc)": f"{len(r.spec.cpu_mhz)}/{len(r.spec.gpu_mhz)}/{len(r.spec.emc_mhz)}",
                     "PowerTrain modes": r.grid_modes, "budget W": f"{r.node.budget_w:g}",
                     "state": info.state if info else "?"})
    return rows


# --- 2. profiling -----------------------------------------------------------------------------------
def profile_fleet(story: Story, tick: Tick) -> str:
    """Each agent profiles ``modes + held_out`` random PowerTrain-grid modes (one Profile stream);
    the first ``modes`` train the transfer, the rest are held out to check the predictions."""
    o = story.options
    n_total = o.modes + o.held_out

    def run(i_node: tuple[int, NodeSpec]) -> None:
        i, node = i_node
        request = profiler_pb2.ProfileRequest(workload=story.workload(), random_modes=n_total,
                                              random_grid=common_pb2.GRID_POWERTRAIN, batch_sizes=[o.batch_size],
                                              seed=o.seed * 1000 + i)
        rows = profile(story.agent(node.node_id), request, lambda done, total: tick(node.node_id, done, total))
        res = story.nodes[node.node_id]
        res.profiled, res.held_out = rows[:o.modes], rows[o.modes:]
        res.stored = len(story.suite.store.get_measurements(node.device, o.workload, "train", node.node_id))

    parallel(enumerate(story.fleet), run, workers=len(story.fleet))
    n = sum(len(r.profiled) + len(r.held_out) for r in story.nodes.values())
    stored = sum(r.stored for r in story.nodes.values())
    return (f"{n} points measured on {len(story.nodes)} agents ({o.modes} per node for the transfer + "
            f"{o.held_out} held out to check it); {stored} measurements in Redis")


# --- 3. estimation ----------------------------------------------------------------------------------
def reference_measurements(device: str, n_modes: int, batch_size: int, seed: int) -> list[common_pb2.Measurement]:
    """A large reference table: ResNet18 training on (a sample of) the device's PowerTrain grid, from the
    simulator's truth plus measurement noise (3 % time, 1.5 % power)."""
    spec = get_spec(device)
    grid = named_grid(spec, "powertrain").array()
    rng = np.random.default_rng(seed)
    if n_modes < len(grid):
        grid = grid[np.sort(rng.choice(len(grid), n_modes, replace=False))]
    rows = truth_table(spec, REFERENCE_WORKLOAD, "train", grid, [batch_size])
    out = []
    for r in rows:
        out.append(common_pb2.Measurement(
            device=device, workload=REFERENCE_WORKLOAD, role=TRAIN, batch_size=batch_size,
            mode=common_pb2.PowerMode(cores=r["cores"], cpu_mhz=r["cpu_mhz"], gpu_mhz=r["gpu_mhz"], emc_mhz=r["emc_mhz"]),
            time_ms=r["time_ms"] * float(rng.normal(1.0, 0.03)), power_w=r["power_w"] * float(rng.normal(1.0, 0.015))))
    return out


def estimate(story: Story, tick: Tick) -> str:
    """Fit a ResNet18 reference per device model, transfer it to each node's workload from its profiled
    modes, and predict every PowerTrain-grid mode of the node's device (Fit / Transfer / Predict)."""
    o, est = story.options, story.suite.estimator
    devices = sorted({n.device for n in story.fleet})
    done = {"fit": 0, "transfer": 0}
    lock = threading.Lock()

    def fit(device: str) -> None:
        rows = reference_measurements(device, o.reference_modes, o.batch_size, o.seed + 17)
        info = est.fit(estimator_pb2.FitRequest(model_id=f"demo-reference-{device}", kind="nn", device=device,
                                                workload=REFERENCE_WORKLOAD, role=TRAIN, measurements=rows,
                                                epochs=o.reference_epochs, seed=o.seed))
        story.references[device] = info
        with lock:
            done["fit"] += 1
            tick("fit", done["fit"], len(devices))

    def transfer(node: NodeSpec) -> None:
        res = story.nodes[node.node_id]
        base = story.references[node.device]
        res.model = est.transfer(estimator_pb2.TransferRequest(
            base_model_id=base.model_id, model_id=f"demo-{node.node_id}-{o.workload}", device=node.device,
            workload=o.workload, role=TRAIN, measurements=res.profiled, seed=o.seed, epochs=o.transfer_epochs,
            params={"restarts": str(o.gp_restarts)} if o.gp_restarts else {}))
        res.predictions = est.predict(estimator_pb2.PredictRequest(
            model_id=res.model.model_id, grid=common_pb2.GRID_POWERTRAIN, device=node.device,
            batch_sizes=[o.batch_size]))
        with lock:
            done["transfer"] += 1
            tick("transfer", done["transfer"], len(story.fleet))

    tick("fit", 0, len(devices))
    tick("transfer", 0, len(story.fleet))
    parallel(devices, fit, workers=2)
    parallel(story.fleet, transfer, workers=2)
    for res in story.nodes.values():
        calibrate(res)
    acc = accuracy(story)
    n_pred = sum(len(r.predictions) for r in story.nodes.values())
    return (f"{len(devices)} reference models fitted, {len(story.fleet)} transfers; {n_pred:,} modes predicted; "
            f"held-out MAPE time {acc['time_mape']:.1f} %, power {acc['power_mape']:.1f} %")


def held_out_pairs(res: NodeResult) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(predicted time, measured time, predicted power, measured power) over the held-out modes."""
    pred = res.predicted()
    pairs = [(pred[key(m.mode)], m) for m in res.held_out if key(m.mode) in pred]
    return (np.array([p.time_ms for p, _ in pairs]), np.array([m.time_ms for _, m in pairs]),
            np.array([p.power_w for p, _ in pairs]), np.array([m.power_w for _, m in pairs]))


def accuracy(story: Story) -> dict[str, float]:
    pt, mt, pp, mp = (np.concatenate(a) for a in zip(*(held_out_pairs(r) for r in story.nodes.values()), strict=True))
    return {"time_mape": mape_pct(pt, mt), "power_mape": mape_pct(pp, mp), "points": int(len(mt))}


def estimation_rows(story: Story) -> list[dict]:
    rows = []
    for r in story.nodes.values():
        pt, mt, pp, mp = held_out_pairs(r)
        rows.append({"node": r.node.node_id, "reference": story.references[r.node.device].model_id,
                     "model": r.model.model_id, "kind": r.model.kind or "?", "trained on": len(r.profiled),
                     "predicted modes": len(r.predictions), "std": "yes" if r.model.has_std else "no",
                     "time MAPE %": f"{mape_pct(pt, mt):.1f}", "power MAPE %": f"{mape_pct(pp, mp):.1f}",
                     "held-out power error (RMS) %": f"{100 * r.power_rel_err:.1f}"})
    return rows


# --- 4. Pareto fronts -------------------------------------------------------------------------------
def pareto(story: Story) -> str:
    """The optimizer's time-power Pareto front of each node's predicted modes."""
    def run(res: NodeResult) -> None:
        reply = story.suite.optimizer.ParetoFront(
            optimizer_pb2.ParetoFrontRequest(candidates=candidates(res.predictions)), timeout=RPC_TIMEOUT_S)
        res.front = list(reply.front)

    parallel(story.nodes.values(), run, workers=3)
    sizes = ", ".join(f"{r.node.node_id} {len(r.front)}" for r in story.nodes.values())
    return f"Pareto-optimal modes out of each node's predicted grid: {sizes}"


# --- 5. selection and verification ------------------------------------------------------------------
def select_and_verify(story: Story, tick: Tick, max_attempts: int = 5) -> str:
    """Safe selection (least predicted time with power + 1.645 σ within the budget, σ widened by the
    held-out relative power error), then the chosen
    mode is measured on the agent, together with MAXN and the operator's preset (same protocol). A
    choice measured over budget is dropped from the candidates, with every mode that has at least its
    cores and clocks (they draw at least its power), and the optimizer selects again."""
    o = story.options

    def run(res: NodeResult) -> None:
        node, agent = res.node, story.agent(res.node.node_id)
        baselines = [maxn_mode(res.spec)]
        preset = operator_preset(res.spec, node.budget_w)
        if preset is not None:
            res.preset_name = preset.name
            baselines.append(preset_mode(preset))
        for attempt in range(1, max_attempts + 1):
            pool = calibrated(res)
            res.attempts = attempt
            reply = story.suite.optimizer.Select(optimizer_pb2.SelectRequest(
                candidates=candidates(pool), objective=optimizer_pb2.OBJECTIVE_MIN_TIME,
                budgets=common_pb2.Budgets(power_budget_w=node.budget_w), risk=RISK), timeout=RPC_TIMEOUT_S)
            res.decision = reply.decisions[0]
            if not res.decision.feasible:
                res.notes.append(f"no predicted mode fits {node.budget_w:g} W: {res.decision.reason}")
                res.verified = None
                return
            modes = [res.decision.mode] + (baselines if attempt == 1 else [])
            rows = profile(agent, profiler_pb2.ProfileRequest(workload=story.workload(), modes=modes,
                                                              batch_sizes=[o.batch_size], seed=o.seed + 99 + attempt))
            byk = {key(m.mode): m for m in rows}
            res.verified = byk.get(key(res.decision.mode))
            if attempt == 1:
                res.maxn = byk.get(key(baselines[0]))
                res.preset = byk.get(key(baselines[1])) if len(baselines) > 1 else None
            tick(node.node_id, attempt, attempt)
            if res.verified is not None and res.verified.power_w <= node.budget_w:
                return
            before = len(pool)
            learn_from_miss(res, res.decision.mode, res.decision.power_w, res.verified)
            pool = calibrated(res)
            got = f"{res.verified.power_w:.2f} W" if res.verified is not None else "nothing (skipped)"
            res.notes.append(f"attempt {attempt}: {label(res.decision.mode)} predicted {res.decision.power_w:.2f} W "
                             f"(≤ {res.decision.power_upper_w:.2f} W), measured {got} > {node.budget_w:g} W; "
                             f"dropped it and {before - len(pool) - 1} modes at or above its clocks; error term now "
                             f"{100 * res.power_rel_err:.1f} %")
        res.notes.append(f"no mode verified within budget after {max_attempts} attempts")

    parallel(story.nodes.values(), run, workers=3)
    ok = sum(r.within_budget for r in story.nodes.values())
    retried = sum(r.attempts > 1 for r in story.nodes.values())
    return (f"{ok}/{len(story.nodes)} chosen modes measured within budget"
            + (f" ({retried} selected again after a first choice measured over)" if retried else " on the first try"))


def summary_rows(story: Story) -> list[dict]:
    """One row per node: the choice as measured, and how MAXN and the operator's preset compare."""
    rows = []
    for r in story.nodes.values():
        v, d = r.verified, r.decision
        row = {"node": r.node.node_id, "device": r.node.device, "budget_w": r.node.budget_w,
               "mode": label(d.mode) if d is not None and d.feasible else None,
               "batch_size": story.options.batch_size,
               "predicted_time_ms": d.time_ms if d is not None and d.feasible else None,
               "predicted_power_w": d.power_w if d is not None and d.feasible else None,
               "predicted_power_upper_w": d.power_upper_w if d is not None and d.HasField("power_upper_w") else None,
               "time_ms": v.time_ms if v else None, "power_w": v.power_w if v else None,
               "energy_j": energy_j(v.time_ms, v.power_w) if v else None,
               "within_budget": r.within_budget, "attempts": r.attempts,
               "maxn": _point(r.maxn, r.node.budget_w), "preset_name": r.preset_name or None,
               "preset": _point(r.preset, r.node.budget_w), "notes": list(r.notes)}
        rows.append(row)
    return rows


def _point(m: common_pb2.Measurement | None, budget_w: float) -> dict | None:
    if m is None:
        return None
    return {"mode": label(m.mode), "time_ms": m.time_ms, "power_w": m.power_w,
            "energy_j": energy_j(m.time_ms, m.power_w), "over_budget": m.power_w > budget_w}
