"""``edgetune up`` + ``edgetune job`` end to end, as a user runs them: ``up`` as a subprocess
(Redis, estimator, optimizer, coordinator, one simulated agent per node), a job submitted with the
CLI (a process too) against the address in its ready file, then SIGTERM: exit 0 and no process of
the run left. The other ``edgetune job`` calls (get, list, the refusals, a call after the stop) run
the same CLI in this process (:func:`edgetune_here`): what they check is the CLI's output and exit
code, not a process's start.

The estimator runs ``--no-ray`` here (two shared CPU cores in CI; Ray's start-up is the
slowest part and is covered by the demo).
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from edgetune.cli import main
from edgetune.localrun.processes import find_marked

pytestmark = [pytest.mark.integration, pytest.mark.slow]

START_TIMEOUT_S = 240.0
CLI = [sys.executable, "-m", "edgetune.cli"]

JOB = """\
name: mnv3-train
workload: {name: mobilenetv3, role: train, batch_sizes: [16]}
nodes: [orin-agx-1, nano-1]
objective: min-time
power_budget_w: {orin-agx-1: 25}   # nano-1: its registered budget (6 W)
risk: 0.05
profiles: 12
reference_model: reference-orin-agx-train
"""


def edgetune(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=timeout)


def edgetune_here(capsys: pytest.CaptureFixture[str], *args: str) -> subprocess.CompletedProcess[str]:
    """``edgetune ARGS`` run by the CLI's ``main`` in this process: its exit code and output."""
    capsys.readouterr()  # what came before is not this call's
    code = main(list(args))
    out, err = capsys.readouterr()
    return subprocess.CompletedProcess(["edgetune", *args], code, out, err)


@pytest.fixture
def up(tmp_path: Path):
    ready = tmp_path / "ready.json"
    err_path = tmp_path / "up.err"
    with open(err_path, "w") as err, open(tmp_path / "up.out", "w") as out:
        proc = subprocess.Popen([*CLI, "up", "--nodes", "orin-agx,nano", "--ready-file", str(ready), "--no-ray",
                                 "--log-dir", str(tmp_path / "logs")], stdout=out, stderr=err)
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while not ready.exists():
            assert proc.poll() is None, f"up exited with {proc.returncode}:\n{err_path.read_text()[-3000:]}"
            assert time.monotonic() < deadline, f"up not ready in {START_TIMEOUT_S} s:\n{err_path.read_text()[-3000:]}"
            time.sleep(0.2)
        run_id = re.search(r"; run ([0-9a-f]+)", err_path.read_text())
        assert run_id is not None
        yield proc, json.loads(ready.read_text()), run_id.group(1), ready, tmp_path
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)


def test_up_submit_wait_json_then_sigterm(up, capsys) -> None:
    proc, ready, run_id, ready_path, tmp_path = up
    assert ready["nodes"] == ["orin-agx-1", "nano-1"] and set(ready) == {"coordinator", "nodes"}
    address = ready["coordinator"]
    assert re.fullmatch(r"127\.0\.0\.1:\d+", address)
    (tmp_path / "job.yaml").write_text(JOB)

    t0 = time.monotonic()
    r = edgetune("job", "submit", str(tmp_path / "job.yaml"), "--coordinator", address, "--wait", "--json",
                 "--timeout-s", "240")
    wall_s = time.monotonic() - t0
    assert r.returncode == 0, r.stdout + r.stderr
    job = json.loads(r.stdout)
    assert job["name"] == "mnv3-train" and job["phase"] == "Succeeded"
    assert [n["id"] for n in job["nodes"]] == ["orin-agx-1", "nano-1"]
    budgets = {"orin-agx-1": 25.0, "nano-1": 6.0}
    for node in job["nodes"]:
        assert set(node) == {"id", "device", "phase", "mode", "batch_size", "power_budget_w", "profiled",
                             "predicted", "measured", "reason"}
        assert node["phase"] == "Applied", node
        assert node["power_budget_w"] == budgets[node["id"]]
        assert 0 < node["measured"]["power_w"] <= node["power_budget_w"], node
        assert node["predicted"]["power_upper_w"] <= node["power_budget_w"], node
        assert set(node["mode"]) == {"cores", "cpu_mhz", "gpu_mhz", "emc_mhz"} and node["batch_size"] == 16
        assert node["profiled"] >= 12
    print(f"job Succeeded in {wall_s:.1f} s:", json.dumps(job["nodes"]))

    got = edgetune_here(capsys, "job", "get", "mnv3-train", "--coordinator", address, "--json")
    assert got.returncode == 0 and json.loads(got.stdout) == job
    listed = edgetune_here(capsys, "job", "list", "--coordinator", address)
    assert listed.returncode == 0 and "mnv3-train  Succeeded  2/2 nodes applied" in listed.stdout

    # Server errors: NOT_FOUND and INVALID_ARGUMENT exit 2 with the server's message.
    missing = edgetune_here(capsys, "job", "get", "no-such-job", "--coordinator", address)
    assert missing.returncode == 2 and "no-such-job" in missing.stderr, missing.stderr
    (tmp_path / "bad.yaml").write_text(JOB.replace("name: mnv3-train", "name: too-few").replace("profiles: 12",
                                                                                               "profiles: 2"))
    bad = edgetune_here(capsys, "job", "submit", str(tmp_path / "bad.yaml"), "--coordinator", address)
    assert bad.returncode == 2 and "spec.profiles" in bad.stderr, bad.stderr

    proc.send_signal(signal.SIGTERM)
    assert proc.wait(60) == 0, (tmp_path / "up.err").read_text()[-3000:]
    assert find_marked(run_id) == []
    assert not ready_path.exists()
    # a clean stop logs no error (the coordinator used to log one traceback per open WatchConfig stream,
    # read from a store closed under it, on every rollout)
    errors = [f"{log.name}: {line[:300]}" for log in sorted((tmp_path / "logs").glob("*.log"))
              for line in log.read_text().splitlines() if '"level": "error"' in line or '"level": "critical"' in line]
    assert errors == [], errors
    after = edgetune_here(capsys, "job", "get", "mnv3-train", "--coordinator", address)
    assert after.returncode == 1 and f"coordinator {address} unavailable" in after.stderr


def test_child_failing_at_start_exits_nonzero_and_cleans_up(tmp_path: Path) -> None:
    # A Redis URL nothing listens on: nothing can start; up says so, exits 1, leaves nothing behind.
    r = subprocess.run([*CLI, "up", "--nodes", "nano", "--no-ray", "--redis", "redis://127.0.0.1:1/0",
                        "--log-dir", str(tmp_path / "logs")], capture_output=True, text=True, timeout=300)
    assert r.returncode == 1, r.stderr
    assert "Error: cannot reach Redis at redis://127.0.0.1:1/0" in r.stderr
    run_id = re.search(r"; run ([0-9a-f]+)", r.stderr)
    assert run_id is not None and find_marked(run_id.group(1)) == []
