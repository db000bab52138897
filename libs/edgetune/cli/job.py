"""``edgetune job``: tuning jobs on a coordinator (docs/contract.md).

    edgetune job submit FILE.yaml --coordinator ADDR [--wait] [--json]
    edgetune job get NAME [--json]      edgetune job list [--json]
    edgetune job watch NAME             edgetune job cancel NAME

The job file is checked against ``job.schema.json`` before anything is sent (an unknown key is
an error naming it, exit 2; :mod:`edgetune.tuning.jobfile`). ``--json`` prints
:meth:`TuningJobView.to_json <edgetune.tuning.jobs.TuningJobView.to_json>`. ``watch`` (and ``submit --wait`` without
``--json``) shows each node's progress live: a table redrawn in place on a terminal, otherwise
one plain line per node change (as :mod:`edgetune.cli.progress` does off a TTY). ``--wait`` exits
0 when the job Succeeded, 1 when it Failed or was Cancelled.

Server errors: INVALID_ARGUMENT, NOT_FOUND, ALREADY_EXISTS and FAILED_PRECONDITION exit 2 with
the server's message; UNAVAILABLE (and a deadline passing) exits 1 naming the address.
"""

from __future__ import annotations

import functools
import json
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar, cast

import click

from edgetune.cli.errors import InputError, reports_errors
from edgetune.clients.calls import CallFailed, Status
from edgetune.clients.coordinator import CoordinatorClient
from edgetune.identity import ClientSecurity
from edgetune.tuning.jobfile import load_job_file
from edgetune.tuning.jobs import JobPhase, NodePhase, NodeStatus, TuningJobView

F = TypeVar("F", bound=Callable[..., Any])
#: Server answers that mean the request was wrong: exit 2, like a bad option.
INPUT_CODES = (Status.INVALID_ARGUMENT, Status.NOT_FOUND, Status.ALREADY_EXISTS, Status.FAILED_PRECONDITION,
               Status.OUT_OF_RANGE)
UNREACHABLE_CODES = (Status.UNAVAILABLE, Status.DEADLINE_EXCEEDED)


class ServerError(click.ClickException):
    """The coordinator could not be reached or failed the call: exit 1."""

    exit_code = 1

    def format_message(self) -> str:
        return self.message


def rpc_error(exc: CallFailed, address: str) -> click.ClickException:
    """The CLI's form of a failed call (see the module doc for the exit codes)."""
    details = exc.details or exc.code.value
    if exc.code in INPUT_CODES:
        return InputError(details)
    if exc.code in UNREACHABLE_CODES:
        return ServerError(f"coordinator {address} unavailable: {details}")
    return ServerError(f"coordinator {address}: {exc.code.value}: {details}")


def watch_until_done(client: CoordinatorClient, name: str, after_revision: int = 0,
                     timeout_s: float | None = None) -> Iterator[TuningJobView]:
    """Every change of the job until it is done (or ``timeout_s`` passes: DEADLINE_EXCEEDED)."""
    with client.watch_job(name, after_revision, timeout_s=timeout_s) as updates:
        for job in updates:
            yield job
            if job.phase.done:
                return


@contextmanager
def connected(address: str, security: ClientSecurity) -> Iterator[CoordinatorClient]:
    client = CoordinatorClient.connect(address, security)  # TLS when asked; every call carries the token
    try:
        yield client
    except CallFailed as exc:
        raise rpc_error(exc, address) from None
    finally:
        client.close()


def coordinator_options(fn: F) -> F:
    """--coordinator, --token and the TLS flags; the command gets ``address`` and ``security``."""

    command = fn

    @functools.wraps(command)
    def with_security(*args: Any, token: str | None, tls_ca: str | None, tls_cert: str | None,
                      tls_key: str | None, tls_server_name: str | None, **kwargs: Any) -> Any:
        security = ClientSecurity(ca=tls_ca or "", cert=tls_cert or "", key=tls_key or "", token=token or "",
                                  server_name=tls_server_name or "")
        return command(*args, security=security, **kwargs)

    fn = cast(F, with_security)
    fn = click.option("--tls-server-name", envvar="EDGETUNE_TLS_SERVER_NAME", default=None, metavar="NAME",
                      help="Name the coordinator's certificate carries when the address's host is not it.")(fn)
    fn = click.option("--tls-key", envvar="EDGETUNE_TLS_KEY", default=None, metavar="PEM",
                      help="Private key of --tls-cert.")(fn)
    fn = click.option("--tls-cert", envvar="EDGETUNE_TLS_CERT", default=None, metavar="PEM",
                      help="Client certificate (mTLS).")(fn)
    fn = click.option("--tls-ca", envvar="EDGETUNE_TLS_CA", default=None, metavar="PEM",
                      help="Verify the coordinator's TLS certificate with this CA (turns TLS on).")(fn)
    fn = click.option("--token", envvar="EDGETUNE_TOKEN", default=None, metavar="TOKEN",
                      help="Bearer token (default: $EDGETUNE_TOKEN).")(fn)
    fn = click.option("--coordinator", "address", envvar="EDGETUNE_COORDINATOR", required=True, metavar="HOST:PORT",
                      help="Coordinator address (default: $EDGETUNE_COORDINATOR).")(fn)
    return fn


