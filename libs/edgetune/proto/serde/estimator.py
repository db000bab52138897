"""``edgetune.v1.Estimator`` messages <-> the estimator's records (:mod:`edgetune.estimation.records`).

Both directions of every message: the servicer reads requests and writes responses, the typed
client (:mod:`edgetune.clients.estimator`) writes requests and reads responses. Readers check
what belongs to the message — enum values, modes with >= 1 core and finite clocks, the
``observed`` rows, ``chunk_size`` — and raise :class:`~edgetune.errors.InvalidArgument` naming
the field (``measurements[0].mode.gpu_mhz``, ``observed[1].batch_size``); the library applies
its rules to the records (methods, device tables, model ids, parameters) and names the same fields.

On the wire, ``Transfer``'s method travels as ``params["method"]`` (the request has no kind field),
and ``Predict`` streams its rows in chunks of ``chunk_size`` rows (:func:`predict_responses`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import replace

from edgetune.base.records import BatchEfficiency, Predictions
from edgetune.base.roles import Role
from edgetune.errors import InvalidArgument
from edgetune.estimation.records import (
    EfficiencySpec,
    EnergyEstimate,
    EnergySpec,
    FitSpec,
    LayerEnergy,
    LayerSpec,
    MeasuredRow,
    ModelInfo,
    PredictSpec,
    TransferSpec,
)
from edgetune.proto.serde.common import (
    GRID,
    mode_from_proto,
    mode_to_proto,
    optional_value,
    role_from_proto,
    role_to_proto,
)
from edgetune.proto.serde.tables import table_from_proto, table_to_proto
from edgetune.proto.v1 import common_pb2, estimator_pb2

DEFAULT_CHUNK_ROWS = 8192
#: A columnar row is at most ~66 bytes (two std columns): a chunk stays near 2 MB, under gRPC's 4 MiB.
MAX_CHUNK_ROWS = 32_768
#: The params key a Transfer's method travels under.
METHOD_PARAM = "method"


# --- shared pieces --------------------------------------------------------------------------------
def _role(role: Role | None) -> common_pb2.Role.ValueType:
    return common_pb2.Role.ValueType(role_to_proto(role)) if role is not None else common_pb2.ROLE_UNSPECIFIED


def _optional_role(value: int, field: str) -> Role | None:
    """A role enum; unspecified: None (the request's, or the base model's)."""
    return role_from_proto(value, field) if value else None


def _seed(msg: estimator_pb2.FitRequest | estimator_pb2.TransferRequest | estimator_pb2.EstimateBatchEfficiencyRequest
          ) -> int | None:
    return optional_value(msg, "seed")


def measured_row_to_proto(row: MeasuredRow) -> common_pb2.Measurement:
    return common_pb2.Measurement(device=row.device, workload=row.workload, role=_role(row.role),
                                  batch_size=int(row.batch_size), mode=mode_to_proto(row.mode),
                                  time_ms=float(row.time_ms), power_w=float(row.power_w))


def measured_rows_from_proto(msgs: Sequence[common_pb2.Measurement],
                             field: str = "measurements") -> tuple[MeasuredRow, ...]:
    """Each message's mode (>= 1 core, clocks > 0) and role read; the library checks the rest."""
    out = []
    for i, m in enumerate(msgs):
        at = f"{field}[{i}]"
        role = _optional_role(m.role, f"{at}.role")
        out.append(MeasuredRow(mode_from_proto(m.mode, f"{at}.mode"), int(m.batch_size), m.time_ms, m.power_w,
                               m.device, m.workload, role))
    return tuple(out)


# --- Fit / Transfer / ListModels ------------------------------------------------------------------
def fit_to_proto(spec: FitSpec) -> estimator_pb2.FitRequest:
    msg = estimator_pb2.FitRequest(model_id=spec.model_id, kind=spec.method, device=spec.device,
                                   workload=spec.workload, role=_role(spec.role),
                                   measurements=[measured_row_to_proto(r) for r in spec.measurements],
                                   epochs=int(spec.epochs), validation_fraction=float(spec.validation_fraction),
                                   params=dict(spec.params))
    if spec.seed is not None:
        msg.seed = int(spec.seed)
    return msg


def fit_from_proto(msg: estimator_pb2.FitRequest) -> FitSpec:
    """ROLE_UNSPECIFIED reads as train (the reference workloads are trainings)."""
    return FitSpec(msg.device, msg.workload, role_from_proto(msg.role, "role", default=Role.TRAIN), msg.kind,
                   msg.model_id, measured_rows_from_proto(msg.measurements), msg.epochs, _seed(msg),
                   msg.validation_fraction, dict(msg.params))


def transfer_to_proto(spec: TransferSpec) -> estimator_pb2.TransferRequest:
    params = {**spec.params, **({METHOD_PARAM: spec.method} if spec.method else {})}
    msg = estimator_pb2.TransferRequest(base_model_id=spec.base_model_id, model_id=spec.model_id, device=spec.device,
                                        workload=spec.workload, role=_role(spec.role),
                                        measurements=[measured_row_to_proto(r) for r in spec.measurements],
                                        epochs=int(spec.epochs), params=params)
    if spec.seed is not None:
        msg.seed = int(spec.seed)
    return msg


