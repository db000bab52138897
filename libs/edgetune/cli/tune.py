"""``edgetune tune``: profile, transfer and select on one node in one command.

    edgetune tune --device sim:orin-agx --workload mobilenetv3 --base ref.model
                  --modes powertrain.csv --power-budget 17:50:1 [--risk 0.2] [--json]
                  [--method nn+gp] [--initial 10] [--rounds 8] [--per-round 5]
                  [--batch-size 16] [--role train] [--seed 0]
                  [--profiles-out new.csv] [--model-out new.model] [--predictions-out pred.csv]

The README's frontier-sampling recipe as one loop (:func:`edgetune.optimization.frontier.
run_frontier_sampling`): profile ``--initial`` random modes of ``--modes`` with the measurement
protocol, transfer ``--base`` to them, predict every mode, profile ``--per-round`` modes on the
predicted front within the budget range, and so on for ``--rounds``; then select on the last
predictions with the power bound at ``--risk`` (CONTRACT.md's ``optimize select`` JSON).
Defaults are the ones ``experiments/safe_selection.py`` measured: 50 profiles, nn+gp, risk 0.2.

The device ends in the mode it started in; the chosen mode is advice, not applied. What was
profiled is written to ``--profiles-out`` after every round, so a stop part-way loses nothing.
"""

from __future__ import annotations

import click
import numpy as np

from edgetune import validation
from edgetune.cli.errors import reports_errors
from edgetune.cli.optimize import emit_selection
from edgetune.cli.profile import DEFAULT_BATCH_SIZE, check_workload, open_backend
from edgetune.errors import InvalidArgument
from edgetune.optimization.frontier import (
    N_INITIAL,
    PER_ROUND,
    ROUNDS,
    FrontierSampler,
    run_frontier_sampling,
)
from edgetune.powermodes.mode import MODE_FIELDS, PowerMode
from edgetune.tables import ROLES, Table, read_mode_table, write_table

PREDICTED = ("time_ms", "power_w", "time_std_ms", "power_std_w")
DEFAULT_METHOD, DEFAULT_RISK = "nn+gp", 0.2


def _candidate_modes(device, modes_path: str) -> list[PowerMode]:
    """The mode table's distinct modes, each checked against the device (file:line on error)."""
    table = read_mode_table(modes_path)
    modes: dict[PowerMode, None] = {}
    for line, row in enumerate(table.rows, start=2):
        try:
            modes[device.spec.validate(PowerMode.from_mapping(row))] = None
        except InvalidArgument as exc:
            raise exc.prefixed(f"{modes_path}:{line}", ":") from None
    if not modes:
        raise InvalidArgument("--modes", f"{modes_path} has no rows", "a mode table with at least one row")
    return list(modes)


def _power_range(spec: str) -> tuple[float, float]:
    budgets = validation.budget_sweep(spec, "--power-budget")
    return min(budgets), max(budgets)


def _log(text: str) -> None:
    click.echo(text, err=True)


@click.command("tune")
@click.option("--device", "device_name", required=True, help="sim:<device>, sysfs or replay:<table.csv>.")
@click.option("--workload", required=True, help="Zoo workload to profile.")
@click.option("--role", type=click.Choice(ROLES), default="train", show_default=True)
@click.option("--batch-size", type=click.IntRange(min=1), default=DEFAULT_BATCH_SIZE, show_default=True)
@click.option("--base", "base_path", required=True, type=click.Path(dir_okay=False),
              help="Reference model (edgetune estimate fit) to transfer from.")
@click.option("--modes", "modes_path", required=True, type=click.Path(dir_okay=False),
              help="The modes to choose from (a mode table, e.g. edgetune modes --grid powertrain).")
@click.option("--power-budget", "power_budget", required=True,
              help="Power budget W, or a sweep A:B:STEP; its range is where the front is sampled.")
@click.option("--risk", type=float, default=DEFAULT_RISK, show_default=True,
              help="Select with power_w + z(1-risk)·power_std_w within the budget.")
@click.option("--method", default=DEFAULT_METHOD, show_default=True,
              help="Transfer method (edgetune estimate transfer --method); nn+gp gives the std --risk uses.")
@click.option("--initial", "n_initial", type=click.IntRange(min=1), default=N_INITIAL, show_default=True,
              help="Random modes profiled first.")
