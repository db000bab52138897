"""``edgetune up``: the whole control plane on this machine, until Ctrl-C / SIGTERM (docs/contract.md).

    edgetune up --nodes orin-agx:2,xavier-agx,nano [--redis URL] [--ready-file F] [--workload-path DIR]

Runs embedded Redis (or ``--redis``), the estimator (local Ray; ``--no-ray``), the optimizer,
the coordinator (told both addresses) and one simulated profiler agent per node
(:mod:`edgetune.localrun.controlplane`: ids ``DEVICE-N``, budgets ``@WATTS`` or the
device's default), then fits a reference model per device model (``reference-DEVICE-train``,
for a job's ``reference_model``; ``--no-references`` skips it). ``--workload-path DIR`` lets the
agents import jobs' ``MODULE:FUNCTION`` workloads from ``DIR``, by name. Once all serve it prints the coordinator address and the node ids, and
``--ready-file`` gets ``{"coordinator": "HOST:PORT", "nodes": [...]}``. Ctrl-C or SIGTERM stops
every process (agents first: they restore their modes) and exits 0; a process failing to start,
or dying while up, stops the rest and exits 1 with its log tail.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import click

from edgetune.cli.errors import reports_errors
from edgetune.errors import FailedPrecondition
from edgetune.localrun.controlplane import (
    NODES_ALLOWED,
    ControlPlane,
    local_nodes,
    parse_nodes,
    start_control_plane,
)
from edgetune.localrun.processes import Supervisor, SupervisorError, catch_stop_signals, run_until_stopped

_WATCH_S = 0.5


def write_ready_file(path: Path, record: dict[str, object]) -> None:
    """Write ``record`` as JSON, whole: a reader polling for the file never sees half of it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(record) + "\n")
    os.replace(tmp, path)


@click.command(name="up")
@click.option("--nodes", "nodes_text", required=True, metavar="SPEC", help=f"Simulated nodes: {NODES_ALLOWED}.")
@click.option("--redis", "redis_url", default=None, metavar="URL",
              help="Use this Redis (default: an embedded one, in memory, stopped with the rest).")
@click.option("--ready-file", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help='Write {"coordinator": "HOST:PORT", "nodes": [...]} here once everything serves.')
@click.option("--log-dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Each process's log (default: a new temporary directory).")
@click.option("--no-ray", is_flag=True, help="The estimator runs its tasks one after another, without Ray.")
@click.option("--no-references", is_flag=True,
              help="Fit no reference models (jobs then name their own reference_model).")
@click.option("--seed", type=int, default=0, show_default=True, help="Simulated boards' seed (node i: SEED + i).")
@click.option("--log-level", default="INFO", show_default=True, help="The services' log level.")
@click.option("--workload-path", "workload_path", multiple=True, metavar="DIR",
              type=click.Path(exists=True, file_okay=False, path_type=Path),
              help="A directory the agents may import a job's MODULE:FUNCTION workload from (repeatable).")
@click.pass_context
@reports_errors
def command(ctx: click.Context, nodes_text: str, redis_url: str | None, ready_file: Path | None,
            log_dir: Path | None, no_ray: bool, no_references: bool, seed: int, log_level: str,
            workload_path: tuple[Path, ...]) -> None:
    """Run Redis, coordinator, estimator, optimizer and one simulated agent per node until Ctrl-C."""
    nodes = local_nodes(parse_nodes(nodes_text))  # bad --nodes: exit 2 before anything starts
    log_dir = log_dir if log_dir is not None else Path(tempfile.mkdtemp(prefix="edgetune-up-"))
    supervisor = Supervisor(log_dir)
    stop = catch_stop_signals()  # SIGINT / SIGTERM / SIGHUP set it; the loop below checks it
    plane: ControlPlane | None = None
    code = 0
    try:
        # The run id marks every process of this run (EDGETUNE_RUN): `Supervisor.strays` finds leftovers.
        click.echo(f"starting {len(nodes)} node(s); logs in {log_dir}; run {supervisor.run_id}", err=True)
        plane = run_until_stopped(lambda: start_control_plane(  # a signal while starting stops it at once
            log_dir, nodes, redis_url=redis_url, ray=not no_ray, seed=seed, log_level=log_level,
            references=not no_references, supervisor=supervisor, workload_path=workload_path), stop)
        _announce(plane, redis_url)
        if ready_file is not None:
            write_ready_file(ready_file, plane.ready_record())
        while not stop.wait(_WATCH_S):  # until a signal; a child dying on its own ends the run too
            supervisor.check_all_alive()
        click.echo(f"stopping ({stop.signal_name})", err=True)
    except (SupervisorError, FailedPrecondition) as exc:  # a process died / never served; Redis unreachable
        click.echo(f"Error: {exc}", err=True)
        code = 1
    except KeyboardInterrupt as exc:  # Interrupted: a signal while starting
        click.echo(f"stopping ({exc})", err=True)
    finally:
        try:
            supervisor.close()
        finally:
            stop.restore()
            if ready_file is not None:
                ready_file.unlink(missing_ok=True)  # the addresses in it are gone
    click.echo(f"stopped {len(supervisor.stopped)} process(es)", err=True)
    if code:
        ctx.exit(code)


def _announce(plane: ControlPlane, redis_url: str | None) -> None:
    cluster = plane.cluster
    click.echo(f"coordinator: {plane.coordinator_address}")
    click.echo(f"nodes: {' '.join(plane.node_ids)}")
    lines = [f"redis: {cluster.redis_url}{'' if redis_url else ' (embedded)'}"]
    if plane.estimator is not None:
        lines.append(f"estimator: {plane.estimator.address}")
    if plane.optimizer is not None:
        lines.append(f"optimizer: {plane.optimizer.address}")
    lines += [f"  {n.node_id}: {n.device}, budget {n.budget_w:g} W, agent {plane.agents[n.node_id].address}"
              for n in plane.nodes if n.node_id in plane.agents]
    lines += [f"reference model for {device}: {model_id} (a job file's reference_model)"
              for device, model_id in plane.references.items()]
    lines.append("ready; Ctrl-C stops everything")
    for line in lines:
        click.echo(line, err=True)
