"""The benchmarks. Each returns measured values; the registry compares ``metric`` with ``limit``."""

from __future__ import annotations

import statistics
import time
from pathlib import Path

import numpy as np

from edgetune.bench.runner import benchmark, best_of_s

REPO = Path(__file__).resolve().parents[3]


@benchmark("grid_enumeration", "full Orin AGX + Xavier AGX grids as arrays < 20 ms", "seconds", 0.020)
def grid_enumeration() -> dict:
    from edgetune.powermodes.grids import modes_array
    from edgetune.powermodes.specs import get_spec

    orin, xavier = get_spec("orin-agx"), get_spec("xavier-agx")
    s = best_of_s(lambda: (modes_array(orin, "full"), modes_array(xavier, "full")))
    return {"seconds": s, "modes": int(len(modes_array(orin, "full")) + len(modes_array(xavier, "full")))}


@benchmark("simulator_truth_18k", "time + power of all 18,096 Orin modes < 0.5 s", "seconds", 0.5)
def simulator_truth() -> dict:
    from edgetune.devices.simulated import SimulatedJetson
    from edgetune.powermodes.grids import modes_array

    dev = SimulatedJetson("orin-agx")
    modes = modes_array(dev.spec, "full")
    s = best_of_s(lambda: (dev.true_time_ms(modes, "resnet18", "train", 16),
                           dev.true_power_w(modes, "resnet18", "train", 16)), repeats=3)
    return {"seconds": s, "modes": int(len(modes))}


def _orin_candidates(batch_sizes=(1, 4, 16, 32, 64)):
    from edgetune.devices.simulated import SimulatedJetson
    from edgetune.optimization.select import Candidates
    from edgetune.powermodes.grids import modes_array

    dev = SimulatedJetson("orin-agx")
    modes = modes_array(dev.spec, "full")
    t = np.concatenate([dev.true_time_ms(modes, "mobilenetv3", "infer", b) for b in batch_sizes])
    p = np.concatenate([dev.true_power_w(modes, "mobilenetv3", "infer", b) for b in batch_sizes])
    return Candidates(t, p)


@benchmark("select_18096x5", "least time within a budget over 18,096 modes × 5 batch sizes < 5 ms",
           "seconds", 0.005)
def select_all() -> dict:
    from edgetune.optimization.select import least_time

    cands = _orin_candidates()
    s = best_of_s(lambda: least_time(cands, 30.0), repeats=20)
    return {"seconds": s, "options": len(cands)}


@benchmark("select_sweep_34", "a 17:50:1 budget sweep over the same options < 20 ms", "seconds", 0.020)
def select_sweep() -> dict:
    from edgetune.optimization.select import MinTime, parse_budget_sweep

    cands = _orin_candidates()
    budgets = parse_budget_sweep("17:50:1")
    sel = MinTime()
    s = best_of_s(lambda: sel.sweep(cands, budgets), repeats=20)
    return {"seconds": s, "budgets": len(budgets), "options": len(cands)}


@benchmark("plan_1000_nodes", "plan a 1,000-node round (both objectives, site budget) < 1 s", "seconds", 1.0)
def plan_1k() -> dict:
    from edgetune.coordination.planning.bench import bench_plan

    r = bench_plan(1000)
    return {"seconds": max(r["makespan"]["seconds"], r["energy"]["seconds"]), **r}


@benchmark("plan_10000_nodes", "plan a 10,000-node round < 10 s", "seconds", 10.0)
def plan_10k() -> dict:
    from edgetune.coordination.planning.bench import bench_plan

    r = bench_plan(10000)
    return {"seconds": max(r["makespan"]["seconds"], r["energy"]["seconds"]), **r}


@benchmark("profile_point_sim", "one profiled point on the simulator (40 minibatches, settling): wall time",
           "seconds_per_point")
def profile_point() -> dict:
    from edgetune.devices.simulated import SimulatedJetson
    from edgetune.powermodes.grids import enumerate_modes
    from edgetune.profiling import Profiler

    dev = SimulatedJetson("orin-agx", seed=0)
    modes = enumerate_modes(dev.spec, "fulcrum")[::9]
    t0 = time.perf_counter()
    Profiler(dev).profile(modes, "resnet18", "train", [16])
    return {"seconds_per_point": (time.perf_counter() - t0) / len(modes), "points": len(modes)}


@benchmark("sampler_overhead_cpu", "1 Hz power sampler thread costs < 2 % of a CPU minibatch",
           "overhead_fraction", 0.02)
def sampler_overhead() -> dict:
    """What the sampler thread takes from the minibatch it measures.

    Primary metric (robust on a shared machine): the sampler's own CPU time per wall second —
    one sensor read (real INA3221 file reads, here over a fake Orin sysroot) plus the thread's
    wake-up, times the rate — which bounds the time it can steal from a minibatch on the same
    core. Also reported: real CPU minibatches with and without the sampler, interleaved in
    alternating order (noisy when other work shares the cores).
    """
    import torch

    from edgetune.devices.base import RealClock
    from edgetune.devices.sampling import ThreadedSampler
    from edgetune.devices.sysfs import SysfsJetson
    from edgetune.workloads.registry import get_workload
    from edgetune.workloads.runner import MinibatchRunner

    sensor = SysfsJetson(REPO / "tests" / "fixtures" / "sysroots" / "orin-agx-jp5").power_sensor()

    # CPU seconds the sampler thread uses while sampling at 50 Hz for 2 s, per sample.
    sampler = ThreadedSampler(sensor, RealClock(), 50.0)
    cpu_s: list[float] = []
    original_take = sampler._take

    def timed_take() -> None:
        t0 = time.thread_time()
        original_take()
        cpu_s.append(time.thread_time() - t0)

    sampler._take = timed_take  # type: ignore[method-assign]
    sampler.start()
    time.sleep(2.0)
    samples = sampler.stop()
    per_sample_cpu_s = statistics.mean(cpu_s)

    torch.set_num_threads(1)
    runner = MinibatchRunner(get_workload("mobilenetv3", input_size=96), "train", 8, device="cpu")
    runner.run(3)  # warm up
    plain: list[float] = []
    sampled: list[float] = []
    for i in range(8):
        for with_sampler in ((False, True) if i % 2 == 0 else (True, False)):
            if with_sampler:
                s = ThreadedSampler(sensor, RealClock(), 1.0)
                s.start()
                sampled += runner.run(6)
                s.stop()
            else:
                plain += runner.run(6)
    runner.close()
    minibatch_ms = statistics.median(plain)
    return {
        "overhead_fraction": per_sample_cpu_s * 1.0,  # at 1 Hz
        "overhead_fraction_10hz": per_sample_cpu_s * 10.0,
        "per_sample_cpu_ms": per_sample_cpu_s * 1000.0,
        "samples_in_2s_at_50hz": len(samples),
        "cpu_minibatch_median_ms_without": minibatch_ms,
        "cpu_minibatch_median_ms_with": statistics.median(sampled),
        "observed_fraction_noisy": statistics.median(sampled) / minibatch_ms - 1.0,
    }
