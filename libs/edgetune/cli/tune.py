"""``edgetune tune``: profile, transfer, select and verify on one node in one command.

    edgetune tune --device sim:orin-agx --workload mobilenetv3 --base ref.model
                  --modes powertrain.csv --power-budget 17:50:1 [--risk 0.2] [--json]
                  [--method nn+gp] [--initial 10] [--rounds 8] [--per-round 5]
                  [--batch-size 16] [--role train] [--seed 0]
                  [--profiles-out new.csv] [--model-out new.model] [--predictions-out pred.csv]

The library's node-tuning workflow (:class:`edgetune.tuning.NodeTuner`) on a local device:
profile ``--initial`` random modes of ``--modes`` with the measurement protocol, transfer
``--base`` to them, predict every mode, profile ``--per-round`` modes on the predicted front
within the budget range, and so on for ``--rounds``; then, per budget, select on the last
predictions with the power bound at ``--risk`` and **measure the chosen mode on the device**: a
choice measured over its budget is dropped with every mode at or above its clocks, the error term
widened, and the selection repeated (at most the policy's ``max_attempts`` misses); a choice measured far
off its predicted time joins the profiles and the selection is redone, and rounds around the budget
profile modes that may beat the best one measured, within the policy's profile budget; the answer is the
best mode measured within budget. Prints docs/contract.md's ``optimize select`` JSON (``time_ms`` and
``power_w`` predicted, as there) with both kinds labelled: ``predicted`` {time_ms, power_w,
power_upper_w} and ``measured`` {time_ms, power_w} on the device. Defaults not given here are the :class:`~edgetune.tuning.TuningPolicy`'s;
``--risk`` defaults to 0.2, what ``experiments/safe_selection.py`` measured for this loop.

The device ends in the mode it started in; the chosen mode is advice, not applied. What was
profiled is written to ``--profiles-out`` after every measurement run, so a stop part-way loses nothing.
"""

from __future__ import annotations

from collections.abc import Sequence

import click
import numpy as np

from edgetune import validation
from edgetune.base.mode import MODE_FIELDS, PowerMode
from edgetune.base.records import Decision
from edgetune.cli.errors import reports_errors
from edgetune.cli.optimize import emit_json, emit_selections, selection_json
from edgetune.cli.profile import DEFAULT_BATCH_SIZE, check_workload, open_backend
from edgetune.devices.factory import open_device
from edgetune.errors import InvalidArgument
from edgetune.estimation.methods import check_method
from edgetune.optimization.select import Selection
from edgetune.profiling.protocol import ROW_COLUMNS, Measurement, ProfileConfig, Profiler
from edgetune.tables import ROLES, Table, read_mode_table, write_table
from edgetune.tuning.policy import default_policy
from edgetune.tuning.tuner import NodeTuner

DEFAULT_RISK = 0.2


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


def _log(text: str) -> None:
    click.echo(text, err=True)


def verification_line(decisions: Sequence[Decision]) -> str:
    """What the device said about the choices: how many budgets got a mode measured within them, and why
    the others did not (no feasible mode, or measured over budget); never "verified 0 ... 1 of 1 within"."""
    within = sum(d.feasible and d.within_budget for d in decisions)
    over = sum(d.feasible and not d.within_budget for d in decisions)
    infeasible = sum(not d.feasible for d in decisions)
    modes = len({d.index for d in decisions if d.feasible and d.within_budget})
    line = f"{within} of {len(decisions)} budget(s) got a mode measured within budget on the device ({modes} distinct)"
    if infeasible:
        line += f"; {infeasible} had no feasible mode"
    if over:
        line += f"; {over} measured over budget"
    retried = sum(d.attempts > 1 for d in decisions)
    return line + (f"; retried after a miss: {retried}" if retried else "")



@click.command("tune")
@click.option("--device", "device_name", required=True, help="sim:<device>, sysfs[:ROOT] or replay:<table.csv>.")
@click.option("--workload", required=True,
              help="Zoo workload, or your own MODULE:FUNCTION (found on PYTHONPATH; tuned under its id).")
