"""clients.profiler.ProfilerClient against an in-process agent on a simulated Orin AGX: records in and
out, the same ids for the same run key, a busy device as FAILED_PRECONDITION; the callers switched to
it (the Flower client's power_mode, the tuning protocols' AgentMeasurer)."""

from __future__ import annotations

import grpc
import numpy as np
import pytest

from edgetune.base.roles import Role
from edgetune.clients.calls import CallFailed, Status
from edgetune.clients.profiler import ProfilerClient
from edgetune.clients.tuning import AgentMeasurer
from edgetune.powermodes.grids import named_grid
from edgetune.powermodes.specs import get_spec
from edgetune.profiling import ProfileProgress
from edgetune.services.profiler.server import create_server
from edgetune.store import MeasurementRecord, ProfileJob

ORIN = get_spec("orin-agx")
MAXN = ORIN.maxn()
FULCRUM = named_grid(ORIN, "fulcrum")


@pytest.fixture
def agent(tmp_path):
    server, node = create_server("sim:orin-agx", port=0, host="127.0.0.1", state_dir=tmp_path, redis_url="none",
                                 node_id="jetson-7", grace_s=0.5, max_workers=4)
    server.start()
    channel = grpc.insecure_channel(server.address)
    yield server, node, ProfilerClient(channel, timeout_s=60)
    channel.close()
    server.stop(0)


def test_device_profile_and_mode_changes_as_records(agent):
    _, node, client = agent
    info = client.device()
    assert (info.spec.name, info.backend, info.current_mode, info.node_id) == ("orin-agx", "sim", MAXN, "jetson-7")
    assert "resnet18" in info.workloads and info.spec.core_counts == ORIN.core_counts

    job = ProfileJob("resnet18", Role.TRAIN, modes=(FULCRUM.mode_at(3), FULCRUM.mode_at(300)), batch_sizes=(16,),
                     n_minibatches=5)
    events = list(client.profile(job, run_key="run-1"))
    assert [type(e) for e in events] == [ProfileProgress, MeasurementRecord] * 2 + [ProfileProgress]
    rows = [e for e in events if isinstance(e, MeasurementRecord)]
    assert [r.mode for r in rows] == list(job.modes) and all(r.node_id == "jetson-7" for r in rows)
    again = [e.id for e in client.profile(job, run_key="run-1") if isinstance(e, MeasurementRecord)]
    assert again == [r.id for r in rows]  # the same run key: the same ids

    low = ORIN.minimum()
    assert client.apply(low) == (low, MAXN)
    assert client.apply("MODE_30W") == (ORIN.preset("MODE_30W").mode(), low)
    assert client.restore() == (MAXN, True) and node.device.current_mode() == MAXN
    assert client.restore() == (MAXN, False)

    samples = list(client.stream_power(50.0, max_samples=3, include_rails=True))
    assert len(samples) == 3 and all(s.power_w > 0 and set(s.rails_w or ()) == set(info.power_rails) for s in samples)
    assert all(s.rails_w is None for s in client.stream_power(50.0, max_samples=2))  # none asked for


def test_a_busy_device_and_a_bad_request_are_the_agents_status(agent):
    _, _, client = agent
    running = client.profile(ProfileJob("resnet18", random_modes=441, random_grid="fulcrum", batch_sizes=(8, 16, 32)))
    assert isinstance(next(running), ProfileProgress)
    with pytest.raises(CallFailed) as busy:
        client.apply(MAXN)
    assert busy.value.code == Status.FAILED_PRECONDITION
    running.close()  # the stream ends: the agent cancels the profile and restores
    with pytest.raises(CallFailed) as bad:
        list(client.profile(ProfileJob("alexnet", random_modes=2)))
    assert bad.value.code == Status.INVALID_ARGUMENT and bad.value.details.startswith("workload.name:")
    assert str(bad.value).startswith("INVALID_ARGUMENT: workload.name:")


def test_the_flower_clients_power_mode_applies_then_restores(agent):
    from edgetune.integrations.flower import power_mode

    server, node, _ = agent
    low = ORIN.minimum()
    with power_mode(server.address, low) as applied:
        assert applied == low and node.device.current_mode() == low
    assert node.device.current_mode() == MAXN


def test_the_agent_measurer_returns_points_and_keeps_the_rows(agent):
    _, _, client = agent
    ticks: list[tuple[int, int]] = []
    measurer = AgentMeasurer(client, "orin-agx", "mobilenetv3", "infer", tick=lambda d, t: ticks.append((d, t)))
    modes = np.asarray([FULCRUM.mode_at(i).as_tuple() for i in (5, 50, 400)], dtype=float)
    points = measurer.measure(modes, 8, seed=1)
    np.testing.assert_array_equal(points.modes, modes)
    assert list(points.batch_size) == [8, 8, 8] and (points.time_ms > 0).all() and (points.power_w > 0).all()
    assert (points.device, points.workload, points.role) == ("orin-agx", "mobilenetv3", "infer")
    assert ticks[-1] == (3, 3) and [p for p, _ in measurer.measured] == ["profile"] * 3
