"""Config push: each node's current configuration, with a revision, and a change feed.

The store keeps, per node, the current :class:`~edgetune.store.NodeConfig`
with a revision (1, 2, ...) and a capped log of the recent ones (the Redis layout is in
:mod:`edgetune.store.redis_store`).

:meth:`ConfigStore.publish` compares the new config's *digest* (what to run: mode, batch
size, workload, role, round, budget, restore) with the stored one and, only when it differs,
bumps the revision, stores it and logs it, atomically per node. Re-planning therefore gives
new revisions only to nodes whose config really changed; ``valid_from`` / ``reason`` alone
do not make a change. With a leader lease as *fence* the store also checks, in the same
atomic step, that the lease is still held by the caller, so a deposed leader cannot publish.

:meth:`ConfigStore.watch` yields the config when newer than the caller's (epoch, revision),
then every newer one. Watches do not block in the store: one :class:`ConfigWatchHub` per
ConfigStore (per process) reads the store's change feed (``Store.wait_config_changes``, one
blocking read), reads the current configs of the nodes that changed and have a watch, all in one
store round trip (``Store.get_configs``), and wakes those watches with them; a watch yields the one
it was handed when it is the next revision, and reads its node's configs itself (without blocking)
only when it may have skipped revisions, on another epoch, or without a config handed over. A
thousand open watches thus hold no store connection each, and a round published to all of them
costs one store read, not a thousand. After a store outage the hub re-reads from the feed's tail and
wakes every watch to re-read.

Epochs: the store's config epoch changes only when the store lost its data (a new one is set
by the next publish). A watch given another epoch than the store's treats the current config
as new whatever its revision, so an agent that saw revision 7 before the loss still gets the
new revision 1.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from edgetune.control.leader import LeaderLease, NotLeader
from edgetune.errors import InvalidArgument, NotFound
from edgetune.store import (
    STORE_ERRORS,
    ConfigChanges,
    DocWrite,
    LeaseLost,
    NodeConfig,
    Published,
    RoundState,
    Store,
)
from edgetune.store.base import KeyLike
from edgetune.store.records import NON_IDENTITY_FIELDS

log = logging.getLogger(__name__)

LOG_MAXLEN = 100
#: How long the hub's one blocking read of the change feed waits (it also notices an idle hub).
HUB_BLOCK_MS = 1000
#: A watch re-reads its node this often even without a wake-up (a safety net, not the path).
RESYNC_S = 30.0

__all__ = ["LOG_MAXLEN", "NON_IDENTITY_FIELDS", "ConfigStore", "ConfigWatchHub", "HubWatch", "NodeConfig",
           "Published"]


def _check_node_id(node_id: str) -> str:
    if not isinstance(node_id, str) or not node_id:
        raise InvalidArgument("node_id", f"{node_id!r} is not a node id", "a non-empty string")
    return node_id


class HubWatch:
    """One watch's wake-up: an Event the hub sets, and the node's current config it read for the watch
    (None: the watch reads the store itself). The hub writes ``config`` before it sets ``event``."""

    __slots__ = ("config", "event", "node_id")

    def __init__(self, node_id: str) -> None:
        self.node_id = node_id
        self.event = threading.Event()
        self.config: NodeConfig | None = None


class ConfigWatchHub:
    r"""One reader of the store's config change feed, fanned out to this process's watches.

    A watch :meth:`subscribe`\ s for its node; the reader thread reads the current configs of the
    nodes that changed (in one store call) and wakes their watches with them (all watches, without
    configs, after an outage or on the first read). The thread runs while anyone is subscribed.
    """

    def __init__(self, store: Store, *, block_ms: int = HUB_BLOCK_MS, retry_s: float = 0.5) -> None:
        self.store = store
        self.block_ms = block_ms
        self.retry_s = retry_s
        self._lock = threading.Lock()
        self._watches: dict[str, set[HubWatch]] = {}
        self._thread: threading.Thread | None = None
        self._cursor = ""
        #: Feed reads so far (for tests and the benchmark: one reader however many watches).
        self.reads = 0

    @property
    def watches(self) -> int:
        with self._lock:
            return sum(len(e) for e in self._watches.values())

    def subscribe(self, node_id: str) -> HubWatch:
        """A watch whose Event is set whenever ``node_id``'s config may have changed (set at once: read first)."""
        watch = HubWatch(node_id)
        watch.event.set()
        with self._lock:
            self._watches.setdefault(node_id, set()).add(watch)
            if self._thread is None or not self._thread.is_alive():
                # The cursor is taken before this watch's first read: nothing published after is missed.
                try:
                    self._cursor = self.store.wait_config_changes("", block_ms=0).cursor
                except STORE_ERRORS:
                    self._cursor = ""  # the thread takes it when the store is back
                self._thread = threading.Thread(target=self._run, name="config-watch-hub", daemon=True)
                self._thread.start()
        return watch

    def unsubscribe(self, watch: HubWatch) -> None:
        with self._lock:
            watches = self._watches.get(watch.node_id)
            if watches is not None:
                watches.discard(watch)
                if not watches:
                    del self._watches[watch.node_id]

    def take(self, watch: HubWatch) -> NodeConfig | None:
        """Clear the watch's Event and take the config handed to it with the wake-up (None: none)."""
        with self._lock:
            watch.event.clear()  # before the read that follows: a change during it sets it again
            config, watch.config = watch.config, None
            return config

    def wake(self, node_ids: Iterable[str] | None = None) -> None:
        """Wake the watches of ``node_ids`` (None: every watch) to check whether to stop: a stream that
        ended, the server stopping. They re-read their config, which is harmless."""
        self._wake(ConfigChanges("", tuple(node_ids or ()), node_ids is None))

    def _wake(self, changes: ConfigChanges, configs: dict[str, NodeConfig] | None = None) -> None:
        with self._lock:
            if changes.everything:
                targets = [w for watches in self._watches.values() for w in watches]
            else:
                targets = [w for n in changes.node_ids for w in self._watches.get(n, ())]
            for w in targets:  # under the lock: take() swaps it out atomically
                w.config = configs.get(w.node_id) if configs is not None and not changes.everything else None
        for w in targets:
            w.event.set()

    def _current(self, changes: ConfigChanges) -> dict[str, NodeConfig] | None:
        """The current configs of the changed nodes that have a watch, in one store call (None: let the
        watches read their own, e.g. the store failing now)."""
        if changes.everything:
            return None
        with self._lock:
            wanted = [n for n in changes.node_ids if n in self._watches]
        if not wanted:
            return {}
        try:
            return self.store.get_configs(wanted)
        except STORE_ERRORS as exc:
            log.warning("reading the changed configs failed; each watch reads its own", extra={"error": str(exc)})
            return None

    def _run(self) -> None:
        while True:
            with self._lock:
                if not self._watches:
                    self._thread = None
                    return
                cursor = self._cursor
            started = time.monotonic()
            try:
                changes = self.store.wait_config_changes(cursor, block_ms=self.block_ms)
                self.reads += 1
            except Exception as exc:  # noqa: BLE001 - an outage, or the store closed under the read at shutdown
                if self.watches:
                    log.warning("config change feed interrupted; re-reading", extra={"error": str(exc)})
                time.sleep(self.retry_s)
                with self._lock:
                    self._cursor = ""  # start again from the tail, and wake everyone to re-read
                continue
            with self._lock:
                self._cursor = changes.cursor
            if changes.everything or changes.node_ids:
                self._wake(changes, self._current(changes))
            elif time.monotonic() - started < self.block_ms / 10000.0:
                time.sleep(self.retry_s)  # a closed store answers at once: do not spin


