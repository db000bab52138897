"""``edgetune profile``: measure modes on a device backend and write a profile table.

    edgetune profile --device sim:orin-agx --workload NAME|MODULE:FUNCTION [--role train|infer]
                     [--modes modes.csv | --random N] [--batch-sizes 16,32] [--seed S]
                     --out profiles.csv

Runs the full measurement protocol (:mod:`edgetune.profiling`) per point and writes the
docs/contract.md profile table (with the optional columns and a few protocol extras). A mode
table with a ``batch_size`` column gives one point per row unless ``--batch-sizes`` is given.
``--random N`` draws N distinct modes of a grid of the device (``--grid``, default the full
space) with ``--seed``. Progress shows on stderr: a bar on a terminal, else a line with done/total
and an ETA every 10 s (:mod:`edgetune.cli.progress`).

If profiling stops part-way (hard power limit, device error, Ctrl-C) the rows measured so
far are still written, then the error is reported (exit 2 for edgetune errors).
"""

from __future__ import annotations

from collections.abc import Callable

import click
import numpy as np

from edgetune import validation
from edgetune.base.mode import PowerMode
from edgetune.cli.errors import checked, reports_errors
from edgetune.cli.progress import progress_display
from edgetune.devices.base import Device
from edgetune.devices.factory import open_device
from edgetune.devices.workloads import resolve_workload
from edgetune.errors import EdgetuneError, InvalidArgument
from edgetune.powermodes.grids import named_grid
from edgetune.profiling.order import CapSearch, descending_order, gpu_levels
from edgetune.profiling.protocol import ROW_COLUMNS, Measurement, ProfileConfig, Profiler, ProgressEvent
from edgetune.tables import read_mode_table, write_table

DEFAULT_BATCH_SIZE = 16
GRID_CHOICES = ("full", "powertrain", "fulcrum")


def parse_batch_sizes(text: str | None, option: str = "--batch-sizes") -> list[int] | None:
    """``"16,32"`` → ``[16, 32]`` (:func:`validation.batch_sizes`); ``None`` stays ``None``."""
    if text is None:
        return None
    sizes: list[object] = []
    for part in text.split(","):
        try:
            sizes.append(int(part.strip()))
        except ValueError:  # the text, not a number: the rule names it as given
            sizes.append(part.strip())
    return list(validation.batch_sizes(sizes, option))


def random_modes(device: Device, n: int, seed: int, grid: str = "full") -> list[PowerMode]:
    """``n`` distinct modes drawn from grid ``grid`` of the device's spec (seeded)."""
    space = named_grid(device.spec, grid)
    validation.count(n, "--random", maximum=space.n_modes)
    picks = np.random.default_rng(seed).choice(space.n_modes, size=n, replace=False)
    return [space.mode_at(int(i)) for i in picks]


def check_workload(device: Device, workload: str, role: str = "train") -> str:
    """The name the device runs ``--workload`` under: a zoo name, or a ``MODULE:FUNCTION``
    (imported from ``PYTHONPATH``) by its id; exit 2 naming the workload otherwise."""
    return resolve_workload(device, workload, role, field="--workload")


def _points(device: Device, modes_path: str | None, n_random: int | None, batch_sizes: list[int] | None,
            seed: int, grid: str, order: str) -> list[tuple[PowerMode, int]]:
    _one_source(modes_path, n_random)
    if modes_path is not None:
        table = read_mode_table(modes_path)
        if len(table) == 0:
            raise InvalidArgument("--modes", f"{modes_path} has no rows", "a mode table with at least one row")
        points = []
        for line, row in enumerate(table.rows, start=2):
            # file, line and field for a mode the device does not have (modes.csv:3:gpu_mhz)
            mode = validation.power_mode(device.spec, PowerMode.from_mapping(row), f"{modes_path}:{line}", ":")
            if batch_sizes is None and table.has("batch_size"):
                points.append((mode, int(row["batch_size"])))
            else:
                points.extend((mode, b) for b in (batch_sizes or [DEFAULT_BATCH_SIZE]))
        ordered = order == "descending"
    else:
        assert n_random is not None  # exactly one of the two was given (checked above)
        modes = random_modes(device, n_random, seed, grid)
        points = [(m, b) for m in modes for b in (batch_sizes or [DEFAULT_BATCH_SIZE])]
        ordered = order in ("descending", "auto")
    if ordered:  # batch sizes stay grouped under their mode
        rank = {m: i for i, m in enumerate(descending_order(list(dict.fromkeys(m for m, _ in points))))}
        points.sort(key=lambda p: rank[p[0]])
    return points


