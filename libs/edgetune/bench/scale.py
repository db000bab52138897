"""The control plane at scale: one TuningJob over 100 simulated nodes against one coordinator.

``tuning_job_100_nodes`` / ``tuning_job_1000_nodes``: Redis, the Estimator (``--no-ray --processes <cores>``:
no Ray start-up on these 2 cores; the transfers arriving together run as one batch, one task per core and
target, on a pool of worker processes), the Optimizer and a
coordinator with its reconcile loop, as separate processes on loopback (a
:class:`~edgetune.localrun.localcluster.LocalCluster`, as ``edgetune up`` runs them), and a
:class:`SimulatedFleet`: 100 simulated agents in the bench's process. Each node registers with the coordinator over gRPC (RegisterNode) and
heartbeats (a thread per 100 nodes, on schedule, spread over the interval, none waiting for another's answer); a
few worker threads consume every node's job stream
(``JobQueue``, as the agent does; a node with nothing to do is asked less and less often, up to every 0.2 s
for 100 nodes and 2 s for 1,000, so that the agents' polling does not take a core the control plane is
timed on) and answer each point with the simulated board's truth plus measurement noise (3 % time,
1.5 % power), written under the id the real agent writes. The nodes of one device model pool their profiles
into a fleet model (:mod:`edgetune.tuning.fleet`), as any job's do. The points
skip the measurement protocol's wall time (a simulated agent settles and samples for ~0.1 s a point),
so what is timed is the control plane: the reconcile loop, the Estimator's transfers and predictions,
the Optimizer's selections, the store.

Reported: the job's wall time (submit to its last node's Applied, from the status's own times: the bench
reads the job every second per 100 nodes, a 1,000-node read being 1,000 docs), each node's reconcile time
(its status's start to Applied) with its phases (profiling, estimating, selecting + verifying, publishing)
as medians and 95th percentiles, one reconcile pass over the Applied nodes (the steady-state cost of a
pass), how many nodes were Applied within their budgets, the estimator's and the coordinator's CPU seconds
per node (their process trees, from /proc), their resident memory, and wall / compute: the wall time to the
read that saw the end over the CPU seconds of every process below the bench's divided by the cores (1.0:
every core busy throughout); the 1-minute load average at the end says how busy the machine was.
"""

from __future__ import annotations

import logging
import os
import resource
import tempfile
import threading
import time
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import grpc
import numpy as np

from edgetune.base.mode import PowerMode
from edgetune.base.roles import Role
from edgetune.bench.runner import benchmark
from edgetune.clients.estimator import EstimatorClient
from edgetune.clients.nodes import NodesClient
from edgetune.control.configs import ConfigStore
from edgetune.control.jobs import JobQueue
from edgetune.control.leader import LeaderLease
from edgetune.control.reconcile import CANDIDATE_GRID, Reconciler
from edgetune.control.registry import NodeRegistry
from edgetune.control.tuningjobs import StatusWriter, TuningJobs
from edgetune.devices.simulated.tables import truth_table
from edgetune.estimation.records import FitSpec, MeasuredRow
from edgetune.identity import open_channel
from edgetune.localrun.controlplane import default_budget_w
from edgetune.localrun.localcluster import LocalCluster
from edgetune.powermodes.grids import named_grid
from edgetune.powermodes.specs import get_spec
from edgetune.profiling.protocol import measurement_id
from edgetune.proto.serde.coordinator import heartbeat_to_proto
from edgetune.proto.v1 import coordinator_pb2_grpc
from edgetune.store import Heartbeat, MeasurementRecord, NodeAnnouncement, NodeRecord, ProfileJob, open_store
from edgetune.store.nodes import spec_to_dict
from edgetune.tuning.jobs import JobPhase, NodePhase, NodeStatus, TuningJobSpec, TuningMethod
from edgetune.tuning.protocols import reference_model_id

log = logging.getLogger(__name__)

