"""`make demo` runs the main job: the suite as processes, the story through gRPC, a report, a clean stop.

A reduced run (30 + 10 modes per node, small reference fits, the estimator without Ray) of ``python -m edgetune.demo`` as a
subprocess: exit 0, the report folder complete, every node's verified choice within its budget
(per ``summary.json``), only the re-budgeted node's config revision bumped, and no process of
the run left behind. Plus the supervisor's own guarantees on small stand-in children.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time

import pytest

from edgetune.demo.suite import FLEET
from edgetune.localrun.processes import Supervisor, SupervisorError, find_marked


def _alive(pid: int, run_id: str) -> bool:
    """``pid`` is still a process of this run (a reused pid without the run's marker does not count)."""
    return pid in find_marked(run_id)


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("demo") / "report"
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "edgetune.demo", "--out", str(out), "--modes", "30", "--quick",
                           "--no-ray"],
                          capture_output=True, text=True, timeout=400, env={**os.environ, "COLUMNS": "200"})
    return proc, out, time.monotonic() - t0


def test_demo_exits_zero_and_writes_the_report(demo_run):
    proc, out, _ = demo_run
    assert proc.returncode == 0, f"stdout:\n{proc.stdout[-4000:]}\nstderr:\n{proc.stderr[-4000:]}"
    page = (out / "index.html").read_text()
    pngs = sorted(p.name for p in out.glob("*.png"))
    assert {"pareto_fronts.png", "predicted_vs_measured.png", "round_timeline.png"} <= set(pngs)
    for name in pngs:
        assert (out / name).stat().st_size > 10_000, name
        assert f'src="{name}"' in page and f'href="{name}"' in page, f"index.html does not link {name}"
    assert 'href="summary.json"' in page
    for node in FLEET:
        assert (out / "logs" / f"agent-{node.node_id}.log").exists()
    assert "Report:" in proc.stdout and "no stray process remains" in proc.stdout


def test_every_node_runs_a_verified_mode_within_its_budget(demo_run):
    proc, out, _ = demo_run
    summary = json.loads((out / "summary.json").read_text())
    rows = {r["node"]: r for r in summary["nodes"]}
    assert set(rows) == {n.node_id for n in FLEET}
    for node in FLEET:
        r = rows[node.node_id]
        assert node.node_id in proc.stdout
        assert r["mode"] and re.fullmatch(r"\d+c/[\d.]+/[\d.]+/[\d.]+", r["mode"]), r
        assert r["budget_w"] == node.budget_w
        assert r["power_w"] is not None and r["power_w"] <= r["budget_w"], r
        assert r["within_budget"] is True
        assert r["maxn"]["power_w"] > r["power_w"]  # MAXN: the fast, hungry baseline
    assert summary["accuracy"]["points"] > 0


def test_rounds_budget_change_and_concurrent_case(demo_run):
    _, out, _ = demo_run
    summary = json.loads((out / "summary.json").read_text())
    plans = {r["plan"]: r for r in summary["rounds"]}
    assert {"makespan", "energy", "energy, after budget change"} <= set(plans)
    assert plans["energy"]["makespan_s"] <= plans["energy"]["deadline_s"] + 1e-6
    bc = summary["budget_change"]
    assert bc["bumped"] == [bc["node"]], bc  # only the re-budgeted node gets a new revision
    assert bc["revisions_after"][bc["node"]] > bc["revisions_before"][bc["node"]]
    assert bc["agent_applied"] and bc["within_budget"], bc
    conc = summary["concurrent"]
    assert conc["profiled_points"] > 0
    if conc["feasible"]:
        assert conc["power_w"] <= conc["power_budget_w"] and conc["latency_ms"] <= conc["latency_budget_ms"]


def test_no_process_of_the_run_remains(demo_run):
    _, out, elapsed = demo_run
    summary = json.loads((out / "summary.json").read_text())
    pids = [p["pid"] for p in summary["processes"]]
    assert len(pids) >= len(FLEET) + 3  # redis, coordinator, optimizer, agents (+ estimator)
    assert not [pid for pid in pids if _alive(pid, summary["run_id"])]
    assert find_marked(summary["run_id"]) == []
    assert summary["stray_pids"] == [] and summary["exit_code"] == 0
    assert all(s["stopped_by"] in ("SIGTERM", "SHUTDOWN") for s in summary["shutdown"]), summary["shutdown"]
    assert elapsed < 300


# --- the supervisor on stand-in children ---------------------------------------------------------
def test_supervisor_stops_children_and_their_children(tmp_path):
    sup = Supervisor(tmp_path / "logs")
    # A child that forks a grandchild in another session and ignores SIGTERM: only SIGKILL ends it.
    code = ("import os, signal, subprocess, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
            "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'], start_new_session=True); "
            "print('ready', flush=True); time.sleep(120)")
    child = sup.spawn("stubborn", ["-c", code])
    deadline = time.monotonic() + 30
    while "ready" not in child.log_path.read_text() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(find_marked(sup.run_id)) == 2
    sup.close(grace_s=1.0)
    assert sup.stopped[0][3] == "SIGKILL"
    time.sleep(0.2)
    assert find_marked(sup.run_id) == []


def test_supervisor_reports_a_child_that_dies_at_start(tmp_path):
    sup = Supervisor(tmp_path / "logs", start_timeout_s=20)
    try:
        child = sup.spawn("broken", ["-c", "import sys; print('cannot bind: boom', flush=True); sys.exit(3)"])
        with pytest.raises(SupervisorError, match=r"(?s)broken .* exited with code 3.*cannot bind: boom"):
            sup.wait_ready(child, "edgetune.v1.Optimizer")
    finally:
        sup.close()
    assert sup.stopped[0][2] == 3
    assert find_marked(sup.run_id) == []


def test_ctrl_c_reports_what_was_written_not_a_report_that_never_was(tmp_path):
    """Ctrl-C part-way used to end with 'Report: …/index.html', a page that was never written."""
    out = tmp_path / "report"
    proc = subprocess.Popen([sys.executable, "-m", "edgetune.demo", "--out", str(out), "--modes", "30", "--quick",
                             "--no-ray"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "COLUMNS": "200"})
    deadline = time.monotonic() + 120
    while not (out / "logs").is_dir() and time.monotonic() < deadline:  # the suite is starting
        time.sleep(0.2)
    time.sleep(2.0)
    proc.send_signal(2)  # SIGINT, as Ctrl-C in its terminal
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 130, stdout[-3000:] + stderr[-3000:]
    assert not (out / "index.html").exists()
    assert "before the report was written" in stdout and "Report:" not in stdout, stdout[-3000:]
