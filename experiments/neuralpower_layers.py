"""NeuralPower (NeuralPower): per-layer-type time and power models, like the paper's Table 5.

Setup:

* Random 1-layer networks per type (conv, max-pool, flatten, FC) in NeuralPower's Table 2's
  ranges scaled down for a shared laptop CPU (``neuralpower.RANGES``), batch 1/2/4.
* Time is *real*: each layer is timed on this machine's CPU (one torch thread) with seed
  001's repetition rule over a 15 ms counting window; the median repeat is the measurement.
* Power comes from the simulator's layer costing (Xavier AGX MAXN, inference, the layer
  alone) with 1 % seeded measurement noise — a Jetson's rail model, not this CPU's.
* One Lasso polynomial per (type, target), K ∈ {1..4}, α ∈ {1e-10 … 1}, 5-fold CV RMSE,
  refit on the training split (80 %); errors on the training data (the paper's table) and
  on the held-out 20 %.
* Whole networks: a few conv/pool/flatten/FC stacks, measured end to end vs Σ of layer
  predictions.

Writes ``experiments/results/neuralpower_layers.{csv,md,png}``. Runtime about 2-3 min.

    python experiments/neuralpower_layers.py [--n 200] [--quick]
"""

from __future__ import annotations

import argparse
import csv
import pathlib
import sys
import time

import numpy as np
import torch
from torch import nn

from edgetune.estimation.layerwise.neuralpower import NP_KINDS, NeuralPowerModel, collect, layer_features
from edgetune.physics.costing import LayerCostModel
from edgetune.workloads import time_module
from edgetune.workloads.layers import extract_layers

RESULTS = pathlib.Path(__file__).resolve().parent / "results"
PAPER_TIME_MAPE = {"conv": 992, "pool": 112, "flatten": 7.63, "fc": 97.2}
PAPER_POWER_MAPE = {"conv": 0.76, "pool": 0.98, "flatten": 0.58, "fc": 3.51}


def errors(pred: np.ndarray, true: np.ndarray) -> dict[str, float]:
    err = pred - true
    rel = err / true
    return dict(mae=float(np.mean(np.abs(err))), rmse=float(np.sqrt(np.mean(err**2))),
                mape=float(100 * np.mean(np.abs(rel))), rmspe=float(100 * np.sqrt(np.mean(rel**2))))


