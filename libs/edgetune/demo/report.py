"""The demo's report folder: PNG plots and an HTML page that links them."""

from __future__ import annotations

import html
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # headless: the demo runs on servers and in CI
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from edgetune.demo.story import NodeResult  # noqa: E402
from edgetune.optimization.pareto import pareto_front  # noqa: E402


def plot_pareto(results: list[NodeResult], path: Path) -> Path:
    """One panel per node: truth (grey), the profiled modes, their front, budget and choice."""
    n = len(results)
    cols = min(3, n)
    rows = (n + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(5.2 * cols, 4.2 * rows), squeeze=False)
    for ax, r in zip(axes.flat, results, strict=False):  # spare panels stay empty
        ax.scatter(r.truth_power_w, r.truth_time_ms, s=3, c="0.85", label="all PowerTrain-grid modes (truth)")
        t, p = r.measured()
        ax.scatter(p, t, s=14, c="tab:blue", label=f"profiled ({len(t)})")
        front = pareto_front(t, p)
        ax.plot(p[front], t[front], "-", c="tab:blue", lw=1.2, label="profiled Pareto front")
        ax.axvline(r.budget_w, c="tab:red", ls="--", lw=1, label=f"budget {r.budget_w:g} W")
        if r.maxn is not None:
            ax.scatter([r.maxn.power_w], [r.maxn.time_ms], marker="^", s=60, c="k", label="MAXN")
        if r.preset is not None:
            ax.scatter([r.preset.power_w], [r.preset.time_ms], marker="s", s=50, c="tab:orange",
                       label=f"preset {r.preset_name}")
        if r.chosen is not None:
            ax.scatter([r.chosen.power_w], [r.chosen.time_ms], marker="*", s=220, c="tab:green",
                       edgecolors="k", zorder=5, label=f"chosen {r.chosen.mode.label()}")
        ax.set_yscale("log")
        ax.set_title(f"{r.node} ({r.spec.name})")
        ax.set_xlabel("power (W)")
        ax.set_ylabel("time per minibatch (ms, log)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="upper right")
    for ax in list(axes.flat)[n:]:
        ax.axis("off")
    fig.suptitle("ResNet18 training, batch 16: profiled modes, Pareto fronts and choices per node")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_mode_counts(device_rows: list[dict], path: Path) -> Path:
    names = [r["device"] for r in device_rows]
    x = np.arange(len(names))
    fig, ax = plt.subplots(figsize=(7, 3.8))
    for k, (key, color) in enumerate((("full", "tab:blue"), ("powertrain", "tab:orange"), ("fulcrum", "tab:green"))):
        vals = [r[key] for r in device_rows]
        bars = ax.bar(x + (k - 1) * 0.27, vals, 0.27, label=key, color=color)
        ax.bar_label(bars, fontsize=7)
    ax.set_xticks(x, names)
    ax.set_yscale("log")
    ax.set_ylabel("power modes (log)")
    ax.set_title("Mode space per device and grid")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def write_html(out: Path, summary_rows: list[dict], device_rows: list[dict], images: list[Path]) -> Path:
    def table(rows: list[dict]) -> str:
        if not rows:
            return "<p>none</p>"
        head = "".join(f"<th>{html.escape(str(k))}</th>" for k in rows[0])
        body = "".join("<tr>" + "".join(f"<td>{html.escape(str(v))}</td>" for v in r.values()) + "</tr>"
                       for r in rows)
        return f"<table><tr>{head}</tr>{body}</table>"

    imgs = "".join(f'<p><a href="{p.name}"><img src="{p.name}" style="max-width:100%"></a></p>' for p in images)
    page = f"""<!doctype html><html><head><meta charset="utf-8"><title>edgetune demo</title>
<style>body{{font-family:sans-serif;margin:2em}} table{{border-collapse:collapse}}
td,th{{border:1px solid #ccc;padding:3px 8px;text-align:right}}</style></head><body>
<h1>edgetune demo report</h1>
<h2>Per-node selection (ResNet18 training, batch 16)</h2>{table(summary_rows)}
<h2>Devices</h2>{table(device_rows)}
<h2>Plots</h2>{imgs}
</body></html>"""
    path = out / "index.html"
    path.write_text(page)
    return path