def transfer_from_proto(msg: estimator_pb2.TransferRequest) -> TransferSpec:
    params = {k: v for k, v in msg.params.items() if k != METHOD_PARAM}
    return TransferSpec(msg.base_model_id, msg.model_id, msg.device, msg.workload, _optional_role(msg.role, "role"),
                        measured_rows_from_proto(msg.measurements), msg.epochs, _seed(msg),
                        msg.params.get(METHOD_PARAM, ""), params)


def model_info_to_proto(info: ModelInfo) -> estimator_pb2.ModelInfo:
    msg = estimator_pb2.ModelInfo(model_id=info.model_id, kind=info.kind, device=info.device, workload=info.workload,
                                  role=_role(info.role), base_model_id=info.base_model_id, n_train=int(info.n_train),
                                  has_std=info.has_std, metrics=dict(info.metrics))
    if info.created_s:
        # Seconds and fraction apart: Unix time in ns does not fit a double's 53 bits exactly.
        seconds = math.floor(info.created_s)
        msg.created.FromNanoseconds(seconds * 10**9 + round((info.created_s - seconds) * 1e9))
    return msg


def model_info_from_proto(msg: estimator_pb2.ModelInfo, field: str = "model") -> ModelInfo:
    created = msg.created.seconds + msg.created.nanos / 1e9 if msg.HasField("created") else 0.0
    return ModelInfo(msg.model_id, msg.kind, msg.device, msg.workload, _optional_role(msg.role, f"{field}.role"),
                     msg.base_model_id, msg.n_train, msg.has_std, dict(msg.metrics), created)


def list_models_to_proto(device: str = "", workload: str = "") -> estimator_pb2.ListModelsRequest:
    return estimator_pb2.ListModelsRequest(device=device, workload=workload)


def list_models_from_proto(msg: estimator_pb2.ListModelsRequest) -> tuple[str, str]:
    """(device, workload) filters; empty: any."""
    return msg.device, msg.workload


# --- Predict --------------------------------------------------------------------------------------
def chunk_rows(value: int) -> int:
    """Rows per streamed chunk; 0: the default."""
    if value == 0:
        return DEFAULT_CHUNK_ROWS
    if not 0 < value <= MAX_CHUNK_ROWS:
        raise InvalidArgument("chunk_size", f"{value} is out of range",
                              f"0 (default {DEFAULT_CHUNK_ROWS}) or 1 to {MAX_CHUNK_ROWS}")
    return int(value)


def predict_to_proto(spec: PredictSpec, chunk_size: int = 0) -> estimator_pb2.PredictRequest:
    return estimator_pb2.PredictRequest(model_id=spec.model_id, device=spec.device,
                                        modes=[mode_to_proto(m) for m in spec.modes],
                                        grid=common_pb2.Grid.ValueType(GRID.to_proto(spec.grid)),
                                        batch_sizes=[int(b) for b in spec.batch_sizes], chunk_size=int(chunk_size))


def predict_from_proto(msg: estimator_pb2.PredictRequest) -> tuple[PredictSpec, int]:
    """(the spec, rows per chunk). ``grid`` is read only without ``modes`` (it names the modes otherwise)."""
    modes = tuple(mode_from_proto(m, f"modes[{i}]") for i, m in enumerate(msg.modes))
    spec = PredictSpec(msg.model_id, msg.device, modes, batch_sizes=tuple(msg.batch_sizes))
    if not modes:
        spec = replace(spec, grid=GRID.from_proto(msg.grid, "grid"))
    return spec, chunk_rows(msg.chunk_size)


def predict_responses(rows: Predictions, chunk: int) -> Iterator[estimator_pb2.PredictResponse]:
    """The rows in chunks of ``chunk`` rows, each with its offset and the total."""
    total = len(rows)
    for start in range(0, total, chunk):
        stop = min(start + chunk, total)
        yield estimator_pb2.PredictResponse(table=table_to_proto(rows.slice(start, stop)), offset=start, total=total)


def predictions_from_responses(chunks: Iterable[estimator_pb2.PredictResponse]) -> Predictions:
    return Predictions.concat([table_from_proto(c.table, f"Predict chunk {c.offset}", allow_empty=True)
                               for c in chunks])


# --- batch efficiency -----------------------------------------------------------------------------
def efficiency_to_proto(efficiency: BatchEfficiency) -> list[common_pb2.BatchEfficiency]:
    """One row per batch size, ascending; ``passes_to_target`` / ``r`` absent for never."""
    ratio = efficiency.ratio()
    out = []
    for b in sorted(efficiency.passes_by_batch):
        msg = common_pb2.BatchEfficiency(batch_size=int(b))
        passes = efficiency.passes_by_batch[b]
        if math.isfinite(passes):
            msg.passes_to_target = float(passes)
        if math.isfinite(ratio.get(b, math.inf)):
            msg.r = float(ratio[b])
        out.append(msg)
    return out


