"""Fits and transfers of stored models, and batch efficiency: what the estimator service answers.

A :class:`ModelTrainer` takes a :class:`~edgetune.estimation.records.FitSpec` or
:class:`~edgetune.estimation.records.TransferSpec`, applies the settings' rules
(:mod:`.params`, :mod:`.ids`, the device's tables), takes the measurements given or the
store's, runs the library's one pipeline
(:meth:`TimePowerModel.fit_table <edgetune.estimation.bundle.TimePowerModel.fit_table>` /
:meth:`~edgetune.estimation.bundle.TimePowerModel.transfer_table`) with its per-target tasks on a
:class:`Runner` — local Ray (default), a Ray cluster or in order — and saves the model as a new
version in the :class:`~edgetune.estimation.repository.ModelRepository`. ``run_tasks`` runs each
task on one thread in both modes, so a seeded fit gives the same model either way.

Refusals name the setting as the estimator's request does (``kind``, ``measurements[3].time_ms``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from prometheus_client import Counter, Histogram

from edgetune import validation
from edgetune.base.mode import MODE_FIELDS
from edgetune.base.records import BatchEfficiency
from edgetune.base.roles import Role
from edgetune.errors import EdgetuneError, InvalidArgument
from edgetune.estimation import params
from edgetune.estimation.batch_efficiency import SAMPLES_PER_PASS, estimate_batch_efficiency
from edgetune.estimation.bundle import TimePowerModel, transfer_tables
from edgetune.estimation.features import BATCH_FEATURE, TARGETS
from edgetune.estimation.ids import default_model_id, id_part, parse_model_id
from edgetune.estimation.methods import NN_METHODS, TRANSFER_METHODS, parse_method
from edgetune.estimation.parallel import TaskFailed, ensure_pool, ensure_ray, run_tasks
from edgetune.estimation.records import EfficiencySpec, FitSpec, MeasuredRow, TransferSpec
from edgetune.estimation.repository import Loaded, ModelRepository
from edgetune.estimation.threads import single_threaded
from edgetune.estimation.validation import MIN_FIT_ROWS, MIN_TRANSFER_ROWS
from edgetune.powermodes.spec import DeviceSpec
from edgetune.powermodes.specs import get_spec
from edgetune.store import MeasurementRecord, ModelRecord
from edgetune.tables import Table

log = logging.getLogger(__name__)

# What *this* process did (models are shared by every estimator replica through the store).
MODELS_STORED = Counter("edgetune_estimator_models_stored_total",
                        "Model versions written to the store, by RPC (Fit / Transfer) and method.", ["rpc", "method"])
TRAIN_SECONDS = Histogram("edgetune_estimator_train_seconds", "Wall time of a Fit or Transfer (all its tasks).",
                          ["rpc"], buckets=(0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800))
TASKS = Counter("edgetune_estimator_tasks_total", "Estimation tasks run, by how (ray / pool / sequential).", ["how"])
TRANSFER_BATCH = Histogram("edgetune_estimator_transfer_batch_size", "Transfers run together in one batch.",
                           buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256))

#: Batch efficiency's defaults: small enough to answer in seconds (Ahmed et al.'s own runs are larger).
BE_WORKLOAD = "resnet-slim"
BE_PROXY = "digits"
BE_BATCH_SIZES = (8, 32)
BE_TARGET_ACCURACY = 0.93
BE_MAX_PASSES = 20
#: Bounds of a batch-efficiency training (a pass is ``samples_per_pass`` samples).
BE_MAX_PASSES_LIMIT = 1_000
BE_MAX_SAMPLES_PER_PASS = 1_000_000


@dataclass(frozen=True)
class Runner:
    """How tasks run: local Ray (default), a cluster ``address``, in order (``parallel=False``), or on a
    pool of ``processes`` local workers (``parallel=False, processes=N``)."""

    parallel: bool = True
    address: str | None = None
    num_cpus: int | None = None
    processes: int = 0
    #: Where the last batch's tasks ran (filled under Ray and a pool; what the multi-node test reads).
    placements: list[str] = field(default_factory=list, compare=False)

    def start(self) -> None:
        """Start (or join) Ray, or the pool, now with this runner's settings; calls that fan out later reuse it."""
        if self.parallel:
            ensure_ray(self.address, self.num_cpus)
        elif self.processes > 0:
            ensure_pool(self.processes)

    @property
    def workers(self) -> int:
        """Tasks that run at once: the Ray cluster's CPUs, the pool's processes, else 1."""
        if self.parallel:
            ray = ensure_ray(self.address, self.num_cpus)
            return max(1, int(ray.cluster_resources().get("CPU", 1)))
        return max(1, self.processes)

    def run(self, fn: Callable[..., Any], tasks: Sequence[Mapping[str, Any]],
            shared: Mapping[str, Any] | None = None) -> list[Any]:
        """A :data:`~edgetune.estimation.bundle.TaskRunner`."""
        TASKS.labels("ray" if self.parallel else "pool" if self.processes else "sequential").inc(len(tasks))
        try:
            return run_tasks(fn, tasks, parallel=self.parallel, address=self.address, num_cpus=self.num_cpus,
                             shared=shared, processes=self.processes, placements=self.placements)
        except TaskFailed as exc:
            # A bad-input error raised inside a task is the caller's mistake: answer with it as is.
            if isinstance(exc.cause, EdgetuneError):
                raise exc.cause from exc
            raise


