"""Managed interleaving runtime (Fulcrum Fulcrum): arrivals, the scheduler on timed and real backends, naive baseline."""

from __future__ import annotations

import math

import numpy as np
import pytest

from edgetune.errors import InvalidArgument
from edgetune.optimization.interleaving import (
    MMPP,
    Deterministic,
    FulcrumScheduler,
    PiecewisePoisson,
    Poisson,
    Replay,
    TimedBackend,
    index_of_dispersion,
    interleaving_formulas,
    plan_interleaving,
    run_interleaved,
    run_naive,
    write_trace,
)
from edgetune.optimization.interleaving.metrics import IDLE, INFER, TRAIN
from edgetune.optimization.problems import ConcurrentProblem

# Orin AGX MAXN, simulator: ResNet18 train bs16 and MobileNetV3 inference (PowerTrain / 004 anchors)
T_TR_MS = 59.34
T_IN_MS = {1: 18.0, 4: 18.9, 16: 31.07, 32: 54.03, 64: 102.05}


def timed() -> TimedBackend:
    return TimedBackend(T_TR_MS, T_IN_MS)


# --------------------------------------------------------------------------- arrivals


def test_poisson_mean_rate_and_seeding():
    p = Poisson(40.0, seed=3)
    t = p.times_s(500.0)
    assert abs(t.size / 500.0 - 40.0) < 40.0 * 0.03  # ±3 % (σ ≈ 0.7 %)
    assert np.all(np.diff(t) >= 0) and t.min() >= 0 and t.max() < 500.0
    assert np.array_equal(t, Poisson(40.0, seed=3).times_s(500.0))
    assert not np.array_equal(t, Poisson(40.0, seed=4).times_s(500.0))
    assert 0.85 < index_of_dispersion(t, 500.0, 1.0) < 1.15


def test_bursty_is_overdispersed_with_the_stated_mean():
    m = MMPP((120.0, 10.0), (2.0, 6.0), seed=1)
    t = m.times_s(2000.0)
    assert m.mean_rate_rps == pytest.approx((120 * 2 + 10 * 6) / 8)
    assert abs(t.size / 2000.0 - m.mean_rate_rps) < 0.1 * m.mean_rate_rps
    poisson = Poisson(m.mean_rate_rps, seed=1).times_s(2000.0)
    assert index_of_dispersion(t, 2000.0, 1.0) > 5 * index_of_dispersion(poisson, 2000.0, 1.0)
    onoff = MMPP.on_off(50.0, 1.0, 1.0, seed=2).times_s(200.0)
    assert index_of_dispersion(onoff, 200.0, 0.5) > 2


def test_piecewise_rate_follows_windows():
    p = PiecewisePoisson([10.0, 100.0, 0.0], window_s=50.0, seed=0)
    t = p.times_s(200.0)  # the last rate (0) holds past the trace
    counts = np.histogram(t, bins=[0, 50, 100, 200])[0]
    assert abs(counts[0] - 500) < 100 and abs(counts[1] - 5000) < 300 and counts[2] == 0
    assert p.mean_rate_rps == pytest.approx(110 / 3)


def test_replay_is_exact_and_reads_files(tmp_path):
    times = np.array([0.0, 0.1, 0.1, 0.35, 1.2, 2.5])
    path = write_trace(tmp_path / "trace.csv", times)
    r = Replay.from_file(path)
    assert np.array_equal(r.times_s(10.0), times)
    assert np.array_equal(r.times_s(1.2), times[:4])  # cut at the horizon, exclusive
    ms = tmp_path / "wall.txt"
    ms.write_text("# wall-clock ms\n1000500\n1000600\n1000750\n")
    assert np.allclose(Replay.from_file(ms, unit="ms").times_s(5.0), [0.0, 0.1, 0.25])
    with pytest.raises(InvalidArgument, match="column"):
        Replay.from_file(path, column="nope")
    with pytest.raises(InvalidArgument, match="rate_rps"):
        Poisson(-1.0)


def test_deterministic_has_exact_spacing():
    t = Deterministic(60.0).times_s(1.0)
    assert t.size == 60 and np.allclose(np.diff(t), 1 / 60)


# --------------------------------------------------------------------------- timed backend


@pytest.mark.parametrize("rate_rps,beta", [(30.0, 16), (60.0, 16), (60.0, 32), (90.0, 64), (30.0, 4)])
def test_peak_latency_is_the_formula_for_constant_arrivals(rate_rps, beta):
    f = interleaving_formulas(rate_rps, beta, T_TR_MS, T_IN_MS[beta])
    assert f.keeps_up
    r = run_interleaved(timed(), Deterministic(rate_rps), 30.0, f.tau_train, beta, arrival_rps=rate_rps)
    expected = (beta - 1) / rate_rps * 1000 + T_IN_MS[beta]
    assert f.latency_ms == pytest.approx(expected)
    assert r.peak_latency_ms == pytest.approx(expected, rel=1e-9)
    assert r.n_unserved == 0
    # every inference minibatch within the horizon is a full β (the tail flush may be smaller)
    full = [s.batch_size for s in r.segments_of(INFER) if s.end_s <= 30.0]
    assert set(full) == {beta}


