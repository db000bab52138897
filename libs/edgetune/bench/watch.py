"""A coordinator with a fleet's worth of open ``WatchConfig`` streams.

``watch_streams_1000``: one coordinator process (as deployed: ``python -m
edgetune.services.coordinator.server`` over a redis-server on loopback TCP, started through
:class:`~edgetune.localrun.localcluster.LocalCluster`), 1,000 registered nodes, each with an open
WatchConfig stream (over 10 client connections); then 300 Heartbeat RPCs one after another from
another connection: their p99 latency is the metric. Also reported: the Redis connections the
coordinator holds (Redis's count of clients less the bench's own), how many change-feed reads served
all streams and when the streams were all open (the coordinator's
``edgetune_coordinator_config_feed_reads_total`` and ``edgetune_coordinator_config_watches``, read
from its metrics endpoint as an operator's scraper would), and the delay from publishing 100 nodes'
configs to each stream delivering its own (each stream's reader waits before the publish).

``config_push_1000_watchers``: the same 1,000 streams, a config published to every one of them at once;
the metric is the p99 of publish -> receipt over all 1,000 (None when one never arrived).

Before the change each stream held a pooled connection in a blocking read: at about 97
streams the coordinator's pool (redis-py's default, 100) was exhausted and every RPC failed
with "Too many connections" (:data:`BEFORE`). Now one reader of the store's change feed
serves every stream and the pool is a blocking one of 64.

``watch_streams_10000``: the same with 10,000 streams over 100 connections (each a caller of 100
streams: the per-caller cap, ``EDGETUNE_MAX_WATCHES_PER_CALLER``, is raised for the benchmark),
heartbeat p99 < 50 ms; it also reports the coordinator process's threads with the streams open and
after they closed (its handler pool gives idle threads back: issue 25 saw 1,000 threads stay after
1,000 watches ended). Heavy (10,000 threads): it belongs in ``make bench``, not in CI.
"""

from __future__ import annotations

import os
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import grpc

from edgetune.base.mode import PowerMode
from edgetune.bench.runner import benchmark
from edgetune.clients.coordinator import CoordinatorClient
from edgetune.clients.nodes import NodesClient
from edgetune.control.configs import ConfigStore
from edgetune.control.leader import DEFAULT_LEASE_MS
from edgetune.control.registry import DEFAULT_HEARTBEAT_TTL_S, NodeRegistry
from edgetune.localrun.localcluster import LocalCluster
from edgetune.store import Heartbeat, NodeConfig, NodeRecord, open_store

#: Main before the change (daa557e: one blocking Redis read per stream, redis-py's pool of 100),
#: this 2-core machine, 2026-11-26: with 150 open streams 0 of 100 Heartbeats answered, every one
#: UNAVAILABLE "Too many connections" (RPCs fail from about 97 streams on).
BEFORE: dict[str, Any] = {"streams": 150, "heartbeats_ok": 0, "heartbeats_failed": 100,
                          "error": "UNAVAILABLE: Too many connections", "rpcs_fail_from_streams": 97}
STREAMS = 1000
CHANNELS = 10
HEARTBEATS = 300
PUBLISHED = 100
#: The coordinator's per-caller cap of open watches (a documented setting of every service).
MAX_WATCHES_ENV = "EDGETUNE_MAX_WATCHES_PER_CALLER"
#: Streams opened at once (then waited for) while the benchmark opens them.
OPEN_WAVE = 500