# --- measurements -> arrays ---------------------------------------------------------------------
@dataclass
class Rows:
    """Checked measurements as arrays: modes (n, 4), batch sizes (n,), targets."""

    modes: np.ndarray
    batch_size: np.ndarray
    time_ms: np.ndarray
    power_w: np.ndarray
    source: str  # what the rows came from, for messages and history

    def __len__(self) -> int:
        return int(self.modes.shape[0])

    @property
    def batch_sizes(self) -> list[int]:
        return sorted({int(b) for b in self.batch_size})

    def table(self, device: str, workload: str, role: str) -> Table:
        """The rows as the profile table the estimation pipeline learns from."""
        cols = [*MODE_FIELDS, BATCH_FEATURE, "time_ms", "power_w", "device", "workload", "role"]
        return Table(cols, [{**dict(zip(MODE_FIELDS, (int(m[0]), *map(float, m[1:])), strict=True)),
                             BATCH_FEATURE: int(b), "time_ms": float(t), "power_w": float(p), "device": device,
                             "workload": workload, "role": role}
                            for m, b, t, p in zip(self.modes, self.batch_size, self.time_ms, self.power_w,
                                                  strict=True)])


def _empty_rows(n: int, source: str) -> Rows:
    return Rows(np.empty((n, 4)), np.empty(n, dtype=np.int64), np.empty(n), np.empty(n), source)


def _check_row(rows: Rows, i: int, spec: DeviceSpec, row: MeasuredRow | MeasurementRecord, at: str) -> None:
    """Row ``i``: a mode of ``spec``, a batch size, finite time > 0 and power >= 0."""
    rows.modes[i] = validation.power_mode(spec, row.mode, f"{at}.mode").as_tuple()
    rows.batch_size[i] = validation.batch_size(row.batch_size, f"{at}.batch_size")
    rows.time_ms[i] = validation.positive(row.time_ms, f"{at}.time_ms", "> 0 ms")
    rows.power_w[i] = validation.non_negative(row.power_w, f"{at}.power_w", ">= 0 W")


