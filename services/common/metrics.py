"""Prometheus metrics of a gRPC server: an RPC counter by method and code, a latency histogram.

The names follow go-grpc-prometheus, so stock Grafana dashboards work:
``grpc_server_started_total``, ``grpc_server_handled_total{grpc_code=...}`` and
``grpc_server_handling_seconds``, each labelled ``grpc_service``, ``grpc_method``,
``grpc_type``. They live in prometheus_client's default registry, which the metrics
endpoint serves, so a service's own metrics (``prometheus_client.Gauge(...)``) show up too.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import grpc
from prometheus_client import REGISTRY, Counter, Histogram, start_http_server

from edgetune.services.common.handlers import handler_kind, wrap_handler

_LABELS = ("grpc_service", "grpc_method", "grpc_type")

STARTED = Counter("grpc_server_started_total", "RPCs started on the server.", _LABELS)
HANDLED = Counter("grpc_server_handled_total", "RPCs completed on the server, by status code.",
                  (*_LABELS, "grpc_code"))
# Edge RPCs range from sub-millisecond (health) to minutes (profiling streams).
LATENCY = Histogram("grpc_server_handling_seconds", "Time from RPC start to its last response.",
                    _LABELS, buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10,
                                      30, 60, 300, 1800))

#: Handler kind -> grpc_type label value (as go-grpc-prometheus names them).
_TYPES = {"unary_unary": "unary", "unary_stream": "server_stream", "stream_unary": "client_stream",
          "stream_stream": "bidi_stream"}


def split_method(full_method: str) -> tuple[str, str]:
    """``/edgetune.v1.Profiler/GetDevice`` -> (``edgetune.v1.Profiler``, ``GetDevice``)."""
    service, _, method = full_method.lstrip("/").rpartition("/")
    return service or "unknown", method


def _code_of(context: grpc.ServicerContext, failed: bool) -> str:
    code = context.code()
    if code is None:
        # No code set: OK unless the behavior raised (gRPC then answers UNKNOWN).
        return "UNKNOWN" if failed else "OK"
    return code.name if isinstance(code, grpc.StatusCode) else str(code)


class MetricsInterceptor(grpc.ServerInterceptor):
    """Counts every RPC and times it; streaming RPCs end when their response stream does."""

    def intercept_service(self, continuation: Callable[..., Any], handler_call_details: Any) -> Any:
        handler = continuation(handler_call_details)
        if handler is None:
            return None
        service, method = split_method(handler_call_details.method)
        labels = (service, method, _TYPES[handler_kind(handler)])

        def wrap(behavior: Callable[..., Any], kind: str) -> Callable[..., Any]:
            if kind in ("unary_stream", "stream_stream"):
                return lambda request, context: _observe_stream(behavior, request, context, labels)
            return lambda request, context: _observe_unary(behavior, request, context, labels)

        return wrap_handler(handler, wrap)


def _finish(labels: tuple[str, str, str], start: float, code: str) -> None:
    LATENCY.labels(*labels).observe(time.perf_counter() - start)
    HANDLED.labels(*labels, code).inc()


def _observe_unary(behavior: Callable[..., Any], request: Any, context: grpc.ServicerContext,
                   labels: tuple[str, str, str]) -> Any:
    STARTED.labels(*labels).inc()
    start = time.perf_counter()
    failed = True
    try:
        response = behavior(request, context)
        failed = False
        return response
    finally:
        _finish(labels, start, _code_of(context, failed))


def _observe_stream(behavior: Callable[..., Any], request: Any, context: grpc.ServicerContext,
                    labels: tuple[str, str, str]) -> Iterator[Any]:
    STARTED.labels(*labels).inc()
    start = time.perf_counter()
    code = None
    try:
        yield from behavior(request, context)
    except GeneratorExit:
        code = "CANCELLED"  # the client went away and gRPC closed the stream
        raise
    except BaseException:
        code = _code_of(context, failed=True)
        raise
    finally:
        _finish(labels, start, code or _code_of(context, failed=False))


def start_metrics_server(port: int, host: str = "0.0.0.0") -> tuple[Any, int]:
    """Serve the default registry on ``http://host:port/metrics`` from a daemon thread.

    ``port=0`` takes any free port. Returns (the HTTP server, to ``shutdown()``; the bound port).
    """
    try:
        httpd, _thread = start_http_server(port, addr=host, registry=REGISTRY)
    except OSError as exc:  # two services on one host both want 9090: say which port and how to move it
        raise OSError(exc.errno, f"cannot serve metrics on {host}:{port} ({exc.strerror}); move the endpoint "
                                 f"with --metrics-port N (env EDGETUNE_METRICS_PORT; 0: no metrics endpoint)") from None
    return httpd, int(httpd.server_address[1])