def _one_source(modes_path: str | None, n_random: int | None) -> None:
    if (modes_path is None) == (n_random is None):
        raise InvalidArgument("--modes", "give exactly one of --modes FILE or --random N", "--modes FILE or --random N")


@click.command("profile")
@click.option("--device", "device_name", required=True,
              help="Backend: sim:<model> (simulated), sysfs[:root] (this Jetson), replay:<table.csv>.")
@click.option("--workload", required=True,
              help="Zoo workload (resnet18, mobilenetv3, ...) or your own MODULE:FUNCTION (found on PYTHONPATH; "
                   "rows are recorded under its id).")
@click.option("--role", type=click.Choice(["train", "infer"]), default="train", show_default=True)
@click.option("--modes", "modes_path", type=click.Path(dir_okay=False),
              help="Mode table (cores,cpu_mhz,gpu_mhz,emc_mhz[,batch_size]) to profile.")
@click.option("--random", "n_random", type=int, callback=checked(validation.count), help="Profile N distinct random modes of the device.")
@click.option("--grid", type=click.Choice(GRID_CHOICES), default="full", show_default=True,
              help="Grid that --random draws from.")
@click.option("--batch-sizes", "batch_sizes_text", help="Comma-separated batch sizes [default: 16].")
@click.option("--seed", type=int, default=0, show_default=True, callback=checked(validation.seed),
              help="Seed of --random (and of a sim device).")
@click.option("--out", "out_path", required=True, type=click.Path(dir_okay=False), help="Profile table to write.")
@click.option("--n-minibatches", type=click.IntRange(min=1), default=ProfileConfig.n_minibatches, show_default=True,
              help="Clean minibatches per point.")
@click.option("--warmup", "warmup_minibatches", type=click.IntRange(min=0),
              default=ProfileConfig.warmup_minibatches, show_default=True, help="Minibatches run and dropped first.")
@click.option("--sample-rate-hz", type=float, callback=checked(validation.sample_rate_hz),
              default=ProfileConfig.sample_rate_hz, show_default=True, help="Power sampling rate.")
@click.option("--idle-s", type=click.FloatRange(min=0), default=ProfileConfig.idle_s, show_default=True,
              help="Seconds of idle power sampling per mode (0: use the settled window).")
@click.option("--hard-limit-w", type=float, default=None, callback=checked(validation.power_budget_w),
              help="Abort (restoring the mode) when measured power exceeds this.")
@click.option("--repeat-short/--no-repeat-short", default=False, show_default=True,
              help="Repeat minibatches shorter than a few sampler periods (NeuralPower's n̂).")
@click.option("--order", type=click.Choice(["auto", "descending", "as-given", "cap-search"]), default="auto",
              show_default=True,
              help="descending: step frequencies down (JetPacks that refuse upward changes); "
                   "auto: descending for --random, as given for --modes; cap-search: Ahmed et al.'s efficient "
                   "order under --power-cap (largest batch size first, GPU clock upward until the peak power "
                   "reaches the cap; the next batch size resumes there), over the GPU clocks with the other "
                   "knobs at their highest (or the --modes rows, in ascending power order).")
@click.option("--power-cap", "power_cap_w", type=float, default=None, callback=checked(validation.power_budget_w),
              help="The power cap W of --order cap-search.")
