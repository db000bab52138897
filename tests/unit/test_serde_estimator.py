"""``edgetune.proto.serde.estimator``: every estimator record survives record -> message -> record, and
a bad field is refused with an InvalidArgument naming it."""

from __future__ import annotations

import math

import numpy as np
import pytest

from edgetune.base.mode import PowerMode
from edgetune.base.records import BatchEfficiency, Points, Predictions
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
    measured_rows,
)
from edgetune.proto.serde import estimator as serde
from edgetune.proto.serde.common import mode_to_proto
from edgetune.proto.v1 import common_pb2, estimator_pb2

MODE = PowerMode(8, 1344.0, 624.75, 3199.0)
ROWS = (MeasuredRow(MODE, 16, 120.5, 21.25, "orin-agx", "resnet18", Role.TRAIN),
        MeasuredRow(PowerMode(4, 729.6, 306.0, 2133.0), 32, 210.0, 0.0))


def _wire(msg):
    """The message as sent and received: serialized and parsed again."""
    return type(msg).FromString(msg.SerializeToString())


def _refusal(fn, *args) -> InvalidArgument:
    with pytest.raises(InvalidArgument) as caught:
        fn(*args)
    return caught.value


# --- round trips ----------------------------------------------------------------------------------
def test_fit_round_trips():
    spec = FitSpec("orin-agx", "resnet18", Role.INFER, "nn+gp", "a/b", ROWS, epochs=40, seed=7,
                   validation_fraction=0.2, params={"lr": "0.01", "restarts": "2"})
    assert serde.fit_from_proto(_wire(serde.fit_to_proto(spec))) == spec
    unseeded = FitSpec("orin-agx", "resnet18")  # no seed stays no seed (0 is a seed)
    assert serde.fit_from_proto(_wire(serde.fit_to_proto(unseeded))) == unseeded


def test_fit_reads_an_unspecified_role_as_train():
    msg = estimator_pb2.FitRequest(device="orin-agx", workload="w")
    assert serde.fit_from_proto(msg).role is Role.TRAIN and serde.fit_from_proto(msg).seed is None


def test_transfer_round_trips_with_its_method_in_params():
    spec = TransferSpec("reference:orin-agx@1", "new/model", "xavier-agx", "mobilenetv3", Role.TRAIN, ROWS,
                        epochs=300, seed=0, method="nn+gp", params={"combine": "add"})
    msg = serde.transfer_to_proto(spec)
    assert dict(msg.params) == {"combine": "add", "method": "nn+gp"}  # the wire has no kind field here
    assert serde.transfer_from_proto(_wire(msg)) == spec
    plain = TransferSpec("base/id")  # device, workload, role, method: the base's / the policy's
    assert serde.transfer_from_proto(_wire(serde.transfer_to_proto(plain))) == plain


def test_points_become_measured_rows_of_their_device_workload_and_role():
    points = Points(np.array([MODE.as_tuple()]), [16], [120.5], [21.25], "orin-agx", "resnet18", "infer")
    (row,) = measured_rows(points)
    assert row == MeasuredRow(MODE, 16, 120.5, 21.25, "orin-agx", "resnet18", Role.INFER)
    assert serde.measured_rows_from_proto([serde.measured_row_to_proto(row)]) == (row,)


def test_model_info_round_trips():
    info = ModelInfo("orin-agx/resnet18/train/nn@3", "nn", "orin-agx", "resnet18", Role.TRAIN, "ref@1", 45, True,
                     {"time_mape": 3.5, "power_mape": 1.25}, 1_700_000_000.25)
    assert serde.model_info_from_proto(_wire(serde.model_info_to_proto(info))) == info
    bare = ModelInfo("x@1", "gp")
    msg = serde.model_info_to_proto(bare)
    assert not msg.HasField("created") and msg.role == common_pb2.ROLE_UNSPECIFIED
    assert serde.model_info_from_proto(msg) == bare


def test_predict_round_trips_with_its_chunk_size():
    for spec in (PredictSpec("m@2", "orin-agx", (MODE,), batch_sizes=(8, 16)),
                 PredictSpec("m", grid="fulcrum")):
        assert serde.predict_from_proto(_wire(serde.predict_to_proto(spec, 100))) == (spec, 100)
    assert serde.predict_from_proto(serde.predict_to_proto(PredictSpec("m")))[1] == serde.DEFAULT_CHUNK_ROWS


def test_predictions_stream_in_chunks_and_read_back_whole():
    n = 10
    rows = Predictions(np.tile(MODE.as_tuple(), (n, 1)), np.full(n, 16), np.arange(1.0, n + 1), np.full(n, 20.0),
                       None, np.full(n, 0.5))
    chunks = [_wire(c) for c in serde.predict_responses(rows, 4)]
    assert [(c.offset, c.total, len(c.table.time_ms)) for c in chunks] == [(0, 10, 4), (4, 10, 4), (8, 10, 2)]
    back = serde.predictions_from_responses(chunks)
    for name in ("modes", "batch_size", "time_ms", "power_w", "power_std_w"):
        np.testing.assert_array_equal(getattr(back, name), getattr(rows, name))
    assert back.time_std_ms is None


