"""Telling "lost with the store's data" from "never existed".

A Redis that restarts empty (no persistence, a lost volume) takes every record with it; a reader
then finds nothing, and "not found" would tell the submitter of a tuning job nothing of what
happened. :class:`LostRecords` remembers the keys of one kind it has seen and the store's
:meth:`~.base.Store.incarnation` they were seen under (every key of the kind is read again every
``refresh_s`` by :meth:`refresh`, so a replica that never served a job still knows it). A key that
is missing now but was seen under an earlier incarnation was lost: :meth:`lost` says so in words.
Memory is per process and bounded (the newest ``max_keys`` keys).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Iterable

from .base import Store

log = logging.getLogger(__name__)

#: Keys remembered at most (the least recently seen forgotten first).
MAX_KEYS = 100_000
DEFAULT_REFRESH_S = 5.0


def _began(incarnation: str) -> str:
    """When an incarnation began, as UTC text ("" when it does not say)."""
    _id, _, ms = incarnation.partition("@")
    if not ms.isdigit():
        return ""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(int(ms) / 1000.0))


class LostRecords:
    """The keys of ``kind`` seen in ``store``, and which of them a data loss took (module doc)."""

    def __init__(self, store: Store, kind: str, *, what: str = "", max_keys: int = MAX_KEYS,
                 refresh_s: float = DEFAULT_REFRESH_S) -> None:
        self.store, self.kind, self.what = store, kind, what or kind
        self.max_keys, self.refresh_s = max_keys, refresh_s
        self._seen: OrderedDict[str, tuple[str, float]] = OrderedDict()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def seen(self, keys: Iterable[str], incarnation: str | None = None) -> None:
        """Record ``keys`` as present now (under ``incarnation``, default the store's current one)."""
        keys = [k for k in keys if k]
        if not keys:
            return
        current = incarnation if incarnation is not None else self.store.incarnation()
        now = time.time()
        with self._lock:
            for key in keys:
                self._seen.pop(key, None)
                self._seen[key] = (current, now)
            while len(self._seen) > self.max_keys:
                self._seen.popitem(last=False)

    def refresh(self) -> None:
        """Record every key of the kind the store holds now."""
        incarnation = self.store.incarnation()
        self.seen(self.store.list_docs(self.kind), incarnation)

    def lost(self, key: str) -> str | None:
        """Why ``key`` is missing when a data loss took it (a sentence for the caller), else None."""
        with self._lock:
            found = self._seen.get(key)
        if found is None:
            return None
        then, seen_s = found
        now = self.store.incarnation()
        if then == now:
            return None
        began = _began(now)
        seen = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seen_s))
        return (f"{self.what} {key[:128]!r} was lost: the store lost its data"
                f"{f' (empty again since {began})' if began else ''} after it was last seen at {seen}; "
                f"nothing of it is left: submit it again")

    # -- the periodic refresh -------------------------------------------------------------------
    def start(self) -> LostRecords:
        if self._thread is None and self.refresh_s > 0:
            self._thread = threading.Thread(target=self._run, name=f"lost-{self.kind}", daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.refresh_s + 5.0)
            self._thread = None

    def _run(self) -> None:
        while True:
            try:
                self.refresh()
            except Exception:  # a store outage: try again next time (the last keys stay remembered)
                log.debug("cannot list %s", self.kind, exc_info=True)
            if self._stop.wait(self.refresh_s):
                return
