"""Rebuilding a grpc.RpcMethodHandler with its behavior wrapped (for server interceptors).

A handler has exactly one of four behaviors (unary_unary, unary_stream, stream_unary,
stream_stream); interceptors wrap that one and keep the (de)serializers.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import grpc

#: Handler attribute -> the grpc factory that builds a handler of that kind.
_KINDS: dict[str, Callable[..., grpc.RpcMethodHandler]] = {
    "unary_unary": grpc.unary_unary_rpc_method_handler,
    "unary_stream": grpc.unary_stream_rpc_method_handler,
    "stream_unary": grpc.stream_unary_rpc_method_handler,
    "stream_stream": grpc.stream_stream_rpc_method_handler,
}


def handler_kind(handler: grpc.RpcMethodHandler) -> str:
    for kind in _KINDS:
        if getattr(handler, kind, None) is not None:
            return kind
    raise ValueError("RPC method handler without a behavior")


def wrap_handler(handler: grpc.RpcMethodHandler,
                 wrap: Callable[[Callable[..., Any], str], Callable[..., Any]]) -> grpc.RpcMethodHandler:
    """A handler like ``handler`` whose behavior is ``wrap(behavior, kind)``."""
    kind = handler_kind(handler)
    return _KINDS[kind](
        wrap(getattr(handler, kind), kind),
        request_deserializer=handler.request_deserializer,
        response_serializer=handler.response_serializer,
    )
