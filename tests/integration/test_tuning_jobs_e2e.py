"""TuningJobs end to end: the Estimator (no Ray), the Optimizer, the coordinator and simulated agents
on loopback; the leader's reconcile loop drives every node to Applied through the agents' job
streams, the estimator's Transfer / Predict and the optimizer's Select.

- a job over two nodes reaches Succeeded: each node's config is published once, its measured power
  within its budget, and the agents apply it; a budget change re-selects without profiling. The
  services run in this process over the in-memory store (``harness.InProcessCluster``): the
  behaviour under test is the services', not their processes';
- SIGKILL the leader mid-job: the standby finishes it; no point is profiled twice (each point's job
  id was queued once per node) and each node has one config revision. Here they are processes
  (Redis, coordinator replicas, services, agents): the fault is a process dying.
"""

from __future__ import annotations

import signal
import time

import grpc
import pytest
from harness import QUICK_TRANSFER_ARGS, InProcessCluster, references, wait_job

from edgetune.localrun.localcluster import LocalCluster
from edgetune.proto.v1 import (
    common_pb2,
    coordinator_pb2,
    coordinator_pb2_grpc,
    tuning_pb2,
)

pytestmark = [pytest.mark.integration, pytest.mark.slow]

#: node id -> (device model, power budget W)
NODES = {"orin-agx-1": ("orin-agx", 25.0), "orin-nano-1": ("orin-nano", 10.0)}
APPLIED = tuning_pb2.NODE_PHASE_APPLIED


def _spec(name: str, refs: dict[str, str], device: str, *, budgets: bool = True) -> tuning_pb2.TuningJobSpec:
    """A job over the nodes of ``device``; ``budgets``: per-node budgets in the job (else the
    nodes' registered ones)."""
    nodes = [n for n, (m, _) in NODES.items() if m == device]
    return tuning_pb2.TuningJobSpec(
        name=name, workload=common_pb2.Workload(name="mobilenetv3", role=common_pb2.ROLE_TRAIN),
        batch_sizes=[16], nodes=nodes, profiles=12, reference_model_id=refs[device],
        node_power_budget_w={n: NODES[n][1] for n in nodes} if budgets else {})


def _why(cluster: LocalCluster | InProcessCluster, job: tuning_pb2.TuningJob) -> list:
    """The nodes' reasons and events and the coordinators' logged warnings (the job's repr is cut short;
    in-process, the warnings are in the test's captured log)."""
    why: list = [(n.node_id, n.reason, [e.message for e in n.events]) for n in job.nodes]
    supervisor = getattr(cluster, "supervisor", None)
    children = supervisor.children if supervisor is not None else []
    logged = [line for c in children if c.name.startswith("coordinator") for line in c.log_tail(400).splitlines()
              if '"level": "warning"' in line or '"level": "error"' in line]
    return why + logged[-30:]


def _check_applied(cluster: LocalCluster | InProcessCluster, job: tuning_pb2.TuningJob, budgets: dict[str, float] | None = None) -> None:
    why = _why(cluster, job) if job.phase != tuning_pb2.JOB_PHASE_SUCCEEDED else []
    assert job.phase == tuning_pb2.JOB_PHASE_SUCCEEDED, why
    for node in job.nodes:
        assert node.phase == APPLIED, why
        budget = (budgets or {}).get(node.node_id, NODES[node.node_id][1])
        assert node.power_budget_w == budget
        assert node.measured_power_w <= budget, node
        assert node.profiled >= 3
        assert node.config_revision >= 1
        assert cluster.store is not None
        cfg = cluster.store.get_config(node.node_id)
        assert cfg is not None and cfg.mode is not None
        assert (cfg.mode.cores, cfg.mode.cpu_mhz, cfg.mode.gpu_mhz, cfg.mode.emc_mhz) == \
            (node.mode.cores, node.mode.cpu_mhz, node.mode.gpu_mhz, node.mode.emc_mhz)


