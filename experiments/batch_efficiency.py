"""Seed 000 on digits and a simulated Jetson Nano: batch efficiency r, then joint (b, f) selection.

Setup (REFERENCE.md, seed 000, scaled to a laptop):

* Models: ``resnet-slim`` (ResNet18's BasicBlocks, batch sizes 4…128, the paper's ResNet18)
  and ``mobilenetv3-slim`` (MobileNetV3's inverted residuals, 4…64, the paper's MobileNetV2)
  at 8×8 px, from one pre-trained checkpoint each (:mod:`edgetune.estimation.proxy`).
* Proxy data set ``digits`` (the paper's CIFAR-10) → r; target data set ``digits-noisy``
  (other digits with pixel noise; the paper's SVHN / CINIC) → the true passes, for the
  oracle ("fastest configuration") and to score every method. Adam, lr 5e-4·sqrt(b/128),
  s = 256 samples per pass, 3 seeds, one Ray task per (model, data set, batch size, seed).
  Ablations (README): ``--proxy digits-noisy-proxy`` (the proxy's own digits, disjoint from
  the target's, at the target's noise level with independent draws; held-out accuracy on 8
  draws of its 140 test digits) and ``--proxy-target matched`` (the proxy's target closes
  the same fraction of the pre-trained error as the device's target does on the device's
  held-out split, ``matched_target_accuracy``; where some run never gets there, the same
  runs are re-scored at the highest accuracy every run reached).
* Device: ``SimulatedJetson("nano")`` noise-free time and power of ResNet18 / MobileNetV3
  training per batch size and GPU frequency (12 steps, 76.8…921.6 MHz) at 4 cores, CPU
  1479 MHz, EMC 1600 MHz; ``time_s`` of one pass = ceil(s / b) × minibatch time.
* Caps 4.5 W, 7 W, none. Methods (``edgetune.optimization.joint``): ours (Algorithm 1 with
  the proxy's r), Baseline 1 (largest b at the paper's fixed GPU frequency per cap: 307.2,
  614.4, 921.6 MHz), Baseline 2 (argmin proxy r at that frequency), oracle (Algorithm 1
  with the target's true mean passes). Each choice is scored per seed with that seed's
  true passes on the target: mean ± std seconds, as the paper's Table 2.

Writes ``experiments/results/batch_efficiency.{csv,md,png}``, ``batch_efficiency_joint.csv``,
the contract's ``eff.csv`` per model (``batch_efficiency_eff_<model>.csv``) and every run's
accuracy curve (``batch_efficiency_curves.csv``). About 4-6
min on 2 free cores.

    python experiments/batch_efficiency.py [--seeds 3] [--address auto] [--sequential] [--out DIR]
        [--proxy digits|digits-noisy-proxy] [--proxy-target fixed|matched]
"""

from __future__ import annotations

import argparse
import csv
import math
import os
import sys
import time

import numpy as np

from edgetune.estimation import parallel
from edgetune.estimation.batch_efficiency import (
    SAMPLES_PER_PASS,
    estimate_batch_efficiency,
    initial_accuracy,
    matched_target_accuracy,
)
from edgetune.estimation.proxy import NOISY_PROXY
from edgetune.optimization.joint import (
    JointLUT,
    baseline_best_r,
    baseline_largest_batch,
    evaluate,
    joint_select,
    oracle_select,
)

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
MODELS = {  # proxy model -> (batch sizes, simulator workload profile for the Nano LUT, paper's model)
    "resnet-slim": ((4, 8, 16, 32, 64, 128), "resnet18", "ResNet18"),
    "mobilenetv3-slim": ((4, 8, 16, 32, 64), "mobilenetv3", "MobileNetV2"),
}
# the device's targets on digits-noisy, as the paper's Table 1 (MobileNet-slim plateaus lower)
TARGET = "digits-noisy"
TARGET_ACCURACY = {"resnet-slim": 0.94, "mobilenetv3-slim": 0.90}
# the proxy's fixed targets (--proxy-target fixed): MobileNet-slim plateaus near 93 % on digits within a
# few passes (b >= 16 never reach 94 % in 40 passes), so its target sits lower
PROXY_TARGET_FIXED = {("resnet-slim", "digits"): 0.95, ("mobilenetv3-slim", "digits"): 0.93}
PROXIES = ("digits", NOISY_PROXY)  # NOISY_PROXY: the proxy's own digits at the target's noise level
MAX_PASSES = 40
CAPS_W = (4.5, 7.0, None)
B1_GPU_MHZ = {4.5: 307.2, 7.0: 614.4, None: 921.6}  # seed 000's Baseline 1 frequencies
METHODS = ("Baseline 1", "Baseline 2", "Ours", "Oracle")


