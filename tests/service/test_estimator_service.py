"""The Estimator service through generated client stubs: in-process servers on 127.0.0.1:0 over an
embedded Redis.

Fit (few epochs) -> Transfer (nn+gp) -> Predict over the Fulcrum grid streamed in chunks, checked
against the library's ``TimePowerModel.predict`` for the same stored model; Fit from the store's
measurements; a restarted server predicting with a model fitted before; ListModels; batch
efficiency; THOR energy; a seeded fit on local Ray (2 CPUs) equal to the same fit without Ray;
every bad input answered with INVALID_ARGUMENT / NOT_FOUND naming the field; health, reflection.
"""

from __future__ import annotations

import math
import warnings

import grpc
import numpy as np
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from edgetune.base.mode import PowerMode
from edgetune.base.records import Points, Predictions
from edgetune.base.roles import Role
from edgetune.clients.calls import CallFailed, Status
from edgetune.clients.estimator import EstimatorClient
from edgetune.clients.tuning import ServiceEstimator
from edgetune.devices.simulated.tables import truth_table
from edgetune.estimation.bundle import TimePowerModel
from edgetune.estimation.ids import parse_model_id
from edgetune.estimation.records import FitSpec, MeasuredRow, PredictSpec
from edgetune.estimation.repository import BLOB_KIND
from edgetune.estimation.validation import ExtrapolationWarning
from edgetune.powermodes.grids import named_grid
from edgetune.powermodes.specs import get_spec
from edgetune.proto.serde.tables import table_from_proto
from edgetune.proto.v1 import common_pb2, estimator_pb2, estimator_pb2_grpc
from edgetune.services.estimator.server import create_server
from edgetune.store import MeasurementRecord, open_store

ORIN = get_spec("orin-agx")
FULCRUM = named_grid(ORIN, "fulcrum")
EPOCHS = 3
TRANSFER_EPOCHS = 20


def _measurements(rows) -> list[common_pb2.Measurement]:
    return [common_pb2.Measurement(
        mode=common_pb2.PowerMode(cores=r["cores"], cpu_mhz=r["cpu_mhz"], gpu_mhz=r["gpu_mhz"], emc_mhz=r["emc_mhz"]),
        batch_size=r["batch_size"], time_ms=r["time_ms"], power_w=r["power_w"]) for r in rows]


@pytest.fixture(scope="module")
def reference_rows():
    return truth_table(ORIN, "resnet18", "train", FULCRUM.modes(), [16])


@pytest.fixture(scope="module")
def small_rows():
    modes = FULCRUM.modes()
    return truth_table(ORIN, "mobilenetv3", "train", [modes[i] for i in range(0, len(modes), 9)], [16])  # 49 rows


@pytest.fixture(scope="module")
def store():
    s = open_store("embedded")
    yield s
    s.close()


def _start(store, **kw):
    kw.setdefault("use_ray", False)
    server, _ = create_server(port=0, host="127.0.0.1", metrics_port=None, store=store, grace_s=1.0, max_workers=4,
                              **kw)
    server.start()
    return server, grpc.insecure_channel(server.address)


@pytest.fixture(scope="module")
def served(store):
    server, channel = _start(store)
    yield estimator_pb2_grpc.EstimatorStub(channel), channel
    channel.close()
    server.stop(0)


@pytest.fixture(scope="module")
def estimator(served):
    return served[0]


@pytest.fixture(scope="module")
def fitted(estimator, reference_rows, small_rows):
    ref = estimator.Fit(estimator_pb2.FitRequest(
        device="orin-agx", workload="resnet18", role=common_pb2.ROLE_TRAIN, measurements=_measurements(reference_rows),
        epochs=EPOCHS, seed=0)).model
    new = estimator.Transfer(estimator_pb2.TransferRequest(
        base_model_id=ref.model_id, workload="mobilenetv3", measurements=_measurements(small_rows),
        epochs=TRANSFER_EPOCHS)).model
    return ref, new


