"""Config push: each node's current configuration, with a revision, and a change feed.

Layout (``ns`` = the store's namespace)::

    ns:config:<node_id>       hash: config (JSON), rev (int, per node: 1, 2, ...), digest
    ns:config-log:<node_id>   stream of every new revision: fields rev, config (capped, ~100)

:meth:`ConfigStore.publish` runs one Lua script: it compares the new config's *digest* (what
to run: mode, batch size, workload, role, round, budget, restore) with the stored one and,
only when it differs, bumps the revision, stores it and appends it to the log. Re-planning
therefore gives new revisions only to nodes whose config really changed; ``valid_from`` /
``reason`` alone do not make a change. With a leader lease as *fence* the script also checks
that the lease is still held by the caller, so a deposed leader cannot publish.

:meth:`ConfigStore.watch` reads the current config and the log's last entry id in one
transaction (publish is atomic, so they agree), yields the config when newer than the
caller's revision, then blocks on ``XREAD`` from that id: nothing published between the read
and the wait can be missed (unlike pub/sub). After a Redis outage it re-reads and goes on.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import Any, cast

import redis

from edgetune.coordination.leader import REDIS_DOWN, LeaderLease, NotLeader
from edgetune.coordination.store import Store
from edgetune.errors import InvalidArgument, NotFound
from edgetune.powermodes.mode import PowerMode

log = logging.getLogger(__name__)

LOG_MAXLEN = 100
#: Fields that say *when* or *why*, not *what*: changing only these is not a new config.
NON_IDENTITY_FIELDS = ("node_id", "revision", "valid_from_s", "valid_until_s", "reason")

_PUBLISH = """
if #KEYS >= 3 and redis.call('GET', KEYS[3]) ~= ARGV[4] then return {-1, 0} end
local cur = redis.call('HMGET', KEYS[1], 'rev', 'digest')
local rev = 0
if cur[1] then rev = tonumber(cur[1]) end
if cur[2] == ARGV[2] then return {0, rev} end
rev = rev + 1
redis.call('HSET', KEYS[1], 'config', ARGV[1], 'rev', rev, 'digest', ARGV[2])
redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[3], '*', 'rev', rev, 'config', ARGV[1])
return {1, rev}
"""


@dataclass(frozen=True)
class NodeConfig:
    """What a node should run. ``mode`` None with ``restore`` True: go back to the node's own mode.

    Times are epoch seconds; ``workload`` is the Workload as a JSON dict (name, dataset, ...).
    """

    node_id: str
    mode: PowerMode | None = None
    batch_size: int = 0
    workload: dict = field(default_factory=dict)
    role: str = "train"
    round_id: str = ""
    valid_from_s: float | None = None
    valid_until_s: float | None = None
    power_budget_w: float | None = None
    restore: bool = False
    reason: str = ""
    revision: int = 0

    def to_json(self) -> dict:
        out = asdict(self)
        out["mode"] = self.mode.as_dict() if self.mode is not None else None
        return out

    @classmethod
    def from_json(cls, doc: Mapping[str, Any], revision: int | None = None) -> NodeConfig:
        values = dict(doc)
        values["mode"] = PowerMode.from_mapping(values["mode"]) if values.get("mode") else None
        if revision is not None:
            values["revision"] = revision
        known = {f for f in cls.__dataclass_fields__}
        return cls(**{k: v for k, v in values.items() if k in known})

    def digest(self) -> str:
        """Hash of what to run (see :data:`NON_IDENTITY_FIELDS`)."""
        identity = {k: v for k, v in self.to_json().items() if k not in NON_IDENTITY_FIELDS}
        return hashlib.sha256(json.dumps(identity, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


@dataclass(frozen=True)
class Published:
    node_id: str
    revision: int
    changed: bool


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


class ConfigStore:
    """Per-node configs with revisions and a change feed (see module doc)."""

    def __init__(self, store: Store, *, log_maxlen: int = LOG_MAXLEN) -> None:
        self.store = store
        self.log_maxlen = log_maxlen
        self._publish = store.client.register_script(_PUBLISH)

    def _keys(self, node_id: str) -> tuple[str, str]:
        if not isinstance(node_id, str) or not node_id:
            raise InvalidArgument("node_id", f"{node_id!r} is not a node id", "a non-empty string")
        return self.store.key("config", node_id), self.store.key("config-log", node_id)

    # -- writes -------------------------------------------------------------------------

    def publish(self, config: NodeConfig, *, fence: LeaderLease | None = None) -> Published:
        """Store ``config`` as the node's current one; a new revision only when it changed."""
        return self.publish_many([config], fence=fence)[0]

    def publish_many(self, configs: Iterable[NodeConfig], *, fence: LeaderLease | None = None) -> list[Published]:
        """Publish several configs in one round trip (each node atomically; see module doc)."""
        configs = list(configs)
        pipe = self.store.client.pipeline(transaction=False)
        for cfg in configs:
            keys = list(self._keys(cfg.node_id))
            args: list[Any] = [json.dumps(replace(cfg, revision=0).to_json(), separators=(",", ":")),
                               cfg.digest(), self.log_maxlen]
            if fence is not None:
                lease_key, holder = fence.fence_key()
                keys.append(lease_key)
                args.append(holder)
            self._publish(keys=keys, args=args, client=pipe)
        results = pipe.execute()
        out = []
        for cfg, (code, rev) in zip(configs, results, strict=True):
            if int(code) < 0:
                raise NotLeader(fence.name if fence else "", None)
            out.append(Published(cfg.node_id, int(rev), bool(int(code))))
            if int(code):
                log.info("config published", extra={"node_id": cfg.node_id, "revision": int(rev),
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
        key, _ = self._keys(node_id)
        raw, rev = cast("list[Any]", self.store.client.hmget(key, ["config", "rev"]))
        if raw is None:
            return None
        return NodeConfig.from_json(json.loads(raw), int(rev))

    def revision(self, node_id: str) -> int:
        """The node's latest revision (0: no config yet)."""
        key, _ = self._keys(node_id)
        rev = self.store.client.hget(key, "rev")
        return int(rev) if rev is not None else 0

    def revisions(self, node_ids: Iterable[str]) -> dict[str, int]:
        ids = list(node_ids)
        pipe = self.store.client.pipeline(transaction=False)
        for node_id in ids:
            pipe.hget(self._keys(node_id)[0], "rev")
        return {n: int(r) if r is not None else 0 for n, r in zip(ids, pipe.execute(), strict=True)}

    def watch(self, node_id: str, after_revision: int = 0, *, block_ms: int = 1000,
              should_stop: Callable[[], bool] = lambda: False, retry_s: float = 0.5) -> Iterator[NodeConfig]:
        """Yield the node's config when newer than ``after_revision``, then every new one.

        Runs until ``should_stop()`` is true (checked at least every ``block_ms``). Revisions
        only go up; a watcher that fell far behind may skip intermediate revisions but always
        gets the latest.
        """
        if after_revision < 0:
            raise InvalidArgument("after_revision", f"{after_revision}", ">= 0")
        key, log_key = self._keys(node_id)
        client = self.store.client
        last = int(after_revision)
        cursor: str | None = None
        while not should_stop():
            try:
                if cursor is None:
                    pipe = client.pipeline(transaction=True)
                    pipe.hmget(key, ["config", "rev"])
                    pipe.xrevrange(log_key, count=1)
                    (raw, rev), tail = cast("list[Any]", pipe.execute())
                    cursor = _text(tail[0][0]) if tail else "0-0"
                    if raw is not None and int(rev) > last:
                        last = int(rev)
                        yield NodeConfig.from_json(json.loads(raw), last)
                reply = cast("list[Any]", client.xread({log_key: cursor}, count=self.log_maxlen, block=block_ms))
                for _stream, entries in reply or []:
                    for entry_id, fields in entries:
                        cursor = _text(entry_id)
                        rev = int(fields[b"rev"])
                        if rev > last:
                            last = rev
                            yield NodeConfig.from_json(json.loads(fields[b"config"]), rev)
            except REDIS_DOWN + (redis.ResponseError,) as exc:
                log.warning("config watch interrupted; re-reading", extra={"node_id": node_id, "error": str(exc)})
                cursor = None
                deadline = time.monotonic() + retry_s
                while time.monotonic() < deadline and not should_stop():
                    time.sleep(min(0.05, retry_s))