def test_throughput_matches_tau_alpha_over_beta():
    rate, beta = 60.0, 32
    problem = ConcurrentProblem(50.0, 1000.0, rate)
    tau = problem.tau(beta, T_TR_MS, T_IN_MS[beta])
    r = run_interleaved(timed(), Deterministic(rate), 120.0, tau, beta, arrival_rps=rate)
    assert r.train_minibatches_per_s == pytest.approx(problem.throughput(beta, tau), rel=0.01)
    assert r.train_samples_per_s == pytest.approx(16 * r.train_minibatches_per_s)


def test_tau_training_minibatches_between_inference_minibatches():
    r = run_interleaved(timed(), Poisson(60.0, seed=5), 20.0, 5, 16, arrival_rps=60.0)
    kinds = [k for _, _, k in r.model_on_device() if k != IDLE]
    runs, count = [], 0
    for k in kinds:
        if k == TRAIN:
            count += 1
        else:
            runs.append(count)
            count = 0
    infers = r.segments_of(INFER)
    assert len(runs) == len(infers) > 50
    # exactly τ before each inference minibatch; only the horizon can cut the last block short
    assert all(c == 5 for c, s in zip(runs, infers, strict=True) if s.start_s < 20.0)
    assert all(c <= 5 for c in runs)
    # one model on the device at a time: segments never overlap
    segs = sorted(r.segments, key=lambda s: s.start_s)
    assert all(a.end_s <= b.start_s + 1e-12 for a, b in zip(segs, segs[1:], strict=False))


def test_queue_grows_when_keep_up_fails():
    rate, beta = 60.0, 4  # t_in(4) = 18.9 ms ≤ β/α = 66.7 ms, but τ=2 makes a cycle 137.6 ms > 66.7 ms
    assert interleaving_formulas(rate, beta, T_TR_MS, T_IN_MS[beta]).tau_train == 0
    r = run_interleaved(timed(), Deterministic(rate), 20.0, 2, beta, arrival_rps=rate, flush_s=0.0)
    t, q = r.queue_length()
    first, last = q[t < 5.0].max(), q[(t > 15.0) & (t < 20.0)].max()
    assert last > first + 100  # grows ≈ 60 − 4/0.1376 ≈ 31 requests/s
    assert r.violations(500.0) > r.n_requests / 2
    # t_in > β/α: the keep-up condition itself fails, even with no training at all
    slow = TimedBackend(T_TR_MS, {1: 25.0})
    assert not interleaving_formulas(60.0, 1, T_TR_MS, 25.0).keeps_up
    r = run_interleaved(slow, Deterministic(60.0), 10.0, 0, 1, arrival_rps=60.0, flush_s=0.0)
    assert r.queue_length()[1].max() > 100 and r.n_unserved > 100


def test_guard_is_inert_when_times_are_exact_and_saves_latency_when_training_overruns():
    rate, beta = 60.0, 32
    tau = interleaving_formulas(rate, beta, T_TR_MS, T_IN_MS[beta]).tau_train
    plain = run_interleaved(timed(), Deterministic(rate), 30.0, tau, beta, arrival_rps=rate)
    guarded = run_interleaved(timed(), Deterministic(rate), 30.0, tau, beta, arrival_rps=rate, guard=True)
    assert guarded.method == "interleaved+guard"
    assert guarded.model_on_device() == plain.model_on_device()
    # training runs 1.5× slower than planned: the static τ overruns every window, the guard yields
    slow = lambda: TimedBackend(1.5 * T_TR_MS, T_IN_MS)  # noqa: E731
    plain = run_interleaved(slow(), Deterministic(rate), 30.0, tau, beta, arrival_rps=rate, flush_s=0.0)
    guarded = run_interleaved(slow(), Deterministic(rate), 30.0, tau, beta, arrival_rps=rate, guard=True)
    lam = (beta - 1) / rate * 1000 + T_IN_MS[beta]
    assert plain.queue_length()[1].max() > 200 and plain.violations(lam * 1.5) > plain.n_requests / 2
    assert guarded.peak_latency_ms <= lam + 1.5 * T_TR_MS + 1e-6  # at most one training minibatch late
    assert 0 < guarded.train_minibatches_per_s < plain.train_minibatches_per_s * 1.01


