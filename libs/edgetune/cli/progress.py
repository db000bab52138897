"""Progress for long CLI work, on a terminal and off it.

On a terminal (stdout and stderr both TTYs) a rich bar per task refreshes in place on stderr.
Anywhere else — nohup, systemd, CI, a pipe — plain lines go to stderr instead, one per task at
its start, then at most every ``interval_s`` (``EDGETUNE_PROGRESS_INTERVAL_S``, default 10 s)
and at its end, each with done/total, the elapsed time and an ETA::

    profiling: 12/50 (24 %), 3m10s elapsed, ETA 10m02s — 4c/1113.6/510/2133 bs=16

Callers get one function, ``update(task, done, total, detail="")``, whichever display it is.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TextIO

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn

from edgetune.errors import InvalidArgument

Update = Callable[..., None]  # (task: str, done: int, total: int, detail: str = "")
INTERVAL_ENV = "EDGETUNE_PROGRESS_INTERVAL_S"
DEFAULT_INTERVAL_S = 10.0


def duration(seconds: float) -> str:
    """``3m10s``, ``1h02m``, ``42s``: short enough for a log line."""
    s = max(0, int(round(seconds)))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{(s % 3600) // 60:02d}m"


@dataclass
class _Task:
    started: float
    last_line: float


class PlainProgress:
    """Log lines with done/total and an ETA, throttled to one per ``interval_s`` per task."""

    def __init__(self, stream: TextIO, interval_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.stream, self.interval_s, self.clock = stream, interval_s, clock
        self.tasks: dict[str, _Task] = {}

    def update(self, task: str, done: int, total: int, detail: str = "") -> None:
        now = self.clock()
        state = self.tasks.get(task)
        if state is None:
            state = self.tasks[task] = _Task(now, now)
        elif done < total and now - state.last_line < self.interval_s:
            return
        state.last_line = now
        elapsed = now - state.started
        line = f"{task}: {done}/{total}"
        if total > 0:
            line += f" ({100 * done // total} %)"
        line += f", {duration(elapsed)} elapsed"
        if 0 < done < total:
            line += f", ETA {duration(elapsed / done * (total - done))}"
        elif done >= total:
            line += ", done"
        if detail:
            line += f" — {detail}"
        print(line, file=self.stream, flush=True)


def _interval_s() -> float:
    raw = os.environ.get(INTERVAL_ENV, "")
    if not raw:
        return DEFAULT_INTERVAL_S
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not value >= 0:
        raise InvalidArgument(INTERVAL_ENV, f"{raw!r} is not a number of seconds", ">= 0")
    return value


@contextmanager
def progress_display(unit: str = "") -> Iterator[Update]:
    """``update(task, done, total, detail="")`` for the work inside the block (see the module doc).

    ``unit`` labels the bars' counts on a terminal (``epochs``).
    """
    if not (sys.stdout.isatty() and sys.stderr.isatty()):
        yield PlainProgress(sys.stderr, _interval_s()).update
        return

    bars = Progress(TextColumn("[bold]{task.fields[name]}"), BarColumn(), MofNCompleteColumn(), TextColumn(unit),
                    TimeElapsedColumn(), TextColumn("{task.description}"), console=Console(stderr=True))
    ids: dict[str, TaskID] = {}

    def update(task: str, done: int, total: int, detail: str = "") -> None:
        if task not in ids:
            ids[task] = bars.add_task(detail, total=total, name=task)
        bars.update(ids[task], completed=done, total=total, description=detail)

    with bars:
        yield update
