"""EstimatorServicer: the ``edgetune.v1.Estimator`` RPCs. Wiring only.

Each RPC checks its request (:mod:`.convert`, errors name the field), calls the estimation
library — predictors fitted / transferred as parallel tasks (:mod:`.jobs`), THOR
(:mod:`.energy`), Ahmed et al.'s batch efficiency — and answers. Models are versioned blobs in the
store (:mod:`.models`), so a restarted estimator or another replica serves every model.
"""

from __future__ import annotations

import logging
import math

import numpy as np

from edgetune import validation
from edgetune.base.mode import PowerMode
from edgetune.base.records import Predictions
from edgetune.errors import InvalidArgument
from edgetune.estimation.features import BATCH_FEATURE, mode_features
from edgetune.estimation.parallel import single_threaded
from edgetune.estimation.registry import TRANSFER_METHODS
from edgetune.estimation.repository import ModelRepository
from edgetune.estimation.validation import MIN_FIT_ROWS, MIN_TRANSFER_ROWS
from edgetune.powermodes.grids import named_grid
from edgetune.proto.serde.common import mode_from_proto
from edgetune.proto.serde.tables import table_to_proto
from edgetune.proto.v1 import estimator_pb2, estimator_pb2_grpc
from edgetune.services.common import map_errors
from edgetune.services.estimator import convert, energy, metrics
from edgetune.services.estimator.convert import (
    DEFAULT_FIT_METHOD,
    NN_METHODS,
    ModelRef,
    Rows,
)
from edgetune.services.estimator.jobs import FitJob, Runner, TransferJob, fit_model, transfer_model
from edgetune.tuning.policy import TuningPolicy, default_policy

log = logging.getLogger(__name__)

#: EstimateBatchEfficiency defaults: small enough to answer in seconds (Ahmed et al.'s own runs are larger).
BE_WORKLOAD = "resnet-slim"
BE_BATCH_SIZES = (8, 32)
BE_TARGET_ACCURACY = 0.93
BE_MAX_PASSES = 20
#: Bounds of an EstimateBatchEfficiency request's training (a pass is ``samples_per_pass`` samples).
BE_MAX_PASSES_LIMIT = 1_000
BE_MAX_SAMPLES_PER_PASS = 1_000_000