@click.option("--node", default="", help="Node id recorded in the rows and measurement ids.")
@click.option("--run-key", default="", help="Run key mixed into the measurement ids.")
@reports_errors
def command(device_name: str, workload: str, role: str, modes_path: str | None, n_random: int | None, grid: str,
            batch_sizes_text: str | None, seed: int, out_path: str, n_minibatches: int, warmup_minibatches: int,
            sample_rate_hz: float, idle_s: float, hard_limit_w: float | None, repeat_short: bool, order: str,
            node: str, run_key: str, power_cap_w: float | None) -> None:
    """Profile power modes with the measurement protocol and write a profile table."""
    batch_sizes = parse_batch_sizes(batch_sizes_text)
    if (order == "cap-search") != (power_cap_w is not None):
        raise InvalidArgument("--power-cap", "goes with --order cap-search, and it needs one",
                              "--order cap-search --power-cap W")
    if order == "cap-search":
        if n_random is not None:
            raise InvalidArgument("--random", "--order cap-search searches the GPU clocks (or --modes), not random "
                                  "modes", "--modes FILE, or neither")
    else:
        _one_source(modes_path, n_random)
    config = ProfileConfig(n_minibatches=n_minibatches, warmup_minibatches=warmup_minibatches,
                           sample_rate_hz=sample_rate_hz, idle_s=idle_s, hard_limit_w=hard_limit_w,
                           repeat_short=repeat_short, node=node, run_key=run_key)
    device = open_backend(open_device, device_name, seed)
    with device:
        workload = check_workload(device, workload, role)
        search: CapSearch | None = None
        if order == "cap-search":
            assert power_cap_w is not None
            search = CapSearch(cap_search_levels(device, modes_path), batch_sizes or [DEFAULT_BATCH_SIZE],
                               power_cap_w)
            points = []
        else:
            points = _points(device, modes_path, n_random, batch_sizes, seed, grid, order)
        measured: list[Measurement] = []
        t0 = device.clock.now_s()
        try:
            with progress_display() as show:
                def on_progress(event: ProgressEvent) -> None:
                    if event.measurement is not None:
                        measured.append(event.measurement)
                    show("profiling", event.done, len(points), f"{event.mode.label()} bs={event.batch_size}")

                profiler = Profiler(device, config)
                if search is None:
                    profiler.profile_points(points, workload, role, progress=on_progress)
                else:  # one point at a time: each peak power decides the next point
                    while (point := search.ask()) is not None:
                        points.append((point[1], point[0]))
                        n = len(measured)
                        profiler.profile_points([(point[1], point[0])], workload, role, progress=on_progress)
                        # a point the device skipped counts as over the cap
                        search.tell(measured[-1].peak_power_w if len(measured) > n else float("inf"))
        except BaseException:
            if measured:
                write_table([m.to_row() for m in measured], out_path, ROW_COLUMNS)
                click.echo(f"stopped after {len(measured)} of {len(points)} points; "
                           f"wrote those rows to {out_path}", err=True)
            raise
        elapsed_s = device.clock.now_s() - t0
    write_table([m.to_row() for m in measured], out_path, ROW_COLUMNS)
    click.echo(f"profiled {len(measured)} points of {workload} ({role}) on {device.spec.name} "
               f"in {elapsed_s:.1f} s of device time ({elapsed_s / max(len(measured), 1):.1f} s per point); "
               f"wrote {out_path}")
    remeasured = sum(1 for m in measured if m.remeasured)
    still = sum(1 for m in measured if m.throttled)
    if remeasured or still:  # throttled points must never go unnoticed into a predictor
        click.echo(f"throttling: {remeasured} points re-measured after a cool-down, {still} still throttled "
                   "(throttled=true in the table)", err=True)


def cap_search_levels(device: Device, modes_path: str | None) -> list[PowerMode]:
    """The levels of --order cap-search: the --modes rows as given (ascending power), else the device's
    GPU clocks from the lowest up with the cores, CPU and EMC clocks at their highest."""
    if modes_path is not None:
        table = read_mode_table(modes_path)
        if len(table) == 0:
            raise InvalidArgument("--modes", f"{modes_path} has no rows", "a mode table with at least one row")
        return [validation.power_mode(device.spec, PowerMode.from_mapping(row), f"{modes_path}:{line}", ":")
                for line, row in enumerate(table.rows, start=2)]
    return gpu_levels(device.spec)


def open_backend(open_device: Callable[..., Device], name: str, seed: int) -> Device:
    """Open the backend (the seed goes to the simulator); a bad name is a --device error."""
    try:
        return open_device(name, seed=seed)
    except InvalidArgument as exc:
        raise exc.renamed("--device") from None
    except EdgetuneError as exc:  # e.g. a replay file that is not there
        raise InvalidArgument("--device", str(exc)) from None
