"""Config push: each node's current configuration, with a revision, and a change feed.

The store keeps, per node, the current :class:`~edgetune.coordination.store.NodeConfig`
with a revision (1, 2, ...) and a capped log of the recent ones (the Redis layout is in
:mod:`edgetune.coordination.store.redis_store`).

:meth:`ConfigStore.publish` compares the new config's *digest* (what to run: mode, batch
size, workload, role, round, budget, restore) with the stored one and, only when it differs,
bumps the revision, stores it and logs it, atomically per node. Re-planning therefore gives
new revisions only to nodes whose config really changed; ``valid_from`` / ``reason`` alone
do not make a change. With a leader lease as *fence* the store also checks, in the same
atomic step, that the lease is still held by the caller, so a deposed leader cannot publish.

:meth:`ConfigStore.watch` yields the config when newer than the caller's revision, then
blocks for newer ones (``Store.wait_configs``): nothing published between a read and the
wait is missed. After a store outage it waits ``retry_s`` and goes on.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Iterator

from edgetune.coordination.leader import LeaderLease, NotLeader
from edgetune.coordination.store import STORE_ERRORS, LeaseLost, NodeConfig, Published, Store
from edgetune.coordination.store.records import NON_IDENTITY_FIELDS
from edgetune.errors import InvalidArgument, NotFound

log = logging.getLogger(__name__)

LOG_MAXLEN = 100

__all__ = ["LOG_MAXLEN", "NON_IDENTITY_FIELDS", "ConfigStore", "NodeConfig", "Published"]


def _check_node_id(node_id: str) -> str:
    if not isinstance(node_id, str) or not node_id:
        raise InvalidArgument("node_id", f"{node_id!r} is not a node id", "a non-empty string")
    return node_id


class ConfigStore:
    """Per-node configs with revisions and a change feed (see module doc)."""

    def __init__(self, store: Store, *, log_maxlen: int = LOG_MAXLEN) -> None:
        self.store = store
        self.log_maxlen = log_maxlen

    # -- writes -------------------------------------------------------------------------

    def publish(self, config: NodeConfig, *, fence: LeaderLease | None = None) -> Published:
        """Store ``config`` as the node's current one; a new revision only when it changed."""
        return self.publish_many([config], fence=fence)[0]

    def publish_many(self, configs: Iterable[NodeConfig], *, fence: LeaderLease | None = None) -> list[Published]:
        """Publish several configs in one round trip (each node atomically; see module doc)."""
        configs = list(configs)
        for cfg in configs:
            _check_node_id(cfg.node_id)
        try:
            out = self.store.publish_configs(configs, fence=fence.fence() if fence is not None else None,
                                             log_len=self.log_maxlen)
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

    def revisions(self, node_ids: Iterable[str]) -> dict[str, int]:
        return self.store.config_revisions([_check_node_id(n) for n in node_ids])

    def watch(self, node_id: str, after_revision: int = 0, *, block_ms: int = 1000,
              should_stop: Callable[[], bool] = lambda: False, retry_s: float = 0.5) -> Iterator[NodeConfig]:
        """Yield the node's config when newer than ``after_revision``, then every new one.

        Runs until ``should_stop()`` is true (checked at least every ``block_ms``). Revisions
        only go up; a watcher that fell far behind may skip intermediate revisions but always
        gets the latest.
        """
        if after_revision < 0:
            raise InvalidArgument("after_revision", f"{after_revision}", ">= 0")
        _check_node_id(node_id)
        last = int(after_revision)
        while not should_stop():
            try:
                newer = self.store.wait_configs(node_id, last, block_ms=block_ms)
            except STORE_ERRORS as exc:
                log.warning("config watch interrupted; re-reading", extra={"node_id": node_id, "error": str(exc)})
                deadline = time.monotonic() + retry_s
                while time.monotonic() < deadline and not should_stop():
                    time.sleep(min(0.05, retry_s))
                continue
            for cfg in newer:
                if cfg.revision > last:
                    last = cfg.revision
                    yield cfg