def test_job_reaches_applied_within_budget(tmp_path, run_dir):
    with InProcessCluster(tmp_path, tuning=True) as cluster:
        assert cluster.estimator is not None and cluster.channel is not None
        cluster.start_agents({n: (m, b) for n, (m, b) in NODES.items()})
        refs = references(cluster.store, cluster.estimator.address, [m for m, _ in NODES.values()], run_dir)
        stub = coordinator_pb2_grpc.CoordinatorStub(cluster.channel)
        # the Orin AGX job uses the node's registered budget (UpdateBudget changes it below)
        jobs = [_spec(f"mnv3-{m}", refs, m, budgets=m != "orin-agx") for m in sorted(refs)]
        for spec in jobs:
            submitted = stub.SubmitTuningJob(tuning_pb2.SubmitTuningJobRequest(spec=spec), timeout=10)
            assert submitted.spec.name == spec.name
            again = stub.SubmitTuningJob(tuning_pb2.SubmitTuningJobRequest(spec=spec), timeout=10)  # a retry
            assert again.spec == submitted.spec
        chosen = {}
        for spec in jobs:
            job = wait_job(stub, spec.name, 90)
            _check_applied(cluster, job)
            chosen.update({n.node_id: n.mode for n in job.nodes})
        listed = stub.ListTuningJobs(tuning_pb2.ListTuningJobsRequest(), timeout=10).jobs
        assert sorted(j.spec.name for j in listed) == sorted(s.name for s in jobs)
        # the agents follow their published configs
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            nodes = {n.node_id: n for n in stub.ListNodes(coordinator_pb2.ListNodesRequest(), timeout=5).nodes}
            if all(nodes[n].current_mode == chosen[n] for n in NODES):
                break
            time.sleep(0.3)
        assert {n: nodes[n].current_mode for n in NODES} == chosen

        # A budget change on a node of an Applied job: selected again from the stored predictions
        # (no profiling), verified, and published within the new budget.
        changed_at = time.time()
        orin = next(n for n, (m, _) in NODES.items() if m == "orin-agx")
        new_budget = 18.0
        stub.UpdateBudget(coordinator_pb2.UpdateBudgetRequest(
            node_id=orin, budgets=common_pb2.Budgets(power_budget_w=new_budget)), timeout=10)
        job = wait_job(stub, "mnv3-orin-agx", 60, lambda j: j.nodes[0].power_budget_w == new_budget and
                        j.nodes[0].phase in (APPLIED, tuning_pb2.NODE_PHASE_FAILED))
        _check_applied(cluster, job, {orin: new_budget})
        later = [e.message for e in job.nodes[0].events if e.at.ToNanoseconds() / 1e9 > changed_at]
        assert later and not any(m.startswith("profile") for m in later), later


def test_leader_killed_mid_job_standby_finishes(tmp_path, run_dir):
    # at log level WARNING (as the Flower example starts its cluster): readiness must not need the INFO log line
    with LocalCluster(tmp_path, tuning=True, log_level="WARNING", coordinator_args=QUICK_TRANSFER_ARGS) as cluster:
        assert cluster.estimator is not None and cluster.channel is not None and cluster.coordinator is not None
        standby = cluster.spawn_coordinator("standby", "coordinator-standby")
        assert cluster.supervisor is not None
        cluster.supervisor.wait_ready(standby, "edgetune.v1.Coordinator")
        cluster.start_agents({n: (m, b) for n, (m, b) in NODES.items()})
        assert cluster.store is not None
        refs = references(cluster.store, cluster.estimator.address, [m for m, _ in NODES.values()], run_dir)
        target = f"ipv4:127.0.0.1:{cluster.coordinator.address.rsplit(':', 1)[1]}," \
                 f"127.0.0.1:{standby.address.rsplit(':', 1)[1]}"
        with grpc.insecure_channel(target, options=[("grpc.lb_policy_name", "round_robin")]) as channel:
            stub = coordinator_pb2_grpc.CoordinatorStub(channel)
            spec = _spec("mnv3-kill", refs, "orin-agx")
            stub.SubmitTuningJob(tuning_pb2.SubmitTuningJobRequest(spec=spec), timeout=10)
            wait_job(stub, spec.name, 60, lambda j: any(n.profiled >= 3 for n in j.nodes))
            cluster.coordinator.proc.send_signal(signal.SIGKILL)
            job = wait_job(stub, spec.name, 90)
        _check_applied(cluster, job)
        assert cluster.store is not None
        for node in job.nodes:
            assert cluster.store.config_revisions([node.node_id])[node.node_id] == 1
            # every point has one deterministic job id, so the new leader's replay measured nothing again:
            # at most the profiling budget plus the verification attempts are stored
            stored = cluster.store.get_measurements(node.device, "mobilenetv3", "train", node.node_id)
            assert len(stored) <= spec.profiles + 5, len(stored)
            events = [e.message for e in node.events]
            assert any("published" in e for e in events), events
