"""Safe power-budget selection: does the power UCB keep budgets on the device?

PowerTrain (PowerTrain) picks the least predicted time with predicted power <= budget, budgets
17-50 W step 1, on the Orin AGX ``powertrain`` grid, and reports that ~20-26 % of its choices
exceed the budget by more than 1 W when evaluated with observed values. Target: a
safe selection with < 2 % of choices over budget by > 1 W at a median time penalty < 3 %.

Setup (reuses ``powertrain_mape.py``'s helpers and noise model):

* Reference: ResNet18 train bs 16, NN fitted once on all 4,368 noisy modes (100 epochs).
* Workloads MobileNetV3, YOLOv8n, LSTM (train, bs 16); per workload and draw, 50 random modes
  profiled with noise (time x lognormal 2 %, power x (1 + N(0, 1.5 %)) + N(0, 0.1 W)).
* Predictors: ``transfer`` (PowerTrain, no std), ``nn+gp`` (mean and std) and ``ref+gp`` (the default of
  ``estimate transfer``: mean and a std conformally calibrated to a 90 % interval on its CV folds).
* Selection over all 4,368 modes for each budget (``MinTime.sweep``):
  ``powertrain``      transfer means, power mean <= budget (PowerTrain's rule);
  ``nn+gp mean``      nn+gp means, risk None;
  ``nn+gp ucb r``     nn+gp, power mean + z(1-r) std <= budget, r in {0.2, 0.1, 0.05, 0.01};
  ``ref+gp ucb r``    the same with ref+gp's mean and calibrated std;
  ``nn+gp cv10 r``    ``nn+gp`` with ``calibration="cv"`` (10 folds, each refitted from the reference
                      NN on 45 modes), std scaled by c = q_{1-r}(held-out scores) / z(r) (the
                      split-conformal bound on the standardised held-out residuals);
  ``nn+gp offset r``  predicted mean power + the (1-r) conformal quantile (W) of the same held-out
                      residuals y - mu <= budget (a constant safety margin, ignores the std);
  ``nn+gp select r``  predicted mean power + ``selection_margin``: the least margin for which a
                      least-time selection *replayed* on the 50 profiled modes (observed time,
                      held-out power mean from the same 10 folds, 64 budgets over the observed
                      powers) exceeds its budget (observed power) in at most a fraction r of the
                      choices; ``select1w`` counts only excesses > 1 W (the issue's tolerance).
* Frontier sampling through the library's node-tuning workflow (:class:`edgetune.tuning.NodeTuner`,
  what ``edgetune tune`` and the demo run): the same 50 profiles, chosen as 10 random modes then 8
  rounds of 5 on the front predicted by the current nn+gp transfer (predicted power within 15-51 W,
  spread by power); each mode measured once with the same noise model. Then ``frontier mean`` /
  ``frontier ucb r`` / ``frontier cv10 r`` as the nn+gp rows above (selection only), and
  ``workflow r``: the workflow's own calibrated safe selection at risk r *verified on the device*
  (the chosen mode's power measured once with the noise model; over budget → the mode and every
  mode dominating it dropped below that power, the error widened, selected again; at most
  ``max_attempts`` = 5 choices). A budget the workflow gives up on (no verified choice) is counted
  with its last choice, so it can only add to the over-budget rate.
* Evaluation with the simulator's noise-free truth (time, power) of the chosen mode; the true
  optimum is the least true time with true power <= budget. Also: the exceed rate when the chosen
  mode's power is *measured* once with the profiling noise (what a power meter would report).

Writes ``experiments/results/safe_selection.{csv,md,png}`` and ``safe_selection_calibration.csv``. About 20-25 min on 2 shared cores (4 draws).

    python experiments/safe_selection.py [--repeats 4] [--quick]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import warnings

import numpy as np
import torch

from edgetune.base.records import Points, mode_key
from edgetune.base.risk import z_score
from edgetune.bench.suites import profile_noise
from edgetune.estimation.bundle import TimePowerModel
from edgetune.estimation.gp import conformal_scale
from edgetune.estimation.registry import adapt, make_predictor
from edgetune.estimation.validation import ExtrapolationWarning
from edgetune.optimization.pareto import pareto_front
from edgetune.optimization.select import Candidates, MinTime, selection_margin
from edgetune.powermodes.grids import modes_array
from edgetune.powermodes.specs import ORIN_AGX
from edgetune.tables import write_table
from edgetune.tuning.local import LibraryEstimator, LibrarySelector
from edgetune.tuning.policy import TuningPolicy
from edgetune.tuning.tuner import NodeTuner

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from powertrain_mape import RESULTS, TARGETS, truth  # noqa: E402

WORKLOADS = ("mobilenetv3", "yolov8n", "lstm")
BUDGETS = [float(b) for b in range(17, 51)]
RISKS = (0.2, 0.1, 0.05, 0.01)
N_PROFILED = 50
CAL_FOLDS = 10  # nn+gp calibration="cv" (the predictor's own option)
PLOT_WORKLOAD = "mobilenetv3"


def method_names() -> list[str]:
    return (["powertrain", "nn+gp mean"] + [f"nn+gp ucb {r:g}" for r in RISKS] + [f"ref+gp ucb {r:g}" for r in RISKS]
            + [f"nn+gp cv{CAL_FOLDS} {r:g}" for r in RISKS] + [f"nn+gp offset {r:g}" for r in RISKS]
            + [f"nn+gp select {r:g}" for r in RISKS] + [f"nn+gp select1w {r:g}" for r in RISKS]
            + ["frontier mean"] + [f"frontier ucb {r:g}" for r in RISKS]
            + [f"frontier cv{CAL_FOLDS} {r:g}" for r in RISKS] + [f"workflow {r:g}" for r in RISKS])


class NoisyDevice:
    """The experiment's device for the workflow (a :class:`edgetune.tuning.Measurer`): a profiled mode
    reads ``profiled`` (one noisy measurement per mode), a verified choice ``verified`` (another)."""

    def __init__(self, orin: np.ndarray, profiled: np.ndarray, verified: np.ndarray) -> None:
        self.at = {mode_key(m): i for i, m in enumerate(orin)}
        self.profiled, self.verified = profiled, verified

    def measure(self, modes: np.ndarray, batch_size: int, *, seed: int = 0, purpose: str = "profile") -> Points:
        idx = [self.at[mode_key(m)] for m in modes]
        y = (self.verified if purpose == "verify" else self.profiled)[idx]
        return Points(modes, np.full(len(idx), batch_size), y[:, 0], y[:, 1], ORIN_AGX.name, "workload", "train")


def workflow_tuner(reference: dict, orin: np.ndarray, device: NoisyDevice, seed: int) -> NodeTuner:
    """The library's NodeTuner with the frontier schedule (10 random + 8 rounds of 5, budgets 17-50 W)."""
    estimator = LibraryEstimator()
    base = estimator.add(TimePowerModel(dict(reference), ORIN_AGX.name, "resnet18", "train", [16]), "reference")
    policy = TuningPolicy(transfer_method="nn+gp", held_out=0, seed=seed)
    return NodeTuner(policy, device, estimator, LibrarySelector(), base=base, candidates=orin, batch_size=16,
                     device=ORIN_AGX.name, workload="workload", power_range_w=(BUDGETS[0], BUDGETS[-1]))


