"""``edgetune plan``: plan one federated round from ``fleet.json`` (docs/contract.md)."""

from __future__ import annotations

import click
from rich.console import Console
from rich.table import Table as RichTable

from edgetune.cli.errors import reports_errors
from edgetune.cli.optimize import emit_json
from edgetune.planning import RoundPlan, load_fleet, plan_round


@click.command("plan")
@click.option("--fleet", "fleet_path", required=True, type=click.Path(dir_okay=False),
              help="fleet.json: objective, deadline_s?, site_power_budget_w?, nodes (tables relative to it).")
@click.option("--json", "as_json", is_flag=True, help="Print docs/contract.md's JSON.")
@reports_errors
def command(fleet_path, as_json) -> None:
    """Choose each node's mode and batch size for the next round (makespan or energy objective)."""
    plan = plan_round(load_fleet(fleet_path))
    if as_json:
        emit_json(plan.to_json())
    else:
        print_plan(plan)


def print_plan(plan: RoundPlan) -> None:
    console = Console()
    if not plan.feasible:
        console.print(f"[bold red]infeasible[/]: {plan.reason}")
        return
    table = RichTable(title=f"round plan ({plan.objective})")
    for name in ("node", "mode", "batch", "time s", "power W", "energy J"):
        table.add_column(name, justify="left" if name in ("node", "mode") else "right")
    for n in plan.nodes:
        table.add_row(n.id, n.mode.label() if n.mode else "-", str(n.batch_size), f"{n.time_s:.4g}",
                      f"{n.power_w:.4g}", f"{n.energy_j:.5g}")
    console.print(table)
    console.print(f"makespan [bold]{plan.makespan_s:.4g} s[/], energy [bold]{plan.energy_j:.6g} J[/], "
                  f"total power {plan.total_power_w:.4g} W")
    saved = plan.energy_saved_j
    if saved is not None and plan.fastest_energy_j:
        console.print(f"vs every node at its fastest option ({plan.fastest_makespan_s:.4g} s, "
                      f"{plan.fastest_energy_j:.6g} J): saves {saved:.6g} J "
                      f"({100 * saved / plan.fastest_energy_j:.1f} %)")
    if not plan.exact and plan.energy_j is not None and plan.energy_lower_bound_j is not None:
        console.print(f"[yellow]energy within {plan.energy_j - plan.energy_lower_bound_j:.3g} J "
                      f"of the optimum (certified bound)[/]")
