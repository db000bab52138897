"""``edgetune node``: the registered nodes of a coordinator, and their budgets (docs/contract.md).

    edgetune node list [--json]                 id, device, budget, phase, mode, last heartbeat
    edgetune node get NODE_ID [--json]
    edgetune node budget NODE_ID WATTS          UpdateBudget: the leader re-plans, tuning jobs re-select

A node's *phase* is its liveness as the registry sees it: the agent's own state (``ready``,
``profiling``, ``running``) while it heartbeats, ``unavailable`` when its device refused to run, and
``lost`` once its heartbeat stopped. Its *mode* is the power mode its agent last reported. The
connection flags are :mod:`edgetune.cli.connection`'s.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import click

from edgetune import validation
from edgetune.cli.connection import Connection, connected, coordinator_options
from edgetune.cli.errors import InputError, reports_errors
from edgetune.store import NodeRecord
from edgetune.store.nodes import STATE_LOST, STATE_UNAVAILABLE


def node_phase(n: NodeRecord) -> str:
    if not n.live:
        return STATE_LOST
    if n.unavailable_reason is not None:
        return STATE_UNAVAILABLE
    return n.state or "ready"


def _mode(n: NodeRecord) -> dict[str, Any] | None:
    m = n.current_mode
    if not m:
        return None
    return {"cores": int(m.get("cores", 0)), "cpu_mhz": float(m.get("cpu_mhz", 0.0)),
            "gpu_mhz": float(m.get("gpu_mhz", 0.0)), "emc_mhz": float(m.get("emc_mhz", 0.0))}


def _iso(at_s: float | None) -> str | None:
    if not at_s:
        return None
    return datetime.fromtimestamp(at_s, tz=UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def node_json(n: NodeRecord) -> dict[str, Any]:
    """``{"id", "device", "power_budget_w", "phase", "mode", "last_heartbeat", "labels", "applied_revision",
    "refused_revision", "refused_reason", "unavailable_reason"}``."""
    return {"id": n.node_id, "device": n.device_model, "power_budget_w": n.power_budget_w, "phase": node_phase(n),
            "mode": _mode(n), "last_heartbeat": _iso(n.last_seen_s), "labels": dict(n.labels),
            "applied_revision": n.applied_revision, "refused_revision": n.refused_revision,
            "refused_reason": n.refused_reason, "unavailable_reason": n.unavailable_reason}


COLUMNS = ("NODE", "DEVICE", "BUDGET W", "PHASE", "MODE", "LAST HEARTBEAT")


def node_cells(n: NodeRecord) -> tuple[str, ...]:
    m = _mode(n)
    mode = "-" if m is None else f"{m['cores']}c/{m['cpu_mhz']:g}/{m['gpu_mhz']:g}/{m['emc_mhz']:g}"
    budget = "-" if n.power_budget_w is None else f"{n.power_budget_w:g}"
    return (n.node_id, n.device_model or "-", budget, node_phase(n), mode, _iso(n.last_seen_s) or "-")


def table(nodes: list[NodeRecord]) -> list[str]:
    rows = [COLUMNS, *(node_cells(n) for n in nodes)]
    widths = [max(len(r[i]) for r in rows) for i in range(len(COLUMNS))]
    return ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]


@click.group(name="node")
def command() -> None:
    """The coordinator's registered nodes: list them, show one, set a node's power budget."""


@command.command(name="list")
@coordinator_options
@click.option("--json", "as_json", is_flag=True, help="Print the nodes as a JSON list.")
@reports_errors
def list_nodes(conn: Connection, as_json: bool) -> None:
    """Every registered node: id, device, budget, phase, mode, last heartbeat."""
    with connected(conn) as client:
        nodes = sorted(client.nodes(), key=lambda n: n.node_id)
    if as_json:
        click.echo(json.dumps([node_json(n) for n in nodes], indent=2))
    else:
        for line in table(nodes):
            click.echo(line)


@command.command()
@click.argument("node_id")
@coordinator_options
@click.option("--json", "as_json", is_flag=True, help="Print the node as JSON.")
@reports_errors
def get(node_id: str, conn: Connection, as_json: bool) -> None:
    """One registered node (exit 2 when there is no such node, naming the ones there are)."""
    with connected(conn) as client:
        nodes = client.nodes()
    found = next((n for n in nodes if n.node_id == node_id), None)
    if found is None:
        known = ", ".join(sorted(n.node_id for n in nodes)) or "none"
        raise InputError(f"NODE_ID: no node {node_id!r} is registered (registered: {known})")
    if as_json:
        click.echo(json.dumps(node_json(found), indent=2))
    else:
        for line in table([found]):
            click.echo(line)
        if found.unavailable_reason:
            click.echo(f"unavailable: {found.unavailable_reason}")
        if found.refused_revision:
            click.echo(f"refused config revision {found.refused_revision}: {found.refused_reason}")


@command.command()
@click.argument("node_id")
@click.argument("watts", type=float)
@coordinator_options
@reports_errors
def budget(node_id: str, watts: float, conn: Connection) -> None:
    """Set NODE_ID's power budget to WATTS: the leader re-plans its round, and its tuning jobs select again
    (from their stored predictions; a node Failed for its old budget included)."""
    power_w = validation.power_budget_w(watts, "WATTS")
    with connected(conn) as client:
        now = client.update_node_budget(node_id, power_w)
    click.echo(f"{node_id}: power budget {'none' if now is None else format(now, 'g') + ' W'}")
