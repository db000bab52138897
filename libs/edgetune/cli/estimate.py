"""``edgetune estimate``: fit, transfer and apply time / power predictors (docs/contract.md).

    edgetune estimate fit      --profiles ref.csv --out ref.model [--method nn] [--epochs N] [--seed S] [--cv-folds K]
    edgetune estimate transfer --base ref.model|reference:NAME --profiles new.csv --out new.model
                               [--method ref+gp|transfer|...] [--cv-folds K] [--evidence-se K]
    edgetune estimate predict  --model new.model --modes modes.csv --out pred.csv

``predict`` writes the mode table with ``time_ms`` and ``power_w`` added (replacing columns of
those names), plus ``time_std_ms`` / ``power_std_w`` when the model has uncertainty; rows keep
their order and every other column is carried through. ``fit`` and ``transfer`` print their
K-fold cross-validated accuracy (MAPE of time and power, coverage of the 90 % interval) and
write it into the model file (``--cv-folds 0`` skips it). Epoch progress shows on stderr (a bar on a terminal, plain lines elsewhere).
Bad input exits 2 with a message naming the field.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import click

from edgetune import validation
from edgetune.base.workload import is_user_workload
from edgetune.cli.profile import parse_batch_sizes
from edgetune.cli.progress import progress_display
from edgetune.errors import InvalidArgument
from edgetune.estimation.batch_efficiency import BASE_LR, SAMPLES_PER_PASS, estimate_batch_efficiency
from edgetune.estimation.evidence import EVIDENCE_SE, MAX_EVIDENCE_SE
from edgetune.estimation.methods import METHODS, NN_METHODS
from edgetune.estimation.user_efficiency import estimate_user_batch_efficiency
from edgetune.tables import read_mode_table, read_profile_table, write_table


@contextmanager
def _warnings_to_stderr() -> Iterator[None]:
    """Show predictor warnings (extrapolation) as one plain line each, not with a source line."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield
    for w in caught:
        click.echo(f"warning: {w.message}", err=True)


@click.group("estimate")
def command() -> None:
    """Time and power predictors: fit a reference, transfer it, predict every mode."""


@command.command("fit")
@click.option("--profiles", "profiles_path", required=True, type=click.Path(dir_okay=False),
              help="Profile table to learn from (the reference workload, many modes).")
@click.option("--out", "out_path", required=True, type=click.Path(dir_okay=False), help="Model file to write.")
@click.option("--method", type=click.Choice(METHODS), default="nn", show_default=True)
@click.option("--epochs", type=click.IntRange(min=1), default=None, help="NN training epochs [default: 100].")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--cv-folds", type=click.IntRange(min=0), default=5, show_default=True,
              help="Cross-validate the fit with K folds (0: skip; costs K more fits).")
def fit_cmd(profiles_path: str, out_path: str, method: str, epochs: int | None, seed: int, cv_folds: int) -> None:
    """Fit time and power predictors on a profile table."""
    from edgetune.estimation.bundle import TimePowerModel  # deferred: torch, sklearn

    table = read_profile_table(profiles_path)
    kw = _nn_kwargs(method, epochs)
    with progress_display("epochs") as show:
        model = TimePowerModel.fit_table(table, method=method, seed=seed, progress=show, cv_folds=cv_folds, **kw)
    model.save(out_path)
    fits = model.predictors["time_ms"].meta["fit"], model.predictors["power_w"].meta["fit"]
    click.echo(f"fitted {method} on {len(table)} rows of {model.describe()} in "
               f"{fits[0]['seconds'] + fits[1]['seconds']:.1f} s; wrote {out_path}")
    _echo_cv(model)


@command.command("transfer")
@click.option("--base", "base_path", required=True, type=click.Path(dir_okay=False),
              help="Reference model written by `estimate fit`, or a shipped one: reference:orin-agx.")
@click.option("--profiles", "profiles_path", required=True, type=click.Path(dir_okay=False),
              help="Small profile table of the new workload / device (~50 rows).")
