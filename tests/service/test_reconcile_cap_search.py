"""A TuningJob ``method: cap-search`` in one process: the leader's
:class:`~edgetune.control.reconcile.Reconciler` on MemoryStore with no Estimator and no Optimizer
(the measured points are the table), and an agent thread that runs each queued point on the simulated
board's truth (mean power, a peak 12 % above it, time per minibatch) and stores it under the id the real
agent writes. The job's choice is compared with :func:`~edgetune.profiling.order.run_cap_search` driven
on the same truth.
"""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from edgetune.base.mode import PowerMode
from edgetune.control.configs import ConfigStore
from edgetune.control.jobs import JobQueue
from edgetune.control.leader import LeaderLease
from edgetune.control.reconcile import Reconciler
from edgetune.control.registry import NodeRegistry
from edgetune.control.tuningjobs import TuningJobs
from edgetune.devices.simulated.tables import truth_table
from edgetune.powermodes.specs import get_spec
from edgetune.profiling.order import CapSearch, gpu_levels, run_cap_search
from edgetune.profiling.protocol import measurement_id
from edgetune.proto.serde.tuning import spec_from_proto, spec_to_proto
from edgetune.proto.v1 import tuning_pb2
from edgetune.store import MeasurementRecord, MemoryStore, NodeRecord, ProfileJob, spec_to_dict
from edgetune.tuning.jobfile import spec_from_doc
from edgetune.tuning.jobs import TuningJobSpec

DEVICE, WORKLOAD, NODE = "orin-agx", "mobilenetv3", "orin-agx-1"
BATCH_SIZES = (32, 16, 8)
PEAK_OVER_MEAN = 1.12


def truth(batch_size: int, mode: PowerMode) -> tuple[float, float]:
    """(time per minibatch ms, peak power W) of the simulated board at one point."""
    row = truth_table(DEVICE, WORKLOAD, "train", np.asarray([mode.as_tuple()], dtype=float), [batch_size])[0]
    return float(row["time_ms"]), float(row["power_w"]) * PEAK_OVER_MEAN


def _agent(store: MemoryStore, stop: threading.Event, ran: list[str]) -> None:
    queue = JobQueue(store)
    while not stop.is_set():
        for job in queue.claim(NODE, "agent", block_ms=50):
            ran.append(job.job_id)
            point = ProfileJob.from_dict(job.payload)
            mode, b = point.modes[0], point.batch_sizes[0]
            time_ms, peak_w = truth(b, mode)
            mid = measurement_id(DEVICE, NODE, WORKLOAD, "train", mode, b, job.job_id)
            queue.complete(job, [MeasurementRecord(mid, DEVICE, WORKLOAD, "train", mode, b, time_ms,
                                                   peak_w / PEAK_OVER_MEAN, NODE, {"peak_power_w": peak_w})])


@pytest.fixture()
def plane():
    store = MemoryStore()
    registry = NodeRegistry(store, heartbeat_ttl_s=120)
    registry.register(NodeRecord(NODE, device=spec_to_dict(get_spec(DEVICE)), power_budget_w=60.0))
    lease = LeaderLease(store, "coordinator", lease_ms=5000, holder_id="test")
    lease.start()
    stop, ran = threading.Event(), []
    agent = threading.Thread(target=_agent, args=(store, stop, ran), daemon=True)
    agent.start()
    rec = Reconciler(store, registry, ConfigStore(store), lease, None, None, interval_s=0.1, point_timeout_s=30)
    rec.start()
    try:
        yield store, ran
    finally:
        rec.stop()
        stop.set()
        agent.join(2)
        lease.stop()


def test_cap_search_job_applies_the_fastest_point_strictly_under_the_cap(plane):
    store, ran = plane
    levels = gpu_levels(get_spec(DEVICE))
    # the cap exactly at one point's peak power: that point is measured but must not count as under it
    cap_w = truth(32, levels[6])[1]
    expected = run_cap_search(CapSearch(levels, BATCH_SIZES, cap_w), lambda b, m: truth(b, m)[1])
    assert (32, 6, cap_w) in expected.profiled_points

    def per_sample_ms(b: int, m: PowerMode) -> float:
        return truth(b, m)[0] / b

    # run_cap_search's pick: of each batch size's highest level under the cap, the least time per sample
    best_b, best_mode = min(((b, m) for b, m in expected.best.items() if m is not None),
                            key=lambda bm: per_sample_ms(*bm))
    assert (best_b, best_mode) == (32, levels[5])
    assert per_sample_ms(32, levels[6]) < per_sample_ms(32, levels[5])  # the point at the cap would have won

    jobs = TuningJobs(store)
    jobs.submit(TuningJobSpec("capjob", WORKLOAD, batch_sizes=BATCH_SIZES, nodes=(NODE,), power_budget_w=cap_w,
                              method="cap-search"))
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        status = jobs.get("capjob").status
        node = status.nodes.get(NODE) if status else None
        if node is not None and node.terminal:
            break
        time.sleep(0.1)
    assert node is not None and node.phase == "Applied", node
    assert jobs.get("capjob").phase == "Succeeded"

    assert node.batch_size == best_b and node.mode == tuple(float(v) for v in best_mode.as_tuple())
    best_time_ms, best_peak_w = truth(best_b, best_mode)
    assert node.measured_time_ms == best_time_ms and node.measured_power_w == best_peak_w
    assert node.measured_power_w < cap_w  # strictly under
    # the search's points, each profiled once on the node: fewer than the full grid
    full_grid = len(levels) * len(BATCH_SIZES)
    assert node.profiled == expected.profiled == len(ran) < full_grid
    config = ConfigStore(store).get(NODE)
    assert config.mode == best_mode and config.batch_size == best_b and config.power_budget_w == cap_w
    assert node.config_revision == store.config_revisions([NODE])[NODE]


def test_cap_search_reaches_the_coordinator_from_a_job_file():
    read = spec_from_doc({"name": "capjob", "workload": {"name": WORKLOAD, "batch_sizes": [32, 8]}, "nodes": [NODE],
                          "power_budget_w": 30, "method": "cap-search"})
    msg = spec_to_proto(read)
    assert msg.method == tuning_pb2.TUNING_METHOD_CAP_SEARCH
    spec = spec_from_proto(msg)
    assert spec.method == "cap-search" and spec == read
    assert TuningJobSpec.from_dict(spec.to_dict()) == spec
