"""``edgetune site budget WATTS``: the site's power budget (the sum over the nodes of a round).

The leader re-plans the last applied round under it (UpdateBudget without a node id). The
connection flags are :mod:`edgetune.cli.connection`'s.
"""

from __future__ import annotations

import click

from edgetune import validation
from edgetune.cli.connection import Connection, connected, coordinator_options
from edgetune.cli.errors import reports_errors


@click.group(name="site")
def command() -> None:
    """The site's budgets on a coordinator."""


@command.command()
@click.argument("watts", type=float)
@coordinator_options
@reports_errors
def budget(watts: float, conn: Connection) -> None:
    """Set the site's power budget to WATTS (the nodes of a round together); the last round is re-planned."""
    power_w = validation.power_budget_w(watts, "WATTS")
    with connected(conn) as client:
        site = client.update_site_budget(power_w)
    shown = "none" if site.site_power_budget_w is None else f"{site.site_power_budget_w:g} W"
    click.echo(f"site power budget {shown}" + (f", deadline {site.deadline_s:g} s" if site.deadline_s else ""))
