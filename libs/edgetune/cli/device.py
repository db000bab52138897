"""``edgetune device --device SPEC [--json] [--watch [--interval S] [--count N]]``.

Without ``--watch``: what a device backend discovers. Model, cores, frequency tables (sizes and
ranges), mode count, presets, current mode, power sensors and one power reading — for
``sysfs[:ROOT]`` also the paths found and what is missing, for ``replay:FILE.csv`` the recorded
grid. Read-only: nothing is applied.

With ``--watch``: live telemetry, like ``jtop``: total and per-rail power, the energy drawn
since the watch started, every thermal zone against its trip point, the clocks running now
against the applied mode's, and whether the board throttles. On a terminal a rich table
refreshes in place; off a terminal (a pipe, a log) one plain line per sample; with ``--json`` one
JSON object per sample. ``--count N`` stops after N samples (0: until Ctrl-C). ``--jtop`` reads
through jetson-stats' service instead of sysfs (same fields).
"""

from __future__ import annotations

import json
import math
import sys
import time
from typing import Any

import click
from rich.console import Console
from rich.live import Live
from rich.table import Table

from edgetune import validation
from edgetune.base.clocks import VirtualClock
from edgetune.base.mode import MODE_FIELDS
from edgetune.cli.errors import checked, reports_errors
from edgetune.devices.base import Device
from edgetune.devices.factory import ALLOWED, open_device
from edgetune.errors import EdgetuneError, InvalidArgument
from edgetune.telemetry.jtop import JtopReader
from edgetune.telemetry.sample import TelemetrySample
from edgetune.telemetry.sampler import TOTAL, EnergyCounter


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
        out["preset_source"] = getattr(device, "preset_source", None)
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
        head.add_row("presets from", str(info.get("preset_source")))
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


# -- --watch ---------------------------------------------------------------------------------
def _fmt_opt(v: float | None, digits: int = 0) -> str:
    return "-" if v is None else f"{v:.{digits}f}"


def watch_line(s: TelemetrySample, joules: dict[str, float]) -> str:
    """One plain line per sample (off a terminal): power, energy, hottest zone, clocks, throttling."""
    hot = max(s.zones, key=lambda z: z.temp_c, default=None)
    c, p = s.clocks, s.pinned
    parts = [f"power {_fmt_opt(s.power_w, 2)} W", f"energy {joules.get(TOTAL, 0.0):.1f} J"]
    parts += [f"{k} {v:.2f} W" for k, v in s.rails_w.items()]
    if hot is not None:
        parts.append(f"{hot.name} {hot.temp_c:.1f} C" + (f"/{hot.trip_c:g}" if hot.trip_c is not None else ""))
    parts.append(f"cores {c.cores if c.cores is not None else '-'}")
    for name in ("cpu", "gpu", "emc"):
        cur, pin = getattr(c, f"{name}_mhz"), getattr(p, f"{name}_mhz")
        parts.append(f"{name} {'-' if cur is None else f'{cur:g}'}" + (f"/{pin:g}" if pin is not None else "") + " MHz")
    parts.append("THROTTLED: " + "; ".join(s.throttle_reasons) if s.throttled else "not throttled")
    return "  ".join(parts)


def watch_table(s: TelemetrySample, joules: dict[str, float], title: str):
    """The live rich table: one section per kind of reading."""
    t = Table(title=title, title_justify="left")
    for col, just in (("reading", "left"), ("now", "right"), ("limit / applied", "right"), ("energy J", "right")):
        t.add_column(col, justify=just)  # type: ignore[arg-type]
    t.add_row("[bold]power (total)[/]", f"{_fmt_opt(s.power_w, 2)} W", "", f"{joules.get(TOTAL, 0.0):.1f}")
    for rail, w in s.rails_w.items():
        t.add_row(f"  {rail}", f"{w:.2f} W", "", f"{joules.get(rail, 0.0):.1f}")
    for z in s.zones:
        style = "red" if z.past_trip else ""
        t.add_row(f"[{style}]{z.name}[/]" if style else z.name, f"{z.temp_c:.1f} °C",
                  "-" if z.trip_c is None else f"{z.trip_c:g} °C", "")
    t.add_row("cores online", str(s.clocks.cores if s.clocks.cores is not None else "-"), "", "")
    for name in ("cpu", "gpu", "emc"):
        cur, pin = getattr(s.clocks, f"{name}_mhz"), getattr(s.pinned, f"{name}_mhz")
        t.add_row(f"{name} clock", "-" if cur is None else f"{cur:g} MHz", "-" if pin is None else f"{pin:g} MHz", "")
    t.add_row("[bold]throttled[/]", "[red]yes[/]" if s.throttled else "[green]no[/]",
              "; ".join(s.throttle_reasons), "")
    return t


