"""Issue 25: agents hold no store credential; a node's profiling jobs and their measurements go
through the coordinator (``NodeJobs``), each agent for its own node only.

An agent with ``--redis none`` (the chart's) runs a profiling job submitted for its node end to end:
claimed through the coordinator, profiled, its measurements written by the coordinator under the
agent's node. Another node's credential can neither claim, complete nor refuse the node's jobs, and
a measurement naming another node is stored as the caller's.
"""

from __future__ import annotations

from pathlib import Path

import grpc
import harness
import pytest
import yaml

from edgetune.control.jobs import JobQueue
from edgetune.control.registry import NodeRecord
from edgetune.identity import ClientSecurity, ServerSecurity, open_channel
from edgetune.proto.v1 import (
    common_pb2,
    coordinator_pb2_grpc,
    nodejobs_pb2,
    nodejobs_pb2_grpc,
    profiler_pb2,
    tuning_pb2,
)
from edgetune.services.profiler.server import serve as serve_agent
from edgetune.store import MemoryStore

TOKENS = {"alice": ("alice-token-0123456789", "operator"), "jetson-a": ("agent-a-token-0123456789", "agent"),
          "jetson-b": ("agent-b-token-0123456789", "agent")}
DENIED = grpc.StatusCode.PERMISSION_DENIED
MESSAGE = common_pb2.Measurement(
    id="feedfacefeedface", node_id="jetson-b", device="orin-agx", workload="resnet18", role=common_pb2.ROLE_TRAIN,
    mode=common_pb2.PowerMode(cores=8, cpu_mhz=1728.0, gpu_mhz=930.75, emc_mhz=3199.0), batch_size=16, time_ms=120.5,
    power_w=21.25, peak_power_w=24.0, energy_j=2.55, minibatches=20, samples=40)


@pytest.fixture
def token_file(tmp_path: Path) -> Path:
    path = tmp_path / "tokens.yaml"
    path.write_text(yaml.safe_dump({"tokens": [{"token": t, "role": r, "name": n} for n, (t, r) in TOKENS.items()]}))
    path.chmod(0o600)
    return path


def jobs_as(address: str, name: str) -> nodejobs_pb2_grpc.NodeJobsStub:
    return nodejobs_pb2_grpc.NodeJobsStub(open_channel(address, ClientSecurity(token=TOKENS[name][0])))


def code_of(call) -> grpc.StatusCode:
    with pytest.raises(grpc.RpcError) as err:
        call()
    return err.value.code()


def test_an_agent_claims_completes_and_refuses_its_own_nodes_jobs_only(token_file):
    store = MemoryStore()
    with harness.coordinator(store, security=ServerSecurity(auth_tokens=str(token_file))) as c:
        for node in ("jetson-a", "jetson-b"):
            c.servicer.registry.register(NodeRecord(node_id=node))
        queue = JobQueue(store)
        job_b = queue.submit("jetson-b", {"random_modes": 1}, job_id="job-b")
        queue.submit("jetson-a", {"random_modes": 1}, job_id="job-a")
        a, b = jobs_as(c.server.address, "jetson-a"), jobs_as(c.server.address, "jetson-b")
        # Node a's credential on node b's queue: refused, the job stays b's.
        steal = nodejobs_pb2.ClaimJobsRequest(node_id="jetson-b", consumer="thief", wait_ms=0)
        assert code_of(lambda: a.ClaimJobs(steal)) == DENIED
        (mine,) = a.ClaimJobs(nodejobs_pb2.ClaimJobsRequest(consumer="a-1", wait_ms=0)).jobs  # "": its own node
        assert mine.job_id == "job-a" and mine.deliveries == 1
        (theirs,) = b.ClaimJobs(nodejobs_pb2.ClaimJobsRequest(node_id="jetson-b", consumer="b-1", wait_ms=0)).jobs
        assert theirs.job_id == job_b
        forged = nodejobs_pb2.CompleteJobRequest(node_id="jetson-b", job_id=theirs.job_id, entry_id=theirs.entry_id,
                                                 measurements=[MESSAGE])
        assert code_of(lambda: a.CompleteJob(forged)) == DENIED
        refuse_b = nodejobs_pb2.RefuseJobRequest(node_id="jetson-b", job_id=theirs.job_id, entry_id=theirs.entry_id,
                                                 reason="no")
        assert code_of(lambda: a.RefuseJob(refuse_b)) == DENIED
        assert store.pending_jobs("jetson-b") == 1 and not store.count_measurements("orin-agx", "resnet18", "train")
        # Its own job: the measurement is stored as its node's, whatever the message says.
        done = a.CompleteJob(nodejobs_pb2.CompleteJobRequest(node_id="jetson-a", job_id=mine.job_id,
                                                             entry_id=mine.entry_id, measurements=[MESSAGE]))
        assert done.written == 1 and store.pending_jobs("jetson-a") == 0
        (record,) = store.get_measurements("orin-agx", "resnet18", "train")
        assert record.node_id == "jetson-a" and store.count_measurements("orin-agx", "resnet18", "train", "jetson-b") == 0
        b.RefuseJob(refuse_b)
        assert queue.refusal("jetson-b", job_b) == "no" and store.pending_jobs("jetson-b") == 0
        audit = {(r.method, r.who, r.outcome, r.target) for r in store.audit_records(100)}
        assert ("CompleteJob", "jetson-a", "PERMISSION_DENIED", "") in audit
        assert ("CompleteJob", "jetson-a", "OK", "jetson-a") in audit


def test_an_agent_without_a_store_runs_its_nodes_profiling_job_through_the_coordinator(token_file, tmp_path):
    store = MemoryStore()
    with harness.coordinator(store, security=ServerSecurity(auth_tokens=str(token_file))) as c:
        agent = serve_agent("sim:orin-agx", port=0, redis_url="none", state_dir=tmp_path / "state", block=False,
                            coordinator=c.server.address, client=ClientSecurity(token=TOKENS["jetson-a"][0]),
                            grace_s=0.5, telemetry_hz=0, seed=0)
        try:
            alice = coordinator_pb2_grpc.CoordinatorStub(open_channel(c.server.address,
                                                                      ClientSecurity(token=TOKENS["alice"][0])))
            harness.wait_for(lambda: c.servicer.registry.exists("jetson-a") or None, 20, "the agent's registration")
            alice.SubmitProfiling(tuning_pb2.SubmitProfilingRequest(
                node_id="jetson-a", job_id="p-1", request=profiler_pb2.ProfileRequest(
                    workload=common_pb2.Workload(name="resnet18", role=common_pb2.ROLE_TRAIN), random_modes=2,
                    batch_sizes=[16], n_minibatches=5, warmup_minibatches=1, seed=3)))
            rows = harness.wait_for(lambda: store.get_measurements("orin-agx", "resnet18", "train", "jetson-a")
                                    or None, 120, "the job's measurements")
            assert len(rows) == 2 and {r.node_id for r in rows} == {"jetson-a"}
            harness.wait_for(lambda: store.pending_jobs("jetson-a") == 0 or None, 30, "the job acknowledged")
        finally:
            agent.stop(0)
