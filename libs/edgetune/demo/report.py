"""The demo's report folder: PNG plots, ``summary.json`` and an ``index.html`` linking them.

Drawn from the story's records: measured points are the agents' :class:`~edgetune.store.MeasurementRecord`
rows, each node's choice comes from its job status (:class:`~edgetune.demo.story.Point`, predicted and
verified), the round plans are the coordinator's :class:`~edgetune.planning.planner.RoundPlan`."""

from __future__ import annotations

import html
import json
import math
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # headless: the demo runs on servers and in CI
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from edgetune.demo.steps import held_out_pairs  # noqa: E402
from edgetune.demo.story import Story, label, mape_pct  # noqa: E402

DEVICE_COLORS = {"orin-agx": "tab:blue", "xavier-agx": "tab:orange", "orin-nano": "tab:green", "nano": "tab:red"}
PLAN_COLORS = {"makespan": "tab:blue", "energy": "tab:green", "energy, after budget change": "tab:purple"}


def _save(fig, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def plot_pareto(story: Story, path: Path) -> Path:
    """Per node: predicted modes, the optimizer's predicted front, measured points, budget and choices."""
    nodes = list(story.nodes.values())
    cols = min(3, len(nodes))
    rows = math.ceil(len(nodes) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(5.4 * cols, 4.4 * rows), squeeze=False)
    for ax, r in zip(axes.flat, nodes, strict=False):
        p = r.predictions.power_w if r.predictions is not None else np.empty(0)
        t = r.predictions.time_ms if r.predictions is not None else np.empty(0)
        ax.scatter(p, t, s=2, c="0.82", label=f"predicted, all {len(p):,} grid modes")
        fp = r.front.power_w if r.front is not None else np.empty(0)
        ft = r.front.time_ms if r.front is not None else np.empty(0)
        ax.plot(fp, ft, "-", c="tab:blue", lw=1.4, label=f"predicted Pareto front ({len(fp)})")
        ax.scatter([m.power_w for m in r.profiled], [m.time_ms for m in r.profiled], s=10, c="k", alpha=0.6,
                   label=f"measured, transfer set ({len(r.profiled)})")
        if r.held_out:
            ax.scatter([m.power_w for m in r.held_out], [m.time_ms for m in r.held_out], s=16, facecolors="none",
                       edgecolors="tab:orange", label=f"measured, held out ({len(r.held_out)})")
        ax.axvline(r.node.budget_w, c="tab:red", ls="--", lw=1, label=f"budget {r.node.budget_w:g} W")
        if r.maxn is not None:
            ax.scatter([r.maxn.power_w], [r.maxn.time_ms], marker="^", s=60, c="k", label="MAXN (measured)")
        if r.preset is not None:
            ax.scatter([r.preset.power_w], [r.preset.time_ms], marker="s", s=50, c="tab:orange", edgecolors="k",
                       label=f"preset {r.preset_name} (measured)")
        d = r.decision
        if d is not None:
            ax.scatter([d.power_w], [d.time_ms], marker="*", s=200, facecolors="none", edgecolors="tab:green",
                       lw=1.3, zorder=5, label="chosen, predicted")
        if r.verified is not None:
            ax.scatter([r.verified.power_w], [r.verified.time_ms], marker="*", s=240, c="tab:green", edgecolors="k",
                       zorder=6, label=f"chosen, measured {label(r.verified.mode)}")
        ax.set_yscale("log")
        ax.set_title(f"{r.node.node_id} ({r.node.device}, budget {r.node.budget_w:g} W)")
        ax.set_xlabel("power (W)")
        ax.set_ylabel("time per minibatch (ms, log)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=6.5, loc="upper right")
    for ax in list(axes.flat)[len(nodes):]:
        ax.axis("off")
    fig.suptitle(f"{story.options.workload} training, batch {story.options.batch_size}: predicted fronts "
                 f"(transfer from a ResNet18 reference) vs measured points, and the chosen mode per node")
    return _save(fig, path)


def plot_accuracy(story: Story, path: Path) -> Path:
    """Predicted vs measured time and power for the held-out modes and the chosen modes."""
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.8))
    all_pairs: dict[str, tuple[list, list]] = {"time": ([], []), "power": ([], [])}
    for r in story.nodes.values():
        pt, mt, pp, mp = held_out_pairs(r)
        c = DEVICE_COLORS.get(r.node.device, "k")
        marker = "o" if r.node.node_id.endswith("1") else "^"
        axes[0].scatter(mt, pt, s=16, c=c, marker=marker, alpha=0.75, label=f"{r.node.node_id}")
        axes[1].scatter(mp, pp, s=16, c=c, marker=marker, alpha=0.75, label=f"{r.node.node_id}")
        all_pairs["time"][0].extend(mt)
        all_pairs["time"][1].extend(pt)
        all_pairs["power"][0].extend(mp)
        all_pairs["power"][1].extend(pp)
        if r.verified is not None and r.decision is not None:
            axes[0].scatter([r.verified.time_ms], [r.decision.time_ms], marker="*", s=140, c=c, edgecolors="k")
            axes[1].scatter([r.verified.power_w], [r.decision.power_w], marker="*", s=140, c=c, edgecolors="k")
            if r.decision.power_upper_w is not None:
                axes[1].plot([r.verified.power_w] * 2, [r.decision.power_w, r.decision.power_upper_w], c=c, lw=1)
    for ax, (what, unit) in zip(axes, (("time", "ms"), ("power", "W")), strict=True):
        meas, pred = (np.array(v) for v in all_pairs[what])
        lo, hi = min(meas.min(), pred.min()) * 0.9, max(meas.max(), pred.max()) * 1.1
        ax.plot([lo, hi], [lo, hi], "k--", lw=0.8, label="y = x")
        ax.set_xlim(lo, hi)
        ax.set_ylim(lo, hi)
        if what == "time":
            ax.set_xscale("log")
            ax.set_yscale("log")
        ax.set_xlabel(f"measured {what} ({unit})")
        ax.set_ylabel(f"predicted {what} ({unit})")
        ax.set_title(f"{what}: MAPE {mape_pct(pred, meas):.1f} % over {len(meas)} held-out modes")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7, loc="upper left")
    fig.suptitle(f"Transfer accuracy on held-out modes (dots); ★ chosen modes (predicted vs measured; "
                 f"power bar: mean to mean + {story.tuning.z:.3f} σ)", fontsize=10)
    return _save(fig, path)


