"""Config push on the in-memory store: revisions bump only on change; watch misses nothing."""

from __future__ import annotations

import threading
import time

import pytest

from edgetune.base.mode import PowerMode
from edgetune.control.configs import ConfigStore, NodeConfig
from edgetune.errors import InvalidArgument, NotFound

MODE_A = PowerMode(12, 2201.6, 1300.5, 3199.0)
MODE_B = PowerMode(8, 1728.0, 930.75, 3199.0)


def _cfg(node_id: str, mode: PowerMode = MODE_A, batch_size: int = 32, **kw) -> NodeConfig:
    return NodeConfig(node_id, mode=mode, batch_size=batch_size, workload={"name": "resnet18"}, role="train",
                      round_id=kw.pop("round_id", "r1"), valid_from_s=kw.pop("valid_from_s", time.time()), **kw)


def test_revision_bumps_only_when_what_to_run_changes(store):
    configs = ConfigStore(store)
    assert configs.revision("n1") == 0
    with pytest.raises(NotFound, match="node_id"):
        configs.get("n1")
    first = configs.publish(_cfg("n1"))
    assert (first.revision, first.changed) == (1, True)
    # Same plan again, later and for another reason: not a new config.
    same = configs.publish(_cfg("n1", valid_from_s=time.time() + 60, reason="re-plan"))
    assert (same.revision, same.changed) == (1, False)
    assert configs.publish(_cfg("n1", batch_size=64)).revision == 2
    assert configs.publish(_cfg("n1", batch_size=64, power_budget_w=20.0)).revision == 3
    got = configs.get("n1")
    assert got.revision == 3 and got.mode == MODE_A and got.batch_size == 64 and got.power_budget_w == 20.0


def test_replanning_bumps_only_the_changed_nodes(store):
    configs = ConfigStore(store)
    configs.publish_many([_cfg("n1"), _cfg("n2"), _cfg("n3")])
    out = configs.publish_many([_cfg("n1"), _cfg("n2", mode=MODE_B), _cfg("n3")])
    assert [(p.node_id, p.revision, p.changed) for p in out] == [("n1", 1, False), ("n2", 2, True), ("n3", 1, False)]
    assert configs.revisions(["n1", "n2", "n3", "n4"]) == {"n1": 1, "n2": 2, "n3": 1, "n4": 0}


def test_watch_yields_current_then_changes(store):
    configs = ConfigStore(store)
    configs.publish(_cfg("n1"))
    stop = threading.Event()
    seen: list[NodeConfig] = []

    def consume() -> None:
        for cfg in configs.watch("n1", 0, block_ms=50, should_stop=stop.is_set):
            seen.append(cfg)
            if len(seen) == 3:
                stop.set()

    t = threading.Thread(target=consume)
    t.start()
    time.sleep(0.1)
    configs.publish(_cfg("n1", batch_size=16))
    configs.publish(_cfg("n1", batch_size=16))  # unchanged: no event
    configs.publish(_cfg("n1", mode=MODE_B, batch_size=16))
    t.join(5)
    stop.set()
    assert [(c.revision, c.batch_size, c.mode) for c in seen] == [(1, 32, MODE_A), (2, 16, MODE_A), (3, 16, MODE_B)]


def test_watch_misses_nothing_published_while_it_starts(store):
    configs = ConfigStore(store)
    stop = threading.Event()

    def publisher() -> None:
        for b in range(1, 201):
            configs.publish(_cfg("n1", batch_size=b))

    pub = threading.Thread(target=publisher)
    pub.start()
    revisions: list[int] = []
    for cfg in configs.watch("n1", 0, block_ms=50, should_stop=stop.is_set):
        revisions.append(cfg.revision)
        if cfg.revision == 200:
            break
    pub.join(5)
    assert revisions[-1] == 200
    assert revisions == sorted(set(revisions))  # strictly increasing, never a repeat
    # A watcher that starts after it all, from the last revision it applied, only gets newer ones.
    configs.publish(_cfg("n1", batch_size=999))
    newer = next(configs.watch("n1", 200, block_ms=50))
    assert (newer.revision, newer.batch_size) == (201, 999)


