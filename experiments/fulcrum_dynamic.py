"""Fulcrum (Fulcrum) §7.4–7.5: dynamic arrival rates and two concurrent inferences.

On the simulator's 441-mode Fulcrum grid of the Orin AGX (noise-free truth tables replayed
through :class:`~edgetune.devices.replay.ReplayDevice`):

**Dynamic rates** (:class:`~edgetune.optimization.dynamic.DynamicSolver`). Two 2-hour traces of
24 windows × 300 s (the paper's 5-minute rate changes):

- *poisson*: per-window rates drawn from Poisson(60) (the paper: "a Poisson distribution ...
  with a mean of 60 RPS", max ≈ 76), arrivals Poisson within each window (``PiecewisePoisson``);
- *bursty*: a two-state MMPP, 100 rps bursts / 40 rps lulls, mean dwell 900 / 1500 s — bursts
  above ALS's 30–90 rps sampling range, like the paper's Azure trace (up to 115 rps).

Each window's rate is estimated from its arrivals, the problem is re-solved at that estimate,
and the decision is judged at the window's true mean rate against the window's oracle. Problems
(fixed budgets as in the paper's 40 W / 100 ms): MobileNetV3 inference at 40 W and at 20 W,
YOLOv8n inference at 20 W (100 ms), and concurrent ResNet18 training + MobileNetV3 inference at
40 W / 500 ms. Strategies: GMD (warm: every earlier profile reused; the paper's backtracking),
GMD-search (warm, and ``backtrack="search"``: when the paper's backtracking finds nothing, the
multi-dimensional search runs at the next larger β), GMD-cold (a fresh GMD per window), ALS (sampled once, re-solved, extended when the rate leaves its range), RND150 (sampled
once) and EXH (every point profiled, solved at the estimated rate: what the rate estimate alone
costs). The per-window oracle is exhaustive at the window's *true* rate.

**Two inferences** (:class:`~edgetune.optimization.multi_infer.UrgentPlusBatchProblem`):
non-urgent ResNet18 (bs 16, maximise samples/s) with urgent MobileNetV3 (power 10–50 W,
latency 500–2000 ms step 100, rate 30–120 rps step 5 — the paper's concurrent ranges) and with
urgent BERT-base (power 10–60 W, latency 2–6 s step 200 ms, rate 1–15 rps), sampled
configurations that have an optimum. GMD15 and RND150 per configuration; ALS (≤ 145, quadrants
over the same ranges) once per pair, answering every configuration. Throughput loss vs the oracle.

Writes ``experiments/results/fulcrum_dynamic_windows.csv``, ``fulcrum_multi_infer.csv``,
``fulcrum_dynamic.md``, ``fulcrum_dynamic_{poisson,bursty}.png``, ``fulcrum_multi_infer.png``.

    python experiments/fulcrum_dynamic.py [--quick] [--configs N]
"""

from __future__ import annotations

import argparse
import csv
import os
import sys
import time
from collections import defaultdict

import numpy as np

from edgetune.devices.replay import ReplayDevice
from edgetune.devices.simulated.tables import truth_table
from edgetune.optimization.dynamic import DynamicSolver, excess_pct
from edgetune.optimization.interleaving import MMPP, PiecewisePoisson
from edgetune.optimization.multi_infer import UrgentPlusBatchProblem
from edgetune.optimization.problems import ConcurrentProblem, InferProblem
from edgetune.optimization.strategies import make_strategy, run_search, search_space
from edgetune.powermodes.grids import named_grid
from edgetune.powermodes.specs import get_spec
from edgetune.tables import Table

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(HERE, "results")
INFER_SIZES = (1, 4, 16, 32, 64)
WINDOW_S, N_WINDOWS = 300.0, 24
#: ALS guide epochs here (the library default is 300 / 60): the concurrent ALS refits four guides
#: per quadrant over 2,205 configurations, and this script shares 2 cores.
ALS_FAST = {"epochs": 150, "refit_epochs": 30}

