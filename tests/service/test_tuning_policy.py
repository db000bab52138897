"""One tuning policy for every entry point: a change of :data:`edgetune.tuning.policy.DEFAULT_POLICY`
changes what ``edgetune tune``, the demo's node tuners and the estimator service do.

- ``max_attempts`` (verification retries): ``edgetune tune`` on the simulated Orin AGX with only 6
  random profiles and the std-less ``transfer`` method misses budgets on the device; with 5 attempts it
  selects again after a miss (or a choice far off its predicted time), with 1 it gives up on the budget.
  The demo's tuners take the same value (their policy is the library's with the demo's schedule).
- ``transfer_method``: the method ``edgetune tune`` transfers with, the demo's tuners send as
  ``params.method``, and the estimator service's ``Transfer`` uses when a request names none.
- The demo's tuning path: the TuningJob it submits carries the library's policy, and the policy the
  coordinator reads back from it, run on one simulated Orin AGX with a short schedule, follows it:
  a stricter ``risk`` chooses slower modes (never faster), a different one somewhere; the retry
  limit bounds how often a choice is measured and whether a miss is recovered from.
"""

from __future__ import annotations

import json

import grpc
import pytest

from edgetune.cli import main
from edgetune.control.reconcile import policy_for
from edgetune.demo.story import Options, Story, demo_policy, job_spec
from edgetune.demo.suite import FLEET, NodeSpec
from edgetune.devices.simulated.device import SimulatedJetson
from edgetune.devices.simulated.tables import truth_table
from edgetune.estimation.bundle import TimePowerModel
from edgetune.powermodes.grids import modes_array
from edgetune.powermodes.specs import ORIN_AGX
from edgetune.profiling.protocol import ProfileConfig, Profiler
from edgetune.proto.serde.tuning import spec_from_proto, spec_to_proto
from edgetune.proto.v1 import (
    common_pb2,
    estimator_pb2,
    estimator_pb2_grpc,
)
from edgetune.services.estimator.server import create_server
from edgetune.store import open_store
from edgetune.tables import write_table
from edgetune.tuning import policy as tuning_policy
from edgetune.tuning.local import DeviceMeasurer, LibraryEstimator, LibrarySelector
from edgetune.tuning.tuner import NodeTuner

MODE_KEYS = ("cores", "cpu_mhz", "gpu_mhz", "emc_mhz")


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("policy")
    grid = modes_array(ORIN_AGX, "fulcrum")
    write_table([dict(zip(MODE_KEYS, m, strict=True)) for m in grid.tolist()], d / "modes.csv")
    write_table(truth_table(ORIN_AGX, "resnet18", "train", grid, [16]), d / "ref.csv")
    assert main(["estimate", "fit", "--profiles", str(d / "ref.csv"), "--out", str(d / "ref.model"),
                 "--epochs", "30", "--cv-folds", "0"]) == 0  # CV: tested in test_cli_estimate
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
    assert "attempt 2:" not in err1 and "after 1 attempts" in err1  # a miss given up at once
    assert any("attempt 1:" in line and "dropped it" in line for line in err1.splitlines())
    # with 5, a choice that what it measured contradicts (over budget, or its time far off its prediction,
    # which refits the model even with the 6 profiles spent) is selected again; the models then differ from
    # the 1-attempt run's, so later budgets' first choices may too
    assert "attempt 2:" in err5
    # fewer retries never find more; the refinement around the budget (issue 27) may find as many
    assert sum(a["feasible"] for a in answers1) <= sum(a["feasible"] for a in answers5)
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
# The demo submits one TuningJob built from the library's policy (demo_policy -> job_spec); the
# coordinator's reconcile loop reads it back (spec_from_proto -> policy_for) and runs a
# NodeTuner under that policy. Here: the same chain, the tuner on one simulated Orin AGX in-process.
NODE = NodeSpec("orin-1", "orin-agx", 20.0, 1000)
#: A short schedule: 6 profiled modes, no held-out calibration, so the transfer misses some budgets.
SHORT = Options(modes=6, held_out=0)
BUDGETS_W = (18.0, 22.0, 28.0)


