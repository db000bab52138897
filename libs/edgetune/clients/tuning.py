"""gRPC implementations of the tuning protocols, each over a typed client: a profiler agent's
``Profile`` stream (:mod:`.profiler`), the Estimator service (:mod:`.estimator`), the Optimizer's
``Select`` (:mod:`.optimizer`; what the demo and the controller use). ``risk`` goes over the wire as
the probability it is in :class:`~edgetune.tuning.policy.TuningPolicy` (e.g. 0.05), never as a
multiple of σ."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import grpc
import numpy as np

from edgetune.base.mode import PowerMode
from edgetune.base.objective import Objective
from edgetune.base.records import Choice, ModeKey, Points, Predictions, mode_key
from edgetune.base.roles import Role
from edgetune.base.workload import WorkloadRef
from edgetune.clients.calls import CallFailed, Status
from edgetune.clients.estimator import EstimatorClient
from edgetune.clients.optimizer import OptimizerClient
from edgetune.clients.profiler import ProfilerClient
from edgetune.estimation.records import FitSpec, ModelInfo, PredictSpec, TransferSpec, measured_rows
from edgetune.optimization.records import SelectQuery
from edgetune.profiling import ProfileProgress
from edgetune.store import MeasurementRecord, ProfileJob
from edgetune.tuning.protocols import ModelRef

RPC_TIMEOUT_S = 300.0


class AgentMeasurer:
    """A profiler agent's ``Profile`` stream (:class:`~edgetune.clients.profiler.ProfilerClient`);
    ``tick(done, total)`` on its progress events. Every measurement it returned is kept in
    :attr:`measured`. A ``MODULE:FUNCTION`` comes back under its id (the agent loaded it): the
    :attr:`workload` reference resolves it from the first measurement, and the points carry it."""

    def __init__(self, profiler: ProfilerClient, device: str, workload: str, role: str = "train",
                 tick: Callable[[int, int], None] | None = None, timeout_s: float = RPC_TIMEOUT_S) -> None:
        self.profiler, self.device, self.role = profiler, device, role
        self.workload = WorkloadRef.parse(workload)
        self.tick, self.timeout_s = tick, timeout_s
        self.measured: list[tuple[str, MeasurementRecord]] = []  # (purpose, measurement)

    def measure(self, modes: np.ndarray, batch_size: int, *, seed: int = 0, purpose: str = "profile") -> Points:
        job = ProfileJob(self.workload.name, Role.parse(self.role) if self.role else Role.TRAIN,
                         modes=tuple(PowerMode(int(m[0]), float(m[1]), float(m[2]), float(m[3])) for m in modes),
                         batch_sizes=(int(batch_size),), seed=int(seed))
        got: list[MeasurementRecord] = []
        for event in self.profiler.profile(job, timeout_s=self.timeout_s):
            if isinstance(event, MeasurementRecord):
                got.append(event)
            elif isinstance(event, ProfileProgress) and self.tick is not None:
                self.tick(event.done, event.total)
        self.measured += [(purpose, m) for m in got]
        for m in got:
            self.workload = self.workload.resolve(m.workload)
        return Points(np.asarray([m.mode.as_tuple() for m in got], dtype=float).reshape(-1, 4),
                      np.asarray([m.batch_size for m in got]), np.asarray([m.time_ms for m in got]),
                      np.asarray([m.power_w for m in got]), self.device, self.workload.recorded_as, self.role)


class ServiceEstimator:
    """The Estimator service through its typed client."""

    def __init__(self, channel: grpc.Channel, address: str, how: str = "", timeout_s: float = 600.0) -> None:
        self.client = EstimatorClient(channel, timeout_s)
        self.where = f"estimator service at {address}" + (f" ({how})" if how else "")

    @staticmethod
    def _call(fn: Callable[..., Any], *args: Any) -> Any:
        """One retry on UNKNOWN / UNAVAILABLE: a local Ray that was slow to start under load comes up."""
        try:
            return fn(*args)
        except CallFailed as exc:
            if exc.code not in (Status.UNKNOWN, Status.UNAVAILABLE):
                raise
            time.sleep(2.0)
            return fn(*args)

    @staticmethod
    def _ref(info: ModelInfo) -> ModelRef:
        return ModelRef(info.model_id, info.kind, info.device, info.workload, info.has_std, info.n_train)

    def fit(self, points: Points, *, model_id: str, method: str = "nn", seed: int = 0,
            epochs: int | None = None) -> ModelRef:
        spec = FitSpec(points.device, points.workload, Role.parse(points.role) if points.role else Role.TRAIN,
                       method, model_id, measured_rows(points), epochs or 0, seed)
        return self._ref(self._call(self.client.fit, spec))

    def transfer(self, base: ModelRef, points: Points, *, model_id: str, method: str, seed: int = 0,
                 transfer_epochs: int | None = None, params: dict[str, str] | None = None) -> ModelRef:
        spec = TransferSpec(base.model_id, model_id, points.device, points.workload,
                            Role.parse(points.role) if points.role else None, measured_rows(points),
                            transfer_epochs or 0, seed, method, dict(params or {}))
        return self._ref(self._call(self.client.transfer, spec))

    def find(self, model_id: str) -> ModelRef | None:
        listed = self._call(self.client.list_models)
        # listed as ID@VERSION (the latest); a plain id names the latest version
        return next((self._ref(m) for m in listed if model_id in (m.model_id, m.model_id.rsplit("@", 1)[0])), None)

    def predict(self, model: ModelRef, modes: np.ndarray, batch_size: int) -> Predictions:
        rows = np.asarray(modes, dtype=float).reshape(-1, 4)
        spec = PredictSpec(model.model_id, model.device, tuple(PowerMode(int(m[0]), float(m[1]), float(m[2]),
                                                                         float(m[3])) for m in rows),
                           batch_sizes=(int(batch_size),))
        return self.client.predict(spec)


class OptimizerSelector:
    """``Optimizer.Select`` with the risk as a probability."""

    def __init__(self, channel: grpc.Channel, timeout_s: float = RPC_TIMEOUT_S) -> None:
        self.client = OptimizerClient(channel, timeout_s)

    def select(self, pool: Predictions, power_budget_w: float, *, risk: float, objective: Objective) -> Choice:
        verdict = self.client.select(SelectQuery(pool, objective, power_budget_w, risk=risk))[0]
        if not verdict.feasible or verdict.mode is None:
            return Choice(False, reason=verdict.reason)
        at: dict[tuple[ModeKey, int], int] = {(mode_key(m), int(b)): i
                                              for i, (m, b) in enumerate(zip(pool.modes, pool.batch_size, strict=True))}
        index = at[(mode_key(verdict.mode.as_tuple()), int(verdict.batch_size))]
        return Choice(True, index, verdict.power_upper_w, verdict.reason)
