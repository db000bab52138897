"""The shared service bootstrap on a real server (127.0.0.1, OS-picked ports): health,
reflection, metrics, error mapping, graceful shutdown; plus config, logs and paging."""

from __future__ import annotations

import argparse
import io
import json
import logging
import os
import signal
import threading
import time
import urllib.request

import grpc
import pytest
from google.protobuf import descriptor_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2
from prometheus_client.parser import text_string_to_metric_families

from edgetune.errors import InvalidArgument, NotFound
from edgetune.proto.v1 import common_pb2, profiler_pb2, profiler_pb2_grpc
from edgetune.services.common import config, logs, paging
from edgetune.services.common.errors import map_errors
from edgetune.services.common.server import build_server
from edgetune.services.common.stores import OwnedStore
from edgetune.store import open_store

PROFILER = "edgetune.v1.Profiler"


class TrivialProfiler(profiler_pb2_grpc.ProfilerServicer):
    """Answers GetDevice; fails the others in the ways the error mapper must handle."""

    def __init__(self) -> None:
        self.release = threading.Event()

    def GetDevice(self, request, context):
        return profiler_pb2.GetDeviceResponse(spec=common_pb2.DeviceSpec(name="orin-agx"), backend="sim")

    @map_errors
    def ApplyPowerMode(self, request, context):
        raise InvalidArgument("mode.gpu_mhz", "700 is not a orin-agx gpu_mhz value", "13 values: 114.75 …")

    def RestorePowerMode(self, request, context):  # no decorator: the interceptor maps it
        raise NotFound("no mode to restore: nothing was applied")

    @map_errors
    def StreamPower(self, request, context):
        for i in range(request.max_samples):
            yield profiler_pb2.PowerSample(t_s=float(i), power_w=10.0 + i)
        raise InvalidArgument("max_samples", "too many", "<= 3")

    def ListPowerModes(self, request, context):  # a slow RPC, to be in flight during shutdown
        self.release.wait(5)
        return profiler_pb2.ListPowerModesResponse(total_size=7)


@pytest.fixture
def served():
    servicer = TrivialProfiler()
    server = build_server("test", [(servicer, profiler_pb2_grpc.add_ProfilerServicer_to_server)],
                          host="127.0.0.1", port=0, metrics_port=0, max_workers=4, grace_s=2.0)
    server.start()
    channel = grpc.insecure_channel(server.address)
    yield server, channel, servicer
    servicer.release.set()
    channel.close()
    server.stop(0)


def test_ports_are_picked_by_the_os(served):
    server, _, _ = served
    assert server.port > 0 and server.metrics_port and server.metrics_port != server.port
    assert server.service_names == [PROFILER]


def test_health_is_serving_per_service_and_overall(served):
    _, channel, _ = served
    stub = health_pb2_grpc.HealthStub(channel)
    for name in ("", PROFILER):
        reply = stub.Check(health_pb2.HealthCheckRequest(service=name), timeout=5)
        assert reply.status == health_pb2.HealthCheckResponse.SERVING
    with pytest.raises(grpc.RpcError) as err:
        stub.Check(health_pb2.HealthCheckRequest(service="edgetune.v1.Nope"), timeout=5)
    assert err.value.code() == grpc.StatusCode.NOT_FOUND


def _reflect(channel, request, version: str = "v1alpha"):
    """One reflection exchange; ``v1`` goes to grpc.reflection.v1 (grpcurl's and current clients' name),
    whose messages are v1alpha's on the wire."""
    call = channel.stream_stream(f"/grpc.reflection.{version}.ServerReflection/ServerReflectionInfo",
                                 request_serializer=reflection_pb2.ServerReflectionRequest.SerializeToString,
                                 response_deserializer=reflection_pb2.ServerReflectionResponse.FromString)
    return next(iter(call(iter([request]), timeout=5)))


