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
from collections.abc import Callable, Hashable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any, TypeVar

import numpy as np

from edgetune.errors import InvalidArgument, NotFound
from edgetune.estimation.bundle import TimePowerModel
from edgetune.estimation.features import STD_COLUMNS, TARGETS
from edgetune.estimation.references import PREFIX, REFERENCE_VERSION, find_reference, load_reference
from edgetune.estimation.validation import ExtrapolationWarning
from edgetune.services.estimator import metrics
from edgetune.services.estimator.convert import BLOB_KIND, ModelRef, parse_model_id
from edgetune.store import ModelRecord, Store

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
    ref: ModelRef

    @property
    def versioned_id(self) -> str:
        return self.ref.versioned(self.version)


#: The two targets predict concurrently (torch and numpy release the GIL): ~2x on a free core.
_TARGET_POOL = ThreadPoolExecutor(max_workers=len(TARGETS), thread_name_prefix="estimator-predict")


_BLAS: Any = None


def _one_blas_thread() -> Any:
    """One BLAS thread while predicting: a GP's 18k × 50 products gain nothing from more, and
    threaded BLAS on shared cores is several times slower (nn+gp on 18,096 modes: 236 → 88 ms)."""
    global _BLAS
    if _BLAS is None:
        from threadpoolctl import ThreadpoolController

        _BLAS = ThreadpoolController()
    return _BLAS.limit(limits=1, user_api="blas")


def predict_targets(model: TimePowerModel, x: np.ndarray) -> dict[str, np.ndarray]:
    """What ``model.predict(x)`` returns, each target's predictor in its own thread, one BLAS thread each."""
    with _one_blas_thread():
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
    def save(self, ref: ModelRef, model: TimePowerModel, meta: ModelRecord) -> Loaded:
        """A new version of ``ref``'s model; the record gets ``model_id`` and ``created_s``."""
        meta = replace(meta, model_id=ref.model_id, created_s=time.time())
        version = self.store.put_blob(BLOB_KIND, ref.parts, model.to_bytes(), meta.to_dict())
        self._models.put((ref.parts, version), (model, meta))
        return Loaded(model, meta, version, ref)

    # -- reading -------------------------------------------------------------------------------
    def latest_version(self, ref: ModelRef, field: str = "model_id") -> int:
        version = self.store.latest_blob_version(BLOB_KIND, ref.parts)
        if version is None:
            raise NotFound(f"{field}: no model {ref.model_id!r} (ListModels shows the stored ones)")
        return version

    def load(self, ref: ModelRef, field: str = "model_id") -> Loaded:
        """The model ``ref`` names (its latest version when it names none); NOT_FOUND when missing."""
        version = ref.version or self.latest_version(ref, field)

        def fetch() -> tuple[TimePowerModel, ModelRecord]:
            try:
                data, meta, _ = self.store.get_blob(BLOB_KIND, ref.parts, version)
            except NotFound:
                raise NotFound(f"{field}: model {ref.model_id!r} has no version {version}") from None
            metrics.MODELS_LOADED.inc()
            return TimePowerModel.from_bytes(data, ref.versioned(version)), ModelRecord.from_dict(meta)

        model, meta = self._models.get_or_make((ref.parts, version), fetch, metrics.MODEL_CACHE)
        return Loaded(model, meta, version, ref)

    def base(self, text: str, field: str = "base_model_id") -> Loaded:
        """A transfer's base: a stored model (``id[@version]``), or a reference shipped with the package
        (``reference:orin-agx``, ``@1`` optional), read from the package once and never stored."""
        if not text.startswith(PREFIX):
            return self.load(parse_model_id(text, field), field)
        shipped = find_reference(text, field)
        ref = ModelRef((PREFIX + shipped.device,), REFERENCE_VERSION)

        def read() -> tuple[TimePowerModel, ModelRecord]:
            model = load_reference(shipped.device)
            event = model.last_event
            meta = ModelRecord(ref.model_id, shipped.method, model.device, model.workload, model.role,
                               int(event.get("n_train", 0)), int(event.get("rows", 0)), model.gives_std,
                               tuple(model.batch_sizes), tuple(model.columns), dict(event.get("metrics", {})),
                               source=str(event.get("source", "")))
            return model, meta

        model, meta = self._models.get_or_make((ref.parts, ref.version), read, metrics.MODEL_CACHE)
        return Loaded(model, meta, REFERENCE_VERSION, ref)

    def list(self, device: str = "", workload: str = "") -> list[tuple[ModelRecord, int]]:
        """(record, latest version) of every model, filtered, sorted by id."""
        out = []
        for blob in self.store.list_blobs(BLOB_KIND):
            cached = self._models.get((blob.key_parts, blob.latest_version))
            meta = cached[1] if cached is not None else ModelRecord.from_dict(
                self.store.get_blob(BLOB_KIND, blob.key_parts, blob.latest_version)[1])
            if (device and meta.device != device) or (workload and meta.workload != workload):
                continue
            out.append((meta, blob.latest_version))
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
            metrics.PREDICT_SECONDS.observe(time.perf_counter() - t0)
            return out

        if cache_key is None:
            return compute()
        key = (loaded.ref.parts, loaded.version, cache_key)
        return self._predictions.get_or_make(key, compute, metrics.PREDICTION_CACHE)
