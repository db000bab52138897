"""run_tasks: Ray and sequential give identical results for seeded work; errors name the task."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest
import torch

from edgetune import stopping
from edgetune.errors import InvalidArgument
from edgetune.estimation import parallel
from edgetune.estimation.batch_efficiency import scaled_lr, train_to_target
from edgetune.estimation.parallel import TaskFailed, grid, run_tasks
from edgetune.estimation.threads import single_threaded

pytest.importorskip("ray")
# local_ray (tests/conftest.py): one 2-CPU local Ray shared with the other tests that need one.


@pytest.fixture(scope="module")
def tiny_training():
    """Shared arguments of a few-second seeded training task: random init, digits, 2 short passes."""
    from edgetune.estimation.proxy import build_proxy_model, load_proxy_data

    torch.manual_seed(0)
    state = build_proxy_model("resnet-slim").state_dict()
    return {"workload": "resnet-slim", "target_accuracy": 1.01,  # unreachable: always 2 full passes
            "samples_per_pass": 32, "max_passes": 2, "input_size": 8,
            "data": load_proxy_data("digits"), "init_state": state}


def _tasks():
    return [{"batch_size": b, "seed": s, "lr": scaled_lr(b)} for b in (4, 16) for s in (0, 1)]


def test_grid_is_the_cartesian_product_last_axis_fastest():
    assert grid(batch_size=[8, 32], seed=[0, 1]) == [
        {"batch_size": 8, "seed": 0}, {"batch_size": 8, "seed": 1},
        {"batch_size": 32, "seed": 0}, {"batch_size": 32, "seed": 1}]


def test_sequential_and_ray_give_identical_seeded_results(local_ray, tiny_training):
    seq = run_tasks(train_to_target, _tasks(), parallel=False, shared=tiny_training)
    par = run_tasks(train_to_target, _tasks(), parallel=True, shared=tiny_training)
    assert [r.accuracy_by_pass for r in seq] == [r.accuracy_by_pass for r in par]
    assert [(r.batch_size, r.seed) for r in par] == [(t["batch_size"], t["seed"]) for t in _tasks()]  # input order
    # the seed matters (else the equality above proves little)
    assert seq[0].accuracy_by_pass != seq[1].accuracy_by_pass


@pytest.mark.parametrize("use_ray", [False, True])
def test_task_error_names_function_and_arguments(local_ray, use_ray):
    with pytest.raises(TaskFailed) as info:
        run_tasks(scaled_lr, [{"batch_size": 8}, {"batch_size": 0, "base_lr": 1e-3}], parallel=use_ray)
    err = info.value
    assert "scaled_lr" in str(err) and "batch_size=0" in str(err) and "base_lr=0.001" in str(err)
    assert err.index == 1 and err.kwargs == {"batch_size": 0, "base_lr": 1e-3}
    assert isinstance(err.cause, InvalidArgument)


def test_progress_is_reported_as_tasks_finish(local_ray):
    seen: list[tuple[int, int]] = []
    out = run_tasks(scaled_lr, [{"batch_size": b} for b in (8, 32, 128)], progress=lambda d, n: seen.append((d, n)))
    assert out == [scaled_lr(8), scaled_lr(32), scaled_lr(128)]
    assert seen == [(1, 3), (2, 3), (3, 3)]


def test_shared_arguments_reach_every_task_and_may_not_be_repeated(local_ray):
    out = run_tasks(scaled_lr, [{"batch_size": 32}, {"batch_size": 128}], shared={"base_lr": 1e-3})
    assert out == pytest.approx([5e-4, 1e-3])
    with pytest.raises(InvalidArgument, match="base_lr"):
        run_tasks(scaled_lr, [{"batch_size": 32, "base_lr": 1.0}], shared={"base_lr": 1e-3})


def test_empty_task_list_starts_nothing():
    assert run_tasks(scaled_lr, [], parallel=True) == []


def test_single_threaded_restores_the_callers_thread_count():
    before = torch.get_num_threads()
    with single_threaded():
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == before


def test_cluster_address_comes_from_argument_then_environment(monkeypatch):
    monkeypatch.delenv(parallel.ADDRESS_ENV, raising=False)
    assert parallel.resolve_address() is None
    monkeypatch.setenv(parallel.ADDRESS_ENV, "ray://head:10001")
    assert parallel.resolve_address() == "ray://head:10001"
    assert parallel.resolve_address("auto") == "auto"


def test_a_caller_that_goes_away_stops_its_ray_tasks(local_ray):
    """An estimator job on Ray whose RPC is cancelled (edgetune.stopping) stops waiting and cancels
    its tasks: the workers are free again at once, not after the tasks' own minute."""
    def slow(seconds):  # a closure: Ray carries it by value
        time.sleep(seconds)
        return seconds

    t0 = time.monotonic()
    with stopping.stop_when(lambda: time.monotonic() - t0 > 1.0), pytest.raises(stopping.Stopped):
        run_tasks(slow, [{"seconds": 60.0}, {"seconds": 60.0}])
    assert time.monotonic() - t0 < 10.0
    t1 = time.monotonic()
    assert run_tasks(slow, [{"seconds": 0.0}, {"seconds": 0.0}]) == [0.0, 0.0]  # both CPUs free again
    assert time.monotonic() - t1 < 45.0  # uncancelled, they would hold both CPUs until t0 + 60 s


def test_a_pool_worker_exits_once_the_process_that_started_it_is_killed(tmp_path):
    # a stand-in for the estimator (SIGKILLed: no handler, no atexit) and its pool worker's parent watch
    worker = ("import os, sys; from edgetune.estimation import parallel; parallel.PARENT_CHECK_S = 0.05; "
              "parallel._exit_with_parent(int(sys.argv[1]))")
    parent = ("import os, subprocess, sys, time; "
              f"w = subprocess.Popen([sys.executable, '-c', {worker!r}, str(os.getpid())]); "
              "print(w.pid, flush=True); time.sleep(60)")
    proc = subprocess.Popen([sys.executable, "-c", parent], stdout=subprocess.PIPE, text=True)
    try:
        worker_pid = int(proc.stdout.readline())
        time.sleep(0.5)  # the worker is up and watching
        assert _running(worker_pid)
        proc.kill()
        proc.wait(10)
        deadline = time.monotonic() + 10
        while _running(worker_pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _running(worker_pid)
    finally:
        proc.kill()


def _running(pid: int) -> bool:
    """Alive and not a zombie waiting for its new parent to reap it."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False
