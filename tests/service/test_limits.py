"""Limits on every request, over gRPC: each input the attacks used is refused at the edge with
INVALID_ARGUMENT naming the field (or FAILED_PRECONDITION / RESOURCE_EXHAUSTED), changes nothing,
and no message echoes an oversized value; a heavy call whose caller leaves stops; a server admits
at most its limit of heavy calls at once.
"""

from __future__ import annotations

import math
import time

import grpc
import harness
import pytest

from edgetune.devices.simulated.tables import truth_table
from edgetune.powermodes.grids import named_grid
from edgetune.powermodes.specs import get_spec
from edgetune.proto.v1 import (
    common_pb2,
    coordinator_pb2,
    coordinator_pb2_grpc,
    estimator_pb2,
    estimator_pb2_grpc,
    profiler_pb2,
    profiler_pb2_grpc,
    tuning_pb2,
)
from edgetune.store import EmbeddedStore

ORIN = get_spec("orin-agx")
BIG = 2**31 - 1
INVALID = grpc.StatusCode.INVALID_ARGUMENT


def _code(call, request, **kw) -> tuple[grpc.StatusCode, str]:
    try:
        result = call(request, timeout=kw.pop("timeout", 20), **kw)
        if hasattr(result, "__iter__") and not hasattr(result, "ListFields"):
            list(result)
        return grpc.StatusCode.OK, ""
    except grpc.RpcError as exc:
        return exc.code(), exc.details() or ""


@pytest.fixture(scope="module")
def store():
    s = EmbeddedStore()
    yield s
    s.close()


@pytest.fixture(scope="module")
def coordinator(store):
    with harness.coordinator(store, host="127.0.0.1", replica_id="limits") as c, \
            grpc.insecure_channel(c.server.address) as channel:
        yield coordinator_pb2_grpc.CoordinatorStub(channel)


@pytest.fixture(scope="module")
def estimator(store):
    from edgetune.services.estimator.server import create_server

    with harness.serving(create_server(port=0, host="127.0.0.1", store=store, grace_s=0.5, use_ray=False)) \
            as (server, _), grpc.insecure_channel(server.address) as channel:
        yield server, estimator_pb2_grpc.EstimatorStub(channel)


@pytest.fixture
def agent(tmp_path, monkeypatch):
    from edgetune.services.profiler.server import create_server

    monkeypatch.setenv("EDGETUNE_MAX_HEAVY_RPCS", "1")
    with harness.serving(create_server("sim:orin-agx", port=0, host="127.0.0.1", redis_url="none", grace_s=0.5,
                                       state_dir=tmp_path, telemetry_hz=0)) as (server, servicer), \
            grpc.insecure_channel(server.address) as channel:
        yield server, servicer, profiler_pb2_grpc.ProfilerStub(channel)


# --- coordinator ---------------------------------------------------------------------------------
def _register(stub, **node) -> tuple[grpc.StatusCode, str]:
    return _code(stub.RegisterNode, coordinator_pb2.RegisterNodeRequest(node=coordinator_pb2.NodeInfo(**node)))


def test_an_oversized_node_id_is_refused_without_echoing_it(coordinator):
    code, details = _register(coordinator, node_id="x" * (2 * 2**20), device=common_pb2.DeviceSpec(name="orin-agx"))
    assert code == INVALID and details.startswith("node.node_id:") and len(details) < 2048
    assert "x" * 100 not in details
    for bad in ("y" * 129, "a/b", "-lead", "sp ace", "é"):
        code, details = _register(coordinator, node_id=bad)
        assert code == INVALID and "node.node_id" in details, bad
    code, details = _register(coordinator, hostname="h" * 300)
    assert code == INVALID and "node.hostname" in details
    code, details = _register(coordinator, node_id="ok", labels={f"k{i}": "v" for i in range(100)})
    assert code == INVALID and "node.labels" in details
    names = [n.node_id for n in coordinator.ListNodes(coordinator_pb2.ListNodesRequest(), timeout=5).nodes]
    assert names == [] or all(len(n) <= 128 for n in names)
    assert "ok" not in names  # a refused registration stores nothing


