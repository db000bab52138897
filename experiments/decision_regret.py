"""Decision regret of ``edgetune tune`` on recorded tables, against the exhaustive best within budget.

The harness is :mod:`edgetune.bench.regret` (its docstring says what is replayed and how each
choice is scored); ``make bench`` runs a small share of it as ``decision_regret``. This script runs
every table: the simulated Orin AGX workloads with profile noise (MobileNetV3, YOLOv8n, LSTM,
BERT-base; 4,368 modes each, the shipped ResNet18 reference transferred) and the real Perseus
frequency sweeps (BLOOM and GPT-3 175B stage 0, forward and backward, on the A40 and A100 SXM;
the other GPU's sweep as the reference), at ``--budgets`` power budgets spread over 20–80 % of
each table's power range. Per run: regret on the truth (noise-free / recorded) values, truth power
over the budget, profiles measured, and the random-profiles baseline with as many profiles.

Writes ``experiments/results/decision_regret[_TAG].{csv,md,png}``; with ``--tag after`` the markdown
also compares with ``decision_regret_before.csv`` when it is there. One run takes ~1 min per
simulated (table, budget) on 2 shared cores, a few seconds per Perseus one.

    python experiments/decision_regret.py [--budgets 4] [--seeds 0] [--tag before|after] [--quick]
"""

from __future__ import annotations

import argparse
import csv
import math
import os
import statistics
import sys
import time
import warnings

import numpy as np

from edgetune.bench import regret as R

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "data", "real")
RESULTS = os.path.join(HERE, "results")


def fractions(k: int) -> list[float]:
    return [0.5] if k == 1 else [round(float(f), 3) for f in np.linspace(0.2, 0.8, k)]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--budgets", type=int, default=3, help="budgets per table, spread over 20-80 %% of its power range")
    ap.add_argument("--seeds", type=int, nargs="*", default=[0])
    ap.add_argument("--sim", nargs="*", default=list(R.SIM_WORKLOADS), help="simulated workloads")
    ap.add_argument("--stages", nargs="*", default=["0/forward"], help="Perseus STAGE/INSTRUCTION (e.g. 0/backward)")
    ap.add_argument("--tag", default="", help="results file suffix (before / after)")
    ap.add_argument("--quick", action="store_true", help="YOLOv8n and one Perseus stage, 3 budgets")
    ap.add_argument("--report", action="store_true",
                    help="no runs: rewrite the markdown and plot of --tag from its CSV (and the before CSV)")
    args = ap.parse_args(argv)
    if args.report:
        return report(args)
    warnings.filterwarnings("ignore")
    import torch  # deferred: heavy; one thread keeps a shared machine's runs comparable

    torch.set_num_threads(1)
    if args.quick:
        args.sim, args.stages, args.budgets = ["yolov8n"], ["0/forward"], 3
    t0 = time.perf_counter()
    suffix = f"_{args.tag}" if args.tag else ""
    os.makedirs(RESULTS, exist_ok=True)
    base = os.path.join(RESULTS, f"decision_regret{suffix}")
    with open(base + ".csv", "w", newline="") as fh:  # row by row: a stopped run keeps what it measured
        w = csv.DictWriter(fh, R.COLUMNS)
        w.writeheader()

        def keep(o: R.Outcome) -> None:
            w.writerow(o.row())
            fh.flush()

        tables = R.recorded_tables(args.sim, DATA, R.PERSEUS_FILES, args.stages)
        outcomes = R.run(tables, fractions(args.budgets), args.seeds, log=lambda s: print(s, flush=True),
                         on_outcome=keep)
    runtime = time.perf_counter() - t0
    before = read_rows(os.path.join(RESULTS, "decision_regret_before.csv")) if args.tag == "after" else None
    write_markdown(base + ".md", outcomes, runtime, args, before)
    plot(base + ".png", outcomes, before)
    s = R.summary(outcomes)
    print(f"wrote {base}.{{csv,md,png}} in {runtime:.0f} s: worst {s['worst_regret_pct']:.1f} %, median "
          f"{s['median_regret_pct']:.2f} %, {s['over_budget']} over budget, {s['refused']} refused, "
          f"max {s['max_profiles']} profiles; random median {s['random_median_regret_pct']:.1f} %")
    return 0


