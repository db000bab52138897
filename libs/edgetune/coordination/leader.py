"""Leader election between coordinator replicas: one Redis lease, renewed by its holder.

    ns:leader:<name>   value = holder id (``<replica>@<address>#<random>``), PX = lease_ms

- acquire: ``SET key holder NX PX lease_ms`` — only when nobody holds it;
- renew:   Lua compare-and-set: ``PEXPIRE`` only if the value is still our holder id;
- release: Lua compare-and-delete on shutdown, so the standby takes over at once.

Safety (two replicas never both plan): a replica counts itself leader only until
``t_sent + lease_ms × (1 − drift)``, where ``t_sent`` is its monotonic clock *before* the
command that set or renewed the key was sent; Redis expires the key ``lease_ms`` after it
*ran* it, which is later. So the local view always ends first, even when renewals are slow
or Redis is unreachable. Writers that must not race a new leader (config publishing) also
check the key's value inside their own transaction (:meth:`LeaderLease.fence_key`).

Liveness: the holder renews every ``renew_interval_ms`` (default a third of the lease, so two
lost renewals in a row are survived). A standby polls; when it sees a holder it sleeps until
the key's PTTL runs out (capped at ``retry_interval_ms``), so after the leader dies it takes
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

import redis

from edgetune.coordination.store import Store
from edgetune.errors import FailedPrecondition, InvalidArgument

log = logging.getLogger(__name__)

DEFAULT_LEASE_MS = 5_000
#: Allowance for clock-rate differences between this host and Redis's (ppm-level in practice).
DEFAULT_DRIFT = 0.01

_RENEW = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
"""

_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
"""

#: Redis errors that mean "cannot talk to Redis now" (the lease is then treated as lost locally).
REDIS_DOWN = (redis.ConnectionError, redis.TimeoutError, redis.BusyLoadingError, OSError)


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


class LeaderLease:
    """A lease on ``ns:leader:<name>`` (see module doc). ``start()`` runs the background renewer."""

    def __init__(self, store: Store, name: str = "coordinator", *, holder_id: str | None = None,
                 lease_ms: int = DEFAULT_LEASE_MS, renew_interval_ms: int | None = None,
                 retry_interval_ms: int | None = None, drift: float = DEFAULT_DRIFT,
                 on_change: Callable[[bool], None] | None = None) -> None:
        if isinstance(lease_ms, bool) or not isinstance(lease_ms, int) or lease_ms < 100:
            raise InvalidArgument("lease_ms", f"{lease_ms!r}", "an int >= 100 (milliseconds)")
        self.store = store
        self.name = name
        self.key = store.key("leader", name)
        self.holder_id = holder_id or default_holder_id()
        self.lease_ms = lease_ms
        self.renew_interval_ms = renew_interval_ms or max(10, lease_ms // 3)
        if self.renew_interval_ms >= lease_ms:
            raise InvalidArgument("renew_interval_ms", f"{self.renew_interval_ms} >= lease_ms {lease_ms}",
                                  "shorter than the lease")
        self.retry_interval_ms = retry_interval_ms or self.renew_interval_ms
        self.drift = drift
        self.on_change = on_change
        self._renew = store.client.register_script(_RENEW)
        self._release = store.client.register_script(_RELEASE)
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
        """Who holds the lease in Redis now (None: nobody)."""
        raw = self.store.client.get(self.key)
        return raw.decode() if isinstance(raw, bytes) else raw

    def try_acquire(self) -> bool:
        """Acquire the lease if free, or renew it if ours; returns :attr:`is_leader` after the step.

        Redis errors count as "not renewed": the local lease then runs out on its own clock.
        """
        sent = time.monotonic()
        unreachable = False
        try:
            ok = False
            if self._valid_until > 0 or self._was_leader:
                ok = bool(self._renew(keys=[self.key], args=[self.holder_id, self.lease_ms]))
            if not ok:  # not held, or our key expired (we stalled) and may be taken: acquire afresh
                ok = bool(self.store.client.set(self.key, self.holder_id, nx=True, px=self.lease_ms))
        except REDIS_DOWN as exc:
            log.warning("lease step failed", extra={"lease": self.name, "error": str(exc)})
            ok, unreachable = False, True
        with self._lock:
            if ok:
                self._valid_until = sent + self.lease_ms / 1000.0 * (1.0 - self.drift)
            elif not unreachable or time.monotonic() >= self._valid_until:
                # Redis says the key is not ours: step down now. Unreachable Redis: keep the
                # local window until it runs out (the key, if ours, lasts longer than it).
                self._valid_until = 0.0
        self._notify()
        return self.is_leader

    def release(self) -> bool:
        """Give the lease up (only if still ours); True when a key was deleted."""
        with self._lock:
            self._valid_until = 0.0
        try:
            released = bool(self._release(keys=[self.key], args=[self.holder_id]))
        except REDIS_DOWN:
            released = False  # the key expires on its own
        self._notify()
        return released

    def require(self) -> None:
        """Raise :class:`NotLeader` (FAILED_PRECONDITION) unless this replica leads."""
        if not self.is_leader:
            try:
                holder = self.holder()
            except REDIS_DOWN:
                holder = None
            raise NotLeader(self.name, holder)

    def fence_key(self) -> tuple[str, str]:
        """(key, expected value) a transaction can WATCH and compare to write only as leader."""
        return self.key, self.holder_id

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
        # A standby sleeps until the holder's key should expire, so takeover follows expiry closely.
        try:
            pttl_ms = int(self.store.client.pttl(self.key))
        except REDIS_DOWN:
            return self.retry_interval_ms / 1000.0
        if pttl_ms < 0:  # -2: no key (free now), -1: no expiry (should not happen)
            return 0.005 if pttl_ms == -2 else self.retry_interval_ms / 1000.0
        return min(pttl_ms + 2, self.retry_interval_ms) / 1000.0