def test_policies_differ_under_poisson():
    arrivals = Poisson(60.0, seed=2)
    lam = interleaving_formulas(60.0, 16, T_TR_MS, T_IN_MS[16]).latency_ms
    fulcrum = run_interleaved(timed(), arrivals, 60.0, 3, 16, arrival_rps=60.0)
    eager = run_interleaved(timed(), arrivals, 60.0, 3, 16, policy="eager")
    strict = run_interleaved(timed(), arrivals, 60.0, 3, 16, policy="strict")
    # the age trigger bounds queueing at (β−1)/α; the serve itself and a training block in the way add the rest
    assert np.max(fulcrum.queueing_ms) <= (15 / 60) * 1000 + 3 * T_TR_MS + 1e-6
    assert np.percentile(fulcrum.latency_ms, 50) < lam
    assert eager.infer_batch_sizes.mean() < fulcrum.infer_batch_sizes.mean()
    assert set(strict.infer_batch_sizes[:-1]) == {16}
    assert eager.train_minibatches_per_s > fulcrum.train_minibatches_per_s


def test_plan_reuses_concurrent_problem_rule():
    plan = plan_interleaving(T_TR_MS, T_IN_MS, 60.0, 300.0)
    assert plan.feasible and (plan.beta, plan.tau_train) == (16, 3)
    assert plan.latency_ms == pytest.approx(15 / 60 * 1000 + T_IN_MS[16])
    assert plan.train_minibatches_per_s == pytest.approx(3 * 60 / 16)
    assert plan.max_wait_ms == pytest.approx(250.0)
    # larger budget → larger β and more training; a tie in θ goes to the smaller β
    big = plan_interleaving(T_TR_MS, T_IN_MS, 60.0, 2000.0)
    assert big.train_minibatches_per_s >= plan.train_minibatches_per_s and big.beta == 32
    assert not plan_interleaving(T_TR_MS, T_IN_MS, 60.0, 50.0).feasible
    powered = plan_interleaving(T_TR_MS, T_IN_MS, 60.0, 300.0, train_power_w=51.0,
                                infer_power_w={b: 30.0 for b in T_IN_MS}, power_budget_w=40.0)
    assert not powered.feasible and "40" in powered.reason
    sched = FulcrumScheduler.from_plan(timed(), plan)
    assert (sched.tau_train, sched.beta, sched.arrival_rps) == (3, 16, 60.0)


def test_bad_arguments_name_the_field():
    with pytest.raises(InvalidArgument, match="beta"):
        FulcrumScheduler(timed(), 1, 0)
    with pytest.raises(InvalidArgument, match="policy"):
        FulcrumScheduler(timed(), 1, 4, policy="fifo")
    with pytest.raises(InvalidArgument, match="arrival_rps"):
        run_interleaved(timed(), [0.1, 0.2], 1.0, 1, 4)  # plain instants: the fulcrum policy needs α
    with pytest.raises(InvalidArgument, match="backend"):
        run_naive(timed(), Poisson(10.0), 1.0, 4)


# --------------------------------------------------------------------------- real CPU models


@pytest.fixture(scope="module")
def torch_backend():
    torch = pytest.importorskip("torch")
    from edgetune.optimization.interleaving import TorchBackend
    from edgetune.workloads import get_workload

    torch.set_num_threads(1)
    b = TorchBackend("lstm-tiny", get_workload("mobilenetv3", input_size=32, num_classes=10),
                     train_batch_size=8, max_infer_batch=4)
    b.warmup(1)
    yield b
    b.close()


def test_real_cpu_interleaving_records_every_request(torch_backend):
    r = run_interleaved(torch_backend, Poisson(20.0, seed=0), 1.5, 3, 4, arrival_rps=20.0)
    assert r.n_requests > 10 and r.n_unserved == 0
    lat = r.latency_ms
    assert lat.size == r.n_requests and np.all(lat > 0) and np.all(np.isfinite(lat))
    assert r.train_minibatches > 0 and r.train_minibatches_per_s > 0
    assert len(r.losses) >= r.train_minibatches and all(math.isfinite(x) for x in r.losses)
    assert r.infer_batch_sizes.sum() == r.n_requests and r.infer_batch_sizes.max() <= 4
    segs = sorted((s for s in r.segments if s.kind != IDLE), key=lambda s: s.start_s)
    assert all(a.end_s <= b.start_s + 1e-6 for a, b in zip(segs, segs[1:], strict=False))  # one model at a time


def test_naive_runs_two_threads_and_records_metrics(torch_backend):
    import threading

    seen: set[str] = set()
    orig_train, orig_infer = torch_backend.train_step, torch_backend.infer_step

    def train_step():
        seen.add(threading.current_thread().name)
        return orig_train()

    def infer_step(k):
        seen.add(threading.current_thread().name)
        return orig_infer(k)

    torch_backend.train_step, torch_backend.infer_step = train_step, infer_step
    try:
        r = run_naive(torch_backend, Poisson(20.0, seed=1), 1.5, 4)
    finally:
        del torch_backend.train_step, torch_backend.infer_step
    assert {"naive-training", "naive-inference"} <= seen
    assert r.method == "naive" and r.n_unserved == 0 and r.latency_ms.size == r.n_requests
    assert r.train_minibatches > 0 and r.infer_batch_sizes.sum() == r.n_requests
    s = r.summary(200.0)
    assert {"p50_ms", "p99_ms", "max_ms", "violations", "train_minibatches_per_s"} <= set(s)
