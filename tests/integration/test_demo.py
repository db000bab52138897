"""`make demo` runs the main job: a fleet profiled, modes chosen within budgets, a report written."""

import subprocess
import sys

from edgetune.demo import story


def test_demo_writes_report_and_respects_budgets(tmp_path):
    out = tmp_path / "report"
    proc = subprocess.run([sys.executable, "-m", "edgetune.demo", "--out", str(out), "--modes", "12"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    for name in ("index.html", "pareto_fronts.png", "mode_counts.png"):
        assert (out / name).stat().st_size > 1000, name
    page = (out / "index.html").read_text()
    assert "pareto_fronts.png" in page and "orin-1" in page
    for node in story.FLEET:
        assert node in proc.stdout


def test_each_choice_is_a_profiled_mode_within_budget():
    r = story.profile_node("n", "orin-agx", 25.0, "resnet18", n_modes=15, seed=3)
    assert r.chosen is not None
    assert r.chosen.power_w <= 25.0
    assert r.chosen in r.measurements
    feasible = [m.time_ms for m in r.measurements if m.power_w <= 25.0]
    assert r.chosen.time_ms == min(feasible)
    assert r.maxn.power_w > r.chosen.power_w  # MAXN is the fast, hungry baseline
