"""``edgetune optimize``: pick a mode (and batch size) from a table.

- ``select``    least time (or power, or energy) within a power budget or a budget sweep
- ``joint``     Ahmed et al.'s joint batch size and mode selection under a power cap
- ``frontier``  which modes to profile next so that budget selections hold (frontier sampling)

JSON output is exactly docs/contract.md's; an infeasible request is an answer
(``{"feasible": false, "reason": …}``, exit 0), bad input exits 2 naming the field.
"""

from __future__ import annotations

import json

import click
from rich.console import Console
from rich.table import Table as RichTable

from edgetune import validation
from edgetune.base.mode import MODE_FIELDS, PowerMode
from edgetune.cli.errors import checked, reports_errors
from edgetune.errors import InvalidArgument
from edgetune.optimization.frontier import ABOVE_W, BELOW_W, next_frontier_modes
from edgetune.optimization.joint import joint_select
from edgetune.optimization.joint_tables import lut_from_profiles, read_efficiency, read_lut
from edgetune.optimization.select import Candidates, Selection, make_selector
from edgetune.tables import parse_table, read_mode_table, write_table

#: What ``select`` and ``frontier`` need of a table: ``estimate predict``'s output as it is
#: (``batch_size`` optional: a table without it holds one batch size, reported as null).
OPTION_COLUMNS = (*MODE_FIELDS, "time_ms", "power_w")


def read_options(path: str):
    return parse_table(path, OPTION_COLUMNS)


def emit_json(obj) -> None:
    click.echo(json.dumps(obj, indent=2))


@click.group("optimize")
def command() -> None:
    """Choose power modes and batch sizes from profile tables."""


# --------------------------------------------------------------------------- select


def selection_json(table, sel: Selection, bounded: bool) -> dict:
    """docs/contract.md's object; ``power_upper_w`` (the bound the budget was checked against, as
    ``Optimizer.Select`` reports it) when the selection was std-aware (``bounded``)."""
    if not sel.feasible:
        return {"feasible": False, "reason": _reason(table, sel)}
    row = table.rows[sel.index]
    out = {"feasible": True, "mode": {k: row[k] for k in MODE_FIELDS}, "batch_size": row.get("batch_size"),
           "time_ms": row["time_ms"], "power_w": row["power_w"]}
    if bounded:
        out["power_upper_w"] = sel.power_bound_w
    return out


@command.command("select")
@click.option("--table", "table_path", required=True, type=click.Path(dir_okay=False),
              help="Profile table (CSV) of the options: modes × batch sizes with time_ms and power_w.")
@click.option("--power-budget", "power_budget", default=None, metavar="W|A:B[:STEP]",
              help="Power budget W, or a sweep A:B[:STEP] (e.g. 17:50:1, inclusive; step 1 by default).")
@click.option("--time-budget-ms", type=float, default=None, callback=checked(validation.time_budget_ms),
              help="Optional per-minibatch time budget (ms).")
@click.option("--objective", type=click.Choice(["time", "power", "energy"]), default="time", show_default=True,
              help="What to minimise within the budgets.")
@click.option("--risk", type=float, default=None, callback=checked(validation.risk),
              help="The probability that the choice's power exceeds the budget: power_w + z(1-risk)·power_std_w "
                   "must fit it (0 < risk <= 0.5, e.g. 0.05; needs a power_std_w column). The JSON then "
                   "reports that bound as power_upper_w.")
@click.option("--json", "as_json", is_flag=True, help="Print docs/contract.md's JSON.")
@reports_errors
def select_cmd(table_path, power_budget, time_budget_ms, objective, risk, as_json) -> None:
    """Choose the option with the least time whose power fits the budget."""
    if power_budget is not None:  # before reading the table: a bad budget is named first
        validation.budget_sweep(power_budget, "--power-budget")
    table = read_options(table_path)
    emit_selection(table, power_budget, time_budget_ms, objective, risk, as_json)


def emit_selection(table, power_budget: str | None, time_budget_ms: float | None, objective: str,
                   risk: float | None, as_json: bool) -> None:
    """Select from ``table`` and print the answer: docs/contract.md's JSON, or a table for people.

    ``power_budget``: the option's text (W or a sweep spec; None: no power budget).
    """
    budgets = None if power_budget is None else validation.budget_sweep(power_budget, "--power-budget")
    cands = Candidates.from_table(table)
    selector = make_selector(objective, risk)
    bounded = risk is not None and cands.power_std_w is not None
    if power_budget is not None and budgets is not None and validation.is_sweep(power_budget):
        emit_selections(table, budgets, selector.sweep(cands, budgets, time_budget_ms), objective, as_json, True,
                        bounded)
        return
    sel = selector.select(cands, None if budgets is None else budgets[0], time_budget_ms)
    emit_selections(table, budgets or [], [sel], objective, as_json, False, bounded)


