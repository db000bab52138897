"""The Estimator service over gRPC, typed: records in, records out (:mod:`edgetune.estimation.records`).

A failed call raises :class:`~edgetune.clients.calls.CallFailed` with the server's status and
message (INVALID_ARGUMENT naming the field, NOT_FOUND for a missing model). ``timeout_s`` bounds each call; a Predict's
chunks are read whole and joined.
"""

from __future__ import annotations

import grpc

from edgetune.base.records import BatchEfficiency, Predictions
from edgetune.clients.calls import translated
from edgetune.estimation.records import (
    EfficiencySpec,
    EnergyEstimate,
    EnergySpec,
    FitSpec,
    ModelInfo,
    PredictSpec,
    TransferSpec,
)
from edgetune.proto.serde import estimator as serde
from edgetune.proto.v1 import estimator_pb2_grpc

#: Fits and transfers train models: minutes, not seconds.
DEFAULT_TIMEOUT_S = 600.0


class EstimatorClient:
    """``edgetune.v1.Estimator`` on ``channel``."""

    def __init__(self, channel: grpc.Channel, timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
        self.stub = estimator_pb2_grpc.EstimatorStub(channel)
        self.timeout_s = timeout_s

    def fit(self, spec: FitSpec) -> ModelInfo:
        """A reference model fitted and stored; its id names the new version (``id@version``)."""
        with translated():
            reply = self.stub.Fit(serde.fit_to_proto(spec), timeout=self.timeout_s)
        return serde.model_info_from_proto(reply.model)

    def transfer(self, spec: TransferSpec) -> ModelInfo:
        with translated():
            reply = self.stub.Transfer(serde.transfer_to_proto(spec), timeout=self.timeout_s)
        return serde.model_info_from_proto(reply.model)

    def predict(self, spec: PredictSpec, chunk_size: int = 0) -> Predictions:
        """Every row (mode-major, then batch size), read from the stream's chunks (0: the server's size)."""
        with translated():
            chunks = list(self.stub.Predict(serde.predict_to_proto(spec, chunk_size), timeout=self.timeout_s))
        return serde.predictions_from_responses(chunks)

    def list_models(self, device: str = "", workload: str = "") -> list[ModelInfo]:
        """The latest version of every stored model (of ``device`` / ``workload`` when given)."""
        with translated():
            reply = self.stub.ListModels(serde.list_models_to_proto(device, workload), timeout=self.timeout_s)
        return [serde.model_info_from_proto(m, f"models[{i}]") for i, m in enumerate(reply.models)]

    def estimate_batch_efficiency(self, spec: EfficiencySpec) -> BatchEfficiency:
        with translated():
            reply = self.stub.EstimateBatchEfficiency(serde.efficiency_request_to_proto(spec),
                                                      timeout=self.timeout_s)
        return serde.passes_from_proto(reply.efficiency, "efficiency")

    def estimate_energy(self, spec: EnergySpec) -> EnergyEstimate:
        with translated():
            reply = self.stub.EstimateEnergy(serde.energy_request_to_proto(spec), timeout=self.timeout_s)
        return serde.energy_from_proto(reply)
