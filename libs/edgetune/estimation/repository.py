"""Estimator models in the store: versioned blobs, loaded once per (id, version), grid predictions cached.

A model is a :class:`~edgetune.estimation.bundle.TimePowerModel` file stored with
``Store.put_blob(BLOB_KIND, id parts, bytes, meta)``; the meta (JSON) holds what ListModels and
ModelInfo show (kind, device, workload, role, base model, rows, held-out MAPE, created time), so
nothing lives only in this process: a restarted estimator, or another replica, serves every model.

Loaded models are cached by (id, version) — a version never changes once written — and the
predictions of whole grids by (id, version, device, grid, batch sizes), since the optimizer asks
for the same grid again and again.
"""

from __future__ import annotations

import threading
import time
import warnings
from collections import OrderedDict
from collections.abc import Callable, Hashable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any, TypeVar

import numpy as np
from prometheus_client import Counter, Histogram

from edgetune import validation
from edgetune.base.records import Predictions
from edgetune.base.roles import Role
from edgetune.errors import InvalidArgument, NotFound
from edgetune.estimation.bundle import TimePowerModel, load_reference
from edgetune.estimation.features import BATCH_FEATURE, STD_COLUMNS, TARGETS, mode_features
from edgetune.estimation.ids import ModelId, id_part, parse_model_id
from edgetune.estimation.records import ModelInfo, PredictSpec
from edgetune.estimation.references import PREFIX, REFERENCE_VERSION, find_reference
from edgetune.estimation.threads import one_blas_thread
from edgetune.estimation.validation import ExtrapolationWarning
from edgetune.powermodes.grids import named_grid
from edgetune.powermodes.specs import get_spec
from edgetune.store import ModelRecord, Store

#: Store blob kind of estimator models.
BLOB_KIND = "estimator-model"

# What *this* process did (models are shared by every estimator replica through the store).
MODELS_LOADED = Counter("edgetune_estimator_models_loaded_total", "Model versions read from the store and decoded.")
MODEL_CACHE = Counter("edgetune_estimator_model_cache_total", "Loaded-model cache lookups.", ["result"])
PREDICTION_CACHE = Counter("edgetune_estimator_prediction_cache_total", "Whole-grid prediction cache lookups.",
                           ["result"])
PREDICT_SECONDS = Histogram("edgetune_estimator_predict_seconds", "Model compute of one Predict (cache misses).",
                            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5))
PREDICTED_ROWS = Counter("edgetune_estimator_predicted_rows_total", "Rows streamed by Predict.")

V = TypeVar("V")


class LRU:
    """A small thread-safe least-recently-used map."""

    def __init__(self, size: int) -> None:
        self.size = max(int(size), 0)
        self._items: OrderedDict[Hashable, Any] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: Hashable) -> Any | None:
        with self._lock:
            if key not in self._items:
                return None
            self._items.move_to_end(key)
            return self._items[key]

    def put(self, key: Hashable, value: Any) -> None:
        if not self.size:
            return
        with self._lock:
            self._items[key] = value
            self._items.move_to_end(key)
            while len(self._items) > self.size:
                self._items.popitem(last=False)

    def get_or_make(self, key: Hashable, make: Callable[[], V], counter: Any = None) -> V:
        found = self.get(key)
        if counter is not None:
            counter.labels("hit" if found is not None else "miss").inc()
        if found is not None:
            return found
        value = make()
        self.put(key, value)
        return value


@dataclass(frozen=True)
class Loaded:
    model: TimePowerModel
    meta: ModelRecord
    version: int
    model_id: ModelId

    @property
    def versioned_id(self) -> str:
        return self.model_id.versioned(self.version)

    @property
    def info(self) -> ModelInfo:
        return model_info(self.meta, self.version)


def model_info(meta: ModelRecord, version: int) -> ModelInfo:
    """What the estimator lists of a stored model version (metrics without the ones never computed)."""
    return ModelInfo(f"{meta.model_id}@{version}", meta.kind, meta.device, meta.workload,
                     Role(meta.role) if meta.role else None, meta.base_model_id, meta.n_train, meta.has_std,
                     {k: float(v) for k, v in meta.metrics.items() if v is not None}, meta.created_s or 0.0)


