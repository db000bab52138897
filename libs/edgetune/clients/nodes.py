"""The coordinator as a node's agent calls it: ``RegisterNode``, ``Heartbeat`` and ``WatchConfig``,
with library records in and out (the node's side of :mod:`edgetune.proto.serde.coordinator`).

A failed call raises :class:`~edgetune.clients.calls.CallFailed` with the status code, so the agent
retries without knowing the transport.
"""

from __future__ import annotations

import grpc

from edgetune.clients.calls import Stream, translated
from edgetune.proto.serde.coordinator import (
    announcement_to_proto,
    config_from_proto,
    heartbeat_to_proto,
    registered_from_proto,
    reregister_from_proto,
    watch_config_request,
)
from edgetune.proto.v1 import coordinator_pb2_grpc
from edgetune.store import Heartbeat, NodeAnnouncement, NodeConfig, NodeRegistered

#: Deadline of a unary call (a config watch has none: it is a long-lived stream).
RPC_TIMEOUT_S = 5.0


class NodesClient:
    """The node-facing RPCs of a coordinator reached over ``channel``."""

    def __init__(self, channel: grpc.Channel, timeout_s: float = RPC_TIMEOUT_S) -> None:
        self._stub = coordinator_pb2_grpc.CoordinatorStub(channel)
        self.timeout_s = timeout_s

    def register(self, node: NodeAnnouncement) -> NodeRegistered:
        with translated():
            reply = self._stub.RegisterNode(announcement_to_proto(node), timeout=self.timeout_s)
        return registered_from_proto(reply)

    def heartbeat(self, node_id: str, beat: Heartbeat) -> bool:
        """Send one beat; True when the coordinator has forgotten the node (register again)."""
        with translated():
            reply = self._stub.Heartbeat(heartbeat_to_proto(node_id, beat), timeout=self.timeout_s)
        return reregister_from_proto(reply)

    def watch_configs(self, node_id: str, after_revision: int = 0, after_epoch: int = 0) -> Stream[NodeConfig]:
        """The node's configs newer than (``after_epoch``, ``after_revision``), as they are pushed;
        ``close()`` from any thread ends the watch (iterating then raises CallFailed ``CANCELLED``)."""
        return Stream(self._stub.WatchConfig(watch_config_request(node_id, after_revision, after_epoch)),
                      config_from_proto)
