"""A model that is not in the zoo, tuned by a TuningJob on ``edgetune up``-style local services: the
Estimator (no Ray), the Optimizer, the coordinator and a simulated agent whose operator allows
``tests/fixtures/workloads`` (``--workload-path``), as gRPC servers on loopback in this process over
the in-memory store (``harness.InProcessCluster``: the services' own servers and agent loop; what
is tested is the job's path through them, not their processes).

- the job file names ``sensor_cnn:make`` (a 1-D CNN over sensor windows): the agent imports it by
  name, the simulator costs its layers, the reconcile loop profiles, transfers, selects, verifies and
  publishes; the agent applies the mode. Measurements and the tuned model refer to the workload's id.
- a bad entry (a forward pass that raises) fails the node with the agent's reason, naming the
  workload; a malformed MODULE:FUNCTION is refused at submit (exit 2 / INVALID_ARGUMENT).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import grpc
import pytest
from harness import InProcessCluster, references, wait_job

from edgetune.cli import main
from edgetune.proto.v1 import (
    common_pb2,
    coordinator_pb2,
    coordinator_pb2_grpc,
    estimator_pb2,
    estimator_pb2_grpc,
    tuning_pb2,
)
from edgetune.workloads.user import load_workload

pytestmark = [pytest.mark.integration, pytest.mark.slow]

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "workloads"
NODE, DEVICE, BUDGET_W = "orin-agx-1", "orin-agx", 20.0

JOB = """\
name: {name}
workload: {{name: "{workload}", role: train, batch_sizes: [32]}}
nodes: [{node}]
power_budget_w: {{{node}: {budget:g}}}
profiles: 10
reference_model: reference-{device}-train
"""


def test_a_user_model_is_tuned_by_a_job_and_a_bad_one_fails_naming_it(tmp_path, capsys, run_dir):
    with InProcessCluster(tmp_path, tuning=True, workload_path=(FIXTURES,)) as cluster:
        assert cluster.estimator is not None and cluster.channel is not None and cluster.store is not None
        cluster.start_agents({NODE: (DEVICE, BUDGET_W)})
        references(cluster.store, cluster.estimator.address, [DEVICE], run_dir)  # what `edgetune up` fits
        assert cluster.coordinator is not None
        address = cluster.coordinator.address
        stub = coordinator_pb2_grpc.CoordinatorStub(cluster.channel)

        # a malformed entry: refused by the CLI before anything is sent, and by the coordinator
        bad_form = tmp_path / "bad-form.yaml"
        bad_form.write_text(JOB.format(name="bad-form", workload="sensor_cnn:make()", node=NODE, budget=BUDGET_W,
                                       device=DEVICE))
        assert main(["job", "submit", str(bad_form), "--coordinator", address]) == 2
        assert "workload.name" in capsys.readouterr().err
        with pytest.raises(grpc.RpcError) as err:
            stub.SubmitTuningJob(tuning_pb2.SubmitTuningJobRequest(spec=tuning_pb2.TuningJobSpec(
                name="bad-form", workload=common_pb2.Workload(name="x:y z", role=common_pb2.ROLE_TRAIN),
                batch_sizes=[32], nodes=[NODE])), timeout=10)
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "spec.workload.name" in err.value.details() and "MODULE:FUNCTION" in err.value.details()

        # the user's model, through a job file
        good = tmp_path / "sensor.yaml"
        good.write_text(JOB.format(name="sensor-cnn", workload="sensor_cnn:make", node=NODE, budget=BUDGET_W,
                                   device=DEVICE))
        assert main(["job", "submit", str(good), "--coordinator", address]) == 0, capsys.readouterr().err
        capsys.readouterr()
        job = wait_job(stub, "sensor-cnn", 150)
        assert job.phase == tuning_pb2.JOB_PHASE_SUCCEEDED, job
        (node,) = job.nodes
        assert node.phase == tuning_pb2.NODE_PHASE_APPLIED and node.measured_power_w <= BUDGET_W, node
        assert node.profiled >= 3 and node.batch_size == 32
        # measurements are recorded under the workload's id: name + structure hash
        wl_id = load_workload("sensor_cnn:make", allowed_path=[FIXTURES]).workload_id  # the same code, the same id
        stored = cluster.store.get_measurements(DEVICE, wl_id, "train", NODE)
        assert len(stored) >= node.profiled and {m.workload for m in stored} == {wl_id}
        assert not cluster.store.get_measurements(DEVICE, "sensor_cnn:make", "train", NODE)
        assert any(e.message.endswith(f"points measured of {wl_id}") for e in node.events), node.events
        # the transferred model refers to it too
        with grpc.insecure_channel(cluster.estimator.address) as channel:
            models = estimator_pb2_grpc.EstimatorStub(channel).ListModels(
                estimator_pb2.ListModelsRequest(device=DEVICE, workload=wl_id), timeout=10).models
        assert [m.model_id.rsplit("@", 1)[0] for m in models] == [f"tuning-sensor-cnn-{NODE}"], models
        # the agent applied the verified mode
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            nodes = {n.node_id: n for n in stub.ListNodes(coordinator_pb2.ListNodesRequest(), timeout=5).nodes}
            if nodes[NODE].current_mode == node.mode:
                break
            time.sleep(0.3)
        assert nodes[NODE].current_mode == node.mode

        # a bad entry: the node's agent refuses it, and the node fails with its reason
        bad = tmp_path / "bad.yaml"
        bad.write_text(JOB.format(name="bad-forward", workload="sensor_cnn:bad_forward", node=NODE, budget=BUDGET_W,
                                  device=DEVICE))
        assert main(["job", "submit", str(bad), "--coordinator", address, "--wait", "--json"]) == 1
        view = json.loads(capsys.readouterr().out)
        job = wait_job(stub, "bad-forward", 60)
        assert job.phase == tuning_pb2.JOB_PHASE_FAILED and view["phase"] == "Failed"
        reason = job.nodes[0].reason
        assert "sensor_cnn:bad_forward" in reason and "forward pass" in reason and "RuntimeError" in reason, reason
