"""The operator's CLI against a coordinator served in this process with bearer tokens (issue 26):
``node list / get / budget``, ``site budget``, ``job events``, ``job submit --wait --timeout-s`` on a job
whose target matches no node, a cancelled job's name submitted again; the connection flags from the
command line, ``EDGETUNE_*`` variables and a context of the config file alike.
"""

from __future__ import annotations

import json
from pathlib import Path

import harness
import pytest
import yaml
from click.testing import CliRunner

from edgetune.cli import cli
from edgetune.control.registry import NodeRegistry
from edgetune.identity import ServerSecurity
from edgetune.powermodes.specs import get_spec
from edgetune.store import MemoryStore, NodeRecord, spec_to_dict

OPERATOR = "operator-token-0123456789"
VIEWER = "viewer-token-0123456789ab"


def _private(path: Path, text: str) -> Path:
    path.write_text(text)
    path.chmod(0o600)
    return path


@pytest.fixture
def plane(tmp_path):
    tokens = _private(tmp_path / "tokens.yaml", yaml.safe_dump({"tokens": [
        {"token": OPERATOR, "role": "operator", "name": "alice"},
        {"token": VIEWER, "role": "viewer", "name": "vera"}]}))
    with MemoryStore() as store, harness.coordinator(store, security=ServerSecurity(auth_tokens=str(tokens)),
                                                     reconcile_s=0.1) as c:
        registry = NodeRegistry(store)
        registry.register(NodeRecord("orin-agx-1", device=spec_to_dict(get_spec("orin-agx")), power_budget_w=25.0,
                                     labels={"rack": "a"}))
        registry.register(NodeRecord("nano-1", device=spec_to_dict(get_spec("nano")), power_budget_w=5.0))
        registry.heartbeat("orin-agx-1", state="ready",
                           current_mode={"cores": 12, "cpu_mhz": 2201.6, "gpu_mhz": 1300.5, "emc_mhz": 3199.0})
        yield c.server.address, _private(tmp_path / "operator.token", OPERATOR + "\n"), tmp_path


def run(*args: str, env: dict[str, str] | None = None):
    return CliRunner().invoke(cli, list(args), env=env)


def test_node_list_get_and_budgets(plane):
    address, token_file, _ = plane
    conn = ["--coordinator", address, "--token-file", str(token_file)]
    r = run("node", "list", "--json", *conn)
    assert r.exit_code == 0, r.output
    nodes = {n["id"]: n for n in json.loads(r.output)}
    assert set(nodes) == {"orin-agx-1", "nano-1"}
    orin = nodes["orin-agx-1"]
    assert orin["device"] == "orin-agx" and orin["power_budget_w"] == 25.0 and orin["phase"] == "ready"
    assert orin["mode"] == {"cores": 12, "cpu_mhz": 2201.6, "gpu_mhz": 1300.5, "emc_mhz": 3199.0}
    assert orin["last_heartbeat"].endswith("Z") and nodes["nano-1"]["mode"] is None  # it reported none

    r = run("node", "list", *conn)
    assert r.exit_code == 0 and r.output.splitlines()[0].split() == [
        "NODE", "DEVICE", "BUDGET", "W", "PHASE", "MODE", "LAST", "HEARTBEAT"]
    assert "12c/2201.6/1300.5/3199" in r.output

    r = run("node", "budget", "nano-1", "6", *conn)
    assert r.exit_code == 0 and r.output.strip() == "nano-1: power budget 6 W", r.output
    r = run("node", "get", "nano-1", "--json", *conn)
    assert json.loads(r.output)["power_budget_w"] == 6.0
    r = run("node", "get", "nano-9", *conn)
    assert r.exit_code == 2 and "no node 'nano-9' is registered (registered: nano-1, orin-agx-1)" in r.output
    r = run("node", "budget", "nano-1", "0", *conn)
    assert r.exit_code == 2 and "WATTS" in r.output
    r = run("site", "budget", "90", *conn)
    assert r.exit_code == 0 and r.output.strip() == "site power budget 90 W", r.output

    # a viewer may list but not change budgets (the server's answer, exit 1 with its status)
    r = run("node", "budget", "nano-1", "7", "--coordinator", address, "--token", VIEWER)
    assert r.exit_code == 1 and "PERMISSION_DENIED" in r.output


