"""Which store a service's server uses, and who closes it.

A service takes either a ``Store`` object (the caller's: left open) or a URL, from which it
opens its own. An opened store must be closed when building the server fails, and otherwise
when the server shuts down::

    owner = OwnedStore(store, redis_url)
    with owner as store:             # an opened store is closed if this block raises
        server = build_server(...)
    owner.close_with(server)         # ... and otherwise by the server's shutdown hooks
"""

from __future__ import annotations

from types import TracebackType

from edgetune.store import Store, open_store

#: URLs that mean "no store" where a service can run without one (``optional=True``).
NO_STORE = ("none", "off")


class OwnedStore:
    """``store`` if given, else one opened from ``redis_url`` (None when ``optional`` and the
    URL is one of :data:`NO_STORE`)."""

    def __init__(self, store: Store | None, redis_url: str | None, *, optional: bool = False) -> None:
        self.opened: Store | None = None
        if store is None and not (optional and (redis_url or "").strip().lower() in NO_STORE):
            store = self.opened = open_store(redis_url)
        self.store = store

    def __enter__(self) -> Store | None:
        return self.store

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if exc_type is not None and self.opened is not None:
            self.opened.close()

    def close_with(self, server) -> None:
        """Close an opened store among ``server``'s shutdown hooks (run last-registered first:
        register this before the hooks that still need the store)."""
        if self.opened is not None:
            server.on_shutdown.append(self.opened.close)
