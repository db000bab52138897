"""Managed interleaving (Fulcrum's) against naive time-sharing, and the peak-latency formula.

Part 1 — timed backend with simulator numbers (exact, virtual clock): Orin AGX at MAXN,
ResNet18 training bs16 and MobileNetV3 inference at β ∈ {1, 4, 16, 32, 64}, for α ∈ {30, 60,
90} rps. For every (α, β) that keeps up, τ_tr = ⌊(β/α − t_in)/t_tr⌋ (ConcurrentProblem) and
a run with constant arrivals (the paper's assumption) and one with Poisson arrivals; the
measured peak latency is compared with λ = (β−1)/α + t_in and the measured training
throughput with θ = τ·α/β. Also the plan (τ_tr, β) picked for a few latency budgets.

Part 2 — real models on the CPU (real time): the process is pinned to one core so training
and inference share one "device"; ``lstm-tiny`` trains (bs16) and MobileNetV3-small (64×64)
serves requests. t_tr and t_in(β) are measured (90th percentile, for headroom on a shared
machine), τ_tr and β are planned for a latency budget, and the same Poisson (and one
bursty) arrival stream is served by the Fulcrum scheduler and by the naive two-thread
baseline; the scheduler runs twice, with the paper's static τ_tr and with the guard (a τ_tr
block ends early when the inference minibatch is due). Reported: p50/p95/p99/max latency,
budget violations, training throughput.

Outputs in experiments/results/: interleaving_timed.csv, interleaving_plans.csv,
interleaving_cpu.csv, interleaving_vs_timesharing.md, interleaving_peak_latency.png,
interleaving_latency_cdf.png, interleaving_throughput.png.

Run: ``python experiments/interleaving_vs_timesharing.py`` (≈ 3 min on 2 cores;
``--quick`` shortens the real runs).
"""

from __future__ import annotations

import argparse
import csv
import os
import pathlib
import sys
import time

import numpy as np

from edgetune.optimization.interleaving import (
    MMPP,
    Deterministic,
    FulcrumScheduler,
    Poisson,
    TimedBackend,
    TorchBackend,
    interleaving_formulas,
    measure_step_times,
    plan_interleaving,
    run_interleaved,
    run_naive,
)

RESULTS = pathlib.Path(__file__).resolve().parent / "results"
SIM_BATCH_SIZES = (1, 4, 16, 32, 64)
SIM_RATES_RPS = (30.0, 60.0, 90.0)
SIM_BUDGETS_MS = (100.0, 300.0, 600.0, 1000.0)
CPU_BATCH_SIZES = (1, 2, 4, 8, 16)
METHOD_STYLES = (("interleaved", "-"), ("interleaved+guard", "-."), ("naive", "--"))


def write_csv(path: pathlib.Path, rows: list[dict]) -> None:
    keys: list[str] = []
    for r in rows:
        keys += [k for k in r if k not in keys]
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=keys)
        w.writeheader()
        for r in rows:
            w.writerow({k: (f"{v:.6g}" if isinstance(v, float) else v) for k, v in r.items()})


def md_table(rows: list[dict], cols: list[tuple[str, str, str]]) -> str:
    """``cols``: (key, header, format)."""
    out = ["| " + " | ".join(h for _, h, _ in cols) + " |", "|" + "---|" * len(cols)]
    for r in rows:
        out.append("| " + " | ".join(format(r[k], f) if f and isinstance(r.get(k), (int, float)) else str(r.get(k, ""))
                                     for k, _, f in cols) + " |")
    return "\n".join(out)


# --------------------------------------------------------------------------- part 1: simulator


def simulator_backend() -> TimedBackend:
    from edgetune.devices.simulated.device import SimulatedJetson

    device = SimulatedJetson("orin-agx", noise=False)  # MAXN: the device's initial mode
    return TimedBackend.from_simulator(device, "resnet18", "mobilenetv3", batch_sizes=SIM_BATCH_SIZES)