def evaluate_decisions(name: str, decisions: list, pred, y_true: np.ndarray, opt: list[int | None],
                       meas_pow: np.ndarray) -> list[dict]:
    """Rows like :func:`evaluate` for the workflow's verified decisions (a refused budget: its last choice,
    else the least predicted power)."""
    rows = []
    for b, d, o in zip(BUDGETS, decisions, opt, strict=True):
        i = d.index if d.index is not None else int(np.argmin(pred.power_w))
        t, p = y_true[i]
        rows.append({"method": name, "budget_w": b, "feasible": int(d.feasible and d.within_budget),
                     "mode_index": int(i), "pred_time_ms": round(float(pred.time_ms[i]), 3),
                     "pred_power_w": round(float(pred.power_w[i]), 3),
                     "pred_power_bound_w": round(float(d.power_upper_w if d.power_upper_w is not None
                                                       else pred.power_w[i]), 3),
                     "true_time_ms": round(float(t), 3), "true_power_w": round(float(p), 3),
                     "measured_power_w": round(float(meas_pow[i]), 3), "excess_w": round(float(p - b), 3),
                     "attempts": d.attempts,
                     "time_penalty_pct": (round(100.0 * (t / y_true[o, 0] - 1.0), 3) if o is not None
                                          else float("nan"))})
    return rows


