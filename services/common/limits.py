"""Limits on every request, before any servicer sees it, and an admission limit on heavy RPCs.

:func:`check_request` walks a request by its proto descriptor (only the fields that are set)
and applies the rules every field of every service shares, from :mod:`edgetune.validation`:

- every string holds at most ``MAX_TEXT_LENGTH`` characters, and a ``node_id`` (at any depth,
  a ``nodes`` list of ids too) is a :func:`~edgetune.validation.node_id`;
- every repeated field has at most ``MAX_REPEATED_ITEMS`` items, every map at most
  ``MAX_MAP_ENTRIES`` entries;
- no float or double in a repeated field or a map is NaN (table columns, device tables;
  infinity keeps the meaning a field gives it, e.g. an efficiency that never reaches the
  target). A single number is left to its field's own rule (a NaN budget reads "nan is not
  finite (allowed: a finite number of watts > 0)" on the wire as in the CLI).

The servicers' converters then check what only their field means (a seed, a rate, a batch
size, a layer), each with the rule of :mod:`edgetune.validation`. A violation is
INVALID_ARGUMENT naming the field (``nodes[3].options.time_ms[5]``); nothing has run.

:class:`LimitsInterceptor` runs the walk for every RPC of a server and admits at most
``max_heavy`` concurrent calls of the RPCs in :data:`HEAVY` (profiles, fits, estimates,
planning); one more gets RESOURCE_EXHAUSTED at once, instead of queueing work past its deadline.
A heavy call runs under :func:`edgetune.stopping.stop_when`: once its client is gone (cancelled,
deadline passed, server stopping) the library's training / fitting loops stop at their next
check and the slot is free again.

Heavy slots are shared by role (:class:`HeavySlots`): viewers and agents together hold at most
half of them (at least one), so operators (a Fit, the coordinator's transfers) always find one;
and no single caller holds more than ``max_heavy - 1`` (at least one), so one operator cannot
starve another. Watch streams (:data:`WATCHES`) are capped per caller (``max_watches``,
``EDGETUNE_MAX_WATCHES_PER_CALLER``, default 64): the caller is its identity's name, or, where the
server authenticates nobody (loopback, ``--insecure``), its connection. A stream's count is
released when it ends however it ends. Callers come from :func:`~.auth.current_caller`.
"""

from __future__ import annotations

import math
import os
import threading
from collections.abc import Callable, Iterator
from typing import Any

import grpc
import numpy as np
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message

from edgetune import stopping, validation
from edgetune.errors import EdgetuneError, InvalidArgument
from edgetune.identity import ADMIN, OPERATOR
from edgetune.services.common.auth import current_caller
from edgetune.services.common.errors import register_status
from edgetune.services.common.handlers import wrap_handler

#: RPCs that occupy a device or the CPUs for seconds or more; at most ``max_heavy`` run at once per server.
HEAVY = frozenset({
    "/edgetune.v1.Profiler/Profile",
    "/edgetune.v1.Estimator/Fit",
    "/edgetune.v1.Estimator/Transfer",
    "/edgetune.v1.Estimator/Predict",
    "/edgetune.v1.Estimator/EstimateBatchEfficiency",
    "/edgetune.v1.Estimator/EstimateEnergy",
    "/edgetune.v1.Optimizer/ParetoFront",
    "/edgetune.v1.Optimizer/SelectJoint",
    "/edgetune.v1.Optimizer/SelectConcurrent",
    "/edgetune.v1.Optimizer/NextProfiles",
    "/edgetune.v1.Coordinator/PlanRound",
})
#: Default admission limit (``EDGETUNE_MAX_HEAVY_RPCS`` overrides it): a Jetson agent profiles one
#: thing at a time anyway, and a 2-core estimator gains nothing from a fifth concurrent fit.
DEFAULT_MAX_HEAVY = 4
MAX_HEAVY_ENV = "EDGETUNE_MAX_HEAVY_RPCS"
#: Streams that stay open (a handler thread each, for as long as the caller keeps them): capped per caller.
WATCHES = frozenset({
    "/edgetune.v1.Coordinator/WatchConfig",
    "/edgetune.v1.Coordinator/WatchTuningJob",
    "/edgetune.v1.Profiler/StreamPower",
})
DEFAULT_MAX_WATCHES = 64
MAX_WATCHES_ENV = "EDGETUNE_MAX_WATCHES_PER_CALLER"
#: Roles that may use every heavy slot (the others share at most half of them).
_FULL_SHARE = (OPERATOR, ADMIN)

_FLOATS = (FieldDescriptor.TYPE_DOUBLE, FieldDescriptor.TYPE_FLOAT)
#: Fields whose strings are node ids wherever they appear (``nodes`` holds ids in a TuningJobSpec).
_NODE_ID_FIELDS = frozenset({"node_id"})
_NODE_ID_LISTS = frozenset({"nodes"})