def part_timed(horizon_s: float = 120.0) -> tuple[list[dict], list[dict]]:
    ref = simulator_backend()
    t_tr = ref.train_time_ms()
    t_in = {b: ref.infer_time_ms(b) for b in SIM_BATCH_SIZES}
    rows = []
    for rate in SIM_RATES_RPS:
        for beta in SIM_BATCH_SIZES:
            f = interleaving_formulas(rate, beta, t_tr, t_in[beta])
            row = {"arrival_rps": rate, "beta": beta, "t_tr_ms": t_tr, "t_in_ms": t_in[beta],
                   "window_ms": f.window_ms, "keeps_up": f.keeps_up, "tau_train": f.tau_train,
                   "formula_latency_ms": f.latency_ms, "formula_train_mb_per_s": f.train_minibatches_per_s}
            # τ from the formula; with no keep-up, run τ=0 to show the queue growing
            det = run_interleaved(simulator_backend(), Deterministic(rate), horizon_s, f.tau_train, beta,
                                  arrival_rps=rate, flush_s=0.0)
            poi = run_interleaved(simulator_backend(), Poisson(rate, seed=7), horizon_s, f.tau_train, beta,
                                  arrival_rps=rate, flush_s=0.0)
            row.update({
                "det_peak_latency_ms": det.peak_latency_ms,
                "det_peak_minus_formula_ms": det.peak_latency_ms - f.latency_ms,
                "det_train_mb_per_s": det.train_minibatches_per_s,
                "det_max_queue": int(det.queue_length()[1].max()),
                "det_unserved": det.n_unserved,
                "poisson_p50_ms": det_or_nan(poi, 50), "poisson_p99_ms": det_or_nan(poi, 99),
                "poisson_max_ms": poi.peak_latency_ms, "poisson_train_mb_per_s": poi.train_minibatches_per_s,
                "poisson_unserved": poi.n_unserved,
            })
            rows.append(row)
    plans = []
    for rate in SIM_RATES_RPS:
        for budget in SIM_BUDGETS_MS:
            p = plan_interleaving(t_tr, t_in, rate, budget)
            plans.append({"arrival_rps": rate, "latency_budget_ms": budget, "feasible": p.feasible,
                          "beta": p.beta, "tau_train": p.tau_train,
                          "latency_ms": p.latency_ms if p.feasible else float("nan"),
                          "train_mb_per_s": p.train_minibatches_per_s if p.feasible else 0.0})
    return rows, plans


def det_or_nan(r, q: float) -> float:
    lat = r.latency_ms
    return float(np.percentile(lat, q)) if lat.size else float("nan")


# --------------------------------------------------------------------------- part 2: real CPU


def pin_one_core() -> str:
    """Pin this process (and the threads it starts) to one core: one shared "device"."""
    if not hasattr(os, "sched_setaffinity"):
        return "not pinned (no sched_setaffinity)"
    core = min(os.sched_getaffinity(0))
    os.sched_setaffinity(0, {core})
    return f"pinned to CPU {core}"


