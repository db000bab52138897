"""How many real points a simulator-built reference needs to beat a GP fitted from scratch.

A shipped reference is fitted on the simulator. On real measurements (``experiments/data/real/``,
loaded with ``real_data.py``'s loaders) this builds, per real target table, a reference of the
same *shape* with the simulated Orin AGX — ResNet18 training, the shipped references' workload —
and transfers it with ``ref+gp`` from n real points, against ``gp`` fitted from scratch on the same
n points:

* **perseus** (GPU frequency sweeps, BLOOM / GPT-3 pipeline stages on the A40 and A100): the
  simulated Orin's GPU clock swept over its 13 levels, the other knobs at their maximum, batch
  size 16; each level placed at the same normalised position in the real GPU's frequency range.
  Time: the minibatch time; power: the board's.
* **zeus** (power limit × batch size, six workloads on four GPUs): the power limit mapped onto the
  Orin's GPU clock the same way (the simulator has no power-limit knob: its clock is what a limit
  throttles), the batch size by its log2 position in the target's range onto 1 … 256 (the
  simulator's at 2^0 … 2^8). Time: the simulator's time per sample (real: time per epoch, a
  fixed number of samples); power: the board's.

The reference predictor is a GP fitted on those simulated rows in the real table's units (its
columns); ``ref+gp`` (``estimation.prior``) uses its predictions as a prior mean (with a fitted
scale and offset), as a GP input, or not at all, chosen by cross-validation on the n points.
For n ∈ {10, 15, 20, 30, 50} (where the table holds n + 5 rows; a GP from scratch refuses fewer than 10) and ``--draws`` random draws,
both are scored on the target's other rows: MAPE of time and power. Reports, per real set, the
mean MAPE of each over its targets and draws, the ratio, the share of (target, draw) cases where
ref+gp wins, and the smallest n at which ref+gp's mean MAPE is below the GP's (time and power
separately). Writes ``experiments/results/sim_reference_real.{csv,md,png}``.

    python experiments/sim_reference_real.py [--draws 3] [--per-set N] [--zeus-gpus a40,v100] [--quick]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import warnings
from collections import defaultdict

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from real_data import (  # noqa: E402
    RESULTS,
    TARGETS,
    ZEUS_GPUS,
    Measured,
    load_perseus,
    load_zeus,
    plot_ratios,
    splits,
)

from edgetune.devices.simulated.tables import truth_table  # noqa: E402
from edgetune.estimation.metrics import mape_pct  # noqa: E402
from edgetune.estimation.registry import adapt, make_predictor  # noqa: E402
from edgetune.estimation.validation import MIN_FIT_ROWS, ExtrapolationWarning  # noqa: E402
from edgetune.powermodes.specs import get_spec  # noqa: E402

#: n = 5 is left out: a GP from scratch refuses fewer than ``MIN_FIT_ROWS`` (10) rows.
SIZES = tuple(n for n in (5, 10, 15, 20, 30, 50) if n >= MIN_FIT_ROWS)
METHODS = ("gp", "ref+gp")
SIM_DEVICE, SIM_WORKLOAD, SIM_BATCH = "orin-agx", "resnet18", 16
#: The simulated batch sizes a Zeus table's batch-size range is mapped onto (log2 positions 0 … 8).
SIM_LOG2_BATCH = np.arange(0, 9)
PERSEUS_MODELS = ("bloom", "gpt3-175b")
PERSEUS_GPUS = ("a40", "a100_sxm")
PERSEUS_STAGES = ("0/forward", "0/backward")


def _position(v: np.ndarray, lo: float, hi: float) -> np.ndarray:
    return (np.asarray(v, float) - lo) / (hi - lo)


def _sim(gpu_mhz: np.ndarray, batch: int) -> tuple[np.ndarray, np.ndarray]:
    """Simulated (time_ms, power_w) of the reference workload at these GPU clocks, other knobs at max."""
    spec = get_spec(SIM_DEVICE)
    modes = np.array([[spec.max_cores, max(spec.cpu_mhz), g, max(spec.emc_mhz)] for g in gpu_mhz])
    rows = truth_table(spec, SIM_WORKLOAD, "train", modes, [batch])
    return np.array([r["time_ms"] for r in rows]), np.array([r["power_w"] for r in rows])


def sim_table(kind: str, target: Measured) -> Measured:
    """A simulated table of ``target``'s shape, its features in ``target``'s units (see the module docs)."""
    gpu = np.asarray(get_spec(SIM_DEVICE).gpu_mhz, float)
    u_gpu = _position(gpu, gpu.min(), gpu.max())
    knob = target.x[:, 0]  # frequency (perseus) or power limit (zeus)
    real_knob = knob.min() + u_gpu * (knob.max() - knob.min())
    if kind == "perseus":
        t, p = _sim(gpu, SIM_BATCH)
        return Measured(f"sim:{target.name}", target.columns, real_knob[:, None], t, p)
    lb = target.x[:, 1]  # log2 batch size
    xs, ts, ps = [], [], []
    for log2_b in SIM_LOG2_BATCH:
        b = int(2 ** log2_b)
        t, p = _sim(gpu, b)
        real_lb = lb.min() + _position(log2_b, SIM_LOG2_BATCH.min(), SIM_LOG2_BATCH.max()) * (lb.max() - lb.min())
        xs.append(np.column_stack([real_knob, np.full(len(gpu), real_lb)]))
        ts.append(t / b)  # time per sample: the real table's time per epoch is a fixed number of samples
        ps.append(p)
    return Measured(f"sim:{target.name}", target.columns, np.vstack(xs), np.concatenate(ts), np.concatenate(ps))


def targets(quick: bool, zeus_gpus: tuple[str, ...], per_set: int = 0) -> list[tuple[str, Measured]]:
    out: list[tuple[str, Measured]] = []
    for model in PERSEUS_MODELS:
        for gpu in PERSEUS_GPUS:
            tables = load_perseus(model, gpu)
            out += [("perseus", tables[s]) for s in PERSEUS_STAGES]
    for gpu in zeus_gpus:
        out += [("zeus", m) for _, m in sorted(load_zeus(gpu).items())]
    per_set = 1 if quick else per_set
    if per_set:  # that many per set, spread evenly over its list (GPUs, models, workloads)
        picked: list[tuple[str, Measured]] = []
        for kind in dict.fromkeys(k for k, _ in out):
            of_kind = [t for t in out if t[0] == kind]
            picked += [of_kind[int(i)] for i in np.unique(np.linspace(0, len(of_kind) - 1, per_set).round())]
        out = picked
    return out


def run(draws: int, quick: bool, zeus_gpus: tuple[str, ...], per_set: int = 0, log=print) -> list[dict]:
    rows: list[dict] = []
    for ti, (kind, tgt) in enumerate(targets(quick, zeus_gpus, per_set)):
        sim = sim_table(kind, tgt)
        refs = {t: make_predictor("gp", t).fit(sim.x, sim.y(t), columns=sim.columns) for t in TARGETS}
        for n, draw, idx, val in splits(len(tgt.x), SIZES, ti, draws):
            rec: dict = {"set": kind, "target": tgt.name, "rows": len(tgt.x), "n": n, "draw": draw}
            for method in METHODS:
                t0 = time.perf_counter()
                for target in TARGETS:
                    x, y = tgt.x[idx], tgt.y(target)[idx]
                    pred = (make_predictor("gp", target, seed=draw).fit(x, y, columns=tgt.columns)
                            if method == "gp" else adapt(refs[target], "ref+gp", x, y))
                    mu, _ = pred.predict(tgt.x[val], check_ranges=False)
                    short = target.split("_")[0]
                    rec[f"{method}_{short}_mape_pct"] = round(mape_pct(mu, tgt.y(target)[val]), 4)
                    if method == "ref+gp":
                        rec[f"{short}_choice"] = getattr(pred, "choice", "")
                rec[f"{method}_seconds"] = round(time.perf_counter() - t0, 2)
            rows.append(rec)
            log(f"{kind:8s} {tgt.name:48s} n={n:2d} d={draw} time gp {rec['gp_time_mape_pct']:6.2f}% "
                f"ref+gp {rec['ref+gp_time_mape_pct']:6.2f}% ({rec['time_choice']}) | power gp "
                f"{rec['gp_power_mape_pct']:6.2f}% ref+gp {rec['ref+gp_power_mape_pct']:6.2f}% ({rec['power_choice']})")
    return rows


def summarise(rows: list[dict]) -> list[dict]:
    """Per (set, n): mean MAPE of each method over targets and draws, the ratio, ref+gp's share of wins."""
    groups: dict[tuple[str, int], list[dict]] = defaultdict(list)
    for r in rows:
        groups[(r["set"], r["n"])].append(r)
    out = []
    for (kind, n), rs in sorted(groups.items()):
        rec: dict = {"set": kind, "n": n, "cases": len(rs), "targets": len({r["target"] for r in rs})}
        for short in ("time", "power"):
            gp = float(np.mean([r[f"gp_{short}_mape_pct"] for r in rs]))
            ref = float(np.mean([r[f"ref+gp_{short}_mape_pct"] for r in rs]))
            rec[f"gp_{short}_mape_pct"] = round(gp, 3)
            rec[f"ref+gp_{short}_mape_pct"] = round(ref, 3)
            rec[f"{short}_ratio"] = round(ref / gp, 3)
            rec[f"{short}_wins"] = round(float(np.mean([r[f"ref+gp_{short}_mape_pct"] < r[f"gp_{short}_mape_pct"]
                                                        for r in rs])), 3)
            choices = [r[f"{short}_choice"] for r in rs]
            rec[f"{short}_choices"] = " ".join(f"{c}:{choices.count(c)}" for c in sorted(set(choices)))
        out.append(rec)
    return out