@click.option("--role", type=click.Choice(ROLES), default="train", show_default=True)
@click.option("--batch-size", type=click.IntRange(min=1), default=DEFAULT_BATCH_SIZE, show_default=True)
@click.option("--base", "base_path", required=True, type=click.Path(dir_okay=False),
              help="Reference model to transfer from: a file (edgetune estimate fit), or a shipped one: "
                   "reference:orin-agx, reference:xavier-agx.")
@click.option("--modes", "modes_path", required=True, type=click.Path(dir_okay=False),
              help="The modes to choose from (a mode table, e.g. edgetune modes --grid powertrain).")
@click.option("--power-budget", "power_budget", required=True, metavar="W|A:B[:STEP]",
              help="Power budget W, or a sweep A:B[:STEP]; its range is where the front is sampled.")
@click.option("--risk", type=float, default=DEFAULT_RISK, show_default=True,
              help="Select with power_w + z(1-risk)·power_std_w within the budget.")
@click.option("--method", default=None,
              help="Transfer method (edgetune estimate transfer --method) [default: the policy's, nn+gp]; "
                   "nn+gp gives the std --risk uses.")
@click.option("--initial", "n_initial", type=click.IntRange(min=1), default=None,
              help="Random modes profiled first [default: the policy's, 10].")
@click.option("--rounds", type=click.IntRange(min=0), default=None, help="[default: the policy's, 8]")
@click.option("--per-round", type=click.IntRange(min=1), default=None, help="[default: the policy's, 5]")
@click.option("--seed", type=int, default=0, show_default=True, help="Initial modes' draw (and the simulator's).")
@click.option("--profiles-out", default=None, type=click.Path(dir_okay=False), help="Write the profiled rows here.")
@click.option("--model-out", default=None, type=click.Path(dir_okay=False), help="Write the last model here.")
@click.option("--predictions-out", default=None, type=click.Path(dir_okay=False),
              help="Write the last predictions of every mode here.")