def plot_timeline(story: Story, path: Path) -> Path:
    """Gantt of one federated round per plan: each node's round time, with power and energy."""
    rounds = story.rounds
    fig, axes = plt.subplots(len(rounds), 1, figsize=(10, 2.0 + 1.25 * len(rounds) * 1.6), sharex=True,
                             squeeze=False)
    order = [n.node_id for n in story.fleet]
    for ax, rr in zip(axes[:, 0], rounds, strict=True):
        by = {n.id: n for n in rr.plan.nodes}
        color = PLAN_COLORS.get(rr.label, "tab:gray")
        for i, node_id in enumerate(order):
            n = by.get(node_id)
            if n is None:
                continue
            ax.barh(i, n.time_s, color=color, alpha=0.75, edgecolor="k", lw=0.5)
            ax.text(n.time_s, i, f" {n.time_s:.0f} s · {n.power_w:.1f} W · {n.energy_j / 1000:.1f} kJ · "
                                 f"{label(n.mode) if n.mode is not None else ''}", va="center", fontsize=7)
        makespan_s, energy_j = rr.plan.makespan_s or 0.0, rr.plan.energy_j or 0.0
        ax.axvline(makespan_s, c="k", ls="-", lw=1)
        if rr.deadline_s:
            ax.axvline(rr.deadline_s, c="tab:red", ls="--", lw=1)
        ax.set_yticks(range(len(order)), order, fontsize=8)
        ax.invert_yaxis()
        saved = 100.0 * (1 - energy_j / rr.fastest_energy_j) if rr.fastest_energy_j else float("nan")
        title = (f"{rr.label}: makespan {makespan_s:.0f} s, energy {energy_j / 1000:.2f} kJ "
                 f"({abs(saved):.1f} % {'less' if saved >= 0 else 'more'} than all-fastest "
                 f"{rr.fastest_energy_j / 1000:.2f} kJ)")
        if rr.deadline_s:
            title += f"; deadline {rr.deadline_s:.0f} s (red)"
        ax.set_title(title, fontsize=9)
        ax.grid(axis="x", alpha=0.3)
    axes[-1, 0].set_xlabel("round time (s)")
    xmax = max(max((n.time_s for n in rr.plan.nodes), default=0) for rr in rounds)
    xmax = max(xmax, max(rr.deadline_s or 0 for rr in rounds))
    axes[-1, 0].set_xlim(0, xmax * 1.75)
    bc = story.budget_change
    fig.suptitle(f"One federated round ({story.options.workload}, samples per node) — plans by the coordinator; "
                 f"last: after {bc.get('node', '?')} {bc.get('old_budget_w', 0):g} → {bc.get('new_budget_w', 0):g} W",
                 fontsize=10)
    return _save(fig, path)