def conformal_quantile(values: np.ndarray, risk: float) -> float:
    """The split-conformal (1 - risk) quantile (finite-sample rank; beyond n: the max)."""
    s = np.sort(np.asarray(values, float))
    k = min(int(np.ceil((len(s) + 1) * (1.0 - risk))), len(s))
    return float(s[k - 1])


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
    ap.add_argument("--repeats", type=int, default=4, help="random draws of the profiled modes")
    ap.add_argument("--quick", action="store_true", help="short reference training, one draw (smoke run)")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    warnings.simplefilter("ignore", ExtrapolationWarning)
    repeats = 1 if args.quick else args.repeats
    os.makedirs(RESULTS, exist_ok=True)
    t_start = time.perf_counter()

    orin = modes_array(ORIN_AGX, "powertrain")
    ref_obs = profile_noise(truth(ORIN_AGX, "resnet18", orin), np.random.default_rng(0))
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
            y_obs = profile_noise(y_true[idx], rng)
            meas_pow = profile_noise(y_true, np.random.default_rng(5000 + rep))[:, 1]
            x = orin[idx]
            pt = {t: adapt(reference[t], "transfer", x, y_obs[:, j]).predict(orin)[0] for j, t in enumerate(TARGETS)}
            t_mu = adapt(reference["time_ms"], "nn+gp", x, y_obs[:, 0]).predict(orin)[0]
            # power: nn+gp with the predictor's calibration="cv" option (10 folds refitted from the
            # reference); the mean and raw std are those of the plain nn+gp fit (same fit, std x c)
            cal = adapt(reference["power_w"], "nn+gp", x, y_obs[:, 1], calibration="cv",
                        calibration_folds=CAL_FOLDS)
            mu, sd_cal = cal.predict(orin)
            sd = sd_cal / cal.std_scale
            resid = y_obs[:, 1] - cal.calibration_means  # held-out residuals (W)
            cscale = {r: conformal_scale(cal.calibration_scores, r) for r in RISKS}
            offset = {r: max(conformal_quantile(resid, r), 0.0) for r in RISKS}
            margin = {(tol, r): selection_margin(y_obs[:, 0], cal.calibration_means, y_obs[:, 1], r, tolerance_w=tol)
                      for tol in (0.0, 1.0) for r in RISKS}
            val = np.setdiff1d(np.arange(len(orin)), idx)
            zt = (y_true[val, 1] - mu[val]) / sd[val]
            calib.append({"workload": workload, "repeat": rep, "median_power_std_w": round(float(np.median(sd)), 3),
                          "cv_score_std": round(float(np.std(cal.calibration_scores)), 3),
                          "true_score_std": round(float(np.std(zt)), 3),
                          "cv_resid_rms_w": round(float(np.sqrt(np.mean(resid ** 2))), 3),
                          "true_resid_rms_w": round(float(np.sqrt(np.mean((y_true[val, 1] - mu[val]) ** 2))), 3),
                          "true_resid_mean_w": round(float(np.mean(y_true[val, 1] - mu[val])), 3),
                          **{f"coverage_ucb_{r:g}": round(float(np.mean(zt <= z_score(r))), 4) for r in RISKS},
                          **{f"c_cv_{r:g}": round(cscale[r], 3) for r in RISKS},
                          **{f"coverage_cv_{r:g}": round(float(np.mean(zt <= z_score(r) * cscale[r])), 4)
                             for r in RISKS},
                          **{f"offset_w_{r:g}": round(offset[r], 3) for r in RISKS},
                          **{f"coverage_offset_{r:g}": round(float(np.mean(y_true[val, 1] <= mu[val] + offset[r])), 4)
                             for r in RISKS},
                          **{f"margin_w_{r:g}": round(margin[(0.0, r)], 3) for r in RISKS},
                          **{f"margin1w_w_{r:g}": round(margin[(1.0, r)], 3) for r in RISKS}})
            base = dict(workload=workload, repeat=rep)
            c_pt = Candidates(pt["time_ms"], np.maximum(pt["power_w"], 0.0))
            out = evaluate("powertrain", c_pt, None, y_true, opt, meas_pow)
            c_gp = Candidates(t_mu, np.maximum(mu, 0.0), None, sd)
            out += evaluate("nn+gp mean", c_gp, None, y_true, opt, meas_pow)
            for r in RISKS:
                out += evaluate(f"nn+gp ucb {r:g}", c_gp, r, y_true, opt, meas_pow)
            # ref+gp (estimate transfer's default): its std is conformally calibrated to a 90 % interval
            rg = {t: adapt(reference[t], "ref+gp", x, y_obs[:, j]).predict(orin) for j, t in enumerate(TARGETS)}
            c_rg = Candidates(rg["time_ms"][0], np.maximum(rg["power_w"][0], 0.0), None, rg["power_w"][1])
            for r in RISKS:
                out += evaluate(f"ref+gp ucb {r:g}", c_rg, r, y_true, opt, meas_pow)
            for r in RISKS:  # MinTime checks mu + z(r) * std: scale the raw std by the CV conformal factor
                scaled = Candidates(c_gp.time_ms, c_gp.power_w, None, sd * cscale[r])
                out += evaluate(f"nn+gp cv{CAL_FOLDS} {r:g}", scaled, r, y_true, opt, meas_pow)
            shifts = ([(f"nn+gp offset {r:g}", offset[r]) for r in RISKS]
                      + [(f"nn+gp select {r:g}", margin[(0.0, r)]) for r in RISKS]
                      + [(f"nn+gp select1w {r:g}", margin[(1.0, r)]) for r in RISKS])
            for name, m in shifts:
                # a constant margin in W: the predicted power itself shifted
                sel = evaluate(name, Candidates(c_gp.time_ms, c_gp.power_w + m), None, y_true, opt, meas_pow)
                for o in sel:  # report the unshifted mean as the prediction, the shifted one as the bound
                    o["pred_power_bound_w"] = o["pred_power_w"]
                    o["pred_power_w"] = round(o["pred_power_w"] - m, 3)
                out += sel
            # frontier sampling: the same number of profiles, chosen along the predicted front
            f_meas = profile_noise(y_true, np.random.default_rng(2000 + rep))
            device = NoisyDevice(orin, f_meas, profile_noise(y_true, np.random.default_rng(5000 + rep)))
            tuner = workflow_tuner(reference, orin, device, seed=3000 + rep)
            f_pred = tuner.explore()
            f_idx = np.asarray([device.at[mode_key(m)] for m in tuner.points.modes])
            f_x, f_y = orin[f_idx], f_meas[f_idx]
            f_t = adapt(reference["time_ms"], "nn+gp", f_x, f_y[:, 0]).predict(orin)[0]
            f_cal = adapt(reference["power_w"], "nn+gp", f_x, f_y[:, 1], calibration="cv",
                          calibration_folds=CAL_FOLDS)
            f_mu, f_sd_cal = f_cal.predict(orin)
            f_sd = f_sd_cal / f_cal.std_scale
            c_f = Candidates(f_t, np.maximum(f_mu, 0.0), None, f_sd)
            out += evaluate("frontier mean", c_f, None, y_true, opt, meas_pow)
            for r in RISKS:
                out += evaluate(f"frontier ucb {r:g}", c_f, r, y_true, opt, meas_pow)
            for r in RISKS:
                scaled = Candidates(c_f.time_ms, c_f.power_w, None, f_sd * conformal_scale(f_cal.calibration_scores, r))
                out += evaluate(f"frontier cv{CAL_FOLDS} {r:g}", scaled, r, y_true, opt, meas_pow)
            for r in RISKS:  # the workflow's own selection, each choice verified on the (noisy) device
                decisions = tuner.with_policy(tuner.policy.with_(risk=r)).tune(BUDGETS)
                out += evaluate_decisions(f"workflow {r:g}", decisions, f_pred, y_true, opt, meas_pow)
            f_val = np.setdiff1d(np.arange(len(orin)), f_idx)
            calib[-1]["frontier_true_resid_rms_w"] = round(float(np.sqrt(np.mean((y_true[f_val, 1] - f_mu[f_val]) ** 2))), 3)
            front = pareto_front(y_true[:, 0], y_true[:, 1])
            front = front[(y_true[front, 1] >= BUDGETS[0] - 2) & (y_true[front, 1] <= BUDGETS[-1] + 1)]
            calib[-1]["front_resid_rms_w"] = round(float(np.sqrt(np.mean((y_true[front, 1] - mu[front]) ** 2))), 3)
            calib[-1]["frontier_front_resid_rms_w"] = round(
                float(np.sqrt(np.mean((y_true[front, 1] - f_mu[front]) ** 2))), 3)
            rows += [{**base, **o} for o in out]
            print(f"{workload:12s} rep={rep} ({time.perf_counter() - t0:.1f} s)  " + "  ".join(
                f"{m}: {_exceed([o for o in out if o['method'] == m]):.0f}%/{_pen([o for o in out if o['method'] == m]):.1f}%"
                for m in method_names()), flush=True)

    runtime = time.perf_counter() - t_start
    write_table(rows, os.path.join(RESULTS, "safe_selection.csv"))
    write_table(calib, os.path.join(RESULTS, "safe_selection_calibration.csv"))
    summary = summarise(rows)
    write_markdown(summary, calib, rows, ref_seconds, runtime, repeats, epochs, len(orin))
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