@click.option("--rounds", type=click.IntRange(min=0), default=ROUNDS, show_default=True)
@click.option("--per-round", type=click.IntRange(min=1), default=PER_ROUND, show_default=True)
@click.option("--seed", type=int, default=0, show_default=True, help="Initial modes' draw (and the simulator's).")
@click.option("--profiles-out", default=None, type=click.Path(dir_okay=False), help="Write the profiled rows here.")
@click.option("--model-out", default=None, type=click.Path(dir_okay=False), help="Write the last model here.")
@click.option("--predictions-out", default=None, type=click.Path(dir_okay=False),
              help="Write the last predictions of every mode here.")
@click.option("--json", "as_json", is_flag=True, help="Print optimize select's JSON (CONTRACT.md).")
@reports_errors
def command(device_name, workload, role, batch_size, base_path, modes_path, power_budget, risk, method, n_initial,
            rounds, per_round, seed, profiles_out, model_out, predictions_out, as_json) -> None:
    """Profile modes on the predicted front, transfer, and select: the safe budget selection in one go."""
    from edgetune.devices.factory import open_device
    from edgetune.estimation.bundle import TimePowerModel
    from edgetune.estimation.registry import METHODS
    from edgetune.profiling.protocol import ROW_COLUMNS, ProfileConfig, Profiler, ProgressEvent

    if method not in METHODS:
        raise InvalidArgument("--method", f"unknown method {method!r}", ", ".join(METHODS))
    validation.risk(risk, "--risk")
    power_range_w = _power_range(power_budget)  # every input is checked before the device is touched
    base = TimePowerModel.load(base_path)
    device = open_backend(open_device, device_name, seed)
    with device:
        check_workload(device, workload)
        modes = _candidate_modes(device, modes_path)
        if n_initial > len(modes):
            raise InvalidArgument("--initial", f"{n_initial} random modes of the {len(modes)} in {modes_path}",
                                  f"<= {len(modes)}")
        mode_table = Table(list(MODE_FIELDS) + ["batch_size"],
                           [{**m.as_dict(), "batch_size": batch_size} for m in modes])
        sampler = FrontierSampler(len(modes), n_initial=n_initial, rounds=rounds, per_round=per_round,
                                  power_range_w=power_range_w, seed=seed)
        profiler = Profiler(device, ProfileConfig())
        rows: list[dict] = []
        model = None  # the last transfer

        def keep(event: ProgressEvent) -> None:
            if event.measurement is not None:
                rows.append(event.measurement.to_row())

        def measure(picks: np.ndarray) -> None:
            try:
                profiler.profile_points([(modes[i], batch_size) for i in picks], workload, role, progress=keep)
            finally:  # a stop part-way keeps every point measured before it
                if profiles_out and rows:
                    write_table(rows, profiles_out, ROW_COLUMNS)

        def refit() -> dict[str, np.ndarray]:
            nonlocal model
            model = base.transfer_table(Table(list(ROW_COLUMNS), list(rows)), method=method)
            return model.predict_table(mode_table)

        def on_round(k: int, picks: np.ndarray) -> None:
            _log(f"round {k} of {rounds}: profiled {len(picks)} mode(s), {len(rows)} in all; transferred")

        _log(f"tuning {workload} ({role}, batch size {batch_size}) on {device.spec.name}: {len(modes)} modes, "
             f"up to {sampler.budget} profiles, budgets {power_range_w[0]:g}–{power_range_w[1]:g} W")
        pred = run_frontier_sampling(sampler, measure, refit, on_round)
    if model_out:
        model.save(model_out)
    if not model.gives_std:
        _log(f"warning: {method} gives no power std, so --risk {risk:g} selects on the mean")
    columns = [*mode_table.columns, *(c for c in PREDICTED if c in pred)]
    table = Table(columns, [{**row, **{c: float(pred[c][i]) for c in PREDICTED if c in pred}}
                            for i, row in enumerate(mode_table.rows)])
    if predictions_out:
        write_table(table.rows, predictions_out, columns)
    _log(f"profiled {len(rows)} of {len(modes)} modes; selecting on the predictions of {model.describe()}")
    emit_selection(table, power_budget, None, "time", risk, as_json)