def test_device_tables_with_nan_or_negative_values_are_refused(coordinator):
    good = dict(core_counts=[1, 2], cpu_mhz=[1000.0], gpu_mhz=[500.0], emc_mhz=[2000.0])
    for dim, values, field in (("cpu_mhz", [math.nan], "node.device.cpu_mhz[0]"),
                               ("gpu_mhz", [500.0, -1.0], "node.device.gpu_mhz[1]"),
                               ("emc_mhz", [math.inf], "node.device.emc_mhz[0]"),
                               ("core_counts", [0], "node.device.core_counts[0]")):
        code, details = _register(coordinator, node_id="tables", device=common_pb2.DeviceSpec(
            name="custom", **{**good, dim: values}))
        assert code == INVALID and details.startswith(field), (dim, details)
    names = [n.node_id for n in coordinator.ListNodes(coordinator_pb2.ListNodesRequest(), timeout=5).nodes]
    assert "tables" not in names


def test_a_node_without_tables_gets_no_unchecked_mode(coordinator):
    assert _register(coordinator, node_id="bare")[0] == grpc.StatusCode.OK
    wild = common_pb2.PredictionTable(cores=[13], cpu_mhz=[9999.0], gpu_mhz=[9999.0], emc_mhz=[9999.0],
                                      batch_size=[32], time_ms=[100.0], power_w=[10.0])
    code, details = _code(coordinator.PlanRound, coordinator_pb2.PlanRoundRequest(
        round_id="wild", apply=True, workload=common_pb2.Workload(name="resnet18"),
        nodes=[coordinator_pb2.NodeRound(node_id="bare", samples=320, options=wild)]))
    assert code == grpc.StatusCode.FAILED_PRECONDITION and "nodes[0].options" in details and "tables" in details
    code, details = _code(coordinator.GetNodeConfig, coordinator_pb2.GetNodeConfigRequest(node_id="bare"))
    assert code == grpc.StatusCode.NOT_FOUND and "no config" in details  # nothing was pushed


def test_submit_profiling_bounds_the_job_before_queueing_it(coordinator):
    assert _register(coordinator, node_id="agent-1", device=common_pb2.DeviceSpec(name="orin-agx"))[0] == grpc.StatusCode.OK
    base = dict(workload=common_pb2.Workload(name="resnet18"), random_modes=2)
    for extra, field in (({"sample_rate_hz": 1e9}, "request.sample_rate_hz"),
                         ({"batch_sizes": [BIG]}, "request.batch_sizes[0]"),
                         ({"n_minibatches": BIG}, "request.n_minibatches"),
                         ({"seed": -1}, "request.seed")):
        code, details = _code(coordinator.SubmitProfiling, tuning_pb2.SubmitProfilingRequest(
            node_id="agent-1", request=profiler_pb2.ProfileRequest(**base, **extra)))
        assert code == INVALID and details.startswith(field), (extra, details)


# --- profiler ------------------------------------------------------------------------------------
def test_profile_limits(agent):
    _, servicer, stub = agent
    base = dict(workload=common_pb2.Workload(name="resnet18"), random_modes=2)
    for extra, field in (({"batch_sizes": [BIG]}, "batch_sizes[0]"),
                         ({"workload": common_pb2.Workload(name="resnet18", batch_size=BIG)}, "workload.batch_size"),
                         ({"sample_rate_hz": 1e9}, "sample_rate_hz"),
                         ({"n_minibatches": BIG}, "n_minibatches"),
                         ({"warmup_minibatches": BIG}, "warmup_minibatches"),
                         ({"seed": -5}, "seed"),
                         ({"batch_sizes": list(range(1, 100))}, "batch_sizes")):
        code, details = _code(stub.Profile, profiler_pb2.ProfileRequest(**{**base, **extra}))
        assert code == INVALID and details.startswith(field), (extra, details)
    assert servicer.device.current_mode() == ORIN.maxn()


def test_heavy_calls_beyond_the_admission_limit_get_resource_exhausted(agent):
    server, _, stub = agent
    assert server.limits.max_heavy == 1  # EDGETUNE_MAX_HEAVY_RPCS
    long = profiler_pb2.ProfileRequest(workload=common_pb2.Workload(name="resnet18"), random_modes=400,
                                       batch_sizes=[8, 16, 32])
    first = stub.Profile(long, timeout=60)
    assert next(first).HasField("progress")
    code, details = _code(stub.Profile, long)
    assert code == grpc.StatusCode.RESOURCE_EXHAUSTED and "heavy calls" in details
    assert stub.GetDevice(profiler_pb2.GetDeviceRequest(), timeout=5).spec.name  # light calls still served
    first.cancel()
    deadline = time.monotonic() + 10
    while server.limits.in_flight and time.monotonic() < deadline:
        time.sleep(0.05)
    assert server.limits.in_flight == 0
    short = profiler_pb2.ProfileRequest(workload=common_pb2.Workload(name="resnet18"), random_modes=1)
    assert any(e.HasField("measurement") for e in stub.Profile(short, timeout=30))