def _predict(stub, **kw):
    chunks = list(stub.Predict(estimator_pb2.PredictRequest(**kw)))
    return chunks, Predictions.concat([table_from_proto(c.table, f"chunk[{i}]") for i, c in enumerate(chunks)])


def _library_model(store, model_id: str) -> TimePowerModel:
    ref = parse_model_id(model_id)
    data, _, _ = store.get_blob(BLOB_KIND, ref.parts, ref.version)
    return TimePowerModel.from_bytes(data)


def _grid_predictions(model: TimePowerModel):
    x = FULCRUM.array()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ExtrapolationWarning)
        return model.predict(x)


def _code(call) -> tuple[grpc.StatusCode, str]:
    with pytest.raises(grpc.RpcError) as info:
        out = call()
        if hasattr(out, "__iter__") and not hasattr(out, "ListFields"):
            list(out)
    return info.value.code(), info.value.details()


# --- fit / transfer / predict ---------------------------------------------------------------------
def test_fit_then_transfer_store_versioned_models(fitted, reference_rows, small_rows):
    ref, new = fitted
    assert ref.model_id.startswith("orin-agx/resnet18/train/nn@")
    assert ref.kind == "nn" and ref.device == "orin-agx" and ref.role == common_pb2.ROLE_TRAIN
    held = round(0.1 * len(reference_rows))
    assert ref.n_train == len(reference_rows) - held
    assert set(ref.metrics) == {"time_mape", "power_mape"} and all(v > 0 for v in ref.metrics.values())
    assert not ref.has_std and ref.created.seconds > 0
    assert new.model_id.startswith("orin-agx/mobilenetv3/train/nn+gp@")
    assert new.kind == "nn+gp" and new.has_std and new.base_model_id == ref.model_id
    assert new.n_train == len(small_rows)


def test_a_named_version_refined_with_more_rows_is_its_models_next_version(estimator, fitted, small_rows):
    # what a node's tuner does when verification measured one point more: its own model, fine-tuned again
    # (a workload name of its own: the listing tests below see only the module's other models)
    node = estimator.Transfer(estimator_pb2.TransferRequest(
        base_model_id=fitted[0].model_id, model_id="tuning-refine-node-1", workload="mobilenetv3-node",
        measurements=_measurements(small_rows[:-1]), epochs=TRANSFER_EPOCHS)).model
    again = estimator.Transfer(estimator_pb2.TransferRequest(
        base_model_id=node.model_id, model_id="tuning-refine-node-1", workload="mobilenetv3-node",
        measurements=_measurements(small_rows), epochs=TRANSFER_EPOCHS)).model
    assert node.model_id == "tuning-refine-node-1@1" and again.model_id == "tuning-refine-node-1@2"
    assert again.base_model_id == node.model_id and again.n_train == len(small_rows)
    # from the unnamed latest the lineage would be ambiguous: refused, naming the field
    with pytest.raises(grpc.RpcError) as err:
        estimator.Transfer(estimator_pb2.TransferRequest(
            base_model_id="tuning-refine-node-1", model_id="tuning-refine-node-1", workload="mobilenetv3-node",
            measurements=_measurements(small_rows), epochs=TRANSFER_EPOCHS))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "model_id" in err.value.details()


