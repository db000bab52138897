"""Leader election between coordinator replicas: one lease in the store, renewed by its holder.

The lease ``<name>`` holds the holder id (``<replica>@<address>#<random>``) for ``lease_ms``
(``Store.acquire_lease`` / ``renew_lease`` / ``release_lease``; on Redis ``ns:leader:<name>``):

- acquire: only when nobody holds it;
- renew:   compare-and-set: extended only while the holder is still ours;
- release: compare-and-delete on shutdown, so the standby takes over at once.

Safety (two replicas never both plan): a replica counts itself leader only until
``t_sent + lease_ms × (1 − drift)``, where ``t_sent`` is its monotonic clock *before* the
command that set or renewed the lease was sent; the store expires the lease ``lease_ms``
after it *ran* it, which is later. So the local view always ends first, even when renewals
are slow or the store is unreachable. Writers that must not race a new leader (config
publishing) also check the holder inside their own atomic write (:meth:`LeaderLease.fence`).

Liveness: the holder renews every ``renew_interval_ms`` (default a third of the lease, so two
lost renewals in a row are survived). A standby polls; when it sees a holder it sleeps until
the lease's TTL runs out (capped at ``retry_interval_ms``), so after the leader dies it takes
over within one lease period of the leader's last renewal.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable

from edgetune.errors import FailedPrecondition, InvalidArgument
from edgetune.store import UNAVAILABLE, Fence, Store

log = logging.getLogger(__name__)

DEFAULT_LEASE_MS = 5_000
#: Allowance for clock-rate differences between this host and the store's (ppm-level in practice).
DEFAULT_DRIFT = 0.01


class NotLeader(FailedPrecondition):
    """This replica does not hold the lease; ``holder`` is who does (None: nobody)."""

    def __init__(self, name: str, holder: str | None) -> None:
        self.holder = holder
        who = f"the leader is {holder}" if holder else "no replica holds the lease right now; retry shortly"
        super().__init__(f"this coordinator replica is a standby for {name!r}: {who}")


def default_holder_id(address: str = "") -> str:
    """``<hostname>-<pid>@<address>#<random>``: unique per process start, readable in errors."""
    base = f"{socket.gethostname()}-{os.getpid()}"
    return f"{base}@{address}#{uuid.uuid4().hex[:8]}" if address else f"{base}#{uuid.uuid4().hex[:8]}"


def leader_address(holder: str | None) -> str | None:
    """The address in a lease holder id (``name@host:port`` or ``name@host:port#nonce``); None without one."""
    if not holder or "@" not in holder:
        return None
    address = holder.rsplit("@", 1)[1].split("#", 1)[0]
    return address or None