def report(args) -> int:
    """The markdown and plot of an existing ``decision_regret[_TAG].csv``."""
    suffix = f"_{args.tag}" if args.tag else ""
    base = os.path.join(RESULTS, f"decision_regret{suffix}")
    rows = read_rows(base + ".csv") or []
    fields = [f for f in R.COLUMNS]
    outcomes = [R.Outcome(**{k: (int(r[k]) if k in ("modes", "seed", "refused", "profiles", "attempts",
                                                      "random_refused") else r[k]) for k in fields}) for r in rows]
    before = read_rows(os.path.join(RESULTS, "decision_regret_before.csv")) if args.tag == "after" else None
    write_markdown(base + ".md", outcomes, sum(o.seconds for o in outcomes), args, before)
    plot(base + ".png", outcomes, before)
    return 0


def read_rows(path: str) -> list[dict] | None:
    if not os.path.exists(path):
        return None
    with open(path, newline="") as fh:
        return [{k: _num(v) for k, v in r.items()} for r in csv.DictReader(fh)]


def _num(v: str):
    try:
        return float(v)
    except ValueError:
        return v


def _pct(v: float) -> str:
    return "∞" if v == math.inf else ("–" if not math.isfinite(v) else f"{v:.1f}")


def _table_rows(rows: list[dict]) -> list[str]:
    """Per table: worst / median regret, over budget, refused, profiles, random median."""
    out = []
    for name in dict.fromkeys(r["table"] for r in rows):
        mine = [r for r in rows if r["table"] == name]
        reg = [math.inf if r["refused"] else r["regret_pct"] for r in mine]
        rnd = [math.inf if r["random_refused"] else r["random_regret_pct"] for r in mine]
        over = sum(1 for r in mine if not r["refused"] and r["over_w"] > R.OVER_W)
        prof = [int(r["profiles"]) for r in mine]
        out.append(f"| {name} | {int(mine[0]['modes'])} | {len(mine)} | {_pct(max(reg))} | "
                   f"{_pct(statistics.median(reg))} | {over} | {sum(int(r['refused']) for r in mine)} | "
                   f"{min(prof)}–{max(prof)} | {_pct(statistics.median(rnd))} |")
    return out