def write_markdown(summary, calib, rows, ref_seconds, runtime, repeats, epochs, n_modes) -> None:
    n = summary[0]["n"]
    lines = [
        "# Safe power-budget selection on the simulated Orin AGX",
        "",
        f"Generated by `experiments/safe_selection.py`. Reference ResNet18-train NN ({epochs} epochs, all {n_modes} "
        f"noisy modes, {ref_seconds:.0f} s); transfer to {', '.join(WORKLOADS)} (train, bs 16) with {N_PROFILED} "
        f"noisy profiled modes, {repeats} draw(s) each; every one of the {n_modes} modes predicted; budgets "
        f"{BUDGETS[0]:g}–{BUDGETS[-1]:g} W step 1 ({n} selections per method). Each choice is evaluated with the "
        "simulator's noise-free time and power; penalty is vs the least true time with true power ≤ budget. "
        f"Total runtime {runtime:.0f} s on 2 shared cores.",
        "",
        "Target: < 2 % of choices over budget by > 1 W, median time penalty < 3 %. "
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
              + " See the notes below the tables for what limits each family."]
    lines += ["", "✓ = meets both targets. *measured*: the chosen mode's power measured once with the profiling noise "
              "(1.5 % + 0.1 W), as a power meter on the device would see it.", "",
              "## Per workload (over > 1 W % / median penalty %)", "",
              "| method | " + " | ".join(WORKLOADS) + " |", "|---|" + "---|" * len(WORKLOADS)]
    for s in summary:
        lines.append(f"| {s['method']} | " + " | ".join(
            f"{s['per_workload'][w][0]:.1f} / {s['per_workload'][w][1]:.2f}" for w in WORKLOADS) + " |")
    lines += ["", "## Calibration of the nn+gp power std and the margins", "",
              "Coverage = fraction of the 4,318 unprofiled modes with true power ≤ the bound (nominal 1 − risk): "
              "`ucb` mean + z·σ (raw GP σ), `cv` mean + z·c·σ (c = CV conformal factor, nominal z: "
              + ", ".join(f"{z_score(r):.2f} at {r:g}" for r in RISKS) + "), `offset` mean + the CV residual "
              "quantile (W). Score std = std of (y − μ)/σ (1 for a calibrated σ); CV = the 10 held-out folds on "
              "the 50 profiled modes (noisy y), truth = the unprofiled modes (noise-free). `margin` = "
              "`selection_margin` (W) at tolerance 0 / 1 W. *front residual*: rms error of the predicted mean power "
              "on the true (time, power) Pareto front within the budget range (what the selections choose from), "
              "with random and with frontier profiling.", "",
              "| workload | draw | median σ W | score std CV / truth | residual rms W CV / truth | "
              + " | ".join(f"cov ucb {r:g}" for r in RISKS) + " | " + " | ".join(f"c {r:g}" for r in RISKS)
              + " | " + " | ".join(f"cov cv {r:g}" for r in RISKS)
              + " | " + " | ".join(f"offset W {r:g}" for r in RISKS)
              + " | " + " | ".join(f"cov offset {r:g}" for r in RISKS)
              + " | " + " | ".join(f"margin W {r:g}" for r in RISKS)
              + " | front residual rms W random / frontier | all-mode residual rms W frontier |",
              "|---|---|---|---|---|" + "---|" * (6 * len(RISKS)) + "---|---|"]
    for c in calib:
        lines.append(f"| {c['workload']} | {c['repeat']} | {c['median_power_std_w']:.2f} | {c['cv_score_std']:.2f} / "
                     f"{c['true_score_std']:.2f} | {c['cv_resid_rms_w']:.2f} / {c['true_resid_rms_w']:.2f} | "
                     + " | ".join(f"{c[f'coverage_ucb_{r:g}']:.3f}" for r in RISKS) + " | "
                     + " | ".join(f"{c[f'c_cv_{r:g}']:.2f}" for r in RISKS) + " | "
                     + " | ".join(f"{c[f'coverage_cv_{r:g}']:.3f}" for r in RISKS) + " | "
                     + " | ".join(f"{c[f'offset_w_{r:g}']:.2f}" for r in RISKS) + " | "
                     + " | ".join(f"{c[f'coverage_offset_{r:g}']:.3f}" for r in RISKS) + " | "
                     + " | ".join(f"{c[f'margin_w_{r:g}']:.2f} / {c[f'margin1w_w_{r:g}']:.2f}" for r in RISKS)
                     + f" | {c['front_resid_rms_w']:.2f} / {c['frontier_front_resid_rms_w']:.2f}"
                     f" | {c['frontier_true_resid_rms_w']:.2f} |")
    lines += ["", "## Notes", ""] + notes(summary, calib, rows)
    lines.append("")
    with open(os.path.join(RESULTS, "safe_selection.md"), "w", encoding="utf-8") as fh:
        fh.write("\n".join(lines))


