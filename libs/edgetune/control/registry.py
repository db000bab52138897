"""Node registry: which Jetsons take part, what they are, and whether they are alive.

Everything lives in the :class:`~edgetune.store.Store`, so a restarted (or a
second) coordinator resumes from it:

    doc node/<node_id>              NodeRegistration: id, hostname, address, device spec, labels, budget
    kv heartbeat/<node_id>          Heartbeat, expires ``heartbeat_ttl_s`` after the last beat
    kv last-seen/<node_id>          Heartbeat (no expiry): the last beat, kept after the TTL one is gone
    kv unavailable/<node_id>        reason (no expiry): cordoned / draining / NotReady (kube.py)

A node is *live* while its heartbeat key exists; once it expires the node is *lost* and is
planned around until it beats again. Registration counts as a beat. A node flagged
unavailable (Kubernetes cordon, drain, NotReady) is alive but not plannable.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from edgetune import validation
from edgetune.errors import FailedPrecondition, InvalidArgument, NotFound
from edgetune.store import (
    AGENT_STATES,
    STATE_LOST,
    STATE_UNAVAILABLE,
    DocWrite,
    Heartbeat,
    NodeRecord,
    NodeRegistration,
    RevisionConflict,
    Store,
)

log = logging.getLogger(__name__)

DOC_KIND = "node"
DEFAULT_HEARTBEAT_TTL_S = 10.0
#: Agents beat this often: a third of the TTL, so two lost beats in a row still keep the node.
HEARTBEAT_INTERVAL_FRACTION = 1.0 / 3.0

_MAX_CAS_ATTEMPTS = 20
#: A refused config's reason is kept to this many characters (it comes from the agent).
MAX_REASON_CHARS = 500


def _check_node_id(node_id: str, field_name: str = "node_id") -> str:
    return validation.identifier(node_id, field_name)


class NodeRegistry:
    """Registration, heartbeats and budgets of the nodes, over a Store (see module doc)."""

    def __init__(self, store: Store, *, heartbeat_ttl_s: float = DEFAULT_HEARTBEAT_TTL_S,
                 clock_s: Any = time.time) -> None:
        if not (isinstance(heartbeat_ttl_s, int | float) and heartbeat_ttl_s > 0):
            raise InvalidArgument("heartbeat_ttl_s", f"{heartbeat_ttl_s!r}", "seconds > 0")
        self.store = store
        self.heartbeat_ttl_s = float(heartbeat_ttl_s)
        self._now_s = clock_s

    @property
    def heartbeat_interval_s(self) -> float:
        """How often agents should beat."""
        return self.heartbeat_ttl_s * HEARTBEAT_INTERVAL_FRACTION

    # -- writes -------------------------------------------------------------------------

    def register(self, node: NodeRecord) -> NodeRecord:
        """Store (or refresh) a node and count it as a heartbeat; returns it with its id.

        An empty ``node_id`` gets the hostname, else a fresh ``node-<hex>``. Re-registering
        keeps the stored power budget when the new registration has none (an operator's
        UpdateBudget survives an agent restart).
        """
        if node.state and node.state not in AGENT_STATES:
            raise InvalidArgument("node.state", f"{node.state!r} is not an agent state", ", ".join(AGENT_STATES))
        node_id = node.node_id.strip() or node.hostname.strip() or f"node-{uuid.uuid4().hex[:12]}"
        budget = validation.optional(validation.power_budget_w, node.power_budget_w, "node.power_budget_w")
        if budget is None:
            old = self._registration(node_id)
            budget = old.power_budget_w if old else None
        record = replace(node, node_id=node_id, power_budget_w=budget, registered_s=self._now_s())
        beat = Heartbeat(state=node.state or "ready", current_mode=node.current_mode, power_w=node.power_w,
                         applied_revision=node.applied_revision)
        # The registration and its first beat together: never a registered node that looks lost.
        self.store.publish_configs([], docs=[DocWrite(DOC_KIND, node_id, record.registration().to_dict())],
                                   values=self._beat_items(node_id, beat))
        log.info("node registered", extra={"node_id": node_id, "device": record.device_model})
        return self.get(node_id)

    def heartbeat(self, node_id: str, *, state: str = "", current_mode: Mapping | None = None,
                  power_w: float | None = None, applied_revision: int = 0, applied_epoch: int = 0,
                  refused_revision: int = 0, refused_reason: str = "") -> bool:
        """Refresh the node's TTL; False when the node is not registered (it should register again).

        ``refused_revision`` / ``refused_reason``: the last config the agent refused (kept with
        the beat, so ListNodes shows it until the agent applies a config again)."""
        _check_node_id(node_id)
        if state and state not in AGENT_STATES:
            raise InvalidArgument("state", f"{state!r} is not an agent state", ", ".join(AGENT_STATES))
        if self.store.get_doc(DOC_KIND, node_id, missing_ok=True) is None:
            return False
        self._beat(node_id, Heartbeat(state=state or "ready", current_mode=dict(current_mode) if current_mode else None,
                                      power_w=power_w, applied_revision=int(applied_revision),
                                      applied_epoch=int(applied_epoch), refused_revision=int(refused_revision),
                                      refused_reason=str(refused_reason)[:MAX_REASON_CHARS]))
        return True

    def _beat(self, node_id: str, beat: Heartbeat) -> None:
        self.store.set_many(self._beat_items(node_id, beat))

    def _beat_items(self, node_id: str, beat: Heartbeat) -> list[tuple[tuple[str, str], Any, float | None]]:
        doc = replace(beat, ts_s=self._now_s()).to_dict()
        # Both at once: the TTL one says "alive", the other remembers when.
        return [(("heartbeat", node_id), doc, self.heartbeat_ttl_s), (("last-seen", node_id), doc, None)]

    def _registration(self, node_id: str) -> NodeRegistration | None:
        found = self.store.get_doc(DOC_KIND, node_id, missing_ok=True)
        return NodeRegistration.from_dict(found.doc) if found is not None else None

    def update_budget(self, node_id: str, power_budget_w: float | None) -> NodeRecord:
        """Set (or clear, with None) the node's power budget; NotFound for an unknown node."""
        _check_node_id(node_id)
        budget = validation.optional(validation.power_budget_w, power_budget_w, "power_budget_w")
        # Optimistic concurrency: a concurrent re-registration must not be lost (bounded retries).
        for _attempt in range(_MAX_CAS_ATTEMPTS):
            current = self.store.get_doc(DOC_KIND, node_id, missing_ok=True)
            if current is None:
                raise NotFound(f"node_id: node {node_id!r} is not registered")
            reg = replace(NodeRegistration.from_dict(current.doc), power_budget_w=budget)
            try:
                self.store.put_doc(DOC_KIND, node_id, reg.to_dict(), expected_revision=current.revision)
                return self.get(node_id)
            except RevisionConflict:
                continue
        raise FailedPrecondition(f"node {node_id!r} changed {_MAX_CAS_ATTEMPTS} times while updating its budget")

    def set_unavailable(self, node_id: str, reason: str | None) -> None:
        """Flag a node as not plannable (cordoned, draining, NotReady) or clear the flag (None)."""
        if reason:
            self.store.set(("unavailable", node_id), reason)
        else:
            self.store.delete(("unavailable", node_id))

    def deregister(self, node_id: str) -> bool:
        for key in (("heartbeat", node_id), ("last-seen", node_id), ("unavailable", node_id)):
            self.store.delete(key)
        return self.store.delete_doc(DOC_KIND, node_id)

    # -- reads --------------------------------------------------------------------------

    def get(self, node_id: str) -> NodeRecord:
        """The node with its liveness; NotFound naming ``node_id`` when not registered."""
        _check_node_id(node_id)
        found = self._registration(node_id)
        if found is None:
            raise NotFound(f"node_id: node {node_id!r} is not registered")
        return self._with_liveness([NodeRecord.from_registration(found)])[0]

    def exists(self, node_id: str) -> bool:
        return self.store.get_doc(DOC_KIND, node_id, missing_ok=True) is not None

    def nodes(self) -> list[NodeRecord]:
        """Every registered node, sorted by id, with liveness."""
        ids = self.store.list_docs(DOC_KIND)
        records = [NodeRecord.from_registration(NodeRegistration.from_dict(found.doc))
                   for found in self.store.get_docs(DOC_KIND, ids)
                   if found is not None]  # None: deleted between the index read and here
        return self._with_liveness(records)

    def live_nodes(self) -> list[NodeRecord]:
        return [n for n in self.nodes() if n.live]

    def lost_nodes(self) -> list[NodeRecord]:
        """Registered nodes whose heartbeat expired."""
        return [n for n in self.nodes() if not n.live]

    def plannable_nodes(self) -> list[NodeRecord]:
        """Live nodes not flagged unavailable: the ones a round may use."""
        return [n for n in self.nodes() if n.plannable]

    def plannable_ids(self, node_ids: Sequence[str]) -> set[str]:
        """Which of ``node_ids`` are plannable now (one pipelined read; unregistered ones are not)."""
        ids = list(node_ids)
        if not ids:
            return set()
        raw = self.store.get_many([key for i in ids for key in (("heartbeat", i), ("unavailable", i))])
        return {i for k, i in enumerate(ids) if raw[2 * k] is not None and raw[2 * k + 1] is None}

    def _with_liveness(self, records: list[NodeRecord]) -> list[NodeRecord]:
        if not records:
            return []
        raw = self.store.get_many([key for r in records
                                   for key in (("heartbeat", r.node_id), ("last-seen", r.node_id),
                                               ("unavailable", r.node_id))])
        out = []
        for i, r in enumerate(records):
            beat_doc, seen_doc, unavailable = raw[3 * i: 3 * i + 3]
            live = beat_doc is not None
            seen_any = beat_doc if live else seen_doc
            seen = Heartbeat.from_dict(seen_any) if seen_any is not None else None
            if not live:
                state = STATE_LOST
            elif unavailable:
                state = STATE_UNAVAILABLE
            else:
                state = seen.state if seen is not None else "ready"
            out.append(replace(r, live=live, state=state, last_seen_s=seen.ts_s if seen else None,
                               current_mode=dict(seen.current_mode) if seen and seen.current_mode else None,
                               power_w=seen.power_w if seen else None,
                               applied_revision=seen.applied_revision if seen else 0,
                               unavailable_reason=unavailable, applied_epoch=seen.applied_epoch if seen else 0,
                               refused_revision=seen.refused_revision if seen else 0,
                               refused_reason=seen.refused_reason if seen else ""))
        return out