# --------------------------------------------------------------------------- rendering


def _num(value: float | None, fmt: str = ".1f") -> str:
    return "-" if value is None else format(value, fmt)


def _mode(node: NodeStatus) -> str:
    m = node.mode
    return "-" if m is None else f"{int(m[0])}c/{m[1]:g}/{m[2]:g}/{m[3]:g}"


COLUMNS = ("NODE", "DEVICE", "PHASE", "PROFILED", "MODE", "BS", "BUDGET W", "PRED MS", "PRED W", "UPPER W",
           "MEAS MS", "MEAS W", "REASON")


def node_cells(node: NodeStatus, profiles: int) -> tuple[str, ...]:
    return (node.node_id, node.device, node.phase, f"{node.profiled}/{profiles}", _mode(node),
            str(node.batch_size) if node.batch_size else "-", _num(node.power_budget_w, "g"),
            _num(node.predicted_time_ms), _num(node.predicted_power_w), _num(node.predicted_power_upper_w),
            _num(node.measured_time_ms), _num(node.measured_power_w), node.reason)


def table_lines(job: TuningJobView) -> list[str]:
    """The job as aligned plain-text columns (off a terminal, and ``get`` without ``--json``)."""
    rows = [COLUMNS, *(node_cells(n, job.spec.profiles) for n in job.nodes)]
    widths = [max(len(r[i]) for r in rows) for i in range(len(COLUMNS))]
    out = [f"job {job.spec.name}: {job.phase}"]
    out += ["  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    return out


def node_line(job: TuningJobView, node: NodeStatus) -> str:
    """One plain progress line: ``mnv3-train orin-agx-1: Profiling 5/12``, with the choice once made."""
    line = f"{job.spec.name} {node.node_id}: {node.phase} {node.profiled}/{job.spec.profiles}"
    if node.mode is not None:
        line += f" mode {_mode(node)} bs={node.batch_size or '-'} predicted {_num(node.predicted_power_w)} W"
    if node.measured_power_w is not None:
        line += f" measured {_num(node.measured_power_w)} W / budget {_num(node.power_budget_w, 'g')} W"
    if node.reason:
        line += f" ({node.reason})"
    return line


def _rich_table(job: TuningJobView) -> Any:
    from rich.table import Table

    rows = [node_cells(node, job.spec.profiles) for node in job.nodes]
    table = Table(title=f"job {job.spec.name}: {job.phase}")
    for i, column in enumerate(COLUMNS):
        # On a narrow terminal the numbers give way; the node, its phase and progress stay whole.
        whole = column in ("NODE", "PHASE", "PROFILED")
        table.add_column(column, no_wrap=whole, min_width=max([len(r[i]) for r in rows], default=0) if whole else None)
    for row in rows:
        table.add_row(*row)
    return table


def follow(jobs: Iterator[TuningJobView], *, stream: Any = None) -> TuningJobView | None:
    """Show each job update until the stream ends; returns the last job seen.

    On a terminal a rich table redrawn in place; otherwise one line per node whose state changed.
    """
    out = stream if stream is not None else sys.stdout
    last: TuningJobView | None = None
    if out.isatty():
        from rich.console import Console
        from rich.live import Live

        with Live(console=Console(file=out), auto_refresh=False) as live:
            for job in jobs:
                last = job
                live.update(_rich_table(job), refresh=True)
        return last
    shown: dict[str, str] = {}
    phase: JobPhase | None = None
    for job in jobs:
        last = job
        for node in job.nodes:
            line = node_line(job, node)
            if shown.get(node.node_id) != line:
                shown[node.node_id] = line
                print(line, file=out, flush=True)
        if job.phase != phase:
            phase = job.phase
            print(f"{job.spec.name}: {job.phase}", file=out, flush=True)
    return last


def show(job: TuningJobView, as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps(job.to_json(), indent=2))
    else:
        for line in table_lines(job):
            click.echo(line)


def wait_done(client: CoordinatorClient, job: TuningJobView, *, timeout_s: float | None, quiet: bool) -> TuningJobView:
    """Follow ``job`` until it is done; a dropped stream (a replica stopping) is reopened from the last revision."""
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    last = job
    while not last.phase.done:
        remaining = None if deadline is None else max(0.1, deadline - time.monotonic())
        try:
            updates = watch_until_done(client, job.spec.name, last.revision, remaining)
            seen = follow(updates, stream=sys.stderr) if not quiet else _last(updates)
        except CallFailed as exc:
            if exc.code != Status.UNAVAILABLE or (deadline is not None and time.monotonic() > deadline):
                raise
            time.sleep(1.0)
            seen = None
        if seen is not None:
            last = seen
        elif deadline is not None and time.monotonic() > deadline:
            raise ServerError(f"job {job.spec.name} not done within {timeout_s:g} s")
    return last


def _last(jobs: Iterator[TuningJobView]) -> TuningJobView | None:
    last = None
    for last in jobs:  # noqa: B007 - only the last one matters
        pass
    return last


# --------------------------------------------------------------------------- commands


@click.group(name="job")
def command() -> None:
    """Tuning jobs: declare a workload's nodes and budgets; the coordinator tunes every node."""


@command.command()
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@coordinator_options
@click.option("--wait", is_flag=True, help="Follow the job until it is done (exit 1 unless it Succeeded).")
@click.option("--timeout-s", type=float, default=None, help="With --wait: give up after this long (exit 1).")
@click.option("--json", "as_json", is_flag=True, help="Print the job as JSON.")
@reports_errors
def submit(file: Path, address: str, security: ClientSecurity, wait: bool, timeout_s: float | None, as_json: bool) -> None:
    """Submit the job in FILE.yaml (schema-checked first)."""
    spec = load_job_file(file)
    with connected(address, security) as client:
        job = client.submit_job(spec)
        if wait:
            job = wait_done(client, job, timeout_s=timeout_s, quiet=as_json)
    show(job, as_json)
    if wait and job.phase != JobPhase.SUCCEEDED:
        raise click.exceptions.Exit(1)


def _one_job_command(verb: str, doc: str, call: Callable[[CoordinatorClient, str], TuningJobView]) -> click.Command:
    """``edgetune job VERB NAME [--json]``: ``call(client, name)``, then the job it returns is printed."""
    @command.command(name=verb, help=doc)
    @click.argument("name")
    @coordinator_options
    @click.option("--json", "as_json", is_flag=True, help="Print the job as JSON.")
    @reports_errors
    def run(name: str, address: str, security: ClientSecurity, as_json: bool) -> None:
        with connected(address, security) as client:
            job = call(client, name)
        show(job, as_json)
    return run


get = _one_job_command("get", "Show one job: its phase and every node's progress and choice.",
                       lambda client, name: client.job(name))
cancel = _one_job_command("cancel", "Cancel a job: the coordinator stops working on its nodes.",
                          lambda client, name: client.cancel_job(name))


@command.command(name="list")
@coordinator_options
@click.option("--json", "as_json", is_flag=True, help="Print the jobs as a JSON list.")
@reports_errors
def list_jobs(address: str, security: ClientSecurity, as_json: bool) -> None:
    """List the jobs with their phases."""
    with connected(address, security) as client:
        jobs = client.jobs()
    if as_json:
        click.echo(json.dumps([j.to_json() for j in jobs], indent=2))
        return
    for j in jobs:
        applied = sum(n.phase == NodePhase.APPLIED for n in j.nodes)
        click.echo(f"{j.spec.name}  {j.phase}  {applied}/{len(j.nodes)} nodes applied")


@command.command()
@click.argument("name")
@coordinator_options
@reports_errors
def watch(name: str, address: str, security: ClientSecurity) -> None:
    """Follow a job's progress per node until it is done (Ctrl-C stops watching, not the job)."""
    with connected(address, security) as client:
        follow(watch_until_done(client, name))