def notes(summary, calib, rows) -> list[str]:
    """What the run shows, computed from it (no numbers typed in)."""
    by = {s["method"]: s for s in summary}
    sig = [c["median_power_std_w"] for c in calib]
    mean_rows = [r for r in rows if r["method"] == "nn+gp mean"]
    chosen_bias = float(np.mean([r["true_power_w"] - r["pred_power_w"] for r in mean_rows]))
    all_bias = float(np.mean([c["true_resid_mean_w"] for c in calib]))
    sel = [(r, by[f"nn+gp select {r:g}"]["exceed_0w_pct"]) for r in RISKS]
    cov_cv = float(np.mean([c[f"coverage_cv_{RISKS[1]:g}"] for c in calib]))
    cov_off = float(np.mean([c[f"coverage_offset_{RISKS[1]:g}"] for c in calib]))
    return [
        f"1. The raw GP power σ is nearly constant over the modes (median σ {min(sig):.2f}–{max(sig):.2f} W per draw, "
        "close to the fitted white-noise level): it says little about *which* modes are uncertain, so the UCB, the "
        "CV-scaled UCB and the offset all act as a near-constant margin in W; what separates them is its size.",
        f"2. Per-mode coverage is not selection coverage. At risk {RISKS[1]:g} the CV-calibrated bounds cover "
        f"{100 * cov_cv:.0f} % (`cv`) and {100 * cov_off:.0f} % (`offset`) of the unprofiled modes (nominal "
        f"{100 * (1 - RISKS[1]):.0f} %), but the modes the selector picks are biased: their true power is "
        f"{chosen_bias:+.2f} W above the predicted mean on average (mean selection), against {all_bias:+.2f} W over all "
        "unprofiled modes — the least-time choice favours modes whose power is under-predicted (winner's curse) and "
        "the efficient frontier is itself under-predicted when the profiled sample misses it.",
        "3. `selection_margin` replays the selection on the profiled modes to see that bias; the replay's over-budget "
        "rate on the real selection (over > 0 W) at risk " + ", ".join(f"{r:g}: {e:.1f} %" for r, e in sel)
        + f". A replay over the {N_PROFILED} profiled candidates sees a weaker winner's curse than a selection "
        "over the whole grid, and when the random sample misses the under-predicted frontier no held-out estimate "
        "can see it.",
        f"4. Frontier sampling ({N_PROFILED} profiles: 10 random, 8 rounds of 5 on the front predicted by the "
        "current transfer) measures where selections happen: the rms error of the predicted power on the true front "
        f"in the budget range falls from {np.mean([c['front_resid_rms_w'] for c in calib]):.2f} W (random) to "
        f"{np.mean([c['frontier_front_resid_rms_w'] for c in calib]):.2f} W, while over all modes it is "
        f"{np.mean([c['frontier_true_resid_rms_w'] for c in calib]):.2f} W (random: "
        f"{np.mean([c['true_resid_rms_w'] for c in calib]):.2f} W). Over > 1 W / median penalty: frontier mean "
        f"{by['frontier mean']['exceed_1w_pct']:.1f} % / {by['frontier mean']['median_penalty_pct']:.2f} %, frontier "
        f"ucb {RISKS[0]:g} {by[f'frontier ucb {RISKS[0]:g}']['exceed_1w_pct']:.1f} % / "
        f"{by[f'frontier ucb {RISKS[0]:g}']['median_penalty_pct']:.2f} %.",
        frontier_failures(rows, f"frontier ucb {RISKS[0]:g}"),
        "6. Over > 1 W with the chosen mode's power *measured* once (profiling noise) differs from the truth-based "
        f"rate by at most {max(abs(s['exceed_1w_measured_pct'] - s['exceed_1w_pct']) for s in summary):.1f} points "
        "over all methods.",
        "",
    ]


