"""Progress off a terminal: plain lines with done/total and an ETA, throttled, from every long command."""

import io

from click.testing import CliRunner

from edgetune.cli.profile import command as profile
from edgetune.cli.progress import PlainProgress, duration


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_plain_lines_are_throttled_and_carry_an_eta():
    out, clock = io.StringIO(), Clock()
    show = PlainProgress(out, interval_s=10.0, clock=clock).update
    show("profiling", 0, 50)          # first line at once
    clock.t = 5.0
    show("profiling", 1, 50)          # within 10 s of the last line: quiet
    clock.t = 20.0
    show("profiling", 10, 50, "4c/1113.6/510/2133 bs=16")  # 20 s for 10 points: 40 more take 80 s
    clock.t = 21.0
    show("profiling", 50, 50)         # the end is always shown
    lines = out.getvalue().splitlines()
    assert lines == ["profiling: 0/50 (0 %), 0s elapsed",
                     "profiling: 10/50 (20 %), 20s elapsed, ETA 1m20s — 4c/1113.6/510/2133 bs=16",
                     "profiling: 50/50 (100 %), 21s elapsed, done"]


def test_durations_read_well():
    assert [duration(s) for s in (0, 42.4, 190, 3720)] == ["0s", "42s", "3m10s", "1h02m"]


def test_profile_off_a_terminal_logs_progress(tmp_path, monkeypatch):
    monkeypatch.setenv("EDGETUNE_PROGRESS_INTERVAL_S", "0")
    out = tmp_path / "p.csv"
    r = CliRunner().invoke(profile, ["--device", "sim:orin-agx", "--workload", "resnet18", "--random", "3",
                                     "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert "profiling: 3/3 (100 %)" in r.stderr and "ETA" in r.stderr and "bs=16" in r.stderr
