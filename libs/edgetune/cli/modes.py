"""``edgetune modes``: write a device's power modes as a mode table (docs/contract.md).

    edgetune modes --device NAME [--grid full|powertrain|fulcrum] [--out modes.csv]
    edgetune modes --device NAME --presets [--nvpmodel /etc/nvpmodel.conf]

``NAME`` is a built-in device model (``orin-agx``, ``orin-nx``, ``orin-nano-super``, …) or the same
name as a simulated backend spells it (``sim:orin-nx``): both mean the model's spec. As everywhere
``--device`` is taken, a backend also names one: ``sysfs[:ROOT]`` (the tables a real board, or a
sysroot, exposes) and ``replay:FILE.csv`` (the values a recorded table holds per knob).

The table has the header ``cores,cpu_mhz,gpu_mhz,emc_mhz`` and goes to stdout unless ``--out``
is given (then a one-line summary goes to stderr). ``--presets`` lists the device's nvpmodel
presets instead (from the built-in spec, or parsed from a real nvpmodel.conf).
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from edgetune.base.mode import MODE_FIELDS
from edgetune.cli.errors import checked, reports_errors
from edgetune.devices.factory import open_device
from edgetune.errors import InvalidArgument
from edgetune.powermodes.grids import GRID_NAMES, named_grid
from edgetune.powermodes.nvpmodel import load_nvpmodel
from edgetune.powermodes.specs import SPECS, get_spec

PRESET_FIELDS = ("id", "name", "budget_w", *MODE_FIELDS)


ALLOWED = f"{', '.join(SPECS)}, sim:NAME, sysfs[:ROOT] or replay:FILE.csv"


def _device(value: str, field: str):
    # checked at run time (not click.Choice) so devices registered later are accepted too;
    # "sim:NAME" is the simulated backend of NAME, whose spec is NAME's
    kind = value.partition(":")[0]
    try:
        if kind in ("sysfs", "replay"):
            # only the spec is read: the backend is not closed, as closing restores (writes) a board's mode
            return open_device(value).spec
        return get_spec(value[4:] if kind == "sim" else value)
    except InvalidArgument as exc:
        raise InvalidArgument(field, exc.message, ALLOWED) from None


@click.command("modes")
@click.option("--device", "spec", required=True, callback=checked(_device), metavar="NAME",
              help=f"Device model: {', '.join(SPECS)} (or sim:NAME); or a backend's tables: sysfs[:ROOT], "
                   "replay:FILE.csv.")
@click.option("--grid", "grid_name", type=click.Choice(GRID_NAMES), default="full", show_default=True,
              help="full: every mode; powertrain: PowerTrain's uniform subset; fulcrum: Fulcrum's grid.")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write the CSV here instead of stdout.")
@click.option("--presets", is_flag=True, help="List the device's nvpmodel presets instead of the modes.")
@click.option("--nvpmodel", "nvpmodel_path", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              default=None, help="With --presets: read them from this nvpmodel.conf.")
@reports_errors
def command(spec, grid_name: str, out: Path | None, presets: bool, nvpmodel_path: Path | None) -> None:
    """Write the power modes of a device as a CSV mode table."""
    if presets:
        lines = _preset_lines(spec, nvpmodel_path)
        what = f"{len(lines) - 1} presets of {spec.name}"
    else:
        if nvpmodel_path is not None:
            raise InvalidArgument("--nvpmodel", "only applies with --presets", "--presets --nvpmodel FILE")
        grid = named_grid(spec, grid_name)
        lines = _mode_lines(grid.array())
        what = f"{grid.n_modes} modes of {spec.name} ({grid_name})"
    text = "\n".join(lines) + "\n"
    if out is None:
        sys.stdout.write(text)
        return
    try:
        out.write_text(text)
    except OSError as exc:
        raise InvalidArgument("--out", f"cannot write {out}: {exc.strerror or exc}", "a writable file") from None
    click.echo(f"wrote {what} to {out}", err=True)


def _mode_lines(arr) -> list[str]:
    lines = [",".join(MODE_FIELDS)]
    lines.extend(f"{int(c)},{_num(cpu)},{_num(gpu)},{_num(emc)}" for c, cpu, gpu, emc in arr.tolist())
    return lines


def _preset_lines(spec, nvpmodel_path: Path | None) -> list[str]:
    # a bad file is an InvalidArgument naming its file and line (nvpmodel.conf:2)
    presets = load_nvpmodel(nvpmodel_path).to_presets(spec) if nvpmodel_path else spec.presets
    lines = [",".join(PRESET_FIELDS)]
    for p in presets:
        budget = "" if p.budget_w is None else _num(p.budget_w)
        lines.append(f"{p.id},{p.name},{budget},{p.cores},{_num(p.cpu_max_mhz)},"
                     f"{_num(p.gpu_max_mhz)},{_num(p.emc_max_mhz)}")
    return lines


def _num(v: float) -> str:
    # shortest form that round-trips (2201.6, 114.75, 3199), no trailing ".0"
    return f"{v:.10g}"
