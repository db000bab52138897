"""``edgetune search``: run a search strategy against a replayed profile table (docs/contract.md).

    edgetune search --strategy gmd|als|random|exhaustive|nn|maxn|preset --replay truth.csv
                    --problem train|infer|concurrent --power-budget W
                    [--latency-budget-ms L] [--arrival-rps A]
                    [--train-workload NAME] [--infer-workload NAME] [--train-batch-size B]
                    [--max-profiles N] [--seed S] [--json]

``truth.csv`` is a profile table with ``workload`` and ``role`` columns; its distinct values
per dimension define the grid (a table that recorded some modes only is fine: GMD lets the
nearest recorded mode stand for a grid point that was not recorded). ``profiled`` counts the distinct (mode, batch size, workload,
role) points the strategy measured. ``--max-profiles`` caps that count (and is N for
``random`` / ``nn``). Nothing feasible is an answer (``"feasible": false``, exit 0); a missing
or bad option exits 2 naming it.
"""

from __future__ import annotations

import json
from pathlib import Path

import click

from edgetune import validation
from edgetune.cli.errors import checked, options_named, reports_errors
from edgetune.devices.replay import ReplayDevice
from edgetune.errors import InvalidArgument
from edgetune.optimization.problems import ConcurrentProblem, InferProblem, Problem, TrainProblem
from edgetune.optimization.strategies import STRATEGIES, make_strategy, run_search, search_space
from edgetune.optimization.strategies.driver import workloads_with_role

#: Problem fields → the options that set them (error messages name the option).
_OPTION_OF = {"power_budget_w": "--power-budget", "latency_budget_ms": "--latency-budget-ms",
              "arrival_rps": "--arrival-rps", "train_workload": "--train-workload",
              "infer_workload": "--infer-workload", "train_batch_size": "--train-batch-size",
              "max_profiles": "--max-profiles", "budget": "--max-profiles"}


def _workload(device: ReplayDevice, role: str, given: str | None, option: str) -> str | None:
    if given is not None or not device.has_workload:
        return given
    names = workloads_with_role(device, role)
    if len(names) == 1:
        return names[0]
    if not names:
        raise InvalidArgument(option, f"{device.path} has no {role} rows", f"a table with {role} rows")
    raise InvalidArgument(option, f"is required: {device.path} holds {len(names)} workloads with {role} rows",
                          ", ".join(names))


def _required(value: float | None, option: str, kind: str) -> float:
    if value is None:
        raise InvalidArgument(option, f"is required for --problem {kind}", "a number > 0")
    return value


def _problem(kind: str, device: ReplayDevice, power: float, latency: float | None, rate: float | None,
             train_w: str | None, infer_w: str | None, train_bs: int | None) -> Problem:
    with options_named(_OPTION_OF):
        if kind == "train":
            return TrainProblem(power, train_bs, _workload(device, "train", train_w, "--train-workload"))
        latency = _required(latency, "--latency-budget-ms", kind)
        rate = _required(rate, "--arrival-rps", kind)
        if kind == "infer":
            return InferProblem(power, latency, rate, _workload(device, "infer", infer_w, "--infer-workload"))
        return ConcurrentProblem(power, latency, rate, _workload(device, "train", train_w, "--train-workload"),
                                 _workload(device, "infer", infer_w, "--infer-workload"), train_bs)


def _summary(payload: dict, strategy: str, kind: str) -> str:
    if not payload["feasible"]:
        return f"{strategy}: no feasible configuration ({payload['reason']}); profiled {payload.get('profiled', 0)}"
    m = payload["mode"]
    lines = [f"{strategy} ({kind}): {m['cores']}c/{m['cpu_mhz']:g}/{m['gpu_mhz']:g}/{m['emc_mhz']:g} MHz, "
             f"batch size {payload['batch_size']}",
             f"  time {payload['time_ms']:.1f} ms, power {payload['power_w']:.2f} W"]
    if "latency_ms" in payload:
        lines.append(f"  peak latency {payload['latency_ms']:.1f} ms")
    if "train_minibatches_per_s" in payload:
        lines.append(f"  training {payload['train_minibatches_per_s']:.2f} minibatches/s "
                     f"({payload['tau_train']} per inference minibatch)")
    lines.append(f"  profiled {payload['profiled']} points")
    return "\n".join(lines)


@click.command("search")
@click.option("--strategy", required=True, type=click.Choice(list(STRATEGIES)),
              help="gmd, als: Fulcrum's strategies; random, nn: baselines; exhaustive: the oracle; "
                   "maxn, preset: fixed modes.")
@click.option("--replay", "replay_path", required=True, type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="Profile table to replay (with workload and role columns).")
@click.option("--problem", "kind", required=True, type=click.Choice(["train", "infer", "concurrent"]))
@click.option("--power-budget", "power_spec", required=True, metavar="W|A:B[:STEP]",
              help="Power budget in W, or a sweep A:B[:STEP] (one search per budget; JSON: a list).")
@click.option("--latency-budget-ms", "latency", type=float, default=None, metavar="L",
              callback=checked(validation.latency_budget_ms),
              help="Peak inference latency budget (infer, concurrent).")
@click.option("--arrival-rps", "rate", type=float, default=None, metavar="A", callback=checked(validation.arrival_rps),
              help="Inference request arrival rate (infer, concurrent).")
@click.option("--train-workload", "train_w", default=None, metavar="NAME")
@click.option("--infer-workload", "infer_w", default=None, metavar="NAME")
@click.option("--train-batch-size", "train_bs", type=int, default=None, metavar="B",
              callback=checked(validation.batch_size),
              help="Training minibatch size to use (default: the table's only one, else 16).")
@click.option("--max-profiles", "max_profiles", type=int, default=None, metavar="N", callback=checked(validation.count),
              help="Most distinct points to profile (N of random / nn).")
@click.option("--seed", type=int, default=0, show_default=True, callback=checked(validation.seed))
@click.option("--json", "as_json", is_flag=True, help="Print the decision as JSON.")
@reports_errors
def command(strategy: str, replay_path: Path, kind: str, power_spec: str, latency: float | None,
            rate: float | None, train_w: str | None, infer_w: str | None, train_bs: int | None,
            max_profiles: int | None, seed: int, as_json: bool) -> None:
    """Search power modes and batch sizes on a replayed table."""
    budgets = validation.budget_sweep(power_spec, "--power-budget")
    device = ReplayDevice(str(replay_path))
    payloads = []
    for power in budgets:  # a sweep is one independent search per budget, each with its own profiles
        problem = _problem(kind, device, power, latency, rate, train_w, infer_w, train_bs)
        with options_named(_OPTION_OF):
            space, problem = search_space(device, problem)
            budget = max_profiles if strategy in ("random", "nn") else None
            if strategy == "nn" and budget is not None:
                budget = max(2, budget)  # N − 1 random configurations and the predicted pick
            strat = make_strategy(strategy, problem, space, budget=budget, seed=seed)
        payloads.append(run_search(strat, device, problem, max_profiles=max_profiles).as_json())
    if not validation.is_sweep(power_spec):
        if as_json:
            click.echo(json.dumps(payloads[0]))
        else:
            click.echo(_summary(payloads[0], strategy, kind))
        return
    if as_json:
        click.echo(json.dumps([{"power_budget_w": b, **p} for b, p in zip(budgets, payloads, strict=True)]))
    else:
        click.echo("\n".join(f"{b:g} W: {_summary(p, strategy, kind)}" for b, p in zip(budgets, payloads, strict=True)))