def write_markdown(path: str, outcomes, runtime: float, args, before: list[dict] | None) -> None:
    rows = [o.row() for o in outcomes]
    s = R.summary(outcomes)
    load = os.getloadavg()[0]
    lines = [
        "# Decision regret of `edgetune tune` on recorded tables", "",
        "`python experiments/decision_regret.py" + (f" --tag {args.tag}" if args.tag else "") + "` "
        f"({len(rows)} runs, {runtime:.0f} s, load average {load:.1f} on a shared machine). The harness is "
        "`edgetune.bench.regret`: each table is replayed as a device and tuned as `edgetune tune` does "
        "(risk 0.2, one run per budget); the choice is scored on the truth (the simulator's noise-free values, "
        "the real sets' recorded values) against the exhaustive best within the budget. Budgets at "
        f"{', '.join(f'{100 * f:.0f}' for f in fractions(args.budgets))} % of each table's power range; seeds "
        f"{', '.join(map(str, args.seeds))}. `random`: as many random modes as `tune` measured, the fastest "
        "recorded within budget kept.", "",
        f"**All runs**: worst regret {_pct(s['worst_regret_pct'])} %, median {s['median_regret_pct']:.2f} %, "
        f"{s['over_budget']} over budget by > {R.OVER_W} W, {s['refused']} refused, profiles median "
        f"{s['median_profiles']:g} (max {s['max_profiles']}); random with as many profiles: median "
        f"{_pct(s['random_median_regret_pct'])} %, worst {_pct(s['random_worst_regret_pct'])} %, "
        f"{s['random_over_budget']} over budget (it trusts one noisy measurement). Targets (worst ≤ "
        f"{R.TARGET_WORST_PCT:g} %, median ≤ {R.TARGET_MEDIAN_PCT:g} %, 0 over, ≤ {R.TARGET_PROFILES} profiles): "
        f"{'met' if R.targets_met(s) else '**not met**'}.", "",
        "| table | modes | budgets | worst regret % | median regret % | over budget | refused | profiles | "
        "random median % |", "|---|---|---|---|---|---|---|---|---|", *_table_rows(rows), ""]
    if before:
        keys = {(r["table"], round(r["budget_w"], 2), int(r["seed"])) for r in rows}
        paired = [r for r in before if (r["table"], round(r["budget_w"], 2), int(r["seed"])) in keys]
        b_reg = [math.inf if r["refused"] else r["regret_pct"] for r in paired] or [math.nan]
        a_reg = [math.inf if r["refused"] else r["regret_pct"] for r in rows
                 if (r["table"], round(r["budget_w"], 2), int(r["seed"])) in
                 {(b["table"], round(b["budget_w"], 2), int(b["seed"])) for b in paired}] or [math.nan]
        lines += ["## Before / after", "",
                  f"The same runs before this change (`decision_regret_before.csv`, {len(paired)} of its "
                  f"{len(before)} runs paired here): worst {_pct(max(b_reg))} %, median "
                  f"{statistics.median(b_reg):.2f} %, "
                  f"{sum(1 for r in paired if not r['refused'] and r['over_w'] > R.OVER_W)} over budget, profiles "
                  f"{min(int(r['profiles']) for r in paired)}–{max(int(r['profiles']) for r in paired)}; after: worst "
                  f"{_pct(max(a_reg))} %, median {statistics.median(a_reg):.2f} %.", "",
                  "| table | budget W | regret before % | regret after % | profiles before | profiles after |",
                  "|---|---|---|---|---|---|"]
        old = {(r["table"], round(r["budget_w"], 2), int(r["seed"])): r for r in before}
        for r in rows:
            o = old.get((r["table"], round(r["budget_w"], 2), int(r["seed"])))
            if o is not None:
                lines.append(f"| {r['table']} | {r['budget_w']:.2f} | {_pct(o['regret_pct'])} | "
                             f"{_pct(r['regret_pct'])} | {int(o['profiles'])} | {r['profiles']} |")
        lines.append("")
    lines += ["## Every run", "", "| table | budget W | best ms | chosen ms (truth) | predicted ms | measured ms | "
              "regret % | over W | profiles | attempts | random regret % |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['table']} | {r['budget_w']:.2f} | {r['best_time_ms']:.1f} | {r['tune_time_ms']:.1f} | "
                     f"{r['tune_pred_time_ms']:.1f} | {r['tune_meas_time_ms']:.1f} | {_pct(r['regret_pct'])} | "
                     f"{r['over_w']:+.2f} | {r['profiles']} | {r['attempts']} | {_pct(r['random_regret_pct'])} |")
    with open(path, "w") as fh:
        fh.write("\n".join(lines) + "\n")


def plot(path: str, outcomes, before: list[dict] | None) -> None:
    import matplotlib  # deferred: heavy

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [o.row() for o in outcomes]
    fig, ax = plt.subplots(figsize=(9, 4.5))
    x = np.arange(len(rows))
    cap = 60.0

    def clip(v):
        return cap if not math.isfinite(v) else min(v, cap)

    ax.bar(x - 0.2, [clip(r["random_regret_pct"]) for r in rows], 0.4, label="random, as many profiles",
           color="#bbbbbb")
    ax.bar(x + 0.2, [clip(r["regret_pct"]) for r in rows], 0.4, label="tune", color="#1f77b4")
    if before:
        old = {(r["table"], round(r["budget_w"], 2)): r for r in before}
        ys = [clip(old[(r["table"], round(r["budget_w"], 2))]["regret_pct"])
              if (r["table"], round(r["budget_w"], 2)) in old else np.nan for r in rows]
        ax.plot(x + 0.2, ys, "rx", label="tune before")
    ax.axhline(R.TARGET_WORST_PCT, color="r", lw=0.8, ls="--", label=f"target worst {R.TARGET_WORST_PCT:g} %")
    ax.set_xticks(x, [f"{r['table'].split(':', 1)[1]} {r['budget_w']:.0f}W" for r in rows], rotation=90, fontsize=6)
    ax.set_ylabel(f"regret vs best within budget, % (clipped at {cap:g})")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


if __name__ == "__main__":
    sys.exit(main())