def test_transfer_from_a_shipped_reference_is_not_stored_as_a_model(estimator, store):
    modes = FULCRUM.modes()
    profiled = [modes[i] for i in np.random.default_rng(3).choice(len(modes), 40, replace=False)]
    rows = truth_table(ORIN, "mobilenetv3", "train", profiled, [16])
    before = len(store.list_blobs(BLOB_KIND))
    new = estimator.Transfer(estimator_pb2.TransferRequest(
        base_model_id="reference:orin-agx", model_id="shipped-base/mobilenetv3-from-shipped", workload="mobilenetv3-from-shipped",
        measurements=_measurements(rows), params={"method": "ref+gp"})).model
    assert new.base_model_id == "reference:orin-agx@1" and new.kind == "ref+gp" and new.device == "orin-agx"
    assert len(store.list_blobs(BLOB_KIND)) == before + 1  # the transfer; the shipped base stays package data
    _, preds = _predict(estimator, model_id=new.model_id, grid=common_pb2.GRID_FULCRUM)
    truth = truth_table(ORIN, "mobilenetv3", "train", FULCRUM.modes(), [16])
    assert np.mean(np.abs(preds.time_ms / np.array([r["time_ms"] for r in truth]) - 1)) < 0.10
    code, details = _code(lambda: estimator.Transfer(estimator_pb2.TransferRequest(
        base_model_id="reference:thor", workload="w", measurements=_measurements(rows))))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "base_model_id" in details and "reference:orin-agx" in details
    again = estimator.Transfer(estimator_pb2.TransferRequest(  # the base id the transfer recorded names it again
        base_model_id=new.base_model_id, model_id="shipped-base/again", workload="mobilenetv3-from-shipped",
        measurements=_measurements(rows), params={"method": "gp"})).model
    assert again.base_model_id == "reference:orin-agx@1"
    code, details = _code(lambda: estimator.Transfer(estimator_pb2.TransferRequest(
        base_model_id="reference:orin-agx@2", workload="w", measurements=_measurements(rows))))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "version 1" in details


def test_predict_fulcrum_grid_streams_in_order_and_matches_library(estimator, store, fitted):
    _, new = fitted
    chunks, preds = _predict(estimator, model_id=new.model_id, grid=common_pb2.GRID_FULCRUM, chunk_size=100)
    assert len(FULCRUM) == 441 and len(preds) == 441
    assert [c.offset for c in chunks] == list(range(0, 441, 100)) and all(c.total == 441 for c in chunks)
    assert [len(c.table.time_ms) for c in chunks] == [100, 100, 100, 100, 41]
    np.testing.assert_array_equal(preds.modes, FULCRUM.array())
    assert (preds.batch_size == 16).all()
    assert preds.time_std_ms is not None and preds.power_std_w is not None  # std columns: the model has std
    want = _grid_predictions(_library_model(store, new.model_id))
    np.testing.assert_allclose(preds.time_ms, want["time_ms"], rtol=1e-12)
    np.testing.assert_allclose(preds.power_w, want["power_w"], rtol=1e-12)
    np.testing.assert_allclose(preds.time_std_ms, want["time_std_ms"], rtol=1e-12)
    np.testing.assert_allclose(preds.power_std_w, want["power_std_w"], rtol=1e-12)


def test_predict_explicit_modes_and_latest_version(estimator, store, fitted):
    ref, _ = fitted
    modes = FULCRUM.modes()[:7]
    bare_id = ref.model_id.split("@")[0]  # no version: the latest
    _, preds = _predict(estimator, model_id=bare_id, modes=[common_pb2.PowerMode(
        cores=m.cores, cpu_mhz=m.cpu_mhz, gpu_mhz=m.gpu_mhz, emc_mhz=m.emc_mhz) for m in modes[::-1]])
    assert preds.modes[:, 1].tolist() == [m.cpu_mhz for m in modes[::-1]]
    assert preds.time_std_ms is None and preds.power_std_w is None  # no std: empty std columns
    want = _library_model(store, ref.model_id).predict(np.array([m.as_tuple() for m in modes[::-1]]))
    np.testing.assert_allclose(preds.time_ms, want["time_ms"], rtol=1e-12)


def test_predict_full_grid_default_chunks(estimator, fitted):
    ref, _ = fitted
    chunks, preds = _predict(estimator, model_id=ref.model_id)  # GRID_UNSPECIFIED = full
    assert len(preds) == 18_096 and chunks[0].total == 18_096
    assert len(chunks) == math.ceil(18_096 / 8192)
    assert max(c.ByteSize() for c in chunks) < 1 << 20  # columnar: 8,192 rows in well under gRPC's 4 MiB