def _percentile_ms(values_s: list[float], q: float) -> float:
    ordered = sorted(values_s)
    return 1000.0 * ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def _threads(pid: int) -> int:
    """A process's threads (Linux's /proc)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Threads:"):
            return int(line.split()[1])
    return 0


def measure_watch_streams(streams: int = STREAMS, heartbeats: int = HEARTBEATS, published: int = PUBLISHED,
                          channels: int = CHANNELS, after_close_s: float = 0.0) -> dict[str, Any]:
    """``after_close_s`` > 0: also close every stream and report the coordinator's threads once its
    idle handler threads ended (waiting up to that long)."""

    ids = [f"node-{i:04d}" for i in range(streams)]
    calls: list[Any] = []
    opened: list[grpc.Channel] = []
    closed: dict[str, Any] = {}
    # Without authentication a caller is its connection: let each hold its share of the streams.
    os.environ[MAX_WATCHES_ENV] = str(max(64, -(-streams // channels)))
    with tempfile.TemporaryDirectory(prefix="edgetune-watch-") as tmp, \
            LocalCluster(Path(tmp), log_level="WARNING", heartbeat_ttl_s=DEFAULT_HEARTBEAT_TTL_S, metrics=True,
                         lease_ms=DEFAULT_LEASE_MS, coordinator_args=["--max-workers", str(streams + 64)]) as cluster:
        assert cluster.coordinator is not None and cluster.store is not None
        coordinator = cluster.coordinator

        def scraped(name: str) -> float:
            return coordinator.metrics().get(name, 0.0)

        try:
            registry = NodeRegistry(cluster.store)  # the nodes as registered, straight into the shared store
            for node_id in ids:
                registry.register(NodeRecord(node_id=node_id))
            # Separate connections (a local subchannel pool each), as separate agents would have.
            opened = [grpc.insecure_channel(coordinator.address, options=[("grpc.use_local_subchannel_pool", 1)])
                      for _ in range(channels + 1)]
            clients = [CoordinatorClient(c, timeout_s=10.0) for c in opened]
            threads_before = _threads(coordinator.pid)
            t0 = time.perf_counter()
            # In waves of OPEN_WAVE, each open (its handler waiting on the hub, by the coordinator's
            # watches gauge) before the next: agents come and go over time; 10,000 streams opened in one
            # burst measure CPython's scheduling of 10,000 runnable threads, not the steady state.
            deadline = time.monotonic() + 600
            watching = 0
            for start_at in range(0, streams, OPEN_WAVE):
                for i in range(start_at, min(streams, start_at + OPEN_WAVE)):
                    calls.append(clients[i % channels].watch_config(ids[i]))
                while (watching := int(scraped("edgetune_coordinator_config_watches"))) < len(calls) \
                        and time.monotonic() < deadline:
                    time.sleep(0.05)
            open_s = time.perf_counter() - t0
            threads_open = _threads(coordinator.pid)
            reads_before = scraped("edgetune_coordinator_config_feed_reads_total")

            beat = NodesClient(opened[channels], timeout_s=10.0)
            latencies = []
            for k in range(heartbeats):
                t = time.perf_counter()
                beat.heartbeat(ids[k % streams], Heartbeat(state="ready"))
                latencies.append(time.perf_counter() - t)

            # Publish configs for some nodes (as a round would: into the store; the coordinator's hub
            # reads the change feed) and time each stream's delivery.
            mode = PowerMode(8, 1728.0, 930.75, 3199.0)
            chosen = ids[:: max(1, streams // published)][:published]
            delays: list[float] = [0.0] * len(chosen)

            sent = [0.0]

            def read(k: int, call: Any) -> None:
                cfg = next(call)  # waiting before the publish: the delay is publish -> receipt
                delays[k] = time.perf_counter() - sent[0] if cfg.revision == 1 else float("nan")

            index = {n: i for i, n in enumerate(ids)}
            readers = [threading.Thread(target=read, args=(k, calls[index[n]]), daemon=True)
                       for k, n in enumerate(chosen)]
            for r in readers:
                r.start()
            time.sleep(0.5)  # every reader waiting on its stream
            sent[0] = time.perf_counter()
            ConfigStore(cluster.store).publish_many([NodeConfig(n, mode=mode, batch_size=32, round_id="bench")
                                                     for n in chosen])
            for r in readers:
                r.join(60)
            reads = scraped("edgetune_coordinator_config_feed_reads_total") - reads_before
            if after_close_s > 0:
                for call in calls:
                    call.close()
                t_close = time.perf_counter()
                deadline = time.monotonic() + after_close_s
                while (_threads(coordinator.pid) > threads_before + 8
                       or scraped("edgetune_coordinator_config_watches")) and time.monotonic() < deadline:
                    time.sleep(0.2)
                closed = {"threads_after_close": _threads(coordinator.pid),
                          "open_watches_after_close": int(scraped("edgetune_coordinator_config_watches")),
                          "release_s": time.perf_counter() - t_close}
            # Redis counts every client: leave out the bench's own (its store closed, one fresh one asking)
            cluster.store.close()
            time.sleep(0.3)
            asking = open_store(cluster.redis_url)
            try:
                connections = int(asking.info()["connected_clients"]) - 1
            finally:
                asking.close()
            return {
                "heartbeat_p99_ms": _percentile_ms(latencies, 0.99),
                "heartbeat_p50_ms": _percentile_ms(latencies, 0.50),
                "heartbeat_mean_ms": 1000.0 * statistics.fmean(latencies),
                "streams_open": watching, "streams_requested": streams, "open_all_s": open_s,
                "redis_connections": connections, "feed_reads_during_heartbeats": int(reads),
                "delivered": sum(1 for d in delays if d > 0), "published": len(chosen),
                "delivery_p99_ms": _percentile_ms([d for d in delays if d > 0] or [float("nan")], 0.99),
                "delivery_p50_ms": _percentile_ms([d for d in delays if d > 0] or [float("nan")], 0.50),
                "delivery_p99_s": _percentile_ms([d for d in delays if d > 0] or [float("nan")], 0.99) / 1e3
                if all(d > 0 for d in delays) else None,  # None unless every watcher received its config
                "threads_before": threads_before, "threads_with_streams": threads_open, **closed,
                "processes": "redis-server and the coordinator as processes (LocalCluster); clients in the bench's",
                "before": BEFORE,
            }
        finally:
            for call in calls:
                call.close()
            for c in opened:
                c.close()
            os.environ.pop(MAX_WATCHES_ENV, None)


@benchmark("watch_streams_1000", "1,000 open WatchConfig streams on one coordinator: Heartbeat p99 < 50 ms",
           "heartbeat_p99_ms", 50.0)
def watch_streams_1000() -> dict:
    return measure_watch_streams()


@benchmark("config_push_1000_watchers", "a config published to each of 1,000 watching agents (one WatchConfig "
           "stream each, over 10 connections) reaches every one: p99 publish -> receipt <= 1 s", "delivery_p99_s", 1.0)
def config_push_1000_watchers() -> dict:
    """All 1,000 configs in one publish (a round's), each stream's first message timed from the publish."""
    return measure_watch_streams(streams=STREAMS, heartbeats=50, published=STREAMS)


@benchmark("watch_streams_10000", "10,000 open WatchConfig streams on one coordinator: Heartbeat p99 < 50 ms; "
           "the handler threads go back once the streams close", "heartbeat_p99_ms", 50.0)
def watch_streams_10000() -> dict:
    return measure_watch_streams(streams=10_000, channels=100, after_close_s=60.0)