@click.option("--json", "as_json", is_flag=True, help="Print optimize select's JSON (docs/contract.md).")
@reports_errors
def command(device_name, workload, role, batch_size, base_path, modes_path, power_budget, risk, method, n_initial,
            rounds, per_round, seed, profiles_out, model_out, predictions_out, as_json) -> None:
    """Profile modes on the predicted front, transfer, select and verify on the device: safe budgets in one go."""
    # deferred: torch, sklearn
    from edgetune.estimation.bundle import load_base
    from edgetune.tuning.local import DeviceMeasurer, LibraryEstimator, LibrarySelector

    if method is not None:
        check_method(method, "--method")
    validation.risk(risk, "--risk")
    base_policy = default_policy()
    changes = {"risk": risk, "seed": seed, "transfer_method": method, "n_initial": n_initial, "rounds": rounds,
               "per_round": per_round}
    try:
        policy = base_policy.with_(**{k: v for k, v in changes.items() if v is not None})
    except InvalidArgument as exc:
        raise exc.renamed(f"--{exc.field.replace('_', '-')}") from None
    budgets = validation.budget_sweep(power_budget, "--power-budget")  # every input is checked before the device
    base = load_base(base_path, "--base")
    device = open_backend(open_device, device_name, seed)
    with device:
        workload = check_workload(device, workload, role)
        modes = _candidate_modes(device, modes_path)
        if policy.n_initial > len(modes):
            raise InvalidArgument("--initial", f"{policy.n_initial} random modes of the {len(modes)} in {modes_path}",
                                  f"<= {len(modes)}")
        rows: list[dict] = []

        def keep(m: Measurement, purpose: str) -> None:
            if purpose == "profile":  # verification runs are reported, not written as profiles
                rows.append(m.to_row())
                if profiles_out:  # a stop part-way keeps every point measured before it
                    write_table(rows, profiles_out, ROW_COLUMNS)

        estimator = LibraryEstimator()
        tuner = NodeTuner(policy, DeviceMeasurer(Profiler(device, ProfileConfig()), workload, role, keep),
                          estimator, LibrarySelector(), base=estimator.add(base, "base"),
                          candidates=np.asarray([m.as_tuple() for m in modes], dtype=float), batch_size=batch_size,
                          device=device.spec.name, workload=workload, role=role,
                          power_range_w=(min(budgets), max(budgets)),
                          on_round=lambda k, n, total: _log(f"round {k} of {policy.explore_rounds}: profiled {n} mode(s), "
                                                            f"{total} in all; transferred"))
        _log(f"tuning {workload} ({role}, batch size {batch_size}) on {device.spec.name}: {len(modes)} modes, "
             f"up to {policy.profiles} profiles, budgets {min(budgets):g}–{max(budgets):g} W")
        try:
            tuner.profile_initial()
            pred = tuner.explore()
            model = estimator.models[tuner.model.model_id]  # type: ignore[union-attr]
            if not model.gives_std:
                _log(f"warning: {policy.transfer_method} gives no power std, so --risk {risk:g} selects on the mean")
            _log(f"profiled {len(tuner.points)} of {len(modes)} modes; selecting on the predictions of "
                 f"{model.describe()} and measuring each choice")
            decisions = tuner.tune(budgets)
        finally:
            if profiles_out and rows:
                write_table(rows, profiles_out, ROW_COLUMNS)
    if model_out:
        model.save(model_out)
    mode_table = Table([*MODE_FIELDS, "batch_size"], [{**m.as_dict(), "batch_size": batch_size} for m in modes])
    given = {c: v for c, v in (("time_ms", pred.time_ms), ("power_w", pred.power_w),
                                ("time_std_ms", pred.time_std_ms), ("power_std_w", pred.power_std_w)) if v is not None}
    columns = [*mode_table.columns, *given]
    table = Table(columns, [{**row, **{c: float(v[i]) for c, v in given.items()}}
                            for i, row in enumerate(mode_table.rows)])
    if predictions_out:
        write_table(table.rows, predictions_out, columns)
    _log(verification_line(decisions))
    for d in decisions:
        for note in d.notes:
            _log(f"{d.budget_w:g} W: {note}")
    results = [Selection(True, d.index, d.predicted_time_ms, d.predicted_power_w, d.power_upper_w,
                         power_budget_w=d.budget_w) if d.feasible and d.within_budget
               else Selection(False, None, reason=d.reason or "; ".join(d.notes) or "measured over budget",
                              power_budget_w=d.budget_w)
               for d in decisions]
    sweep = validation.is_sweep(power_budget)
    if not as_json:
        for d in decisions:
            if d.feasible and d.within_budget:
                _log(f"{d.budget_w:g} W: measured {d.measured_time_ms:.1f} ms at {d.measured_power_w:.2f} W "
                     f"(predicted {d.predicted_time_ms:.1f} ms at {d.predicted_power_w:.2f} W)")
        emit_selections(table, budgets, results, policy.objective, False, sweep, model.gives_std)
        return
    objs = [tune_json(table, s, d, model.gives_std) for s, d in zip(results, decisions, strict=True)]
    emit_json([{"power_budget_w": b, **o} for b, o in zip(budgets, objs, strict=True)] if sweep else objs[0])


def tune_json(table: Table, sel: Selection, decision: Decision, bounded: bool) -> dict:
    """``optimize select``'s object (``time_ms`` / ``power_w``: the predicted values, as there) with what the
    device measured and what the model predicted for the choice, each labelled."""
    out = selection_json(table, sel, bounded)
    if sel.feasible:
        # the prediction the choice was made on (a later refit, for another budget or after a miss, moves the
        # table's last predictions): the top-level values and ``predicted`` are the same numbers
        out["time_ms"], out["power_w"] = decision.predicted_time_ms, decision.predicted_power_w
        out["predicted"] = {"time_ms": decision.predicted_time_ms, "power_w": decision.predicted_power_w,
                            "power_upper_w": decision.power_upper_w}
        out["measured"] = {"time_ms": decision.measured_time_ms, "power_w": decision.measured_power_w}
    return out