def emit_selections(table, budgets: list[float], results: list[Selection], objective: str, as_json: bool,
                    sweep: bool, bounded: bool) -> None:
    """Print selections made elsewhere (``edgetune tune``'s verified ones) as ``emit_selection`` does;
    ``bounded``: the selections checked an upper power bound (its ``power_upper_w`` is reported)."""
    if sweep:
        if as_json:
            emit_json([{"power_budget_w": b, **selection_json(table, s, bounded)}
                       for b, s in zip(budgets, results, strict=True)])
        else:
            _print_sweep(table, budgets, results, objective)
        return
    if as_json:
        emit_json(selection_json(table, results[0], bounded))
    else:
        _print_selection(table, results[0], objective)


def _print_selection(table, sel: Selection, objective: str) -> None:
    console = Console()
    if not sel.feasible or sel.index is None:  # a feasible selection has its row
        console.print(f"[bold red]infeasible[/]: {_reason(table, sel)}")
        return
    row = table.rows[sel.index]
    grid = RichTable(title=f"least {objective}", show_header=False)
    grid.add_column("field", style="bold")
    grid.add_column("value")
    grid.add_row("mode", f"{row['cores']}c / {row['cpu_mhz']:g} / {row['gpu_mhz']:g} / {row['emc_mhz']:g} MHz")
    grid.add_row("batch size", str(row.get("batch_size", "-")))
    grid.add_row("time", f"{row['time_ms']:g} ms")
    grid.add_row("power", f"{row['power_w']:g} W")
    if sel.power_bound_w is not None and sel.power_bound_w != sel.power_w:
        grid.add_row("power bound", f"{sel.power_bound_w:g} W")
    if sel.power_budget_w is not None:
        grid.add_row("power budget", f"{sel.power_budget_w:g} W")
    grid.add_row("row", _row_name(table, sel.index))
    console.print(grid)


def _reason(table, sel: Selection) -> str:
    """Why a selection is infeasible, its closest option named by its mode (and its row and line)."""
    if sel.closest is None:
        return sel.reason or ""
    return f"{sel.reason}; closest: {_option_name(table, sel.closest)}, {_row_name(table, sel.closest)}"


def _option_name(table, index: int) -> str:
    row = table.rows[index]
    name = f"mode {int(row['cores'])}c/{row['cpu_mhz']:g}/{row['gpu_mhz']:g}/{row['emc_mhz']:g}"
    return name + (f", batch size {int(row['batch_size'])}" if row.get("batch_size") is not None else "")


def _row_name(table, index: int) -> str:
    """One way to name a row everywhere: the 0-based row of the data and the file's line (header = line 1)."""
    return f"row {index} (line {index + 2} of {table.path or 'the table'})"


def _print_sweep(table, budgets, results, objective: str) -> None:
    out = RichTable(title=f"least {objective} per power budget")
    for name in ("budget W", "mode", "batch", "time ms", "power W"):
        out.add_column(name, justify="right" if name != "mode" else "left")
    for b, s in zip(budgets, results, strict=True):
        if not s.feasible:
            out.add_row(f"{b:g}", "[red]infeasible[/]", "", "", "")
            continue
        row = table.rows[s.index]
        out.add_row(f"{b:g}", f"{row['cores']}c/{row['cpu_mhz']:g}/{row['gpu_mhz']:g}/{row['emc_mhz']:g}",
                    str(row.get("batch_size", "-")), f"{row['time_ms']:g}", f"{row['power_w']:g}")
    Console().print(out)


# --------------------------------------------------------------------------- joint


def parse_power_cap(text: str) -> float | None:
    """``none`` (no cap) or a power budget (:func:`validation.power_budget_w`)."""
    raw = str(text).strip()
    if raw.lower() == "none":
        return None
    try:
        value = float(raw)
    except ValueError:
        raise InvalidArgument("--power-cap", f"{raw!r} is not a number",
                              f"{validation.POWER_BUDGET_ALLOWED}, or none") from None
    return validation.power_budget_w(value, "--power-cap")


@command.command("joint")
@click.option("--lut", "lut_path", default=None, type=click.Path(dir_okay=False),
              help="CSV batch_size,mode,time_s,power_w (time_s for the same number of samples on every row).")
@click.option("--profiles", "profile_paths", multiple=True, type=click.Path(dir_okay=False),
              help="Profile tables (edgetune profile's CSVs; repeatable) instead of --lut: the LUT is built from "
                   "time per minibatch scaled to s samples and the PEAK power.")
@click.option("--samples-per-pass", type=int, default=None, callback=checked(validation.count),
              help="s, the samples every LUT row's time is for (with --profiles) [default: 2 x the largest batch size, as estimate efficiency counts passes].")
@click.option("--efficiency", "eff_path", required=True, type=click.Path(dir_okay=False),
              help="CSV batch_size,passes_to_target (empty / nan / inf: never reaches the target).")
