"""``python -m edgetune.demo``: profile a simulated heterogeneous fleet and choose each node's mode."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from edgetune.demo import report, story


def _summary_row(r: story.NodeResult) -> dict:
    def pct(a: float | None, b: float | None) -> str:
        return f"{100.0 * (a - b) / b:+.0f}%" if a is not None and b else "–"

    def point(m) -> str:
        if m is None:
            return "–"
        flag = " (over)" if m.power_w > r.budget_w else ""
        return f"{m.time_ms:.0f} ms {m.power_w:.1f} W{flag}"

    c = r.chosen
    return {
        "node": r.node, "device": r.spec.name, "budget_w": f"{r.budget_w:g}",
        "mode": c.mode.label() if c else "infeasible", "batch": "16" if c else "–",
        "time_ms": f"{c.time_ms:.0f}" if c else "–", "power_w": f"{c.power_w:.1f}" if c else "–",
        "energy_j": f"{c.time_ms * c.power_w / 1000:.2f}" if c else "–",
        "MAXN": point(r.maxn),
        "preset": f"{r.preset_name}: {point(r.preset)}" if r.preset else "none fits",
        "vs_preset": pct(c.time_ms if c else None, r.preset.time_ms if r.preset else None),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m edgetune.demo", description=__doc__)
    ap.add_argument("--out", default="reports/demo", help="report folder (default: reports/demo)")
    ap.add_argument("--modes", type=int, default=50, help="modes profiled per node (default 50)")
    ap.add_argument("--workload", default="resnet18")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    # A wide console even when piped (make demo | tee): the summary table has many columns.
    console = Console(width=None if sys.stdout.isatty() else 160)
    t0 = time.perf_counter()

    console.rule("[bold]edgetune demo: one power mode per node, under each node's budget")
    devices = story.device_rows()
    t = Table(title="1. Device models and their power-mode spaces")
    for k in ("device", "cores", "cpu", "gpu", "emc", "full", "powertrain", "fulcrum", "presets"):
        t.add_column(k, justify="right" if k not in ("device", "presets") else "left")
    for r in devices:
        t.add_row(*(str(r[k]) for k in ("device", "cores", "cpu", "gpu", "emc", "full", "powertrain",
                                        "fulcrum", "presets")))
    console.print(t)

    console.print(f"\n[bold]2. Profiling {args.modes} modes per node[/] (simulated Jetsons, full protocol: "
                  "settle, drop warm-up, 40 minibatches, 1 Hz power)")
    results = []
    with Progress(TextColumn("{task.description:<22}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=console, transient=False) as progress:
        for i, (node, (device, budget)) in enumerate(story.FLEET.items()):
            task = progress.add_task(f"{node} ({device})", total=args.modes)

            def tick(ev, task=task):
                if getattr(ev, "phase", "done") == "done":
                    progress.update(task, completed=ev.done)

            results.append(story.profile_node(node, device, budget, args.workload, args.modes,
                                              args.seed + i, progress=tick))

    rows = [_summary_row(r) for r in results]
    t = Table(title=f"3. Fastest profiled mode within each node's budget ({args.workload} training, batch 16)")
    for k in rows[0]:
        t.add_column(k, justify="left" if k in ("node", "device", "mode", "preset", "MAXN") else "right")
    for r in rows:
        t.add_row(*(str(v) for v in r.values()))
    console.print(t)
    console.print("MAXN and the nvpmodel preset an operator would pick for the budget (largest nominal "
                  "budget within it) are measured with the same protocol; '(over)' marks a measured power "
                  "above the node's budget. 'vs_preset': time of the chosen mode against that preset.")
    for r in results:
        for note in r.notes:
            console.print(f"[yellow]{r.node}: {note}")

    images = [report.plot_pareto(results, out / "pareto_fronts.png"),
              report.plot_mode_counts(devices, out / "mode_counts.png")]
    page = report.write_html(out, rows, devices, images)
    console.print(f"\nReport: {page} (plots: {', '.join(p.name for p in images)})")
    console.print(f"Done in {time.perf_counter() - t0:.1f} s.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