def frontier_failures(rows, method: str) -> str:
    """Where a frontier method's remaining > 1 W excesses come from (computed from the run)."""
    over = [r for r in rows if r["method"] == method and r["true_power_w"] > r["budget_w"] + 1.0]
    if not over:
        return f"5. `{method}` never exceeds a budget by more than 1 W here."
    groups: dict[tuple, list] = {}
    for r in over:
        groups.setdefault((r["workload"], r["repeat"]), []).append(r)
    (wl, rep), worst = max(groups.items(), key=lambda kv: len(kv[1]))
    miss = max(r["true_power_w"] - r["pred_power_w"] for r in worst)
    n_rows = sum(1 for r in rows if r["method"] == method)
    return (f"5. `{method}`'s {len(over)} choices over budget by > 1 W (of {n_rows}) come from "
            f"{len(groups)} draw(s); {len(worst)} from {wl} draw {rep}, whose final transfer under-predicts the "
            f"chosen modes by up to {miss:.1f} W: unprofiled modes on its predicted front, close in predicted power "
            "to profiled ones (so the power-spread rule saw them as covered) but in a part of the mode space the "
            "profiled modes did not reach (experiments/README.md).")


def plot(summary, rows) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(12, 4.8))
    ax = axes[0]
    for s in summary:
        m = s["method"]
        marker = ("s" if m == "powertrain" else "*" if m.startswith("frontier") else "o" if "ucb" in m
                  or m.endswith("mean") else "^" if "cv" in m else "v" if "select" in m else "D")
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
    for m in ("powertrain", "nn+gp mean", "nn+gp cv10 0.1", "frontier mean", "frontier ucb 0.2"):
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
