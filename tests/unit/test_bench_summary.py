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