class EstimatorServicer(estimator_pb2_grpc.EstimatorServicer):
    def __init__(self, models: ModelRepository, runner: Runner, energy_estimator: energy.EnergyEstimator | None = None,
                 policy: TuningPolicy | None = None) -> None:
        self.models = models
        self.runner = runner
        self._policy = policy
        self.energy = energy_estimator or energy.EnergyEstimator()

    @property
    def policy(self) -> TuningPolicy:
        """The tuning policy whose defaults an empty field takes (the library's, read per request)."""
        return self._policy or default_policy()

    # -- measurements: inline, else the store's ----------------------------------------------------
    def _rows(self, msgs, spec, workload: str, role: str, need: int, what: str) -> Rows:
        if msgs:
            rows = convert.rows_from_measurements(msgs, spec, workload, role)
            where = "given"
        else:
            docs = [m.to_row() for m in self.models.store.get_measurements(spec.name, workload, role)]
            rows = convert.rows_from_store(docs, spec, f"store measurements of {spec.name}/{workload}/{role}")
            where = f"in the request, and the store has {len(docs)} for {spec.name}/{workload}/{role}"
        if len(rows) < need:
            raise InvalidArgument("measurements", f"{what} needs at least {need} rows, {len(rows)} {where}",
                                  f">= {need} measurements")
        return rows

    # -- Fit ------------------------------------------------------------------------------------------
    @map_errors
    def Fit(self, request, context):
        method = convert.method_from_kind(request.kind, DEFAULT_FIT_METHOD)
        spec = convert.spec_for(convert.id_part(request.device, "device"))
        workload = convert.id_part(request.workload, "workload")
        role = convert.role_name(request.role)
        ref = convert.parse_model_id(request.model_id or convert.default_model_id(spec.name, workload, role, method),
                                     allow_version=False)
        fraction = convert.validation_fraction(request.validation_fraction, self.policy.validation_fraction)
        kw = convert.predictor_params(method, request.epochs, request.params)
        seed = convert.seed(request)
        need = convert.min_fit_rows(fraction, MIN_FIT_ROWS)
        rows = self._rows(request.measurements, spec, workload, role, need,
                          f"fitting {method} (with {fraction:g} held out)")
        job = FitJob(spec.name, workload, role, method, rows, seed, kw, fraction)
        trained = fit_model(job, self.runner)
        saved = self.models.save(ref, trained.model, trained.meta)
        metrics.MODELS_STORED.labels("Fit", method).inc()
        log.info("fitted", extra={"model_id": saved.versioned_id, "rows": len(rows), **trained.meta.metrics})
        return estimator_pb2.FitResponse(model=convert.model_info(saved.meta, saved.version))

    # -- Transfer -------------------------------------------------------------------------------------
    @map_errors
    def Transfer(self, request, context):
        base = self.models.base(request.base_model_id)
        method = convert.method_from_kind(request.params.get("method", ""), self.policy.transfer_method,
                                         "params.method")
        if method in TRANSFER_METHODS and base.meta.kind not in NN_METHODS:
            raise InvalidArgument("base_model_id", f"{base.versioned_id} is a {base.meta.kind!r} model; "
                                  f"{method!r} fine-tunes an NN reference", "a model fitted with " + ", ".join(NN_METHODS))
        params = {k: v for k, v in request.params.items() if k != "method"}
        kw, nn_attrs = convert.transfer_params(method, request.epochs, params)
        spec = convert.spec_for(convert.id_part(request.device or base.model.device, "device"))
        workload = convert.id_part(request.workload or base.model.workload, "workload")
        role = convert.role_name(request.role) if request.role else (base.model.role or "train")
        ref = convert.parse_model_id(request.model_id or convert.default_model_id(spec.name, workload, role, method),
                                     allow_version=False)
        if ref.parts == base.ref.parts:
            raise InvalidArgument("model_id", f"{ref.model_id!r} is the base model's id; a transfer is a new model",
                                  "another id (empty: device/workload/role/method)")
        rows = self._rows(request.measurements, spec, workload, role, MIN_TRANSFER_ROWS, f"transferring with {method}")
        if BATCH_FEATURE not in base.model.columns and len(rows.batch_sizes) > 1:
            raise InvalidArgument("measurements", f"several batch sizes ({rows.batch_sizes}) but the reference was "
                                  f"fitted for one ({base.model.batch_sizes}); fit a reference on several batch sizes",
                                  "one batch size")
        if request.HasField("seed") and method in TRANSFER_METHODS:
            nn_attrs["seed"] = convert.seed(request)  # fine-tuning's shuffles; other methods keep the base's seed
        job = TransferJob(base.model, base.versioned_id, spec.name, workload, role, method, rows, kw, nn_attrs)
        trained = transfer_model(job, self.runner)
        saved = self.models.save(ref, trained.model, trained.meta)
        metrics.MODELS_STORED.labels("Transfer", method).inc()
        log.info("transferred", extra={"model_id": saved.versioned_id, "base": base.versioned_id, "rows": len(rows)})
        return estimator_pb2.TransferResponse(model=convert.model_info(saved.meta, saved.version))

    # -- Predict --------------------------------------------------------------------------------------
    @map_errors
    def Predict(self, request, context):
        loaded = self.models.load(convert.parse_model_id(request.model_id))
        model = loaded.model
        device = request.device or model.device
        if model.device and device != model.device:
            raise InvalidArgument("device", f"model {loaded.versioned_id} is for {model.device}, not {device}; "
                                  f"transfer it to {device} first", f"{model.device!r} or empty")
        spec = convert.spec_for(convert.id_part(device, "device"))
        chunk = convert.chunk_rows(request.chunk_size)
        sizes = self._batch_sizes(request.batch_sizes, model)
        if request.modes:
            modes, cache_key = convert.modes_from_request(request.modes, spec), None
        else:
            grid = convert.grid_name(request.grid)
            modes = named_grid(spec, grid).array()
            cache_key = (spec.name, grid, tuple(sizes))
        # Rows mode-major, then batch size (the proto's order).
        x_modes = np.repeat(modes, len(sizes), axis=0)
        x_batch = np.tile(np.asarray(sizes, dtype=np.int64), len(modes))
        x = mode_features(x_modes, x_batch, model.columns)
        out = self.models.predict(loaded, x, cache_key)
        rows = Predictions(x_modes, x_batch, out["time_ms"], out["power_w"], out.get("time_std_ms"),
                           out.get("power_std_w"))
        total = len(rows)
        metrics.PREDICTED_ROWS.inc(total)
        for start in range(0, total, chunk):
            stop = min(start + chunk, total)
            yield estimator_pb2.PredictResponse(table=table_to_proto(rows.slice(start, stop)), offset=start,
                                                total=total)

    @staticmethod
    def _batch_sizes(requested, model) -> list[int]:
        if not requested:
            return list(model.batch_sizes) or [0]
        sizes = validation.batch_sizes(requested, "batch_sizes")
        for i, b in enumerate(sizes):
            if BATCH_FEATURE not in model.columns and model.batch_sizes and b not in model.batch_sizes:
                raise InvalidArgument(f"batch_sizes[{i}]", f"the model was fitted for batch size "
                                      f"{', '.join(map(str, model.batch_sizes))} only, not {b}",
                                      ", ".join(map(str, model.batch_sizes)))
        return list(sizes)

    # -- EstimateBatchEfficiency ----------------------------------------------------------------------
    @map_errors
    def EstimateBatchEfficiency(self, request, context):
        if request.observed:
            passes = convert.observed_passes(request.observed)
        else:
            from edgetune.estimation.batch_efficiency import SAMPLES_PER_PASS, estimate_batch_efficiency

            validation.count(request.max_passes, "max_passes", minimum=0, maximum=BE_MAX_PASSES_LIMIT)
            validation.count(request.samples_per_pass, "samples_per_pass", minimum=0, maximum=BE_MAX_SAMPLES_PER_PASS)
            sizes = list(validation.batch_sizes(request.batch_sizes, "batch_sizes")) if request.batch_sizes \
                else list(BE_BATCH_SIZES)
            target = (validation.number(request.target_accuracy, "target_accuracy", minimum=0.0, maximum=1.0,
                                        exclusive_minimum=True) if request.target_accuracy else BE_TARGET_ACCURACY)
            seed = convert.seed(request)
            self.runner.start()
            with single_threaded():  # the shared pre-training runs here; threads only contend on shared cores
                est = estimate_batch_efficiency(
                    request.workload or BE_WORKLOAD, sizes, target, seeds=(seed,),
                    proxy=request.proxy_dataset.name or "digits", max_passes=request.max_passes or BE_MAX_PASSES,
                    samples_per_pass=int(request.samples_per_pass or max(SAMPLES_PER_PASS, 2 * max(sizes))),
                    parallel=self.runner.parallel, address=self.runner.address)
            passes = est.passes_mean()
        finite = [n for n in passes.values() if math.isfinite(n)]
        top = max(finite) if finite else math.inf
        ratio = {b: n / top for b, n in passes.items() if math.isfinite(n)}
        return estimator_pb2.EstimateBatchEfficiencyResponse(efficiency=convert.efficiency_to_proto(passes, ratio))

    # -- EstimateEnergy -------------------------------------------------------------------------------
    @map_errors
    def EstimateEnergy(self, request, context):
        energy.require()
        if request.model_id:
            raise InvalidArgument("model_id", "stored energy models are not supported: THOR is fitted per request "
                                  "and cached by the server", "empty")
        if request.role and convert.role_name(request.role) != "train":
            raise InvalidArgument("role", "THOR estimates the energy of a training iteration", "ROLE_TRAIN or unset")
        if request.batch_size:  # 0: the default
            validation.batch_size(request.batch_size, "batch_size")
        spec = convert.spec_for(request.device or "xavier-agx")
        mode = None  # unset: the device's MAXN
        if request.HasField("mode") and request.mode.cores:
            mode = PowerMode(*convert.valid_mode(spec, mode_from_proto(request.mode, "mode"), "mode"))
        parsed, signature = energy.network(request.workload, request.layers,
                                           request.batch_size or energy.DEFAULT_BATCH_SIZE)
        return energy.response(self.energy.estimate(spec.name, mode, parsed, signature))

    # -- ListModels -----------------------------------------------------------------------------------
    @map_errors
    def ListModels(self, request, context):
        found = self.models.list(request.device, request.workload)
        return estimator_pb2.ListModelsResponse(models=[convert.model_info(meta, v) for meta, v in found])


__all__ = ["EstimatorServicer", "ModelRef"]