class ResourceExhausted(EdgetuneError):
    """Too many heavy calls in flight; mapped to RESOURCE_EXHAUSTED (try again later)."""


register_status(ResourceExhausted, grpc.StatusCode.RESOURCE_EXHAUSTED)
register_status(stopping.Stopped, grpc.StatusCode.CANCELLED)


def _is_map(fd: FieldDescriptor) -> bool:
    return (fd.type == FieldDescriptor.TYPE_MESSAGE and fd.message_type is not None
            and fd.message_type.GetOptions().map_entry)


def _scalar(fd: FieldDescriptor, value: Any, at: str, node_id: bool, in_list: bool = True) -> None:
    if fd.type == FieldDescriptor.TYPE_STRING:
        if node_id:
            if value:  # empty: proto3's absent; whether it is required is the servicer's call
                validation.node_id(value, at)
        else:
            validation.text(value, at)
    elif fd.type == FieldDescriptor.TYPE_BYTES:
        if len(value) > validation.MAX_TEXT_LENGTH:
            raise InvalidArgument(at, f"has {len(value)} bytes", f"at most {validation.MAX_TEXT_LENGTH}")
    elif fd.type in _FLOATS and in_list and math.isnan(value):
        raise InvalidArgument(at, "is NaN", "a number")


def check_request(msg: Message, path: str = "") -> None:
    """Apply the shared limits (see the module doc) to ``msg``; InvalidArgument names the field."""
    for fd, value in msg.ListFields():
        at = f"{path}{fd.name}"
        if _is_map(fd):
            validation.repeated(value, at, maximum=validation.MAX_MAP_ENTRIES)
            entry = fd.message_type
            assert entry is not None  # a map field's entry type (_is_map checked it)
            key_fd, value_fd = entry.fields_by_name["key"], entry.fields_by_name["value"]
            for key, item in value.items():
                _scalar(key_fd, key, f"{at}[key]", fd.name in _NODE_ID_LISTS)
                item_at = f"{at}[{validation.shown(key, 40)}]"
                if value_fd.type == FieldDescriptor.TYPE_MESSAGE:
                    check_request(item, f"{item_at}.")
                else:
                    _scalar(value_fd, item, item_at, False)
        elif fd.is_repeated:
            validation.repeated(value, at)
            if fd.type == FieldDescriptor.TYPE_MESSAGE:
                for i, item in enumerate(value):
                    check_request(item, f"{at}[{i}].")
            elif fd.type in _FLOATS:
                bad = np.flatnonzero(np.isnan(np.asarray(value, dtype=float)))
                if bad.size:
                    raise InvalidArgument(f"{at}[{int(bad[0])}]", "is NaN", "a number")
            else:
                for i, item in enumerate(value):
                    _scalar(fd, item, f"{at}[{i}]", fd.name in _NODE_ID_LISTS)
        elif fd.type == FieldDescriptor.TYPE_MESSAGE:
            check_request(value, f"{at}.")
        else:
            _scalar(fd, value, at, fd.name in _NODE_ID_FIELDS, in_list=False)


def _int_from_env(name: str, default: int) -> int:
    text = os.environ.get(name, "")
    if not text:
        return default
    try:
        value = int(text)
    except ValueError:
        raise InvalidArgument(name, f"{validation.shown(text)} is not an integer", "an integer >= 1") from None
    return validation.count(value, name)


def max_heavy_from_env(default: int = DEFAULT_MAX_HEAVY) -> int:
    return _int_from_env(MAX_HEAVY_ENV, default)


def max_watches_from_env(default: int = DEFAULT_MAX_WATCHES) -> int:
    return _int_from_env(MAX_WATCHES_ENV, default)


def _caller() -> tuple[str, str, str]:
    """(identity key, watch key, role) of the call running now. The identity key is "" when the
    server authenticates nobody (every caller is the one anonymous admin: no per-caller share); the
    watch key is then the caller's connection."""
    found = current_caller()
    if found is None:
        return "", "", ADMIN
    who, peer = found
    if who.via == "none":
        return "", f"peer:{peer}", who.role
    key = f"{who.via}:{who.name}"
    return key, key, who.role


