"""The demo's estimator: the Estimator service over gRPC, or the library in-process.

Both speak the Estimator API's messages (``FitRequest`` → ``ModelInfo``, ``TransferRequest``
→ ``ModelInfo``, ``PredictRequest`` → streamed ``Prediction`` rows), so the story does not
care which one it has. :func:`service_available` tells whether the suite has an estimator
service to start; without it the demo uses :class:`LocalEstimator` and says so.
"""

from __future__ import annotations

import importlib.util
import itertools
import time
from typing import Any, Protocol

import grpc
import numpy as np

from edgetune.powermodes.grids import named_grid
from edgetune.powermodes.specs import get_spec
from edgetune.proto.v1 import common_pb2, estimator_pb2, estimator_pb2_grpc
from edgetune.tables import Table

ESTIMATOR_MODULE = "edgetune.services.estimator.server"
_GRID_NAMES = {common_pb2.GRID_FULL: "full", common_pb2.GRID_UNSPECIFIED: "full",
               common_pb2.GRID_POWERTRAIN: "powertrain", common_pb2.GRID_FULCRUM: "fulcrum"}
_ROLE_NAMES = {common_pb2.ROLE_TRAIN: "train", common_pb2.ROLE_INFER: "infer"}
_MODE_COLS = ("cores", "cpu_mhz", "gpu_mhz", "emc_mhz")


def service_available() -> bool:
    """True when the estimator service is installed (``edgetune serve estimator``)."""
    try:
        return importlib.util.find_spec(ESTIMATOR_MODULE) is not None
    except ModuleNotFoundError:
        return False


class Estimator(Protocol):
    where: str

    def fit(self, request: estimator_pb2.FitRequest) -> estimator_pb2.ModelInfo: ...

    def transfer(self, request: estimator_pb2.TransferRequest) -> estimator_pb2.ModelInfo: ...

    def predict(self, request: estimator_pb2.PredictRequest) -> list[common_pb2.Prediction]: ...


class ServiceEstimator:
    """The Estimator service through its generated stub."""

    def __init__(self, channel: grpc.Channel, address: str, how: str = "", timeout_s: float = 600.0) -> None:
        self.stub = estimator_pb2_grpc.EstimatorStub(channel)
        self.where = f"estimator service at {address}" + (f" ({how})" if how else "")
        self.timeout_s = timeout_s

    def _call(self, rpc, request):
        """One retry on UNKNOWN / UNAVAILABLE: a local Ray that was slow to start under load comes up."""
        try:
            return rpc(request, timeout=self.timeout_s)
        except grpc.RpcError as exc:
            if exc.code() not in (grpc.StatusCode.UNKNOWN, grpc.StatusCode.UNAVAILABLE):
                raise
            time.sleep(2.0)
            return rpc(request, timeout=self.timeout_s)

    def fit(self, request: estimator_pb2.FitRequest) -> estimator_pb2.ModelInfo:
        return self._call(self.stub.Fit, request).model

    def transfer(self, request: estimator_pb2.TransferRequest) -> estimator_pb2.ModelInfo:
        return self._call(self.stub.Transfer, request).model

    def predict(self, request: estimator_pb2.PredictRequest) -> list[common_pb2.Prediction]:
        rows: list[common_pb2.Prediction] = []
        for chunk in self.stub.Predict(request, timeout=self.timeout_s):
            rows.extend(chunk.predictions)
        return rows


def measurements_table(rows: list[common_pb2.Measurement], device: str, workload: str, role: int) -> Table:
    """Measurement messages as the profile table the estimation library learns from."""
    cols = [*_MODE_COLS, "batch_size", "time_ms", "power_w", "device", "workload", "role"]
    out = [{"cores": m.mode.cores, "cpu_mhz": m.mode.cpu_mhz, "gpu_mhz": m.mode.gpu_mhz, "emc_mhz": m.mode.emc_mhz,
            "batch_size": m.batch_size, "time_ms": m.time_ms, "power_w": m.power_w, "device": device,
            "workload": workload, "role": _ROLE_NAMES.get(role, "train")} for m in rows]
    return Table(cols, out)


class LocalEstimator:
    """The estimation library in this process, answering with the Estimator API's messages."""

    where = "estimation library in-process (no estimator service in this checkout)"

    def __init__(self) -> None:
        self.models: dict[str, Any] = {}  # model id -> TimePowerModel
        self._ids = itertools.count(1)

    def _info(self, model_id: str, kind: str, model: Any, base: str, n: int) -> estimator_pb2.ModelInfo:
        self.models[model_id] = model
        return estimator_pb2.ModelInfo(model_id=model_id, kind=kind, device=model.device, workload=model.workload,
                                       base_model_id=base, n_train=n, has_std=model.gives_std)

    def fit(self, request: estimator_pb2.FitRequest) -> estimator_pb2.ModelInfo:
        table = measurements_table(list(request.measurements), request.device, request.workload, request.role)
        kind = request.kind or "nn"
        kw = {"epochs": request.epochs} if request.epochs else {}
        from edgetune.estimation.bundle import TimePowerModel  # torch: only when estimating in-process

        model = TimePowerModel.fit_table(table, kind, seed=request.seed if request.HasField("seed") else 0, **kw)
        return self._info(request.model_id or f"model-{next(self._ids)}", kind, model, "", len(table))

    def transfer(self, request: estimator_pb2.TransferRequest) -> estimator_pb2.ModelInfo:
        base = self.models[request.base_model_id]
        table = measurements_table(list(request.measurements), request.device, request.workload, request.role)
        kind = "nn+gp"  # the service's default transfer method; fine-tuning epochs keep the library default
        kw = {k: int(v) if v.isdigit() else v for k, v in request.params.items() if k in ("restarts", "combine")}
        model = base.transfer_table(table, kind, **kw)
        return self._info(request.model_id or f"model-{next(self._ids)}", kind, model, request.base_model_id,
                          len(table))

    def predict(self, request: estimator_pb2.PredictRequest) -> list[common_pb2.Prediction]:
        model = self.models[request.model_id]
        if request.modes:
            modes = np.array([[m.cores, m.cpu_mhz, m.gpu_mhz, m.emc_mhz] for m in request.modes], dtype=float)
        else:
            modes = named_grid(get_spec(request.device or model.device), _GRID_NAMES[request.grid]).array()
        batch = list(request.batch_sizes) or list(model.batch_sizes[:1]) or [16]
        rows: list[common_pb2.Prediction] = []
        for b in batch:
            table = Table([*_MODE_COLS, "batch_size"],
                          [dict(zip(_MODE_COLS, m, strict=True)) | {"batch_size": b} for m in modes.tolist()])
            out = model.predict_table(table)
            for i, m in enumerate(modes.tolist()):
                p = common_pb2.Prediction(mode=common_pb2.PowerMode(cores=int(m[0]), cpu_mhz=m[1], gpu_mhz=m[2],
                                                                   emc_mhz=m[3]),
                                          batch_size=b, time_ms=float(out["time_ms"][i]),
                                          power_w=float(out["power_w"][i]))
                if "time_std_ms" in out:
                    p.time_std_ms = float(out["time_std_ms"][i])
                if "power_std_w" in out:
                    p.power_std_w = float(out["power_std_w"][i])
                rows.append(p)
        # mode-major, then batch size, as the service streams them
        return _mode_major(rows, len(modes), len(batch))


def _mode_major(rows: list[common_pb2.Prediction], n_modes: int, n_batch: int) -> list[common_pb2.Prediction]:
    return [rows[b * n_modes + i] for i in range(n_modes) for b in range(n_batch)]
