"""``python -m edgetune.bench``'s closing line: a benchmark whose run failed is named, never counted as met."""

from __future__ import annotations

from edgetune.bench import __main__ as bench_main
from edgetune.bench import runner


def _row(name: str, value: float | None, met: bool | None) -> dict:
    return {"name": name, "value": value, "met": met}


def test_a_failed_run_is_named_and_exits_nonzero(monkeypatch, tmp_path, capsys):
    rows = [_row("fast", 1.0, True), _row("slow", 9.0, False), _row("broke", None, None), _row("figure", 3.0, None)]
    monkeypatch.setattr(runner, "run", lambda only, out: rows)
    assert bench_main.main(["--out", str(tmp_path / "r.json")]) == 1
    line = capsys.readouterr().out.strip().splitlines()[-1]
    assert "1 targets met" in line and "missed: slow" in line and "1 reported without a target" in line
    assert "not measured (the run failed, see its details): broke" in line


def test_every_run_finished_exits_zero(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(runner, "run", lambda only, out: [_row("fast", 1.0, True)])
    assert bench_main.main(["--out", str(tmp_path / "r.json")]) == 0
    out = capsys.readouterr().out
    assert "1 targets met" in out and "not measured" not in out


def test_the_fleet_bench_scores_each_decision_against_the_best_within_its_budget():
    import numpy as np

    from edgetune.bench.scale import _time_over_best
    from edgetune.devices.simulated.tables import truth_table
    from edgetune.powermodes.grids import named_grid
    from edgetune.powermodes.specs import get_spec
    from edgetune.tuning.jobs import NodeStatus

    grid = named_grid(get_spec("nano"), "fulcrum").array()
    rows = truth_table("nano", "mobilenetv3", "train", grid, [16])
    t, p = np.array([r["time_ms"] for r in rows]), np.array([r["power_w"] for r in rows])
    best = int(np.flatnonzero(p <= 6.0)[np.argmin(t[p <= 6.0])])
    slow = int(np.argmax(np.where(p <= 6.0, t, -np.inf)))
    nodes = [NodeStatus("a", mode=tuple(grid[best]), power_budget_w=6.0),
             NodeStatus("b", mode=tuple(grid[slow]), power_budget_w=6.0)]
    ratios = _time_over_best(nodes, {"a": "nano", "b": "nano"})
    assert ratios[0] == 1.0 and ratios[1] == t[slow] / t[best] > 1.5
