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
the metric is the p99 of publish -> receipt over all 1,000 (None when one never arrived), with the
chart's default two coordinator replicas (each reads the change feed and sends to the streams on
its connections), and beside it from one replica. A replica's sends are bound by its one core (grpc's
sync server: a handler thread per stream, ~0.2-0.3 ms of CPU per message): on this 2-core machine
(2026-11-28, interleaved runs) one replica took p99 0.85-0.89 s, two 0.50-0.56 s; in slower hours
one replica took up to 1.8 s.

The agents' ends of the streams are ``grpc.aio`` calls on one event loop in a thread of the bench
(:class:`_Watchers`): real gRPC clients on their own connections, each receipt timed as its message
is read. A deployed agent receives on its own board; a thousand blocking reader threads in the
bench's process would spend more of the two cores than the coordinator's sends (measured
2026-11-28: publish -> receipt p99 0.78-1.84 s with reader threads, 0.58-1.26 s with the event loop,
the coordinator's CPU 0.54-0.63 s for the 1,000 sends either way).

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

import asyncio
import os
import statistics
import tempfile
import threading
import time
from collections.abc import Coroutine, Sequence
from concurrent import futures
from pathlib import Path
from typing import Any, TypeVar

import grpc

from edgetune.base.mode import PowerMode
from edgetune.bench.runner import benchmark
from edgetune.clients.nodes import NodesClient
from edgetune.control.configs import ConfigStore
from edgetune.control.leader import DEFAULT_LEASE_MS
from edgetune.control.registry import DEFAULT_HEARTBEAT_TTL_S, NodeRegistry
from edgetune.localrun.localcluster import LocalCluster
from edgetune.proto.v1 import coordinator_pb2, coordinator_pb2_grpc
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


T = TypeVar("T")


_LOOP: asyncio.AbstractEventLoop | None = None
_LOOP_LOCK = threading.Lock()


def _event_loop() -> asyncio.AbstractEventLoop:
    """The event loop of every :class:`_Watchers` of this process, running in a daemon thread, never closed:
    grpc.aio's completion-queue poller stays bound to the first loop it served (a second loop after the
    first closed gets its events posted to the closed one)."""
    global _LOOP
    with _LOOP_LOCK:
        if _LOOP is None:
            _LOOP = asyncio.new_event_loop()
            threading.Thread(target=_LOOP.run_forever, name="bench-watchers", daemon=True).start()
        return _LOOP


class _Watchers:
    """The simulated agents' WatchConfig streams: ``grpc.aio`` calls over ``channels`` connections (a
    local subchannel pool each, as separate agents would have; spread over the coordinator replicas'
    ``addresses`` as a Service spreads connections), served by one event loop in a thread."""

    def __init__(self, addresses: Sequence[str], channels: int) -> None:
        self.loop = _event_loop()
        self.calls: list[Any] = []

        async def connect() -> list[grpc.aio.Channel]:  # aio channels belong to the loop they are made on
            return [grpc.aio.insecure_channel(addresses[k % len(addresses)],
                                              options=[("grpc.use_local_subchannel_pool", 1)])
                    for k in range(channels)]

        self._channels = self._run(connect())
        self._stubs = [coordinator_pb2_grpc.CoordinatorStub(c) for c in self._channels]

    def _run(self, work: Coroutine[Any, Any, T], timeout_s: float | None = 120.0) -> T:
        return asyncio.run_coroutine_threadsafe(work, self.loop).result(timeout_s)

    def watch(self, node_ids: Sequence[str]) -> None:
        """Open a stream for each node (round robin over the connections)."""
        async def open_streams() -> None:
            for node_id in node_ids:
                stub = self._stubs[len(self.calls) % len(self._stubs)]
                self.calls.append(stub.WatchConfig(coordinator_pb2.WatchConfigRequest(node_id=node_id)))

        self._run(open_streams())

    def first_messages(self, indices: Sequence[int]) -> futures.Future[list[tuple[float, int]]]:
        """Read the next message of each stream in ``indices``: (when it was read, its revision; -1: the
        stream ended or failed without one), as the reads complete."""
        async def read(call: Any) -> tuple[float, int]:
            try:
                message = await call.read()
            except grpc.aio.AioRpcError:
                return time.perf_counter(), -1
            return time.perf_counter(), (-1 if message is grpc.aio.EOF else int(message.revision))

        async def read_all() -> list[tuple[float, int]]:
            return list(await asyncio.gather(*(read(self.calls[i]) for i in indices)))

        return asyncio.run_coroutine_threadsafe(read_all(), self.loop)

    def cancel(self) -> None:
        """End every stream (the coordinator sees each agent go)."""
        async def cancel_all() -> None:
            for call in self.calls:
                call.cancel()

        self._run(cancel_all())

    def close(self) -> None:
        self.cancel()

        async def close_channels() -> None:
            for channel in self._channels:
                await channel.close()

        self._run(close_channels(), timeout_s=30.0)


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
                          channels: int = CHANNELS, after_close_s: float = 0.0, replicas: int = 1) -> dict[str, Any]:
    """``after_close_s`` > 0: also close every stream and report the coordinator's threads once its
    idle handler threads ended (waiting up to that long). ``replicas`` > 1: that many coordinator
    replicas, the connections spread over them; heartbeats go to the first; gauges, counters and
    threads are summed over them."""

    ids = [f"node-{i:04d}" for i in range(streams)]
    watchers: _Watchers | None = None
    beat_channel: grpc.Channel | None = None
    closed: dict[str, Any] = {}
    # Without authentication a caller is its connection: let each hold its share of the streams.
    os.environ[MAX_WATCHES_ENV] = str(max(64, -(-streams // channels)))
    with tempfile.TemporaryDirectory(prefix="edgetune-watch-") as tmp, \
            LocalCluster(Path(tmp), log_level="WARNING", heartbeat_ttl_s=DEFAULT_HEARTBEAT_TTL_S, metrics=True,
                         lease_ms=DEFAULT_LEASE_MS, coordinator_args=["--max-workers", str(streams + 64)]) as cluster:
        assert cluster.coordinator is not None and cluster.store is not None and cluster.supervisor is not None
        coordinators = [cluster.coordinator]
        for k in range(2, replicas + 1):
            standby = cluster.spawn_coordinator(f"replica-{k}", name=f"coordinator-{k}")
            cluster.supervisor.wait_ready(standby, "edgetune.v1.Coordinator")
            coordinators.append(standby)

        def scraped(name: str) -> float:
            return sum(c.metrics().get(name, 0.0) for c in coordinators)

        def threads() -> int:
            return sum(_threads(c.pid) for c in coordinators)

        try:
            registry = NodeRegistry(cluster.store)  # the nodes as registered, straight into the shared store
            for node_id in ids:
                registry.register(NodeRecord(node_id=node_id))
            watchers = _Watchers([c.address for c in coordinators], channels)
            threads_before = threads()
            t0 = time.perf_counter()
            # In waves of OPEN_WAVE, each open (its handler waiting on the hub, by the coordinator's
            # watches gauge) before the next: agents come and go over time; 10,000 streams opened in one
            # burst measure CPython's scheduling of 10,000 runnable threads, not the steady state.
            deadline = time.monotonic() + 600
            watching = 0
            for start_at in range(0, streams, OPEN_WAVE):
                watchers.watch(ids[start_at:start_at + OPEN_WAVE])
                while (watching := int(scraped("edgetune_coordinator_config_watches"))) < len(watchers.calls) \
                        and time.monotonic() < deadline:
                    time.sleep(0.05)
            open_s = time.perf_counter() - t0
            threads_open = threads()
            reads_before = scraped("edgetune_coordinator_config_feed_reads_total")

            beat_channel = grpc.insecure_channel(coordinators[0].address, options=[("grpc.use_local_subchannel_pool", 1)])
            beat = NodesClient(beat_channel, timeout_s=10.0)
            latencies = []
            for k in range(heartbeats):
                t = time.perf_counter()
                beat.heartbeat(ids[k % streams], Heartbeat(state="ready"))
                latencies.append(time.perf_counter() - t)

            # Publish configs for some nodes (as a round would: into the store; the coordinator's hub
            # reads the change feed) and time each stream's delivery from the publish.
            mode = PowerMode(8, 1728.0, 930.75, 3199.0)
            chosen = list(range(0, streams, max(1, streams // published)))[:published]
            receipts = watchers.first_messages(chosen)  # each read waiting before the publish
            time.sleep(0.5)
            sent = time.perf_counter()
            ConfigStore(cluster.store).publish_many([NodeConfig(ids[i], mode=mode, batch_size=32, round_id="bench")
                                                     for i in chosen])
            try:
                delays = [t - sent if revision == 1 else float("nan") for t, revision in receipts.result(60)]
            except futures.TimeoutError:
                receipts.cancel()
                delays = []
            reads = scraped("edgetune_coordinator_config_feed_reads_total") - reads_before
            if after_close_s > 0:
                watchers.cancel()
                t_close = time.perf_counter()
                deadline = time.monotonic() + after_close_s
                while (threads() > threads_before + 8
                       or scraped("edgetune_coordinator_config_watches")) and time.monotonic() < deadline:
                    time.sleep(0.2)
                closed = {"threads_after_close": threads(),
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
            received = [d for d in delays if d > 0]
            return {
                "heartbeat_p99_ms": _percentile_ms(latencies, 0.99),
                "heartbeat_p50_ms": _percentile_ms(latencies, 0.50),
                "heartbeat_mean_ms": 1000.0 * statistics.fmean(latencies),
                "streams_open": watching, "streams_requested": streams, "open_all_s": open_s,
                "redis_connections": connections, "feed_reads_during_heartbeats": int(reads),
                "delivered": len(received), "published": len(chosen),
                "delivery_p99_ms": _percentile_ms(received or [float("nan")], 0.99),
                "delivery_p50_ms": _percentile_ms(received or [float("nan")], 0.50),
                "delivery_p99_s": _percentile_ms(received, 0.99) / 1e3
                if len(received) == len(chosen) else None,  # None unless every watcher received its config
                "threads_before": threads_before, "threads_with_streams": threads_open, **closed,
                "coordinator_replicas": len(coordinators),
                "processes": "redis-server and the coordinator replicas as processes (LocalCluster); the agents' "
                             "streams as grpc.aio calls on one event loop in the bench's",
                "before": BEFORE,
            }
        finally:
            if watchers is not None:
                watchers.close()
            if beat_channel is not None:
                beat_channel.close()
            os.environ.pop(MAX_WATCHES_ENV, None)


@benchmark("watch_streams_1000", "1,000 open WatchConfig streams on one coordinator: Heartbeat p99 < 50 ms",
           "heartbeat_p99_ms", 50.0)
def watch_streams_1000() -> dict:
    return measure_watch_streams()


@benchmark("config_push_1000_watchers", "a config published to each of 1,000 watching agents (one WatchConfig "
           "stream each, over 10 connections) reaches every one: p99 publish -> receipt <= 1 s, with the chart's "
           "default 2 coordinator replicas", "delivery_p99_s", 1.0)
def config_push_1000_watchers() -> dict:
    """All 1,000 configs in one publish (a round's), each stream's first message timed from the publish;
    as deployed by default (``coordinator.replicas: 2``, the agents' connections spread over both), and
    beside it the same push from one replica (``one_replica``)."""
    one = measure_watch_streams(streams=STREAMS, heartbeats=50, published=STREAMS, replicas=1)
    two = measure_watch_streams(streams=STREAMS, heartbeats=50, published=STREAMS, replicas=2)
    two["one_replica"] = {k: one[k] for k in ("delivery_p99_s", "delivery_p50_ms", "delivered")}
    return two


@benchmark("watch_streams_10000", "10,000 open WatchConfig streams on one coordinator: Heartbeat p99 < 50 ms; "
           "the handler threads go back once the streams close", "heartbeat_p99_ms", 50.0)
def watch_streams_10000() -> dict:
    return measure_watch_streams(streams=10_000, channels=100, after_close_s=60.0)
