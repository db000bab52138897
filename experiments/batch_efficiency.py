"""Seed 000 on digits and a simulated Jetson Nano: batch efficiency r, then joint (b, f) selection.

Setup (REFERENCE.md, seed 000, scaled to a laptop):

* Models: ``resnet-slim`` (ResNet18's BasicBlocks, batch sizes 4…128, the paper's ResNet18)
  and ``mobilenetv3-slim`` (MobileNetV3's inverted residuals, 4…64, the paper's MobileNetV2)
  at 8×8 px, from one pre-trained checkpoint each (:mod:`edgetune.estimation.proxy`).
* Proxy data set ``digits-noisy-proxy`` (default; the paper's CIFAR-10): the proxy's own
  digits at the target's pixel-noise level, held-out accuracy on 8 noise draws of its 140
  test digits → r; target data set ``digits-noisy`` (other digits with pixel noise; the
  paper's SVHN / CINIC) → the true passes, for the oracle ("fastest configuration") and to
  score every method, its 140 held-out digits scored under ``--target-eval-draws`` (8) noise
  draws (its own draw first), so that "target reached" measures training progress rather
  than one draw's test noise. Adam, lr 5e-4·sqrt(b/128),
  5 seeds (the paper's), one Ray task per (model, data set, batch size, seed).
* Measurement: s = the model's largest batch size (the paper's lower bound b_max ≤ s: 128 /
  64), held-out accuracy after every s samples: twice / four times the resolution of the
  earlier s = 256 (the target's passes are now 8–76, not 4–38), the same look schedule in
  samples for every b. The proxy runs get the whole budget
  (``PROXY_SAMPLES``) and are scored at ``--proxy-target plateau`` (default): the
  checkpoint's proxy accuracy plus ``--plateau-fraction`` (0.8) of the way to the lowest
  best accuracy of any proxy run (``BatchEfficiencyEstimate.plateau_target``), so every b
  reaches it; the target runs stop at the device's target (budget ``TARGET_SAMPLES``).
  Ours uses the proxy's raw mean passes (``--fit none``, default); the choice with them
  smoothed by McCandlish et al.'s E(b) = E_min (1 + b / B_noise) (``--fit noise-scale``,
  ``fit_noise_scale``) is reported beside it. The oracle and every score use the target's
  raw true passes.
  Ablations (README): ``--proxy digits`` (noise-free, 140 held-out images; the earlier
  default: its checkpoint sits a few images below its plateau) and ``--proxy-target matched`` (the proxy's target closes
  the same fraction of the pre-trained error as the device's target does on the device's
  held-out split, ``matched_target_accuracy``; where some run never gets there, the same
  runs are re-scored at the highest accuracy every run reached), ``--proxy-target fixed``
  (95 % / 93 %, the earlier default).
* Device: ``SimulatedJetson("nano")`` noise-free time and power of ResNet18 / MobileNetV3
  training per batch size and GPU frequency (12 steps, 76.8…921.6 MHz) at 4 cores, CPU
  1479 MHz, EMC 1600 MHz; ``time_s`` of one pass = ceil(s / b) × minibatch time (s is a
  multiple of every b, so time to target does not depend on the choice of s).
* Caps 4.5 W, 7 W, none. Methods (``edgetune.optimization.joint``): ours (Algorithm 1 with
  the proxy's r), Baseline 1 (largest b at the paper's fixed GPU frequency per cap: 307.2,
  614.4, 921.6 MHz), Baseline 2 (argmin proxy r at that frequency), oracle (Algorithm 1
  with the target's true mean passes). Each choice is scored per seed with that seed's
  true passes on the target: mean ± std seconds, as the paper's Table 2.

Writes ``experiments/results/batch_efficiency.{csv,md,png}``, ``batch_efficiency_joint.csv``,
the contract's ``eff.csv`` per model (``batch_efficiency_eff_<model>.csv``) and every run's
accuracy curve (``batch_efficiency_curves.csv``; the proxy's over the whole budget).

    python experiments/batch_efficiency.py [--seeds 5] [--address auto] [--sequential] [--out DIR]
        [--proxy digits-noisy-proxy|digits] [--target-eval-draws 8] [--proxy-target plateau|fixed|matched]
        [--plateau-fraction 0.8] [--fit none|noise-scale]
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
    FITS,
    estimate_batch_efficiency,
    fit_noise_scale,
    initial_accuracy,
    matched_target_accuracy,
)
from edgetune.estimation.proxy import EVAL_DRAWS, NOISY_PROXY, load_proxy_data
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
# the proxy with headroom (its checkpoint far below its plateau, measured on 1,120 images) is the
# default; clean digits leave MobileNet 4 images of 140 above the checkpoint (see README)
DEFAULT_PROXY = NOISY_PROXY
# the target's held-out digits are scored under this many pixel-noise draws (its own first): the
# oracle's and every score's "target reached" then measures training, not one draw's test noise
TARGET_EVAL_DRAWS = EVAL_DRAWS
PROXY_TARGETS = ("plateau", "fixed", "matched")
PLATEAU_FRACTION = 0.8
# budgets in samples (the earlier 40 passes of 256); passes of s = b_max: 80 (ResNet) / 160 (MobileNet).
# The target's budget is larger so that the oracle's true passes are never censored (ResNet b=128
# needed up to 40 passes of 256 for 94 %); its runs stop at the target, so it costs little.
PROXY_SAMPLES = 10240
TARGET_SAMPLES = 20480
CAPS_W = (4.5, 7.0, None)
B1_GPU_MHZ = {4.5: 307.2, 7.0: 614.4, None: 921.6}  # seed 000's Baseline 1 frequencies
METHODS = ("Baseline 1", "Baseline 2", "Ours", "Oracle")


def samples_per_pass(batch_sizes) -> int:
    """s = the largest batch size (the paper's b_max <= s): the finest pass every b completes whole."""
    return max(batch_sizes)


def nano_lut(workload: str, batch_sizes, samples_per_pass: int) -> JointLUT:
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


def compare(lut: JointLUT, proxy_est, target_est, fit: str = "none") -> list[dict]:
    """Table 2 rows for one model: every method under every cap, scored on the target's seeds.

    Ours uses the proxy's passes with ``fit``; the other fit is reported as "Ours, raw r" or
    "Ours, fitted r". Baseline 2 is the paper's argmin of the proxy's raw passes; the oracle and
    every score use the target's raw true passes.
    """
    raw_eff, true_mean = proxy_est.efficiency(), target_est.efficiency()
    ours_eff = proxy_est.efficiency(fit=fit)
    other_fit = "none" if fit != "none" else "noise-scale"
    other_name = "Ours, raw r" if other_fit == "none" else "Ours, fitted r"
    per_seed = [target_est.efficiency(seed=s) for s in target_est.seeds]
    rows = []
    for cap in CAPS_W:
        fixed = at_gpu(lut, B1_GPU_MHZ[cap])
        choices = {
            "Baseline 1": (fixed, baseline_largest_batch(fixed, true_mean, cap)),
            "Baseline 2": (fixed, baseline_best_r(fixed, raw_eff, cap, true_mean)),
            "Ours": (lut, joint_select(lut, ours_eff, cap)),
            "Oracle": (lut, oracle_select(lut, true_mean, cap)),
            other_name: (lut, joint_select(lut, proxy_est.efficiency(fit=other_fit), cap)),
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


def plot(path: str, estimates: dict, fit: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_n, ax_r) = plt.subplots(1, 2, figsize=(12, 4.5))
    for (model, data), est in estimates.items():
        b = np.array(est.batch_sizes)
        mean, std, r = est.passes_mean(), est.passes_std(), est.ratio()
        s = est.samples_per_pass
        style = "-o" if data != TARGET else "--s"
        label = f"{model} on {data} (target {est.target_accuracy:.1%})"
        line = ax_n.errorbar(b, [mean[x] * s for x in b], yerr=[std[x] * s for x in b], fmt=style, capsize=3,
                             label=label)
        ax_r.plot(b, [r[x] for x in b], style, color=line[0].get_color(), label=label)
        if data != TARGET:
            fitted = est.fitted_passes()
            top = max(v for v in fitted.values() if math.isfinite(v))
            ax_n.plot(b, [fitted[x] * s for x in b], ":", color=line[0].get_color())
            ax_r.plot(b, [fitted[x] / top for x in b], ":", color=line[0].get_color(),
                      label=f"{model} on {data}, fitted E(b)")
    for ax in (ax_n, ax_r):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("batch size b")
        ax.grid(alpha=0.3)
    ax_n.set_ylabel("samples to target = N(b)·s (mean ± std over seeds)")
    ax_r.set_ylabel("r_b = N(b) / max_b N(b)")
    ax_r.set_ylim(0, 1.05)
    ax_n.legend(fontsize=7)
    ax_r.legend(fontsize=6)
    seeds = len(next(iter(estimates.values())).seeds)
    fig.suptitle(f"Seed 000 batch efficiency: Adam, lr 5e-4·sqrt(b/128), pre-trained checkpoint, {seeds} seeds "
                 "(dotted: proxy fit E(b) = E_min(1 + b/B_noise))", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def fit_chi2_per_dof(est) -> float:
    """Oracle-free adequacy check of ``fit_noise_scale`` on the proxy: chi-square per degree of freedom.

    Residuals of the fitted E(b) against the mean passes, in units of the mean's standard error
    over seeds (sample variance plus the 1/12 pass² of counting whole passes); about 1 when the
    model describes the proxy's N(b) within its noise, much more when its shape is wrong.
    """
    fitted, mean = est.fitted_passes(), est.passes_mean()
    n = len(est.seeds)
    chi2, k = 0.0, 0
    for b, row in zip(est.batch_sizes, est.passes, strict=True):
        if math.isfinite(mean[b]):
            var = (float(np.var(row, ddof=1)) if n > 1 else 0.0) + 1.0 / 12.0
            chi2 += (mean[b] - fitted[b]) ** 2 / (var / n)
            k += 1
    return chi2 / (k - 2) if k > 2 else math.nan


def verdict(joint_rows: list[dict], method: str = "Ours") -> tuple[int, int, int]:
    """(rows within 10 % of the oracle, rows with ours <= B2 <= B1 in mean time, rows)."""
    by = {(r["model"], r["cap_w"], r["method"]): r["tt_mean_s"] for r in joint_rows}
    keys = sorted({(m, c) for m, c, _ in by}, key=str)
    within = sum(by[(m, c, method)] <= 1.10 * by[(m, c, "Oracle")] for m, c in keys)
    ordered = sum(by[(m, c, method)] <= by[(m, c, "Baseline 2")] <= by[(m, c, "Baseline 1")] for m, c in keys)
    return within, ordered, len(keys)


def markdown(estimates: dict, joint_rows: list[dict], timing: dict, settings: dict) -> str:
    all_b = MODELS["resnet-slim"][0]
    fit = settings["fit"]
    other = "Ours, raw r" if fit != "none" else "Ours, fitted r"
    seeds = len(next(iter(estimates.values())).seeds)
    lines = ["# Seed 000: batch efficiency r and joint batch size + GPU frequency selection", "",
             f"`python experiments/batch_efficiency.py {settings['argv']}`".replace(" `", "`"), "",
             f"{seeds} seeds. s = the model's largest batch size (samples per pass; held-out accuracy after every "
             f"pass). Passes to target, mean ± std over seeds (inf: some seed never got there within the budget: "
             f"proxy {PROXY_SAMPLES} samples, target {TARGET_SAMPLES}); r = N(b) / max N(b). Proxy target: "
             f"{settings['proxy_target_text']}. Ours: {settings['fit_text']}.", "", settings["data_text"] + ".", "",
             "| model | data set | s | target | pre-trained acc | " + " | ".join(f"b={b}" for b in all_b) + " |",
             "|---|---|---|---|---|" + "---|" * len(all_b)]
    for (model, data), est in estimates.items():
        mean, std, r = est.passes_mean(), est.passes_std(), est.ratio()
        cells = [f"{mean[b]:.1f} ± {std[b]:.1f} (r {r[b]:.2f})" if b in mean and math.isfinite(mean[b])
                 else ("inf" if b in mean else "–") for b in all_b]
        lines.append(f"| {model} | {data} | {est.samples_per_pass} | {est.target_accuracy:.1%} | "
                     f"{est.initial_accuracy:.1%} | " + " | ".join(cells) + " |")
        if data != TARGET:
            fp = est.fitted_passes()
            top = max(v for v in fp.values() if math.isfinite(v))
            f = fit_noise_scale(est.passes_mean())
            cells = [f"{fp[b]:.1f} (r {fp[b] / top:.2f})" if b in fp and math.isfinite(fp[b])
                     else ("inf" if b in fp else "–") for b in all_b]
            lines.append(f"| {model} | {data}, fit: N_min {f.n_min:.1f}, B_noise {f.b_noise:.0f}, "
                         f"χ²/dof {fit_chi2_per_dof(est):.1f} | | | | "
                         + " | ".join(cells) + " |")
    lines += ["", "Time to target on the simulated Nano (s, mean ± std over the target's seeds); "
              "choice as b @ GPU MHz.", "",
              "| model | cap | " + " | ".join(METHODS) + f" | ours vs oracle | {other} (vs oracle) "
              "| B1 at highest f under cap |",
              "|---|---|" + "---|" * (len(METHODS) + 3)]
    by = {(r["model"], r["cap_w"], r["method"]): r for r in joint_rows}
    for model in MODELS:
        for cap in CAPS_W:
            c = "none" if cap is None else cap

            def cell(method, model=model, c=c):
                r = by[(model, c, method)]
                return f"{r['tt_mean_s']:.0f} ± {r['tt_std_s']:.0f} ({r['batch_size']}@{r['gpu_mhz']})"

            oracle = by[(model, c, "Oracle")]["tt_mean_s"]
            gap = by[(model, c, "Ours")]["tt_mean_s"] / oracle - 1
            gap_other = by[(model, c, other)]["tt_mean_s"] / oracle - 1
            lines.append(f"| {model} | {c} W | " + " | ".join(cell(m) for m in METHODS)
                         + f" | {gap:+.1%} | {cell(other)} ({gap_other:+.1%}) | {cell('B1, highest f under cap')} |")
    within, ordered, n = verdict(joint_rows)
    within_o, ordered_o, _ = verdict(joint_rows, other)
    lines += ["", f"**Verdict: ours is within 10 % of the oracle in {within} of {n} rows; ours ≤ Baseline 2 ≤ "
              f"Baseline 1 (mean time) holds in {ordered} of {n} rows.** "
              f"({other}: within 10 % in {within_o} of {n}, ordering in {ordered_o} of {n}.)", "",
              f"Wall time: {timing['total_s']:.0f} s in all ({timing['training_s']:.0f} s training, "
              f"{timing['ray_start_s']:.1f} s Ray start-up, {timing['tasks']} Ray tasks).", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--address", default=None, help="Ray cluster (default: $EDGETUNE_RAY_ADDRESS or local)")
    ap.add_argument("--sequential", action="store_true", help="no Ray: every training in this process")
    ap.add_argument("--out", default=RESULTS)
    ap.add_argument("--models", nargs="+", choices=list(MODELS), default=list(MODELS),
                    help="subset of models (for quick checks; the report needs both)")
    ap.add_argument("--proxy", choices=PROXIES, default=DEFAULT_PROXY,
                    help=f"proxy data set (default {DEFAULT_PROXY}: the proxy's digits at the target's noise level, "
                         f"{EVAL_DRAWS}-draw held-out; digits: noise-free, 140 held-out images)")
    ap.add_argument("--target-eval-draws", type=int, default=TARGET_EVAL_DRAWS,
                    help=f"pixel-noise draws of the target's 140 held-out digits (default {TARGET_EVAL_DRAWS}; "
                         "1: its own draw only, the earlier measurement)")
    ap.add_argument("--proxy-target", choices=PROXY_TARGETS, default="plateau",
                    help="proxy target: plateau (default: every proxy run trains the whole budget, target = "
                         "checkpoint + fraction of the way to the lowest run's best accuracy), fixed per model, "
                         "or matched_target_accuracy (re-targeted to the highest accuracy every run reached "
                         "when some run never gets there)")
    ap.add_argument("--plateau-fraction", type=float, default=PLATEAU_FRACTION)
    ap.add_argument("--fit", choices=FITS, default="none",
                    help="ours' proxy passes: raw means (default) or smoothed by E(b) = E_min (1 + b / B_noise)")
    args = ap.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    t0 = time.perf_counter()
    if not args.sequential:
        parallel.ensure_ray(args.address)
    t_ray = time.perf_counter() - t0
    seeds = tuple(range(args.seeds))
    models = {m: MODELS[m] for m in args.models}
    estimates, curves, headroom = {}, {}, {}
    n_tasks = 0
    proxy = args.proxy
    common = dict(seeds=seeds, parallel=not args.sequential, address=args.address)
    for model, (batch_sizes, _, _) in models.items():
        s = samples_per_pass(batch_sizes)
        if args.proxy_target == "plateau":
            full = estimate_batch_efficiency(model, batch_sizes, 1.0, proxy=proxy, samples_per_pass=s,
                                             max_passes=PROXY_SAMPLES // s, **common)
            goal = full.plateau_target(args.plateau_fraction)
            n_test = len(load_proxy_data(proxy).y_test)
            headroom[model] = (full.reachable_accuracy() - full.initial_accuracy, n_test)
            print(f"{model} on {proxy}: lowest best accuracy of a run {full.reachable_accuracy():.2%}, checkpoint "
                  f"{full.initial_accuracy:.2%} -> plateau target {goal:.2%}", flush=True)
            est = full.retargeted(goal)
        else:
            if args.proxy_target == "matched":
                goal = matched_target_accuracy(
                    initial_accuracy(model, proxy),
                    initial_accuracy(model, TARGET, eval_draws=args.target_eval_draws), TARGET_ACCURACY[model])
            else:
                goal = PROXY_TARGET_FIXED.get((model, proxy), TARGET_ACCURACY[model])
            full = est = estimate_batch_efficiency(model, batch_sizes, goal, proxy=proxy, samples_per_pass=s,
                                                   max_passes=PROXY_SAMPLES // s, **common)
            if args.proxy_target == "matched" and not np.isfinite(est.passes).all():
                # the matched target lies above the proxy's plateau for some runs: score the same runs
                # at the highest accuracy every run reached, so that every b has an r (no retraining)
                print(f"{model} on {proxy}: {est.target_accuracy:.2%} not reached by every run; "
                      f"re-targeted to {est.reachable_accuracy():.2%}", flush=True)
                est = est.retargeted(est.reachable_accuracy())
        tgt = estimate_batch_efficiency(model, batch_sizes, TARGET_ACCURACY[model], proxy=TARGET, samples_per_pass=s,
                                        max_passes=TARGET_SAMPLES // s, eval_draws=args.target_eval_draws, **common)
        for data, e, raw in ((proxy, est, full), (TARGET, tgt, tgt)):
            estimates[(model, data)], curves[(model, data)] = e, raw
            n_tasks += len(e.runs)
            print(f"{model} on {data}: passes {e.passes_mean()}  r {e.ratio()}  ({raw.wall_s:.0f} s)", flush=True)
    t_train = time.perf_counter() - t0 - t_ray

    joint_rows = []
    for model, (batch_sizes, sim_workload, _) in models.items():
        lut = nano_lut(sim_workload, batch_sizes, samples_per_pass(batch_sizes))
        joint_rows += compare(lut, estimates[(model, proxy)], estimates[(model, TARGET)], args.fit)
        estimates[(model, proxy)].to_csv(os.path.join(args.out, f"batch_efficiency_eff_{model}.csv"))
    write_csv(os.path.join(args.out, "batch_efficiency.csv"), [row for est in estimates.values() for row in est.rows()])
    write_csv(os.path.join(args.out, "batch_efficiency_joint.csv"), joint_rows)
    write_csv(os.path.join(args.out, "batch_efficiency_curves.csv"),  # for re-targeting without re-training
              [{"model": model, "data_set": data, "batch_size": run.batch_size, "seed": run.seed,
                "samples_per_pass": est.samples_per_pass, "trained_to": est.target_accuracy,
                "accuracy_by_pass": " ".join(f"{a:.4f}" for a in run.accuracy_by_pass)}
               for (model, data), est in curves.items() for run in est.runs])
    plot(os.path.join(args.out, "batch_efficiency.png"), estimates, args.fit)
    timing = {"total_s": time.perf_counter() - t0, "training_s": t_train, "ray_start_s": t_ray, "tasks": n_tasks}
    targets = ", ".join(f"{m} {estimates[(m, proxy)].target_accuracy:.1%}" for m in models)
    proxy_target_text = {
        "plateau": f"plateau rule, checkpoint + {args.plateau_fraction:g} × (lowest best accuracy of any proxy run "
                   f"within the budget − checkpoint): {targets}",
        "fixed": f"fixed: {targets}",
        "matched": f"matched_target_accuracy (re-targeted where not reached): {targets}"}[args.proxy_target]
    fit_text = ("proxy passes smoothed by E(b) = E_min (1 + b / B_noise) (`fit_noise_scale`, McCandlish et al. "
                "2018), the raw-r choice beside it" if args.fit != "none" else
                "raw mean proxy passes, the fitted-r choice beside it")
    room = "; ".join(f"{m} {h:.1%} = {h * n:.0f} of {n} images" for m, (h, n) in headroom.items())
    data_text = (f"Proxy {proxy} ({len(load_proxy_data(proxy).y_test)} held-out images"
                 + (f"; headroom = lowest best accuracy of a run − checkpoint: {room}" if room else "")
                 + f"); target {TARGET}, its 140 held-out digits under {args.target_eval_draws} noise draw(s) "
                 f"({len(load_proxy_data(TARGET, eval_draws=args.target_eval_draws).y_test)} images)")
    settings = {"fit": args.fit, "proxy_target_text": proxy_target_text, "fit_text": fit_text, "data_text": data_text,
                "argv": " ".join(argv if argv is not None else sys.argv[1:])}
    md = markdown(estimates, joint_rows, timing, settings) if len(models) == len(MODELS) else ""
    if md:
        with open(os.path.join(args.out, "batch_efficiency.md"), "w") as fh:
            fh.write(md)
    print(md or "\n".join(str(r) for r in joint_rows if r["method"] in (*METHODS, "Ours, raw r",
                                                                          "Ours, fitted r")))
    parallel.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