# (label, parts of the truth table, problem)
DYNAMIC_CASES = [
    ("mobilenetv3 infer 40W", [("mobilenetv3", "infer", INFER_SIZES)],
     InferProblem(40, 100, 60, infer_workload="mobilenetv3")),
    ("mobilenetv3 infer 20W", [("mobilenetv3", "infer", INFER_SIZES)],
     InferProblem(20, 100, 60, infer_workload="mobilenetv3")),
    ("yolov8n infer 20W", [("yolov8n", "infer", INFER_SIZES)],
     InferProblem(20, 100, 60, infer_workload="yolov8n")),
    ("resnet18+mobilenetv3 concurrent 40W", [("resnet18", "train", (16,)), ("mobilenetv3", "infer", INFER_SIZES)],
     ConcurrentProblem(40, 500, 60, "resnet18", "mobilenetv3", train_batch_size=16)),
]
# (label, strategy, DynamicSolver options)
DYNAMIC_STRATEGIES = [
    ("GMD", "gmd", {}),
    ("GMD-search", "gmd", {"strategy_options": {"backtrack": "search"}}),
    ("GMD-cold", "gmd", {"reuse": False}),
    ("ALS", "als", {"strategy_options": ALS_FAST}),
    ("RND150", "random-150", {}),
    ("EXH", "exhaustive", {}),  # every point profiled, but solved at the estimated rate like the others
]
# (label, urgent, power range W, latency range ms (lo, hi, step), rate range rps (lo, hi, step))
PAIRS = [
    ("resnet18+mobilenetv3", "mobilenetv3", (10, 50), (500, 2000, 100), (30, 120, 5)),
    ("resnet18+bert-base", "bert-base", (10, 60), (2000, 6000, 200), (1, 15, 1)),
]
NONURGENT, NONURGENT_BS = "resnet18", 16


def build_table(spec, grid, parts) -> Table:
    rows: list[dict] = []
    for workload, role, sizes in parts:
        rows += truth_table(spec, workload, role, grid.array(), sizes)
    return Table(list(rows[0].keys()), rows, "truth")


def traces(seed: int = 4) -> dict:
    rng = np.random.default_rng(seed)
    rates = rng.poisson(60, N_WINDOWS).astype(float)
    return {"poisson": PiecewisePoisson(rates, WINDOW_S, seed=seed),
            "bursty": MMPP((100.0, 40.0), (900.0, 1500.0), seed=seed)}


# --------------------------------------------------------------------------- dynamic rates


def run_dynamic(spec, grid, quick: bool) -> list[dict]:
    records: list[dict] = []
    horizon = WINDOW_S * N_WINDOWS
    cases = DYNAMIC_CASES[:1] + DYNAMIC_CASES[-1:] if quick else DYNAMIC_CASES
    for case, parts, problem in cases:
        table = build_table(spec, grid, parts)
        for trace_name, trace in traces().items():
            for label, name, opts in DYNAMIC_STRATEGIES:
                t0 = time.time()
                solver = DynamicSolver(name, ReplayDevice(table), problem, WINDOW_S, **opts)
                for w in solver.replay(trace, horizon):
                    records.append({"case": case, "trace": trace_name, "strategy": label,
                                    "latency_budget_ms": problem.latency_budget_ms,
                                    "power_budget_w": problem.power_budget_w, **w.as_row()})
                print(f"  {case:38s} {trace_name:8s} {label:9s} profiles {solver.profiled:5d} "
                      f"({time.time() - t0:.1f} s)", flush=True)
    return records


