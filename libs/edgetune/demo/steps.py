"""The demo's story, steps 1–5, through the services' gRPC APIs: discovery, reference models, one
TuningJob that the coordinator runs (its reconcile loop profiles every node through the agents' job
streams, transfers and predicts on the estimator, selects on the optimizer, verifies and applies),
the demo's own check of the job's predictions on held-out modes, Pareto fronts (steps 6–8:
:mod:`.rounds`, :mod:`.concurrent`). The demo orchestrates no tuning: it asks and watches.

Each step is a function of the shared :class:`~edgetune.demo.story.Story` that calls the services,
records what it learned on the story and returns a one-line headline. The console (``__main__``)
prints the headlines and tables; the report (``report``) draws from the same records.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import numpy as np

from edgetune.base.mode import PowerMode
from edgetune.base.records import Points, mode_key
from edgetune.clients.calls import CallFailed, Status
from edgetune.control.reconcile import CANDIDATE_GRID
from edgetune.demo.story import (
    REFERENCE_WORKLOAD,
    RPC_TIMEOUT_S,
    NodeResult,
    Story,
    Tick,
    as_mode,
    energy_j,
    job_name,
    job_spec,
    key,
    label,
    mape_pct,
    maxn_mode,
    operator_preset,
    parallel,
    profile,
)
from edgetune.demo.suite import registered
from edgetune.devices.simulated.tables import truth_table
from edgetune.powermodes.grids import named_grid
from edgetune.powermodes.specs import get_spec
from edgetune.store import MeasurementRecord, NodeRecord
from edgetune.tuning.jobs import NodePhase, TuningJobView
from edgetune.tuning.protocols import reference_model_id
from edgetune.tuning.safety import held_out_power_error


# --- 1. discovery -----------------------------------------------------------------------------------
def discover(story: Story) -> str:
    """GetDevice on every agent; ListNodes on the coordinator (agents registered themselves)."""
    listed: dict[str, NodeRecord] = {}
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
        info = story.agent(node.node_id).profiler.device()
        res = NodeResult(node, spec=info.spec, address=story.agent(node.node_id).child.address,
                         backend=info.backend, grid_modes=named_grid(get_spec(info.spec.name), "powertrain").n_modes)
        registered_w = listed[node.node_id].power_budget_w
        if registered_w != node.budget_w:
            res.notes.append(f"registered budget {registered_w or 0.0:g} W")
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


# --- 2. reference models ---------------------------------------------------------------------------
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


def fit_references(story: Story, tick: Tick) -> str:
    """A ResNet18 reference per device model (Estimator.Fit), named ``reference-DEVICE-train``: what a
    tuning job without a ``reference_model`` transfers from (``edgetune up`` fits the same)."""
    o, est = story.options, story.suite.estimator
    devices = sorted({n.device for n in story.fleet})
    done = {"fit": 0}
    lock = threading.Lock()

    def fit(device: str) -> None:
        story.references[device] = est.fit(reference_points(device, o.reference_modes, o.batch_size, o.seed + 17),
                                           model_id=reference_model_id(device), method="nn", seed=o.seed,
                                           epochs=o.reference_epochs)
        with lock:
            done["fit"] += 1
            tick("fit", done["fit"], len(devices))

    tick("fit", 0, len(devices))
    parallel(devices, fit, workers=2)
    return (f"{len(devices)} reference models fitted ({', '.join(r.model_id for r in story.references.values())}; "
            f"{o.reference_modes} PowerTrain modes each)")


# --- 3. the tuning job ------------------------------------------------------------------------------
def _watch(story: Story, name: str) -> Iterator[TuningJobView]:
    """The job as it changes (WatchTuningJob), resumed from the last revision seen if the stream breaks."""
    after = 0
    coord = story.suite.coordinator
    deadline = time.monotonic() + RPC_TIMEOUT_S * 2
    while time.monotonic() < deadline:
        stream = coord.watch_job(name, after, timeout_s=max(1.0, deadline - time.monotonic()))
        try:
            for job in stream:
                after = job.revision
                yield job
        except CallFailed as exc:
            if exc.code not in (Status.UNAVAILABLE, Status.DEADLINE_EXCEEDED):
                raise
        finally:
            stream.close()
    raise TimeoutError(f"tuning job {name} did not finish within {2 * RPC_TIMEOUT_S:g} s")


def run_job(story: Story, tick: Tick) -> str:
    """SubmitTuningJob, then WatchTuningJob until every node is Applied (or Failed): the coordinator's
    reconcile loop profiles each node (its agent's job stream), transfers the device's reference and
    predicts every candidate (Estimator), selects safely (Optimizer.Select at the job's risk), measures
    the choice on the agent and publishes it as the node's config."""
    o = story.options
    spec = job_spec(o, story.tuning, story.fleet)
    story.suite.coordinator.submit_job(spec)
    job = None
    for job in _watch(story, spec.name):
        for n in job.nodes:
            tick(n.node_id, o.modes if n.terminal else min(n.profiled, o.modes), o.modes)
        if job.phase.done:
            break
    assert job is not None
    story.job = job
    for n in job.nodes:
        story.nodes[n.node_id].status = n
        if n.phase == NodePhase.FAILED:
            story.nodes[n.node_id].notes.append(f"tuning job: failed: {n.reason}")
    applied = sum(n.phase == NodePhase.APPLIED for n in job.nodes)
    return (f"job {spec.name} {job.phase}: {applied}/{len(job.nodes)} nodes Applied; "
            f"{sum(n.profiled for n in job.nodes)} points measured by the coordinator through the agents' job "
            f"streams ({o.modes} random modes per node + the choices it verified)")


# --- 4. the demo's check of the job's predictions ------------------------------------------------
def check(story: Story, tick: Tick) -> str:
    """Independent of the job: measure ``held_out`` random modes it never profiled, MAXN and the operator's
    preset on each agent (Profile streams), predict them and every candidate with the job's model
    (Estimator.Predict), and calibrate the round's option tables by the held-out power error."""
    o = story.options
    done = {"n": 0}
    lock = threading.Lock()

    def run(res: NodeResult) -> None:
        node, agent = res.node, story.agent(res.node.node_id)
        stored = story.suite.store.get_measurements(node.device, o.workload, "train", node.node_id)
        res.profiled = list(stored)  # the job's points (profiles and verifications)
        res.stored = len(stored)
        status = res.status
        if status is not None:
            res.attempts = max(1, len(stored) - o.modes) if status.measured_power_w is not None else 0
        grid = named_grid(get_spec(node.device), CANDIDATE_GRID).array()
        seen = {key(m.mode) for m in res.profiled}
        fresh = [i for i, m in enumerate(grid) if mode_key(m) not in seen]
        rng = np.random.default_rng(o.seed + 1000 + sorted(story.nodes).index(node.node_id))
        held = grid[np.sort(rng.choice(fresh, min(o.held_out, len(fresh)), replace=False))]
        baselines = [maxn_mode(res.device_spec)]
        preset = operator_preset(res.device_spec, node.budget_w)
        if preset is not None:
            res.preset_name = preset.name
            baselines.append(preset.mode())
        modes = [PowerMode(int(m[0]), m[1], m[2], m[3]) for m in held]
        rows = profile(agent, story.profile_job(modes + baselines, seed=o.seed + 99))
        byk = {key(m.mode): m for m in rows}
        res.held_out = [byk[key(m)] for m in modes if key(m) in byk]
        res.maxn = byk.get(key(baselines[0]))
        res.preset = byk.get(key(baselines[1])) if len(baselines) > 1 else None
        model = story.suite.estimator.find(f"tuning-{job_name(o)}-{node.node_id}")
        if model is None:
            raise RuntimeError(f"{node.node_id}: the estimator holds no model of the tuning job")
        res.model = model
        res.predictions = story.suite.estimator.predict(model, grid, o.batch_size)
        pt, mt, pp, mp = held_out_pairs(res)
        res.power_rel_err = held_out_power_error(pp, mp)
        with lock:
            done["n"] += 1
            tick("check", done["n"], len(story.nodes))

    tick("check", 0, len(story.nodes))
    parallel(story.nodes.values(), run, workers=3)
    acc = accuracy(story)
    n_pred = sum(len(r.predictions or ()) for r in story.nodes.values())
    return (f"{acc['points']} held-out modes measured on the agents; {n_pred:,} candidate modes predicted by the "
            f"job's models; held-out MAPE time {acc['time_mape']:.1f} %, power {acc['power_mape']:.1f} %")


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


def job_rows(story: Story) -> list[dict]:
    """One row per node of the job: phase, points, the choice, predicted and measured (job get's columns)."""
    if story.job is None:
        return []
    rows = []
    for n in story.job.nodes:
        mode = label(as_mode(n.mode)) if n.mode is not None else ""
        rows.append({"node": n.node_id, "device": n.device, "phase": n.phase, "profiled": n.profiled, "mode": mode,
                     "budget W": n.power_budget_w, "predicted W": _round(n.predicted_power_w),
                     "upper W": _round(n.predicted_power_upper_w), "measured W": _round(n.measured_power_w),
                     "predicted ms": _round(n.predicted_time_ms), "measured ms": _round(n.measured_time_ms),
                     "reason": n.reason})
    return rows


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 2)


def estimation_rows(story: Story) -> list[dict]:
    rows = []
    for r in story.nodes.values():
        pt, mt, pp, mp = held_out_pairs(r)
        rows.append({"node": r.node.node_id, "reference": story.references[r.node.device].model_id,
                     "model": r.model_ref.model_id, "kind": r.model_ref.kind or "?",
                     "trained on": r.model_ref.n_train or len(r.profiled),
                     "predicted modes": len(r.predictions or ()), "std": "yes" if r.model_ref.has_std else "no",
                     "time MAPE %": f"{mape_pct(pt, mt):.1f}", "power MAPE %": f"{mape_pct(pp, mp):.1f}",
                     "held-out power error (RMS) %": f"{100 * r.power_rel_err:.1f}"})
    return rows


# --- 4. Pareto fronts -------------------------------------------------------------------------------
def pareto(story: Story) -> str:
    """The optimizer's time-power Pareto front of each node's predicted modes."""
    def run(res: NodeResult) -> None:
        assert res.predictions is not None
        res.front = story.suite.optimizer.pareto_front(res.predictions).rows

    parallel(story.nodes.values(), run, workers=3)
    sizes = ", ".join(f"{r.node.node_id} {len(r.front or ())}" for r in story.nodes.values())
    return f"Pareto-optimal modes out of each node's predicted grid: {sizes}"


def summary_rows(story: Story) -> list[dict]:
    """One row per node: the choice as measured, and how MAXN and the operator's preset compare."""
    rows = []
    for r in story.nodes.values():
        v, d = r.verified, r.decision
        row = {"node": r.node.node_id, "device": r.node.device, "budget_w": r.node.budget_w,
               "mode": label(d.mode) if d is not None else None,
               "batch_size": story.options.batch_size,
               "predicted_time_ms": d.time_ms if d is not None else None,
               "predicted_power_w": d.power_w if d is not None else None,
               "predicted_power_upper_w": d.power_upper_w if d is not None else None,
               "time_ms": v.time_ms if v else None, "power_w": v.power_w if v else None,
               "energy_j": v.energy_j if v else None,
               "within_budget": r.within_budget, "attempts": r.attempts,
               "maxn": _point(r.maxn, r.node.budget_w), "preset_name": r.preset_name or None,
               "preset": _point(r.preset, r.node.budget_w), "notes": list(r.notes)}
        rows.append(row)
    return rows


def _point(m: MeasurementRecord | None, budget_w: float) -> dict | None:
    if m is None:
        return None
    return {"mode": label(m.mode), "time_ms": m.time_ms, "power_w": m.power_w,
            "energy_j": energy_j(m.time_ms, m.power_w), "over_budget": m.power_w > budget_w}