def networks() -> list[tuple[str, nn.Module, tuple[int, ...]]]:
    def stack(c1: int, c2: int, size: int) -> nn.Module:
        s = size // 4
        return nn.Sequential(nn.Conv2d(3, c1, 3, 1, 1), nn.MaxPool2d(2), nn.Conv2d(c1, c2, 3, 1, 1), nn.MaxPool2d(2),
                             nn.Flatten(), nn.Linear(c2 * s * s, 256), nn.Linear(256, 10))

    return [("small 8/16 @32", stack(8, 16, 32), (1, 3, 32, 32)), ("mid 16/32 @32", stack(16, 32, 32), (2, 3, 32, 32)),
            ("wide 32/64 @32", stack(32, 64, 32), (2, 3, 32, 32)), ("big 32/64 @48", stack(32, 64, 48), (4, 3, 48, 48))]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=200, help="1-layer networks per type")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--quick", action="store_true", help="40 layers per type")
    args = ap.parse_args()
    torch.set_num_threads(1)
    n = 40 if args.quick else args.n
    cost = LayerCostModel("xavier-agx")
    noise = np.random.default_rng(args.seed + 99)

    def power_w(record) -> float:
        return cost.cost_records([record], training=False).layers[0].power_w * (1 + noise.normal(0, 0.01))

    t0 = time.perf_counter()
    samples = []
    for i, kind in enumerate(NP_KINDS):
        t_kind = time.perf_counter()
        samples += collect(kind, n, seed=args.seed + i, power_fn=power_w, window_ms=15.0)
        print(f"measured {n} {kind} layers in {time.perf_counter() - t_kind:.0f} s", flush=True)
    measure_s = time.perf_counter() - t0

    rng = np.random.default_rng(args.seed)
    held = set(rng.choice(len(samples), size=len(samples) // 5, replace=False).tolist())
    train = [s for j, s in enumerate(samples) if j not in held]
    test = [s for j, s in enumerate(samples) if j in held]
    t_fit = time.perf_counter()
    model = NeuralPowerModel().fit(train, seed=args.seed)
    fit_s = time.perf_counter() - t_fit

    rows, table, scatter = [], {}, {}
    for kind in NP_KINDS:
        for target in ("time", "power"):
            m = model.models[(kind, target)]
            for split, data in (("train", train), ("held-out", test)):
                data = [s for s in data if s.kind == kind]
                X = np.stack([layer_features(s.record) for s in data])
                true = np.array([s.time_ms if target == "time" else s.power_w for s in data])
                pred = m.predict(X)
                if target == "time":
                    pred = np.maximum(pred, model.min_time_ms)
                e = errors(pred, true)
                table[(kind, target, split)] = dict(degree=m.degree_, alpha=m.alpha_, n=len(data), **e)
                scatter[(kind, target, split)] = (true, pred)
                rows.append(dict(kind=kind, target=target, split=split, degree=m.degree_, alpha=m.alpha_,
                                 n=len(data), **e))

    # whole networks: Σ layer predictions vs end-to-end measurement
    net_rows = []
    for label, net, shape in networks():
        x = torch.randn(shape)
        measured = float(np.median(time_module(net, x, repeats=30, warmup=3)))
        pred_t, pred_p, skipped = model.predict_network(extract_layers(net, x))
        true_p = cost.cost_records(extract_layers(net, x), training=False).power_w
        net_rows.append((label, measured, pred_t, true_p, pred_p))

    RESULTS.mkdir(exist_ok=True)
    with open(RESULTS / "neuralpower_layers.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)

    def section(target: str, unit: str, paper: dict[str, float]) -> list[str]:
        out = [f"| {target} | " + " | ".join(NP_KINDS) + " |", "|---|" + "---|" * len(NP_KINDS)]
        out.append("| degree K | " + " | ".join(str(table[(k, target, 'train')]["degree"]) for k in NP_KINDS) + " |")
        out.append("| α | " + " | ".join(f"{table[(k, target, 'train')]['alpha']:.0e}" for k in NP_KINDS) + " |")
        for split in ("train", "held-out"):
            for key, name in (("mae", f"MAE [{unit}]"), ("rmse", f"RMSE [{unit}]"), ("mape", "MAPE [%]"),
                              ("rmspe", "RMSPE [%]")):
                fmt = "{:.3g}" if key in ("mae", "rmse") else "{:.1f}"
                out.append(f"| {name}, {split} | " + " | ".join(fmt.format(table[(k, target, split)][key])
                                                              for k in NP_KINDS) + " |")
        out.append("| paper MAPE [%] (train) | " + " | ".join(f"{paper[k]}" for k in NP_KINDS) + " |")
        return out

    lines = ["# NeuralPower per-layer models (NeuralPower, Table 5)", "",
             f"{n} random 1-layer networks per type, 80 % train / 20 % held-out; time measured on this CPU "
             f"(1 thread, median of NeuralPower's repetition count), power from the simulator (Xavier AGX MAXN) "
             f"with 1 % noise. Measuring took {measure_s:.0f} s, fitting the eight models {fit_s:.0f} s.", "",
             "## Execution time", "", *section("time", "ms", PAPER_TIME_MAPE), "",
             "## Power", "", *section("power", "W", PAPER_POWER_MAPE), "",
             "## Whole networks (Σ of layer predictions)", "",
             "| network | measured time (ms) | predicted (ms) | error (%) | simulated power (W) | predicted (W) |",
             "|---|---|---|---|---|---|"]
    for label, meas, pt, tp, pp in net_rows:
        lines.append(f"| {label} | {meas:.3f} | {pt:.3f} | {100 * (pt - meas) / meas:+.1f} | {tp:.2f} | {pp:.2f} |")
    lines += ["", "Paper (Raspberry Pi 4, TFLite, training data): time MAPE conv 992 %, pool 112 %, flatten 7.6 %, "
              "FC 97 %, blown up by short layers; power MAPE 0.6–3.5 % because whole-board power hardly varies."]
    (RESULTS / "neuralpower_layers.md").write_text("\n".join(lines) + "\n")

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 4, figsize=(15, 7))
    for col, kind in enumerate(NP_KINDS):
        for row, (target, unit) in enumerate((("time", "ms"), ("power", "W"))):
            ax = axes[row, col]
            for split, color in (("train", "k"), ("held-out", "tab:red")):
                true, pred = scatter[(kind, target, split)]
                ax.scatter(true, pred, s=8, alpha=0.5, c=color, label=split)
            lo = min(min(scatter[(kind, target, s)][0].min(), scatter[(kind, target, s)][1].min())
                     for s in ("train", "held-out"))
            hi = max(scatter[(kind, target, s)][0].max() for s in ("train", "held-out"))
            ax.plot([lo, hi], [lo, hi], "r-", lw=1)
            if target == "time":
                ax.set_xscale("log")
                ax.set_yscale("symlog", linthresh=1e-3)
            ax.set(title=f"{kind} {target}", xlabel=f"measured ({unit})", ylabel=f"predicted ({unit})")
            ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(RESULTS / "neuralpower_layers.png", dpi=100)
    print(f"done in {time.perf_counter() - t0:.0f} s -> {RESULTS / 'neuralpower_layers.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
