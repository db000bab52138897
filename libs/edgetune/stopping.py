"""Cooperative stopping of long library work (training passes, THOR fits) when its caller goes away.

A service runs a job under :func:`stop_when` with a predicate (the RPC's client is gone, its
deadline passed, the server is stopping); the job's loops call :func:`check` at points where
stopping leaves nothing half-done (between minibatches, between GP fits), which raises
:class:`Stopped`. Nothing is checked outside a :func:`stop_when` (the CLI, experiments).

The predicate is per thread (a context variable): a job's tasks run in the thread that asked
for them, so each RPC's work sees only its own caller.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from edgetune.errors import EdgetuneError

_should_stop: ContextVar[Callable[[], bool] | None] = ContextVar("edgetune_should_stop", default=None)


class Stopped(EdgetuneError):
    """The work was stopped because its caller went away (client gone, deadline passed, shutdown)."""


@contextmanager
def stop_when(should_stop: Callable[[], bool]) -> Iterator[None]:
    """Run the block with ``should_stop`` as the predicate :func:`check` consults."""
    token = _should_stop.set(should_stop)
    try:
        yield
    finally:
        _should_stop.reset(token)


def check() -> None:
    """Raise :class:`Stopped` when the current job's caller went away; a no-op outside :func:`stop_when`."""
    should_stop = _should_stop.get()
    if should_stop is not None and should_stop():
        raise Stopped("stopped: the caller went away (cancelled, deadline passed or server stopping)")
