"""A local child's Prometheus endpoint as the benches read it (``Child.metrics``): samples by name,
a counter as ``_total``, label sets summed; a child without an endpoint is refused, saying so."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, start_http_server

from edgetune.localrun.processes import Child, SupervisorError, free_port


def _child(tmp_path: Path, metrics_port: int | None) -> Child:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return Child("stand-in", proc, tmp_path / "x.log", tmp_path / "x.ready.json", metrics_port=metrics_port)


def test_metrics_by_sample_name_with_label_sets_summed(tmp_path):
    registry = CollectorRegistry()
    Gauge("demo_watches", "open watches", registry=registry).set(7)
    reads = Counter("demo_reads", "feed reads", ["replica"], registry=registry)
    reads.labels("a").inc(3)
    reads.labels("b").inc(2)
    port = free_port()
    server, thread = start_http_server(port, addr="127.0.0.1", registry=registry)
    try:
        got = _child(tmp_path, port).metrics()
    finally:
        server.shutdown()
        thread.join(5)
    assert got["demo_watches"] == 7.0 and got["demo_reads_total"] == 5.0


def test_a_child_without_an_endpoint_is_refused(tmp_path):
    with pytest.raises(SupervisorError, match="stand-in serves no metrics"):
        _child(tmp_path, None).metrics()