@pytest.mark.parametrize("version", ["v1", "v1alpha"])
def test_reflection_lists_the_services_and_serves_their_files(served, version):
    _, channel, _ = served
    reply = _reflect(channel, reflection_pb2.ServerReflectionRequest(list_services=""), version)
    names = {s.name for s in reply.list_services_response.service}
    assert names == {PROFILER, "grpc.health.v1.Health", "grpc.reflection.v1.ServerReflection",
                     "grpc.reflection.v1alpha.ServerReflection"}
    for symbol, file in ((PROFILER, "edgetune/v1/profiler.proto"),
                         ("grpc.reflection.v1.ServerReflection", "grpc/reflection/v1/reflection.proto")):
        reply = _reflect(channel, reflection_pb2.ServerReflectionRequest(file_containing_symbol=symbol), version)
        files = [descriptor_pb2.FileDescriptorProto.FromString(b) for b in
                 reply.file_descriptor_response.file_descriptor_proto]
        assert file in {f.name for f in files}, reply
    v1 = next(f for f in files if f.name == "grpc/reflection/v1/reflection.proto")
    assert v1.package == "grpc.reflection.v1" and v1.service[0].method[0].input_type.startswith(".grpc.reflection.v1.")


def _handled(server, method: str, code: str) -> float:
    url = f"http://127.0.0.1:{server.metrics_port}/metrics"
    text = urllib.request.urlopen(url, timeout=5).read().decode()
    for family in text_string_to_metric_families(text):
        if family.name == "grpc_server_handled":
            for sample in family.samples:
                if (sample.name == "grpc_server_handled_total" and sample.labels["grpc_service"] == PROFILER
                        and sample.labels["grpc_method"] == method and sample.labels["grpc_code"] == code):
                    return sample.value
    return 0.0


def test_metrics_count_rpcs_by_method_and_code(served):
    server, channel, _ = served
    stub = profiler_pb2_grpc.ProfilerStub(channel)
    before_ok = _handled(server, "GetDevice", "OK")
    before_bad = _handled(server, "ApplyPowerMode", "INVALID_ARGUMENT")
    assert stub.GetDevice(profiler_pb2.GetDeviceRequest(), timeout=5).spec.name == "orin-agx"
    with pytest.raises(grpc.RpcError):
        stub.ApplyPowerMode(profiler_pb2.ApplyPowerModeRequest(), timeout=5)
    assert _handled(server, "GetDevice", "OK") == before_ok + 1
    assert _handled(server, "ApplyPowerMode", "INVALID_ARGUMENT") == before_bad + 1
    text = urllib.request.urlopen(f"http://127.0.0.1:{server.metrics_port}/metrics", timeout=5).read().decode()
    assert 'grpc_server_handling_seconds_count{grpc_method="GetDevice"' in text


def test_error_mapper_names_the_field(served):
    _, channel, _ = served
    stub = profiler_pb2_grpc.ProfilerStub(channel)
    with pytest.raises(grpc.RpcError) as err:
        stub.ApplyPowerMode(profiler_pb2.ApplyPowerModeRequest(), timeout=5)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert err.value.details().startswith("mode.gpu_mhz: 700 is not")
    assert "allowed: 13 values" in err.value.details()


def test_interceptor_maps_errors_of_undecorated_methods(served):
    _, channel, _ = served
    with pytest.raises(grpc.RpcError) as err:
        profiler_pb2_grpc.ProfilerStub(channel).RestorePowerMode(profiler_pb2.RestorePowerModeRequest(), timeout=5)
    assert err.value.code() == grpc.StatusCode.NOT_FOUND
    assert err.value.details() == "no mode to restore: nothing was applied"


def test_streaming_error_arrives_after_the_messages(served):
    server, channel, _ = served
    stream = profiler_pb2_grpc.ProfilerStub(channel).StreamPower(
        profiler_pb2.StreamPowerRequest(max_samples=3), timeout=5)
    got = []
    with pytest.raises(grpc.RpcError) as err:
        for sample in stream:
            got.append(sample.power_w)
    assert got == [10.0, 11.0, 12.0]
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "max_samples" in err.value.details()


