"""One tuning policy for every entry point: a change of :data:`edgetune.tuning.policy.DEFAULT_POLICY`
changes what ``edgetune tune``, the demo's node tuners and the estimator service do.

- ``max_attempts`` (verification retries): ``edgetune tune`` on the simulated Orin AGX with only 6
  random profiles and the std-less ``transfer`` method misses budgets on the device; with 5 attempts it
  selects again after a miss, with 1 it gives up on the budget. The demo's tuners take the same value
  (their policy is the library's with the demo's schedule).
- ``transfer_method``: the method ``edgetune tune`` transfers with, the demo's tuners send as
  ``params.method``, and the estimator service's ``Transfer`` uses when a request names none.
- The demo's own tuning path (its steps: profile the fleet, estimate, select and verify on the agent)
  on one simulated Orin AGX served in this process, with a short schedule: a stricter ``risk``
  chooses slower modes (never faster), a different one somewhere; the retry limit bounds how
  often a choice is measured and whether a miss is recovered from.
"""

from __future__ import annotations

import dataclasses
import json

import grpc
import pytest

from edgetune.cli import main
from edgetune.coordination.localcluster import LocalCluster
from edgetune.coordination.store import open_store
from edgetune.coordination.store.memory import MemoryStore
from edgetune.demo import steps
from edgetune.demo.story import NodeResult, Options, Story
from edgetune.demo.suite import FLEET, Agent, NodeSpec, Suite
from edgetune.devices.simulated import truth_table
from edgetune.estimation.bundle import TimePowerModel
from edgetune.powermodes.grids import modes_array
from edgetune.powermodes.specs import ORIN_AGX
from edgetune.proto.v1 import (
    common_pb2,
    estimator_pb2,
    estimator_pb2_grpc,
    optimizer_pb2_grpc,
    profiler_pb2,
    profiler_pb2_grpc,
)
from edgetune.services.estimator.server import create_server
from edgetune.services.optimizer.server import create_server as optimizer_server
from edgetune.services.profiler.server import create_server as profiler_server
from edgetune.tables import write_table
from edgetune.tuning import policy as tuning_policy
from edgetune.tuning.local import LibraryEstimator

MODE_KEYS = ("cores", "cpu_mhz", "gpu_mhz", "emc_mhz")


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("policy")
    grid = modes_array(ORIN_AGX, "fulcrum")
    write_table([dict(zip(MODE_KEYS, m, strict=True)) for m in grid.tolist()], d / "modes.csv")
    write_table(truth_table(ORIN_AGX, "resnet18", "train", grid, [16]), d / "ref.csv")
    assert main(["estimate", "fit", "--profiles", str(d / "ref.csv"), "--out", str(d / "ref.model"),
                 "--epochs", "30"]) == 0
    return d


@pytest.fixture()
def policy(monkeypatch):
    """Set the library's default policy for the duration of a test."""
    def use(**changes) -> tuning_policy.TuningPolicy:
        p = tuning_policy.TuningPolicy(**changes)
        monkeypatch.setattr(tuning_policy, "DEFAULT_POLICY", p)
        return p
    return use


