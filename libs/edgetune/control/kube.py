"""Kubernetes awareness: which Jetson nodes the cluster lets us use right now.

The coordinator lists and watches Nodes carrying ``edgetune.io/jetson=true`` (labels
``edgetune.io/device-model`` and ``edgetune.io/jetpack`` describe them) with the official
``kubernetes`` client, and flags the registry's agents on unusable nodes as unavailable, so
rounds are planned around them:

- cordoned (``spec.unschedulable``; ``kubectl drain`` cordons first),
- NotReady / Unknown (the ``Ready`` condition is not ``True``),
- tainted ``NoExecute`` (``node.kubernetes.io/unreachable``, ``out-of-service``, autoscaler
  scale-down ...): pods are being evicted,
- being deleted, or deleted.

An agent maps to its Kubernetes node by its ``edgetune.io/k8s-node`` label (the DaemonSet
sets it from ``spec.nodeName``), else its hostname, else its node id. Agents on nodes the
watcher does not know (outside the cluster, or a selector that misses them) are left alone.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from edgetune.control.registry import NodeRegistry
from edgetune.store import NodeRecord

log = logging.getLogger(__name__)

JETSON_LABEL_SELECTOR = "edgetune.io/jetson=true"
LABEL_DEVICE_MODEL = "edgetune.io/device-model"
LABEL_JETPACK = "edgetune.io/jetpack"
#: Registry label (set by the agent) naming the Kubernetes node it runs on.
LABEL_K8S_NODE = "edgetune.io/k8s-node"
HTTP_GONE = 410


@dataclass(frozen=True)
class KubeNodeStatus:
    """What the cluster says about one node: ``available`` False with a ``reason`` otherwise."""

    name: str
    available: bool
    reason: str = ""
    device_model: str = ""
    jetpack: str = ""
    labels: dict = field(default_factory=dict)
    resource_version: str = ""


def node_status(node: Any) -> KubeNodeStatus:
    """The availability of a ``V1Node`` (see the module doc for the rules, checked in that order)."""
    meta, spec, status = node.metadata, node.spec, node.status
    labels = dict(meta.labels or {})
    reasons: list[str] = []
    if meta.deletion_timestamp is not None:
        reasons.append("being deleted")
    if spec is not None and spec.unschedulable:
        reasons.append("cordoned (unschedulable: draining or maintenance)")
    ready = None
    for cond in (status.conditions or []) if status is not None else []:
        if cond.type == "Ready":
            ready = cond
    if ready is None:
        reasons.append("NotReady (no Ready condition reported)")
    elif ready.status != "True":
        detail = ": ".join(x for x in (ready.reason, ready.message) if x)
        reasons.append(f"NotReady (Ready={ready.status}{', ' + detail if detail else ''})")
    for taint in (spec.taints or []) if spec is not None else []:
        if taint.effect == "NoExecute":
            reasons.append(f"tainted {taint.key}:NoExecute")
    return KubeNodeStatus(name=meta.name, available=not reasons, reason="; ".join(reasons),
                          device_model=labels.get(LABEL_DEVICE_MODEL, ""), jetpack=labels.get(LABEL_JETPACK, ""),
                          labels=labels, resource_version=meta.resource_version or "")


def deserialize(api_client: Any, doc: Mapping[str, Any] | str, klass: str) -> Any:
    """A recorded API response (dict or JSON text) as the client's model ``klass`` ("V1NodeList")."""
    text = doc if isinstance(doc, str) else json.dumps(doc)
    return api_client.deserialize(text, klass, "application/json")


def kube_node_name(record: NodeRecord) -> str:
    return record.labels.get(LABEL_K8S_NODE) or record.hostname or record.node_id


def apply_to_registry(registry: NodeRegistry, statuses: Mapping[str, KubeNodeStatus]) -> dict[str, str | None]:
    """Flag (or clear) registered agents by their Kubernetes node; returns the changes made."""
    changes: dict[str, str | None] = {}
    for record in registry.nodes():
        status = statuses.get(kube_node_name(record))
        if status is None:
            continue  # not a node the watcher knows: leave any flag as it is
        reason = None if status.available else status.reason
        if reason != record.unavailable_reason:
            registry.set_unavailable(record.node_id, reason)
            changes[record.node_id] = reason
            log.info("node availability changed", extra={"node_id": record.node_id, "k8s_node": status.name,
                                                         "unavailable": reason})
    return changes


