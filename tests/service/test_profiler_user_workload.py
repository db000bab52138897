"""A user's MODULE:FUNCTION workload on the profiler agent, through generated client stubs: imported by
name from the operator's ``--workload-path`` only, measured and recorded under its id; a name outside
the path, or a bad entry, is INVALID_ARGUMENT naming the workload."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest

from edgetune.powermodes.specs import get_spec
from edgetune.profiling.protocol import measurement_id
from edgetune.proto.serde.common import mode_from_proto
from edgetune.proto.serde.profiler import RUN_KEY_METADATA
from edgetune.proto.v1 import common_pb2, profiler_pb2, profiler_pb2_grpc
from edgetune.services.profiler.server import create_server
from edgetune.store import open_store

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "workloads"
ORIN = get_spec("orin-agx")


@pytest.fixture(scope="module")
def store():
    s = open_store("embedded")
    yield s
    s.close()


def _agent(store, tmp_path, workload_path):
    server, servicer = create_server("sim:orin-agx", port=0, host="127.0.0.1", state_dir=tmp_path,
                                     metrics_port=None, store=store, grace_s=1.0, max_workers=4, node_id="orin-9",
                                     workload_path=workload_path)
    server.start()
    return server, servicer


def _request(name: str, role=common_pb2.ROLE_TRAIN) -> profiler_pb2.ProfileRequest:
    return profiler_pb2.ProfileRequest(workload=common_pb2.Workload(name=name, role=role), random_modes=3,
                                       random_grid=common_pb2.GRID_FULCRUM, batch_sizes=[16, 64], n_minibatches=5)


def test_agent_profiles_a_user_workload_from_its_workload_path(store, tmp_path):
    server, servicer = _agent(store, tmp_path, str(FIXTURES))  # the flag's text form
    try:
        with grpc.insecure_channel(server.address) as channel:
            stub = profiler_pb2_grpc.ProfilerStub(channel)
            events = list(stub.Profile(_request("sensor_cnn:make"), metadata=((RUN_KEY_METADATA, "run-1"),),
                                       timeout=120))
            got = [e.measurement for e in events if e.WhichOneof("event") == "measurement"]
            assert len(got) == 6
            ids = {m.workload for m in got}
            assert len(ids) == 1 and ids.pop().startswith("sensor_cnn.make-")
            wl_id = got[0].workload
            # the ids are keyed by the name asked for (a coordinator, which never imports user
            # code, knows only that), the rows by the workload's id
            m = got[0]
            assert m.id == measurement_id("orin-agx", "orin-9", "sensor_cnn:make", "train", mode_from_proto(m.mode),
                                          m.batch_size, "run-1")
            stored = store.get_measurements("orin-agx", wl_id, "train", "orin-9")
            assert {r.id for r in stored} >= {x.id for x in got}
            by_bs = {b: [x.time_ms for x in got if x.batch_size == b] for b in (16, 64)}
            assert sum(by_bs[64]) > sum(by_bs[16])  # the simulator costs the model's layers
            assert wl_id in stub.GetDevice(profiler_pb2.GetDeviceRequest(), timeout=10).workloads
    finally:
        server.stop(0)


@pytest.mark.parametrize("workload_path,name,needles", [
    ([FIXTURES], "tests.fixtures.workloads.sensor_cnn:make", ["is not in this agent's workload path", str(FIXTURES)]),
    ([FIXTURES], "os:system", ["os:system: module 'os' is not in this agent's workload path"]),
    ([], "sensor_cnn:make", ["this agent loads no user workloads"]),
    ([FIXTURES], "sensor_cnn:bad_forward", ["sensor_cnn:bad_forward: the model's forward pass", "RuntimeError"]),
    ([FIXTURES], "sensor_cnn:bad_two_values", ["returned a 2-tuple, not (model, make_batch, loss_fn)"]),
    ([FIXTURES], "sensor_cnn:nothing_here", ["has no function 'nothing_here'"]),
    ([FIXTURES], "sensor_cnn:make_infer", ["loss_fn is None"]),
])
def test_refused_workloads_are_invalid_argument_naming_them(store, tmp_path, workload_path, name, needles):
    server, _ = _agent(store, tmp_path, workload_path)
    try:
        with grpc.insecure_channel(server.address) as channel:
            stub = profiler_pb2_grpc.ProfilerStub(channel)
            with pytest.raises(grpc.RpcError) as err:
                list(stub.Profile(_request(name), timeout=60))
            assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            details = err.value.details()
            assert details.startswith("workload.name: ") and name.split(":")[0] in details
            for needle in needles:
                assert needle in details, details
            # nothing ran: the device is where it was
            device = stub.GetDevice(profiler_pb2.GetDeviceRequest(), timeout=10)
            assert mode_from_proto(device.current_mode) == ORIN.maxn()
    finally:
        server.stop(0)
