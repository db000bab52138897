"""A workload from user code: loading MODULE:FUNCTION, its id, and the simulator's costing of it."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest
import torch
from torch import nn
from torch.nn import functional as F

from edgetune.base.mode import PowerMode
from edgetune.base.roles import Role
from edgetune.base.workload import WorkloadRef, id_name, is_user_workload, parse_spec, workload_id
from edgetune.devices.simulated.device import SimulatedJetson
from edgetune.devices.simulated.profiles import (
    PROFILES,
    RESNET18,
    WorkloadProfile,
    get_profile,
    profile_for_workload,
    profile_from_module,
    profile_names,
    register_profile,
)
from edgetune.devices.simulated.tables import truth_table
from edgetune.errors import InvalidArgument
from edgetune.workloads.flops import count_flops
from edgetune.workloads.user import load_workload, structure_hash

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "workloads"
SPEC = "tests.fixtures.workloads.sensor_cnn:make"


@pytest.fixture(autouse=True)
def _repo_on_path(monkeypatch):
    # the CLI finds user modules on PYTHONPATH; pytest's rootdir insertion is not that
    monkeypatch.syspath_prepend(str(ROOT))


# -- loading ---------------------------------------------------------------------------------
def test_load_gives_model_batches_loss_and_a_stable_id():
    wl = load_workload(SPEC)
    assert wl.spec == SPEC
    assert isinstance(wl.model, nn.Module) and wl.loss_fn is F.cross_entropy
    x, y = wl.make_batch(5)
    assert x.shape == (5, 6, 128) and y.shape == (5,)
    assert wl.workload_id.startswith("sensor_cnn.make-") and len(wl.workload_id.rsplit("-", 1)[1]) == 10
    assert wl.roles() == ("train", "infer")
    # stable: new weights, same structure -> same id; ids never contain the spec's ':'
    torch.manual_seed(123)
    again = load_workload(SPEC)
    assert again.workload_id == wl.workload_id and not is_user_workload(wl.workload_id)


def test_id_follows_structure_not_weights():
    from tests.fixtures.workloads.sensor_cnn import SensorCNN

    a, b, wide = SensorCNN(32), SensorCNN(32), SensorCNN(64)
    with torch.no_grad():
        for p in b.parameters():
            p.add_(1.0)
    x = torch.zeros(2, 6, 128)
    assert structure_hash(a, x) == structure_hash(b, x)
    assert structure_hash(a, x) != structure_hash(wide, x)
    assert structure_hash(a, x) != structure_hash(a, torch.zeros(2, 6, 256))  # longer windows cost more


def test_inference_entry_needs_no_loss():
    wl = load_workload("tests.fixtures.workloads.sensor_cnn:make_infer")
    assert wl.loss_fn is None and wl.roles() == ("infer",)


def test_is_user_workload():
    assert is_user_workload("pkg.mod:make") and not is_user_workload("resnet18")
    assert not is_user_workload(None)
    assert parse_spec("a.b_c:make2") == ("a.b_c", "make2")


def test_one_id_formula_for_specs_and_names():
    """``NAME-HASH``: a spec's last module component and function, a plain name (the online tuner's
    class name) as it is; the loaded workload's id is exactly that formula."""
    wl = load_workload(SPEC)
    digest = wl.workload_id.rsplit("-", 1)[1]
    assert wl.workload_id == workload_id(SPEC, digest) == workload_id("sensor_cnn:make", digest)
    assert id_name(SPEC) == "sensor_cnn.make" == wl.name
    assert workload_id("SensorCNN", digest) == f"SensorCNN-{digest}"
    for bad in ("", "0123", "0123456789abc", "ABCDEF0123", None):
        with pytest.raises(InvalidArgument) as err:
            workload_id(SPEC, bad)
        assert err.value.field == "structure_hash"
    with pytest.raises(InvalidArgument) as err:
        workload_id("pkg:make()", digest)
    assert err.value.field == "workload"


