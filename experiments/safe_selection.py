"""Safe power-budget selection (issue 5): does the power UCB keep budgets on the device?

PowerTrain (seed 002) picks the least predicted time with predicted power <= budget, budgets
17-50 W step 1, on the Orin AGX ``powertrain`` grid, and reports that ~20-26 % of its choices
exceed the budget by more than 1 W when evaluated with observed values. Target (issue 5): a
safe selection with < 2 % of choices over budget by > 1 W at a median time penalty < 3 %.

Setup (reuses ``powertrain_mape.py``'s helpers and noise model):

* Reference: ResNet18 train bs 16, NN fitted once on all 4,368 noisy modes (100 epochs).
* Workloads MobileNetV3, YOLOv8n, LSTM (train, bs 16); per workload and draw, 50 random modes
  profiled with noise (time x lognormal 2 %, power x (1 + N(0, 1.5 %)) + N(0, 0.1 W)).
* Predictors: ``transfer`` (PowerTrain, no std) and ``nn+gp`` (mean and std).
* Selection over all 4,368 modes for each budget (``MinTime.sweep``):
  ``powertrain``      transfer means, power mean <= budget (PowerTrain's rule);
  ``nn+gp mean``      nn+gp means, risk None;
  ``nn+gp ucb r``     nn+gp, power mean + z(1-r) std <= budget, r in {0.2, 0.1, 0.05, 0.01};
  ``nn+gp offset r``   predicted mean power + the (1-r) conformal quantile (W) of the raw CV
                      residuals y - mu <= budget (a constant safety margin, ignores the std);
  ``nn+gp cv10 r``    ``nn+gp`` with ``calibration="cv"`` (10 folds, each refitted from the reference
                      NN on 45 modes), std scaled by c = q_{1-r}(held-out scores) / z(r);
  ``nn+gp conformal r`` the same as ucb with z replaced by the (1-r) split-conformal quantile of the
                      standardised residuals (y - mu) / std from 5-fold cross-validation of
                      nn+gp on the 50 profiled modes (the GP's own std rescaled to its observed
                      coverage).
* Evaluation with the simulator's noise-free truth (time, power) of the chosen mode; the true
  optimum is the least true time with true power <= budget. Also: the exceed rate when the chosen
  mode's power is *measured* once with the profiling noise (what a power meter would report).

Writes ``experiments/results/safe_selection.{csv,md,png}``. About 4-5 min on 2 cores.

    python experiments/safe_selection.py [--repeats 2] [--quick]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import warnings

import numpy as np
import torch

from edgetune.estimation.gp import conformal_scale
from edgetune.estimation.registry import adapt, make_predictor
from edgetune.estimation.validation import ExtrapolationWarning
from edgetune.optimization.select import Candidates, MinTime, z_score
from edgetune.powermodes.grids import modes_array
from edgetune.powermodes.specs import ORIN_AGX
from edgetune.tables import write_table

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from powertrain_mape import RESULTS, TARGETS, noisy, truth  # noqa: E402

WORKLOADS = ("mobilenetv3", "yolov8n", "lstm")
BUDGETS = [float(b) for b in range(17, 51)]
RISKS = (0.2, 0.1, 0.05, 0.01)
N_PROFILED = 50
FOLDS = 5
CAL_FOLDS = 10  # nn+gp calibration="cv" (the predictor's own option)
PLOT_WORKLOAD = "mobilenetv3"


def method_names() -> list[str]:
    return (["powertrain", "nn+gp mean"] + [f"nn+gp ucb {r:g}" for r in RISKS]
            + [f"nn+gp conformal {r:g}" for r in RISKS] + [f"nn+gp offset {r:g}" for r in RISKS]
            + [f"nn+gp cv{CAL_FOLDS} {r:g}" for r in RISKS])


def conformal_z(reference: dict, x: np.ndarray, y_pow: np.ndarray, seed: int
                ) -> tuple[dict[float, float], dict[float, float], np.ndarray]:
    """Per risk, the conformal (1-r) quantiles over K-fold CV of nn+gp power of (y - mu)/std and of y - mu (W)."""
    rng = np.random.default_rng(seed)
    folds = np.array_split(rng.permutation(len(x)), FOLDS)
    scores = np.empty(len(x))
    resid = np.empty(len(x))
    for held in folds:
        keep = np.setdiff1d(np.arange(len(x)), held)
        pred = adapt(reference["power_w"], "nn+gp", x[keep], y_pow[keep])
        mu, sd = pred.predict(x[held])
        scores[held] = (y_pow[held] - mu) / np.maximum(sd, 1e-9)
        resid[held] = y_pow[held] - mu
    n = len(scores)
    s, e = np.sort(scores), np.sort(resid)
    z_out, w_out = {}, {}
    for r in RISKS:
        k = min(int(np.ceil((n + 1) * (1.0 - r))), n)  # finite-sample conformal rank; > n: use the max
        z_out[r], w_out[r] = float(s[k - 1]), float(e[k - 1])
    return z_out, w_out, scores


def evaluate(name: str, cands: Candidates, risk: float | None, y_true: np.ndarray, opt: list[int | None],
             meas_pow: np.ndarray) -> list[dict]:
    rows = []
    for b, sel, o in zip(BUDGETS, MinTime(risk).sweep(cands, BUDGETS), opt, strict=True):
        i = sel.index if sel.feasible else sel.closest
        t, p = y_true[i]
        row = {"method": name, "budget_w": b, "feasible": int(sel.feasible), "mode_index": int(i),
               "pred_time_ms": round(float(cands.time_ms[i]), 3), "pred_power_w": round(float(cands.power_w[i]), 3),
               "pred_power_bound_w": round(float(cands.power_bound_w(risk)[i]), 3),
               "true_time_ms": round(float(t), 3), "true_power_w": round(float(p), 3),
               "measured_power_w": round(float(meas_pow[i]), 3),
               "excess_w": round(float(p - b), 3)}
        row["time_penalty_pct"] = (round(100.0 * (t / y_true[o, 0] - 1.0), 3) if o is not None else float("nan"))
        rows.append(row)
    return rows


def true_optimum(y_true: np.ndarray) -> list[int | None]:
    cands = Candidates(y_true[:, 0], y_true[:, 1])
    return [s.index if s.feasible else None for s in MinTime().sweep(cands, BUDGETS)]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=2, help="random draws of the profiled modes")
    ap.add_argument("--quick", action="store_true", help="short reference training, one draw (smoke run)")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    warnings.simplefilter("ignore", ExtrapolationWarning)
    repeats = 1 if args.quick else args.repeats
    os.makedirs(RESULTS, exist_ok=True)
    t_start = time.perf_counter()

    orin = modes_array(ORIN_AGX, "powertrain")
    ref_obs = noisy(truth(ORIN_AGX, "resnet18", orin), np.random.default_rng(0))
    epochs = 20 if args.quick else 100
    reference = {}
    t0 = time.perf_counter()
    for j, target in enumerate(TARGETS):
        reference[target] = make_predictor("nn", target, seed=0, epochs=epochs).fit(orin, ref_obs[:, j])
    ref_seconds = time.perf_counter() - t0
    print(f"reference fitted in {ref_seconds:.1f} s", flush=True)

    rows: list[dict] = []
    calib: list[dict] = []
    for workload in WORKLOADS:
        y_true = truth(ORIN_AGX, workload, orin)
        opt = true_optimum(y_true)
        for rep in range(repeats):
            t0 = time.perf_counter()
            rng = np.random.default_rng(1000 + rep)  # the same draws as powertrain_mape.py
            idx = rng.choice(len(orin), N_PROFILED, replace=False)
            y_obs = noisy(y_true[idx], rng)
            meas_pow = noisy(y_true, np.random.default_rng(5000 + rep))[:, 1]
            x = orin[idx]
            pt = {t: adapt(reference[t], "transfer", x, y_obs[:, j]).predict(orin)[0] for j, t in enumerate(TARGETS)}
            gp = {t: adapt(reference[t], "nn+gp", x, y_obs[:, j]).predict(orin) for j, t in enumerate(TARGETS)}
            zc, wc, scores = conformal_z(reference, x, y_obs[:, 1], seed=7000 + rep)
            val = np.setdiff1d(np.arange(len(orin)), idx)
            mu, sd = gp["power_w"]
            zt = (y_true[val, 1] - mu[val]) / sd[val]
            calib.append({"workload": workload, "repeat": rep, "median_power_std_w": round(float(np.median(sd)), 3),
                          "cv_score_std": round(float(np.std(scores)), 3),
                          "true_score_std": round(float(np.std(zt)), 3),
                          **{f"coverage_ucb_{r:g}": round(float(np.mean(zt <= z_score(r))), 4) for r in RISKS},
                          **{f"z_conformal_{r:g}": round(zc[r], 3) for r in RISKS},
                          **{f"coverage_conformal_{r:g}": round(float(np.mean(zt <= zc[r])), 4) for r in RISKS},
                          **{f"offset_w_{r:g}": round(wc[r], 3) for r in RISKS},
                          **{f"coverage_offset_{r:g}": round(float(np.mean(y_true[val, 1] <= mu[val] + max(wc[r], 0.0))), 4)
                             for r in RISKS}})
            base = dict(workload=workload, repeat=rep)
            c_pt = Candidates(pt["time_ms"], np.maximum(pt["power_w"], 0.0))
            out = evaluate("powertrain", c_pt, None, y_true, opt, meas_pow)
            c_gp = Candidates(gp["time_ms"][0], np.maximum(mu, 0.0), gp["time_ms"][1], sd)
            out += evaluate("nn+gp mean", c_gp, None, y_true, opt, meas_pow)
            for r in RISKS:
                out += evaluate(f"nn+gp ucb {r:g}", c_gp, r, y_true, opt, meas_pow)
            for r in RISKS:
                # MinTime checks mu + z(r) * std; scale std so the bound is mu + z_conformal * std
                scaled = Candidates(c_gp.time_ms, c_gp.power_w, c_gp.time_std_ms,
                                    sd * max(zc[r], 0.0) / z_score(r))
                out += evaluate(f"nn+gp conformal {r:g}", scaled, r, y_true, opt, meas_pow)
            for r in RISKS:
                # a constant offset in W: the predicted power itself shifted by the CV residual quantile
                shifted = Candidates(c_gp.time_ms, c_gp.power_w + max(wc[r], 0.0))
                sel = evaluate(f"nn+gp offset {r:g}", shifted, None, y_true, opt, meas_pow)
                for o in sel:  # report the unshifted mean as the prediction, the shifted one as the bound
                    o["pred_power_bound_w"] = o["pred_power_w"]
                    o["pred_power_w"] = round(o["pred_power_w"] - max(wc[r], 0.0), 3)
                out += sel
            # the predictor's calibration="cv" option: 10 folds from the reference, scale the std per risk
            cal = adapt(reference["power_w"], "nn+gp", x, y_obs[:, 1], calibration="cv",
                        calibration_folds=CAL_FOLDS)
            raw_sd = cal.predict(orin)[1] / cal.std_scale
            for r in RISKS:
                scaled = Candidates(c_gp.time_ms, c_gp.power_w, c_gp.time_std_ms,
                                    raw_sd * conformal_scale(cal.calibration_scores, r))
                out += evaluate(f"nn+gp cv{CAL_FOLDS} {r:g}", scaled, r, y_true, opt, meas_pow)
            rows += [{**base, **o} for o in out]
            print(f"{workload:12s} rep={rep} ({time.perf_counter() - t0:.1f} s)  " + "  ".join(
                f"{m}: {_exceed([o for o in out if o['method'] == m]):.0f}%/{_pen([o for o in out if o['method'] == m]):.1f}%"
                for m in method_names()), flush=True)

    runtime = time.perf_counter() - t_start
    write_table(rows, os.path.join(RESULTS, "safe_selection.csv"))
    summary = summarise(rows)
    write_markdown(summary, calib, ref_seconds, runtime, repeats, epochs, len(orin))
    plot(summary, rows)
    print(f"total {runtime:.0f} s; wrote {RESULTS}/safe_selection.csv, .md, .png")
    return 0


def _exceed(rows, margin=1.0, key="true_power_w") -> float:
    return 100.0 * float(np.mean([r[key] > r["budget_w"] + margin for r in rows])) if rows else float("nan")


def _pen(rows, q=50) -> float:
    vals = [r["time_penalty_pct"] for r in rows if np.isfinite(r["time_penalty_pct"])]
    return float(np.percentile(vals, q)) if vals else float("nan")


def summarise(rows: list[dict]) -> list[dict]:
    out = []
    for m in method_names():
        sel = [r for r in rows if r["method"] == m]
        out.append({"method": m, "n": len(sel),
                    "exceed_1w_pct": _exceed(sel, 1.0), "exceed_0w_pct": _exceed(sel, 0.0),
                    "exceed_1w_measured_pct": _exceed(sel, 1.0, "measured_power_w"),
                    "max_excess_w": max(r["excess_w"] for r in sel),
                    "median_penalty_pct": _pen(sel, 50), "p90_penalty_pct": _pen(sel, 90),
                    "mean_penalty_pct": float(np.nanmean([r["time_penalty_pct"] for r in sel])),
                    "infeasible": sum(1 - r["feasible"] for r in sel),
                    "per_workload": {w: (_exceed([r for r in sel if r["workload"] == w]),
                                         _pen([r for r in sel if r["workload"] == w]))
                                     for w in WORKLOADS}})
    return out


def write_markdown(summary, calib, ref_seconds, runtime, repeats, epochs, n_modes) -> None:
    n = summary[0]["n"]
    lines = [
        "# Safe power-budget selection on the simulated Orin AGX (issue 5)",
        "",
        f"Generated by `experiments/safe_selection.py`. Reference ResNet18-train NN ({epochs} epochs, all {n_modes} "
        f"noisy modes, {ref_seconds:.0f} s); transfer to {', '.join(WORKLOADS)} (train, bs 16) with {N_PROFILED} "
        f"noisy profiled modes, {repeats} draw(s) each; every one of the {n_modes} modes predicted; budgets "
        f"{BUDGETS[0]:g}–{BUDGETS[-1]:g} W step 1 ({n} selections per method). Each choice is evaluated with the "
        "simulator's noise-free time and power; penalty is vs the least true time with true power ≤ budget. "
        f"Total runtime {runtime:.0f} s on 2 shared cores.",
        "",
        "Target (issue 5): < 2 % of choices over budget by > 1 W, median time penalty < 3 %. "
        "PowerTrain (paper, real Orin AGX): ~20–26 % over by > 1 W, median penalty 0–1 %.",
        "",
        "| method | over > 1 W % | over > 0 W % | over > 1 W, measured % | max excess W | median penalty % "
        "| p90 penalty % | mean penalty % | no feasible mode |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for s in summary:
        ok = s["exceed_1w_pct"] < 2.0 and s["median_penalty_pct"] < 3.0
        lines.append(f"| {s['method']}{' ✓' if ok else ''} | {s['exceed_1w_pct']:.1f} | {s['exceed_0w_pct']:.1f} | "
                     f"{s['exceed_1w_measured_pct']:.1f} | {s['max_excess_w']:.2f} | {s['median_penalty_pct']:.2f} | "
                     f"{s['p90_penalty_pct']:.2f} | {s['mean_penalty_pct']:.2f} | {s['infeasible']} |")
    pt = summary[0]
    meets = [s for s in summary if s["exceed_1w_pct"] < 2.0 and s["median_penalty_pct"] < 3.0]
    safe = [s for s in summary if s["exceed_1w_pct"] < 2.0]
    fast = [s for s in summary if s["median_penalty_pct"] < 3.0]
    lines += ["", "**Verdict.** PowerTrain's rule (transfer means, predicted power ≤ budget) exceeds the budget by > 1 W "
              f"in {pt['exceed_1w_pct']:.1f} % of choices here (paper, real board: 20–26 %; the simulator is smoother, "
              f"{pt['per_workload']['mobilenetv3'][0]:.0f} % on MobileNetV3 alone) at a median penalty of "
              f"{pt['median_penalty_pct']:.2f} %. "
              + (("Meets both targets: " + ", ".join(s["method"] for s in meets) + ".") if meets else
                 "**No variant meets both targets.** "
                 + (f"Lowest exceed rate with median penalty < 3 %: {min(fast, key=lambda s: s['exceed_1w_pct'])['method']} "
                    f"({min(fast, key=lambda s: s['exceed_1w_pct'])['exceed_1w_pct']:.1f} % / "
                    f"{min(fast, key=lambda s: s['exceed_1w_pct'])['median_penalty_pct']:.2f} %). " if fast else "")
                 + (f"Least penalty with < 2 % over: {min(safe, key=lambda s: s['median_penalty_pct'])['method']} "
                    f"({min(safe, key=lambda s: s['median_penalty_pct'])['exceed_1w_pct']:.1f} % / "
                    f"{min(safe, key=lambda s: s['median_penalty_pct'])['median_penalty_pct']:.2f} %). " if safe else ""))
              + "The raw GP std is 1.8–3.6× too narrow on unprofiled modes (score std vs truth in the calibration table), "
              "so the nominal-risk UCB under-covers; CV-conformal rescaling restores coverage but over-corrects (5-fold CV "
              "on 40 modes overstates the error of the 50-mode model) and costs time."]
    lines += ["", "✓ = meets both targets. *measured*: the chosen mode's power measured once with the profiling noise "
              "(1.5 % + 0.1 W), as a power meter on the device would see it.", "",
              "## Per workload (over > 1 W % / median penalty %)", "",
              "| method | " + " | ".join(WORKLOADS) + " |", "|---|" + "---|" * len(WORKLOADS)]
    for s in summary:
        lines.append(f"| {s['method']} | " + " | ".join(
            f"{s['per_workload'][w][0]:.1f} / {s['per_workload'][w][1]:.2f}" for w in WORKLOADS) + " |")
    lines += ["", "## Calibration of the nn+gp power std", "",
              "Coverage = fraction of the 4,318 unprofiled modes with true power ≤ mean + z·std (nominal 1 − risk). "
              "`z conf` = conformal multiplier from 5-fold CV on the 50 profiled modes (nominal z: "
              + ", ".join(f"{z_score(r):.2f} at {r:g}" for r in RISKS) + "). Score std = std of (y − μ)/σ "
              "(1 for a calibrated σ).", "",
              "| workload | draw | median σ W | score std (CV) | score std (truth) | "
              + " | ".join(f"cov ucb {r:g}" for r in RISKS) + " | " + " | ".join(f"z conf {r:g}" for r in RISKS)
              + " | " + " | ".join(f"cov conf {r:g}" for r in RISKS)
              + " | " + " | ".join(f"offset W {r:g}" for r in RISKS)
              + " | " + " | ".join(f"cov offset {r:g}" for r in RISKS) + " |",
              "|---|---|---|---|---|" + "---|" * (5 * len(RISKS))]
    for c in calib:
        lines.append(f"| {c['workload']} | {c['repeat']} | {c['median_power_std_w']:.2f} | {c['cv_score_std']:.2f} | "
                     f"{c['true_score_std']:.2f} | "
                     + " | ".join(f"{c[f'coverage_ucb_{r:g}']:.3f}" for r in RISKS) + " | "
                     + " | ".join(f"{c[f'z_conformal_{r:g}']:.2f}" for r in RISKS) + " | "
                     + " | ".join(f"{c[f'coverage_conformal_{r:g}']:.3f}" for r in RISKS) + " | "
                     + " | ".join(f"{c[f'offset_w_{r:g}']:.2f}" for r in RISKS) + " | "
                     + " | ".join(f"{c[f'coverage_offset_{r:g}']:.3f}" for r in RISKS) + " |")
    lines.append("")
    with open(os.path.join(RESULTS, "safe_selection.md"), "w", encoding="utf-8") as fh:
        fh.write("\n".join(lines))


def plot(summary, rows) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(12, 4.8))
    ax = axes[0]
    for s in summary:
        m = s["method"]
        marker = "s" if m == "powertrain" else ("o" if "ucb" in m or m.endswith("mean") else ("^" if "conf" in m else "D"))
        ax.scatter(s["median_penalty_pct"], s["exceed_1w_pct"], marker=marker, s=40)
        ax.annotate(m, (s["median_penalty_pct"], s["exceed_1w_pct"]), fontsize=7, xytext=(3, 3),
                    textcoords="offset points")
    ax.axhline(2.0, color="g", ls="--", lw=0.8, label="target: < 2 % over by > 1 W")
    ax.axvline(3.0, color="g", ls=":", lw=0.8, label="target: median penalty < 3 %")
    ax.axhspan(20, 26, color="r", alpha=0.1, label="PowerTrain paper: 20–26 %")
    ax.set_xlabel("median time penalty vs true optimum (%)")
    ax.set_ylabel("choices over budget by > 1 W (%)")
    ax.set_title("3 workloads × draws × 34 budgets")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    ax = axes[1]
    for m in ("powertrain", "nn+gp mean", "nn+gp ucb 0.05", "nn+gp conformal 0.05", "nn+gp offset 0.05"):
        sel = [r for r in rows if r["method"] == m and r["workload"] == PLOT_WORKLOAD and r["repeat"] == 0]
        ax.plot([r["budget_w"] for r in sel], [r["true_power_w"] for r in sel], marker=".", label=m)
    ax.plot(BUDGETS, BUDGETS, "k-", lw=0.8, label="budget")
    ax.plot(BUDGETS, [b + 1 for b in BUDGETS], "k:", lw=0.8, label="budget + 1 W")
    ax.set_xlabel("power budget (W)")
    ax.set_ylabel("true power of the chosen mode (W)")
    ax.set_title(f"{PLOT_WORKLOAD}, draw 0")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(os.path.join(RESULTS, "safe_selection.png"), dpi=120)


if __name__ == "__main__":
    sys.exit(main())
