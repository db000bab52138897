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
    RPC_TIMEOUT_S,
    NodeResult,
    Story,
    Tick,
    energy_j,
    key,
    label,
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
    optimizer_pb2,
    profiler_pb2,
)
from edgetune.tuning import Decision, NodeTuner, Points
from edgetune.tuning.records import mode_key
from edgetune.tuning.remote import AgentMeasurer, OptimizerSelector, candidates, mode_msg, predictions


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
        spec = r.device_spec
        rows.append({"node": r.node.node_id, "device": spec.display_name, "backend": r.backend,
                     "address": r.address, "cores": max(spec.core_counts),
                     "clocks (cpu/gpu/emc)": f"{len(spec.cpu_mhz)}/{len(spec.gpu_mhz)}/{len(spec.emc_mhz)}",
                     "PowerTrain modes": r.grid_modes, "budget W": f"{r.node.budget_w:g}",
                     "state": info.state if info else "?"})
    return rows


# --- 2. profiling -----------------------------------------------------------------------------------
def profile_fleet(story: Story, tick: Tick) -> str:
    """Each node's :class:`~edgetune.tuning.NodeTuner` (the agent's Profile stream, the estimator, the
    optimizer's Select) profiles ``modes + held_out`` random PowerTrain-grid modes in one stream;
    the first ``modes`` train the transfer, the rest are held out to calibrate and check it."""
    o = story.options

    def run(i_node: tuple[int, NodeSpec]) -> None:
        i, node = i_node
        res = story.nodes[node.node_id]
        measurer = AgentMeasurer(story.agent(node.node_id).stub, node.device, o.workload, "train",
                                 lambda done, total: tick(node.node_id, done, total), RPC_TIMEOUT_S)
        res.tuner = NodeTuner(story.tuning.with_(seed=o.seed * 1000 + i), measurer, story.suite.estimator,
                              OptimizerSelector(story.suite.optimizer, RPC_TIMEOUT_S), base=None,
                              candidates=named_grid(get_spec(node.device), "powertrain").array(),
                              batch_size=o.batch_size, device=node.device, workload=o.workload,
                              model_id=f"demo-{node.node_id}-{o.workload}",
                              transfer_epochs=o.transfer_epochs or None,
                              transfer_params={"restarts": str(o.gp_restarts)} if o.gp_restarts else None)
        res.tuner.profile_initial()
        held = {mode_key(m) for m in res.tuner.held_out.modes}
        msgs = [m for _, m in measurer.measured]
        res.profiled = [m for m in msgs if key(m.mode) not in held]
        res.held_out = [m for m in msgs if key(m.mode) in held]
        res.stored = len(story.suite.store.get_measurements(node.device, o.workload, "train", node.node_id))

    parallel(enumerate(story.fleet), run, workers=len(story.fleet))
    n = sum(len(r.profiled) + len(r.held_out) for r in story.nodes.values())
    stored = sum(r.stored for r in story.nodes.values())
    return (f"{n} points measured on {len(story.nodes)} agents ({o.modes} per node for the transfer + "
            f"{o.held_out} held out to check it); {stored} measurements in Redis")


# --- 3. estimation ----------------------------------------------------------------------------------
def reference_points(device: str, n_modes: int, batch_size: int, seed: int) -> Points:
    """A large reference table: ResNet18 training on (a sample of) the device's PowerTrain grid, from the
    simulator's truth plus measurement noise (3 % time, 1.5 % power)."""
    spec = get_spec(device)
    grid = named_grid(spec, "powertrain").array()
    rng = np.random.default_rng(seed)
    if n_modes < len(grid):
        grid = grid[np.sort(rng.choice(len(grid), n_modes, replace=False))]
    rows = truth_table(spec, REFERENCE_WORKLOAD, "train", grid, [batch_size])
    time_ms = [r["time_ms"] * float(rng.normal(1.0, 0.03)) for r in rows]
    power_w = [r["power_w"] * float(rng.normal(1.0, 0.015)) for r in rows]
    return Points(np.asarray([[r["cores"], r["cpu_mhz"], r["gpu_mhz"], r["emc_mhz"]] for r in rows], dtype=float),
                  np.full(len(rows), batch_size), np.asarray(time_ms), np.asarray(power_w), device,
                  REFERENCE_WORKLOAD, "train")


def estimate(story: Story, tick: Tick) -> str:
    """Fit a ResNet18 reference per device model, then each node's tuner transfers it to the node's
    workload from its profiled modes, predicts every PowerTrain-grid mode of the node's device and
    calibrates σ by the held-out modes (Fit / Transfer / Predict)."""
    o, est = story.options, story.suite.estimator
    devices = sorted({n.device for n in story.fleet})
    done = {"fit": 0, "transfer": 0}
    lock = threading.Lock()

    def fit(device: str) -> None:
        story.references[device] = est.fit(reference_points(device, o.reference_modes, o.batch_size, o.seed + 17),
                                           model_id=f"demo-reference-{device}", method="nn", seed=o.seed,
                                           epochs=o.reference_epochs)
        with lock:
            done["fit"] += 1
            tick("fit", done["fit"], len(devices))

    def transfer(node: NodeSpec) -> None:
        res = story.nodes[node.node_id]
        assert res.tuner is not None
        res.tuner.base = story.references[node.device]
        pred = res.tuner.explore()
        res.model = res.tuner.model
        res.predictions = pred
        with lock:
            done["transfer"] += 1
            tick("transfer", done["transfer"], len(story.fleet))

    tick("fit", 0, len(devices))
    tick("transfer", 0, len(story.fleet))
    parallel(devices, fit, workers=2)
    parallel(story.fleet, transfer, workers=2)
    acc = accuracy(story)
    n_pred = sum(len(r.predictions or ()) for r in story.nodes.values())
    return (f"{len(devices)} reference models fitted, {len(story.fleet)} transfers; {n_pred:,} modes predicted; "
            f"held-out MAPE time {acc['time_mape']:.1f} %, power {acc['power_mape']:.1f} %")