@click.option("--out", "out_path", required=True, type=click.Path(dir_okay=False), help="Model file to write.")
@click.option("--method", type=click.Choice(METHODS), default="ref+gp", show_default=True,
              help="ref+gp puts a GP around the reference's predictions (blended by CV; any reference); "
                   "transfer / nn / nn-asym / nn+gp fine-tune the reference NN; gp, linear, rf fit the new "
                   "table alone.")
@click.option("--epochs", type=click.IntRange(min=1), default=None, help="Most fine-tuning epochs [default: 300].")
@click.option("--cv-folds", type=click.IntRange(min=0), default=5, show_default=True,
              help="Cross-validate the transfer with K folds (0: skip; costs K more transfers, or about one "
                   "for the methods that fine-tune the NN: their folds train as one batch).")
@click.option("--evidence-se", type=click.FloatRange(0.0, MAX_EVIDENCE_SE), default=None,
              help="ref+gp: keep the reference-based blend only when its cross-validated gain over a GP on the "
                   f"profiles alone exceeds this many standard errors [default: {EVIDENCE_SE:g}; 0: any gain].")
def transfer_cmd(base_path: str, profiles_path: str, out_path: str, method: str, epochs: int | None,
                 cv_folds: int, evidence_se: float | None) -> None:
    """Adapt a reference model to a new workload or device from a small profile table."""
    from edgetune.estimation.bundle import load_base  # deferred: torch, sklearn

    if evidence_se is not None and method != "ref+gp":
        raise InvalidArgument("--evidence-se", f"applies to ref+gp, not {method!r}", "--method ref+gp")
    base = load_base(base_path, "--base")
    table = read_profile_table(profiles_path)
    settings = {"transfer_epochs": epochs} if epochs is not None and method in ("transfer", "nn", "nn-asym") else {}
    kw: dict[str, Any] = {"evidence_se": evidence_se} if evidence_se is not None else {}
    with progress_display("epochs") as show, _warnings_to_stderr():
        model = base.transfer_table(table, method=method, progress=show, nn_settings=settings, cv_folds=cv_folds,
                                    **kw)
    model.save(out_path)
    click.echo(f"transferred {base.describe()} to {model.describe()} with {method} on {len(table)} rows; "
               f"wrote {out_path}")
    _echo_cv(model)


def _echo_cv(model: object) -> None:
    from edgetune.estimation.bundle import TimePowerModel  # deferred: torch, sklearn

    cv = model.cross_validation if isinstance(model, TimePowerModel) else None
    if cv is not None:
        click.echo(cv.describe())


@command.command("predict")
@click.option("--model", "model_path", required=True, type=click.Path(dir_okay=False), help="Model file.")
@click.option("--modes", "modes_path", required=True, type=click.Path(dir_okay=False),
              help="Mode table (cores,cpu_mhz,gpu_mhz,emc_mhz[,batch_size], other columns carried through).")
@click.option("--out", "out_path", required=True, type=click.Path(dir_okay=False), help="Prediction table to write.")
def predict_cmd(model_path: str, modes_path: str, out_path: str) -> None:
    """Predict time and power for every row of a mode table."""
    from edgetune.estimation.bundle import TimePowerModel  # deferred: torch, sklearn

    model = TimePowerModel.load(model_path)
    table = read_mode_table(modes_path)
    if len(table) == 0:
        raise InvalidArgument("--modes", f"{modes_path} has no rows", "a mode table with at least one row")
    with _warnings_to_stderr():
        pred = model.predict_table(table)
    added = [c for c in ("time_ms", "power_w", "time_std_ms", "power_std_w") if c in pred]
    # A mode table without batch_size is predicted at the model's one batch size: say which, so that
    # the predictions are a complete options table (edgetune plan needs the column).
    implied = None if table.has("batch_size") or len(model.batch_sizes) != 1 else model.batch_sizes[0]
    columns = ([c for c in table.columns if c not in added] + (["batch_size"] if implied is not None else [])
               + added)
    rows = []
    for i, row in enumerate(table.rows):
        out = dict(row)
        if implied is not None:
            out["batch_size"] = implied
        for c in added:
            out[c] = float(pred[c][i])
        rows.append(out)
    write_table(rows, out_path, columns)
    click.echo(f"predicted {len(rows)} rows with {model.describe()}; wrote {out_path}")