class LeaderLease:
    """The lease ``name`` in the store (see module doc). ``start()`` runs the background renewer."""

    def __init__(self, store: Store, name: str = "coordinator", *, holder_id: str | None = None,
                 lease_ms: int = DEFAULT_LEASE_MS, renew_interval_ms: int | None = None,
                 retry_interval_ms: int | None = None, drift: float = DEFAULT_DRIFT,
                 on_change: Callable[[bool], None] | None = None) -> None:
        if isinstance(lease_ms, bool) or not isinstance(lease_ms, int) or lease_ms < 100:
            raise InvalidArgument("lease_ms", f"{lease_ms!r}", "an int >= 100 (milliseconds)")
        self.store = store
        self.name = name
        self.holder_id = holder_id or default_holder_id()
        self.lease_ms = lease_ms
        self.renew_interval_ms = renew_interval_ms or max(10, lease_ms // 3)
        if self.renew_interval_ms >= lease_ms:
            raise InvalidArgument("renew_interval_ms", f"{self.renew_interval_ms} >= lease_ms {lease_ms}",
                                  "shorter than the lease")
        self.retry_interval_ms = retry_interval_ms or self.renew_interval_ms
        self.drift = drift
        self.on_change = on_change
        self._valid_until = 0.0  # monotonic seconds; 0 = not leader
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._was_leader = False
        #: How many times this replica became leader (for logs and tests).
        self.terms = 0

    # -- one step -----------------------------------------------------------------------

    @property
    def is_leader(self) -> bool:
        """True while the lease is ours by our own (conservative) clock."""
        return time.monotonic() < self._valid_until

    def holder(self) -> str | None:
        """Who holds the lease in the store now (None: nobody)."""
        return self.store.lease_holder(self.name)

    def try_acquire(self) -> bool:
        """Acquire the lease if free, or renew it if ours; returns :attr:`is_leader` after the step.

        Store errors count as "not renewed": the local lease then runs out on its own clock.
        """
        sent = time.monotonic()
        unreachable = False
        try:
            ok = False
            if self._valid_until > 0 or self._was_leader:
                ok = self.store.renew_lease(self.name, self.holder_id, self.lease_ms)
            if not ok:  # not held, or ours expired (we stalled) and may be taken: acquire afresh
                ok = self.store.acquire_lease(self.name, self.holder_id, self.lease_ms)
        except UNAVAILABLE as exc:
            log.warning("lease step failed", extra={"lease": self.name, "error": str(exc)})
            ok, unreachable = False, True
        with self._lock:
            if ok:
                self._valid_until = sent + self.lease_ms / 1000.0 * (1.0 - self.drift)
            elif not unreachable or time.monotonic() >= self._valid_until:
                # The store says the lease is not ours: step down now. Unreachable store: keep
                # the local window until it runs out (the lease, if ours, lasts longer than it).
                self._valid_until = 0.0
        self._notify()
        return self.is_leader

    def release(self) -> bool:
        """Give the lease up (only if still ours); True when it was ours and is released."""
        with self._lock:
            self._valid_until = 0.0
        try:
            released = self.store.release_lease(self.name, self.holder_id)
        except UNAVAILABLE:
            released = False  # the key expires on its own
        self._notify()
        return released

    def require(self) -> None:
        """Raise :class:`NotLeader` (FAILED_PRECONDITION) unless this replica leads."""
        if not self.is_leader:
            try:
                holder = self.holder()
            except UNAVAILABLE:
                holder = None
            raise NotLeader(self.name, holder)

    def fence(self) -> Fence:
        """What a store write checks atomically to happen only while this replica holds the lease."""
        return Fence(self.name, self.holder_id)

    def _notify(self) -> None:
        now = self.is_leader
        if now != self._was_leader:
            self._was_leader = now
            if now:
                self.terms += 1
            log.info("leadership changed", extra={"lease": self.name, "leader": now, "holder": self.holder_id})
            if self.on_change is not None:
                try:
                    self.on_change(now)
                except Exception:
                    log.exception("on_change callback failed")

    # -- background renewer -------------------------------------------------------------

    def start(self) -> LeaderLease:
        if self._thread is None or not self._thread.is_alive():
            self._stop.clear()
            self._thread = threading.Thread(target=self._run, name=f"lease-{self.name}", daemon=True)
            self._thread.start()
        return self

    def stop(self, release: bool = True) -> None:
        """Stop renewing and (by default) release, so a standby need not wait out the lease."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.lease_ms / 1000.0 + 5.0)
            self._thread = None
        if release:
            self.release()

    def wait_leader(self, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.is_leader:
                return True
            time.sleep(0.01)
        return self.is_leader

    def _run(self) -> None:
        while not self._stop.is_set():
            leader = self.try_acquire()
            self._stop.wait(self._next_wait_s(leader))

    def _next_wait_s(self, leader: bool) -> float:
        if leader:
            return self.renew_interval_ms / 1000.0
        # A standby sleeps until the holder's lease should expire, so takeover follows expiry closely.
        try:
            ttl_ms = self.store.lease_ttl_ms(self.name)
        except UNAVAILABLE:
            return self.retry_interval_ms / 1000.0
        if ttl_ms is None:  # nobody holds it: free now
            return 0.005
        return min(ttl_ms + 2, self.retry_interval_ms) / 1000.0