def summarise_dynamic(records: list[dict]) -> list[dict]:
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for r in records:
        groups[(r["case"], r["trace"], r["strategy"])].append(r)
    out = []
    for (case, trace, strategy), rs in groups.items():
        ex = np.array([r["excess_pct"] for r in rs], dtype=float)
        solvable = [r for r in rs if r["oracle_objective"] is not None]
        out.append({
            "case": case, "trace": trace, "strategy": strategy, "windows": len(rs),
            "oracle_windows": len(solvable),
            "met_pct": 100.0 * np.mean([r["meets_budgets"] for r in solvable]) if solvable else np.nan,
            "met_at_peak_pct": 100.0 * np.mean([bool(r["meets_at_peak"]) for r in solvable]) if solvable else np.nan,
            "median_excess_pct": float(np.nanmedian(ex)) if np.isfinite(ex).any() else np.nan,
            "max_excess_pct": float(np.nanmax(ex)) if np.isfinite(ex).any() else np.nan,
            "first_window_profiles": rs[0]["new_profiles"],
            "total_profiles": rs[-1]["cumulative_profiles"],
            "windows_profiling": sum(r["new_profiles"] > 0 for r in rs),
            "beta_changes": sum(1 for a, b in zip(rs, rs[1:], strict=False) if a["batch_size"] != b["batch_size"]),
        })
    return out


# --------------------------------------------------------------------------- two inferences


def pair_problem(urgent: str, power_w: float, latency_ms: float, rate_rps: float) -> UrgentPlusBatchProblem:
    return UrgentPlusBatchProblem(power_w, latency_ms, rate_rps, urgent_workload=urgent, nonurgent_workload=NONURGENT,
                                  nonurgent_batch_size=NONURGENT_BS)


def sample_pair_problems(urgent: str, n: int, rng, truth, power, lat, rate) -> list[UrgentPlusBatchProblem]:
    """``n`` configurations with an existing optimum."""
    out, draws = [], 0
    while len(out) < n and draws < 50 * n:
        draws += 1
        p = pair_problem(urgent, float(rng.integers(power[0], power[1] + 1)),
                         float(rng.choice(np.arange(lat[0], lat[1] + 1, lat[2]))),
                         float(rng.choice(np.arange(rate[0], rate[1] + 1, rate[2]))))
        if p.solve(truth).feasible:
            out.append(p)
    print(f"  {urgent}: {len(out)} configurations with an optimum out of {draws} drawn", flush=True)
    return out


def pair_record(pair: str, strategy: str, p: UrgentPlusBatchProblem, opt, decision, truth, profiled: int,
                trials: int) -> dict:
    """One run: the decision judged on the truth table against the configuration's optimum."""
    found = decision.feasible
    ev = p.evaluate(decision.mode, decision.batch_size, truth) if found else None
    return {"pair": pair, "strategy": strategy, "power_budget_w": p.power_budget_w,
            "latency_budget_ms": p.latency_budget_ms, "arrival_rps": p.arrival_rps,
            "optimum_samples_per_s": opt.evaluation.objective, "found": found,
            "meets_budgets": bool(ev is not None and ev.feasible),
            "samples_per_s": ev.objective if ev is not None else np.nan,
            "loss_pct": excess_pct(ev, opt.evaluation) if ev is not None else np.nan,
            "batch_size": decision.batch_size if found else None, "profiled": profiled, "trials": trials}


def run_multi_infer(spec, grid, n_cfg: int, quick: bool) -> list[dict]:
    records: list[dict] = []
    rng = np.random.default_rng(5)
    for label, urgent, power, lat, rate in PAIRS[:1] if quick else PAIRS:
        table = build_table(spec, grid, [(NONURGENT, "infer", (NONURGENT_BS,)), (urgent, "infer", INFER_SIZES)])
        truth = pair_problem(urgent, 1.0, 1.0, 1.0).observations_from_rows(table.rows)
        problems = sample_pair_problems(urgent, n_cfg, rng, truth, power, lat, rate)
        optima = [p.solve(truth) for p in problems]

        t0 = time.time()
        for i, prob in enumerate(problems):
            for s_label, name in (("GMD", "gmd"), ("RND150", "random-150")):
                dev = ReplayDevice(table)
                space, p = search_space(dev, prob)
                res = run_search(make_strategy(name, p, space, seed=i), dev, p)
                records.append(pair_record(label, s_label, prob, optima[i], res.decision, truth, res.profiled,
                                           res.trials))
        t1 = time.time()
        dev = ReplayDevice(table)
        space, p0 = search_space(dev, problems[0])
        als = make_strategy("als", p0, space, seed=0, latency_range_ms=lat[:2], rate_range_rps=rate[:2], **ALS_FAST)
        res = run_search(als, dev, p0)
        for i, prob in enumerate(problems):  # ALS's samples answer every configuration of the pair
            records.append(pair_record(label, "ALS", prob, optima[i], prob.solve(als.obs), truth, res.profiled,
                                       res.trials))
        print(f"    {label}: GMD + RND150 {t1 - t0:.1f} s, ALS {time.time() - t1:.1f} s", flush=True)
    return records