def rows_from_measurements(measured: Sequence[MeasuredRow], spec: DeviceSpec, workload: str, role: str,
                           field: str = "measurements") -> Rows:
    """Given measurements, each checked (:func:`_check_row`) and of no other device / workload / role."""
    rows = _empty_rows(len(measured), "request")
    for i, m in enumerate(measured):
        at = f"{field}[{i}]"
        for name, want in (("device", spec.name), ("workload", workload)):
            got = getattr(m, name)
            if got and got != want:
                raise InvalidArgument(f"{at}.{name}", f"{got!r} differs from the request's {want!r}",
                                      f"{want!r} or empty: a model is per device, workload and role")
        if m.role is not None and m.role.value != role:
            raise InvalidArgument(f"{at}.role", f"differs from the request's {role!r}", f"{role!r} or unspecified")
        _check_row(rows, i, spec, m, at)
    return rows


def rows_from_store(records: Sequence[MeasurementRecord], spec: DeviceSpec, source: str) -> Rows:
    """Measurements the profilers stored; a bad one is named by its position and id."""
    rows = _empty_rows(len(records), source)
    for i, r in enumerate(records):
        _check_row(rows, i, spec, r, f"{source}[{i}]" + (f" (id {r.id})" if r.id else ""))
    return rows


# --- fitting and transferring -------------------------------------------------------------------
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
    TRAIN_SECONDS.labels("Fit").observe(time.perf_counter() - t0)
    return Trained(model, meta)


def transfer_models(jobs: Sequence[TransferJob], runner: Runner) -> list[Trained]:
    """Each job's base adapted to its rows. Jobs of the same method and settings go together, whatever their
    bases (:func:`~edgetune.estimation.bundle.transfer_tables`: a fleet's first transfers share a reference, its
    refits start from each node's own model), split into as many tasks per target as the runner has workers;
    each model is the one its job alone gives."""
    t0 = time.perf_counter()
    groups: dict[tuple[str, str, str], list[int]] = {}
    for i, job in enumerate(jobs):
        key = (job.method, repr(sorted(job.kw.items())), repr(sorted(job.nn_settings.items())))
        groups.setdefault(key, []).append(i)
    out: dict[int, TimePowerModel] = {}
    for idx in groups.values():
        first = jobs[idx[0]]
        tables = [jobs[i].rows.table(jobs[i].device, jobs[i].workload, jobs[i].role) for i in idx]
        models = transfer_tables([jobs[i].base for i in idx], tables, first.method, runner=runner.run,
                                 nn_settings=first.nn_settings, sources=[jobs[i].rows.source for i in idx],
                                 chunks=_chunks(len(idx), runner.workers), **first.kw)
        out.update(zip(idx, models, strict=True))
    seconds = round((time.perf_counter() - t0) / len(jobs), 3)  # a batch's time, per job
    TRAIN_SECONDS.labels("Transfer").observe(time.perf_counter() - t0)
    TRANSFER_BATCH.observe(len(jobs))
    return [Trained(out[i], _meta(out[i], job.rows, seconds=seconds, base_model_id=job.base_model_id))
            for i, job in enumerate(jobs)]


