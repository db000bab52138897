"""THOR (THOR) on the simulator: energy MAPE of THOR vs FLOPs + linear regression.

Setup (docs/papers.md, THOR):

* Xavier AGX at MAXN, training, batch 16; ground truth = the simulator's layer costing
  (``edgetune.physics.costing``), energy above idle per iteration, observed with 2 %
  noise (a 500-iteration run's mean).
* Models: the paper's 5-layer CNN (``cnn5``, 64×64 CelebA-like input), ``vgg-ish``,
  ``resnet-ish`` (residual blocks as THOR units), ``mobilenet-ish`` (depthwise-separable).
* THOR: variant-network profiling with subtraction, one GP per layer kind, corners first, next
  point = max predictive variance, stop at the cap (10 points 1-D, 24 2-D) or when the max
  variance < 5 % of the data's. Kernels: Matérn ν=2.5 (paper's choice), RBF, DotProduct, and
  Matérn with random point selection (the paper's ablation).
* Baselines: FLOPs + linear regression on the same profiled variants (the paper's), and on
  20 profiled whole-model random variants (a more generous fit).
* Evaluation: 100 random-channel variants per model (each free block uniform in [1, original]).

Writes ``experiments/results/thor_energy.{csv,md,png}``. Runtime about 3-4 min on 2 cores.

    python experiments/thor_energy.py [--variants 100] [--quick]
"""

from __future__ import annotations

import argparse
import csv
import os
import pathlib
import sys
import time

import numpy as np
import torch

from edgetune.estimation.layerwise.blocks import blocks_of
from edgetune.estimation.layerwise.thor import FlopsLinear, Thor, mape_pct, model_flops, true_energy_j
from edgetune.estimation.layerwise.zoo import MODELS, parsed_model, random_channels
from edgetune.physics.costing import LayerCostModel

RESULTS = pathlib.Path(__file__).resolve().parent / "results"
CONFIGS = (("matern", "variance"), ("rbf", "variance"), ("dotproduct", "variance"), ("matern", "random"))


def run_model(name: str, cost: LayerCostModel, n_variants: int, configs, seed: int) -> tuple[list[dict], dict]:
    p = parsed_model(name)
    rng = np.random.default_rng(seed)
    variants = [random_channels(p, rng) for _ in range(n_variants)]
    blocks = [blocks_of(p, ch)[1] for ch in variants]
    observed = np.array([true_energy_j(p, cost, ch, rng=rng, noise_cv=0.02) for ch in variants])
    flops = np.array([model_flops(p, ch) for ch in variants])
    rows, scatter = [], {"observed": observed}
    for kernel, strategy in configs:
        t0 = time.perf_counter()
        thor = Thor(p, cost, kernel=kernel, strategy=strategy, seed=seed).fit()
        wall = time.perf_counter() - t0
        est = np.array([thor.estimate_blocks_j(b) for b in blocks])
        label = f"THOR {kernel}" + (" (random points)" if strategy == "random" else "")
        rows.append(dict(model=name, method=label, mape_pct=mape_pct(est, observed), points=len(thor.profiled),
                         kinds=len(thor.gps), profiling_s=thor.profiling_s, fit_wall_s=wall))
        if (kernel, strategy) == ("matern", "variance"):
            scatter["THOR"] = est
            lr = thor.flops_baseline()
            scatter["FLOPs-LR"] = lr.predict(flops)
            rows.append(dict(model=name, method="FLOPs + LR (profiled variants)",
                             mape_pct=mape_pct(scatter["FLOPs-LR"], observed), points=len(thor.profiled),
                             kinds=0, profiling_s=thor.profiling_s, fit_wall_s=0.0))
    # a generous baseline: LR on 20 profiled whole models (not the evaluation set)
    fit_rng = np.random.default_rng(seed + 1)
    fit_ch = [random_channels(p, fit_rng) for _ in range(20)]
    lr20 = FlopsLinear().fit([model_flops(p, ch) for ch in fit_ch],
                             [true_energy_j(p, cost, ch, rng=fit_rng, noise_cv=0.02) for ch in fit_ch])
    rows.append(dict(model=name, method="FLOPs + LR (20 whole models)", mape_pct=mape_pct(lr20.predict(flops), observed),
                     points=20, kinds=0, profiling_s=float("nan"), fit_wall_s=0.0))
    scatter["flops"] = flops
    return rows, scatter


