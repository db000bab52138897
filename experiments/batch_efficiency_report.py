"""The Ahmed et al. reproduction's report: r and time-to-target tables beside the paper's, the verdict, plots."""

from __future__ import annotations

import math

import numpy as np
from batch_efficiency_paper import paper_ratios
from batch_efficiency_setup import METHODS, MODELS, cap_index, paper_model

from edgetune.estimation.batch_efficiency import fit_noise_scale


def plot(path: str, estimates: dict, fit: str) -> None:
    """Samples to target and r per batch size, one line per (model, role); the proxy's fit dotted."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_n, ax_r) = plt.subplots(1, 2, figsize=(12, 4.5))
    for (model, role), est in estimates.items():
        b = np.array(est.batch_sizes)
        mean, std, r = est.passes_mean(), est.passes_std(), est.ratio()
        s = est.samples_per_pass
        style = "-o" if role == "proxy" else "--s"
        label = f"{model} on {est.proxy} (target {est.target_accuracy:.1%})"
        line = ax_n.errorbar(b, [mean[x] * s for x in b], yerr=[std[x] * s for x in b], fmt=style, capsize=3,
                             label=label)
        ax_r.plot(b, [r[x] for x in b], style, color=line[0].get_color(), label=label)
        if role == "proxy":
            fitted = est.fitted_passes()
            top = max(v for v in fitted.values() if math.isfinite(v))
            ax_n.plot(b, [fitted[x] * s for x in b], ":", color=line[0].get_color())
            ax_r.plot(b, [fitted[x] / top for x in b], ":", color=line[0].get_color(),
                      label=f"{model} on {est.proxy}, fitted E(b)")
    for ax in (ax_n, ax_r):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("batch size b")
        ax.grid(alpha=0.3)
    ax_n.set_yscale("log")
    ax_n.set_ylabel("samples to target = N(b)·s (mean ± std over seeds)")
    ax_r.set_ylabel("r_b = N(b) / max_b N(b)")
    ax_r.set_ylim(0, 1.05)
    ax_n.legend(fontsize=7)
    ax_r.legend(fontsize=6)
    fig.suptitle("Seed 000 batch efficiency from one pre-trained checkpoint per model, lr square-root scaled "
                 "(dotted: proxy fit E(b) = E_min(1 + b/B_noise))", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def _row_order(key: tuple) -> tuple:
    """(table, model, cap) rows in table order, then MODELS order, then the paper's column order."""
    table, model, cap = key
    return table, list(MODELS).index(model), cap_index(table, cap)


def plot_tables(path: str, joint_rows: list[dict]) -> None:
    """Per (table, model, cap) row: B2 / B1 and ours / B1 here against the paper's (its target data sets)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cells = _cells(joint_rows)
    keys = sorted(cells, key=_row_order)
    x = np.arange(len(keys))
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.5), sharey=True)
    for ax, (i, name) in zip(axes, ((0, "Baseline 2 / Baseline 1"), (1, "Ours / Baseline 1")), strict=True):
        ours = [cells[k]["Baseline 2" if i == 0 else "Ours"] / cells[k]["Baseline 1"] for k in keys]
        ax.bar(x - 0.2, ours, 0.4, label="this reproduction (simulator, digit / text proxies)")
        for j, k in enumerate(keys):
            paper = paper_ratios(k[0], paper_model(k[1]), cap_index(k[0], k[2]))
            ax.plot([j + 0.2] * len(paper), [v[i] for v in paper.values()], "k_", markersize=14,
                    label="paper (one mark per target data set)" if j == 0 else None)
        ax.axhline(1.0, color="grey", lw=0.8)
        ax.set_xticks(x, [f"T{t[6:]} {paper_model(m)[:6]}\n{c if c == 'none' else f'{c:g} W'}"
                          for t, m, c in keys], fontsize=7)
        ax.set_title(name + " (time to target; < 1: faster than Baseline 1)", fontsize=9)
        ax.grid(axis="y", alpha=0.3)
    axes[0].legend(fontsize=7)
    fig.suptitle("Seed 000 Tables 2–4 (table: model, power limit): ratios here vs the paper's", fontsize=10)
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


def _cells(joint_rows: list[dict]) -> dict[tuple, dict[str, float]]:
    """(table, model, cap) -> method -> mean time to target."""
    out: dict[tuple, dict[str, float]] = {}
    for r in joint_rows:
        out.setdefault((r["table"], r["model"], r["cap_w"]), {})[r["method"]] = r["tt_mean_s"]
    return out


def verdict(joint_rows: list[dict], method: str = "Ours") -> dict[str, int]:
    """Counts over (table, model, cap) rows: within 10 % of the oracle; ours <= both baselines;
    B2 vs B1 in the paper's direction (on every target data set of the paper); ours <= B2 <= B1."""
    cells = _cells(joint_rows)
    counts = {"rows": len(cells), "within_10pct": 0, "ours_le_baselines": 0, "b2_b1_as_paper": 0,
              "ours_le_b2_le_b1": 0}
    for (table, model, cap), t in cells.items():
        b1, b2, ours = t["Baseline 1"], t["Baseline 2"], t[method]
        counts["within_10pct"] += ours <= 1.10 * t["Oracle"]
        counts["ours_le_baselines"] += ours <= min(b1, b2)
        counts["ours_le_b2_le_b1"] += ours <= b2 <= b1
        paper = paper_ratios(table, paper_model(model), cap_index(table, cap))
        counts["b2_b1_as_paper"] += all((b2 <= b1) == (ratio[0] <= 1.0) for ratio in paper.values())
    return counts