def test_a_reference_resolves_its_id_once():
    zoo = WorkloadRef.parse("resnet18")
    assert zoo.resolved and zoo.id == "resnet18" and not zoo.is_user and zoo.resolve("resnet18") == zoo
    ref = WorkloadRef.parse("pkg.sensor_cnn:make")
    assert ref.is_user and not ref.resolved and ref.recorded_as == "pkg.sensor_cnn:make"
    done = ref.resolve("sensor_cnn.make-0123456789")
    assert done == WorkloadRef("pkg.sensor_cnn:make", "sensor_cnn.make-0123456789") and done.resolved
    assert done.resolve("sensor_cnn.make-0123456789") is done and done.recorded_as == done.id
    with pytest.raises(InvalidArgument, match="now as sensor_cnn.make-abcdef0123: its code changed"):
        done.resolve("sensor_cnn.make-abcdef0123")
    for other in ("other.make-0123456789", "sensor_cnn.make-xyz", "sensor_cnn.make"):  # not this spec's id
        with pytest.raises(InvalidArgument, match="is not an id of pkg.sensor_cnn:make"):
            ref.resolve(other)
    with pytest.raises(InvalidArgument) as err:
        WorkloadRef.parse("pkg:make()", "spec.workload.name")
    assert err.value.field == "spec.workload.name"


@pytest.mark.parametrize(
    "spec,needle",
    [
        ("tests.fixtures.workloads.no_such_module:make", "no module named"),
        ("tests.fixtures.workloads.sensor_cnn:missing", "has no function 'missing'"),
        ("tests.fixtures.workloads.sensor_cnn:not_a_function", "not a function"),
        ("tests.fixtures.workloads.sensor_cnn:bad_two_values", "returned a 2-tuple, not (model, make_batch, loss_fn)"),
        ("tests.fixtures.workloads.sensor_cnn:bad_not_a_model", "not a torch.nn.Module"),
        ("tests.fixtures.workloads.sensor_cnn:bad_batch_shape", "not (inputs, targets)"),
        ("tests.fixtures.workloads.sensor_cnn:bad_forward", "forward pass (or its loss) raised RuntimeError"),
        ("tests.fixtures.workloads.sensor_cnn:bad_raises", "bad_raises() raised OSError"),
        ("resnet18", "is not MODULE:FUNCTION"),
        ("pkg:make()", "is not MODULE:FUNCTION"),
        ("os.path:join;rm", "is not MODULE:FUNCTION"),
    ],
)
def test_bad_entries_name_the_workload(spec, needle):
    with pytest.raises(InvalidArgument) as err:
        load_workload(spec)
    assert err.value.field == "workload"
    assert needle in err.value.message
    assert err.value.message.startswith(spec) or "MODULE:FUNCTION" in err.value.message


# -- the allowed path (an agent) -------------------------------------------------------------
def test_allowed_path_imports_by_name_from_its_directories_only(tmp_path):
    wl = load_workload("sensor_cnn:make", allowed_path=[FIXTURES])
    # the same file under another module path: the same id (agents and the CLI agree)
    assert wl.workload_id == load_workload(SPEC).workload_id
    for spec in ("os:getcwd", "json:loads", "tests.fixtures.workloads.sensor_cnn:make"):
        with pytest.raises(InvalidArgument) as err:
            load_workload(spec, allowed_path=[FIXTURES])
        assert "is not in this agent's workload path" in err.value.message and str(FIXTURES) in err.value.message
    # a directory with a module that shadows a loaded one is still refused (its file is elsewhere)
    (tmp_path / "json.py").write_text("def loads():\n    raise SystemExit('never run')\n")
    with pytest.raises(InvalidArgument, match="not in this agent's workload path"):
        load_workload("json:loads", allowed_path=[tmp_path])
    with pytest.raises(InvalidArgument, match="loads no user workloads"):
        load_workload("sensor_cnn:make", allowed_path=[])
    assert str(tmp_path) not in sys.path  # the search path is restored