def summarise_multi(records: list[dict]) -> list[dict]:
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for r in records:
        groups[(r["pair"], r["strategy"])].append(r)
    out = []
    for (pair, strategy), rs in groups.items():
        loss = np.array([r["loss_pct"] for r in rs if r["meets_budgets"]], dtype=float)
        out.append({"pair": pair, "strategy": strategy, "runs": len(rs),
                    "found_pct": 100.0 * np.mean([r["found"] for r in rs]),
                    "met_pct": 100.0 * np.mean([r["meets_budgets"] for r in rs]),
                    "median_loss_pct": float(np.median(loss)) if loss.size else np.nan,
                    "q1_loss_pct": float(np.percentile(loss, 25)) if loss.size else np.nan,
                    "q3_loss_pct": float(np.percentile(loss, 75)) if loss.size else np.nan,
                    "median_profiled": float(np.median([r["profiled"] for r in rs]))})
    return out


# --------------------------------------------------------------------------- outputs


def write_csv(path: str, records: list[dict]) -> None:
    cols = list(dict.fromkeys(k for r in records for k in r))
    with open(path, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=cols)
        w.writeheader()
        for r in records:
            w.writerow({k: (f"{v:.6g}" if isinstance(v, float) else v) for k, v in r.items()})


def fmt(v: float, digits: int = 1) -> str:
    return "–" if v is None or (isinstance(v, float) and not np.isfinite(v)) else f"{v:.{digits}f}"