def test_watch_stops_when_asked_and_checks_arguments(store):
    configs = ConfigStore(store)
    t0 = time.monotonic()
    calls = iter([False, False, True])
    assert list(configs.watch("n1", 0, block_ms=20, should_stop=lambda: next(calls))) == []
    assert time.monotonic() - t0 < 1.0
    with pytest.raises(InvalidArgument, match="after_revision"):
        next(configs.watch("n1", -1))
    with pytest.raises(InvalidArgument, match="node_id"):
        configs.publish(_cfg(""))


def test_restore_config_round_trips():
    cfg = NodeConfig("n1", restore=True, reason="round over", revision=4)
    assert NodeConfig.from_json(cfg.to_json()).with_revision(4) == cfg  # the revision is the store's


def _follow(configs: ConfigStore, nodes: list[str], stop: threading.Event
            ) -> tuple[dict[str, list[int]], list[threading.Thread]]:
    """A watch per node on its own thread (as the coordinator's streams are); the revisions each one saw."""
    seen: dict[str, list[int]] = {n: [] for n in nodes}

    def follow(node_id: str) -> None:
        for cfg in configs.watch(node_id, 0, block_ms=50, should_stop=stop.is_set):
            seen[node_id].append(cfg.revision)

    threads = [threading.Thread(target=follow, args=(n,), daemon=True) for n in nodes]
    for t in threads:
        t.start()
    return seen, threads


def test_many_watches_share_one_feed_reader_and_wake_only_for_their_node(store):
    configs = ConfigStore(store)
    stop = threading.Event()
    seen, threads = _follow(configs, [f"n{i}" for i in range(50)], stop)
    deadline = time.monotonic() + 5
    while configs.hub.watches < len(seen):
        assert time.monotonic() < deadline
        time.sleep(0.01)
    configs.publish_many([_cfg("n3"), _cfg("n7")])
    configs.publish(_cfg("n3", batch_size=64))
    deadline = time.monotonic() + 5
    while seen["n3"] != [1, 2] or seen["n7"] != [1]:
        assert time.monotonic() < deadline, seen
        time.sleep(0.01)
    reads = configs.hub.reads
    assert all(not revs for n, revs in seen.items() if n not in ("n3", "n7"))
    assert reads <= 10  # one reader for 50 watches: a few feed reads, not one per watch
    stop.set()
    for t in threads:
        t.join(2)
    deadline = time.monotonic() + 3
    while configs.hub.watches:  # every watch unsubscribed on the way out
        assert time.monotonic() < deadline
        time.sleep(0.01)


def test_a_publish_reaches_its_watches_in_one_store_read_not_one_per_watch(store):
    """The hub reads every changed node's config at once and hands each watch its own: the watches yield
    them without reading the store; one that skipped revisions reads the store's log and misses none."""
    configs = ConfigStore(store)
    nodes = [f"n{i}" for i in range(40)]
    configs.publish_many([_cfg(n) for n in nodes[:5]])
    reads: list[str] = []
    original = store.wait_configs

    def counted(node_id, *a, **kw):
        reads.append(node_id)
        return original(node_id, *a, **kw)

    store.wait_configs = counted  # type: ignore[method-assign]
    stop = threading.Event()
    seen, threads = _follow(configs, nodes, stop)
    deadline = time.monotonic() + 5
    while configs.hub.watches < len(nodes) or len(set(reads)) < len(nodes) or seen["n0"] != [1]:
        assert time.monotonic() < deadline, (configs.hub.watches, len(reads))
        time.sleep(0.01)
    time.sleep(0.1)
    first_reads = len(reads)  # each watch's first read is its own
    configs.publish_many([_cfg(n, batch_size=64) for n in nodes])
    deadline = time.monotonic() + 5
    while any(seen[n] != ([1, 2] if n in nodes[:5] else [1]) for n in nodes):
        assert time.monotonic() < deadline, seen
        time.sleep(0.01)
    assert len(reads) == first_reads  # delivered from the hub's one read
    # revisions published while the hub is not looking: a watch handed the latest reads the log for the rest
    store.publish_configs([_cfg("n1", batch_size=8)])
    store.publish_configs([_cfg("n1", batch_size=16)])
    deadline = time.monotonic() + 5
    while seen["n1"] != [1, 2, 3, 4]:
        assert time.monotonic() < deadline, seen["n1"]
        time.sleep(0.01)
    stop.set()
    for t in threads:
        t.join(2)
