"""The agent gives back the power mode it changed: on SIGTERM (files exactly as found), not on
SIGKILL (nothing can run: the record stays on disk), and on the next start after a SIGKILL
(the recorded mode comes back and the record is cleared). Against a copy of a fake Jetson
sysroot (``sysfs:<root>``), with the agent as a separate process; plus in-process checks
that a failure or a stop in the middle of a profile restores the mode (simulated device)."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import grpc
import pytest
from harness import free_port, wait_serving

from edgetune.devices.sysfs import SysfsJetson
from edgetune.devices.sysfs_layout import tree_differences
from edgetune.powermodes.specs import get_spec
from edgetune.proto.serde.common import mode_from_proto, mode_to_proto
from edgetune.proto.v1 import common_pb2, profiler_pb2, profiler_pb2_grpc
from edgetune.services.profiler.server import create_server

pytestmark = pytest.mark.integration

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "sysroots" / "orin-agx-jp5"
POLICY0 = "sys/devices/system/cpu/cpufreq/policy0"


@pytest.fixture
def sysroot(tmp_path):
    root = tmp_path / "root"
    shutil.copytree(FIXTURE, root)
    return root


class Agent:
    """The profiler agent as a process on ``sysfs:<root>``."""

    def __init__(self, root: Path, state_dir: Path) -> None:
        self.port = free_port()
        # Through the CLI (`edgetune serve profiler`); the service test runs the module directly.
        cmd = [sys.executable, "-m", "edgetune.cli", "serve", "profiler", "--device", f"sysfs:{root}",
               "--host", "127.0.0.1", "--port", str(self.port), "--metrics-port", "0", "--redis", "none",
               "--state-dir", str(state_dir), "--grace-s", "1"]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        self.channel = wait_serving(f"127.0.0.1:{self.port}", self.proc)
        self.stub = profiler_pb2_grpc.ProfilerStub(self.channel)

    def end(self, sig: int) -> int:
        self.channel.close()
        self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout=20)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
            self.log = self.proc.stderr.read().decode()
            self.proc.stderr.close()


def _target(root: Path):
    spec = SysfsJetson(root).spec
    return spec, type(spec.maxn())(4, spec.cpu_mhz[5], spec.gpu_mhz[2], spec.emc_mhz[1])


def _record(state_dir: Path) -> Path | None:
    found = list(state_dir.glob("profiler-mode-*.json"))
    return found[0] if found else None


def test_sigterm_puts_every_file_back(sysroot, tmp_path):
    spec, target = _target(sysroot)
    agent = Agent(sysroot, tmp_path / "state")
    try:
        original = mode_from_proto(agent.stub.GetDevice(profiler_pb2.GetDeviceRequest()).current_mode)
        r = agent.stub.ApplyPowerMode(profiler_pb2.ApplyPowerModeRequest(mode=mode_to_proto(target)))
        assert mode_from_proto(r.applied) == target and mode_from_proto(r.previous) == original
        assert (sysroot / POLICY0 / "scaling_max_freq").read_text().strip() == str(round(target.cpu_mhz * 1000))
        assert tree_differences(FIXTURE, sysroot)  # the files did change
        assert _record(tmp_path / "state") is not None
    finally:
        rc = agent.end(signal.SIGTERM)
    assert rc == 0, agent.log[-2000:]
    assert tree_differences(FIXTURE, sysroot) == []  # governors, ranges, EMC lock, online CPUs: as found
    assert _record(tmp_path / "state") is None


def test_sigkill_leaves_the_record_and_a_restart_restores(sysroot, tmp_path):
    spec, target = _target(sysroot)
    state = tmp_path / "state"
    original = SysfsJetson(sysroot).current_mode()
    agent = Agent(sysroot, state)
    agent.stub.ApplyPowerMode(profiler_pb2.ApplyPowerModeRequest(mode=mode_to_proto(target)))
    assert agent.end(signal.SIGKILL) == -signal.SIGKILL

    # Nothing ran on the way down: the device still holds the changed mode, the record the original.
    assert SysfsJetson(sysroot).current_mode() == target
    assert (sysroot / POLICY0 / "scaling_max_freq").read_text().strip() == str(round(target.cpu_mhz * 1000))
    record = _record(state)
    assert record is not None and json.loads(record.read_text())["restore_mode"] == original.as_dict()

    # The next agent on the same state dir restores the recorded mode before serving, and clears it.
    again = Agent(sysroot, state)
    try:
        assert mode_from_proto(again.stub.GetDevice(profiler_pb2.GetDeviceRequest()).current_mode) == original
        assert SysfsJetson(sysroot).current_mode() == original
        assert _record(state) is None
        # Not just the mode: every file as found (CPU / GPU min and max, EMC lock), byte for byte.
        assert tree_differences(FIXTURE, sysroot) == []
    finally:
        assert again.end(signal.SIGTERM) == 0, again.log[-2000:]
    assert SysfsJetson(sysroot).current_mode() == original and _record(state) is None
    assert tree_differences(FIXTURE, sysroot) == []


class _Killed(BaseException):
    """Stands for SIGKILL between two writes: nothing of the agent runs afterwards."""


def test_a_kill_between_any_two_writes_then_a_restart_leaves_the_sysroot_as_found(sysroot, tmp_path):
    from edgetune.agent.safety import ModeKeeper, open_guarded_device

    _, target = _target(sysroot)
    n_writes = len(SysfsJetson(sysroot)._plan_apply(target))
    assert n_writes >= 8  # online CPUs, CPU and GPU ranges, EMC rate and lock
    for k in range(n_writes + 1):  # killed before write k (k = n_writes: after the last one)
        state = tmp_path / f"state{k}" / "mode.json"
        keeper = ModeKeeper(SysfsJetson(sysroot), state)
        device = keeper.device
        real_write, done = device._write_all, []

        def dying_write(plan, real_write=real_write, done=done, k=k):
            for step in plan:
                if len(done) == k:
                    raise _Killed
                real_write([step])
                done.append(step)

        device._write_all = dying_write  # type: ignore[method-assign]
        with pytest.raises(_Killed):
            keeper.apply(target)
            raise _Killed  # all writes made: killed right after
        assert len(done) == k
        keeper2, recovered = open_guarded_device(lambda: SysfsJetson(sysroot), state)
        keeper2.unlock_device()
        assert recovered is not None and not state.exists()
        assert tree_differences(FIXTURE, sysroot) == [], f"killed before write {k}"


def test_restore_puts_back_the_exact_bytes(sysroot, tmp_path):
    """A value written as the kernel would not format it (no newline, blanks) still comes back as it was."""
    from edgetune.agent.safety import open_guarded_device

    odd = sysroot / POLICY0 / "scaling_min_freq"
    odd.write_bytes(b"  " + odd.read_bytes().strip() + b"  ")
    before = sysroot.parent / "before"
    shutil.copytree(sysroot, before)
    _, target = _target(sysroot)
    keeper, _ = open_guarded_device(lambda: SysfsJetson(sysroot), tmp_path / "mode.json")
    keeper.apply(target)
    assert tree_differences(before, sysroot)
    keeper.close()
    assert tree_differences(before, sysroot) == []


def test_a_second_agent_on_the_same_device_is_refused(sysroot, tmp_path):
    agent = Agent(sysroot, tmp_path / "state")
    try:
        with pytest.raises(AssertionError, match="another profiler agent"):
            Agent(sysroot, tmp_path / "state")
    finally:
        agent.end(signal.SIGTERM)


# --- in-process, simulated device --------------------------------------------------------
ORIN = get_spec("orin-agx")


def _profile(n: int) -> profiler_pb2.ProfileRequest:
    return profiler_pb2.ProfileRequest(workload=common_pb2.Workload(name="resnet18"), random_modes=n,
                                       random_grid=common_pb2.GRID_FULCRUM, batch_sizes=[8, 16, 32, 64])


@pytest.fixture
def sim_agent(tmp_path):
    server, servicer = create_server("sim:orin-agx", port=0, host="127.0.0.1", state_dir=tmp_path,
                                     redis_url="none", grace_s=0.5)
    server.start()
    channel = grpc.insecure_channel(server.address)
    yield server, servicer, profiler_pb2_grpc.ProfilerStub(channel)
    channel.close()
    server.stop(0)


def test_an_exception_mid_profile_restores_the_mode(sim_agent, tmp_path, monkeypatch):
    _, servicer, stub = sim_agent
    device = servicer.device
    real_run, calls = device.run, []

    def failing_run(*args, **kwargs):
        calls.append(device.current_mode())
        if len(calls) == 4:  # the 4th point fails, in a mode other than the original
            raise RuntimeError("CUDA error: an illegal memory access was encountered")
        return real_run(*args, **kwargs)

    monkeypatch.setattr(device, "run", failing_run)
    events = []
    with pytest.raises(grpc.RpcError) as exc:
        for e in stub.Profile(_profile(5)):
            events.append(e)
    assert exc.value.code() == grpc.StatusCode.INTERNAL
    assert "illegal memory access" in exc.value.details() and "restored" in exc.value.details()
    assert sum(e.HasField("measurement") for e in events) == 3
    assert calls[-1] != ORIN.maxn()
    assert device.current_mode() == ORIN.maxn() and list(tmp_path.glob("*.json")) == []
    # The device is free again.
    monkeypatch.setattr(device, "run", real_run)
    assert sum(e.HasField("measurement") for e in stub.Profile(_profile(1))) == 4


def test_stopping_the_server_mid_profile_restores_the_mode(sim_agent, tmp_path):
    server, servicer, stub = sim_agent
    call = stub.Profile(_profile(441))
    assert next(call).HasField("progress") and next(call).HasField("measurement")
    assert list(tmp_path.glob("*.json"))  # a mode other than the original is in force
    server.stop()  # what SIGTERM does: grace, cancel, hooks
    assert servicer.device.current_mode() == ORIN.maxn() and list(tmp_path.glob("*.json")) == []
    with pytest.raises(grpc.RpcError):
        list(call)


def _long_profile(n_minibatches: int) -> profiler_pb2.ProfileRequest:
    # lstm-tiny on this machine's CPU: real minibatch wall time, a few ms each.
    return profiler_pb2.ProfileRequest(workload=common_pb2.Workload(name="lstm-tiny"), random_modes=3,
                                       random_grid=common_pb2.GRID_FULCRUM, batch_sizes=[16],
                                       n_minibatches=n_minibatches, warmup_minibatches=-1, seed=1)


def test_sigterm_mid_profile_exits_within_the_grace_and_puts_every_file_back(sysroot, tmp_path):
    """SIGTERM while a point runs thousands of real minibatches: the agent does not wait for the
    point (tens of seconds) but stops between minibatches, restores every file and exits in time."""
    grace_s = 1.0  # the Agent's --grace-s
    agent = Agent(sysroot, tmp_path / "state")
    try:
        # A short profile first builds the model (torch import, zoo) so the long one is in its
        # minibatch loop at once; the runner is cached per (workload, role, batch size).
        assert sum(e.HasField("measurement") for e in agent.stub.Profile(_long_profile(2))) == 3
        call = agent.stub.Profile(_long_profile(10_000))
        assert next(call).HasField("progress")
        time.sleep(2.0)  # inside the first point: 10,000 minibatches take far longer than this
        assert _record(tmp_path / "state") is not None and tree_differences(FIXTURE, sysroot)
        t0 = time.monotonic()
        agent.proc.send_signal(signal.SIGTERM)
        rc = agent.proc.wait(timeout=30)  # without the stop it would run the whole point (TimeoutExpired)
        took_s = time.monotonic() - t0
    finally:
        rc = agent.end(signal.SIGKILL) if agent.proc.poll() is None else agent.end(signal.SIGTERM)
    assert rc == 0, agent.log[-2000:]
    # grace, then the teardown (restore, store, process exit); the margin allows a loaded CI machine,
    # and is still far below the point's own run time (the stop is what makes it this short)
    assert took_s < grace_s + 15.0, f"took {took_s:.1f} s to stop\n{agent.log[-2000:]}"
    assert tree_differences(FIXTURE, sysroot) == []
    assert _record(tmp_path / "state") is None