def plot_savings(story: Story, path: Path) -> Path:
    """Time per minibatch and power of the chosen mode vs MAXN vs the operator's preset (all measured)."""
    nodes = [r for r in story.nodes.values() if r.verified is not None]
    x = np.arange(len(nodes))
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.4))
    series = [("chosen", lambda r: r.verified, "tab:green"), ("MAXN", lambda r: r.maxn, "0.3"),
              ("operator preset", lambda r: r.preset, "tab:orange")]
    for k, (name, get, color) in enumerate(series):
        for ax, metric in zip(axes, ("time", "power"), strict=True):
            vals, over = [], []
            for r in nodes:
                m = get(r)
                vals.append(0.0 if m is None else (m.time_ms if metric == "time" else m.power_w))
                over.append(m is not None and m.power_w > r.node.budget_w)
            bars = ax.bar(x + (k - 1) * 0.27, vals, 0.27, color=color, label=name)
            for b, o in zip(bars, over, strict=True):
                if o:
                    b.set_hatch("///")
                    b.set_edgecolor("tab:red")
    for i, r in enumerate(nodes):
        axes[1].plot([i - 0.45, i + 0.45], [r.node.budget_w] * 2, c="tab:red", lw=1.5)
    labels = [f"{r.node.node_id}\n{r.node.budget_w:g} W" for r in nodes]
    axes[0].set_yscale("log")
    axes[0].set_ylabel("time per minibatch (ms, log)")
    axes[0].set_title("Time per minibatch (measured; lower is better)")
    axes[1].set_ylabel("power (W)")
    axes[1].set_title("Power (measured); red line: node budget; hatched: over budget")
    for ax in axes:
        ax.set_xticks(x, labels, fontsize=8)
        ax.grid(axis="y", alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle("Chosen mode vs MAXN vs the nvpmodel preset an operator would pick for the budget", fontsize=10)
    return _save(fig, path)


# --- summary.json and index.html ----------------------------------------------------------------------
def write_json(path: Path, summary: dict[str, Any]) -> Path:
    path.write_text(json.dumps(summary, indent=1, default=str))
    return path


def cell(value: Any) -> str:
    """A value as people read it: yes / no, numbers rounded to 4 significant digits, lists as comma-separated
    text, nested records as key: value pairs, nothing as a dash."""
    if value is None or value == "":
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, (list, tuple, set)):
        return ", ".join(cell(v) for v in value) or "–"
    if isinstance(value, dict):
        return "; ".join(f"{k}: {cell(v)}" for k, v in value.items()) or "–"
    return str(value)


def _table(rows: list[dict]) -> str:
    if not rows:
        return "<p>none</p>"
    head = "".join(f"<th>{html.escape(str(k))}</th>" for k in rows[0])
    body = "".join("<tr>" + "".join(f"<td>{html.escape(cell(v))}</td>" for v in r.values()) + "</tr>"
                   for r in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def write_html(out: Path, sections: list[tuple[str, str, list[dict]]], images: list[tuple[Path, str]],
               headline: str) -> Path:
    """``sections``: (title, one-line explanation, table rows); ``images``: (png, caption)."""
    parts = [f"<h2>{html.escape(t)}</h2><p>{html.escape(note)}</p>{_table(rows)}" for t, note, rows in sections]
    figs = "".join(f'<figure><a href="{p.name}"><img src="{p.name}" alt="{html.escape(c)}"></a>'
                   f"<figcaption>{html.escape(c)}</figcaption></figure>" for p, c in images)
    links = " · ".join(f'<a href="{p.name}">{p.name}</a>' for p, _ in images)
    page = f"""<!doctype html><html><head><meta charset="utf-8"><title>edgetune demo</title>
<style>body{{font-family:sans-serif;margin:2em;max-width:1400px}} table{{border-collapse:collapse;margin:.5em 0}}
td,th{{border:1px solid #ccc;padding:3px 8px;text-align:right;font-size:13px}} th{{background:#f3f3f3}}
img{{max-width:100%;border:1px solid #ddd}} figcaption{{color:#555;font-size:13px;margin-bottom:1.5em}}</style>
</head><body>
<h1>edgetune demo report</h1><p>{html.escape(headline)}</p>
<p>Plots: {links} · data: <a href="summary.json">summary.json</a> · service logs: <a href="logs/">logs/</a></p>
{''.join(parts)}
<h2>Plots</h2>{figs}
</body></html>"""
    path = out / "index.html"
    path.write_text(page)
    return path


def _fmt(v: Any, nd: int = 1) -> str:
    return "–" if v is None else f"{v:.{nd}f}"


def summary_table(rows: list[dict]) -> list[dict]:
    """The summary rows (steps.summary_rows) formatted for the console and the HTML page."""
    def pct(a: float | None, b: float | None) -> str:
        return f"{100.0 * (a - b) / b:+.0f}%" if a is not None and b else "–"

    def point(p: dict | None) -> str:
        if p is None:
            return "–"
        return f"{p['time_ms']:.0f} ms {p['power_w']:.1f} W" + (" OVER" if p["over_budget"] else "")

    out = []
    for r in rows:
        maxn, preset = r["maxn"], r["preset"]
        out.append({
            "node": r["node"], "device": r["device"], "budget W": f"{r['budget_w']:g}",
            "chosen mode": r["mode"] or "infeasible", "batch": r["batch_size"],
            "time ms": _fmt(r["time_ms"], 0), "power W": _fmt(r["power_w"], 2), "energy J": _fmt(r["energy_j"], 2),
            "≤ budget": "yes" if r["within_budget"] else "NO",
            "MAXN": point(maxn),
            "energy vs MAXN": pct(r["energy_j"], maxn["energy_j"] if maxn else None),
            "preset": f"{r['preset_name']}: {point(preset)}" if preset else "none fits",
            "time vs preset": pct(r["time_ms"], preset["time_ms"] if preset else None),
        })
    return out