def test_fit_from_store_measurements(estimator, store, small_rows):
    store.put_measurements([MeasurementRecord.from_row({**r, "id": f"m{i}", "device": "orin-agx", "node": "n1",
                                                        "workload": "yolov8n"}) for i, r in enumerate(small_rows)])
    info = estimator.Fit(estimator_pb2.FitRequest(device="orin-agx", workload="yolov8n", role=common_pb2.ROLE_TRAIN,
                                                  kind="linear")).model
    assert info.kind == "linear" and info.n_train == len(small_rows) - round(0.1 * len(small_rows))
    assert info.model_id.startswith("orin-agx/yolov8n/train/linear@")


def test_restart_keeps_models(store, fitted):
    ref, new = fitted
    server, channel = _start(store)  # a fresh process state: empty caches, same store
    try:
        stub = estimator_pb2_grpc.EstimatorStub(channel)
        _, preds = _predict(stub, model_id=new.model_id, grid=common_pb2.GRID_FULCRUM)
        want = _grid_predictions(_library_model(store, new.model_id))
        np.testing.assert_allclose(preds.time_ms, want["time_ms"], rtol=1e-12)
        listed = {m.model_id for m in stub.ListModels(estimator_pb2.ListModelsRequest()).models}
        assert {ref.model_id, new.model_id} <= listed
    finally:
        channel.close()
        server.stop(0)


def test_list_models_filters(estimator, fitted):
    ref, new = fitted
    found = estimator.ListModels(estimator_pb2.ListModelsRequest(workload="mobilenetv3")).models
    assert [m.model_id for m in found] == [new.model_id]
    assert found[0].metrics and found[0].has_std
    assert not estimator.ListModels(estimator_pb2.ListModelsRequest(device="nano")).models


def test_fit_again_adds_a_version(estimator, small_rows):
    req = estimator_pb2.FitRequest(device="orin-agx", workload="lstm", kind="linear",
                                   measurements=_measurements(small_rows))
    first, second = estimator.Fit(req).model, estimator.Fit(req).model
    assert first.model_id.endswith("@1") and second.model_id.endswith("@2")


def test_the_typed_client_and_the_tuning_adapter_speak_records(served, reference_rows):
    """EstimatorClient: records in, records out, the same rows the stub streams; ServiceEstimator
    (the tuner's remote estimator) fits, finds and predicts through it."""
    _, channel = served
    client = EstimatorClient(channel)
    spread = reference_rows[::7]  # 63 modes across the grid
    rows = tuple(MeasuredRow(PowerMode.from_mapping(r), r["batch_size"], r["time_ms"], r["power_w"]) for r in spread)
    info = client.fit(FitSpec("orin-agx", "client-w", method="linear", measurements=rows, seed=0))
    assert info.model_id == "orin-agx/client-w/train/linear@1" and info.kind == "linear" and info.role is Role.TRAIN
    assert info.created_s > 0 and set(info.metrics) == {"time_mape", "power_mape"}
    assert client.list_models(workload="client-w") == [info]
    got = client.predict(PredictSpec(info.model_id, grid="fulcrum"), chunk_size=100)
    _, want = _predict(served[0], model_id=info.model_id, grid=common_pb2.GRID_FULCRUM)
    np.testing.assert_array_equal(got.modes, want.modes)
    np.testing.assert_array_equal(got.time_ms, want.time_ms)
    with pytest.raises(CallFailed) as caught:
        client.predict(PredictSpec("no/such/model"))
    assert caught.value.code == Status.NOT_FOUND and "no/such/model" in caught.value.details

    adapter = ServiceEstimator(channel, "test")
    points = Points(np.array([r.mode.as_tuple() for r in rows]), [r.batch_size for r in rows],
                    [r.time_ms for r in rows], [r.power_w for r in rows], "orin-agx", "adapter-w", "train")
    ref = adapter.fit(points, model_id="adapter/ref", method="linear")
    assert ref.model_id == "adapter/ref@1" and ref.kind == "linear" and adapter.find("adapter/ref") == ref
    preds = adapter.predict(ref, points.modes[:5], 16)
    assert len(preds) == 5 and (preds.time_ms > 0).all()