# -- costing any module ----------------------------------------------------------------------
MAXN = PowerMode(12, 2201.6, 1300.5, 3199.0)
MID = PowerMode(8, 1420.8, 624.75, 2133.0)
LOW = PowerMode(4, 729.6, 318.75, 665.6)


@pytest.fixture(scope="module")
def orin() -> SimulatedJetson:
    return SimulatedJetson("orin-agx", noise=False)


def test_user_workload_runs_on_the_simulator_by_id(orin):
    wl = load_workload(SPEC)
    prof = profile_for_workload(wl)
    assert get_profile(wl.workload_id) is prof and wl.workload_id in profile_names()
    assert wl.workload_id in orin.workloads()
    times = SimulatedJetson("orin-agx", seed=1).run(wl.workload_id, "train", 32, 5)
    assert len(times) == 5 and all(t > 0 for t in times)
    rows = truth_table("orin-agx", wl.workload_id, "infer", [MAXN, LOW], [8, 32])
    assert {r["workload"] for r in rows} == {wl.workload_id}
    # a faster clock set is faster; a bigger batch takes longer
    assert orin.true_time_ms(LOW, wl.workload_id, "train", 32) > orin.true_time_ms(MAXN, wl.workload_id, "train", 32)
    assert orin.true_time_ms(MAXN, wl.workload_id, "train", 64) > orin.true_time_ms(MAXN, wl.workload_id, "train", 8)
    with pytest.raises(InvalidArgument, match="no infer profile|no train profile"):
        infer_only = profile_for_workload(load_workload("tests.fixtures.workloads.sensor_cnn:make_infer"))
        infer_only.role(Role.TRAIN)


def test_ten_times_the_flops_runs_slower(orin):
    narrow, wide = load_workload(SPEC), load_workload("tests.fixtures.workloads.sensor_cnn:make_wide")
    f_narrow = count_flops(narrow.model, narrow.make_batch(1)[0]).total_flops
    f_wide = count_flops(wide.model, wide.make_batch(1)[0]).total_flops
    assert 8.5 < f_wide / f_narrow < 11.5
    for w in (narrow, wide):
        profile_for_workload(w)
    for mode in (MAXN, MID, LOW):
        for b in (16, 64):
            for role in ("train", "infer"):
                t_n = orin.true_time_ms(mode, narrow.workload_id, role, b)
                t_w = orin.true_time_ms(mode, wide.workload_id, role, b)
                assert t_w > t_n, (mode, b, role, t_n, t_w)  # barely, where kernel launches dominate
    # where the GPU dominates (slow GPU clock, big batch) the time follows the FLOPs closely
    slow_gpu = PowerMode(12, 2201.6, 114.75, 3199.0)
    ratio = orin.true_time_ms(slow_gpu, wide.workload_id, "train", 256) / orin.true_time_ms(
        slow_gpu, narrow.workload_id, "train", 256)
    assert ratio > 5


class _MemoryBound(nn.Module):
    """Element-wise layers on long, wide activations: little arithmetic per byte."""

    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(*[m for _ in range(6) for m in (nn.BatchNorm1d(64), nn.ReLU())])
        self.pool = nn.AdaptiveAvgPool1d(1)
        self.head = nn.Linear(64, 4)

    def forward(self, x):
        return self.head(self.pool(self.body(x)).flatten(1))


class _ComputeBound(nn.Module):
    """Wide convolutions: hundreds of FLOPs per byte moved (a dense MLP at batch 64 would not be:
    its weights make it bandwidth-bound)."""

    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Conv1d(64, 256, 9, padding=4), nn.Conv1d(256, 256, 9, padding=4),
                                  nn.Conv1d(256, 256, 9, padding=4), nn.AdaptiveAvgPool1d(1), nn.Flatten(),
                                  nn.Linear(256, 4))

    def forward(self, x):
        return self.body(x)


