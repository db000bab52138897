"""EstimatorServicer: the ``edgetune.v1.Estimator`` RPCs. Wiring only.

Each RPC reads its request into a record (:mod:`edgetune.proto.serde.estimator`), has the library
answer it — fits and transfers (:class:`~edgetune.estimation.jobs.ModelTrainer`), predictions
(:class:`~edgetune.estimation.repository.ModelRepository`), batch efficiency
(:func:`~edgetune.estimation.jobs.estimate_efficiency`), THOR's energy
(:class:`~edgetune.estimation.layerwise.energy.EnergyEstimator`) — and writes the answer back;
:func:`~edgetune.services.common.errors.map_errors` turns the library's errors into statuses.
Models are versioned blobs in the store, so a restarted estimator or another replica serves every model.
"""

from __future__ import annotations

from edgetune.estimation.jobs import ModelTrainer, Runner, estimate_efficiency
from edgetune.estimation.layerwise.energy import EnergyEstimator
from edgetune.estimation.repository import ModelRepository
from edgetune.proto.serde import estimator as serde
from edgetune.proto.v1 import estimator_pb2, estimator_pb2_grpc
from edgetune.services.common import map_errors
from edgetune.tuning.policy import TuningPolicy, default_policy


class EstimatorServicer(estimator_pb2_grpc.EstimatorServicer):
    def __init__(self, models: ModelRepository, runner: Runner, energy_estimator: EnergyEstimator | None = None,
                 policy: TuningPolicy | None = None, transfer_batch_s: float = 0.05) -> None:
        self.models = models
        self.runner = runner
        self.trainer = ModelTrainer(models, runner, transfer_batch_s)
        self._policy = policy
        self.energy = energy_estimator or EnergyEstimator()

    @property
    def policy(self) -> TuningPolicy:
        """The tuning policy whose defaults an empty field takes (the library's, read per request)."""
        return self._policy or default_policy()

    @map_errors
    def Fit(self, request, context):
        saved = self.trainer.fit(serde.fit_from_proto(request), self.policy.validation_fraction)
        return estimator_pb2.FitResponse(model=serde.model_info_to_proto(saved.info))

    @map_errors
    def Transfer(self, request, context):
        saved = self.trainer.transfer(serde.transfer_from_proto(request), self.policy.transfer_method)
        return estimator_pb2.TransferResponse(model=serde.model_info_to_proto(saved.info))

    @map_errors
    def Predict(self, request, context):
        spec, chunk = serde.predict_from_proto(request)
        yield from serde.predict_responses(self.models.predictions(spec), chunk)

    @map_errors
    def EstimateBatchEfficiency(self, request, context):
        efficiency = estimate_efficiency(serde.efficiency_request_from_proto(request), self.runner)
        return estimator_pb2.EstimateBatchEfficiencyResponse(efficiency=serde.efficiency_to_proto(efficiency))

    @map_errors
    def EstimateEnergy(self, request, context):
        return serde.energy_to_proto(self.energy.answer(serde.energy_request_from_proto(request)))

    @map_errors
    def ListModels(self, request, context):
        device, workload = serde.list_models_from_proto(request)
        infos = self.models.list(device, workload)
        return estimator_pb2.ListModelsResponse(models=[serde.model_info_to_proto(i) for i in infos])