def _chunks(jobs: int, workers: int) -> int:
    """Tasks per target for a batch: the targets' tasks already keep that many workers busy; more tasks only
    where workers are left over (a task of a lone net pays for its twin: :func:`~edgetune.estimation.nn.fine_tune_many`)."""
    return max(1, min(jobs // 2, workers // len(TARGETS)))


class TransferBatcher:
    """Transfers waiting together run as one batch (:func:`transfer_models`): a fleet's nodes reach their
    transfers together, and a batch costs little more than one transfer.

    One batch thread (not an RPC's thread: one caller cancelling does not stop the others' work) takes
    every transfer waiting, ``window_s`` after the first of them arrived, and runs them; the transfers
    arriving meanwhile wait for the next batch, so the batches grow while the workers are busy. Every
    caller waits for its own result. A batch that fails is run again one job at a time, so only a
    failing job's caller sees its error.
    """

    def __init__(self, runner: Runner, window_s: float = 0.05) -> None:
        self.runner, self.window_s = runner, window_s
        self._pending: list[tuple[TransferJob, Future[Trained]]] = []
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None

    def run(self, job: TransferJob) -> Trained:
        mine: Future[Trained] = Future()
        with self._cond:
            self._pending.append((job, mine))
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="estimator-transfers", daemon=True)
                self._thread.start()
            self._cond.notify()
        return mine.result()

    def _loop(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: bool(self._pending))
            time.sleep(self.window_s)  # the others arriving now join this batch
            with self._cond:
                batch, self._pending = self._pending, []
            self._run_batch(batch)

    def _run_batch(self, batch: list[tuple[TransferJob, Future[Trained]]]) -> None:
        try:
            for (_, fut), trained in zip(batch, transfer_models([j for j, _ in batch], self.runner), strict=True):
                fut.set_result(trained)
            return
        except Exception as exc:  # noqa: BLE001 - handed to the callers below
            if len(batch) == 1:
                batch[0][1].set_exception(exc)
                return
        for job, fut in batch:
            try:
                fut.set_result(transfer_models([job], self.runner)[0])
            except Exception as exc:  # noqa: BLE001 - this job's own error, to its caller
                fut.set_exception(exc)


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


class ModelTrainer:
    """Fits and transfers into ``models``, their tasks run by ``runner`` (see the module docs)."""

    def __init__(self, models: ModelRepository, runner: Runner, batch_window_s: float = 0.05) -> None:
        self.models = models
        self.runner = runner
        self._transfers = TransferBatcher(runner, batch_window_s)

    def _rows(self, measured: Sequence[MeasuredRow], spec: DeviceSpec, workload: str, role: str, need: int,
              what: str) -> Rows:
        """The measurements given, else the store's of (device, workload, role); at least ``need``."""
        if measured:
            rows = rows_from_measurements(measured, spec, workload, role)
            where = "given"
        else:
            stored = self.models.store.get_measurements(spec.name, workload, role)
            rows = rows_from_store(stored, spec, f"store measurements of {spec.name}/{workload}/{role}")
            where = f"in the request, and the store has {len(stored)} for {spec.name}/{workload}/{role}"
        if len(rows) < need:
            raise InvalidArgument("measurements", f"{what} needs at least {need} rows, {len(rows)} {where}",
                                  f">= {need} measurements")
        return rows

    def fit(self, spec: FitSpec, default_fraction: float) -> Loaded:
        """A reference model, saved as a new version; ``default_fraction`` held out when the spec says 0."""
        method = parse_method(spec.method, params.DEFAULT_FIT_METHOD)
        device = get_spec(id_part(spec.device, "device"))
        workload = id_part(spec.workload, "workload")
        role = spec.role.value
        model_id = parse_model_id(spec.model_id or default_model_id(device.name, workload, role, method),
                                  allow_version=False)
        fraction = params.validation_fraction(spec.validation_fraction, default_fraction)
        kw = params.predictor_params(method, spec.epochs, spec.params)
        seed = validation.seed(spec.seed, "seed") if spec.seed is not None else 0
        need = params.min_fit_rows(fraction, MIN_FIT_ROWS)
        rows = self._rows(spec.measurements, device, workload, role, need,
                          f"fitting {method} (with {fraction:g} held out)")
        trained = fit_model(FitJob(device.name, workload, role, method, rows, seed, kw, fraction), self.runner)
        saved = self.models.save(model_id, trained.model, trained.meta)
        MODELS_STORED.labels("Fit", method).inc()
        log.info("fitted", extra={"model_id": saved.versioned_id, "rows": len(rows), **trained.meta.metrics})
        return saved

    def transfer(self, spec: TransferSpec, default_method: str) -> Loaded:
        """A new model from the spec's base, saved as a new version; ``default_method`` when it names none."""
        base = self.models.base(spec.base_model_id)
        method = parse_method(spec.method, default_method, "params.method")
        if method in TRANSFER_METHODS and base.meta.kind not in NN_METHODS:
            raise InvalidArgument("base_model_id", f"{base.versioned_id} is a {base.meta.kind!r} model; "
                                  f"{method!r} fine-tunes an NN reference",
                                  "a model fitted with " + ", ".join(NN_METHODS))
        kw, nn_attrs = params.transfer_params(method, spec.epochs, spec.params)
        device = get_spec(id_part(spec.device or base.model.device, "device"))
        workload = id_part(spec.workload or base.model.workload, "workload")
        role = spec.role.value if spec.role is not None else (base.model.role or Role.TRAIN.value)
        model_id = parse_model_id(spec.model_id or default_model_id(device.name, workload, role, method),
                                  allow_version=False)
        # a named version refined with more measurements is the same model's next version (a node's model
        # after verification measured one more point); from its unnamed latest, the lineage would be ambiguous
        if model_id.parts == base.model_id.parts and parse_model_id(spec.base_model_id).version is None:
            raise InvalidArgument("model_id", f"{model_id.name!r} is the base model's id; a transfer is a new model "
                                  "(or, from a named version of it, that model's next version)",
                                  "another id (empty: device/workload/role/method), or base_model_id ID@VERSION")
        rows = self._rows(spec.measurements, device, workload, role, MIN_TRANSFER_ROWS, f"transferring with {method}")
        if BATCH_FEATURE not in base.model.columns and len(rows.batch_sizes) > 1:
            raise InvalidArgument("measurements", f"several batch sizes ({rows.batch_sizes}) but the reference was "
                                  f"fitted for one ({base.model.batch_sizes}); fit a reference on several batch sizes",
                                  "one batch size")
        if spec.seed is not None and method in TRANSFER_METHODS:
            nn_attrs["seed"] = validation.seed(spec.seed, "seed")  # fine-tuning's shuffles; others keep the base's
        job = TransferJob(base.model, base.versioned_id, device.name, workload, role, method, rows, kw, nn_attrs)
        trained = self._transfers.run(job)
        saved = self.models.save(model_id, trained.model, trained.meta)
        MODELS_STORED.labels("Transfer", method).inc()
        log.info("transferred", extra={"model_id": saved.versioned_id, "base": base.versioned_id, "rows": len(rows)})
        return saved


# --- batch efficiency ---------------------------------------------------------------------------
def estimate_efficiency(spec: EfficiencySpec, runner: Runner) -> BatchEfficiency:
    """Passes to the target per batch size: ``spec.observed`` as given, else trained on the proxy data set
    (the shared pre-training runs here, one thread; the per-seed runs on ``runner``)."""
    if spec.observed is not None:
        return spec.observed
    validation.count(spec.max_passes, "max_passes", minimum=0, maximum=BE_MAX_PASSES_LIMIT)
    validation.count(spec.samples_per_pass, "samples_per_pass", minimum=0, maximum=BE_MAX_SAMPLES_PER_PASS)
    sizes = list(validation.batch_sizes(spec.batch_sizes, "batch_sizes")) if spec.batch_sizes else list(BE_BATCH_SIZES)
    target = (validation.number(spec.target_accuracy, "target_accuracy", minimum=0.0, maximum=1.0,
                                exclusive_minimum=True) if spec.target_accuracy else BE_TARGET_ACCURACY)
    seed = validation.seed(spec.seed, "seed") if spec.seed is not None else 0
    runner.start()
    with single_threaded():  # threads would only contend on shared cores
        est = estimate_batch_efficiency(
            spec.workload or BE_WORKLOAD, sizes, target, seeds=(seed,), proxy=spec.proxy_dataset or BE_PROXY,
            max_passes=spec.max_passes or BE_MAX_PASSES,
            samples_per_pass=int(spec.samples_per_pass or max(SAMPLES_PER_PASS, 2 * max(sizes))),
            parallel=runner.parallel, address=runner.address)
    return BatchEfficiency(dict(est.passes_mean()))
