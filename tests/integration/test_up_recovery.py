"""Issue 26's acceptance, as an operator runs it: ``up --nodes orin-agx,nano``'s cluster (built in this
process, :class:`harness.InProcessCluster`, as tests/integration/test_up_jobs.py does), then only the CLI
(its ``main``, in this process). A job over both nodes; ``node budget nano-1 1`` → the node is Failed and its
``Infeasible`` condition says why; ``node budget nano-1 6`` → Applied again within 30 s with no new
profiling; ``node list --json`` shows both nodes with budget, phase and mode; a job naming ``nano-9``
has ``NoMatchingNodes`` and ``submit --wait --timeout-s`` exits non-zero saying so; a cancelled job's
name takes a changed spec.
"""

from __future__ import annotations

import json
import time

import pytest
from harness import InProcessCluster, references
from test_up_jobs import edgetune

from edgetune.localrun.controlplane import local_nodes, parse_nodes

pytestmark = [pytest.mark.integration, pytest.mark.slow]

JOB = """\
name: recover
workload: {name: mobilenetv3, role: train, batch_sizes: [16]}
nodes: [orin-agx-1, nano-1]
power_budget_w: {orin-agx-1: 25}   # nano-1: its registered budget, changed below
profiles: 12
reference_model: reference-orin-agx-train
"""


@pytest.fixture
def up(tmp_path, run_dir):
    """``edgetune up --nodes orin-agx,nano``'s coordinator address (its nodes, budgets and references)."""
    nodes = local_nodes(parse_nodes("orin-agx,nano"))
    with InProcessCluster(tmp_path, tuning=True) as cluster:
        assert cluster.estimator is not None and cluster.coordinator is not None
        cluster.start_agents({n.node_id: (n.device, n.budget_w) for n in nodes})
        references(cluster.store, cluster.estimator.address, [n.device for n in nodes], run_dir)
        yield cluster.coordinator.address


def _node(capsys, address: str, name: str, node_id: str) -> dict:
    r = edgetune(capsys, "job", "get", name, "--coordinator", address, "--json")
    assert r.returncode == 0, r.stderr
    return next(n for n in json.loads(r.stdout)["nodes"] if n["id"] == node_id)


def _until(capsys, address: str, name: str, node_id: str, check, timeout_s: float) -> dict:
    deadline = time.monotonic() + timeout_s
    while True:
        node = _node(capsys, address, name, node_id)
        if check(node):
            return node
        assert time.monotonic() < deadline, node
        time.sleep(0.25)


def test_an_operator_recovers_a_node_from_an_impossible_budget(up, tmp_path, capsys) -> None:
    address = up
    (tmp_path / "job.yaml").write_text(JOB)
    r = edgetune(capsys, "job", "submit", str(tmp_path / "job.yaml"), "--coordinator", address, "--wait", "--json")
    assert r.returncode == 0, r.stdout + r.stderr
    before = _node(capsys, address, "recover", "nano-1")
    assert before["phase"] == "Applied"

    assert edgetune(capsys, "node", "budget", "nano-1", "1", "--coordinator", address).returncode == 0
    failed = _until(capsys, address, "recover", "nano-1",
                    lambda n: n["power_budget_w"] == 1.0 and n["phase"] == "Failed", 60)
    infeasible = next(c for c in failed["conditions"] if c["type"] == "Infeasible")
    assert infeasible["status"] == "True" and "least predicted power" in infeasible["message"], infeasible

    assert edgetune(capsys, "node", "budget", "nano-1", "6", "--coordinator", address).returncode == 0
    t0 = time.monotonic()
    again = _until(capsys, address, "recover", "nano-1",
                   lambda n: n["power_budget_w"] == 6.0 and n["phase"] == "Applied", 30)
    assert time.monotonic() - t0 <= 30
    assert again["profiled"] == before["profiled"]  # no new profiling
    listed = edgetune(capsys, "node", "list", "--coordinator", address, "--json")
    nodes = {n["id"]: n for n in json.loads(listed.stdout)}
    assert set(nodes) == {"orin-agx-1", "nano-1"} and nodes["nano-1"]["power_budget_w"] == 6.0
    assert all(n["phase"] and n["mode"] is not None for n in nodes.values()), nodes

    (tmp_path / "typo.yaml").write_text(JOB.replace("name: recover", "name: typo").replace("nano-1]", "nano-9]"))
    r = edgetune(capsys, "job", "submit", str(tmp_path / "typo.yaml"), "--coordinator", address, "--wait",
                 "--timeout-s", "5")  # the condition is set on the first pass
    assert r.returncode != 0 and "NoMatchingNodes=True" in r.stderr and "nano-9" in r.stderr, r.stderr
    assert "unavailable" not in r.stderr

    assert edgetune(capsys, "job", "cancel", "typo", "--coordinator", address).returncode == 0
    (tmp_path / "typo.yaml").write_text(JOB.replace("name: recover", "name: typo").replace("profiles: 12",
                                                                                              "profiles: 10"))
    r = edgetune(capsys, "job", "submit", str(tmp_path / "typo.yaml"), "--coordinator", address, "--json")
    assert r.returncode == 0, r.stderr
