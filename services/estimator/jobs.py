"""Fitting and transferring as parallel tasks: one task per (job × target) through ``parallel.run_tasks``.

A *job* is one model: (device, workload, role) rows and a method. Its two targets (``time_ms``,
``power_w``) are independent predictors, so :func:`fit_models` sends every target of every job
as one task to local Ray, a Ray cluster (``--ray-address`` / ``EDGETUNE_RAY_ADDRESS``), or runs
them in order (``--no-ray``). ``run_tasks`` runs each task on one thread in both modes, so a
seeded fit gives the same model either way. Tasks exchange predictor files (bytes), not live
objects. The predictors are the library's (:mod:`edgetune.estimation`); this module only
splits, dispatches and assembles.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from edgetune.errors import EdgetuneError
from edgetune.estimation.base import Predictor
from edgetune.estimation.bundle import TimePowerModel
from edgetune.estimation.features import TARGETS
from edgetune.estimation.metrics import mape_pct
from edgetune.estimation.parallel import TaskFailed, run_tasks
from edgetune.estimation.registry import adapt, make_predictor
from edgetune.services.estimator import metrics
from edgetune.services.estimator.convert import Rows, feature_columns, held_out_count


# --- the tasks (top-level: Ray workers import them by name) ---------------------------------------
def fit_target(*, x: np.ndarray, y: np.ndarray, columns: tuple[str, ...], method: str, target: str, seed: int,
               kw: Mapping[str, Any]) -> bytes:
    """One target's predictor fitted on (x, y), as its file."""
    return make_predictor(method, target, seed=seed, **kw).fit(x, y, columns=columns).to_bytes()


def transfer_target(*, base: bytes, x: np.ndarray, y: np.ndarray, method: str, kw: Mapping[str, Any],
                    nn_attrs: Mapping[str, Any]) -> bytes:
    """One target's reference predictor adapted to (x, y) with ``method``, as its file."""
    ref = Predictor.from_bytes(base)
    nn = getattr(ref, "nn", ref)  # fine-tuning settings live on the reference MLP
    for key, value in nn_attrs.items():
        setattr(nn, key, value)
    return adapt(ref, method, x, y, **kw).to_bytes()


# --- running them --------------------------------------------------------------------------------
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
        metrics.TASKS.labels("ray" if self.parallel else "sequential").inc(len(tasks))
        try:
            return run_tasks(fn, tasks, parallel=self.parallel, address=self.address, num_cpus=self.num_cpus,
                             shared=shared)
        except TaskFailed as exc:
            # A bad-input error raised inside a task is the caller's mistake: answer with it as is.
            if isinstance(exc.cause, EdgetuneError):
                raise exc.cause from exc
            raise


# --- fit -------------------------------------------------------------------------------------------
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
class Trained:
    model: TimePowerModel
    meta: dict[str, Any]


def split(n: int, fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(train, held-out) row indices, each in table order; seeded."""
    perm = np.random.default_rng(seed).permutation(n)
    n_val = held_out_count(n, fraction)
    return np.sort(perm[n_val:]), np.sort(perm[:n_val])


def fit_models(jobs: Sequence[FitJob], runner: Runner) -> list[Trained]:
    """Every job's reference model, its targets fitted as parallel tasks; MAPE on each job's held-out rows."""
    t0 = time.perf_counter()
    tasks, prepared = [], []
    for j, job in enumerate(jobs):
        train, held = split(len(job.rows), job.validation_fraction, job.seed)
        columns = feature_columns(job.rows)
        x = job.rows.features(columns)
        prepared.append((train, held, columns, x))
        for target in TARGETS:
            tasks.append({"x": x[train], "y": job.rows.target(target)[train], "columns": columns,
                          "method": job.method, "target": target, "seed": job.seed, "kw": job.kw, "_job": j})
    files = runner.run(fit_target, [{k: v for k, v in t.items() if k != "_job"} for t in tasks])
    out = []
    for j, job in enumerate(jobs):
        train, held, columns, x = prepared[j]
        predictors = {t["target"]: Predictor.from_bytes(f) for t, f in zip(tasks, files, strict=True)
                      if t["_job"] == j}
        model = TimePowerModel(predictors, job.device, job.workload, job.role, job.rows.batch_sizes)
        model.history.append(_event("fit", job.method, len(train), job))
        pred = model.predict(x[held])
        scores = {f"{t.split('_')[0]}_mape": mape_pct(pred[t], job.rows.target(t)[held]) for t in TARGETS}
        meta = _meta(job.method, job, model, n_train=len(train), metrics=scores)
        meta.update(held_out_rows=len(held), validation_fraction=job.validation_fraction, seed=job.seed,
                    fit_s=round(time.perf_counter() - t0, 3))
        out.append(Trained(model, meta))
    metrics.TRAIN_SECONDS.labels("Fit").observe(time.perf_counter() - t0)
    return out


# --- transfer ---------------------------------------------------------------------------------------
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
    nn_attrs: dict[str, Any] = field(default_factory=dict)


def transfer_model(job: TransferJob, runner: Runner) -> Trained:
    """The base adapted to the job's rows, both targets as parallel tasks; MAPE on those rows (in-sample:
    a ~50-row table is too small to hold any out)."""
    t0 = time.perf_counter()
    x = job.rows.features(job.base.columns)
    tasks = [{"base": job.base.predictors[t].to_bytes(), "y": job.rows.target(t)} for t in TARGETS]
    files = runner.run(transfer_target, tasks,
                       shared={"x": x, "method": job.method, "kw": job.kw, "nn_attrs": job.nn_attrs})
    predictors = {t: Predictor.from_bytes(f) for t, f in zip(TARGETS, files, strict=True)}
    model = TimePowerModel(predictors, job.device, job.workload, job.role,
                           job.rows.batch_sizes or list(job.base.batch_sizes), history=list(job.base.history))
    model.history.append(_event("transfer", job.method, len(job.rows), job))
    pred = model.predict(x)
    scores = {f"{t.split('_')[0]}_mape_train": mape_pct(pred[t], job.rows.target(t)) for t in TARGETS}
    meta = _meta(job.method, job, model, n_train=len(job.rows), metrics=scores)
    meta.update(base_model_id=job.base_model_id, transfer_s=round(time.perf_counter() - t0, 3))
    metrics.TRAIN_SECONDS.labels("Transfer").observe(time.perf_counter() - t0)
    return Trained(model, meta)


def _meta(method: str, job: Any, model: TimePowerModel, *, n_train: int, metrics: dict[str, float]) -> dict[str, Any]:
    return {"kind": method, "device": job.device, "workload": job.workload, "role": job.role, "n_train": n_train,
            "rows": len(job.rows), "source": job.rows.source, "metrics": metrics, "has_std": model.gives_std,
            "batch_sizes": model.batch_sizes, "columns": list(model.columns)}


def _event(kind: str, method: str, rows: int, job: Any) -> dict[str, Any]:
    return {"event": kind, "method": method, "rows": rows, "source": job.rows.source,
            "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "device": job.device,
            "workload": job.workload, "role": job.role}