@click.option("--power-cap", "power_cap", required=True, help="Power cap W, or 'none'.")
@click.option("--json", "as_json", is_flag=True, help="Print docs/contract.md's JSON.")
@reports_errors
def joint_cmd(lut_path, profile_paths, samples_per_pass, eff_path, power_cap, as_json) -> None:
    """Joint batch size and mode: least time to target accuracy with peak power strictly under the power
    cap (Ahmed et al.)."""
    cap = parse_power_cap(power_cap)
    if (lut_path is None) == (not profile_paths):
        raise InvalidArgument("--lut", "give exactly one of --lut FILE or --profiles FILE ...",
                              "--lut lut.csv, or --profiles profiles.csv")
    if samples_per_pass is not None and lut_path is not None:
        raise InvalidArgument("--samples-per-pass", "only with --profiles", "--profiles FILE ... --samples-per-pass S")
    lut = read_lut(lut_path) if lut_path is not None else lut_from_profiles(list(profile_paths), samples_per_pass)
    eff = read_efficiency(eff_path)
    choice = joint_select(lut, eff, cap)
    if as_json:
        emit_json(choice.to_json())
        return
    console = Console()
    if not choice.feasible:
        console.print(f"[bold red]infeasible[/]: {choice.reason}")
        return
    grid = RichTable(title="joint batch size and mode", show_header=False)
    grid.add_column("field", style="bold")
    grid.add_column("value")
    grid.add_row("batch size", str(choice.batch_size))
    grid.add_row("mode", str(choice.mode))
    grid.add_row("time to target", f"{choice.time_to_target_s:g} s "
                                   f"({choice.time_s:g} s × {choice.passes_to_target:g} passes)")
    grid.add_row("power", f"{choice.power_w:g} W")
    grid.add_row("power cap", "none" if cap is None else f"{cap:g} W")
    console.print(grid)


# --------------------------------------------------------------------------- frontier


@command.command("frontier")
@click.option("--table", "table_path", required=True, type=click.Path(dir_okay=False),
              help="Predictions of every mode (CSV with time_ms, power_w; one batch size), e.g. estimate predict's.")
@click.option("--profiled", "profiled_path", required=True, type=click.Path(dir_okay=False),
              help="The modes profiled so far (a mode or profile table).")
@click.option("--n", "n_modes", type=int, default=5, show_default=True, callback=checked(validation.count), help="How many modes to pick.")
@click.option("--power-budget", "power_range", default=None,
              help="The budgets the selections will use, W or LOW:HIGH[:STEP] W (e.g. 17:50); default: any power.")
@click.option("--out", "out_path", default=None, type=click.Path(dir_okay=False),
              help="Write the picks as a mode table (for edgetune profile --modes).")
@click.option("--json", "as_json", is_flag=True, help="Print the picks as JSON.")
@reports_errors
def frontier_cmd(table_path, profiled_path, n_modes, power_range, out_path, as_json) -> None:
    """Pick the next modes to profile on the predicted (time, power) front.

    One round of frontier sampling (edgetune.optimization.frontier): of the modes on the front
    predicted by the current model, within the budget range (2 W below, 1 W above), the N
    farthest in predicted power from every profiled mode. Loop: profile them, transfer again,
    predict, pick again — then select with --risk on the final predictions.
    """
    table = read_options(table_path)
    sizes = {r.get("batch_size") for r in table.rows}
    if len(sizes) > 1:
        raise InvalidArgument("--table", f"holds {len(sizes)} batch sizes ({', '.join(map(str, sorted(sizes)))})",
                              "the predictions of one batch size")
    where = {PowerMode.from_mapping(r): i for i, r in enumerate(table.rows)}
    profiled = {PowerMode.from_mapping(r) for r in read_mode_table(profiled_path).rows}
    done = [where[m] for m in profiled if m in where]  # profiled modes the table does not list are ignored
    bounds = None
    if power_range is not None:  # the budgets' span is what matters, not the step
        budgets = validation.budget_sweep(power_range, "--power-budget")
        bounds = (min(budgets), max(budgets))
    cands = Candidates.from_table(table)
    picks = next_frontier_modes(cands.time_ms, cands.power_w, done, n_modes, power_range_w=bounds)
    rows = [{k: table.rows[i][k] for k in MODE_FIELDS} for i in picks]
    if out_path:
        write_table(rows, out_path, MODE_FIELDS)
    if as_json:
        emit_json({"modes": rows, "profiled": len(done),
                   "predicted_power_w": [round(float(cands.power_w[i]), 3) for i in picks]})
        return
    console = Console()
    if not rows:
        console.print("no unprofiled mode is left on the predicted front"
                      + (f" within {power_range} W (widened by {BELOW_W:g} W below, {ABOVE_W:g} W above)"
                         if power_range else ""))
        return
    out = RichTable(title=f"next {len(rows)} modes to profile ({len(done)} profiled)")
    for col in (*MODE_FIELDS, "predicted time_ms", "predicted power_w"):
        out.add_column(col, justify="right")
    for i, r in zip(picks, rows, strict=True):
        out.add_row(*(f"{r[k]:g}" for k in MODE_FIELDS), f"{cands.time_ms[i]:.1f}", f"{cands.power_w[i]:.2f}")
    console.print(out)
