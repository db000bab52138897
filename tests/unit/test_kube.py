"""Kubernetes awareness against recorded API responses (no API server; the registry on the in-memory store).

Fixtures (tests/fixtures/kube/) are API-server responses for three K3s Jetson nodes: a
``NodeList`` (one Ready, one cordoned, one NotReady/unreachable) and the watch events that
follow it (uncordon, NotReady, DELETED, BOOKMARK). They are deserialised by the real
``kubernetes.client.ApiClient`` and, in the last tests, served over loopback HTTP to the real
``CoreV1Api`` + ``kubernetes.watch.Watch`` exactly as an API server streams them.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest
from kubernetes import client, watch

from edgetune.control import kube
from edgetune.control.registry import NodeRegistry
from edgetune.store import NodeRecord

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "kube"
NODELIST = (FIXTURES / "nodelist_jetsons.json").read_text()
EVENTS = (FIXTURES / "watch_nodes.jsonl").read_text().splitlines()


@pytest.fixture(scope="module")
def api_client():
    return client.ApiClient(client.Configuration())


def test_recorded_nodelist_deserialises_and_classifies(api_client):
    nodes = kube.deserialize(api_client, NODELIST, "V1NodeList")
    assert isinstance(nodes, client.V1NodeList) and all(isinstance(n, client.V1Node) for n in nodes.items)
    status = {s.name: s for s in map(kube.node_status, nodes.items)}
    ready, cordoned, down = status["jetson-orin-01"], status["jetson-orin-02"], status["jetson-xavier-01"]
    assert ready.available and ready.reason == "" and ready.device_model == "orin-agx" and ready.jetpack == "6.0"
    assert not cordoned.available and "cordoned" in cordoned.reason
    assert not down.available and "NotReady (Ready=Unknown, NodeStatusUnknown" in down.reason
    assert "tainted node.kubernetes.io/unreachable:NoExecute" in down.reason
    assert down.device_model == "xavier-agx" and down.jetpack == "5.1.2"


def test_recorded_watch_events_update_the_view(api_client):
    w = watch.Watch()
    w._api_client = api_client
    watcher = kube.KubeNodeWatcher(core_v1=None)
    for node in kube.deserialize(api_client, NODELIST, "V1NodeList").items:
        watcher.statuses[node.metadata.name] = kube.node_status(node)
    for line in EVENTS:  # the client's own event decoding, as Watch.stream does it
        watcher.apply_event(w.unmarshal_event(line, "V1Node"))
    assert watcher.statuses["jetson-orin-02"].available  # uncordoned
    assert "KubeletNotReady" in watcher.statuses["jetson-orin-01"].reason
    assert watcher.statuses["jetson-xavier-01"].reason == "deleted from the cluster"
    assert watcher.resource_version == "48270"
    assert set(watcher.unavailable()) == {"jetson-orin-01", "jetson-xavier-01"}


class _RecordedApi(BaseHTTPRequestHandler):
    """Replays the fixtures for GET /api/v1/nodes: the list, or (watch=true) the event stream."""

    protocol_version = "HTTP/1.0"  # the watch body ends when the connection closes, as after timeoutSeconds
    requests: list[dict] = []

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        url = urlsplit(self.path)
        query = {k: v[0] for k, v in parse_qs(url.query).items()}
        type(self).requests.append({"path": url.path, **query})
        if url.path != "/api/v1/nodes":
            self.send_error(404)
            return
        body = ("\n".join(EVENTS) + "\n") if query.get("watch") == "true" else NODELIST
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(body.encode())

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def recorded_api():
    _RecordedApi.requests = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _RecordedApi)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    config = client.Configuration(host=f"http://127.0.0.1:{server.server_address[1]}")
    api = client.ApiClient(config)
    yield client.CoreV1Api(api)
    api.close()
    server.shutdown()
    server.server_close()


def test_list_and_watch_through_the_client_flag_registry_nodes(recorded_api, store):
    registry = NodeRegistry(store)
    for name in ("jetson-orin-01", "jetson-orin-02", "jetson-xavier-01", "laptop-sim"):
        registry.register(NodeRecord(node_id=f"agent-{name}", hostname=name))
    # An agent whose hostname differs from its node name is matched by its label.
    registry.register(NodeRecord(node_id="agent-x", hostname="container-7f3a",
                                 labels={kube.LABEL_K8S_NODE: "jetson-orin-02"}))
    changes: list[dict] = []
    watcher = kube.KubeNodeWatcher(recorded_api, watch_timeout_s=5,
                                   on_change=lambda s: changes.append(kube.apply_to_registry(registry, s)))

    watcher.sync()
    assert watcher.resource_version == "48240"
    flags = {n.node_id: n.unavailable_reason for n in registry.nodes()}
    assert flags["agent-jetson-orin-01"] is None and flags["agent-laptop-sim"] is None
    assert "cordoned" in flags["agent-jetson-orin-02"] and "cordoned" in flags["agent-x"]
    assert "NotReady" in flags["agent-jetson-xavier-01"]
    assert {n.node_id for n in registry.plannable_nodes()} == {"agent-jetson-orin-01", "agent-laptop-sim"}

    assert watcher.watch_once() == 4
    plannable = {n.node_id for n in registry.plannable_nodes()}
    assert plannable == {"agent-jetson-orin-02", "agent-x", "agent-laptop-sim"}
    assert registry.get("agent-jetson-xavier-01").unavailable_reason == "deleted from the cluster"

    list_req, watch_req = _RecordedApi.requests
    assert list_req["labelSelector"] == "edgetune.io/jetson=true" and "watch" not in list_req
    assert watch_req["watch"] == "true" and watch_req["resourceVersion"] == "48240"
    assert watch_req["timeoutSeconds"] == "5" and watch_req["allowWatchBookmarks"] == "true"
    assert any(changes)


def test_background_watcher_survives_a_failing_api_server(store):
    api = client.CoreV1Api(client.ApiClient(client.Configuration(host="http://127.0.0.1:9")))  # nothing listens
    watcher = kube.KubeNodeWatcher(api, retry_s=0.05).start()
    threading.Event().wait(0.3)
    watcher.stop()
    assert watcher.statuses == {} and watcher._thread is None


def test_node_without_ready_condition_is_unavailable(api_client):
    doc = json.loads(NODELIST)["items"][0]
    doc["status"]["conditions"] = [c for c in doc["status"]["conditions"] if c["type"] != "Ready"]
    status = kube.node_status(kube.deserialize(api_client, doc, "V1Node"))
    assert not status.available and "no Ready condition" in status.reason