class KubeNodeWatcher:
    """List, then watch, the Jetson Nodes; keeps :attr:`statuses` current.

    ``core_v1`` is a ``kubernetes.client.CoreV1Api`` (in cluster: ``config.load_incluster_config()``).
    ``on_change(statuses)`` runs after the list and after every event that changed a node.
    """

    def __init__(self, core_v1: Any, label_selector: str = JETSON_LABEL_SELECTOR, *,
                 on_change: Callable[[dict[str, KubeNodeStatus]], None] | None = None,
                 watch_timeout_s: int = 300, retry_s: float = 5.0) -> None:
        self.core_v1 = core_v1
        self.label_selector = label_selector
        self.on_change = on_change
        self.watch_timeout_s = watch_timeout_s
        self.retry_s = retry_s
        self.statuses: dict[str, KubeNodeStatus] = {}
        self.resource_version: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._watch: Any = None

    def unavailable(self) -> dict[str, str]:
        return {name: s.reason for name, s in self.statuses.items() if not s.available}

    def sync(self) -> dict[str, KubeNodeStatus]:
        """List the nodes (replacing what we knew); remembers the list's resourceVersion."""
        nodes = self.core_v1.list_node(label_selector=self.label_selector)
        self.statuses = {n.metadata.name: node_status(n) for n in nodes.items}
        self.resource_version = nodes.metadata.resource_version
        self._changed()
        return self.statuses

    def apply_event(self, event: Mapping[str, Any]) -> KubeNodeStatus | None:
        """Apply one watch event (``{"type": ..., "object": V1Node}``); returns the node's new status."""
        kind, obj = event.get("type"), event.get("object")
        if obj is None:
            return None
        if kind in ("ADDED", "MODIFIED"):
            status = node_status(obj)
        elif kind == "DELETED":
            status = KubeNodeStatus(obj.metadata.name, False, "deleted from the cluster",
                                    labels=dict(obj.metadata.labels or {}))
        else:  # BOOKMARK (only moves the resourceVersion) or anything newer than we know
            return None
        if obj.metadata.resource_version:
            self.resource_version = obj.metadata.resource_version
        if self.statuses.get(status.name) != status:
            self.statuses[status.name] = status
            self._changed()
        return status

    def watch_once(self) -> int:
        """One watch request from the last resourceVersion, until the server ends it; events seen.

        An expired resourceVersion (410 Gone) re-lists.
        """
        from kubernetes import watch
        from kubernetes.client.exceptions import ApiException

        if self.resource_version is None:
            self.sync()
        self._watch = watch.Watch()
        seen = 0
        try:
            for event in self._watch.stream(self.core_v1.list_node, label_selector=self.label_selector,
                                            resource_version=self.resource_version,
                                            timeout_seconds=self.watch_timeout_s, allow_watch_bookmarks=True):
                seen += 1
                self.apply_event(event)
                if event.get("type") == "BOOKMARK" and self._watch.resource_version:
                    self.resource_version = self._watch.resource_version
                if self._stop.is_set():
                    break
        except ApiException as exc:
            if exc.status != HTTP_GONE:
                raise
            log.info("watch resourceVersion expired; re-listing", extra={"selector": self.label_selector})
            self.sync()
        finally:
            self._watch.stop()
        return seen

    def start(self) -> KubeNodeWatcher:
        if self._thread is None:
            self._stop.clear()
            self._thread = threading.Thread(target=self._run, name="kube-node-watch", daemon=True)
            self._thread.start()
        return self

    def stop(self, timeout_s: float = 5.0) -> None:
        self._stop.set()
        if self._watch is not None:
            self._watch.stop()
        if self._thread is not None:
            self._thread.join(timeout_s)
            self._thread = None

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.watch_once()
            except Exception as exc:  # API server away, RBAC, network: keep the last view, retry
                log.warning("node watch failed; retrying", extra={"error": str(exc), "retry_s": self.retry_s})
                self.resource_version = None  # re-list on the next round
                self._stop.wait(self.retry_s)

    def _changed(self) -> None:
        if self.on_change is not None:
            try:
                self.on_change(dict(self.statuses))
            except Exception:
                log.exception("node watch on_change failed")
