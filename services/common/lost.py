"""A record lost with the store's data is reported as lost (DATA_LOSS), not as never there.

:class:`LostRecordsInterceptor` watches the calls of :data:`TUNING_JOBS`: every job name a
response carries (Submit, Get, List, each update of a Watch) is remembered with the store's
incarnation (:class:`~edgetune.store.lost.LostRecords`, which also lists every job now and then);
a call that ends NOT_FOUND for a name seen under an earlier incarnation ends DATA_LOSS instead,
saying the job was lost with the store's data and must be submitted again. A watcher whose job
vanishes under it gets the same status, so ``job watch`` / ``job submit --wait`` and ``job get``
all tell the submitter.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import grpc

from edgetune.control.tuningjobs import SPEC_KIND
from edgetune.errors import NotFound
from edgetune.services.common.handlers import wrap_handler
from edgetune.store import Store
from edgetune.store.lost import LostRecords

#: The tuning jobs' documents.
TUNING_JOB_KIND = SPEC_KIND


@dataclass(frozen=True)
class Tracked:
    """How one method names its record: in the request (``name_of``) and in the response (``names_in``)."""

    name_of: Callable[[Any], str] | None
    names_in: Callable[[Any], list[str]]


def _job_name(job: Any) -> list[str]:
    return [str(job.spec.name)]


TUNING_JOBS: dict[str, Tracked] = {
    "/edgetune.v1.Coordinator/SubmitTuningJob": Tracked(None, _job_name),
    "/edgetune.v1.Coordinator/GetTuningJob": Tracked(lambda r: str(r.name), _job_name),
    "/edgetune.v1.Coordinator/CancelTuningJob": Tracked(lambda r: str(r.name), _job_name),
    "/edgetune.v1.Coordinator/WatchTuningJob": Tracked(lambda r: str(r.name), _job_name),
    "/edgetune.v1.Coordinator/ListTuningJobs": Tracked(None, lambda r: [str(j.spec.name) for j in r.jobs]),
}


class LostRecordsInterceptor(grpc.ServerInterceptor):
    """NOT_FOUND -> DATA_LOSS for records a data loss took (module doc)."""

    def __init__(self, store: Store, kind: str = TUNING_JOB_KIND, tracked: dict[str, Tracked] | None = None,
                 what: str = "tuning job", refresh_s: float = 5.0) -> None:
        self.records = LostRecords(store, kind, what=what, refresh_s=refresh_s)
        self.tracked = TUNING_JOBS if tracked is None else tracked

    def start(self) -> LostRecordsInterceptor:
        self.records.start()
        return self

    def stop(self) -> None:
        self.records.stop()

    def _seen(self, rule: Tracked, response: Any) -> None:
        try:
            self.records.seen(rule.names_in(response))
        except Exception:  # remembering is best effort: the call itself succeeded
            pass

    def _lost(self, rule: Tracked, request: Any, context: grpc.ServicerContext, exc: Exception) -> None:
        """Abort DATA_LOSS when the call ended NOT_FOUND for a record that was lost (else return)."""
        not_found = isinstance(exc, NotFound) or context.code() == grpc.StatusCode.NOT_FOUND
        if rule.name_of is None or not not_found:
            return
        try:
            why = self.records.lost(rule.name_of(request))
        except Exception:  # the store is away as well: leave the status as it is
            return
        if why is not None:
            context.abort(grpc.StatusCode.DATA_LOSS, why)

    def intercept_service(self, continuation: Callable[..., Any], handler_call_details: Any) -> Any:
        handler = continuation(handler_call_details)
        rule = self.tracked.get(handler_call_details.method)
        if handler is None or rule is None:
            return handler

        def wrap(behavior: Callable[..., Any], kind: str) -> Callable[..., Any]:
            if kind.startswith("stream_"):
                return behavior
            if kind == "unary_stream":
                def stream(request: Any, context: Any) -> Iterator[Any]:
                    try:
                        for response in behavior(request, context):
                            self._seen(rule, response)
                            yield response
                    except Exception as exc:
                        self._lost(rule, request, context, exc)
                        raise
                return stream

            def unary(request: Any, context: Any) -> Any:
                try:
                    response = behavior(request, context)
                except Exception as exc:
                    self._lost(rule, request, context, exc)
                    raise
                self._seen(rule, response)
                return response
            return unary

        return wrap_handler(handler, wrap)
