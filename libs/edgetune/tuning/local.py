"""In-process implementations of the tuning protocols: a device's profiler, the estimation
pipeline, the library's selectors (what ``edgetune tune`` and the experiments use)."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import numpy as np

from edgetune.base.mode import PowerMode
from edgetune.base.objective import Objective
from edgetune.base.records import Choice, Points, Predictions
from edgetune.estimation.bundle import TaskRunner, TimePowerModel
from edgetune.estimation.features import mode_features
from edgetune.estimation.methods import TRANSFER_METHODS
from edgetune.estimation.references import PREFIX, load_reference
from edgetune.optimization.select import Candidates, make_selector
from edgetune.profiling.protocol import Measurement, Profiler, ProgressEvent
from edgetune.tables import points_table
from edgetune.tuning.protocols import ModelRef


class DeviceMeasurer:
    """A local device through the measurement protocol; ``on_measurement(measurement, purpose)``
    sees every point as it is measured (``edgetune tune`` writes the profiled ones out)."""

    def __init__(self, profiler: Profiler, workload: str, role: str = "train",
                 on_measurement: Callable[[Measurement, str], None] | None = None) -> None:
        self.profiler, self.workload, self.role = profiler, workload, role
        self.on_measurement = on_measurement

    def measure(self, modes: np.ndarray, batch_size: int, *, seed: int = 0, purpose: str = "profile") -> Points:
        got: list[Measurement] = []

        def keep(event: ProgressEvent) -> None:
            if event.measurement is not None:
                got.append(event.measurement)
                if self.on_measurement is not None:
                    self.on_measurement(event.measurement, purpose)

        points = [(PowerMode(int(m[0]), float(m[1]), float(m[2]), float(m[3])), int(batch_size))
                  for m in np.asarray(modes, dtype=float).reshape(-1, 4)]
        self.profiler.profile_points(points, self.workload, self.role, progress=keep)
        spec = self.profiler.device.spec.name
        return Points(np.asarray([m.mode.as_tuple() for m in got], dtype=float).reshape(-1, 4),
                      np.asarray([m.batch_size for m in got]), np.asarray([m.time_ms for m in got]),
                      np.asarray([m.power_w for m in got]),
                      spec, self.workload, self.role)


class LibraryEstimator:
    """The estimation pipeline in this process (its per-target tasks in order, or on a ``runner``)."""

    where = "estimation library in-process"

    def __init__(self, runner: TaskRunner | None = None) -> None:
        self.runner = runner
        self.models: dict[str, TimePowerModel] = {}
        self._ids = itertools.count(1)

    def add(self, model: TimePowerModel, model_id: str = "") -> ModelRef:
        """Hold an existing model (e.g. a reference read from a file)."""
        model_id = model_id or f"model-{next(self._ids)}"
        self.models[model_id] = model
        return self._ref(model_id, model)

    def find(self, model_id: str) -> ModelRef | None:
        """The model held under ``model_id``, or the shipped reference it names (``reference:orin-agx``)."""
        model = self._model(model_id) if model_id.startswith(PREFIX) else self.models.get(model_id)
        return None if model is None else self._ref(model_id, model)

    def _model(self, model_id: str) -> TimePowerModel:
        if model_id not in self.models and model_id.startswith(PREFIX):
            self.models[model_id] = load_reference(model_id)  # a shipped reference, read on first use
        return self.models[model_id]

    @staticmethod
    def _ref(model_id: str, model: TimePowerModel) -> ModelRef:
        event = model.last_event
        return ModelRef(model_id, str(event.get("method", "")), model.device, model.workload, model.gives_std,
                        int(event.get("n_train", event.get("rows", 0))))

    def fit(self, points: Points, *, model_id: str, method: str = "nn", seed: int = 0,
            epochs: int | None = None) -> ModelRef:
        kw: dict[str, Any] = {}
        if epochs:
            kw = {"nn_params": {"epochs": epochs}} if method == "nn+gp" else {"epochs": epochs}
        model = TimePowerModel.fit_table(points_table(points), method, seed, runner=self.runner, **kw)
        return self.add(model, model_id)

    def transfer(self, base: ModelRef, points: Points, *, model_id: str, method: str, seed: int = 0,
                 transfer_epochs: int | None = None, params: dict[str, str] | None = None) -> ModelRef:
        settings: dict[str, Any] = {}
        if method in TRANSFER_METHODS:
            settings["seed"] = seed  # fine-tuning's shuffles, as the estimator service sets them
            if transfer_epochs:
                settings["transfer_epochs"] = transfer_epochs
        kw: dict[str, Any] = {k: int(v) if str(v).isdigit() else v for k, v in (params or {}).items()}
        model = self._model(base.model_id).transfer_table(points_table(points), method, runner=self.runner,
                                                           nn_settings=settings, **kw)
        return self.add(model, model_id)

    def predict(self, model: ModelRef, modes: np.ndarray, batch_size: int) -> Predictions:
        m = self._model(model.model_id)
        modes = np.asarray(modes, dtype=float).reshape(-1, 4)
        batch = np.full(len(modes), int(batch_size))
        out = m.predict(mode_features(modes, batch, m.columns))
        return Predictions(modes, batch, out["time_ms"], out["power_w"], out.get("time_std_ms"),
                           out.get("power_std_w"))


class LibrarySelector:
    """The library's selectors (:mod:`edgetune.optimization.select`) in this process."""

    def select(self, pool: Predictions, power_budget_w: float, *, risk: float, objective: Objective) -> Choice:
        sel = make_selector(objective, risk).select(
            Candidates(pool.time_ms, np.maximum(pool.power_w, 0.0), pool.time_std_ms, pool.power_std_w),
            power_budget_w)
        if not sel.feasible:
            return Choice(False, reason=sel.reason or "")
        return Choice(True, sel.index, sel.power_bound_w)