def test_graceful_stop_finishes_in_flight_rpcs_then_runs_hooks(served):
    server, channel, servicer = served
    calls = []
    server.on_shutdown.append(lambda: calls.append("restore power mode"))
    server.on_shutdown.append(lambda: 1 / 0)  # a failing hook does not stop the others
    server.on_shutdown.append(lambda: calls.append("close store"))
    future = profiler_pb2_grpc.ProfilerStub(channel).ListPowerModes.future(
        profiler_pb2.ListPowerModesRequest(), timeout=10)
    time.sleep(0.2)  # let it reach the servicer
    stopper = threading.Thread(target=server.stop)
    stopper.start()
    time.sleep(0.2)
    health = health_pb2_grpc.HealthStub(channel)
    assert not calls, "hooks ran before in-flight RPCs finished"
    servicer.release.set()
    assert future.result().total_size == 7
    stopper.join(5)
    assert server.wait(5)
    assert calls == ["close store", "restore power mode"]
    with pytest.raises(grpc.RpcError):  # no longer accepting
        health.Check(health_pb2.HealthCheckRequest(), timeout=1)


def _server_with_a_shutdown_hook(name: str):
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("signal handlers can only be installed from the main thread")  # else SIGTERM kills pytest
    server = build_server(name, [(TrivialProfiler(), profiler_pb2_grpc.add_ProfilerServicer_to_server)],
                          host="127.0.0.1", port=0, grace_s=1.0)
    hook = threading.Event()
    server.on_shutdown.append(hook.set)
    return server, hook


def test_sigterm_stops_gracefully_and_calls_the_hook():
    previous = signal.getsignal(signal.SIGTERM)
    server, hook = _server_with_a_shutdown_hook("sig")
    server.start()
    server.install_signal_handlers()
    try:
        os.kill(os.getpid(), signal.SIGTERM)
        assert server.wait(10), "server did not stop on SIGTERM"
        assert hook.is_set()
    finally:
        server.restore_signal_handlers()
        server.stop(0)
    assert signal.getsignal(signal.SIGTERM) is previous


def test_serve_handles_a_sigterm_that_arrives_while_starting():
    previous = signal.getsignal(signal.SIGTERM)
    server, hook = _server_with_a_shutdown_hook("sig-early")
    start = server.start

    def start_then_signal():  # the signal lands as start-up finishes, before serve() waits
        start()
        os.kill(os.getpid(), signal.SIGTERM)
        return server

    server.start = start_then_signal
    done = threading.Event()
    threading.Timer(10, lambda: done.is_set() or server.stop(0)).start()  # never hang the suite
    server.serve()  # returns after the graceful stop; with the default action the process would die
    done.set()
    assert hook.is_set()
    server.install_signal_handlers()  # installing twice keeps the original handler to restore
    server.install_signal_handlers()
    server.restore_signal_handlers()
    assert signal.getsignal(signal.SIGTERM) is previous


# --- config, logs, paging -------------------------------------------------------------------


def test_flag_beats_env_beats_default():
    env = {"EDGETUNE_PORT": "6000", "EDGETUNE_METRICS_PORT": "0", "EDGETUNE_VERBOSE": "yes"}
    parser = argparse.ArgumentParser()
    config.add_server_options(parser, default_port=50051, environ=env)
    config.add_option(parser, "verbose", False, "chatty", environ=env)
    config.add_option(parser, "redis", "redis://localhost:6379/0", "Redis URL", environ=env)
    args = parser.parse_args([])
    assert (args.port, args.metrics_port, args.verbose, args.redis) == (6000, 0, True, "redis://localhost:6379/0")
    assert config.server_kwargs(args)["metrics_port"] is None  # 0 on the flag: no endpoint
    args = parser.parse_args(["--port", "7000", "--verbose", "false", "--grace-s", "2.5"])
    assert (args.port, args.verbose, args.grace_s) == (7000, False, 2.5)
    assert config.setting("port", 1, environ={}) == 1