def write_md(path: str, dyn: list[dict], multi: list[dict], elapsed_s: float, args) -> None:
    lines = ["# Fulcrum: dynamic arrival rates and two concurrent inferences (simulated Orin AGX, 441 modes)", "",
             f"`python experiments/fulcrum_dynamic.py{' --quick' if args.quick else ''}` — {elapsed_s:.0f} s. "
             "Noise-free truth tables replayed; decisions judged at each window's true mean rate against that "
             "window's oracle (exhaustive). See the script's docstring for traces and problems.", "",
             "## Dynamic arrival rates (24 windows × 300 s)", "",
             "*met %*: windows whose decision meets every budget at the window's true mean rate, among windows "
             "with an optimum; *at peak %*: also at the highest rate inside the window (differs only when an MMPP "
             "state flip falls inside a window); *excess*: latency over optimal (inference) or training-throughput "
             "loss (concurrent) over windows that met the budgets; *profiles*: first window / total over the "
             "trace (distinct points; GMD-cold re-counts every re-profiled point); *windows profiling*: windows "
             "that spent any profile; *β changes*: decisions that changed batch size.", "",
             "| case | trace | strategy | oracle windows | met % | at peak % | median excess % | max excess % "
             "| profiles 1st / total | windows profiling | β changes |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for s in dyn:
        lines.append(f"| {s['case']} | {s['trace']} | {s['strategy']} | {s['oracle_windows']}/{s['windows']} | "
                     f"{fmt(s['met_pct'], 0)} | {fmt(s['met_at_peak_pct'], 0)} | {fmt(s['median_excess_pct'])} | "
                     f"{fmt(s['max_excess_pct'])} | {s['first_window_profiles']} / {s['total_profiles']} | "
                     f"{s['windows_profiling']} | {s['beta_changes']} |")
    lines += ["", "## Two concurrent inferences: non-urgent ResNet18 (bs 16) + urgent inference", "",
              "Throughput loss of the non-urgent workload (samples/s) vs the oracle, over configurations whose "
              "decision meets every budget; *found*: a feasible decision returned (every configuration has an "
              "optimum); profiles are distinct points (a configuration measures both workloads).", "",
              "| pair (non-urgent+urgent) | strategy | runs | found % | met % | median loss % | IQR % "
              "| median profiles |", "|---|---|---|---|---|---|---|---|"]
    for s in multi:
        lines.append(f"| {s['pair']} | {s['strategy']} | {s['runs']} | {fmt(s['found_pct'])} | {fmt(s['met_pct'])} | "
                     f"{fmt(s['median_loss_pct'])} | {fmt(s['q1_loss_pct'])}–{fmt(s['q3_loss_pct'])} | "
                     f"{s['median_profiled']:.0f} |")
    lines.append("")
    with open(path, "w") as fh:
        fh.write("\n".join(lines))


def plot_dynamic(records: list[dict], out_dir: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colors = {"GMD": "tab:blue", "GMD-search": "tab:purple", "GMD-cold": "tab:cyan", "ALS": "tab:green", "RND150": "tab:orange",
              "EXH": "black"}
    styles = {"EXH": ":", "GMD-search": "--"}  # GMD-search often coincides with GMD: dashed on top
    for trace in ("poisson", "bursty"):
        rs = [r for r in records if r["trace"] == trace]
        cases = list(dict.fromkeys(r["case"] for r in rs))
        if not cases:
            continue
        fig, axes = plt.subplots(4, len(cases), figsize=(4.4 * len(cases), 10.5), sharex=True, squeeze=False)
        for j, case in enumerate(cases):
            cr = [r for r in rs if r["case"] == case]
            strategies = list(dict.fromkeys(r["strategy"] for r in cr))
            first = [r for r in cr if r["strategy"] == strategies[0]]
            x = np.array([r["window"] for r in first])
            ax = axes[0][j]
            ax.step(x, [r["true_rate_rps"] for r in first], where="mid", color="black", label="true")
            ax.plot(x, [r["estimated_rate_rps"] for r in first], "o", ms=3, color="tab:red", label="estimated")
            ax.set_title(case, fontsize=9)
            ax.set_ylabel("arrival rate (rps)", fontsize=8)
            ax.legend(fontsize=7, loc="upper right")
            for k, s in enumerate(strategies):
                sr = [r for r in cr if r["strategy"] == s]
                jitter = (k - len(strategies) / 2) * 0.08  # keep overlapping steps visible
                bs = [r["batch_size"] if r["found"] else np.nan for r in sr]
                axes[1][j].step(x, np.array(bs, dtype=float) * (1 + jitter * 0.3), where="mid",
                                color=colors.get(s), ls=styles.get(s, "-"), label=s)
                lat = [r["latency_ms"] if r["meets_budgets"] else np.nan for r in sr]
                axes[2][j].plot(x, lat, marker=".", ms=4, color=colors.get(s), ls=styles.get(s, "-"), label=s)
                miss = [x[i] for i, r in enumerate(sr) if r["oracle_objective"] is not None and not r["meets_budgets"]]
                if miss:
                    axes[2][j].plot(miss, [sr[0]["latency_budget_ms"] * 1.04] * len(miss), "x", color=colors.get(s),
                                    ms=5)
                if s != "EXH":
                    axes[3][j].step(x, [max(r["cumulative_profiles"], 1) for r in sr], where="post",
                                    color=colors.get(s), ls=styles.get(s, "-"), label=s)
            axes[1][j].set_yscale("log", base=2)
            axes[1][j].set_yticks([1, 4, 16, 32, 64], ["1", "4", "16", "32", "64"])
            axes[1][j].set_ylabel("chosen β", fontsize=8)
            axes[2][j].axhline(cr[0]["latency_budget_ms"], color="red", lw=1, label="budget")
            axes[2][j].set_ylabel("peak latency at true rate (ms)\n(x: budget missed)", fontsize=8)
            axes[3][j].set_yscale("log")
            axes[3][j].set_ylabel("cumulative profiles", fontsize=8)
            axes[3][j].set_xlabel("window (300 s)", fontsize=8)
            for i in range(4):
                axes[i][j].grid(alpha=0.3)
                axes[i][j].tick_params(labelsize=7)
        axes[1][0].legend(fontsize=7, loc="upper left")
        axes[3][0].legend(fontsize=7, loc="lower right")
        fig.suptitle(f"Fulcrum dynamic arrival rates, {trace} trace (re-solved every 300 s)", fontsize=10)
        fig.tight_layout()
        fig.savefig(os.path.join(out_dir, f"fulcrum_dynamic_{trace}.png"), dpi=110)
        plt.close(fig)


def plot_multi(records: list[dict], summary: list[dict], out_dir: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pairs = list(dict.fromkeys(r["pair"] for r in records))
    fig, axes = plt.subplots(1, len(pairs), figsize=(4.6 * len(pairs), 4.0), squeeze=False)
    for ax, pair in zip(axes[0], pairs, strict=True):
        strategies = list(dict.fromkeys(r["strategy"] for r in records if r["pair"] == pair))
        data = [[r["loss_pct"] for r in records if r["pair"] == pair and r["strategy"] == s and r["meets_budgets"]]
                or [np.nan] for s in strategies]
        ax.boxplot(data, showfliers=True, flierprops={"markersize": 2})
        ax.set_xticks(range(1, len(strategies) + 1), strategies, fontsize=8)
        ax.set_title(f"{pair} (non-urgent+urgent)", fontsize=9, pad=16)
        ax.set_ylabel("non-urgent throughput loss (%)", fontsize=8)
        ax.grid(axis="y", alpha=0.3)
        top = ax.get_ylim()[1]
        for j, s in enumerate(strategies, start=1):
            found = next(x["found_pct"] for x in summary if x["pair"] == pair and x["strategy"] == s)
            ax.text(j, top, f"{found:.0f}%", ha="center", va="bottom", fontsize=7, color="tab:blue")
    fig.suptitle("Two concurrent inferences (blue: % solved)", fontsize=10)
    fig.tight_layout()
    fig.savefig(os.path.join(out_dir, "fulcrum_multi_infer.png"), dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="two dynamic cases, one pair, fewer configurations")
    ap.add_argument("--configs", type=int, default=None, help="sampled configurations per two-inference pair")
    ap.add_argument("--out", default=RESULTS)
    args = ap.parse_args(argv)
    n_cfg = args.configs or (10 if args.quick else 40)
    os.makedirs(args.out, exist_ok=True)
    t_start = time.time()
    spec = get_spec("orin-agx")
    grid = named_grid(spec, "fulcrum")

    print("dynamic arrival rates", flush=True)
    dyn = run_dynamic(spec, grid, args.quick)
    print("two concurrent inferences", flush=True)
    multi = run_multi_infer(spec, grid, n_cfg, args.quick)

    dyn_summary, multi_summary = summarise_dynamic(dyn), summarise_multi(multi)
    elapsed = time.time() - t_start
    write_csv(os.path.join(args.out, "fulcrum_dynamic_windows.csv"), dyn)
    write_csv(os.path.join(args.out, "fulcrum_multi_infer.csv"), multi)
    write_md(os.path.join(args.out, "fulcrum_dynamic.md"), dyn_summary, multi_summary, elapsed, args)
    plot_dynamic(dyn, args.out)
    plot_multi(multi, multi_summary, args.out)
    for s in dyn_summary:
        print(f"{s['case']:38s} {s['trace']:8s} {s['strategy']:9s} met {fmt(s['met_pct'], 0):>4s}% "
              f"excess {fmt(s['median_excess_pct']):>5s}% profiles {s['first_window_profiles']}/{s['total_profiles']}")
    for s in multi_summary:
        print(f"{s['pair']:24s} {s['strategy']:7s} found {s['found_pct']:5.1f}% met {s['met_pct']:5.1f}% "
              f"loss {fmt(s['median_loss_pct'])}% profiles {s['median_profiled']:.0f}")
    print(f"done in {elapsed:.0f} s -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