def nano_lut(workload: str, batch_sizes, samples_per_pass: int = SAMPLES_PER_PASS) -> JointLUT:
    """Time of one s-sample pass and power per (b, GPU MHz) on the noise-free simulated Nano."""
    from edgetune.devices.simulated import SimulatedJetson
    from edgetune.powermodes.mode import PowerMode

    dev = SimulatedJetson("nano", noise=False)
    spec = dev.spec
    rows = []
    for b in batch_sizes:
        for gpu in spec.gpu_mhz:
            mode = PowerMode(max(spec.core_counts), spec.cpu_mhz[-1], gpu, spec.emc_mhz[-1])
            t_ms = dev.true_time_ms(mode, workload, "train", b)
            rows.append((b, f"{gpu:g}", math.ceil(samples_per_pass / b) * t_ms / 1000.0,
                         dev.true_power_w(mode, workload, "train", b)))
    return JointLUT.from_rows(rows)


def at_gpu(lut: JointLUT, gpu_mhz: float) -> JointLUT:
    keep = lut.mode == f"{gpu_mhz:g}"
    return JointLUT(lut.batch_size[keep], lut.mode[keep], lut.time_s[keep], lut.power_w[keep])


def compare(lut: JointLUT, proxy_est, target_est) -> list[dict]:
    """Table 2 rows for one model: every method under every cap, scored on the target's seeds."""
    ours_eff, true_mean = proxy_est.efficiency(), target_est.efficiency()
    per_seed = [target_est.efficiency(seed=s) for s in target_est.seeds]
    rows = []
    for cap in CAPS_W:
        fixed = at_gpu(lut, B1_GPU_MHZ[cap])
        choices = {
            "Baseline 1": (fixed, baseline_largest_batch(fixed, true_mean, cap)),
            "Baseline 2": (fixed, baseline_best_r(fixed, ours_eff, cap, true_mean)),
            "Ours": (lut, joint_select(lut, ours_eff, cap)),
            "Oracle": (lut, oracle_select(lut, true_mean, cap)),
            "B1, highest f under cap": (lut, baseline_largest_batch(lut, true_mean, cap)),
        }
        for method, (table, choice) in choices.items():
            tt = np.array([evaluate(table, choice, eff) for eff in per_seed])
            rows.append({"model": proxy_est.workload, "cap_w": "none" if cap is None else cap, "method": method,
                         "batch_size": choice.batch_size, "gpu_mhz": choice.mode, "power_w": choice.power_w,
                         "tt_mean_s": float(np.mean(tt)),
                         "tt_std_s": float(np.std(tt)) if np.isfinite(tt).all() else math.nan})
    return rows


def write_csv(path: str, rows: list[dict]) -> None:
    with open(path, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)


