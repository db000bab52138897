"""``python -m edgetune.demo``: the edgetune suite on a simulated Jetson fleet, end to end.

Starts Redis, the coordinator, the estimator (when installed), the optimizer and one profiler
agent per simulated Jetson as processes on loopback; then, through their gRPC APIs: discovers
the devices, profiles each node, transfers a reference predictor to every node and predicts all
its modes, builds Pareto fronts, picks a mode per node under its power budget and verifies it
on the agent, plans a federated round, changes one budget mid-way, and tunes concurrent
training + inference on one node. Each node is tuned by the library's ``NodeTuner``
(:mod:`edgetune.tuning`) through gRPC adapters: the same workflow and policy ``edgetune tune``
runs on a local device. Writes a report folder; shuts everything down; exit 0.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path

import grpc
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table

from edgetune.coordination.processes import RUN_ENV, Supervisor, SupervisorError, install_signal_handlers
from edgetune.demo import concurrent, rounds, steps
from edgetune.demo.story import ROUND_NOTE, Options, Story, Tick
from edgetune.demo.suite import FLEET, start_suite

LEFT = {"node", "device", "chosen mode", "MAXN", "preset", "mode", "process", "address", "log", "plan", "reference",
        "model", "kind", "backend", "state"}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m edgetune.demo", description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="reports/demo", help="report folder (default: reports/demo)")
    ap.add_argument("--modes", type=int, default=50, help="modes profiled per node for the transfer (default 50)")
    ap.add_argument("--held-out", type=int, default=None,
                    help="extra modes profiled per node to check (and calibrate) the predictions (default 20; --quick 10)")
    ap.add_argument("--quick", action="store_true", help="small reference tables and short fits (for tests)")
    ap.add_argument("--nodes", default="", help="comma-separated node ids of the fleet to run (default: all: "
                                                + ", ".join(n.node_id for n in FLEET) + ")")
    ap.add_argument("--workload", default="mobilenetv3", help="training workload of the fleet (default mobilenetv3)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-ray", action="store_true",
                    help="the estimator service runs its fit / transfer tasks in-process instead of on a local Ray")
    ap.add_argument("--local-estimator", action="store_true",
                    help="use the estimation library in-process even when the estimator service is installed")
    args = ap.parse_args(argv)
    if args.modes < 5:
        ap.error("--modes: at least 5 (the transfer needs a few measured modes)")
    return args


def _table(console: Console, title: str, rows: list[dict]) -> None:
    if not rows:
        return
    t = Table(title=title, title_justify="left", title_style="bold")
    for k in rows[0]:
        t.add_column(str(k), justify="left" if k in LEFT else "right", overflow="fold")
    for r in rows:
        t.add_row(*(str(v) for v in r.values()))
    console.print(t)


def _progress(console: Console) -> Progress:
    return Progress(SpinnerColumn(), TextColumn("{task.description:<26}"), BarColumn(), MofNCompleteColumn(),
                    TimeElapsedColumn(), console=console, transient=False)


def _ticker(progress: Progress, labels: dict[str, str]) -> Tick:
    tasks: dict[str, TaskID] = {}

    def tick(name: str, done: int, total: int) -> None:
        if name not in tasks:
            tasks[name] = progress.add_task(labels.get(name, name), total=total or None)
        progress.update(tasks[name], completed=done, total=total or None)

    return tick


class Runner:
    """Numbered steps with a headline each and its duration."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.n = 0
        self.timings: dict[str, float] = {}

    def step(self, title: str, fn: Callable[..., str], *args, bars: dict[str, str] | None = None) -> str:
        self.n += 1
        self.console.rule(f"[bold]{self.n}. {title}", align="left")
        t0 = time.perf_counter()
        if bars is not None:
            with _progress(self.console) as progress:
                headline = fn(*args, _ticker(progress, bars))
        else:
            headline = fn(*args)
        dt = time.perf_counter() - t0
        self.timings[title] = round(dt, 2)
        self.console.print(f"[green]✔[/] {headline} [dim]({dt:.1f} s)[/]")
        return headline


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    console = Console(width=None if sys.stdout.isatty() else 170)
    t0 = time.perf_counter()
    fleet = FLEET
    if args.nodes:
        wanted = [s.strip() for s in args.nodes.split(",") if s.strip()]
        unknown = sorted(set(wanted) - {n.node_id for n in FLEET})
        if unknown:
            console.print(f"[red]error:[/] --nodes: unknown node {', '.join(unknown)} "
                          f"(known: {', '.join(n.node_id for n in FLEET)})")
            return 2
        fleet = tuple(n for n in FLEET if n.node_id in wanted)
    options = Options(workload=args.workload, modes=args.modes, seed=args.seed,
                            held_out=args.held_out if args.held_out is not None else (10 if args.quick else 20))
    if args.quick:
        options.reference_modes, options.reference_epochs = 1000, 40
    ids = {n.node_id for n in fleet}
    orins = [n.node_id for n in fleet if n.device == "orin-agx"]
    do_concurrent = bool(orins)
    if orins and options.concurrent_node not in ids:
        options.concurrent_node = orins[0]
    if options.budget_change[0] not in ids:  # a node of the reduced fleet, not the concurrent one
        other = next((n for n in fleet if n.node_id != options.concurrent_node), fleet[0])
        options.budget_change = (other.node_id, round(other.budget_w * 0.75, 1))

    console.rule("[bold]edgetune demo: a power mode per Jetson, under each node's budget, through the services")
    sup = Supervisor(out / "logs")
    # This process is the demo's alone: mark it too, so what it forks (an in-process Ray with
    # --local-estimator) is found by the stray check like the children's.
    os.environ[RUN_ENV] = sup.run_id
    restore_signals = install_signal_handlers()
    suite = story = None
    page: Path | None = None  # the report, once this run wrote it
    rc, failure = 0, ""
    runner = Runner(console)
    summary: dict = {"args": vars(args), "run_id": sup.run_id, "fleet": [vars(n) for n in fleet]}
    try:
        def start() -> str:
            nonlocal suite
            with console.status("starting processes ...") as status:
                suite = start_suite(sup, fleet, seed=args.seed,
                                    use_service=False if args.local_estimator else None, ray=not args.no_ray,
                                    on_started=lambda name, c: status.update(f"{name} is serving ..."))
            return (f"{len(sup.children) + 1} processes serving on loopback; logs in {sup.log_dir}; "
                    f"estimation by the {suite.estimator.where}")

        runner.step("Start the suite", start)
        assert suite is not None  # start() set it or raised
        _table(console, "Processes", suite.rows())
        story = Story(suite, options, fleet)
        runner.step("Discovery: GetDevice per agent, ListNodes on the coordinator", steps.discover, story)
        _table(console, "Fleet", steps.discovery_rows(story))
        runner.step(f"Profiling {options.modes} + {options.held_out} modes per node (Profile streams, "
                    f"{options.workload} training, batch {options.batch_size})",
                    steps.profile_fleet, story, bars={n.node_id: f"{n.node_id} ({n.device})" for n in fleet})
        runner.step("Estimation: ResNet18 reference per device model → transfer → predict every mode "
                    f"({suite.estimator.where})", steps.estimate, story,
                    bars={"fit": "fit reference models", "transfer": "transfer + predict per node"})
        _table(console, "Predictors", steps.estimation_rows(story))
        runner.step("Pareto fronts of the predicted modes (Optimizer.ParetoFront)", steps.pareto, story)
        runner.step(f"Safe selection under each budget (Optimizer.Select, power + {story.tuning.z:.3f} σ ≤ budget, risk {story.tuning.risk:g}, σ "
                    "widened by the held-out error), "
                    f"verified on the agent (at most {story.tuning.max_attempts} choices)", steps.select_and_verify, story,
                    bars={n.node_id: f"verify {n.node_id}" for n in fleet})
        summary_rows = steps.summary_rows(story)
        from edgetune.demo import report  # matplotlib only once there is something to draw

        _table(console, f"Per-node choice ({options.workload} training, batch {options.batch_size}; all "
                        "columns measured on the agent with the same protocol)", report.summary_table(summary_rows))
        console.print("[dim]MAXN: every core and clock at its top. preset: the nvpmodel preset an operator would "
                      "pick (largest nominal budget within the node's); OVER: measured above the node's budget.[/]")
        for r in story.nodes.values():
            for note in r.notes:
                console.print(f"[yellow]{r.node.node_id}: {note}")
        runner.step("Federated round planned by the coordinator (PlanRound: makespan, energy)", rounds.plan_rounds,
                    story)
        console.print(f"[dim]{ROUND_NOTE}[/]")
        bc_node, bc_w = options.budget_change
        runner.step(f"Budget change mid-way: UpdateBudget {bc_node} → {bc_w:g} W, re-plan, WatchConfig",
                    rounds.change_budget, story)
        _table(console, "Round plans (per node: mode, batch, round time, power, energy)", rounds.round_rows(story))
        bc = story.budget_change
        _table(console, "Config revisions per node (GetNodeConfig) around the budget change",
               [{"node": n, "before": bc["revisions_before"][n], "after": bc["revisions_after"][n],
                 "bumped": "yes" if n in bc["bumped"] else ""} for n in bc["revisions_before"]])
        if do_concurrent:
            runner.step(f"Concurrent training + inference on {options.concurrent_node} (GMD search session: "
                        "StartSearch / Ask / Tell / EndSearch)", concurrent.concurrent_search, story,
                        bars={"search": "profiled points"})

        console.rule("[bold]Report")
        images = [(report.plot_pareto(story, out / "pareto_fronts.png"),
                   "Per node: predicted modes (grey), the optimizer's predicted Pareto front (blue), measured points "
                   "(black: transfer set, orange rings: held out), budget (red), MAXN (▲), operator preset (■), "
                   "chosen mode predicted (☆) and measured (★)."),
                  (report.plot_accuracy(story, out / "predicted_vs_measured.png"),
                   "Predicted vs measured time and power on held-out modes, with MAPE; stars: the chosen modes."),
                  (report.plot_timeline(story, out / "round_timeline.png"),
                   "Gantt of one federated round under the makespan and energy objectives, and the energy plan "
                   "after the budget change."),
                  (report.plot_savings(story, out / "chosen_vs_baselines.png"),
                   "Measured time per minibatch and power: chosen mode vs MAXN vs the operator's preset.")]
        acc = steps.accuracy(story)
        headline = (f"{sum(r.within_budget for r in story.nodes.values())}/{len(story.nodes)} nodes run a verified "
                    f"mode within budget; held-out MAPE time {acc['time_mape']:.1f} %, power {acc['power_mape']:.1f} %.")
        summary.update({"estimator": suite.estimator.where, "nodes": summary_rows, "accuracy": acc,
                        "rounds": [{"plan": rr.label, "objective": rr.objective, "makespan_s": rr.response.makespan_s,
                                    "energy_j": rr.response.energy_j, "deadline_s": rr.deadline_s,
                                    "fastest_energy_j": rr.fastest_energy_j, "round_id": rr.response.round_id}
                                   for rr in story.rounds],
                        "round_nodes": rounds.round_rows(story), "budget_change": story.budget_change,
                        "concurrent": story.concurrent, "processes": suite.rows(), "step_seconds": runner.timings,
                        "images": [p.name for p, _ in images], "headline": headline})
        report.write_json(out / "summary.json", summary)
        sections = [
            ("Per-node choice", "Measured on the agent with the same protocol as MAXN and the operator's preset.",
             report.summary_table(summary_rows)),
            ("Fleet", "GetDevice per agent; state from the coordinator's ListNodes.", steps.discovery_rows(story)),
            ("Predictors", f"By the {suite.estimator.where}.", steps.estimation_rows(story)),
            ("Round plans", "Coordinator PlanRound; the energy plan was applied, then re-planned after the budget "
                            "change. " + ROUND_NOTE, rounds.round_rows(story)),
            ("Budget change", "UpdateBudget, then revisions from GetNodeConfig and the config from WatchConfig.",
             [{k: v for k, v in bc.items() if not k.startswith("revisions") and k != "checks"}]),
            ("Concurrent training + inference", "GMD search session on the optimizer; points profiled on the agent.",
             [story.concurrent] if story.concurrent else []),
            ("Processes", "Started and stopped by the demo's supervisor.", suite.rows()),
        ]
        page = report.write_html(out, sections, images, headline)
        console.print(f"Report: [bold]{page}[/] ({', '.join(p.name for p, _ in images)}, summary.json)")
        console.print(f"[bold green]{headline}")
    except KeyboardInterrupt as exc:
        rc, failure = 130, f"interrupted ({exc or 'Ctrl-C'})"
    except grpc.RpcError as exc:
        rc, failure = 1, f"a service call failed: {exc.code().name}: {exc.details()}"
    except SupervisorError as exc:
        rc, failure = 1, f"a service did not start: {exc}"
    except Exception as exc:  # noqa: BLE001 - any failure: say what, shut down, non-zero exit
        rc, failure = 1, f"{type(exc).__name__}: {exc}"
        traceback.print_exc(file=sys.stderr)
    finally:
        if failure:
            console.print(f"[bold red]demo failed:[/] {failure}")
            dead = [c for c in sup.children if not c.alive()]
            for c in dead:
                console.print(f"[red]{c.name} exited with {c.proc.returncode}; see {c.log_path}")
        with console.status("shutting down (SIGTERM: agents restore their power modes) ..."):
            if suite is not None:
                suite.close()
            else:
                sup.close()
        restore_signals()
    strays = sup.strays()
    _table(console, "Shutdown", [{"process": n, "pid": pid, "exit code": code, "stopped by": how}
                                 for n, pid, code, how in sup.stopped])
    for name, pid, code, how in sup.stopped:
        if code not in (0, None):
            console.print(f"[yellow]{name} (pid {pid}) exited with code {code} after {how}; its log: "
                          f"{sup.log_dir / (name + '.log')}")
    if strays:
        console.print(f"[bold red]stray processes remain: {strays}")
        rc = rc or 1
    else:
        console.print(f"All {len(sup.stopped)} processes stopped; no stray process remains "
                      f"(checked /proc for this run's marker).")
    total = time.perf_counter() - t0
    if (out / "summary.json").exists() and not failure:
        summary.update({"shutdown": [{"process": n, "pid": pid, "exit_code": code, "stopped_by": how}
                                     for n, pid, code, how in sup.stopped],
                        "stray_pids": strays, "total_s": round(total, 1), "exit_code": rc})
        from edgetune.demo import report

        report.write_json(out / "summary.json", summary)
    # Say what this run wrote, not where a report would be: a stop before the report step writes none.
    if page is not None:
        console.print(f"{'Done' if rc == 0 else 'Stopped'} in {total:.0f} s. Report: {page.resolve()}")
    else:
        console.print(f"Stopped in {total:.0f} s before the report was written; the services' logs are in "
                      f"{sup.log_dir.resolve()}")
    return rc


if __name__ == "__main__":
    sys.exit(main())
