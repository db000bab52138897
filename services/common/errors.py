"""edgetune errors -> gRPC status codes, for servicers.

Library code raises :mod:`edgetune.errors` exceptions naming the bad field; a servicer turns
them into a status with that message instead of an UNKNOWN with a traceback:

    class ProfilerServicer(profiler_pb2_grpc.ProfilerServicer):
        @map_errors
        def ApplyPowerMode(self, request, context): ...     # unary or server-streaming

        def GetDevice(self, request, context):
            with abort_on_error(context):
                ...

The bootstrap also installs :class:`ErrorInterceptor`, which does the same for every RPC,
so a servicer that forgets the decorator still answers with the right code.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import grpc

from edgetune.errors import EdgetuneError, FailedPrecondition, InvalidArgument, NotFound, capped
from edgetune.services.common.handlers import wrap_handler

#: Longest status details sent: gRPC carries them in metadata (8 KiB in all by default), so a longer
#: message would fail the call with no message at all.
MAX_DETAILS_CHARS = 2048

#: Most specific first; the first isinstance match wins. Extend with :func:`register_status`.
_STATUS: list[tuple[type[BaseException], grpc.StatusCode]] = [
    (InvalidArgument, grpc.StatusCode.INVALID_ARGUMENT),
    (FailedPrecondition, grpc.StatusCode.FAILED_PRECONDITION),
    (NotFound, grpc.StatusCode.NOT_FOUND),
    # Raised on purpose but not one of the above: the message is meant for the user.
    (EdgetuneError, grpc.StatusCode.INTERNAL),
]


def register_status(exc_type: type[BaseException], code: grpc.StatusCode) -> None:
    """Map another exception type (e.g. a ``DeviceBusy``) to a code; checked before the defaults."""
    _STATUS.insert(0, (exc_type, code))


def status_for(exc: BaseException) -> grpc.StatusCode | None:
    """The status code of an edgetune error, ``None`` for anything else (a bug: left to gRPC)."""
    for exc_type, code in _STATUS:
        if isinstance(exc, exc_type):
            return code
    return None


@contextmanager
def abort_on_error(context: grpc.ServicerContext) -> Iterator[None]:
    """Abort the RPC with the mapped code and the error's message.

    For :class:`InvalidArgument` the details are ``FIELD: message (allowed: ...)``, the very text
    the CLI prints after ``Error:`` (both are ``str(exc)``): one rendering of one error type.
    """
    try:
        yield
    except Exception as exc:
        code = status_for(exc)
        if code is None:
            raise
        context.abort(code, capped(str(exc), MAX_DETAILS_CHARS))


def _wrap(behavior: Callable[..., Any], context_index: int) -> Callable[..., Any]:
    # context_index: where the ServicerContext sits in the call's positional args (1 for a
    # handler behavior(request, context), 2 for a method (self, request, context)).
    if inspect.isgeneratorfunction(behavior):
        @functools.wraps(behavior)
        def stream(*args: Any, **kwargs: Any) -> Iterator[Any]:
            with abort_on_error(args[context_index]):
                yield from behavior(*args, **kwargs)
        return stream

    @functools.wraps(behavior)
    def call(*args: Any, **kwargs: Any) -> Any:
        with abort_on_error(args[context_index]):
            result = behavior(*args, **kwargs)
        if inspect.isgenerator(result):  # a method that returns an iterator it built
            return _guard_iterator(result, args[context_index])
        return result
    return call


def _guard_iterator(it: Iterator[Any], context: grpc.ServicerContext) -> Iterator[Any]:
    with abort_on_error(context):
        yield from it


def map_errors(method: Callable[..., Any]) -> Callable[..., Any]:
    """Decorator for servicer methods ``(self, request, context)``, unary or streaming."""
    return _wrap(method, context_index=2)


class ErrorInterceptor(grpc.ServerInterceptor):
    """Applies the mapping to every handler of the server (behaviors ``(request, context)``)."""

    def intercept_service(self, continuation: Callable[..., Any], handler_call_details: Any) -> Any:
        handler = continuation(handler_call_details)
        if handler is None:
            return None
        return wrap_handler(handler, lambda behavior, _kind: _wrap(behavior, context_index=1))


@contextmanager
def field_prefix(prefix: str) -> Iterator[None]:
    """Re-raise a library InvalidArgument (``gpu_mhz``) with the request path (``modes[3].gpu_mhz``)."""
    try:
        yield
    except InvalidArgument as exc:
        if exc.field == prefix or exc.field.startswith((f"{prefix}.", f"{prefix}[")):
            raise
        raise exc.prefixed(prefix) from None


@contextmanager
def field_named(field: str) -> Iterator[None]:
    """Re-raise a library InvalidArgument as one about the request field ``field``."""
    try:
        yield
    except InvalidArgument as exc:
        raise exc.renamed(field) from None
