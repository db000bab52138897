"""``python -m edgetune.demo``: the edgetune suite on a simulated Jetson fleet, end to end.

Starts the control plane as ``edgetune up`` does (Redis, the estimator, the optimizer, the
coordinator told their addresses, one profiler agent per simulated Jetson, as processes on
loopback); then, through their gRPC APIs: discovers the devices, fits a reference model per
device model, and submits one TuningJob for the fleet, watching it while the coordinator's
reconcile loop profiles every node through its agent, transfers and predicts on the estimator,
selects on the optimizer, verifies the choice on the agent and applies it. The demo tunes
nothing itself: it then checks the job's predictions on modes the job never profiled, builds
Pareto fronts, plans a federated round on the coordinator, changes one budget mid-way, and tunes
concurrent training + inference on one node. Writes a report folder; shuts everything down; exit 0.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path

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

from edgetune.clients.calls import CallFailed
from edgetune.demo import concurrent, rounds, steps
from edgetune.demo.story import ROUND_NOTE, Options, Story, Tick, job_name
from edgetune.demo.suite import FLEET, start_suite
from edgetune.localrun.processes import (
    RUN_ENV,
    StopSignal,
    Supervisor,
    SupervisorError,
    catch_stop_signals,
    run_until_stopped,
)

LEFT = {"node", "device", "chosen mode", "MAXN", "preset", "mode", "process", "address", "log", "plan", "reference",
        "model", "kind", "backend", "state"}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m edgetune.demo", description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="reports/demo", help="report folder (default: reports/demo)")
    ap.add_argument("--modes", type=int, default=50,
                    help="modes the tuning job profiles per node for the transfer (its profiles; default 50)")
    ap.add_argument("--held-out", type=int, default=None,
                    help="modes the demo measures per node, never profiled by the job, to check the job's "
                         "predictions (they are also round options: measured modes; default 20; --quick 10)")
    ap.add_argument("--quick", action="store_true", help="small reference tables and short fits (for tests)")
    ap.add_argument("--nodes", default="", help="comma-separated node ids of the fleet to run (default: all: "
                                                + ", ".join(n.node_id for n in FLEET) + ")")
    ap.add_argument("--workload", default="mobilenetv3", help="training workload of the fleet (default mobilenetv3)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-ray", action="store_true",
                    help="the estimator service runs its fit / transfer tasks in-process instead of on a local Ray")
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

    def __init__(self, console: Console, stop: StopSignal) -> None:
        self.console = console
        self.stop = stop
        self.n = 0
        self.timings: dict[str, float] = {}

    def step(self, title: str, fn: Callable[..., str], *args, bars: dict[str, str] | None = None) -> str:
        self.stop.check()  # a stop signal ends the run between steps too (run_until_stopped: at once)
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
    if args.quick:  # small reference fits and short transfers (the coordinator's --transfer-epochs)
        options.reference_modes, options.reference_epochs, options.transfer_epochs = 400, 30, 100
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
    # This process is the demo's alone: mark it too, so anything it forks is found by the stray
    # check like the children's.
    os.environ[RUN_ENV] = sup.run_id
    stop = catch_stop_signals()  # the handler only sets it: the steps run on a worker, this thread waits
    suite = story = None
    page: Path | None = None  # the report, once this run wrote it
    rc, failure = 0, ""
    runner = Runner(console, stop)
    summary: dict = {"args": vars(args), "run_id": sup.run_id, "fleet": [vars(n) for n in fleet]}

    def run() -> None:
        """The demo's steps (on a worker thread: the main thread waits for them or for a stop signal)."""
        nonlocal story, page
        def start() -> str:
            nonlocal suite
            with console.status("starting processes ..."):
                suite = start_suite(sup, fleet, seed=args.seed, ray=not args.no_ray,
                                    transfer_epochs=options.transfer_epochs)
            return (f"{len(sup.children) + 1} processes serving on loopback; logs in {sup.log_dir}; "
                    f"estimation by the {suite.estimator.where}")

        runner.step("Start the control plane (as edgetune up: Redis, estimator, optimizer, coordinator, agents)",
                    start)
        assert suite is not None  # start() set it or raised
        _table(console, "Processes", suite.rows())
        story = Story(suite, options, fleet)
        runner.step("Discovery: GetDevice per agent, ListNodes on the coordinator", steps.discover, story)
        _table(console, "Fleet", steps.discovery_rows(story))
        runner.step("Reference models: ResNet18 per device model (Estimator.Fit, reference-DEVICE-train)",
                    steps.fit_references, story, bars={"fit": "fit reference models"})
        name = job_name(options)
        runner.step(f"Tuning job {name} (SubmitTuningJob, WatchTuningJob): the coordinator profiles "
                    f"{options.modes} modes per node through its agent, transfers + predicts (estimator), selects "
                    f"(optimizer, power + {story.tuning.z:.3f} σ ≤ budget, risk {story.tuning.risk:g}), verifies "
                    "and applies", steps.run_job, story, bars={n.node_id: f"{n.node_id} ({n.device})" for n in fleet})
        runner.step(f"Check: {options.held_out} modes per node the job never profiled, MAXN and the operator's "
                    "preset measured on the agents; the job's models predict them", steps.check, story,
                    bars={"check": "nodes checked"})
        _table(console, f"Tuning job {name}", steps.job_rows(story))
        _table(console, "Predictors (the job's transferred models)", steps.estimation_rows(story))
        runner.step("Pareto fronts of the predicted modes (Optimizer.ParetoFront)", steps.pareto, story)
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
                   "after the budget change, on the modes measured on each node (vs all at their fastest)."),
                  (report.plot_savings(story, out / "chosen_vs_baselines.png"),
                   "Measured time per minibatch and power: chosen mode vs MAXN vs the operator's preset.")]
        acc = steps.accuracy(story)
        headline = (f"{sum(r.within_budget for r in story.nodes.values())}/{len(story.nodes)} nodes run a verified "
                    f"mode within budget; held-out MAPE time {acc['time_mape']:.1f} %, power {acc['power_mape']:.1f} %.")
        assert story.job is not None
        summary.update({"estimator": suite.estimator.where, "nodes": summary_rows, "accuracy": acc,
                        "job": story.job.to_json(),
                        "rounds": [{"plan": rr.label, "objective": rr.objective, "makespan_s": rr.plan.makespan_s,
                                    "energy_j": rr.plan.energy_j, "deadline_s": rr.deadline_s,
                                    "fastest_energy_j": rr.fastest_energy_j, "round_id": rr.round_id}
                                   for rr in story.rounds],
                        "round_nodes": rounds.round_rows(story), "budget_change": story.budget_change,
                        "concurrent": story.concurrent, "processes": suite.rows(), "step_seconds": runner.timings,
                        "images": [p.name for p, _ in images], "headline": headline})
        report.write_json(out / "summary.json", summary)
        sections = [
            ("Per-node choice", "Measured on the agent with the same protocol as MAXN and the operator's preset.",
             report.summary_table(summary_rows)),
            ("Tuning job", "Run by the coordinator's reconcile loop (GetTuningJob as the job ended); measured: the "
                           "choice as the coordinator verified it on the agent.", steps.job_rows(story)),
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
        runner.stop.check()  # never a report after a stop
        page = report.write_html(out, sections, images, headline)
        console.print(f"Report: [bold]{page}[/] ({', '.join(p.name for p, _ in images)}, summary.json)")
        console.print(f"[bold green]{headline}")

    try:
        run_until_stopped(run, stop)
    except KeyboardInterrupt as exc:
        rc, failure = 130, f"interrupted ({exc or 'Ctrl-C'})"
    except CallFailed as exc:
        rc, failure = 1, f"a service call failed: {exc}"
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
        stop.restore()
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
        from edgetune.demo import report  # deferred: matplotlib

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