def _tune(capsys, files, out_model) -> tuple[list[dict], str]:
    code = main(["tune", "--device", "sim:orin-agx", "--workload", "mobilenetv3", "--base", str(files / "ref.model"),
                 "--modes", str(files / "modes.csv"), "--power-budget", "17:50:1", "--initial", "6", "--rounds", "0",
                 "--model-out", str(out_model), "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    return json.loads(out), err


def test_the_verification_retry_limit_of_the_policy_governs_tune_and_the_demo(files, capsys, tmp_path, policy):
    policy(transfer_method="transfer", max_attempts=5)
    answers5, err5 = _tune(capsys, files, tmp_path / "a.model")
    assert "attempt 1:" in err5 and "after 1 attempts" not in err5  # choices measured over, selected again
    assert Story(None, Options(), FLEET).tuning.max_attempts == 5

    policy(transfer_method="transfer", max_attempts=1)
    answers1, err1 = _tune(capsys, files, tmp_path / "b.model")
    assert "attempt 2:" not in err1 and "after 1 attempts" in err1  # the same misses, given up at once
    misses = [line.split(":")[0] for line in err1.splitlines() if "attempt 1:" in line]
    assert misses == [line.split(":")[0] for line in err5.splitlines() if "attempt 1:" in line]
    assert sum(a["feasible"] for a in answers1) < sum(a["feasible"] for a in answers5)
    assert Story(None, Options(), FLEET).tuning.max_attempts == 1  # the demo's tuners run under it
    for path in (tmp_path / "a.model", tmp_path / "b.model"):
        assert TimePowerModel.load(path).last_event["method"] == "transfer"


def test_the_transfer_method_of_the_policy_is_the_estimator_service_default(files, policy):
    store = open_store("embedded")
    server, _ = create_server(port=0, host="127.0.0.1", metrics_port=None, store=store, grace_s=1.0, max_workers=2,
                              use_ray=False)
    server.start()
    channel = grpc.insecure_channel(server.address)
    try:
        stub = estimator_pb2_grpc.EstimatorStub(channel)
        grid = modes_array(ORIN_AGX, "fulcrum")
        rows = truth_table(ORIN_AGX, "resnet18", "train", grid, [16])
        msgs = [common_pb2.Measurement(mode=common_pb2.PowerMode(cores=r["cores"], cpu_mhz=r["cpu_mhz"],
                                                                 gpu_mhz=r["gpu_mhz"], emc_mhz=r["emc_mhz"]),
                                       batch_size=16, time_ms=r["time_ms"], power_w=r["power_w"]) for r in rows]
        ref = stub.Fit(estimator_pb2.FitRequest(device="orin-agx", workload="resnet18", role=common_pb2.ROLE_TRAIN,
                                                measurements=msgs, epochs=3, seed=0)).model
        small = truth_table(ORIN_AGX, "mobilenetv3", "train", grid[::9], [16])
        new_msgs = [common_pb2.Measurement(mode=common_pb2.PowerMode(cores=r["cores"], cpu_mhz=r["cpu_mhz"],
                                                                     gpu_mhz=r["gpu_mhz"], emc_mhz=r["emc_mhz"]),
                                           batch_size=16, time_ms=r["time_ms"], power_w=r["power_w"]) for r in small]
        kinds = {}
        for method in ("nn+gp", "transfer"):
            p = policy(transfer_method=method, validation_fraction=0.2)
            info = stub.Transfer(estimator_pb2.TransferRequest(base_model_id=ref.model_id, workload="mobilenetv3",
                                                               model_id=f"policy-{method}", measurements=new_msgs,
                                                               epochs=5)).model
            kinds[method] = (info.kind, info.has_std)
            assert Story(None, Options(), FLEET).tuning.transfer_method == p.transfer_method  # the demo sends it
        assert kinds == {"nn+gp": ("nn+gp", True), "transfer": ("transfer", False)}
        assert len(rows) > 0 and ref.n_train == len(rows) - round(0.1 * len(rows))  # fitted under the default 0.1
        refit = stub.Fit(estimator_pb2.FitRequest(device="orin-agx", workload="resnet18", role=common_pb2.ROLE_TRAIN,
                                                  model_id="policy-ref", measurements=msgs, epochs=3, seed=0)).model
        assert refit.n_train == len(rows) - round(0.2 * len(rows))  # the policy's held-out fraction now
    finally:
        channel.close()
        server.stop(0)
        store.close()


# --- the demo's tuning path ------------------------------------------------------------------------
NODE = NodeSpec("orin-1", "orin-agx", 20.0, 1000)
#: A short schedule: 6 profiled modes, no held-out calibration, so the transfer misses some budgets.
SHORT = Options(modes=6, held_out=0, reference_modes=300, reference_epochs=20, transfer_epochs=30)
BUDGETS_W = (18.0, 22.0, 28.0)


@pytest.fixture(scope="module")
def demo_story(tmp_path_factory):
    """The demo's steps 2, 3 (profile, estimate) on one simulated Orin AGX: its agent and the optimizer
    served in this process over gRPC, the estimation pipeline in-process (as the demo without the
    estimator service runs it)."""
    d = tmp_path_factory.mktemp("demo")
    store = MemoryStore()
    agent, _ = profiler_server("sim:orin-agx", port=0, host="127.0.0.1", redis_url=None, store=store,
                               state_dir=d, node_id=NODE.node_id, telemetry_hz=0, grace_s=0.5, max_workers=4)
    opt, _ = optimizer_server(port=0, host="127.0.0.1", redis_url=None, store=store, grace_s=0.5, max_workers=4)
    agent.start()
    opt.start()
    channels = [grpc.insecure_channel(agent.address), grpc.insecure_channel(opt.address)]
    profiler = profiler_pb2_grpc.ProfilerStub(channels[0])
    suite = Suite(LocalCluster(d, store=store), None, optimizer_pb2_grpc.OptimizerStub(channels[1]),
                  LibraryEstimator(), {NODE.node_id: Agent(NODE, None, profiler)}, channels)
    policy = tuning_policy.TuningPolicy(transfer_method="nn+gp")
    story = Story(suite, SHORT, (NODE,), policy=steps_policy(policy))
    story.nodes[NODE.node_id] = NodeResult(NODE, spec=profiler.GetDevice(profiler_pb2.GetDeviceRequest()).spec)
    try:
        steps.profile_fleet(story, lambda *a: None)
        steps.estimate(story, lambda *a: None)
        yield story
    finally:
        for ch in channels:
            ch.close()
        agent.stop(0)
        opt.stop(0)


def steps_policy(policy: tuning_policy.TuningPolicy) -> tuning_policy.TuningPolicy:
    return policy.with_(n_initial=SHORT.modes, rounds=0, held_out=SHORT.held_out)


def _demo_select(story: Story, policy, budgets_w=BUDGETS_W) -> list[NodeResult]:
    """The demo's step 5 for each budget, with the node's tuner (its profiles, model and predictions)
    selecting afresh under the demo's policy as ``policy`` sets the library default."""
    res = story.nodes[NODE.node_id]
    base = res.tuner
    assert base is not None
    out = []
    for budget in budgets_w:
        again = Story(story.suite, SHORT, (dataclasses.replace(NODE, budget_w=budget),))  # reads DEFAULT_POLICY
        assert again.tuning == steps_policy(policy)
        r = NodeResult(again.fleet[0], spec=res.spec, tuner=base.with_policy(again.tuning), model=res.model,
                       predictions=res.predictions)
        again.nodes[NODE.node_id] = r
        steps.select_and_verify(again, lambda *a: None)
        out.append(r)
    return out


def test_the_demo_tuning_path_follows_the_policy_risk(demo_story, policy):
    tuner = demo_story.nodes[NODE.node_id].tuner
    assert tuner is not None and len(tuner.points) == SHORT.modes  # the policy's schedule was profiled
    loose = _demo_select(demo_story, policy(transfer_method="nn+gp", risk=0.3, max_attempts=1))
    strict = _demo_select(demo_story, policy(transfer_method="nn+gp", risk=0.001, max_attempts=1))
    for a, b in zip(loose, strict, strict=True):
        assert a.decision is not None and b.decision is not None
        if b.decision.feasible:  # fewer options fit the stricter bound: never a faster one
            assert a.decision.feasible and b.decision.time_ms >= a.decision.time_ms - 1e-9
            assert b.decision.power_upper_w <= b.node.budget_w + 1e-9
    assert any(a.decision.mode != b.decision.mode for a, b in zip(loose, strict, strict=True))


def test_the_demo_tuning_path_follows_the_policy_retry_limit(demo_story, policy):
    five = _demo_select(demo_story, policy(transfer_method="nn+gp", max_attempts=5))
    one = _demo_select(demo_story, policy(transfer_method="nn+gp", max_attempts=1))
    assert all(r.attempts == 1 for r in one)  # the limit bounds the choices measured
    assert all(1 <= r.attempts <= 5 for r in five) and any(r.attempts > 1 for r in five)
    missed = [r for r in one if not r.within_budget]
    assert missed and all("after 1 attempts" in " ".join(r.notes) for r in missed)
    assert sum(r.within_budget for r in five) > sum(r.within_budget for r in one)  # misses selected again