# --- Ray vs sequential --------------------------------------------------------------------------
def test_ray_fit_equals_sequential_fit(store, reference_rows, local_ray):
    # The server's use_ray=True runs its tasks on the Ray it finds running (local_ray, tests/conftest.py).
    req = estimator_pb2.FitRequest(device="orin-agx", workload="bert-base", measurements=_measurements(
        reference_rows[::4]), epochs=2, seed=7, model_id="ray-check/seq")
    seq_server, seq_channel = _start(store, use_ray=False)
    ray_server, ray_channel = _start(store, use_ray=True, ray_num_cpus=2)
    try:
        seq = estimator_pb2_grpc.EstimatorStub(seq_channel).Fit(req).model
        req.model_id = "ray-check/ray"
        on_ray = estimator_pb2_grpc.EstimatorStub(ray_channel).Fit(req).model
    finally:
        for s, c in ((seq_server, seq_channel), (ray_server, ray_channel)):
            c.close()
            s.stop(0)
    a, b = _library_model(store, seq.model_id), _library_model(store, on_ray.model_id)
    x = FULCRUM.array()
    for target in ("time_ms", "power_w"):
        np.testing.assert_array_equal(a.predict(x)[target], b.predict(x)[target])
    assert seq.metrics == on_ray.metrics


# --- batch efficiency, energy ------------------------------------------------------------------------
def test_batch_efficiency_normalises_observed(estimator):
    resp = estimator.EstimateBatchEfficiency(estimator_pb2.EstimateBatchEfficiencyRequest(observed=[
        common_pb2.BatchEfficiency(batch_size=8, passes_to_target=10),
        common_pb2.BatchEfficiency(batch_size=32, passes_to_target=15),
        common_pb2.BatchEfficiency(batch_size=128)]))
    rows = {e.batch_size: e for e in resp.efficiency}
    assert rows[8].r == pytest.approx(10 / 15) and rows[32].r == 1.0
    assert not rows[128].HasField("r") and not rows[128].HasField("passes_to_target")


def test_batch_efficiency_tiny_training(estimator):
    resp = estimator.EstimateBatchEfficiency(estimator_pb2.EstimateBatchEfficiencyRequest(
        workload="resnet-slim", batch_sizes=[8, 16], target_accuracy=0.9, max_passes=3, samples_per_pass=32, seed=0))
    assert [e.batch_size for e in resp.efficiency] == [8, 16]
    for e in resp.efficiency:  # passes are whole s-sample passes; r in (0, 1] when reached
        assert not e.HasField("passes_to_target") or (e.passes_to_target in (1, 2, 3) and 0 < e.r <= 1)


def test_energy_of_layers(estimator):
    layers = [estimator_pb2.Layer(type="conv", input_height=16, input_width=16, in_channels=3, out_channels=8,
                                  kernel_size=3, stride=1, padding=1),
              estimator_pb2.Layer(type="relu"), estimator_pb2.Layer(type="pool", kernel_size=2),
              estimator_pb2.Layer(type="conv", out_channels=8, kernel_size=3, padding=1),
              estimator_pb2.Layer(type="gap"), estimator_pb2.Layer(type="fc", out_channels=10)]
    try:
        resp = estimator.EstimateEnergy(estimator_pb2.EstimateEnergyRequest(device="orin-agx", layers=layers,
                                                                            batch_size=4))
    except grpc.RpcError as exc:  # the layer-wise package is optional
        assert exc.code() == grpc.StatusCode.UNIMPLEMENTED and "layerwise" in exc.details()
        return
    assert resp.energy_j > 0 and resp.HasField("energy_std_j")
    assert [lay.layer.position for lay in resp.layers] == ["input", "hidden", "output"]
    assert resp.energy_j == pytest.approx(sum(lay.energy_j for lay in resp.layers))