# --- estimator -----------------------------------------------------------------------------------
def test_estimate_energy_bounds_layers(estimator):
    _, stub = estimator
    conv = estimator_pb2.Layer(type="conv", input_height=32, input_width=32, in_channels=3, out_channels=8)
    t0 = time.monotonic()
    code, details = _code(stub.EstimateEnergy, estimator_pb2.EstimateEnergyRequest(
        device="orin-agx", layers=[conv] + [estimator_pb2.Layer(type="relu")] * 100_000))
    assert code == INVALID and details.startswith("layers:") and time.monotonic() - t0 < 10
    code, details = _code(stub.EstimateEnergy, estimator_pb2.EstimateEnergyRequest(
        device="orin-agx", layers=[conv, estimator_pb2.Layer(type="fc", out_channels=BIG)]))
    assert code == INVALID and details.startswith("layers[1].out_channels"), details
    code, details = _code(stub.EstimateEnergy, estimator_pb2.EstimateEnergyRequest(
        device="orin-agx", layers=[conv], batch_size=BIG))
    assert code == INVALID and details.startswith("batch_size"), details


def _rows(n: int = 40) -> list[common_pb2.Measurement]:
    modes = named_grid(ORIN, "fulcrum").modes()
    table = truth_table(ORIN, "resnet18", "train", [modes[i] for i in range(0, len(modes), len(modes) // n)][:n], [16])
    return [common_pb2.Measurement(
        mode=common_pb2.PowerMode(cores=r["cores"], cpu_mhz=r["cpu_mhz"], gpu_mhz=r["gpu_mhz"], emc_mhz=r["emc_mhz"]),
        batch_size=r["batch_size"], time_ms=r["time_ms"], power_w=r["power_w"]) for r in table]


def test_fit_and_transfer_params_are_checked_and_nothing_is_stored(estimator):
    _, stub = estimator
    fit = dict(device="orin-agx", workload="resnet18", kind="nn", measurements=_rows())
    for extra, field in (({"seed": -1}, "seed"), ({"params": {"lr": "banana"}}, "params.lr"),
                         ({"params": {"lr": "nan"}}, "params.lr"), ({"params": {"lr": "-1"}}, "params.lr"),
                         ({"params": {"epochs": "1e9"}}, "params.epochs"), ({"epochs": BIG}, "epochs")):
        code, details = _code(stub.Fit, estimator_pb2.FitRequest(**fit, **extra))
        assert code == INVALID and details.startswith(field), (extra, details)
    assert list(stub.ListModels(estimator_pb2.ListModelsRequest(), timeout=10).models) == []
    base = stub.Fit(estimator_pb2.FitRequest(**fit, epochs=2), timeout=120).model.model_id
    n_models = len(stub.ListModels(estimator_pb2.ListModelsRequest(), timeout=10).models)
    for value in ("nan", "inf", "0", "banana"):
        code, details = _code(stub.Transfer, estimator_pb2.TransferRequest(
            base_model_id=base, device="orin-agx", workload="resnet18", measurements=_rows(20),
            params={"transfer_lr": value}))
        assert code == INVALID and details.startswith("params.transfer_lr"), (value, details)
    assert len(stub.ListModels(estimator_pb2.ListModelsRequest(), timeout=10).models) == n_models


def test_batch_efficiency_limits_and_a_deadline_stops_the_training(estimator):
    server, stub = estimator
    for extra, field in (({"seed": -1}, "seed"), ({"batch_sizes": [BIG]}, "batch_sizes[0]"),
                         ({"max_passes": BIG}, "max_passes"), ({"target_accuracy": 2.0}, "target_accuracy")):
        code, details = _code(stub.EstimateBatchEfficiency, estimator_pb2.EstimateBatchEfficiencyRequest(**extra))
        assert code == INVALID and details.startswith(field), (extra, details)
    # The default estimate trains two networks for tens of seconds: the deadline passes first, and the
    # training stops with it instead of holding the server's cores.
    code, _ = _code(stub.EstimateBatchEfficiency, estimator_pb2.EstimateBatchEfficiencyRequest(), timeout=1.5)
    assert code == grpc.StatusCode.DEADLINE_EXCEEDED
    deadline = time.monotonic() + 8
    while server.limits.in_flight and time.monotonic() < deadline:
        time.sleep(0.05)
    assert server.limits.in_flight == 0