def test_connection_from_variables_and_a_config_context(plane):
    address, token_file, tmp_path = plane
    r = run("node", "list", "--json", env={"EDGETUNE_COORDINATOR": address, "EDGETUNE_TOKEN_FILE": str(token_file),
                                           "EDGETUNE_CONFIG": str(tmp_path / "none.yaml")})
    assert r.exit_code == 0, r.output
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump({"current-context": "lab", "contexts": {
        "lab": {"coordinator": address, "token-file": token_file.name},  # relative to the config file
        "wrong": {"coordinator": "127.0.0.1:1"}}}))
    r = run("node", "list", "--json", env={"EDGETUNE_CONFIG": str(config)})
    assert r.exit_code == 0 and len(json.loads(r.output)) == 2, r.output
    # a flag wins over the context (here: the wrong context's address replaced by the right one)
    r = run("node", "list", "--json", "--context", "wrong", "--coordinator", address, "--token-file", str(token_file),
            env={"EDGETUNE_CONFIG": str(config)})
    assert r.exit_code == 0, r.output
    r = run("node", "list", "--context", "nope", env={"EDGETUNE_CONFIG": str(config)})
    assert r.exit_code == 2 and "--context: 'nope' is not in" in r.output and "lab, wrong" in r.output
    r = run("node", "list", env={"EDGETUNE_CONFIG": str(tmp_path / "none.yaml")})
    assert r.exit_code == 2 and "--coordinator: no coordinator address" in r.output


def test_a_job_matching_no_node_times_out_with_its_condition_and_a_cancelled_name_is_reused(plane):
    address, token_file, tmp_path = plane
    conn = ["--coordinator", address, "--token-file", str(token_file)]
    job = tmp_path / "job.yaml"
    job.write_text("name: typo\nworkload: {name: mobilenetv3}\nnodes: [nano-9]\nprofiles: 10\n")
    r = run("job", "submit", str(job), "--wait", "--timeout-s", "2", *conn)
    assert r.exit_code == 1, r.output
    assert "job typo not done within 2 s: Pending" in r.output
    assert "NoMatchingNodes=True (NodesNotRegistered): nano-9 matched no registered node" in r.output
    assert "unavailable" not in r.output

    job.write_text("name: typo\nworkload: {name: mobilenetv3}\nnodes: [nano-1]\nprofiles: 10\n")
    r = run("job", "submit", str(job), *conn)
    assert r.exit_code == 2 and "edgetune job cancel typo" in r.output, r.output
    assert run("job", "cancel", "typo", *conn).exit_code == 0
    r = run("job", "submit", str(job), "--json", *conn)
    assert r.exit_code == 0 and json.loads(r.output)["phase"] in ("Pending", "Running"), r.output

    # no estimator here: the node waits, and its events say why
    def waiting() -> bool:
        r = run("job", "events", "typo", "--json", *conn)
        return r.exit_code == 0 and any(json.loads(line)["reason"] == "NoEstimator" for line in r.output.splitlines())
    harness.wait_for(waiting, 10, "the node's NoEstimator event")
    events = [json.loads(line) for line in run("job", "events", "typo", "--json", *conn).output.splitlines()]
    assert set(events[-1]) == {"time", "node", "type", "reason", "message"}
    assert events[-1]["node"] == "nano-1" and events[-1]["type"] == "Warning"
    plain = run("job", "events", "typo", *conn)
    assert plain.exit_code == 0 and "nano-1  Warning  NoEstimator  no estimator / optimizer" in plain.output

    # delete frees the name: the same name is a new job (generation 1, no status yet)
    r = run("job", "delete", "typo", "--json", *conn)
    assert r.exit_code == 0 and json.loads(r.output)["phase"] == "Cancelled", r.output
    assert run("job", "get", "typo", *conn).exit_code == 2  # NOT_FOUND
    r = run("job", "submit", str(job), "--json", *conn)
    assert r.exit_code == 0, r.output