def held_out_pairs(res: NodeResult) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(predicted time, measured time, predicted power, measured power) over the held-out modes."""
    at, pred = res.predicted(), res.predictions
    pairs = [(at[key(m.mode)], m) for m in res.held_out if key(m.mode) in at]
    if pred is None or not pairs:
        return np.empty(0), np.empty(0), np.empty(0), np.empty(0)
    rows = np.array([i for i, _ in pairs], dtype=np.int64)
    return (pred.time_ms[rows], np.array([m.time_ms for _, m in pairs]),
            pred.power_w[rows], np.array([m.power_w for _, m in pairs]))


def accuracy(story: Story) -> dict[str, float]:
    pt, mt, pp, mp = (np.concatenate(a) for a in zip(*(held_out_pairs(r) for r in story.nodes.values()), strict=True))
    return {"time_mape": mape_pct(pt, mt), "power_mape": mape_pct(pp, mp), "points": int(len(mt))}


def estimation_rows(story: Story) -> list[dict]:
    rows = []
    for r in story.nodes.values():
        pt, mt, pp, mp = held_out_pairs(r)
        rows.append({"node": r.node.node_id, "reference": story.references[r.node.device].model_id,
                     "model": r.model_ref.model_id, "kind": r.model_ref.kind or "?", "trained on": len(r.profiled),
                     "predicted modes": len(r.predictions or ()), "std": "yes" if r.model_ref.has_std else "no",
                     "time MAPE %": f"{mape_pct(pt, mt):.1f}", "power MAPE %": f"{mape_pct(pp, mp):.1f}",
                     "held-out power error (RMS) %": f"{100 * r.power_rel_err:.1f}"})
    return rows


# --- 4. Pareto fronts -------------------------------------------------------------------------------
def pareto(story: Story) -> str:
    """The optimizer's time-power Pareto front of each node's predicted modes."""
    def run(res: NodeResult) -> None:
        assert res.predictions is not None
        reply = story.suite.optimizer.ParetoFront(
            optimizer_pb2.ParetoFrontRequest(candidates=candidates(res.predictions)), timeout=RPC_TIMEOUT_S)
        res.front = predictions(reply.front, "front")

    parallel(story.nodes.values(), run, workers=3)
    sizes = ", ".join(f"{r.node.node_id} {len(r.front or ())}" for r in story.nodes.values())
    return f"Pareto-optimal modes out of each node's predicted grid: {sizes}"


# --- 5. selection and verification ------------------------------------------------------------------
def select_and_verify(story: Story, tick: Tick) -> str:
    """Each node's tuner selects safely (Optimizer.Select: least predicted time with power + z(1 − risk) σ
    within the budget, σ widened by the held-out relative power error) and measures the choice on the
    agent; a choice measured over budget is dropped with every mode at or above its clocks, the error
    widened, and the optimizer selects again (the policy's ``max_attempts``). MAXN and the operator's
    preset are measured on the agent with the same protocol."""
    o = story.options

    def run(res: NodeResult) -> None:
        node, agent = res.node, story.agent(res.node.node_id)
        assert res.tuner is not None
        baselines = [maxn_mode(res.device_spec)]
        preset = operator_preset(res.device_spec, node.budget_w)
        if preset is not None:
            res.preset_name = preset.name
            baselines.append(preset_mode(preset))
        rows = profile(agent, profiler_pb2.ProfileRequest(workload=story.workload(), modes=baselines,
                                                          batch_sizes=[o.batch_size], seed=o.seed + 99))
        byk = {key(m.mode): m for m in rows}
        res.maxn = byk.get(key(baselines[0]))
        res.preset = byk.get(key(baselines[1])) if len(baselines) > 1 else None
        d = res.tuner.select_and_verify(node.budget_w)
        res.attempts, res.decision = d.attempts, decision_msg(d)
        res.notes += list(d.notes)
        if not d.feasible:
            res.notes.append(f"no predicted mode fits {node.budget_w:g} W: {d.reason}")
            res.verified = None
        else:
            measurer = res.tuner.measurer
            assert isinstance(measurer, AgentMeasurer)
            res.verified = next((m for purpose, m in reversed(measurer.measured)
                                 if purpose == "verify" and mode_key(d.mode or ()) == key(m.mode)), None)
        tick(node.node_id, d.attempts, d.attempts)

    parallel(story.nodes.values(), run, workers=3)
    ok = sum(r.within_budget for r in story.nodes.values())
    retried = sum(r.attempts > 1 for r in story.nodes.values())
    return (f"{ok}/{len(story.nodes)} chosen modes measured within budget"
            + (f" ({retried} selected again after a first choice measured over)" if retried else " on the first try"))


def decision_msg(d: Decision) -> common_pb2.Decision:
    """The tuner's decision as the API's message (what the report and summary read)."""
    msg = common_pb2.Decision(feasible=d.feasible, reason=d.reason, batch_size=d.batch_size)
    if d.feasible and d.mode is not None:
        msg.mode.CopyFrom(mode_msg(d.mode))
        msg.time_ms, msg.power_w = d.predicted_time_ms or 0.0, d.predicted_power_w or 0.0
        msg.energy_j = energy_j(msg.time_ms, msg.power_w)
        if d.power_upper_w is not None:
            msg.power_upper_w = d.power_upper_w
    return msg


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