def write(rows: list[dict], scatters: dict, args) -> None:
    RESULTS.mkdir(exist_ok=True)
    with open(RESULTS / "thor_energy.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    models = list(dict.fromkeys(r["model"] for r in rows))
    methods = list(dict.fromkeys(r["method"] for r in rows))
    cell = {(r["model"], r["method"]): r for r in rows}
    lines = ["# THOR vs FLOPs + linear regression (THOR)", "",
             f"Xavier AGX MAXN, training, batch 16; {args.variants} random-channel variants per model; "
             "MAPE (%) of energy above idle per iteration against noisy (2 %) simulated observations.", "",
             "| method | " + " | ".join(models) + " | mean |", "|---|" + "---|" * (len(models) + 1)]
    for m in methods:
        vals = [cell[(mod, m)]["mape_pct"] for mod in models if (mod, m) in cell]
        lines.append(f"| {m} | " + " | ".join(f"{cell[(mod, m)]['mape_pct']:.1f}" if (mod, m) in cell else "–"
                                               for mod in models) + f" | {np.mean(vals):.1f} |")
    lines += ["", "Profiling cost of THOR (Matérn, variance-guided): kinds, profiled variant networks, simulated "
              "device time (500 iterations + 3 s set-up per point), wall time of profiling + GP fitting here.", "",
              "| model | kinds | points | device time (s) | wall (s) |", "|---|---|---|---|---|"]
    for mod in models:
        r = cell[(mod, "THOR matern")]
        lines.append(f"| {mod} | {r['kinds']} | {r['points']} | {r['profiling_s']:.0f} | {r['fit_wall_s']:.1f} |")
    lines += ["", "Paper: THOR ≈ 10 % vs FLOPs ≈ 40 % MAPE across devices (Jetsons best); Matérn > DotProduct > RBF; "
              "variance-guided > random points; profiling + fitting 184–4433 s per model and device."]
    (RESULTS / "thor_energy.md").write_text("\n".join(lines) + "\n")

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(scatters) + 1, figsize=(4.2 * (len(scatters) + 1), 4))
    for ax, (mod, sc) in zip(axes, scatters.items(), strict=False):
        obs = sc["observed"]
        ax.scatter(sc["flops"] / 1e9, obs, s=10, c="k", label="observed")
        ax.scatter(sc["flops"] / 1e9, sc["THOR"], s=10, marker="x", c="tab:red", label="THOR")
        ax.scatter(sc["flops"] / 1e9, sc["FLOPs-LR"], s=6, c="tab:blue", label="FLOPs + LR")
        ax.set(title=mod, xlabel="forward GFLOPs", ylabel="energy above idle / iteration (J)")
        ax.legend(fontsize=7)
    ax = axes[-1]
    x = np.arange(len(models))
    width = 0.8 / len(methods)
    for j, m in enumerate(methods):
        ax.bar(x + j * width, [cell[(mod, m)]["mape_pct"] if (mod, m) in cell else 0 for mod in models], width,
               label=m)
    ax.set_xticks(x + 0.4 - width / 2, models, rotation=20, fontsize=7)
    ax.set(ylabel="MAPE (%)", title="energy MAPE, 100 random variants")
    ax.legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(RESULTS / "thor_energy.png", dpi=110)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--variants", type=int, default=100)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--quick", action="store_true", help="cnn5 only, Matérn only, 30 variants")
    args = ap.parse_args()
    torch.set_num_threads(1)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    cost = LayerCostModel("xavier-agx")
    models = ["cnn5"] if args.quick else list(MODELS)
    configs = CONFIGS[:1] if args.quick else CONFIGS
    if args.quick:
        args.variants = min(args.variants, 30)
    rows, scatters = [], {}
    t0 = time.perf_counter()
    for name in models:
        r, sc = run_model(name, cost, args.variants, configs, args.seed)
        rows += r
        scatters[name] = sc
        print(f"{name}: " + ", ".join(f"{x['method']} {x['mape_pct']:.1f}%" for x in r), flush=True)
    write(rows, scatters, args)
    print(f"done in {time.perf_counter() - t0:.0f} s -> {RESULTS / 'thor_energy.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
