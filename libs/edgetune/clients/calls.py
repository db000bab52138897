"""How every typed client's calls end: records, or :class:`CallFailed`; a server stream is a :class:`Stream`.

**One convention for all clients: a failed call raises :class:`CallFailed`**, an
:class:`~edgetune.errors.EdgetuneError` that keeps the server's status code (:class:`Status`, the
gRPC code's name) and its message. Why wrap rather than let ``grpc.RpcError`` through: the
clients' callers (the agent loop, the CLI, the demo, the Flower integration, the reconcile loop,
the benches) deal in library records and errors; they tell a busy device, a refused request and an
unreachable service apart by the code without importing the transport, and a failure reads as an
edgetune error (``INVALID_ARGUMENT: spec.nodes[1]: ...``), not a gRPC call object's repr. Nothing
is lost: the code and the details are the server's own.

    try:
        client.submit_job(spec)
    except CallFailed as exc:
        if exc.code is Status.INVALID_ARGUMENT: ...
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from enum import StrEnum
from typing import Any, Generic, TypeVar

import grpc

from edgetune.errors import EdgetuneError

R = TypeVar("R")


class Status(StrEnum):
    """A call's status code, named as gRPC names it (``grpc.StatusCode``'s names)."""

    OK = "OK"
    CANCELLED = "CANCELLED"
    UNKNOWN = "UNKNOWN"
    INVALID_ARGUMENT = "INVALID_ARGUMENT"
    DEADLINE_EXCEEDED = "DEADLINE_EXCEEDED"
    NOT_FOUND = "NOT_FOUND"
    ALREADY_EXISTS = "ALREADY_EXISTS"
    PERMISSION_DENIED = "PERMISSION_DENIED"
    RESOURCE_EXHAUSTED = "RESOURCE_EXHAUSTED"
    FAILED_PRECONDITION = "FAILED_PRECONDITION"
    ABORTED = "ABORTED"
    OUT_OF_RANGE = "OUT_OF_RANGE"
    UNIMPLEMENTED = "UNIMPLEMENTED"
    INTERNAL = "INTERNAL"
    UNAVAILABLE = "UNAVAILABLE"
    DATA_LOSS = "DATA_LOSS"
    UNAUTHENTICATED = "UNAUTHENTICATED"


class CallFailed(EdgetuneError):
    """A call to a service failed: ``code`` the status (``UNAVAILABLE``: unreachable; ``INVALID_ARGUMENT``:
    refused, ``details`` naming the field; ...), ``details`` the server's message."""

    def __init__(self, code: Status, details: str) -> None:
        self.code, self.details = code, details
        super().__init__(f"{code.value}: {details}")


def call_failed(exc: grpc.RpcError) -> CallFailed:
    """``exc`` as a :class:`CallFailed` (an error without a status, e.g. a channel that broke, is UNKNOWN)."""
    code = exc.code() if callable(getattr(exc, "code", None)) else None
    details = exc.details() if callable(getattr(exc, "details", None)) else str(exc)
    name = getattr(code, "name", "UNKNOWN")
    return CallFailed(Status(name) if name in Status.__members__ else Status.UNKNOWN, details or "")


@contextmanager
def translated() -> Iterator[None]:
    """A failed call inside raises :class:`CallFailed` instead of ``grpc.RpcError``."""
    try:
        yield
    except grpc.RpcError as exc:
        raise call_failed(exc) from None


class Stream(Generic[R]):
    """A server stream's messages as records, one by one; :meth:`close` (from any thread, or a ``with``)
    cancels the call, after which iterating raises :class:`CallFailed` ``CANCELLED``."""

    def __init__(self, call: Any, convert: Callable[[Any], R]) -> None:
        self._call, self._convert = call, convert

    def __iter__(self) -> Iterator[R]:
        return self

    def __next__(self) -> R:
        with translated():
            msg = next(self._call)
        return self._convert(msg)

    def close(self) -> None:
        self._call.cancel()

    def __enter__(self) -> Stream[R]:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