class ConfigStore:
    """Per-node configs with revisions and a change feed (see module doc)."""

    def __init__(self, store: Store, *, log_maxlen: int = LOG_MAXLEN) -> None:
        self.store = store
        self.log_maxlen = log_maxlen
        self.hub = ConfigWatchHub(store)

    # -- writes -------------------------------------------------------------------------

    def publish(self, config: NodeConfig, *, fence: LeaderLease | None = None) -> Published:
        """Store ``config`` as the node's current one; a new revision only when it changed."""
        return self.publish_many([config], fence=fence)[0]

    def publish_many(self, configs: Iterable[NodeConfig], *, fence: LeaderLease | None = None,
                     docs: Sequence[DocWrite] = (), values: Sequence[tuple[KeyLike, Any, float | None]] = (),
                     round_state: RoundState | None = None) -> list[Published]:
        """Publish several configs, with the docs, values and round they go with, in one atomic
        step (all or nothing; see ``Store.publish_configs``)."""
        configs = list(configs)
        for cfg in configs:
            _check_node_id(cfg.node_id)
        try:
            out = self.store.publish_configs(configs, fence=fence.fence() if fence is not None else None,
                                             log_len=self.log_maxlen, docs=docs, values=values,
                                             round_state=round_state)
        except LeaseLost as exc:
            raise NotLeader(exc.name, exc.holder) from None
        for cfg, p in zip(configs, out, strict=True):
            if p.changed:
                log.info("config published", extra={"node_id": p.node_id, "revision": p.revision,
                                                    "round_id": cfg.round_id})
        return out

    # -- reads --------------------------------------------------------------------------

    def get(self, node_id: str) -> NodeConfig:
        """The node's current config; NotFound (naming node_id) before any."""
        found = self.get_or_none(node_id)
        if found is None:
            raise NotFound(f"node_id: node {node_id!r} has no config yet")
        return found

    def get_or_none(self, node_id: str) -> NodeConfig | None:
        return self.store.get_config(_check_node_id(node_id))

    def revision(self, node_id: str) -> int:
        """The node's latest revision (0: no config yet)."""
        return self.revisions([node_id])[node_id]

    def epoch(self) -> int:
        """The store's config epoch (0: nothing published since it was empty)."""
        return self.store.config_epoch()

    def revisions(self, node_ids: Iterable[str]) -> dict[str, int]:
        return self.store.config_revisions([_check_node_id(n) for n in node_ids])

    def watch(self, node_id: str, after_revision: int = 0, *, block_ms: int = 1000,
              should_stop: Callable[[], bool] = lambda: False, retry_s: float = 0.5,
              epoch: int = 0) -> Iterator[NodeConfig]:
        """Yield the node's config when newer than (``epoch``, ``after_revision``), then every new one.

        Runs until ``should_stop()`` is true (checked at least every ``block_ms``). Within an
        epoch revisions only go up; a watcher that fell far behind may skip intermediate
        revisions but always gets the latest. ``epoch`` 0: the store's current one.
        """
        if after_revision < 0:
            raise InvalidArgument("after_revision", f"{after_revision}", ">= 0")
        _check_node_id(node_id)
        last, seen_epoch = int(after_revision), int(epoch)
        watch = self.hub.subscribe(node_id)
        wake = watch.event
        # Spread over [RESYNC_S / 2, 3 RESYNC_S / 2): watches opened together do not re-read together.
        resync_at = time.monotonic() + RESYNC_S * (0.5 + random.random())
        try:
            while not should_stop():
                if not wake.is_set() and time.monotonic() < resync_at:
                    wake.wait(block_ms / 1000.0)
                    continue
                handed = self.hub.take(watch)  # clears the Event first: a change during the read sets it again
                resync_at = time.monotonic() + RESYNC_S * (0.5 + random.random())
                newer = _newer_than(handed, last, seen_epoch) if handed is not None else None
                try:
                    if newer is None:
                        newer = self.store.wait_configs(node_id, last, block_ms=0, epoch=seen_epoch)
                except STORE_ERRORS as exc:
                    log.warning("config watch interrupted; re-reading", extra={"node_id": node_id, "error": str(exc)})
                    # Wait on the watch's own event (set when its stream ends or the server stops), not
                    # in 50 ms steps: thousands of watches failing at once must not poll the GIL away.
                    wake.wait(retry_s * (1.0 + random.random()))
                    wake.set()
                    continue
                for cfg in newer:
                    if cfg.epoch != seen_epoch and seen_epoch:  # the store lost its data: a new count
                        last = 0
                    if cfg.revision > last or cfg.epoch != seen_epoch:
                        last, seen_epoch = cfg.revision, cfg.epoch
                        yield cfg
        finally:
            self.hub.unsubscribe(watch)


def _newer_than(current: NodeConfig, after_revision: int, epoch: int) -> list[NodeConfig] | None:
    """What ``Store.wait_configs(node, after_revision, block_ms=0, epoch=epoch)`` answers when the node's
    current config is ``current``: nothing, or ``current`` alone when it is the next revision; None when
    only the store can say (revisions in between, which its log holds, or another epoch)."""
    if epoch and current.epoch != epoch:
        return None
    if current.revision <= after_revision:
        return []
    return [current] if current.revision == after_revision + 1 else None
