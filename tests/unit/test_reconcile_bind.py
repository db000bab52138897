"""A node's tuner kept across workers measures for the worker using it now (its stop, its status count).

Seen in the full suite: a worker stopped while its node's tuner was verifying; the next workers reused the tuner,
whose measurer still asked the first worker's stop event, so each raised Stopped at its first new measurement and
the leader started another, ~30 a second for two minutes (`test_tuning_faults.py`, once in a full run).
"""

from __future__ import annotations

import threading

import pytest

from edgetune.base.workload import WorkloadRef
from edgetune.control.jobs import JobQueue
from edgetune.control.reconcile import QueueMeasurer, _bind
from edgetune.stopping import Stopped
from edgetune.store import MemoryStore
from edgetune.tuning.jobs import NodePhase, NodeStatus


class Writer:
    """The node's status as the leader's writer keeps it."""

    def __init__(self) -> None:
        self.status = NodeStatus("n1", phase=NodePhase.SELECTING, profiled=12)

    def update(self, node_id, change):
        self.status = change(self.status)
        return self.status


def test_a_kept_measurer_is_bound_to_the_current_worker():
    first = threading.Event()
    with MemoryStore() as store:
        writer = Writer()
        measurer = QueueMeasurer(store, JobQueue(store), "job", "n1", "orin-agx", WorkloadRef.parse("mobilenetv3"),
                                 "train", should_stop=lambda: False, on_purpose=lambda _p: None,
                                 on_points=lambda _n: None)
        _bind(measurer, writer, first.is_set, profiled=0)
        first.set()  # the first worker is stopped: its measurements stop
        with pytest.raises(Stopped):
            measurer.on_purpose("verify")
        second = threading.Event()
        _bind(measurer, writer, second.is_set, profiled=None)
        measurer.on_purpose("verify")  # the next worker's verification goes ahead
        measurer.on_points(1)  # (counted by the worker that profiled; a resumed tuner's verification is not)
        assert writer.status.phase == NodePhase.VERIFYING and writer.status.profiled == 12
        assert measurer.should_stop() is False