def plot(path: str, estimates: dict) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_n, ax_r) = plt.subplots(1, 2, figsize=(11, 4))
    for (model, data), est in estimates.items():
        b = np.array(est.batch_sizes)
        mean, std, r = est.passes_mean(), est.passes_std(), est.ratio()
        style = "-o" if data != TARGET else "--s"
        label = f"{model} on {data} (target {est.target_accuracy:.0%})"
        ax_n.errorbar(b, [mean[x] for x in b], yerr=[std[x] for x in b], fmt=style, capsize=3, label=label)
        ax_r.plot(b, [r[x] for x in b], style, label=label)
    for ax in (ax_n, ax_r):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("batch size b")
        ax.grid(alpha=0.3)
    ax_n.set_ylabel(f"passes of s = {SAMPLES_PER_PASS} samples to target (mean ± std)")
    ax_r.set_ylabel("r_b = N(b) / max_b N(b)")
    ax_r.set_ylim(0, 1.05)
    ax_n.legend(fontsize=7)
    fig.suptitle("Seed 000 batch efficiency: Adam, lr 5e-4·sqrt(b/128), pre-trained checkpoint, 3 seeds")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def markdown(estimates: dict, joint_rows: list[dict], timing: dict) -> str:
    lines = ["# Seed 000: batch efficiency r and joint batch size + GPU frequency selection", "",
             f"s = {SAMPLES_PER_PASS} samples per pass; passes to target, mean ± std over seeds "
             "(inf: some seed never got there within "
             f"{MAX_PASSES} passes); r = N(b) / max N(b).", "",
             "| model | data set | target | pre-trained acc | " + " | ".join(
                 f"b={b}" for b in MODELS["resnet-slim"][0]) + " |",
             "|---|---|---|---|" + "---|" * len(MODELS["resnet-slim"][0])]
    for (model, data), est in estimates.items():
        mean, std, r = est.passes_mean(), est.passes_std(), est.ratio()
        cells = [f"{mean[b]:.1f} ± {std[b]:.1f} (r {r[b]:.2f})" if b in mean and math.isfinite(mean[b])
                 else ("inf" if b in mean else "–") for b in MODELS["resnet-slim"][0]]
        lines.append(f"| {model} | {data} | {est.target_accuracy:.1%} | {est.initial_accuracy:.1%} | "
                     + " | ".join(cells) + " |")
    lines += ["", "Time to target on the simulated Nano (s, mean ± std over the target's seeds); "
              "choice as b @ GPU MHz.", "",
              "| model | cap | " + " | ".join(METHODS) + " | ours vs oracle | B1 at highest f under cap |",
              "|---|---|" + "---|" * (len(METHODS) + 2)]
    by = {(r["model"], r["cap_w"], r["method"]): r for r in joint_rows}
    for model in MODELS:
        for cap in CAPS_W:
            c = "none" if cap is None else cap

            def cell(method, model=model, c=c):
                r = by[(model, c, method)]
                return f"{r['tt_mean_s']:.0f} ± {r['tt_std_s']:.0f} ({r['batch_size']}@{r['gpu_mhz']})"

            gap = by[(model, c, "Ours")]["tt_mean_s"] / by[(model, c, "Oracle")]["tt_mean_s"] - 1
            lines.append(f"| {model} | {c} W | " + " | ".join(cell(m) for m in METHODS)
                         + f" | {gap:+.1%} | {cell('B1, highest f under cap')} |")
    lines += ["", f"Wall time: {timing['total_s']:.0f} s in all ({timing['training_s']:.0f} s training, "
              f"{timing['ray_start_s']:.1f} s Ray start-up, {timing['tasks']} Ray tasks).", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--address", default=None, help="Ray cluster (default: $EDGETUNE_RAY_ADDRESS or local)")
    ap.add_argument("--sequential", action="store_true", help="no Ray: every training in this process")
    ap.add_argument("--out", default=RESULTS)
    ap.add_argument("--proxy", choices=PROXIES, default="digits",
                    help=f"proxy data set (default digits; {NOISY_PROXY}: the target's noise level, 8-draw held-out)")
    ap.add_argument("--proxy-target", choices=("fixed", "matched"), default="fixed",
                    help="proxy target: fixed per model (default) or matched_target_accuracy, re-targeted to the "
                         "highest accuracy every run reached when some run never gets there")
    args = ap.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    t0 = time.perf_counter()
    if not args.sequential:
        parallel.ensure_ray(args.address)
    t_ray = time.perf_counter() - t0
    seeds = tuple(range(args.seeds))
    estimates = {}
    n_tasks = 0
    proxy = args.proxy
    for model, (batch_sizes, _, _) in MODELS.items():
        if args.proxy_target == "matched":
            proxy_goal = matched_target_accuracy(initial_accuracy(model, proxy), initial_accuracy(model, TARGET),
                                                 TARGET_ACCURACY[model])
        else:
            proxy_goal = PROXY_TARGET_FIXED.get((model, proxy), TARGET_ACCURACY[model])
        goal = {TARGET: TARGET_ACCURACY[model], proxy: proxy_goal}
        for data in (proxy, TARGET):
            est = estimate_batch_efficiency(model, batch_sizes, goal[data], seeds, proxy=data,
                                            max_passes=MAX_PASSES, parallel=not args.sequential,
                                            address=args.address)
            if data == proxy and args.proxy_target == "matched" and not np.isfinite(est.passes).all():
                # the matched target lies above the proxy's plateau for some runs: score the same runs
                # at the highest accuracy every run reached, so that every b has an r (no retraining)
                print(f"{model} on {data}: {est.target_accuracy:.2%} not reached by every run; "
                      f"re-targeted to {est.reachable_accuracy():.2%}", flush=True)
                est = est.retargeted(est.reachable_accuracy())
            estimates[(model, data)] = est
            n_tasks += len(est.runs)
            print(f"{model} on {data}: passes {est.passes_mean()}  r {est.ratio()}  ({est.wall_s:.0f} s)",
                  flush=True)
    t_train = time.perf_counter() - t0 - t_ray

    joint_rows = []
    for model, (batch_sizes, sim_workload, _) in MODELS.items():
        lut = nano_lut(sim_workload, batch_sizes)
        joint_rows += compare(lut, estimates[(model, args.proxy)], estimates[(model, TARGET)])
        estimates[(model, args.proxy)].to_csv(os.path.join(args.out, f"batch_efficiency_eff_{model}.csv"))
    write_csv(os.path.join(args.out, "batch_efficiency.csv"), [row for est in estimates.values() for row in est.rows()])
    write_csv(os.path.join(args.out, "batch_efficiency_joint.csv"), joint_rows)
    write_csv(os.path.join(args.out, "batch_efficiency_curves.csv"),  # for re-targeting without re-training
              [{"model": model, "data_set": data, "batch_size": run.batch_size, "seed": run.seed,
                "target": est.target_accuracy, "accuracy_by_pass": " ".join(f"{a:.4f}" for a in run.accuracy_by_pass)}
               for (model, data), est in estimates.items() for run in est.runs])
    plot(os.path.join(args.out, "batch_efficiency.png"), estimates)
    timing = {"total_s": time.perf_counter() - t0, "training_s": t_train, "ray_start_s": t_ray, "tasks": n_tasks}
    md = markdown(estimates, joint_rows, timing)
    with open(os.path.join(args.out, "batch_efficiency.md"), "w") as fh:
        fh.write(md)
    print(md)
    parallel.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