def part_cpu(horizon_s: float, budget_ms: float, rates: tuple[float, ...]) -> tuple[list[dict], dict, dict]:
    import torch

    from edgetune.workloads import get_workload

    torch.set_num_threads(1)
    backend = TorchBackend("lstm-tiny", get_workload("mobilenetv3", input_size=64, num_classes=10),
                           train_batch_size=16, max_infer_batch=max(CPU_BATCH_SIZES))
    backend.warmup(3)
    t_tr, t_in = measure_step_times(backend, CPU_BATCH_SIZES, repeats=15, quantile=0.9)
    scenarios = [(f"poisson {r:g} rps", Poisson(r, seed=11), r) for r in rates]
    mid = rates[len(rates) // 2]
    bursty = MMPP((3 * mid, mid / 3), (1.0, 2.0), seed=5)  # bursts at 3× the mean rate
    scenarios.append((f"bursty {bursty.mean_rate_rps:.3g} rps", bursty, bursty.mean_rate_rps))
    rows, latencies = [], {}
    for name, arrivals, rate in scenarios:
        plan = plan_interleaving(t_tr, t_in, rate, budget_ms)
        if not plan.feasible:
            print(f"  {name}: no feasible plan ({plan.reason})", file=sys.stderr)
            continue
        managed = FulcrumScheduler.from_plan(backend, plan).run(arrivals, horizon_s)
        guarded = FulcrumScheduler.from_plan(backend, plan, guard=True).run(arrivals, horizon_s)
        naive = run_naive(backend, arrivals, horizon_s, plan.beta)
        for r in (managed, guarded, naive):
            row = {"scenario": name, "arrival_rps": rate, **r.summary(budget_ms),
                   "planned_latency_ms": plan.latency_ms, "planned_train_mb_per_s": plan.train_minibatches_per_s,
                   "observed_t_tr_ms": float(np.median([s.duration_ms for s in r.segments_of("train")]))
                   if r.segments_of("train") else float("nan")}
            rows.append(row)
            latencies[(name, r.method)] = r.latency_ms
            print(f"  {name:>22} {r.method:>11}: p50 {row['p50_ms']:7.1f}  p99 {row['p99_ms']:7.1f}  "
                  f"max {row['max_ms']:7.1f} ms  viol {row['violations']:4d}/{row['requests']}  "
                  f"train {row['train_minibatches_per_s']:6.1f} mb/s", file=sys.stderr)
    backend.close()
    return rows, latencies, {"t_tr_ms": t_tr, "t_in_ms": t_in}


# --------------------------------------------------------------------------- plots and report


def plot(timed_rows: list[dict], cpu_rows: list[dict], latencies: dict, budget_ms: float) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ok = [r for r in timed_rows if r["keeps_up"]]
    fig, ax = plt.subplots(figsize=(5.5, 4.5))
    for rate, marker in zip(SIM_RATES_RPS, "os^", strict=True):
        pts = [r for r in ok if r["arrival_rps"] == rate]
        ax.scatter([r["formula_latency_ms"] for r in pts], [r["det_peak_latency_ms"] for r in pts],
                   marker=marker, label=f"α={rate:g} rps, constant arrivals")
        ax.scatter([r["formula_latency_ms"] for r in pts], [r["poisson_max_ms"] for r in pts], marker=marker,
                   facecolors="none", edgecolors="grey", label=f"α={rate:g} rps, Poisson (max)")
    lim = max(max(r["formula_latency_ms"] for r in ok), max(r["poisson_max_ms"] for r in ok)) * 1.1
    ax.plot([0, lim], [0, lim], "k--", lw=0.8)
    ax.set(xscale="log", yscale="log", xlabel="λ = (β−1)/α + t_in (ms)", ylabel="measured peak latency (ms)",
           title="Orin AGX MAXN: ResNet18 train + MobileNetV3 infer")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(RESULTS / "interleaving_peak_latency.png", dpi=120)
    plt.close(fig)

    scenarios = list(dict.fromkeys(r["scenario"] for r in cpu_rows))
    if not scenarios:
        return
    fig, axes = plt.subplots(1, len(scenarios), figsize=(4 * len(scenarios), 3.6), sharey=True)
    for ax, name in zip(np.atleast_1d(axes), scenarios, strict=True):
        for method, style in METHOD_STYLES:
            lat = np.sort(latencies.get((name, method), np.empty(0)))
            if lat.size:
                ax.plot(lat, np.arange(1, lat.size + 1) / lat.size, style, label=method)
        ax.axvline(budget_ms, color="r", lw=0.8, label="budget")
        ax.set(xscale="log", title=name, xlabel="latency (ms)")
    np.atleast_1d(axes)[0].set_ylabel("CDF")
    np.atleast_1d(axes)[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(RESULTS / "interleaving_latency_cdf.png", dpi=120)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(1.6 * len(scenarios) + 2, 3.6))
    x = np.arange(len(scenarios))
    width = 0.27
    for i, (method, _) in enumerate(METHOD_STYLES):
        vals = [next((r["train_minibatches_per_s"] for r in cpu_rows if r["scenario"] == s and r["method"] == method), 0)
                for s in scenarios]
        ax.bar(x + (i - 1) * width, vals, width, label=method)
    ax.set_xticks(x, scenarios, fontsize=8)
    ax.set(ylabel="training minibatches / s", title="training throughput (lstm-tiny bs16)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(RESULTS / "interleaving_throughput.png", dpi=120)
    plt.close(fig)


def report(timed_rows, plans, cpu_rows, profile, budget_ms, pinned, horizon_s, elapsed_s) -> str:
    ok = [r for r in timed_rows if r["keeps_up"]]
    worst = max(abs(r["det_peak_minus_formula_ms"]) for r in ok)
    thr_err = max(abs(r["det_train_mb_per_s"] - r["formula_train_mb_per_s"]) / r["formula_train_mb_per_s"]
                  for r in ok if r["formula_train_mb_per_s"] > 0)
    lines = [
        "# Managed interleaving vs naive time-sharing (Fulcrum Fulcrum)", "",
        "## 1. Peak-latency formula on the timed backend (simulator, Orin AGX MAXN)", "",
        "ResNet18 training bs16 and MobileNetV3 inference; τ_tr = ⌊(β/α − t_in)/t_tr⌋; "
        "constant arrivals (the paper's assumption) and Poisson arrivals, 120 s each.", "",
        f"Largest |measured peak − λ| with constant arrivals over {len(ok)} (α, β) that keep up: **{worst:.2e} ms**; "
        f"largest relative error of measured training throughput vs θ = τ·α/β: **{100 * thr_err:.2f} %** "
        "(the last partial window).", "",
        md_table(timed_rows, [("arrival_rps", "α rps", "g"), ("beta", "β", "d"), ("t_in_ms", "t_in ms", ".1f"),
                              ("keeps_up", "keeps up", ""), ("tau_train", "τ_tr", "d"),
                              ("formula_latency_ms", "λ ms", ".1f"), ("det_peak_latency_ms", "peak (const) ms", ".1f"),
                              ("poisson_p99_ms", "p99 (Poisson) ms", ".1f"), ("poisson_max_ms", "max (Poisson) ms", ".1f"),
                              ("formula_train_mb_per_s", "θ mb/s", ".2f"), ("det_train_mb_per_s", "measured mb/s", ".2f"),
                              ("det_max_queue", "max queue", "d")]),
        "", "Plans (τ_tr, β) for latency budgets (largest θ within λ ≤ budget, smaller β on a tie):", "",
        md_table(plans, [("arrival_rps", "α rps", "g"), ("latency_budget_ms", "budget ms", "g"), ("feasible", "feasible", ""),
                         ("beta", "β", "d"), ("tau_train", "τ_tr", "d"), ("latency_ms", "λ ms", ".1f"),
                         ("train_mb_per_s", "θ mb/s", ".2f")]),
        "", "## 2. Real models on the CPU", "",
        f"lstm-tiny training (bs16) and MobileNetV3-small 64×64 inference, torch 1 thread, process {pinned}; "
        f"{horizon_s:g} s per run; latency budget {budget_ms:g} ms. Measured (p90 of 15) t_tr = "
        f"{profile['t_tr_ms']:.1f} ms, t_in(β) = " + ", ".join(f"{b}: {t:.1f}" for b, t in profile["t_in_ms"].items())
        + " ms. The same arrival stream feeds both methods; naive batches whatever is queued up to the same β.", "",
        md_table(cpu_rows, [("scenario", "arrivals", ""), ("method", "method", ""), ("beta", "β", "d"),
                            ("tau_train", "τ_tr", "g"), ("planned_latency_ms", "λ ms", ".0f"),
                            ("p50_ms", "p50 ms", ".1f"), ("p95_ms", "p95 ms", ".1f"), ("p99_ms", "p99 ms", ".1f"),
                            ("max_ms", "max ms", ".1f"), ("violations", "over budget", "d"), ("requests", "requests", "d"),
                            ("mean_infer_batch", "mean batch", ".2f"), ("train_minibatches_per_s", "train mb/s", ".1f"),
                            ("observed_t_tr_ms", "t_tr in run ms", ".1f")]),
        "", f"Total time {elapsed_s:.0f} s. Plots: interleaving_peak_latency.png, interleaving_latency_cdf.png, "
        "interleaving_throughput.png.",
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--horizon-s", type=float, default=10.0, help="length of each real CPU run")
    ap.add_argument("--budget-ms", type=float, default=250.0, help="latency budget of the CPU runs")
    ap.add_argument("--rates", type=float, nargs="+", default=[10.0, 20.0, 40.0], help="CPU arrival rates (rps)")
    ap.add_argument("--quick", action="store_true", help="4 s CPU runs")
    ap.add_argument("--no-pin", action="store_true", help="do not pin the process to one core")
    args = ap.parse_args(argv)
    horizon_s = 4.0 if args.quick else args.horizon_s
    RESULTS.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    print("part 1: timed backend, simulator numbers", file=sys.stderr)
    timed_rows, plans = part_timed()
    write_csv(RESULTS / "interleaving_timed.csv", timed_rows)
    write_csv(RESULTS / "interleaving_plans.csv", plans)
    print("part 2: real CPU models", file=sys.stderr)
    pinned = "not pinned" if args.no_pin else pin_one_core()
    cpu_rows, latencies, profile = part_cpu(horizon_s, args.budget_ms, tuple(args.rates))
    write_csv(RESULTS / "interleaving_cpu.csv", cpu_rows)
    plot(timed_rows, cpu_rows, latencies, args.budget_ms)
    text = report(timed_rows, plans, cpu_rows, profile, args.budget_ms, pinned, horizon_s, time.perf_counter() - t0)
    (RESULTS / "interleaving_vs_timesharing.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
