"""The estimator service's fits and transfers: the library's one pipeline
(:meth:`TimePowerModel.fit_table <edgetune.estimation.bundle.TimePowerModel.fit_table>` /
:meth:`~edgetune.estimation.bundle.TimePowerModel.transfer_table`) with its per-target tasks run
by :class:`Runner` — local Ray (default), a Ray cluster (``--ray-address`` /
``EDGETUNE_RAY_ADDRESS``) or in order (``--no-ray``). ``run_tasks`` runs each task on one thread
in both modes, so a seeded fit gives the same model either way. This module only runs tasks and
turns a model's history event into the repository's metadata.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from edgetune.errors import EdgetuneError
from edgetune.estimation.bundle import TimePowerModel
from edgetune.estimation.parallel import TaskFailed, run_tasks
from edgetune.services.estimator import metrics
from edgetune.services.estimator.convert import Rows
from edgetune.store import ModelRecord


@dataclass(frozen=True)
class Runner:
    """How tasks run: local Ray (default), a cluster ``address``, or in order (``parallel=False``)."""

    parallel: bool = True
    address: str | None = None
    num_cpus: int | None = None

    def start(self) -> None:
        """Start (or join) Ray now with this runner's settings; library calls that fan out later reuse it."""
        if self.parallel:
            from edgetune.estimation.parallel import ensure_ray

            ensure_ray(self.address, self.num_cpus)

    def run(self, fn: Callable[..., Any], tasks: Sequence[Mapping[str, Any]],
            shared: Mapping[str, Any] | None = None) -> list[Any]:
        """A :data:`~edgetune.estimation.bundle.TaskRunner`."""
        metrics.TASKS.labels("ray" if self.parallel else "sequential").inc(len(tasks))
        try:
            return run_tasks(fn, tasks, parallel=self.parallel, address=self.address, num_cpus=self.num_cpus,
                             shared=shared)
        except TaskFailed as exc:
            # A bad-input error raised inside a task is the caller's mistake: answer with it as is.
            if isinstance(exc.cause, EdgetuneError):
                raise exc.cause from exc
            raise


@dataclass
class FitJob:
    device: str
    workload: str
    role: str
    method: str
    rows: Rows
    seed: int = 0
    kw: dict[str, Any] = field(default_factory=dict)
    validation_fraction: float = 0.1


@dataclass
class TransferJob:
    base: TimePowerModel
    base_model_id: str  # id@version
    device: str
    workload: str
    role: str
    method: str
    rows: Rows
    kw: dict[str, Any] = field(default_factory=dict)
    nn_settings: dict[str, Any] = field(default_factory=dict)


@dataclass
class Trained:
    model: TimePowerModel
    meta: ModelRecord


def fit_model(job: FitJob, runner: Runner) -> Trained:
    """The job's reference model (targets as parallel tasks); MAPE on its held-out rows."""
    t0 = time.perf_counter()
    table = job.rows.table(job.device, job.workload, job.role)
    model = TimePowerModel.fit_table(table, job.method, job.seed, runner=runner.run,
                                     validation_fraction=job.validation_fraction, source=job.rows.source, **job.kw)
    meta = _meta(model, job.rows, seconds=round(time.perf_counter() - t0, 3))
    metrics.TRAIN_SECONDS.labels("Fit").observe(time.perf_counter() - t0)
    return Trained(model, meta)


def transfer_model(job: TransferJob, runner: Runner) -> Trained:
    """The base adapted to the job's rows (targets as parallel tasks); in-sample MAPE."""
    t0 = time.perf_counter()
    table = job.rows.table(job.device, job.workload, job.role)
    model = job.base.transfer_table(table, job.method, runner=runner.run, nn_settings=job.nn_settings,
                                    source=job.rows.source, **job.kw)
    meta = _meta(model, job.rows, seconds=round(time.perf_counter() - t0, 3), base_model_id=job.base_model_id)
    metrics.TRAIN_SECONDS.labels("Transfer").observe(time.perf_counter() - t0)
    return Trained(model, meta)


def _meta(model: TimePowerModel, rows: Rows, *, seconds: float, base_model_id: str = "") -> ModelRecord:
    """The repository's record: what the pipeline's history event recorded, plus the model's shape."""
    event = model.last_event
    return ModelRecord(
        model_id="", kind=str(event["method"]), device=model.device, workload=model.workload, role=model.role,
        n_train=int(event["n_train"]), rows=len(rows), has_std=model.gives_std,
        batch_sizes=tuple(int(b) for b in model.batch_sizes), columns=tuple(model.columns),
        metrics=dict(event["metrics"]), source=rows.source, base_model_id=base_model_id, seconds=seconds,
        held_out_rows=event.get("held_out_rows"), validation_fraction=event.get("validation_fraction"),
        seed=event.get("seed"))
