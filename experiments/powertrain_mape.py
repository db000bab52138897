"""PowerTrain (PowerTrain) on the simulator: MAPE of time and power predictors after transfer.

Setup (docs/papers.md, PowerTrain):

* Orin AGX, the 4,368-mode ``powertrain`` grid, batch size 16, training role.
* Reference: ResNet18, NN fitted on *all* 4,368 modes (noisy measurements), 100 epochs.
* Transfer to MobileNetV3, YOLOv8n, LSTM and BERT-base with 50 random profiled modes; validated
  on every other mode of the grid against the simulator's noise-free truth.
* Methods: ``ref+gp`` (the default transfer), ``transfer`` (PowerTrain), ``nn`` from scratch on the
  50 modes, ``gp``, ``nn+gp``, ``linear``, ``rf``; each also as a ratio to ``gp``, a GP fitted from
  scratch on the same modes (the baseline every accuracy claim is made against).
* MAPE vs the number of profiled modes (10 … 100) for MobileNetV3.
* Orin → Xavier AGX (its own ``powertrain`` grid, 7,056 modes): ResNet18 and MobileNetV3.

Measurements are the simulator's truth with noise of the size a real profile shows
(:func:`edgetune.bench.suites.profile_noise`, as the bench uses): minibatch time × lognormal
(σ 2 %), power × (1 + N(0, 1.5 %)) + N(0, 0.1 W).
The NN from scratch trains with minibatches of 16 for 300 epochs (PowerTrain's 100 epochs of
one full batch of 45 rows would be 100 optimiser steps: an unfair baseline).

Writes ``experiments/results/powertrain_mape.{csv,md,png}``. Runtime about 3-5 min on 2 cores.

    python experiments/powertrain_mape.py [--repeats 2] [--quick]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import warnings

import numpy as np
import torch

from edgetune.bench.suites import profile_noise
from edgetune.devices.simulated.tables import truth_table
from edgetune.estimation.metrics import mape_pct
from edgetune.estimation.registry import adapt, make_predictor
from edgetune.estimation.validation import ExtrapolationWarning
from edgetune.powermodes.grids import modes_array
from edgetune.powermodes.specs import ORIN_AGX, XAVIER_AGX
from edgetune.tables import write_table

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
TARGETS = ("time_ms", "power_w")
WORKLOADS = ("mobilenetv3", "yolov8n", "lstm", "bert-base")
METHODS = ("ref+gp", "transfer", "nn", "gp", "nn+gp", "linear", "rf")
#: Methods of the MAPE-vs-modes and Orin → Xavier parts.
SWEEP_METHODS = ("ref+gp", "transfer", "nn+gp", "nn", "gp")
SCRATCH_NN = {"epochs": 300, "batch_size": 16}
PAPER = {  # PowerTrain, 50 modes: (time %, power %)
    ("orin-agx", "mobilenetv3"): (15.7, 5.2), ("orin-agx", "yolov8n"): (11.7, 4.9),
    ("orin-agx", "lstm"): (12.5, 6.3), ("orin-agx", "bert-base"): (15.6, None),
    ("xavier-agx", "resnet18"): (12.0, 11.0), ("xavier-agx", "mobilenetv3"): (14.0, 9.0),
}


def truth(spec, workload: str, modes: np.ndarray) -> np.ndarray:
    rows = truth_table(spec, workload, "train", modes, [16])
    return np.array([[r["time_ms"], r["power_w"]] for r in rows])


def run_method(reference: dict, method: str, x: np.ndarray, y_obs: np.ndarray, x_val: np.ndarray,
               y_val: np.ndarray, seed: int) -> tuple[list[float], float]:
    """MAPE (time, power) on the validation modes and the seconds it took to build both predictors."""
    t0 = time.perf_counter()
    mapes = []
    for j, target in enumerate(TARGETS):
        if method == "nn":
            pred = make_predictor("nn", target, seed=seed, **SCRATCH_NN).fit(x, y_obs[:, j])
        else:
            pred = adapt(reference[target], method, x, y_obs[:, j])
        mapes.append(mape_pct(pred.predict(x_val)[0], y_val[:, j]))
    return mapes, time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=2, help="random draws of the profiled modes")
    ap.add_argument("--quick", action="store_true", help="short reference training, one draw (smoke run)")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    warnings.simplefilter("ignore", ExtrapolationWarning)  # Xavier's top GPU clock is a little past Orin's
    repeats = 1 if args.quick else args.repeats
    os.makedirs(RESULTS, exist_ok=True)
    rows: list[dict] = []

    def record(experiment, device, workload, method, n, rep, mapes, seconds):
        rows.append({"experiment": experiment, "device": device, "workload": workload, "method": method,
                     "n_modes": n, "repeat": rep, "time_mape_pct": round(mapes[0], 3),
                     "power_mape_pct": round(mapes[1], 3), "seconds": round(seconds, 2)})
        print(f"{experiment:10s} {device:10s} {workload:12s} {method:8s} n={n:3d} rep={rep} "
              f"time {mapes[0]:5.1f}%  power {mapes[1]:5.1f}%  ({seconds:.1f} s)", flush=True)

    # 1. reference ----------------------------------------------------------------------------------
    orin = modes_array(ORIN_AGX, "powertrain")
    ref_truth = truth(ORIN_AGX, "resnet18", orin)
    ref_obs = profile_noise(ref_truth, np.random.default_rng(0))
    epochs = 20 if args.quick else 100
    reference, ref_seconds = {}, {}
    for j, target in enumerate(TARGETS):
        t0 = time.perf_counter()
        reference[target] = make_predictor("nn", target, seed=0, epochs=epochs).fit(orin, ref_obs[:, j])
        ref_seconds[target] = time.perf_counter() - t0
    ref_mape = [mape_pct(reference[t].predict(orin)[0], ref_truth[:, j]) for j, t in enumerate(TARGETS)]
    record("reference", "orin-agx", "resnet18", "nn", len(orin), 0, ref_mape, sum(ref_seconds.values()))

    # 2. transfer to new workloads, every method, 50 modes --------------------------------------------
    for workload in WORKLOADS:
        y_true = truth(ORIN_AGX, workload, orin)
        for rep in range(repeats):
            rng = np.random.default_rng(1000 + rep)
            idx = rng.choice(len(orin), 50, replace=False)
            val = np.setdiff1d(np.arange(len(orin)), idx)
            y_obs = profile_noise(y_true[idx], rng)
            for method in METHODS:
                mapes, secs = run_method(reference, method, orin[idx], y_obs, orin[val], y_true[val], rep)
                record("workload", "orin-agx", workload, method, 50, rep, mapes, secs)

    # 3. MAPE vs number of profiled modes (MobileNetV3) ----------------------------------------------
    y_true = truth(ORIN_AGX, "mobilenetv3", orin)
    sizes = (10, 20, 30, 50, 75, 100)
    for n in sizes:
        for rep in range(repeats):
            rng = np.random.default_rng(2000 + rep)
            idx = rng.choice(len(orin), n, replace=False)
            val = np.setdiff1d(np.arange(len(orin)), idx)
            y_obs = profile_noise(y_true[idx], rng)
            for method in SWEEP_METHODS:
                mapes, secs = run_method(reference, method, orin[idx], y_obs, orin[val], y_true[val], rep)
                record("n_modes", "orin-agx", "mobilenetv3", method, n, rep, mapes, secs)

    # 4. Orin -> Xavier ------------------------------------------------------------------------------
    xavier = modes_array(XAVIER_AGX, "powertrain")
    for workload in ("resnet18", "mobilenetv3"):
        y_true = truth(XAVIER_AGX, workload, xavier)
        for rep in range(repeats):
            rng = np.random.default_rng(3000 + rep)
            idx = rng.choice(len(xavier), 50, replace=False)
            val = np.setdiff1d(np.arange(len(xavier)), idx)
            y_obs = profile_noise(y_true[idx], rng)
            for method in SWEEP_METHODS:
                mapes, secs = run_method(reference, method, xavier[idx], y_obs, xavier[val], y_true[val], rep)
                record("device", "xavier-agx", workload, method, 50, rep, mapes, secs)

    write_table(rows, os.path.join(RESULTS, "powertrain_mape.csv"))
    write_markdown(rows, ref_seconds, len(orin), len(xavier), repeats, epochs)
    plot(rows, sizes)
    print(f"wrote {RESULTS}/powertrain_mape.csv, .md, .png")
    return 0


def _median(rows: list[dict], key: str, **match) -> float:
    vals = [r[key] for r in rows if all(r[k] == v for k, v in match.items())]
    return float(np.median(vals)) if vals else float("nan")


def write_markdown(rows, ref_seconds, n_orin, n_xavier, repeats, epochs) -> None:
    ref = next(r for r in rows if r["experiment"] == "reference")
    lines = [
        "# PowerTrain on the simulator: time / power MAPE after transfer",
        "",
        f"Generated by `experiments/powertrain_mape.py` (median over {repeats} random draws of the profiled modes; "
        "validation on every other mode of the grid against the noise-free simulator; profiled values carry "
        "2 % time and 1.5 % + 0.1 W power noise).",
        "",
        f"Reference: ResNet18 train on the Orin AGX powertrain grid ({n_orin} modes), NN {epochs} epochs: "
        f"fit {ref_seconds['time_ms']:.1f} s (time) + {ref_seconds['power_w']:.1f} s (power) on one thread; "
        f"in-sample MAPE vs truth {ref['time_mape_pct']:.1f} % / {ref['power_mape_pct']:.1f} %.",
        "",
        "## 50 profiled modes, Orin AGX (time % / power %)",
        "",
        "| workload | " + " | ".join(METHODS) + " | PowerTrain paper |",
        "|---|" + "---|" * (len(METHODS) + 1),
    ]
    for w in WORKLOADS:
        cells = [f"{_median(rows, 'time_mape_pct', experiment='workload', workload=w, method=m):.1f} / "
                 f"{_median(rows, 'power_mape_pct', experiment='workload', workload=w, method=m):.1f}" for m in METHODS]
        paper = PAPER.get(("orin-agx", w))
        lines.append(f"| {w} | " + " | ".join(cells) + f" | {_paper(paper)} |")
    lines += ["", "### As a ratio to the GP from scratch on the same 50 modes (time / power; target ≤ 0.70)", "",
              "| workload | " + " | ".join(m for m in METHODS if m != "gp") + " |",
              "|---|" + "---|" * (len(METHODS) - 1)]
    for w in WORKLOADS:
        lines.append(f"| {w} | " + " | ".join(_ratio(rows, m, experiment="workload", workload=w)
                                             for m in METHODS if m != "gp") + " |")
    lines += ["", "Seconds to build both predictors (median over workloads and draws): " + ", ".join(
        f"{m} {_median(rows, 'seconds', experiment='workload', method=m):.1f}" for m in METHODS) + ".", ""]
    lines += ["## MAPE vs profiled modes, MobileNetV3 (time % / power %; ratio to gp)", "",
              "| modes | " + " | ".join(SWEEP_METHODS) + " |", "|---|" + "---|" * len(SWEEP_METHODS)]
    for n in sorted({r["n_modes"] for r in rows if r["experiment"] == "n_modes"}):
        cells = [f"{_median(rows, 'time_mape_pct', experiment='n_modes', n_modes=n, method=m):.1f} / "
                 f"{_median(rows, 'power_mape_pct', experiment='n_modes', n_modes=n, method=m):.1f}"
                 + ("" if m == "gp" else f" ({_ratio(rows, m, experiment='n_modes', n_modes=n)})")
                 for m in SWEEP_METHODS]
        lines.append(f"| {n} | " + " | ".join(cells) + " |")
    lines += ["", f"## Orin AGX → Xavier AGX ({n_xavier}-mode powertrain grid), 50 modes (time % / power %)", "",
              "| workload | " + " | ".join(SWEEP_METHODS) + " | PowerTrain paper |",
              "|---|" + "---|" * (len(SWEEP_METHODS) + 1)]
    for w in ("resnet18", "mobilenetv3"):
        cells = [f"{_median(rows, 'time_mape_pct', experiment='device', workload=w, method=m):.1f} / "
                 f"{_median(rows, 'power_mape_pct', experiment='device', workload=w, method=m):.1f}"
                 + ("" if m == "gp" else f" ({_ratio(rows, m, experiment='device', workload=w)})")
                 for m in SWEEP_METHODS]
        lines.append(f"| {w} | " + " | ".join(cells) + f" | {_paper(PAPER.get(('xavier-agx', w)))} |")
    lines += ["", "Targets for transfer with 50 modes: time ≤ 10 %, power ≤ 4 % (paper: < 15 % / < 6 %).", ""]
    with open(os.path.join(RESULTS, "powertrain_mape.md"), "w", encoding="utf-8") as fh:
        fh.write("\n".join(lines))


def _ratio(rows: list[dict], method: str, **match) -> str:
    """``method``'s median MAPE over the GP-from-scratch's on the same draws, time / power."""
    return " / ".join(f"{_median(rows, key, method=method, **match) / _median(rows, key, method='gp', **match):.2f}"
                      for key in ("time_mape_pct", "power_mape_pct"))


def _paper(p) -> str:
    if not p:
        return "—"
    return f"{p[0]:.1f} / " + ("—" if p[1] is None else f"{p[1]:.1f}")


def plot(rows, sizes) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for ax, key, title in ((axes[0], "time_mape_pct", "time"), (axes[1], "power_mape_pct", "power")):
        for m in SWEEP_METHODS:
            ax.plot(sizes, [_median(rows, key, experiment="n_modes", n_modes=n, method=m) for n in sizes],
                    marker="o", label=m if m != "nn" else "nn (scratch)")
        ax.set_xlabel("profiled modes")
        ax.set_ylabel(f"{title} MAPE (%)")
        ax.set_title(f"MobileNetV3 on Orin AGX: {title}")
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
    axes[0].legend()
    fig.tight_layout()
    fig.savefig(os.path.join(RESULTS, "powertrain_mape.png"), dpi=120)


if __name__ == "__main__":
    sys.exit(main())