def watch(read, clock, interval_s: float, count: int, out: str, title: str = "", console=None) -> int:
    """Sample ``read()`` every ``interval_s``; ``out`` is ``rich``, ``lines`` or ``json``. Returns samples shown.

    ``console``: the rich Console to draw on (default: stdout)."""
    energy = EnergyCounter()
    virtual = isinstance(clock, VirtualClock)
    live = None
    if out == "rich":
        live = Live(console=console or Console(), auto_refresh=False, transient=False)
        live.start()
    shown = 0
    try:
        while count == 0 or shown < count:
            if shown:
                time.sleep(interval_s)
                if virtual:  # a simulated board idles on its own clock too
                    clock.sleep(interval_s)
            s = read()
            powers = dict(s.rails_w)
            if s.power_w is not None:
                powers[TOTAL] = s.power_w
            energy.add(time.monotonic(), powers)
            joules = energy.joules()
            shown += 1
            if live is not None:
                live.update(watch_table(s, joules, title), refresh=True)
            elif out == "json":
                click.echo(json.dumps({**s.as_dict(), "energy_j": joules}))
            else:
                click.echo(watch_line(s, joules))
    except KeyboardInterrupt:
        pass
    finally:
        if live is not None:
            live.stop()
    return shown


@click.command("device")
@click.option("--device", "device_spec", required=True, metavar="SPEC", help=f"Backend: {ALLOWED}.")
@click.option("--hard-limit-w", type=float, default=None, help="Board power limit (sysfs backend).",
              callback=checked(validation.power_budget_w))
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of tables.")
@click.option("--watch", "watch_", is_flag=True, help="Live telemetry: power, energy, temperatures, clocks, throttling.")
@click.option("--interval", "interval_s", type=float, default=1.0, show_default=True,
              help="With --watch: seconds between samples.")
@click.option("--count", type=int, default=0, show_default=True, help="With --watch: stop after N samples (0: never).")
@click.option("--jtop", "use_jtop", is_flag=True, help="With --watch: read through jetson-stats' jtop service.")
@reports_errors
def command(device_spec: str, hard_limit_w: float | None, as_json: bool, watch_: bool, interval_s: float,
            count: int, use_jtop: bool) -> None:
    """Show what a device backend discovers: model, tables, modes, presets, current mode, power."""
    if not watch_ and (use_jtop or count or interval_s != 1.0):
        raise InvalidArgument("--watch", "--interval, --count and --jtop only apply with --watch", "--watch")
    if not (math.isfinite(interval_s) and interval_s > 0):
        raise InvalidArgument("--interval", f"{interval_s:g} is not > 0", "a finite number of seconds > 0")
    validation.count(count, "--count", minimum=0)
    kw = {"hard_limit_w": hard_limit_w} if hard_limit_w is not None else {}
    device = open_device(device_spec, **kw)
    if watch_:
        read = device.telemetry
        if use_jtop:
            read = JtopReader(device).read
        out = "json" if as_json else ("rich" if sys.stdout.isatty() else "lines")
        title = f"{device.spec.display_name} ({device.backend}) — every {interval_s:g} s, Ctrl-C to stop"
        watch(read, device.clock, interval_s, count, out, title)
        return
    info = describe(device)
    if as_json:
        click.echo(json.dumps(info, indent=2))
    else:
        _print_rich(info)
