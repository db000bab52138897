"""Which transfer method the control plane's tuner should use (``TuningPolicy.transfer_method``).

The TuningJob path as the coordinator runs it, in one process: a ResNet18 reference MLP fitted on
80 random modes of the simulated Orin AGX (what ``edgetune up`` fits), a tuner with a job's default
frontier schedule (12 profiles, as the e2e tests, or 50, a job's default) for the first budget (its band 0.7-1.0 × that budget), a choice verified
on the board at each budget in turn (the first, then a re-budget that selects again from the same
predictions, as ``UpdateBudget`` does). Per method, seed and budget: the chosen mode's true time (the
simulator's noise-free value) over the fastest true time within the budget (an exhaustive search of
the same candidates, computed in the same run), the verification attempts, and whether the budget
was met.

Writes ``experiments/results/controller_transfer.{csv,md,png}``.

    python experiments/controller_transfer.py [--seeds 0 1 2 ...] [--methods nn+gp ref+gp] [--profiles 12 50] [--budgets 25 18]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from edgetune.base.records import Points
from edgetune.control.reconcile import CANDIDATE_GRID, policy_for
from edgetune.devices.simulated.device import SimulatedJetson
from edgetune.devices.simulated.tables import truth_table
from edgetune.localrun.controlplane import REFERENCE_BATCH_SIZE, REFERENCE_WORKLOAD
from edgetune.powermodes.grids import named_grid
from edgetune.powermodes.specs import get_spec
from edgetune.profiling.protocol import Profiler
from edgetune.tables import write_table
from edgetune.tuning.jobs import TuningJobSpec
from edgetune.tuning.local import DeviceMeasurer, LibraryEstimator, LibrarySelector
from edgetune.tuning.tuner import NodeTuner

RESULTS = Path(__file__).resolve().parent / "results"
DEVICE, WORKLOAD, BATCH = "orin-agx", "mobilenetv3", 16
REFERENCE_POINTS, REFERENCE_EPOCHS = 80, 100  # what the e2e tests and a quick ``edgetune up`` fit


def reference(est: LibraryEstimator, grid: np.ndarray, seed: int):
    rng = np.random.default_rng(seed)
    modes = grid[np.sort(rng.choice(len(grid), REFERENCE_POINTS, replace=False))]
    rows = truth_table(DEVICE, REFERENCE_WORKLOAD, "train", modes, [REFERENCE_BATCH_SIZE])
    points = Points(modes, np.full(len(modes), REFERENCE_BATCH_SIZE), np.array([r["time_ms"] for r in rows]),
                    np.array([r["power_w"] for r in rows]), DEVICE, REFERENCE_WORKLOAD, "train")
    return est.fit(points, model_id="reference", method="nn", seed=0, epochs=REFERENCE_EPOCHS)


def run(method: str, profiles: int, seed: int, budgets_w: list[float], grid: np.ndarray,
        truth: dict[str, np.ndarray]) -> list[dict]:
    est = LibraryEstimator()
    ref = reference(est, grid, seed)
    spec = TuningJobSpec(name="x", workload=WORKLOAD, nodes=("n",), profiles=profiles)
    policy = policy_for(spec).with_(transfer_method=method)
    measurer = DeviceMeasurer(Profiler(SimulatedJetson(DEVICE, seed=seed)), WORKLOAD)
    tuner = NodeTuner(policy, measurer, est, LibrarySelector(), base=ref, candidates=grid, batch_size=BATCH,
                      device=DEVICE, workload=WORKLOAD, power_range_w=(0.7 * budgets_w[0], budgets_w[0]))
    tuner.profile_initial()
    tuner.explore()
    rows = []
    for budget_w in budgets_w:
        d = tuner.select_and_verify(budget_w)
        best_ms = float(truth["time_ms"][truth["power_w"] <= budget_w].min())
        chosen_ms = float(truth["time_ms"][d.index]) if d.index is not None else float("nan")
        rows.append({"method": method, "profiles": profiles, "seed": seed, "budget_w": budget_w, "met": d.within_budget,
                     "attempts": d.attempts, "true_time_ms": round(chosen_ms, 1), "best_time_ms": round(best_ms, 1),
                     "time_over_best": round(chosen_ms / best_ms, 3) if d.within_budget else float("nan"),
                     "measured_power_w": round(d.measured_power_w, 2) if d.measured_power_w is not None else None,
                     "reason": d.reason if not d.within_budget else ""})
        print(rows[-1], flush=True)
    return rows


def report(rows: list[dict], budgets_w: list[float], out: Path) -> None:
    methods = list(dict.fromkeys((r["method"], r["profiles"]) for r in rows))
    lines = ["| method | profiles | budget W | met | median time / best | worst time / best | attempts (mean) |",
             "|---|---|---|---|---|---|---|"]
    for m, n in methods:
        for b in budgets_w:
            sel = [r for r in rows if (r["method"], r["profiles"]) == (m, n) and r["budget_w"] == b]
            ratios = np.array([r["time_over_best"] for r in sel if r["met"]])
            med = f"{np.median(ratios):.2f}" if ratios.size else "—"
            worst = f"{ratios.max():.2f}" if ratios.size else "—"
            lines.append(f"| {m} | {n} | {b:g} | {sum(r['met'] for r in sel)}/{len(sel)} | {med} | {worst} | "
                         f"{np.mean([r['attempts'] for r in sel]):.1f} |")
    (out / "controller_transfer.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5))
    for k, m in enumerate(methods):  # m: (method, profiles)
        for j, b in enumerate(budgets_w):
            ys = [r["time_over_best"] if r["met"] else np.nan for r in rows
                  if (r["method"], r["profiles"]) == m and r["budget_w"] == b]
            x = j + (k - (len(methods) - 1) / 2) * 0.2
            ax.scatter(np.full(len(ys), x), ys, label=f"{m[0]}, {m[1]} profiles" if j == 0 else None, color=f"C{k}",
                       alpha=0.7)
            missed = sum(np.isnan(ys))
            if missed:
                ax.annotate(f"{missed} failed", (x, 1.0), fontsize=7, ha="center", va="top", color=f"C{k}")
    ax.set_xticks(range(len(budgets_w)), [f"{b:g} W" for b in budgets_w])
    ax.set_ylabel("chosen true time / best within budget")
    ax.set_title(f"TuningJob path, {WORKLOAD} on the simulated {DEVICE}")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "controller_transfer.png", dpi=120)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=list(range(10)))
    ap.add_argument("--methods", nargs="+", default=["nn+gp", "ref+gp"])
    ap.add_argument("--profiles", type=int, nargs="+", default=[12, 50], help="the job's profiling budgets")
    ap.add_argument("--budgets", type=float, nargs="+", default=[25.0, 18.0])
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args(argv)
    grid = named_grid(get_spec(DEVICE), CANDIDATE_GRID).array()
    rows_t = truth_table(DEVICE, WORKLOAD, "train", grid, [BATCH])
    truth = {k: np.array([r[k] for r in rows_t]) for k in ("time_ms", "power_w")}
    rows = [r for n in args.profiles for m in args.methods for s in args.seeds
            for r in run(m, n, s, args.budgets, grid, truth)]
    args.out.mkdir(parents=True, exist_ok=True)
    write_table(rows, args.out / "controller_transfer.csv")
    report(rows, args.budgets, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