def joint_markdown(joint_rows: list[dict], other: str) -> list[str]:
    """The per-table comparison with the paper's ratios beside ours, and the verdict lines."""
    by = {(r["table"], r["model"], r["cap_w"], r["method"]): r for r in joint_rows}
    lines = ["Time to target on the simulated device (s, mean ± std over the target's seeds); choice as b @ GPU "
             "MHz. Paper: its B2 / B1, ours / B1 and ours / fastest per target data set at that limit (Tables 2–4).",
             "", "| table | device | model | cap | " + " | ".join(METHODS) + f" | ours vs oracle | {other} (vs oracle) "
             "| B1 at highest f under cap | B2 / B1, ours / B1: ours | paper |",
             "|---|---|---|---|" + "---|" * (len(METHODS) + 5)]
    tables = sorted({(r["table"], r["model"], r["cap_w"]) for r in joint_rows}, key=_row_order)
    for table, model, c in tables:
        def cell(method, k=(table, model, c)):
            r = by[(*k, method)]
            return f"{r['tt_mean_s']:.0f} ± {r['tt_std_s']:.0f} ({r['batch_size']}@{r['gpu_mhz']})"

        t = {m: by[(table, model, c, m)]["tt_mean_s"] for m in (*METHODS, other)}
        paper = paper_ratios(table, paper_model(model), cap_index(table, c))
        paper_text = "; ".join(f"{d} {b2:.2f}, {o:.2f}" for d, (b2, o, _) in paper.items())
        device = by[(table, model, c, "Ours")]["device"]
        cap = "none" if c == "none" else f"{c:g} W"
        lines.append(f"| {table} | {device} | {model} | {cap} | " + " | ".join(cell(m) for m in METHODS)
                     + f" | {t['Ours'] / t['Oracle'] - 1:+.1%} | {cell(other)} ({t[other] / t['Oracle'] - 1:+.1%}) "
                     f"| {cell('B1, highest f under cap')} | {t['Baseline 2'] / t['Baseline 1']:.2f}, "
                     f"{t['Ours'] / t['Baseline 1']:.2f} | {paper_text} |")
    lines.append("")
    for name, rows in [("all tables", joint_rows)] + [
            (table, [r for r in joint_rows if r["table"] == table]) for table in sorted({r["table"] for r in joint_rows})]:
        v, vo = verdict(rows), verdict(rows, other)
        n = v["rows"]
        lines.append(f"- **{name}**: ours within 10 % of the oracle in {v['within_10pct']} of {n} rows; ours ≤ both "
                     f"baselines in {v['ours_le_baselines']} of {n}; Baseline 2 vs Baseline 1 in the paper's direction "
                     f"in {v['b2_b1_as_paper']} of {n}; ours ≤ Baseline 2 ≤ Baseline 1 in {v['ours_le_b2_le_b1']} of "
                     f"{n}. ({other}: within 10 % in {vo['within_10pct']} of {n}.)")
    return lines + [""]


def markdown(estimates: dict, joint_rows: list[dict], timing: dict, settings: dict) -> str:
    all_b = sorted({b for m in MODELS.values() for b in m.batch_sizes})
    fit = settings["fit"]
    other = "Ours, raw r" if fit != "none" else "Ours, fitted r"
    seeds = ", ".join(f"{m} {len(estimates[(m, 'target')].seeds)}" for m in MODELS if (m, "target") in estimates)
    lines = ["# Seed 000: batch efficiency r and joint batch size + GPU frequency selection (Tables 2–4)", "",
             f"`python experiments/batch_efficiency.py {settings['argv']}`".replace(" `", "`"), "",
             f"Seeds: {seeds}. s = the model's largest batch size (samples per pass; held-out accuracy after every "
             f"pass). Passes to target, mean ± std over seeds (inf: some seed never got there within the budget: "
             f"proxy {settings['proxy_samples']} samples, target {settings['target_samples']}); r = N(b) / max N(b). "
             f"Start: {settings['start_text']}. Proxy target: "
             f"{settings['proxy_target_text']}. Ours: {settings['fit_text']}.", "", settings["data_text"] + ".", "",
             "| model | data set | s | target | pre-trained acc | " + " | ".join(f"b={b}" for b in all_b) + " |",
             "|---|---|---|---|---|" + "---|" * len(all_b)]
    for (model, role), est in sorted(estimates.items(), key=lambda kv: list(MODELS).index(kv[0][0])):
        mean, std, r = est.passes_mean(), est.passes_std(), est.ratio()
        cells = [f"{mean[b]:.1f} ± {std[b]:.1f} (r {r[b]:.2f})" if b in mean and math.isfinite(mean[b])
                 else ("inf" if b in mean else "–") for b in all_b]
        lines.append(f"| {model} | {est.proxy} | {est.samples_per_pass} | {est.target_accuracy:.1%} | "
                     f"{est.initial_accuracy:.1%} | " + " | ".join(cells) + " |")
        if role == "proxy":
            fp = est.fitted_passes()
            top = max(v for v in fp.values() if math.isfinite(v))
            f = fit_noise_scale(est.passes_mean())
            cells = [f"{fp[b]:.1f} (r {fp[b] / top:.2f})" if b in fp and math.isfinite(fp[b])
                     else ("inf" if b in fp else "–") for b in all_b]
            lines.append(f"| {model} | {est.proxy}, fit: N_min {f.n_min:.1f}, B_noise {f.b_noise:.0f}, "
                         f"χ²/dof {fit_chi2_per_dof(est):.1f} | | | | "
                         + " | ".join(cells) + " |")
    lines += ["", *joint_markdown(joint_rows, other),
              f"Wall time: {timing['total_s']:.0f} s in all ({timing['training_s']:.0f} s training, "
              f"{timing['ray_start_s']:.1f} s Ray start-up, {timing['tasks']} Ray tasks).", ""]
    return "\n".join(lines)