#: The fleet: device model -> nodes (100 in all).
FLEET = {"orin-agx": 40, "xavier-agx": 30, "orin-nano": 20, "nano": 10}
PROFILES = 12
#: A simulated agent's heartbeat deadline (NodesClient's default is 5 s; its agents beat every 5 s).
HEARTBEAT_TIMEOUT_S = 10.0
WORKERS = 8
#: A node's pause between asks while it has no job: after work, and at most for 100 nodes;
#: a larger fleet pauses longer, so that the fleet asks the store about ASKS_PER_S times a second when idle.
IDLE_PAUSE_S = (0.01, 0.2)
ASKS_PER_S = 1000
#: Nodes one heartbeat thread beats for (one thread for 1,000 nodes let heartbeats lapse on a busy machine:
#: nodes taken for lost, their tuning paused and started over).
BEATS_PER_THREAD = 100


@dataclass
class SimulatedFleet:
    """Many simulated agents in one process (module docstring)."""

    coordinator: str
    store: Any
    nodes: dict[str, str]  # node id -> device model
    workers: int = WORKERS
    seed: int = 0
    points: int = 0
    #: jobs answered more than once (a point profiled twice: none expected)
    answered_twice: int = 0
    heartbeats_failed: int = 0
    _answered: set[str] = field(default_factory=set)
    _channel: Any = None
    _stop: threading.Event = field(default_factory=threading.Event)
    _threads: list[threading.Thread] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def start(self) -> SimulatedFleet:
        self._channel = open_channel(self.coordinator)
        client = NodesClient(self._channel, timeout_s=10.0)
        interval = 5.0
        for node_id, device in self.nodes.items():
            spec = get_spec(device)
            registered = client.register(NodeAnnouncement(node_id, "fleet", "fleet", spec, spec.maxn(),
                                                          power_budget_w=default_budget_w(device)))
            interval = registered.heartbeat_interval_s or interval

        stub = coordinator_pb2_grpc.CoordinatorStub(self._channel)

        def beat(node_ids: list[str]) -> None:
            # on schedule (the interval from the start of one round to the next), not the interval after a round
            # that a busy machine made long: the nodes' heartbeats must not lapse because the bench is slow; each
            # node at its own moment of the interval, as agents started one after another beat, and none waiting
            # for another's answer (one after another, a slow beat held up the rest; all at once, 1,000 beats
            # in one burst kept the coordinator's store connections from its workers)
            began = time.monotonic()
            while not self._stop.wait(max(0.0, began + interval - time.monotonic())):
                began = time.monotonic()
                sent = []
                for i, node_id in enumerate(node_ids):
                    if self._stop.wait(max(0.0, began + interval * i / len(node_ids) - time.monotonic())):
                        return
                    sent.append((node_id, stub.Heartbeat.future(heartbeat_to_proto(node_id, Heartbeat(state="ready")),
                                                                timeout=HEARTBEAT_TIMEOUT_S)))
                for node_id, reply in sent:
                    try:
                        reply.result()
                    except grpc.RpcError as exc:  # as an agent does: the next beat is sent all the same
                        with self._lock:
                            self.heartbeats_failed += 1
                        log.debug("heartbeat of %s failed: %s", node_id, exc.code())  # counted in the result

        ids = list(self.nodes)
        shares = [ids[i::self.workers] for i in range(self.workers)]
        beaters = [ids[i::-(-len(ids) // BEATS_PER_THREAD)] for i in range(-(-len(ids) // BEATS_PER_THREAD))]
        self._threads = [threading.Thread(target=beat, args=(share,), name=f"fleet-heartbeat-{i}", daemon=True)
                         for i, share in enumerate(beaters)]
        self._threads += [threading.Thread(target=self._work, args=(share, i), name=f"fleet-{i}", daemon=True)
                          for i, share in enumerate(shares)]
        for t in self._threads:
            t.start()
        return self

    def _work(self, node_ids: list[str], index: int) -> None:
        queue = JobQueue(self.store)
        rng = np.random.default_rng(self.seed + index)
        consumer = f"fleet-{index}"
        least_s, most_s = IDLE_PAUSE_S[0], max(IDLE_PAUSE_S[1], 2 * len(self.nodes) / ASKS_PER_S)
        # each node asked on its own backoff, as an agent of its own would: one busy node no longer keeps the
        # thread asking about every idle one (two store calls a node a round took ~170 CPU s at 1,000 nodes)
        pause_s = dict.fromkeys(node_ids, least_s)
        due = dict.fromkeys(node_ids, 0.0)
        while not self._stop.is_set():
            now = time.monotonic()
            for node_id in node_ids:
                if due[node_id] > now:
                    continue
                jobs = queue.claim(node_id, consumer, block_ms=0, count=8)
                for job in jobs:
                    device, point = self.nodes[node_id], ProfileJob.from_dict(job.payload)  # as the agent reads it
                    workload, role, b = point.workload, point.role.value, point.batch_sizes[0]
                    rows = []
                    for mode in point.modes:
                        truth = truth_table(device, workload, role, np.asarray([mode.as_tuple()], dtype=float), [b])[0]
                        rows.append(MeasurementRecord(
                            measurement_id(device, node_id, workload, role, mode, b, job.job_id), device, workload,
                            role, mode, b, truth["time_ms"] * float(rng.normal(1.0, 0.03)),
                            truth["power_w"] * float(rng.normal(1.0, 0.015)), node_id))
                    queue.complete(job, rows)
                    with self._lock:
                        self.points += len(rows)
                        self.answered_twice += job.job_id in self._answered
                        self._answered.add(job.job_id)
                pause_s[node_id] = least_s if jobs else min(pause_s[node_id] * 2, most_s)
                due[node_id] = time.monotonic() + pause_s[node_id]
            self._stop.wait(max(0.0, min(due.values()) - time.monotonic()))

    def close(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(10)
        if self._channel is not None:
            self._channel.close()


def _stats(values: list[float]) -> dict[str, float]:
    a = np.asarray(values, dtype=float)
    if not a.size:
        return {}
    return {"p50_s": round(float(np.percentile(a, 50)), 3), "p95_s": round(float(np.percentile(a, 95)), 3),
            "max_s": round(float(a.max()), 3)}


def _phases(node: NodeStatus) -> dict[str, float]:
    """Seconds a node spent per phase, from its status events (the first event of each phase)."""
    first: dict[str, float] = {}
    for e in node.events:
        t = e.at_s
        msg = e.message
        name = ("estimating" if msg.endswith("points profiled; transferring") or "transferring" in msg else
                "selecting" if msg.startswith("selecting for") else
                "verified" if msg.startswith("measured") else
                "published" if "published" in msg else "")
        if name and name not in first:
            first[name] = t
    start = node.started_s
    out = {}
    marks = [("profiling", start, first.get("estimating")), ("estimating", first.get("estimating"), first.get("selecting")),
             ("selecting_verifying", first.get("selecting"), first.get("verified")),
             ("publishing", first.get("verified"), first.get("published"))]
    for name, a, b in marks:
        if a is not None and b is not None:
            out[name] = b - a
    return out


def _tuning_job(fleet_sizes: dict[str, int], workers: int) -> dict[str, Any]:
    """One TuningJob over ``fleet_sizes`` simulated nodes (module docstring); CPU seconds of every process."""
    nodes = {f"{device}-{i + 1}": device for device, n in fleet_sizes.items() for i in range(n)}
    with tempfile.TemporaryDirectory(prefix="edgetune-scale-") as tmp, \
            LocalCluster(Path(tmp), tuning=True, heartbeat_ttl_s=30.0, lease_ms=5000) as cluster:
        assert cluster.estimator is not None and cluster.coordinator is not None and cluster.client is not None
        assert cluster.store is not None
        fleet = SimulatedFleet(cluster.coordinator.address, cluster.store, nodes, workers=workers)
        try:
            with grpc.insecure_channel(cluster.estimator.address) as channel:
                estimator = EstimatorClient(channel, timeout_s=300)
                for device in fleet_sizes:  # a ResNet18 reference per device model, as `edgetune up` fits them
                    grid = named_grid(get_spec(device), "fulcrum").array()
                    grid = grid[np.sort(np.random.default_rng(0).choice(len(grid), min(80, len(grid)), replace=False))]
                    ms = tuple(MeasuredRow(PowerMode.from_mapping(r), 16, r["time_ms"], r["power_w"])
                               for r in truth_table(device, "resnet18", "train", grid, [16]))
                    estimator.fit(FitSpec(device, "resnet18", Role.TRAIN, "nn", reference_model_id(device), ms,
                                          epochs=60, seed=0))
            fleet.start()
            client = cluster.client
            spec = TuningJobSpec(name="scale", workload="mobilenetv3", role=Role.TRAIN.value, batch_sizes=(16,),
                                 nodes=tuple(nodes), profiles=PROFILES, method=TuningMethod.RANDOM)
            pids = {"estimator": cluster.estimator.pid, "coordinator": cluster.coordinator.pid}
            if cluster.optimizer is not None:
                pids["optimizer"] = cluster.optimizer.pid
            if cluster.redis is not None and cluster.redis.pid:
                pids["redis"] = cluster.redis.pid
            cpu0 = {k: _tree_cpu_s(pid) for k, pid in pids.items()}
            all0, own0 = _tree_cpu_s(os.getpid()), time.process_time()
            submitted_s = time.time()
            client.submit_job(spec)
            done = (JobPhase.SUCCEEDED, JobPhase.FAILED)
            deadline = time.monotonic() + 1200 + 2 * len(nodes)
            while True:
                job = client.job("scale")
                if job.phase in done or time.monotonic() > deadline:
                    break
                # a GetTuningJob of 1,000 nodes reads 1,000 docs and sends ~2 MB: asked every 10 s, not every 2 s
                # (every 2 s, ~200 k of a 416 s run's 552 k doc reads); the job's time comes from its status
                time.sleep(max(0.5, len(nodes) / 100))
            wall_s = time.time() - submitted_s  # to the poll that saw the end
            # submit to the last node's last write (its Applied, for a Succeeded job)
            job_s = max((n.updated_s for n in job.nodes), default=submitted_s + wall_s) - submitted_s
            cpu = {k: _tree_cpu_s(pid) - cpu0[k] for k, pid in pids.items()}
            compute_s = _tree_cpu_s(os.getpid()) - all0
            cpu["bench_agents"] = time.process_time() - own0  # this process: the simulated agents, the job polls
            coordinator_rss_mb = _rss_mb(cluster.coordinator.pid)
            estimator_rss_mb = _rss_mb(cluster.estimator.pid)  # its main process: the loaded models' cache
        finally:
            fleet.close()
        # One reconcile pass over the 100 Applied nodes, as the leader runs it (a loop of this process
        # under its own lease name, so it leads; nothing is left to start: the pass reads and decides)
        store = cluster.store
        lease = LeaderLease(store, "bench-reconcile-pass", lease_ms=5000, holder_id="bench")
        lease.start()
        try:
            assert lease.wait_leader(10)
            reconciler = Reconciler(store, NodeRegistry(store, heartbeat_ttl_s=30.0), ConfigStore(store), lease,
                                    None, None)
            passes = []
            for _ in range(10):
                p0 = time.perf_counter()
                reconciler.run_once()
                passes.append(time.perf_counter() - p0)
        finally:
            lease.stop()
    applied = [n for n in job.nodes if n.phase == NodePhase.APPLIED]
    within = [n for n in applied if (n.measured_power_w or 0.0) <= (n.power_budget_w or 0.0)]
    per_node = [n.updated_s - n.started_s for n in applied]
    phases: dict[str, list[float]] = {}
    for n in applied:
        for name, s in _phases(n).items():
            phases.setdefault(name, []).append(s)
    failed = {n.node_id: n.reason for n in job.nodes if n.phase == NodePhase.FAILED}
    over_best = _time_over_best(applied, nodes)
    return {"job_s": round(job_s, 1) if len(applied) == len(nodes) else None, "wall_s_to_end": round(wall_s, 1),
            "nodes": len(nodes), "applied": len(applied), "within_budget": len(within),
            "time_over_best": {"p50": round(float(np.median(over_best)), 3), "max": round(float(max(over_best)), 3)}
            if over_best else {},
            "failed": dict(list(failed.items())[:5]), "points_measured": fleet.points,
            "points_profiled_twice": fleet.answered_twice, "heartbeats_failed": fleet.heartbeats_failed,
            "node_reconcile": _stats(per_node), "phases": {k: _stats(v) for k, v in phases.items()},
            f"pass_over_{len(nodes)}_applied_ms": round(float(np.median(passes)) * 1e3, 1),
            "estimator_cpu_s_per_node": round(cpu["estimator"] / len(nodes), 3),
            "coordinator_cpu_s_per_node": round(cpu["coordinator"] / len(nodes), 3),
            "coordinator_rss_mb": coordinator_rss_mb, "estimator_rss_mb": estimator_rss_mb,
            "compute_s": round(compute_s, 1), "cores": os.cpu_count(),
            "cpu_s_by_process": {k: round(v, 1) for k, v in cpu.items()},
            "wall_over_compute": round(wall_s / max(compute_s / (os.cpu_count() or 1), 1e-9), 2),
            "load_average_1m_at_end": round(os.getloadavg()[0], 2),
            "nodes_per_minute": round(len(applied) / job_s * 60, 1),
            "processes": "Redis, estimator (--no-ray --processes <cores>: transfers arriving together batched, one "
                         "task per core and target), optimizer, coordinator: separate processes, as edgetune up "
                         "runs them",
            "agents": f"{len(nodes)} simulated agents in the bench's process: gRPC RegisterNode + Heartbeat, "
                      f"{workers} threads consuming the nodes' job streams",
            "compute": "CPU seconds of every process on the machine's process tree below this one during the job "
                       "(services, their workers, the agents), from submit to the poll that saw its end (wall_s_to_end); "
                       "wall_over_compute = wall_s_to_end / (compute_s / cores): 1.0 when every core worked "
                       "throughout; job_s: submit to the last node's Applied (its status's time)"}


def _time_over_best(applied: list[NodeStatus], nodes: dict[str, str]) -> list[float]:
    """Each applied node's decision on the simulator's noise-free table: its mode's time over the best time
    within its budget among the job's candidates (what the fleet's speed costs, or gains, in decisions)."""
    truth: dict[str, tuple[np.ndarray, np.ndarray, dict[tuple[float, ...], int]]] = {}
    out = []
    for n in applied:
        device = nodes[n.node_id]
        if device not in truth:
            grid = named_grid(get_spec(device), CANDIDATE_GRID).array()
            rows = truth_table(device, "mobilenetv3", "train", grid, [16])
            truth[device] = (np.array([r["time_ms"] for r in rows]), np.array([r["power_w"] for r in rows]),
                             {tuple(float(v) for v in m): i for i, m in enumerate(grid)})
        t, p, at = truth[device]
        i = at.get(tuple(float(v) for v in n.mode)) if n.mode is not None else None
        fits = p <= (n.power_budget_w or 0.0)
        if i is not None and fits.any():
            out.append(float(t[i] / t[fits].min()))
    return out


def _tree_cpu_s(pid: int) -> float:
    """CPU seconds (user + system) of ``pid`` and its live descendants, from /proc (0 where it cannot be read)."""
    tick = float(os.sysconf("SC_CLK_TCK"))
    children: dict[int, list[int]] = {}
    stats: dict[int, float] = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            fields = (d / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        p, ppid = int(d.name), int(fields[1])
        children.setdefault(ppid, []).append(p)
        stats[p] = (int(fields[11]) + int(fields[12])) / tick
    total, todo = 0.0, [pid]
    while todo:
        p = todo.pop()
        total += stats.get(p, 0.0)
        todo += children.get(p, [])
    return total


def _rss_mb(pid: int) -> float | None:
    """Resident memory of a process in MiB (/proc/PID/status VmRSS)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        pass
    return None


@benchmark("tuning_job_100_nodes", "one TuningJob over 100 simulated nodes (40 Orin AGX, 30 Xavier AGX, 20 Orin "
           "Nano, 10 Nano; 12 random profiles each) reaches Applied on every node; wall time <= 40 s on 2 cores "
           "(reported: reconcile time per node and its phases, one reconcile pass, estimator CPU s per node, "
           "wall / compute, each node's mode's time over the best within its budget)", "job_s", 40.0)
def tuning_job_100_nodes() -> dict[str, Any]:
    return _tuning_job(FLEET, WORKERS)


#: The 1,000-node fleet: the 100-node one ten times over.
FLEET_1000 = {device: 10 * n for device, n in FLEET.items()}


@benchmark("tuning_job_1000_nodes", "one TuningJob over 1,000 simulated nodes (the 100-node fleet ten times; 12 "
           "random profiles each) reaches Applied on every node; wall time <= 300 s on 2 cores (reported: estimator "
           "CPU s per node, wall / compute, a reconcile pass over the 1,000, coordinator memory, time over the "
           "best within budget)", "job_s", 300.0)
def tuning_job_1000_nodes() -> dict[str, Any]:
    return _tuning_job(FLEET_1000, 4 * WORKERS)


RECONCILE_NODES = 1000


def _replaced_by(new: NodeStatus, _old: NodeStatus) -> NodeStatus:
    return new


@benchmark("reconcile_pass_1000_nodes", "one reconcile pass of the leader over a TuningJob of 1,000 Applied nodes "
           "(embedded Redis) <= 1 s", "pass_s", 1.0)
def reconcile_pass_1000_nodes() -> dict[str, Any]:
    """1,000 registered, heartbeating nodes and one job whose status has them all Applied (each with its
    decision and a few events, as a tuned node has): the median of 10 passes of :meth:`Reconciler.run_once`
    (it reads the jobs and the registry and decides that nothing is to be done)."""


    ids = [f"orin-agx-{i + 1}" for i in range(RECONCILE_NODES)]
    with tempfile.TemporaryDirectory(prefix="edgetune-pass-") as tmp:
        store = open_store(f"embedded:{tmp}")
        try:
            registry = NodeRegistry(store, heartbeat_ttl_s=300.0)
            spec = get_spec("orin-agx")
            for node_id in ids:
                registry.register(NodeRecord(node_id=node_id, device=spec_to_dict(spec), power_budget_w=30.0))
                registry.heartbeat(node_id, state="ready")
            jobs = TuningJobs(store)
            jobs.submit(TuningJobSpec(name="fleet", workload="mobilenetv3", nodes=tuple(ids), profiles=12))
            now = time.time()
            writer = StatusWriter(jobs, "fleet", lambda: None)  # type: ignore[arg-type, return-value]
            writer.ensure(ids, {n: "orin-agx" for n in ids})
            for node_id in ids:
                st = NodeStatus(node_id, "orin-agx", started_s=now, updated_s=now)
                for message in ("tuning for 30 W", "12 points measured", "12 points profiled; transferring",
                                "selecting for 30 W at risk 0.05", "measured 27.1 W, 80.2 ms"):
                    st = st.with_event(message)
                applied = st.with_event("config published", phase=NodePhase.APPLIED, power_budget_w=30.0,
                                        mode=(8.0, 2201.6, 1300.5, 3199.0), batch_size=16,
                                        measured_power_w=27.1, measured_time_ms=80.2)
                writer.update(node_id, partial(_replaced_by, applied))
            lease = LeaderLease(store, "bench-reconcile-pass", lease_ms=5000, holder_id="bench")
            lease.start()
            try:
                assert lease.wait_leader(10)
                reconciler = Reconciler(store, NodeRegistry(store, heartbeat_ttl_s=300.0), ConfigStore(store), lease,
                                        None, None)
                passes, cpu = [], []
                for _ in range(10):
                    c0, p0 = time.process_time(), time.perf_counter()
                    reconciler.run_once()
                    passes.append(time.perf_counter() - p0)
                    cpu.append(time.process_time() - c0)
                started = reconciler.cached()["workers"]
            finally:
                lease.stop()
        finally:
            store.close()
    return {"pass_s": round(float(np.median(passes)), 3), "pass_cpu_s": round(float(np.median(cpu)), 3),
            "passes": len(passes), "nodes": RECONCILE_NODES, "workers_started": started,
            "bench_process_max_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
            "load_average_1m": round(os.getloadavg()[0], 2)}