def passes_from_proto(rows: Sequence[common_pb2.BatchEfficiency], field: str = "observed") -> BatchEfficiency:
    """Measured passes by batch size (absent = never), checked: batch sizes >= 1 once each, passes > 0."""
    out: dict[int, float] = {}
    for i, r in enumerate(rows):
        at = f"{field}[{i}]"
        if r.batch_size < 1:
            raise InvalidArgument(f"{at}.batch_size", f"{r.batch_size} is not a batch size", ">= 1")
        if r.batch_size in out:
            raise InvalidArgument(f"{at}.batch_size", f"batch size {r.batch_size} repeats", "one row per batch size")
        passes = r.passes_to_target if r.HasField("passes_to_target") else math.inf
        if math.isnan(passes) or passes <= 0:
            raise InvalidArgument(f"{at}.passes_to_target", f"{passes!r} is not a pass count",
                                  "> 0, or absent for never")
        out[int(r.batch_size)] = float(passes)
    return BatchEfficiency(out)


def efficiency_request_to_proto(spec: EfficiencySpec) -> estimator_pb2.EstimateBatchEfficiencyRequest:
    msg = estimator_pb2.EstimateBatchEfficiencyRequest(
        workload=spec.workload, proxy_dataset=common_pb2.DatasetShape(name=spec.proxy_dataset),
        batch_sizes=[int(b) for b in spec.batch_sizes], target_accuracy=float(spec.target_accuracy),
        samples_per_pass=int(spec.samples_per_pass), max_passes=int(spec.max_passes),
        observed=efficiency_to_proto(spec.observed) if spec.observed is not None else [])
    if spec.seed is not None:
        msg.seed = int(spec.seed)
    return msg


def efficiency_request_from_proto(msg: estimator_pb2.EstimateBatchEfficiencyRequest) -> EfficiencySpec:
    """No ``observed`` rows: train on the proxy data set."""
    return EfficiencySpec(msg.workload, msg.proxy_dataset.name, tuple(msg.batch_sizes), msg.target_accuracy,
                          msg.samples_per_pass, msg.max_passes, _seed(msg),
                          passes_from_proto(msg.observed) if msg.observed else None)


# --- energy ---------------------------------------------------------------------------------------
_LAYER_FIELDS = ("type", "position", "input_height", "input_width", "in_channels", "out_channels", "kernel_size",
                 "stride", "padding")


def layer_to_proto(layer: LayerSpec) -> estimator_pb2.Layer:
    return estimator_pb2.Layer(**{name: getattr(layer, name) for name in _LAYER_FIELDS})


def layer_from_proto(msg: estimator_pb2.Layer) -> LayerSpec:
    return LayerSpec(**{name: getattr(msg, name) for name in _LAYER_FIELDS})


def energy_request_to_proto(spec: EnergySpec) -> estimator_pb2.EstimateEnergyRequest:
    msg = estimator_pb2.EstimateEnergyRequest(model_id=spec.model_id, device=spec.device, workload=spec.workload,
                                              layers=[layer_to_proto(lay) for lay in spec.layers],
                                              batch_size=int(spec.batch_size), role=_role(spec.role))
    if spec.mode is not None:
        msg.mode.CopyFrom(mode_to_proto(spec.mode))
    return msg


def energy_request_from_proto(msg: estimator_pb2.EstimateEnergyRequest) -> EnergySpec:
    """An unset mode (or one with no cores): None, the device's MAXN."""
    mode = mode_from_proto(msg.mode, "mode") if msg.HasField("mode") and msg.mode.cores else None
    return EnergySpec(msg.device, mode, msg.workload, tuple(layer_from_proto(lay) for lay in msg.layers),
                      msg.batch_size, _optional_role(msg.role, "role"), msg.model_id)


def energy_to_proto(estimate: EnergyEstimate) -> estimator_pb2.EstimateEnergyResponse:
    msg = estimator_pb2.EstimateEnergyResponse(energy_j=estimate.energy_j)
    if estimate.energy_std_j is not None:
        msg.energy_std_j = estimate.energy_std_j
    for lay in estimate.layers:
        row = estimator_pb2.LayerEnergy(layer=layer_to_proto(lay.layer), energy_j=lay.energy_j)
        if lay.energy_std_j is not None:
            row.energy_std_j = lay.energy_std_j
        msg.layers.append(row)
    return msg


def energy_from_proto(msg: estimator_pb2.EstimateEnergyResponse) -> EnergyEstimate:
    layers = tuple(LayerEnergy(layer_from_proto(lay.layer), lay.energy_j, optional_value(lay, "energy_std_j"))
                   for lay in msg.layers)
    return EnergyEstimate(msg.energy_j, optional_value(msg, "energy_std_j"), layers)