def test_memory_bound_mix_reacts_more_to_emc(orin):
    mem = register_profile(profile_from_module(_MemoryBound(), lambda b: (torch.randn(b, 64, 4096), None),
                                               name="test-memory-bound"))
    cmp = register_profile(profile_from_module(_ComputeBound(), lambda b: (torch.randn(b, 64, 256), None),
                                               name="test-compute-bound"))
    emc_low = PowerMode(12, 2201.6, 1300.5, 665.6)
    for role in ("train", "infer"):
        slow_mem = orin.true_time_ms(emc_low, mem.name, role, 64) / orin.true_time_ms(MAXN, mem.name, role, 64)
        slow_cmp = orin.true_time_ms(emc_low, cmp.name, role, 64) / orin.true_time_ms(MAXN, cmp.name, role, 64)
        assert slow_mem > 2.0 and slow_mem - 1 > 2 * (slow_cmp - 1), (role, slow_mem, slow_cmp)
        # and the other way round for the GPU clock
        gpu_low = PowerMode(12, 2201.6, 318.75, 3199.0)
        g_mem = orin.true_time_ms(gpu_low, mem.name, role, 64) / orin.true_time_ms(MAXN, mem.name, role, 64)
        g_cmp = orin.true_time_ms(gpu_low, cmp.name, role, 64) / orin.true_time_ms(MAXN, cmp.name, role, 64)
        assert g_cmp > g_mem, (role, g_mem, g_cmp)


def test_registry_guards_the_zoo_and_unknown_names():
    with pytest.raises(InvalidArgument, match="built-in profile"):
        register_profile(WorkloadProfile("resnet18", "impostor", dict(RESNET18.roles)))
    assert PROFILES["resnet18"] is RESNET18
    with pytest.raises(InvalidArgument, match="unknown workload 'never-registered'"):
        get_profile("never-registered")
    with pytest.raises(InvalidArgument) as err:
        SimulatedJetson("orin-agx").run("never-registered", "train", 8, 2)
    assert err.value.field == "workload"


# -- a real board's runner -------------------------------------------------------------------
def test_runner_pool_runs_a_loaded_user_workload_by_id_on_a_copy():
    from edgetune.workloads.runner import RunnerPool

    wl = load_workload(SPEC)
    before = [p.detach().clone() for p in wl.model.parameters()]
    pool = RunnerPool(device="cpu")
    try:
        times = pool(wl.workload_id, "train", 8, 3)
        assert len(times) == 3 and all(t > 0 for t in times)
        runner = next(iter(pool._runners.values()))
        assert len(runner.losses) == 3 and all(math.isfinite(x) for x in runner.losses)
        assert all(torch.equal(a, b) for a, b in zip(before, wl.model.parameters(), strict=True))
        assert len(pool(wl.workload_id, "infer", 4, 2)) == 2
    finally:
        pool.close()
    infer_only = load_workload("tests.fixtures.workloads.sensor_cnn:make_infer")
    with pytest.raises(InvalidArgument, match="runs only as infer"):
        RunnerPool(device="cpu")(infer_only.workload_id, "train", 8, 1)


# -- the coordinator checks the form only ----------------------------------------------------
def test_job_specs_check_the_form_of_a_user_workload_without_importing_it():
    from edgetune.tuning.jobs import TuningJobSpec

    spec = TuningJobSpec("sensor", "not_installed_anywhere:make", nodes=("n1",)).check()
    assert spec.workload == "not_installed_anywhere:make"  # the nodes import it, not the coordinator
    for bad in ("pkg:make()", "a b:make", ":make", "pkg:"):
        with pytest.raises(InvalidArgument) as err:
            TuningJobSpec("sensor", bad, nodes=("n1",)).check()
        assert err.value.field == "spec.workload.name" and "MODULE:FUNCTION" in str(err.value)
