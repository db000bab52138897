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


def max_heavy_from_env(default: int = DEFAULT_MAX_HEAVY) -> int:
    text = os.environ.get(MAX_HEAVY_ENV, "")
    if not text:
        return default
    try:
        value = int(text)
    except ValueError:
        raise InvalidArgument(MAX_HEAVY_ENV, f"{validation.shown(text)} is not an integer", "an integer >= 1") from None
    return validation.count(value, MAX_HEAVY_ENV)


class LimitsInterceptor(grpc.ServerInterceptor):
    """:func:`check_request` on every request, and at most ``max_heavy`` concurrent :data:`HEAVY` calls."""

    def __init__(self, max_heavy: int | None = None, heavy: frozenset[str] = HEAVY) -> None:
        self.max_heavy = max_heavy_from_env() if max_heavy is None else validation.count(max_heavy, "max_heavy")
        self.heavy = heavy
        self._slots = threading.BoundedSemaphore(self.max_heavy)
        self._count_lock = threading.Lock()
        self._in_flight = 0

    @property
    def in_flight(self) -> int:
        """Heavy calls running now."""
        with self._count_lock:
            return self._in_flight

    def _admit(self) -> None:
        if not self._slots.acquire(blocking=False):
            raise ResourceExhausted(f"{self.max_heavy} heavy calls are already running on this server; "
                                    "try again later")
        with self._count_lock:
            self._in_flight += 1

    def _release(self) -> None:
        with self._count_lock:
            self._in_flight -= 1
        self._slots.release()

    def intercept_service(self, continuation: Callable[..., Any], handler_call_details: Any) -> Any:
        handler = continuation(handler_call_details)
        if handler is None:
            return None
        heavy = handler_call_details.method in self.heavy

        def wrap(behavior: Callable[..., Any], kind: str) -> Callable[..., Any]:
            if kind.startswith("stream_"):  # no client-streaming RPC here; leave any such as it is
                return behavior
            if kind == "unary_stream":
                def stream(request: Any, context: Any) -> Iterator[Any]:
                    check_request(request)
                    if not heavy:
                        yield from behavior(request, context)
                        return
                    self._admit()
                    try:
                        with stopping.stop_when(lambda: not context.is_active()):
                            yield from behavior(request, context)
                    finally:
                        self._release()
                return stream

            def unary(request: Any, context: Any) -> Any:
                check_request(request)
                if not heavy:
                    return behavior(request, context)
                self._admit()
                try:
                    # The deadline / cancellation reaches the job: its loops stop once the caller is gone.
                    with stopping.stop_when(lambda: not context.is_active()):
                        return behavior(request, context)
                finally:
                    self._release()
            return unary

        return wrap_handler(handler, wrap)
