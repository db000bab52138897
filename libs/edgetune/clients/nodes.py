"""The coordinator as a node's agent calls it: ``RegisterNode``, ``Heartbeat`` and ``WatchConfig``,
with library records in and out (the node's side of :mod:`edgetune.proto.serde.coordinator`).

A failed call raises :class:`CallFailed` with the status code's name and details, so the agent
retries without knowing the transport.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import grpc

from edgetune.errors import EdgetuneError
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


class CallFailed(EdgetuneError):
    """A call to the coordinator failed (unreachable, refused, cancelled): ``code`` is the gRPC status
    code's name (``UNAVAILABLE``, ``CANCELLED``, ...), ``details`` its message."""

    def __init__(self, code: str, details: str) -> None:
        self.code, self.details = code, details
        super().__init__(f"{code}: {details}")


def _failed(exc: grpc.RpcError) -> CallFailed:
    code = exc.code() if callable(getattr(exc, "code", None)) else None
    details = exc.details() if callable(getattr(exc, "details", None)) else str(exc)
    return CallFailed(code.name if code is not None else "UNKNOWN", details or "")


class ConfigWatch:
    """One ``WatchConfig`` stream: iterate for the node's configs as they are pushed; :meth:`cancel`
    from any thread ends it (the iteration then raises :class:`CallFailed` ``CANCELLED``)."""

    def __init__(self, call: Any) -> None:
        self._call = call

    def __iter__(self) -> Iterator[NodeConfig]:
        try:
            for msg in self._call:
                yield config_from_proto(msg)
        except grpc.RpcError as exc:
            raise _failed(exc) from None

    def cancel(self) -> None:
        self._call.cancel()


class NodesClient:
    """The node-facing RPCs of a coordinator reached over ``channel``."""

    def __init__(self, channel: grpc.Channel, timeout_s: float = RPC_TIMEOUT_S) -> None:
        self._stub = coordinator_pb2_grpc.CoordinatorStub(channel)
        self.timeout_s = timeout_s

    def register(self, node: NodeAnnouncement) -> NodeRegistered:
        try:
            return registered_from_proto(self._stub.RegisterNode(announcement_to_proto(node), timeout=self.timeout_s))
        except grpc.RpcError as exc:
            raise _failed(exc) from None

    def heartbeat(self, node_id: str, beat: Heartbeat) -> bool:
        """Send one beat; True when the coordinator has forgotten the node (register again)."""
        try:
            return reregister_from_proto(self._stub.Heartbeat(heartbeat_to_proto(node_id, beat),
                                                              timeout=self.timeout_s))
        except grpc.RpcError as exc:
            raise _failed(exc) from None

    def watch_configs(self, node_id: str, after_revision: int = 0, after_epoch: int = 0) -> ConfigWatch:
        """The node's configs newer than (``after_epoch``, ``after_revision``), as they are pushed."""
        return ConfigWatch(self._stub.WatchConfig(watch_config_request(node_id, after_revision, after_epoch)))