# --- errors ----------------------------------------------------------------------------------------
def test_bad_inputs_name_the_field(estimator, fitted, reference_rows):
    ref, _ = fitted
    rows = _measurements(reference_rows[:40])
    nan = list(rows)
    nan[3] = common_pb2.Measurement(mode=rows[3].mode, batch_size=16, time_ms=float("nan"), power_w=10.0)
    xavier_mode = common_pb2.PowerMode(cores=4, cpu_mhz=1190.4, gpu_mhz=1377.0, emc_mhz=2133.0)
    wrong = list(rows)
    wrong[5] = common_pb2.Measurement(mode=xavier_mode, batch_size=16, time_ms=100.0, power_w=10.0)
    fit = estimator_pb2.FitRequest
    cases = [
        (lambda: estimator.Fit(fit(device="orin-agx", workload="w", measurements=rows[:6])),
         grpc.StatusCode.INVALID_ARGUMENT, "measurements", "at least 11"),
        (lambda: estimator.Fit(fit(device="orin-agx", workload="w", measurements=nan)),
         grpc.StatusCode.INVALID_ARGUMENT, "measurements[3].time_ms", "nan"),
        (lambda: estimator.Fit(fit(device="orin-agx", workload="w", measurements=wrong)),
         grpc.StatusCode.INVALID_ARGUMENT, "measurements[5].mode.", "orin-agx"),
        (lambda: estimator.Fit(fit(device="orin-agx", workload="w", kind="magic", measurements=rows)),
         grpc.StatusCode.INVALID_ARGUMENT, "kind", "unknown"),
        (lambda: estimator.Fit(fit(device="orin-agx", workload="w", measurements=rows, params={"wings": "2"})),
         grpc.StatusCode.INVALID_ARGUMENT, "params.wings", "not a parameter"),
        (lambda: estimator.Fit(fit(device="toaster", workload="w", measurements=rows)),
         grpc.StatusCode.INVALID_ARGUMENT, "device", "toaster"),
        (lambda: estimator.Fit(fit(device="orin-agx", workload="never-profiled")),
         grpc.StatusCode.INVALID_ARGUMENT, "measurements", "store has 0"),
        (lambda: estimator.Fit(fit(device="orin-agx", workload="w", measurements=rows, validation_fraction=0.9)),
         grpc.StatusCode.INVALID_ARGUMENT, "validation_fraction", ""),
        (lambda: estimator.Transfer(estimator_pb2.TransferRequest(base_model_id="no/such/model")),
         grpc.StatusCode.NOT_FOUND, "base_model_id", "no/such/model"),
        (lambda: estimator.Transfer(estimator_pb2.TransferRequest(base_model_id=ref.model_id, workload="w",
                                                                  measurements=rows[:3])),
         grpc.StatusCode.INVALID_ARGUMENT, "measurements", "at least 5"),
        (lambda: estimator.Transfer(estimator_pb2.TransferRequest(base_model_id=ref.model_id, workload="w",
                                                                  measurements=rows, params={"method": "nope"})),
         grpc.StatusCode.INVALID_ARGUMENT, "params.method", "unknown"),
        (lambda: estimator.Predict(estimator_pb2.PredictRequest(model_id="missing/model")),
         grpc.StatusCode.NOT_FOUND, "model_id", "missing/model"),
        (lambda: estimator.Predict(estimator_pb2.PredictRequest(model_id=ref.model_id.split("@")[0] + "@99")),
         grpc.StatusCode.NOT_FOUND, "model_id", "version 99"),
        (lambda: estimator.Predict(estimator_pb2.PredictRequest(model_id=ref.model_id, grid=42)),
         grpc.StatusCode.INVALID_ARGUMENT, "grid", "full, powertrain, fulcrum"),
        (lambda: estimator.Predict(estimator_pb2.PredictRequest(model_id=ref.model_id, modes=[xavier_mode])),
         grpc.StatusCode.INVALID_ARGUMENT, "modes[0].", "orin-agx"),
        (lambda: estimator.Predict(estimator_pb2.PredictRequest(model_id=ref.model_id, device="xavier-agx")),
         grpc.StatusCode.INVALID_ARGUMENT, "device", "transfer"),
        (lambda: estimator.Predict(estimator_pb2.PredictRequest(model_id=ref.model_id, batch_sizes=[32])),
         grpc.StatusCode.INVALID_ARGUMENT, "batch_sizes[0]", "16"),
        (lambda: estimator.Predict(estimator_pb2.PredictRequest(model_id=ref.model_id, chunk_size=-1)),
         grpc.StatusCode.INVALID_ARGUMENT, "chunk_size", ""),
        (lambda: estimator.Predict(estimator_pb2.PredictRequest(model_id=ref.model_id, chunk_size=32_769)),
         grpc.StatusCode.INVALID_ARGUMENT, "chunk_size", "32768"),
        (lambda: estimator.EstimateBatchEfficiency(estimator_pb2.EstimateBatchEfficiencyRequest(
            observed=[common_pb2.BatchEfficiency(batch_size=0, passes_to_target=3)])),
         grpc.StatusCode.INVALID_ARGUMENT, "observed[0].batch_size", ""),
        (lambda: estimator.EstimateBatchEfficiency(estimator_pb2.EstimateBatchEfficiencyRequest(
            batch_sizes=[8], target_accuracy=1.5)),
         grpc.StatusCode.INVALID_ARGUMENT, "target_accuracy", ""),
        (lambda: estimator.EstimateEnergy(estimator_pb2.EstimateEnergyRequest(workload="nope")),
         None, "workload", ""),
        (lambda: estimator.EstimateEnergy(estimator_pb2.EstimateEnergyRequest(layers=[estimator_pb2.Layer(
            type="warp", in_channels=3, input_height=8, input_width=8)])),
         None, "layers[0].type", "warp"),
    ]
    for call, code, field, text in cases:
        got, details = _code(call)
        if code is None:  # energy: INVALID_ARGUMENT, or UNIMPLEMENTED without the layer-wise package
            assert got in (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.UNIMPLEMENTED), details
            if got == grpc.StatusCode.UNIMPLEMENTED:
                continue
        else:
            assert got == code, (field, details)
        assert details.startswith(field), (field, details)
        assert text.lower() in details.lower(), (text, details)


# --- health, reflection ------------------------------------------------------------------------------
def test_health_and_reflection(served):
    _, channel = served
    health = health_pb2_grpc.HealthStub(channel)
    for name in ("", "edgetune.v1.Estimator"):
        assert health.Check(health_pb2.HealthCheckRequest(service=name)).status == health_pb2.HealthCheckResponse.SERVING
    refl = reflection_pb2_grpc.ServerReflectionStub(channel)
    (resp,) = list(refl.ServerReflectionInfo(iter([reflection_pb2.ServerReflectionRequest(list_services="")])))
    names = {s.name for s in resp.list_services_response.service}
    assert {"edgetune.v1.Estimator", "grpc.health.v1.Health"} <= names


def test_serve_cli_knows_the_estimator():
    from edgetune.cli.serve import SERVICES

    assert SERVICES["estimator"] == "edgetune.services.estimator.server"
    from edgetune.services.estimator.server import parse_args

    args = parse_args(["--port", "0", "--no-ray", "--ray-address", "ray://head:10001"])
    assert args.no_ray is True and args.ray_address == "ray://head:10001" and args.port == 0