def test_bad_env_value_names_the_variable():
    with pytest.raises(InvalidArgument, match="^EDGETUNE_PORT: 'abc' is not a valid int"):
        config.setting("port", 50051, environ={"EDGETUNE_PORT": "abc"})


def test_logs_are_json_lines_with_extra_fields():
    stream = io.StringIO()
    log = logs.setup_logging("profiler", "DEBUG", stream=stream)
    try:
        log.info("applied %s", "mode", extra={"mode": "8c/1344/727/2133", "node_id": "n1"})
    finally:
        for h in list(logging.getLogger().handlers):
            if getattr(h, "_edgetune_json", False):
                logging.getLogger().removeHandler(h)
    record = json.loads(stream.getvalue().strip().splitlines()[-1])
    assert record["msg"] == "applied mode" and record["level"] == "info" and record["service"] == "profiler"
    assert record["mode"] == "8c/1344/727/2133" and record["node_id"] == "n1" and record["ts"].endswith("+00:00")


def test_paging_walks_the_list_and_refuses_forged_tokens():
    items = list(range(2500))
    seen, token = [], ""
    while True:
        page, token = paging.paginate(items, 1000, token)
        seen.extend(page)
        if not token:
            break
    assert seen == items
    with pytest.raises(InvalidArgument, match="^page_token"):
        paging.paginate(items, 10, "not-a-token")
    with pytest.raises(InvalidArgument, match="^page_size"):
        paging.paginate(items, -1, "")


def _is_up(store) -> bool:
    try:
        return store.ping()
    except Exception:  # a closed embedded store's server is gone
        return False


def test_owned_store_closes_what_it_opened_on_failure_or_at_shutdown():
    owner = OwnedStore(None, "embedded")
    with pytest.raises(RuntimeError):
        with owner as store:
            assert _is_up(store)
            raise RuntimeError("server build failed")
    assert not _is_up(owner.opened)

    owner = OwnedStore(None, "embedded")
    with owner:
        server = build_server("trivial", port=0, host="127.0.0.1")
    owner.close_with(server)
    assert _is_up(owner.store)
    server.start()
    server.stop(0)
    assert not _is_up(owner.opened)


def test_owned_store_leaves_the_callers_store_open_and_none_means_none():
    with open_store("embedded") as callers:
        owner = OwnedStore(callers, "redis://ignored:1/0")
        with pytest.raises(RuntimeError), owner:
            raise RuntimeError("server build failed")
        server = build_server("trivial", port=0, host="127.0.0.1")
        owner.close_with(server)
        server.start()
        server.stop(0)
        assert owner.opened is None and _is_up(callers)
    assert OwnedStore(None, " None ", optional=True).store is None
    with pytest.raises(InvalidArgument, match="redis"):
        OwnedStore(None, "none")  # only where the service can run without a store


def test_ready_file_holds_the_port_once_serving(tmp_path):
    path = tmp_path / "ready.json"
    server = build_server("trivial", port=0, host="127.0.0.1", ready_file=str(path))
    assert not path.exists()  # written once serving, not before
    server.start()
    try:
        record = json.loads(path.read_text())
        assert record["port"] == server.port and record["service"] == "trivial" and record["address"] == server.address
    finally:
        server.stop(0)


def test_a_busy_metrics_port_names_the_port_and_the_flag():
    first = build_server("first", port=0, host="127.0.0.1", metrics_port=0).start()
    try:
        second = build_server("second", port=0, host="127.0.0.1", metrics_port=first.metrics_port)
        with pytest.raises(OSError) as info:
            second.start()
        assert str(first.metrics_port) in str(info.value) and "--metrics-port" in str(info.value)
        second.stop(0)
    finally:
        first.stop(0)