def _nn_kwargs(method: str, epochs: int | None) -> dict:
    if epochs is None:
        return {}
    if method not in NN_METHODS:
        raise InvalidArgument("--epochs", f"applies to the NN methods, not {method!r}", ", ".join(NN_METHODS))
    return {"nn_params": {"epochs": epochs}} if method == "nn+gp" else {"epochs": epochs}


@command.command("efficiency")
@click.option("--workload", required=True,
              help="Your model as MODULE:FUNCTION (returning (model, make_batch, loss_fn); the model as returned is "
                   "the checkpoint), or a built-in proxy model (resnet-slim, mobilenetv3-slim, ...).")
@click.option("--data", "data", required=True,
              help="Your proxy data set as MODULE:FUNCTION (returning (train, val), each (inputs, targets) tensors, "
                   "targets int64 class indices), or a built-in one (digits, ...) for a built-in model.")
@click.option("--batch-sizes", "batch_sizes_text", required=True, help="Comma-separated batch sizes, e.g. 8,16,32,64.")
@click.option("--target-accuracy", type=float, required=True, help="Held-out accuracy to reach (a fraction).")
@click.option("--seeds", "seeds_text", default="0,1,2", show_default=True, help="Comma-separated run seeds.")
@click.option("--samples-per-pass", type=int, default=None, help="s [default: 2 x the largest batch size].")
@click.option("--max-passes", type=click.IntRange(min=1), default=60, show_default=True,
              help="Passes after which a run counts as never reaching the target.")
@click.option("--base-lr", type=float, default=None,
              help="Adam's learning rate at batch size 128, scaled by sqrt(b / 128) [default: 5e-4, the paper's].")
@click.option("--out", "out_path", required=True, type=click.Path(dir_okay=False),
              help="eff.csv to write (batch_size,passes_to_target; optimize joint --efficiency).")
@click.option("--ray/--no-ray", default=True, show_default=True,
              help="One Ray task per (batch size, seed) on a local Ray (or EDGETUNE_RAY_ADDRESS), or in order here.")
def efficiency_cmd(workload: str, data: str, batch_sizes_text: str, target_accuracy: float, seeds_text: str,
                   samples_per_pass: int | None, max_passes: int, base_lr: float | None, out_path: str,
                   ray: bool) -> None:
    """Batch efficiency (Ahmed et al.): passes to the target accuracy per batch size on a proxy data set."""
    batch_sizes = parse_batch_sizes(batch_sizes_text) or []
    seeds = [validation.seed(_int(part), f"--seeds[{i}]") for i, part in enumerate(seeds_text.split(","))]
    if samples_per_pass is not None:
        validation.count(samples_per_pass, "--samples-per-pass")
    if base_lr is not None and not (math.isfinite(base_lr) and base_lr > 0):
        raise InvalidArgument("--base-lr", f"{base_lr!r}", "a finite learning rate > 0")

    lr = BASE_LR if base_lr is None else base_lr
    with progress_display("runs") as update:
        def show(done: int, total: int) -> None:
            update("training", done, total)

        if is_user_workload(workload):
            est = estimate_user_batch_efficiency(workload, data, batch_sizes, target_accuracy, seeds,
                                                 max_passes=max_passes, samples_per_pass=samples_per_pass,
                                                 base_lr=lr, parallel=ray, progress=show)
        else:
            est = estimate_batch_efficiency(workload, batch_sizes, target_accuracy, seeds, data, max_passes, lr,
                                            parallel=ray, samples_per_pass=samples_per_pass or SAMPLES_PER_PASS,
                                            progress=show)
    est.to_csv(out_path)
    mean = est.passes_mean()
    click.echo(f"passes to {target_accuracy:g} on {data} (from {est.initial_accuracy:.3f}), s = {est.samples_per_pass}: "
               + ", ".join(f"b={b} {n:g}" for b, n in sorted(mean.items()))
               + f"; {len(est.runs)} runs in {est.wall_s:.1f} s; wrote {out_path}")


def _int(text: str) -> object:
    try:
        return int(text.strip())
    except ValueError:  # the text, not a number: the rule names it as given
        return text.strip()