def test_batch_efficiency_round_trips_with_never_absent():
    efficiency = BatchEfficiency({8: 12.0, 16: 6.0, 64: math.inf})
    msgs = serde.efficiency_to_proto(efficiency)
    assert [(m.batch_size, m.HasField("passes_to_target"), m.HasField("r")) for m in msgs] == [
        (8, True, True), (16, True, True), (64, False, False)]
    assert msgs[1].r == pytest.approx(0.5)
    assert serde.passes_from_proto(msgs, "efficiency") == efficiency
    spec = EfficiencySpec("resnet-slim", "digits", (8, 16), 0.9, 32, 3, 0, efficiency)
    assert serde.efficiency_request_from_proto(_wire(serde.efficiency_request_to_proto(spec))) == spec
    assert serde.efficiency_request_from_proto(estimator_pb2.EstimateBatchEfficiencyRequest()) == EfficiencySpec()


def test_energy_round_trips():
    layers = (LayerSpec("conv", "", 16, 16, 3, 8, 3, 1, 1), LayerSpec("relu"), LayerSpec("fc", out_channels=10))
    spec = EnergySpec("orin-agx", MODE, "", layers, 4, Role.TRAIN)
    assert serde.energy_request_from_proto(_wire(serde.energy_request_to_proto(spec))) == spec
    assert serde.energy_request_from_proto(serde.energy_request_to_proto(EnergySpec(workload="cnn5"))) == \
        EnergySpec(workload="cnn5")  # no mode: MAXN
    estimate = EnergyEstimate(1.5, 0.25, (LayerEnergy(LayerSpec("conv", "input", 16, 16, 3, 8, 3, 1), 1.0, 0.2),
                                          LayerEnergy(LayerSpec("fc", "output", in_channels=8, out_channels=10), 0.5)))
    assert serde.energy_from_proto(_wire(serde.energy_to_proto(estimate))) == estimate


def test_list_models_round_trips():
    assert serde.list_models_from_proto(serde.list_models_to_proto("orin-agx", "w")) == ("orin-agx", "w")


# --- refusals ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("mutate, field", [
    (lambda m: setattr(m.measurements[1].mode, "cores", 0), "measurements[1].mode.cores"),
    (lambda m: setattr(m.measurements[0].mode, "gpu_mhz", float("nan")), "measurements[0].mode.gpu_mhz"),
    (lambda m: setattr(m.measurements[0], "role", 99), "measurements[0].role"),
    (lambda m: setattr(m, "role", 42), "role"),
])
def test_fit_refusals_name_the_field(mutate, field):
    msg = serde.fit_to_proto(FitSpec("orin-agx", "resnet18", measurements=ROWS))
    mutate(msg)
    assert _refusal(serde.fit_from_proto, msg).field == field


def test_predict_refusals_name_the_field():
    assert _refusal(serde.predict_from_proto, estimator_pb2.PredictRequest(model_id="m", grid=42)).field == "grid"
    for size in (-1, serde.MAX_CHUNK_ROWS + 1):
        assert _refusal(serde.predict_from_proto, estimator_pb2.PredictRequest(model_id="m", chunk_size=size)).field \
            == "chunk_size"
    bad_mode = estimator_pb2.PredictRequest(model_id="m", modes=[common_pb2.PowerMode(cores=2, cpu_mhz=-1,
                                                                                      gpu_mhz=1, emc_mhz=1)])
    assert _refusal(serde.predict_from_proto, bad_mode).field == "modes[0].cpu_mhz"
    # with modes, the grid names nothing and is not read
    assert serde.predict_from_proto(estimator_pb2.PredictRequest(
        model_id="m", modes=[mode_to_proto(MODE)], grid=42))[0].modes == (MODE,)


@pytest.mark.parametrize("rows, field", [
    ([common_pb2.BatchEfficiency(batch_size=0, passes_to_target=3)], "observed[0].batch_size"),
    ([common_pb2.BatchEfficiency(batch_size=8, passes_to_target=3),
      common_pb2.BatchEfficiency(batch_size=8, passes_to_target=4)], "observed[1].batch_size"),
    ([common_pb2.BatchEfficiency(batch_size=8, passes_to_target=float("nan"))], "observed[0].passes_to_target"),
    ([common_pb2.BatchEfficiency(batch_size=8, passes_to_target=0)], "observed[0].passes_to_target"),
])
def test_observed_passes_refusals_name_the_row(rows, field):
    msg = estimator_pb2.EstimateBatchEfficiencyRequest(observed=rows)
    assert _refusal(serde.efficiency_request_from_proto, msg).field == field


def test_energy_refusals_name_the_field():
    msg = estimator_pb2.EstimateEnergyRequest(workload="cnn5", mode=common_pb2.PowerMode(cores=2, cpu_mhz=0))
    assert _refusal(serde.energy_request_from_proto, msg).field == "mode.cpu_mhz"
    assert _refusal(serde.energy_request_from_proto, estimator_pb2.EstimateEnergyRequest(role=7)).field == "role"