class HeavySlots:
    """``total`` slots shared by role and caller (module doc)."""

    def __init__(self, total: int) -> None:
        self.total = total
        #: Viewers and agents together (anything but operators and admins).
        self.shared_limit = max(1, total // 2)
        self.per_caller_limit = max(1, total - 1)
        self._lock = threading.Lock()
        self._running = 0
        self._shared = 0
        self._by_caller: dict[str, int] = {}

    @property
    def running(self) -> int:
        with self._lock:
            return self._running

    def acquire(self, caller: str, role: str) -> None:
        full = role in _FULL_SHARE
        with self._lock:
            if self._running >= self.total:
                raise ResourceExhausted(f"{self.total} heavy calls are already running on this server; "
                                        "try again later")
            if not full and self._shared >= self.shared_limit:
                raise ResourceExhausted(f"{self.shared_limit} of this server's {self.total} heavy slots are all "
                                        f"{role or 'viewer'}s may hold, and they are taken (the others are kept for "
                                        "operators); try again later")
            if caller and self._by_caller.get(caller, 0) >= self.per_caller_limit:
                raise ResourceExhausted(f"this caller already runs {self.per_caller_limit} heavy calls (of the "
                                        f"server's {self.total}); try again later")
            self._running += 1
            self._shared += 0 if full else 1
            if caller:
                self._by_caller[caller] = self._by_caller.get(caller, 0) + 1

    def release(self, caller: str, role: str) -> None:
        with self._lock:
            self._running -= 1
            self._shared -= 0 if role in _FULL_SHARE else 1
            if caller:
                left = self._by_caller.get(caller, 1) - 1
                if left > 0:
                    self._by_caller[caller] = left
                else:
                    self._by_caller.pop(caller, None)


class WatchCounter:
    """Open watch streams per caller, at most ``limit`` each."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._lock = threading.Lock()
        self._open: dict[str, int] = {}

    @property
    def open(self) -> int:
        with self._lock:
            return sum(self._open.values())

    def acquire(self, caller: str) -> None:
        with self._lock:
            held = self._open.get(caller, 0)
            if held >= self.limit:
                raise ResourceExhausted(f"this caller already holds {held} open watch streams (at most "
                                        f"{self.limit} per caller, {MAX_WATCHES_ENV}); close one first")
            self._open[caller] = held + 1

    def release(self, caller: str) -> None:
        with self._lock:
            left = self._open.get(caller, 1) - 1
            if left > 0:
                self._open[caller] = left
            else:
                self._open.pop(caller, None)


class LimitsInterceptor(grpc.ServerInterceptor):
    """:func:`check_request` on every request, at most ``max_heavy`` concurrent :data:`HEAVY` calls
    (shared by role and caller), and at most ``max_watches`` open :data:`WATCHES` per caller."""

    def __init__(self, max_heavy: int | None = None, heavy: frozenset[str] = HEAVY,
                 max_watches: int | None = None, watches: frozenset[str] = WATCHES) -> None:
        self.max_heavy = max_heavy_from_env() if max_heavy is None else validation.count(max_heavy, "max_heavy")
        self.heavy = heavy
        self.slots = HeavySlots(self.max_heavy)
        self.watches = watches
        self.watch_counter = WatchCounter(max_watches_from_env() if max_watches is None
                                          else validation.count(max_watches, "max_watches", maximum=10**7))

    @property
    def in_flight(self) -> int:
        """Heavy calls running now."""
        return self.slots.running

    @property
    def open_watches(self) -> int:
        """Watch streams open now (all callers)."""
        return self.watch_counter.open

    @property
    def max_watches(self) -> int:
        return self.watch_counter.limit

    @max_watches.setter
    def max_watches(self, limit: int) -> None:
        self.watch_counter.limit = validation.count(limit, "max_watches", maximum=10**7)

    def intercept_service(self, continuation: Callable[..., Any], handler_call_details: Any) -> Any:
        handler = continuation(handler_call_details)
        if handler is None:
            return None
        heavy = handler_call_details.method in self.heavy
        watch = handler_call_details.method in self.watches

        def wrap(behavior: Callable[..., Any], kind: str) -> Callable[..., Any]:
            if kind.startswith("stream_"):  # no client-streaming RPC here; leave any such as it is
                return behavior
            if kind == "unary_stream":
                def stream(request: Any, context: Any) -> Iterator[Any]:
                    check_request(request)
                    caller, watcher, role = _caller()
                    if watch:
                        self.watch_counter.acquire(watcher)
                    try:
                        if not heavy:
                            yield from behavior(request, context)
                            return
                        self.slots.acquire(caller, role)
                        try:
                            with stopping.stop_when(lambda: not context.is_active()):
                                yield from behavior(request, context)
                        finally:
                            self.slots.release(caller, role)
                    finally:
                        if watch:
                            self.watch_counter.release(watcher)
                return stream

            def unary(request: Any, context: Any) -> Any:
                check_request(request)
                if not heavy:
                    return behavior(request, context)
                caller, _watcher, role = _caller()
                self.slots.acquire(caller, role)
                try:
                    # The deadline / cancellation reaches the job: its loops stop once the caller is gone.
                    with stopping.stop_when(lambda: not context.is_active()):
                        return behavior(request, context)
                finally:
                    self.slots.release(caller, role)
            return unary

        return wrap_handler(handler, wrap)
