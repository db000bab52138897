"""Leader lease on the in-memory store (the store contract suite holds Redis to the same lease semantics): exclusivity, renewal by the holder only, release,
takeover after expiry, fencing of a deposed leader."""

from __future__ import annotations

import threading
import time

import pytest

from edgetune.control.configs import ConfigStore, NodeConfig
from edgetune.control.leader import LeaderLease, NotLeader
from edgetune.errors import FailedPrecondition, InvalidArgument
from edgetune.store import MemoryStore


@pytest.fixture
def store():
    """On the real monotonic clock: a lease's local window runs on it, and the renewer thread sleeps."""
    with MemoryStore() as s:
        yield s


def test_only_one_holder_and_release_hands_over(store):
    a = LeaderLease(store, holder_id="a", lease_ms=2000)
    b = LeaderLease(store, holder_id="b", lease_ms=2000)
    assert a.try_acquire() and a.is_leader
    assert not b.try_acquire() and not b.is_leader
    assert b.holder() == "a"
    assert 1500 < store.lease_ttl_ms("coordinator") <= 2000
    assert a.try_acquire()  # renews
    assert not b.release()  # b cannot delete a's lease
    assert store.lease_holder("coordinator") == "a"
    assert a.release() and not a.is_leader
    assert b.try_acquire() and b.holder() == "b"


def test_renewal_is_by_the_holder_only_and_a_lapsed_holder_steps_down(store):
    a = LeaderLease(store, holder_id="a", lease_ms=200)
    b = LeaderLease(store, holder_id="b", lease_ms=200)
    assert a.try_acquire()
    time.sleep(0.25)  # a stalls past its lease
    assert not a.is_leader  # its own clock ran out first
    assert b.try_acquire()
    assert not a.try_acquire()  # the CAS renewal fails: the key is b's now
    assert not a.is_leader and b.holder() == "b"


def test_require_names_the_leader(store):
    a = LeaderLease(store, holder_id="coord-0@10.0.0.5:50054", lease_ms=2000)
    b = LeaderLease(store, holder_id="coord-1@10.0.0.6:50054", lease_ms=2000)
    a.try_acquire()
    a.require()
    with pytest.raises(NotLeader, match="coord-0@10.0.0.5:50054") as err:
        b.require()
    assert isinstance(err.value, FailedPrecondition)


def test_two_renewing_replicas_never_both_lead_and_the_standby_takes_over(store):
    lease_ms = 300
    a = LeaderLease(store, holder_id="a", lease_ms=lease_ms).start()
    assert a.wait_leader(2.0)
    b = LeaderLease(store, holder_id="b", lease_ms=lease_ms).start()
    both, samples = 0, 0
    end = time.monotonic() + 0.6
    while time.monotonic() < end:
        both += a.is_leader and b.is_leader
        samples += 1
        time.sleep(0.002)
    assert a.is_leader and not b.is_leader
    a.stop(release=False)  # dies without releasing: b must wait out the lease
    died = time.monotonic()
    while not b.is_leader and time.monotonic() - died < 3.0:
        both += a.is_leader and b.is_leader
        time.sleep(0.002)
    takeover_s = time.monotonic() - died
    b.stop()
    assert both == 0 and samples > 50
    assert b.terms == 1
    assert takeover_s <= lease_ms / 1000 + 0.1, takeover_s


def test_graceful_stop_releases_for_an_immediate_takeover(store):
    a = LeaderLease(store, holder_id="a", lease_ms=5000).start()
    assert a.wait_leader(2.0)
    b = LeaderLease(store, holder_id="b", lease_ms=5000, retry_interval_ms=50).start()
    a.stop()
    t0 = time.monotonic()
    assert b.wait_leader(1.0)
    assert time.monotonic() - t0 < 0.5
    b.stop()


def test_a_deposed_leader_cannot_publish(store):
    configs = ConfigStore(store)
    a = LeaderLease(store, holder_id="a", lease_ms=150)
    b = LeaderLease(store, holder_id="b", lease_ms=2000)
    assert a.try_acquire()
    assert configs.publish(NodeConfig("n1", batch_size=16), fence=a).revision == 1
    time.sleep(0.2)
    assert b.try_acquire()
    with pytest.raises(NotLeader):  # a paused leader wakes up and tries to push its old plan
        configs.publish(NodeConfig("n1", batch_size=64), fence=a)
    assert configs.get("n1").batch_size == 16
    assert configs.publish(NodeConfig("n1", batch_size=64), fence=b).revision == 2


def test_on_change_reports_transitions(store):
    seen: list[bool] = []
    a = LeaderLease(store, holder_id="a", lease_ms=1000, on_change=seen.append)
    a.try_acquire()
    a.try_acquire()
    a.release()
    assert seen == [True, False]


def test_bad_parameters():
    store = None  # validation happens before the store is touched
    with pytest.raises(InvalidArgument, match="lease_ms"):
        LeaderLease(store, lease_ms=50)  # type: ignore[arg-type]


def test_renewer_thread_keeps_the_lease_well_past_one_period(store):
    a = LeaderLease(store, holder_id="a", lease_ms=200).start()
    assert a.wait_leader(1.0)
    lost = threading.Event()
    end = time.monotonic() + 0.8  # four lease periods
    while time.monotonic() < end:
        if not a.is_leader:
            lost.set()
        time.sleep(0.005)
    a.stop()
    assert not lost.is_set()
