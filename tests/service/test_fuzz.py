"""Property-based requests to every RPC of every service, generated from the proto descriptors.

Each of the four services runs in process on loopback (the coordinator, estimator and optimizer
over one embedded Redis, the agent on a simulated Orin). Hypothesis builds requests field by
field from each method's input descriptor: edge numbers (0, -1, 2^31 - 1, NaN, inf, 1e9), empty,
odd and oversized strings, real names (devices, workloads, nodes) so that some requests get
past the first check, repeated fields and maps, nested messages, unknown enum values. Asserted:
only OK / INVALID_ARGUMENT / NOT_FOUND / FAILED_PRECONDITION / PERMISSION_DENIED /
UNAUTHENTICATED / RESOURCE_EXHAUSTED come back (never UNKNOWN or INTERNAL: a traceback), every
call returns within its deadline, and every server still answers its health check afterwards.

Bounded for CI: derandomized (a fixed sequence of examples), a fixed number of examples per
RPC, each call under a short deadline; the whole file takes well under a minute.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from typing import Any

import grpc
import harness
import pytest
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from grpc_health.v1 import health_pb2, health_pb2_grpc
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from edgetune.proto.v1 import (
    coordinator_pb2,
    coordinator_pb2_grpc,
    estimator_pb2,
    estimator_pb2_grpc,
    optimizer_pb2,
    optimizer_pb2_grpc,
    profiler_pb2,
    profiler_pb2_grpc,
)
from edgetune.store import EmbeddedStore

ALLOWED = {grpc.StatusCode.OK, grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.NOT_FOUND,
           grpc.StatusCode.FAILED_PRECONDITION, grpc.StatusCode.PERMISSION_DENIED,
           grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.RESOURCE_EXHAUSTED}
#: Per call; a call must come back by then (plus scheduling slack on 2 shared cores).
DEADLINE_S = 4.0
SLACK_S = 2.0
#: RPCs whose valid requests train or fit for longer than any short deadline (the empty
#: EstimateBatchEfficiency trains two networks): DEADLINE_EXCEEDED at the deadline is their right
#: answer, provided the work then stops (asserted: the server's heavy slots are free again).
TRAINING = {"EstimateBatchEfficiency", "Fit", "Transfer", "EstimateEnergy"}
#: ... under a shorter deadline, so that the suite does not wait on training it means to stop.
TRAINING_DEADLINE_S = 1.5
#: A stream is read for at most this long (watches never end by themselves), then cancelled.
STREAM_READ_S = 0.5
EXAMPLES = 10

WORDS = ["", "orin-agx", "xavier-agx", "sim", "resnet18", "mobilenet_v2", "n0", "n1", "nn", "linear",
         "orin-agx/resnet18/train/nn", "a/b@1", "conv", "fc", "lr", "transfer_lr", "epochs", "banana", "nan",
         "-1", "1e9", " x ", "é\u0000", "../../etc/passwd"]
INTS = [0, 1, -1, 2, 16, 64, 12, 2**31 - 1, -(2**31), 65_537]
FLOATS = [0.0, 1.0, -1.0, 30.0, 2201.6, 1300.5, 3199.0, 1e9, float("nan"), float("inf"), -float("inf"), 1e-300]

_T = FieldDescriptor


def _scalar(fd: FieldDescriptor) -> st.SearchStrategy[Any]:
    if fd.type == _T.TYPE_STRING:
        return st.one_of(st.sampled_from(WORDS), st.text(max_size=12),
                         st.integers(129, 9000).map(lambda n: "x" * n))
    if fd.type == _T.TYPE_BYTES:
        return st.binary(max_size=16)
    if fd.type == _T.TYPE_BOOL:
        return st.booleans()
    if fd.type in (_T.TYPE_DOUBLE, _T.TYPE_FLOAT):
        return st.one_of(st.sampled_from(FLOATS), st.floats(-1e6, 1e6, allow_nan=False))
    if fd.type == _T.TYPE_ENUM:
        values = [v.number for v in fd.enum_type.values]
        return st.sampled_from([*values, 99])
    unsigned = fd.type in (_T.TYPE_UINT32, _T.TYPE_UINT64, _T.TYPE_FIXED32, _T.TYPE_FIXED64)
    bits = 64 if fd.type in (_T.TYPE_INT64, _T.TYPE_UINT64, _T.TYPE_SINT64, _T.TYPE_FIXED64,
                             _T.TYPE_SFIXED64) else 32
    lo, hi = (0, 2**bits - 1) if unsigned else (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1)
    return st.one_of(st.sampled_from([v for v in INTS if lo <= v <= hi]), st.integers(lo, hi))


def _is_map(fd: FieldDescriptor) -> bool:
    return fd.type == _T.TYPE_MESSAGE and fd.message_type.GetOptions().map_entry


def _field(fd: FieldDescriptor, depth: int) -> st.SearchStrategy[Any]:
    if _is_map(fd):
        key_fd, value_fd = fd.message_type.fields_by_name["key"], fd.message_type.fields_by_name["value"]
        value = message(value_fd.message_type, depth + 1) if value_fd.type == _T.TYPE_MESSAGE else _scalar(value_fd)
        return st.dictionaries(_scalar(key_fd), value, max_size=3)
    one = message(fd.message_type, depth + 1) if fd.type == _T.TYPE_MESSAGE else _scalar(fd)
    if fd.is_repeated:
        return st.lists(one, max_size=4)
    return one


def _build(descriptor: Descriptor, values: dict[str, Any]) -> Any:
    from google.protobuf import message_factory

    msg = message_factory.GetMessageClass(descriptor)()
    for name, value in values.items():
        fd = descriptor.fields_by_name[name]
        target = getattr(msg, name) if (fd.is_repeated or fd.type == _T.TYPE_MESSAGE) else None
        if _is_map(fd):
            for k, v in value.items():
                if fd.message_type.fields_by_name["value"].type == _T.TYPE_MESSAGE:
                    target[k].CopyFrom(v)
                else:
                    target[k] = v
        elif fd.is_repeated:
            target.extend(value)
        elif fd.type == _T.TYPE_MESSAGE:
            target.CopyFrom(value)
        else:
            setattr(msg, name, value)
    return msg


def message(descriptor: Descriptor, depth: int = 0) -> st.SearchStrategy[Any]:
    """A message of ``descriptor`` with any subset of its fields set (nesting stops at depth 3)."""
    if depth > 3:
        return st.just(_build(descriptor, {}))
    fields = {fd.name: _field(fd, depth) for fd in descriptor.fields}
    return st.fixed_dictionaries({}, optional=fields).map(lambda values: _build(descriptor, values))


# --- the services ------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def services(tmp_path_factory) -> Iterator[dict[str, tuple[Any, Any, grpc.Channel]]]:
    # What a process imports and loads once (torch's optimizers, scikit-learn, the proxy digits) is
    # loaded here, so that the suite measures how training stops when its caller leaves, not a cold import.
    import sklearn.gaussian_process  # noqa: F401
    import torch

    from edgetune.estimation.proxy import load_proxy_data
    from edgetune.services.estimator.server import create_server as estimator_server
    from edgetune.services.optimizer.server import create_server as optimizer_server
    from edgetune.services.profiler.server import create_server as profiler_server

    torch.optim.Adam([torch.zeros(1, requires_grad=True)])
    load_proxy_data("digits", 8)

    with contextlib.ExitStack() as running:
        store = running.enter_context(EmbeddedStore())
        coordinator = running.enter_context(harness.coordinator(store, host="127.0.0.1", replica_id="fuzz"))
        local = {"port": 0, "host": "127.0.0.1", "grace_s": 0.5}
        estimator, _ = running.enter_context(harness.serving(estimator_server(store=store, use_ray=False, **local)))
        optimizer, _ = running.enter_context(harness.serving(optimizer_server(store=store, **local)))
        profiler, _ = running.enter_context(harness.serving(profiler_server(
            "sim:orin-agx", redis_url="none", state_dir=tmp_path_factory.mktemp("agent"), telemetry_hz=0, **local)))
        servers = {"Coordinator": (coordinator.server, coordinator_pb2, coordinator_pb2_grpc),
                   "Estimator": (estimator, estimator_pb2, estimator_pb2_grpc),
                   "Optimizer": (optimizer, optimizer_pb2, optimizer_pb2_grpc),
                   "Profiler": (profiler, profiler_pb2, profiler_pb2_grpc)}
        out = {}
        for name, (server, pb2, pb2_grpc) in servers.items():
            channel = running.enter_context(grpc.insecure_channel(server.address))
            out[name] = (getattr(pb2_grpc, f"{name}Stub")(channel), pb2.DESCRIPTOR.services_by_name[name], channel)
        # A node the coordinator knows, so that requests naming it get past NOT_FOUND.
        out["Coordinator"][0].RegisterNode(coordinator_pb2.RegisterNodeRequest(
            node=coordinator_pb2.NodeInfo(node_id="n0", device={"name": "orin-agx"})), timeout=5)
        out["servers"] = {name: server for name, (server, *_rest) in servers.items()}
        yield out


def _methods() -> list[tuple[str, str]]:
    modules = (("Coordinator", coordinator_pb2), ("Estimator", estimator_pb2), ("Optimizer", optimizer_pb2),
               ("Profiler", profiler_pb2))
    return [(svc, m.name) for svc, pb2 in modules for m in pb2.DESCRIPTOR.services_by_name[svc].methods]


def _deadline_s(name: str) -> float:
    return TRAINING_DEADLINE_S if name in TRAINING else DEADLINE_S


def _call(stub: Any, method: Any, request: Any) -> tuple[grpc.StatusCode, str, float]:
    """(code, details, seconds) of one call; a stream is read for at most STREAM_READ_S, then cancelled."""
    rpc = getattr(stub, method.name)
    t0 = time.monotonic()
    if not method.server_streaming:
        try:
            rpc(request, timeout=_deadline_s(method.name))
            return grpc.StatusCode.OK, "", time.monotonic() - t0
        except grpc.RpcError as exc:
            return exc.code(), exc.details() or "", time.monotonic() - t0
    call = rpc(request, timeout=_deadline_s(method.name))
    cancelled = threading.Event()

    def cancel() -> None:
        cancelled.set()
        call.cancel()

    timer = threading.Timer(STREAM_READ_S, cancel)
    timer.start()
    try:
        for _ in call:
            pass
        return grpc.StatusCode.OK, "", time.monotonic() - t0
    except grpc.RpcError as exc:
        code = exc.code()
        if code == grpc.StatusCode.CANCELLED and cancelled.is_set():
            code = grpc.StatusCode.OK  # still streaming when we stopped reading: a live watch
        return code, exc.details() or "", time.monotonic() - t0
    finally:
        timer.cancel()


@pytest.mark.parametrize("service,rpc", _methods())
def test_every_rpc_answers_with_an_expected_code_in_time(services, service, rpc):
    stub, desc, channel, servers = *services[service], services["servers"]
    method = desc.methods_by_name[rpc]

    @settings(max_examples=EXAMPLES, derandomize=True, database=None, deadline=None,
              suppress_health_check=list(HealthCheck))
    @given(message(method.input_type))
    def check(request):
        code, details, took_s = _call(stub, method, request)
        allowed = ALLOWED | ({grpc.StatusCode.DEADLINE_EXCEEDED} if rpc in TRAINING else set())
        assert code in allowed, f"{service}.{rpc}({request}) -> {code}: {details[:500]}"
        assert took_s < _deadline_s(rpc) + SLACK_S, f"{service}.{rpc} took {took_s:.1f} s"
        assert len(details) <= 2048  # no message echoes an oversized value

    check()
    health = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=5)
    assert health.status == health_pb2.HealthCheckResponse.SERVING
    # Whatever ran past its caller stopped: no heavy call is still holding the server.
    limits = servers[service].limits
    deadline = time.monotonic() + 20
    while limits.in_flight and time.monotonic() < deadline:
        time.sleep(0.05)
    assert limits.in_flight == 0, f"{service}: {limits.in_flight} heavy calls still running after their callers left"
