"""gRPC implementations of the tuning protocols: a profiler agent's ``Profile`` stream (through
:mod:`edgetune.clients.profiler`), the Estimator service, the Optimizer's ``Select`` (what the demo
uses). ``risk`` goes over the wire as the probability it is in
:class:`~edgetune.tuning.policy.TuningPolicy` (e.g. 0.05), never as a multiple of σ."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any

import grpc
import numpy as np

from edgetune.base.mode import PowerMode
from edgetune.base.records import Choice, ModeKey, Points, Predictions, mode_key
from edgetune.base.roles import Role
from edgetune.clients.profiler import ProfilerClient
from edgetune.profiling import ProfileProgress
from edgetune.proto.serde.common import ROLE
from edgetune.proto.serde.tables import table_from_proto, table_to_proto
from edgetune.proto.v1 import (
    common_pb2,
    estimator_pb2,
    estimator_pb2_grpc,
    optimizer_pb2,
    optimizer_pb2_grpc,
)
from edgetune.store import MeasurementRecord, ProfileJob
from edgetune.tuning.protocols import ModelRef

RPC_TIMEOUT_S = 300.0
OBJECTIVES = {"time": optimizer_pb2.OBJECTIVE_MIN_TIME, "power": optimizer_pb2.OBJECTIVE_MIN_POWER,
              "energy": optimizer_pb2.OBJECTIVE_MIN_ENERGY}


def role_msg(role: str) -> common_pb2.Role.ValueType:
    return common_pb2.Role.ValueType(ROLE.to_proto(role)) if role else common_pb2.ROLE_UNSPECIFIED


def mode_msg(mode: np.ndarray | Iterable[float]) -> common_pb2.PowerMode:
    m = list(mode)
    return common_pb2.PowerMode(cores=int(m[0]), cpu_mhz=float(m[1]), gpu_mhz=float(m[2]), emc_mhz=float(m[3]))


def measurements(points: Points) -> list[common_pb2.Measurement]:
    """Points as Measurement messages (what Fit and Transfer learn from)."""
    role = role_msg(points.role)
    return [common_pb2.Measurement(device=points.device, workload=points.workload, role=role, batch_size=int(b),
                                   mode=mode_msg(m), time_ms=float(t), power_w=float(p))
            for m, b, t, p in zip(points.modes, points.batch_size, points.time_ms, points.power_w, strict=True)]


def candidates(pool: Predictions) -> optimizer_pb2.Candidates:
    """``pool`` as inline candidates (a columnar table: :mod:`edgetune.proto.serde.tables`)."""
    return optimizer_pb2.Candidates(table=table_to_proto(pool))


def predictions(table: common_pb2.PredictionTable, field: str = "table") -> Predictions:
    """A table (a Predict chunk, a front) as the tuning workflow's predictions; checked."""
    return table_from_proto(table, field, allow_empty=True)


class AgentMeasurer:
    """A profiler agent's ``Profile`` stream (:class:`~edgetune.clients.profiler.ProfilerClient`);
    ``tick(done, total)`` on its progress events. Every measurement it returned is kept in
    :attr:`measured`."""

    def __init__(self, profiler: ProfilerClient, device: str, workload: str, role: str = "train",
                 tick: Callable[[int, int], None] | None = None, timeout_s: float = RPC_TIMEOUT_S) -> None:
        self.profiler, self.device, self.workload, self.role = profiler, device, workload, role
        self.tick, self.timeout_s = tick, timeout_s
        self.measured: list[tuple[str, MeasurementRecord]] = []  # (purpose, measurement)

    def measure(self, modes: np.ndarray, batch_size: int, *, seed: int = 0, purpose: str = "profile") -> Points:
        job = ProfileJob(self.workload, Role.parse(self.role) if self.role else Role.TRAIN,
                         modes=tuple(PowerMode(int(m[0]), float(m[1]), float(m[2]), float(m[3])) for m in modes),
                         batch_sizes=(int(batch_size),), seed=int(seed))
        got: list[MeasurementRecord] = []
        for event in self.profiler.profile(job, timeout_s=self.timeout_s):
            if isinstance(event, MeasurementRecord):
                got.append(event)
            elif isinstance(event, ProfileProgress) and self.tick is not None:
                self.tick(event.done, event.total)
        self.measured += [(purpose, m) for m in got]
        # a MODULE:FUNCTION comes back under its id (the agent loaded it): models learn under the id
        recorded = {m.workload for m in got}
        return Points(np.asarray([m.mode.as_tuple() for m in got], dtype=float).reshape(-1, 4),
                      np.asarray([m.batch_size for m in got]), np.asarray([m.time_ms for m in got]),
                      np.asarray([m.power_w for m in got]), self.device,
                      recorded.pop() if len(recorded) == 1 else self.workload, self.role)


