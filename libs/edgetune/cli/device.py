"""``edgetune device --device SPEC [--json]``: what a device backend discovers.

Model, cores, frequency tables (sizes and ranges), mode count, presets, current mode, power
sensors and one power reading — for ``sysfs[:ROOT]`` also the paths found and what is missing,
for ``replay:FILE.csv`` the recorded grid. Read-only: nothing is applied.
"""

from __future__ import annotations

import json
from typing import Any

import click

from edgetune import validation
from edgetune.cli.errors import checked, reports_errors
from edgetune.devices.base import Device
from edgetune.devices.factory import ALLOWED, open_device
from edgetune.errors import EdgetuneError
from edgetune.powermodes.mode import MODE_FIELDS


def describe(device: Device) -> dict[str, Any]:
    """Everything ``edgetune device`` prints, as plain JSON-able data."""
    spec = device.spec
    tables = {}
    for dim in MODE_FIELDS:
        values = list(spec.core_counts) if dim == "cores" else list(spec.table(dim))
        tables[dim] = {"count": len(values), "min": min(values), "max": max(values), "values": values}
    out: dict[str, Any] = {
        "backend": device.backend,
        "name": spec.name,
        "model": spec.display_name,
        "soc": spec.soc,
        "cores": spec.max_cores,
        "core_counts": list(spec.core_counts),
        "tables": tables,
        "n_modes": spec.n_modes,
        "presets": [{"id": p.id, "name": p.name, "budget_w": p.budget_w, "mode": p.mode().as_dict()}
                    for p in spec.presets],
        "current_mode": device.current_mode().as_dict(),
    }
    power: dict[str, Any] = {}
    try:
        sensor = device.power_sensor()
        power["power_w"] = round(sensor.read_w(), 4)
        power["rails_w"] = {k: round(v, 4) for k, v in sensor.rails_w().items()}
        describe_rails = getattr(sensor, "describe", None)
        if callable(describe_rails):
            power["sensors"] = describe_rails()
    except EdgetuneError as exc:
        power["error"] = str(exc)
    except OSError as exc:  # a rail vanished or needs root
        power["error"] = f"reading the power sensor failed: {exc}"
    out["power"] = power
    report = getattr(device, "report", None)
    if report is not None and hasattr(report, "as_dict"):
        out["discovery"] = report.as_dict()
        out["hard_limit_w"] = getattr(device, "hard_limit_w", None)
        out["emc_table_source"] = spec.extra.get("emc_table_source")
    if device.backend == "replay":
        out["replay"] = {
            "path": getattr(device, "path", None),
            "rows": len(device.table),  # type: ignore[attr-defined]
            "recorded_modes": device.n_recorded_modes,  # type: ignore[attr-defined]
            "workloads": device.workloads(),
            "roles": device.roles(),  # type: ignore[attr-defined]
            "batch_sizes": device.batch_sizes(),  # type: ignore[attr-defined]
        }
    return out


def _fmt(v: float) -> str:
    return f"{v:g}"


def _print_rich(info: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    head = Table(title=f"{info['model']} ({info['backend']})", show_header=False, title_justify="left")
    head.add_column("field", style="bold")
    head.add_column("value")
    head.add_row("name", info["name"])
    head.add_row("soc", info["soc"] or "-")
    head.add_row("cores", f"{info['cores']} (modes use {info['core_counts'][0]}..{info['core_counts'][-1]})")
    head.add_row("modes", f"{info['n_modes']:,}")
    cur = info["current_mode"]
    head.add_row("current mode", f"{cur['cores']}c / CPU {_fmt(cur['cpu_mhz'])} / GPU {_fmt(cur['gpu_mhz'])} "
                                 f"/ EMC {_fmt(cur['emc_mhz'])} MHz")
    power = info["power"]
    head.add_row("power", f"{power['power_w']:.3f} W" if "power_w" in power else f"[red]{power.get('error')}[/]")
    if "replay" in info:
        rp = info["replay"]
        head.add_row("table", f"{rp['path']}: {rp['rows']} rows, {rp['recorded_modes']} recorded modes")
        head.add_row("workloads", ", ".join(rp["workloads"]) or "-")
        head.add_row("roles", ", ".join(rp["roles"]) or "-")
        head.add_row("batch sizes", ", ".join(str(b) for b in rp["batch_sizes"]))
    if "discovery" in info:
        disc = info["discovery"]
        head.add_row("l4t", disc["l4t"] or "-")
        head.add_row("EMC table from", str(info.get("emc_table_source")))
        if info.get("hard_limit_w"):
            head.add_row("hard limit", f"{info['hard_limit_w']} W")
    console.print(head)

    freq = Table(title="frequency tables", title_justify="left")
    for col in ("dimension", "count", "min", "max"):
        freq.add_column(col, justify="right" if col != "dimension" else "left")
    for dim, t in info["tables"].items():
        freq.add_row(dim, str(t["count"]), _fmt(t["min"]), _fmt(t["max"]))
    console.print(freq)

    if info["presets"]:
        pre = Table(title="presets (nvpmodel)", title_justify="left")
        for col in ("id", "name", "budget W", "mode"):
            pre.add_column(col)
        for p in info["presets"]:
            m = p["mode"]
            pre.add_row(str(p["id"]), p["name"], "-" if p["budget_w"] is None else _fmt(p["budget_w"]),
                        f"{m['cores']}c/{_fmt(m['cpu_mhz'])}/{_fmt(m['gpu_mhz'])}/{_fmt(m['emc_mhz'])}")
        console.print(pre)

    if power.get("rails_w"):
        rails = Table(title="power rails", title_justify="left")
        rails.add_column("rail")
        rails.add_column("W", justify="right")
        for name, w in power["rails_w"].items():
            rails.add_row(name, f"{w:.3f}")
        console.print(rails)

    if "discovery" in info:
        disc = info["discovery"]
        for line in disc["found"]:
            console.print(f"[green]found[/]   {line}")
        for line in disc["missing"]:
            console.print(f"[yellow]missing[/] {line}")


@click.command("device")
@click.option("--device", "device_spec", required=True, metavar="SPEC", help=f"Backend: {ALLOWED}.")
@click.option("--hard-limit-w", type=float, default=None, help="Board power limit (sysfs backend).",
              callback=checked(validation.power_budget_w))
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of tables.")
@reports_errors
def command(device_spec: str, hard_limit_w: float | None, as_json: bool) -> None:
    """Show what a device backend discovers: model, tables, modes, presets, current mode, power."""
    kw = {"hard_limit_w": hard_limit_w} if hard_limit_w is not None else {}
    device = open_device(device_spec, **kw)
    info = describe(device)
    if as_json:
        click.echo(json.dumps(info, indent=2))
    else:
        _print_rich(info)