#: The two targets predict concurrently (torch and numpy release the GIL): ~2x on a free core.
_TARGET_POOL = ThreadPoolExecutor(max_workers=len(TARGETS), thread_name_prefix="estimator-predict")


def predict_targets(model: TimePowerModel, x: np.ndarray) -> dict[str, np.ndarray]:
    """What ``model.predict(x)`` returns, each target's predictor in its own thread, one BLAS thread each."""
    with one_blas_thread():  # an 18k × 50 product gains nothing from more (estimation.threads)
        futures = {t: _TARGET_POOL.submit(model.predictors[t].predict, x) for t in TARGETS}
        results = {t: futures[t].result() for t in TARGETS}
    out: dict[str, np.ndarray] = {}
    for target in TARGETS:
        mean, std = results[target]
        out[target] = mean
        if std is not None:
            out[STD_COLUMNS[target]] = std
    return out


class ModelRepository:
    """Estimator models in a :class:`Store` (see the module docs)."""

    def __init__(self, store: Store, cache_size: int = 16, prediction_cache_size: int = 8) -> None:
        self.store = store
        self._models = LRU(cache_size)
        self._predictions = LRU(prediction_cache_size)

    # -- writing -------------------------------------------------------------------------------
    def save(self, model_id: ModelId, model: TimePowerModel, meta: ModelRecord) -> Loaded:
        """A new version of ``model_id``'s model; the record gets ``model_id`` and ``created_s``."""
        meta = replace(meta, model_id=model_id.name, created_s=time.time())
        version = self.store.put_blob(BLOB_KIND, model_id.parts, model.to_bytes(), meta.to_dict())
        self._models.put((model_id.parts, version), (model, meta))
        return Loaded(model, meta, version, model_id)

    # -- reading -------------------------------------------------------------------------------
    def latest_version(self, model_id: ModelId, field: str = "model_id") -> int:
        version = self.store.latest_blob_version(BLOB_KIND, model_id.parts)
        if version is None:
            raise NotFound(f"{field}: no model {model_id.name!r} (ListModels shows the stored ones)")
        return version

    def load(self, model_id: ModelId, field: str = "model_id") -> Loaded:
        """The model ``model_id`` names (its latest version when it names none); NOT_FOUND when missing."""
        version = model_id.version or self.latest_version(model_id, field)

        def fetch() -> tuple[TimePowerModel, ModelRecord]:
            try:
                data, meta, _ = self.store.get_blob(BLOB_KIND, model_id.parts, version)
            except NotFound:
                raise NotFound(f"{field}: model {model_id.name!r} has no version {version}") from None
            MODELS_LOADED.inc()
            return TimePowerModel.from_bytes(data, model_id.versioned(version)), ModelRecord.from_dict(meta)

        model, meta = self._models.get_or_make((model_id.parts, version), fetch, MODEL_CACHE)
        return Loaded(model, meta, version, model_id)

    def base(self, text: str, field: str = "base_model_id") -> Loaded:
        """A transfer's base: a stored model (``id[@version]``), or a reference shipped with the package
        (``reference:orin-agx``, ``@1`` optional), read from the package once and never stored."""
        if not text.startswith(PREFIX):
            return self.load(parse_model_id(text, field), field)
        shipped = find_reference(text, field)
        model_id = ModelId((PREFIX + shipped.device,), REFERENCE_VERSION)

        def read() -> tuple[TimePowerModel, ModelRecord]:
            model = load_reference(shipped.device)
            event = model.last_event
            meta = ModelRecord(model_id.name, shipped.method, model.device, model.workload, model.role,
                               int(event.get("n_train", 0)), int(event.get("rows", 0)), model.gives_std,
                               tuple(model.batch_sizes), tuple(model.columns), dict(event.get("metrics", {})),
                               source=str(event.get("source", "")))
            return model, meta

        model, meta = self._models.get_or_make((model_id.parts, model_id.version), read, MODEL_CACHE)
        return Loaded(model, meta, REFERENCE_VERSION, model_id)

    def list(self, device: str = "", workload: str = "") -> list[ModelInfo]:
        """The latest version of every model, filtered, sorted by id."""
        out = []
        for blob in self.store.list_blobs(BLOB_KIND):
            cached = self._models.get((blob.key_parts, blob.latest_version))
            meta = cached[1] if cached is not None else ModelRecord.from_dict(
                self.store.get_blob(BLOB_KIND, blob.key_parts, blob.latest_version)[1])
            if (device and meta.device != device) or (workload and meta.workload != workload):
                continue
            out.append(model_info(meta, blob.latest_version))
        return out

    # -- predicting ----------------------------------------------------------------------------
    def predict(self, loaded: Loaded, x: np.ndarray, cache_key: Hashable | None = None) -> dict[str, np.ndarray]:
        """``TimePowerModel.predict(x)``; with ``cache_key`` (a whole grid) remembered per version."""
        def compute() -> dict[str, np.ndarray]:
            t0 = time.perf_counter()
            with warnings.catch_warnings():
                # A grid wider than the training modes extrapolates mildly by design; the hard
                # range check (modes of another device, wrong units) still raises.
                warnings.simplefilter("ignore", ExtrapolationWarning)
                try:
                    out = predict_targets(loaded.model, x)
                except InvalidArgument as exc:
                    raise exc.prefixed("modes") from None
            PREDICT_SECONDS.observe(time.perf_counter() - t0)
            return out

        if cache_key is None:
            return compute()
        key = (loaded.model_id.parts, loaded.version, cache_key)
        return self._predictions.get_or_make(key, compute, PREDICTION_CACHE)

    def predictions(self, spec: PredictSpec) -> Predictions:
        """The spec's model at each of its modes (or its grid's) and batch sizes, mode-major.

        A model predicts only for its own device (transfer it first) and, without a batch-size input,
        only at the batch size it was fitted for; modes are checked against the device's tables."""
        loaded = self.load(parse_model_id(spec.model_id))
        model = loaded.model
        device = spec.device or model.device
        if model.device and device != model.device:
            raise InvalidArgument("device", f"model {loaded.versioned_id} is for {model.device}, not {device}; "
                                  f"transfer it to {device} first", f"{model.device!r} or empty")
        device_spec = get_spec(id_part(device, "device"))
        sizes = _batch_sizes(spec.batch_sizes, model)
        cache_key: Hashable | None = None
        if spec.modes:
            modes = np.asarray([validation.power_mode(device_spec, m, f"modes[{i}]").as_tuple()
                                for i, m in enumerate(spec.modes)], dtype=float).reshape(-1, 4)
        else:
            modes = named_grid(device_spec, spec.grid).array()
            cache_key = (device_spec.name, spec.grid, tuple(sizes))
        # Rows mode-major, then batch size.
        x_modes = np.repeat(modes, len(sizes), axis=0)
        x_batch = np.tile(np.asarray(sizes, dtype=np.int64), len(modes))
        out = self.predict(loaded, mode_features(x_modes, x_batch, model.columns), cache_key)
        rows = Predictions(x_modes, x_batch, out["time_ms"], out["power_w"], out.get("time_std_ms"),
                           out.get("power_std_w"))
        PREDICTED_ROWS.inc(len(rows))
        return rows


def _batch_sizes(requested: Sequence[int], model: TimePowerModel) -> list[int]:
    """The batch sizes asked for (none: the model's); a model without a batch-size input has only its own."""
    if not requested:
        return list(model.batch_sizes) or [0]
    sizes = validation.batch_sizes(requested, "batch_sizes")
    for i, b in enumerate(sizes):
        if BATCH_FEATURE not in model.columns and model.batch_sizes and b not in model.batch_sizes:
            raise InvalidArgument(f"batch_sizes[{i}]", f"the model was fitted for batch size "
                                  f"{', '.join(map(str, model.batch_sizes))} only, not {b}",
                                  ", ".join(map(str, model.batch_sizes)))
    return list(sizes)