class ServiceEstimator:
    """The Estimator service through its generated stub."""

    def __init__(self, channel: grpc.Channel, address: str, how: str = "", timeout_s: float = 600.0) -> None:
        self.stub = estimator_pb2_grpc.EstimatorStub(channel)
        self.where = f"estimator service at {address}" + (f" ({how})" if how else "")
        self.timeout_s = timeout_s

    def _call(self, rpc: Any, request: Any) -> Any:
        """One retry on UNKNOWN / UNAVAILABLE: a local Ray that was slow to start under load comes up."""
        try:
            return rpc(request, timeout=self.timeout_s)
        except grpc.RpcError as exc:
            if exc.code() not in (grpc.StatusCode.UNKNOWN, grpc.StatusCode.UNAVAILABLE):
                raise
            time.sleep(2.0)
            return rpc(request, timeout=self.timeout_s)

    @staticmethod
    def _ref(info: estimator_pb2.ModelInfo) -> ModelRef:
        return ModelRef(info.model_id, info.kind, info.device, info.workload, info.has_std, info.n_train)

    def fit(self, points: Points, *, model_id: str, method: str = "nn", seed: int = 0,
            epochs: int | None = None) -> ModelRef:
        request = estimator_pb2.FitRequest(model_id=model_id, kind=method, device=points.device,
                                           workload=points.workload, role=role_msg(points.role),
                                           measurements=measurements(points), epochs=epochs or 0, seed=seed)
        return self._ref(self._call(self.stub.Fit, request).model)

    def transfer(self, base: ModelRef, points: Points, *, model_id: str, method: str, seed: int = 0,
                 transfer_epochs: int | None = None, params: dict[str, str] | None = None) -> ModelRef:
        request = estimator_pb2.TransferRequest(
            base_model_id=base.model_id, model_id=model_id, device=points.device, workload=points.workload,
            role=role_msg(points.role), measurements=measurements(points), seed=seed,
            epochs=transfer_epochs or 0, params={**(params or {}), "method": method})
        return self._ref(self._call(self.stub.Transfer, request).model)

    def find(self, model_id: str) -> ModelRef | None:
        listed = self._call(self.stub.ListModels, estimator_pb2.ListModelsRequest()).models
        # listed as ID@VERSION (the latest); a plain id names the latest version
        return next((self._ref(m) for m in listed if model_id in (m.model_id, m.model_id.rsplit("@", 1)[0])), None)

    def predict(self, model: ModelRef, modes: np.ndarray, batch_size: int) -> Predictions:
        modes = np.asarray(modes, dtype=float).reshape(-1, 4)
        request = estimator_pb2.PredictRequest(model_id=model.model_id, device=model.device,
                                               modes=[mode_msg(m) for m in modes], batch_sizes=[int(batch_size)])
        chunks = [table_from_proto(c.table, f"Predict chunk {c.offset}", allow_empty=True)
                  for c in self.stub.Predict(request, timeout=self.timeout_s)]
        return Predictions.concat(chunks)


class OptimizerSelector:
    """``Optimizer.Select`` with the risk as a probability."""

    def __init__(self, channel: grpc.Channel, timeout_s: float = RPC_TIMEOUT_S) -> None:
        self.stub, self.timeout_s = optimizer_pb2_grpc.OptimizerStub(channel), timeout_s

    def select(self, pool: Predictions, power_budget_w: float, *, risk: float, objective: str) -> Choice:
        request = optimizer_pb2.SelectRequest(
            candidates=candidates(pool),
            objective=OBJECTIVES[objective], budgets=common_pb2.Budgets(power_budget_w=power_budget_w), risk=risk)
        decision = self.stub.Select(request, timeout=self.timeout_s).decisions[0]
        if not decision.feasible:
            return Choice(False, reason=decision.reason)
        at: dict[tuple[ModeKey, int], int] = {(mode_key(m), int(b)): i
                                              for i, (m, b) in enumerate(zip(pool.modes, pool.batch_size, strict=True))}
        m = decision.mode
        index = at[(mode_key((m.cores, m.cpu_mhz, m.gpu_mhz, m.emc_mhz)), int(decision.batch_size))]
        upper = decision.power_upper_w if decision.HasField("power_upper_w") else None
        return Choice(True, index, upper, decision.reason)