def _job_policy() -> tuning_policy.TuningPolicy:
    """The policy the coordinator tunes the demo's job under (read from the library default)."""
    msg = spec_to_proto(job_spec(SHORT, demo_policy(SHORT), (NODE,)))
    return policy_for(spec_from_proto(msg))


@pytest.fixture(scope="module")
def demo_base(files):
    estimator = LibraryEstimator()
    return estimator, estimator.add(TimePowerModel.load(files / "ref.model"), "base")


def _demo_tune(demo_base, policy: tuning_policy.TuningPolicy, budgets_w=BUDGETS_W) -> list:
    estimator, base = demo_base
    candidates = modes_array(ORIN_AGX, "fulcrum")
    with SimulatedJetson(ORIN_AGX, seed=0) as device:
        measurer = DeviceMeasurer(Profiler(device, ProfileConfig()), SHORT.workload, "train", lambda *a: None)
        tuner = NodeTuner(policy, measurer, estimator, LibrarySelector(), base=base, candidates=candidates,
                          batch_size=SHORT.batch_size, device="orin-agx", workload=SHORT.workload, role="train",
                          power_range_w=(min(budgets_w), max(budgets_w)))
        decisions = tuner.tune(budgets_w)
    # the job's schedule was profiled; a verification measurement joins the profiles only when the decision
    # says so (a miss or a time far off its prediction is evidence), and no mode is measured twice
    joined = sum("joins the profiles" in note for d in decisions for note in d.notes)
    assert len(tuner.points) == SHORT.modes + joined
    assert len({tuple(m) for m in tuner.points.modes}) == len(tuner.points)
    return decisions


def test_the_demo_job_carries_the_library_policy(policy):
    p = policy(risk=0.01, max_attempts=2, transfer_method="nn+gp")
    job = _job_policy()
    assert (job.risk, job.max_attempts, job.transfer_method) == (0.01, 2, "nn+gp")
    assert (job.n_initial, job.rounds) == (SHORT.modes, 0)  # the demo's schedule: random profiles only
    assert Story(None, SHORT, (NODE,)).tuning.risk == p.risk


def test_the_demo_tuning_path_follows_the_policy_risk(demo_base, policy):
    policy(transfer_method="nn+gp", risk=0.3, max_attempts=1)
    loose = _demo_tune(demo_base, _job_policy())
    policy(transfer_method="nn+gp", risk=0.001, max_attempts=1)
    strict = _demo_tune(demo_base, _job_policy())
    for a, b in zip(loose, strict, strict=True):
        if b.feasible:  # fewer options fit the stricter bound: never a faster one
            assert a.feasible and b.predicted_time_ms >= a.predicted_time_ms - 1e-9
            assert b.power_upper_w <= b.budget_w + 1e-9
    assert any(a.mode != b.mode for a, b in zip(loose, strict, strict=True))


def test_the_demo_tuning_path_follows_the_policy_retry_limit(demo_base, policy):
    # the std-less transfer selects on the mean, so some choices measure over budget
    policy(transfer_method="transfer", max_attempts=5)
    sweep = tuple(float(b) for b in range(17, 51))  # as the tune test above: some of these miss
    five = _demo_tune(demo_base, _job_policy(), sweep)
    policy(transfer_method="transfer", max_attempts=1)
    one = _demo_tune(demo_base, _job_policy(), sweep)
    assert all(d.attempts <= 1 for d in one)  # the limit bounds the choices measured
    assert all(d.attempts <= 5 for d in five) and any(d.attempts > 1 for d in five)
    # misses selected again: never fewer within budget (with issue 27's refinement, often as many)
    assert sum(d.within_budget for d in five) >= sum(d.within_budget for d in one)