def smallest_n(summary: list[dict], kind: str, short: str, stays: bool = False) -> int | None:
    """The smallest n at which ref+gp's mean MAPE is below the GP's (``stays``: and at every larger n
    measured); None: at no n."""
    ss = sorted((s for s in summary if s["set"] == kind), key=lambda s: s["n"])
    for i, s in enumerate(ss):
        if all(t[f"{short}_ratio"] < 1.0 for t in (ss[i:] if stays else ss[i:i + 1])):
            return int(s["n"])
    return None


def write_markdown(rows: list[dict], summary: list[dict], path: str) -> None:
    sets = sorted({s["set"] for s in summary})
    draws = len({r["draw"] for r in rows})
    fit_s = sum(r["gp_seconds"] + r["ref+gp_seconds"] for r in rows)
    lines = ["# A simulator-built reference on real measurements: ref+gp vs a GP from scratch", "",
             f"Generated by `experiments/sim_reference_real.py` ({draws} draws per target and size; the fits took "
             f"{fit_s:.0f} s). The reference is the simulated Orin AGX (ResNet18 training) in the shape of each "
             "real table (perseus: GPU clock sweep mapped onto the real frequency range; zeus: GPU clock mapped onto "
             "the power-limit range, batch size by log2 position). MAPE is the mean over the set's targets and draws, "
             "scored on each target's rows not profiled; *ratio* = ref+gp / gp; *wins* = share of (target, draw) "
             "cases where ref+gp's MAPE is below the GP's; *choices* = what ref+gp's cross-validation chose (scratch: "
             "no reference; prior: reference as prior mean; stacked: as GP input).", "",
             "Targets (rows): " + "; ".join(f"{kind}: " + ", ".join(
                 f"{t} ({next(r['rows'] for r in rows if r['target'] == t)})"
                 for t in dict.fromkeys(r["target"] for r in rows if r["set"] == kind)) for kind in sets) + ".",
             "", "## Smallest n at which ref+gp's mean MAPE is below the GP's", "",
             "| real set | time: first n below | time: below from n on | power: first n below | power: below from n on |",
             "|---|---|---|---|---|"]
    for kind in sets:
        cells = [smallest_n(summary, kind, short, stays) for short in ("time", "power") for stays in (False, True)]
        lines.append(f"| {kind} | " + " | ".join("never" if c is None else str(c) for c in cells) + " |")
    lines += ["", "## Per set and n", "",
              "| set | n | targets | time MAPE gp % | time ref+gp % | time ratio | time wins | power MAPE gp % | "
              "power ref+gp % | power ratio | power wins | choices time / power |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for s in summary:
        lines.append(f"| {s['set']} | {s['n']} | {s['targets']} | {s['gp_time_mape_pct']:.2f} | "
                     f"{s['ref+gp_time_mape_pct']:.2f} | {s['time_ratio']:.2f} | {s['time_wins']:.2f} | "
                     f"{s['gp_power_mape_pct']:.2f} | {s['ref+gp_power_mape_pct']:.2f} | {s['power_ratio']:.2f} | "
                     f"{s['power_wins']:.2f} | {s['time_choices']} / {s['power_choices']} |")
    with open(path, "w", encoding="utf-8") as fh:
        fh.write("\n".join(lines) + "\n")


def plot(summary: list[dict], path: str) -> None:
    panels = {}
    for kind in sorted({s["set"] for s in summary}):
        ss = [s for s in summary if s["set"] == kind]
        panels[f"{kind}: simulator reference, ref+gp"] = [
            (what, [s["n"] for s in ss], [s[f"{what}_ratio"] for s in ss]) for what in ("time", "power")]
    plot_ratios(panels, path, "real points profiled", width=4.5)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--draws", type=int, default=3, help="random draws of the profiled points per target and size")
    ap.add_argument("--zeus-gpus", default=",".join(ZEUS_GPUS), help="comma-separated Zeus GPUs (targets: every "
                    "workload on each)")
    ap.add_argument("--per-set", type=int, default=0, help="only this many targets per real set, spread over its "
                    "GPUs and workloads (default: all; 36 targets take about an hour on one core)")
    ap.add_argument("--quick", action="store_true", help="one target per set, one draw (smoke run)")
    ap.add_argument("--report", metavar="CSV", help="only rewrite the .md and .png from a run's CSV")
    ap.add_argument("--out", default=RESULTS)
    args = ap.parse_args(argv)
    warnings.simplefilter("ignore", ExtrapolationWarning)
    os.makedirs(args.out, exist_ok=True)
    if args.report:
        rows = read_rows(args.report)
    else:
        from edgetune.tables import write_table

        rows = run(1 if args.quick else args.draws, args.quick, tuple(g for g in args.zeus_gpus.split(",") if g),
                   args.per_set)
        write_table(rows, os.path.join(args.out, "sim_reference_real.csv"))
    summary = summarise(rows)
    write_markdown(rows, summary, os.path.join(args.out, "sim_reference_real.md"))
    plot(summary, os.path.join(args.out, "sim_reference_real.png"))
    for kind in sorted({s["set"] for s in summary}):
        print(f"{kind}: ref+gp below the GP first at n = {smallest_n(summary, kind, 'time')} (time), "
              f"{smallest_n(summary, kind, 'power')} (power); from n = {smallest_n(summary, kind, 'time', True)} "
              f"(time), {smallest_n(summary, kind, 'power', True)} (power) on")
    print(f"wrote {args.out}/sim_reference_real.csv, .md, .png")
    return 0


def read_rows(path: str) -> list[dict]:
    """A run's rows back from its CSV (numbers as numbers)."""
    import csv

    def cell(v: str) -> object:
        try:
            return int(v) if v.lstrip("-").isdigit() else float(v)
        except ValueError:
            return v

    with open(path, newline="", encoding="utf-8") as fh:
        return [{k: cell(v) for k, v in r.items()} for r in csv.DictReader(fh)]


if __name__ == "__main__":
    sys.exit(main())
