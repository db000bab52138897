"""The README's Walkthrough, run as a newcomer would: every ```bash block of the section, in order,
in one empty directory (files carry over from block to block, as in a terminal). The first command
that fails fails the test, with the block and the output so far.

A block made only of ``edgetune`` commands and ``cat > FILE <<'END'`` files runs in this process:
each command through the CLI's ``main`` (what the ``edgetune`` console script calls) with the same
arguments, so the suite pays no interpreter start per command. Any other block (``edgetune up`` in
the background, a shell loop, ``kill``) runs in bash as written, with the project's ``.venv/bin``
first on PATH: that block is the suite's process-level smoke test of ``up`` + a job + SIGTERM (exit
0, its ready file gone, no process of its run left, no error logged). A ```json block after a block is
the output the README shows for the block's last command: its keys and values, numbers as rounded there.
"""

from __future__ import annotations

import json
import math
import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from edgetune.cli import main
from edgetune.localrun.processes import find_marked

ROOT = Path(__file__).resolve().parents[2]
SECTION = "## Walkthrough"
HEREDOC = re.compile(r"cat > (\S+) <<'(\w+)'")


def walkthrough_blocks(readme: str) -> list[str]:
    """The ```bash blocks between ``## Walkthrough`` and the next ``## `` heading."""
    start = readme.index(SECTION)
    end = readme.find("\n## ", start + len(SECTION))
    section = readme[start:] if end < 0 else readme[start:end]
    return re.findall(r"```bash\n(.*?)```", section, flags=re.S)


def shown_outputs(readme: str) -> dict[int, Any]:
    """The output the README shows after a Walkthrough block, by the block's index in
    :func:`walkthrough_blocks`: a ```json block between it and the next ```bash block (an excerpt of the
    block's last command's ``--json`` output: the keys shown, numbers rounded)."""
    start = readme.index(SECTION)
    end = readme.find("\n## ", start + len(SECTION))
    section = readme[start:] if end < 0 else readme[start:end]
    shown: dict[int, Any] = {}
    block = -1
    for lang, body in re.findall(r"```(\w+)\n(.*?)```", section, flags=re.S):
        if lang == "bash":
            block += 1
        elif lang == "json" and block >= 0:
            shown[block] = json.loads(body)
    return shown


def matches(shown: Any, actual: Any, where: str = "$") -> list[str]:
    """Where ``actual`` differs from the excerpt ``shown``: its keys (actual may have more), list lengths,
    strings and booleans exactly, numbers as rounded (0.1 %)."""
    if isinstance(shown, dict):
        if not isinstance(actual, dict):
            return [f"{where}: {actual!r} is not an object"]
        return [d for k, v in shown.items()
                for d in (matches(v, actual[k], f"{where}.{k}") if k in actual else [f"{where}.{k}: missing"])]
    if isinstance(shown, list):
        if not isinstance(actual, list) or len(actual) != len(shown):
            return [f"{where}: {actual!r} is not a list of {len(shown)}"]
        return [d for i, (a, b) in enumerate(zip(shown, actual, strict=True)) for d in matches(a, b, f"{where}[{i}]")]
    if isinstance(shown, (int, float)) and not isinstance(shown, bool):
        ok = isinstance(actual, (int, float)) and not isinstance(actual, bool) and \
            math.isclose(actual, shown, rel_tol=1e-3, abs_tol=1e-9)
        return [] if ok else [f"{where}: {actual!r}, the README shows {shown!r}"]
    return [] if actual == shown else [f"{where}: {actual!r}, the README shows {shown!r}"]


def in_process_steps(block: str) -> list[tuple[str, list[str] | str]] | None:
    """The block as ``("edgetune", argv)`` and ``("file", "NAME\\nCONTENT")`` steps, or None when a
    line is anything else (the block then runs in bash)."""
    lines = block.replace("\\\n", " ").splitlines()
    steps: list[tuple[str, list[str] | str]] = []
    i = 0
    while i < len(lines):
        line = lines[i].strip()
        i += 1
        if not line:
            continue
        if heredoc := HEREDOC.fullmatch(line):
            name, tag = heredoc.groups()
            end = lines.index(tag, i)  # a ValueError: an unterminated heredoc, a broken README
            steps.append(("file", name + "\n" + "".join(f"{body}\n" for body in lines[i:end])))
            i = end + 1
            continue
        argv = shlex.split(line, comments=True)
        if not argv or argv[0] != "edgetune" or any(c in line for c in "$&|;<>`"):
            return None
        steps.append(("edgetune", argv[1:]))
    return steps


def test_the_readme_has_a_walkthrough_with_commands():
    blocks = walkthrough_blocks((ROOT / "README.md").read_text())
    assert len(blocks) >= 5 and all(b.strip() for b in blocks)
    steps = [in_process_steps(b) for b in blocks]
    # the in-process reading understands the README's commands and files (so what it runs is what is written)
    assert sum(s is not None for s in steps) >= 5
    assert ("edgetune", ["estimate", "fit", "--profiles", "truth.csv", "--epochs", "60", "--out", "ref.model"]) \
        in steps[1]  # type: ignore[operator]
    files = [s for block in steps if block for s in block if s[0] == "file"]
    assert files and all(isinstance(body, str) and body.endswith("\n") for _, body in files)
    assert any("up" in b for b, s in zip(blocks, steps, strict=True) if s is None)  # `up` runs as a process
    # Output shown where a reader compares: after in-process blocks whose last command prints --json;
    # the round plan's is a feasible plan of both nodes (issue 26: its own data answered infeasible, unshown).
    shown = shown_outputs((ROOT / "README.md").read_text())
    assert shown and all(steps[i] and steps[i][-1][0] == "edgetune" and "--json" in steps[i][-1][1]  # type: ignore[index]
                         for i in shown)
    plan_block = next(i for i, b in enumerate(blocks) if "edgetune plan " in b)
    assert shown[plan_block]["feasible"] is True and [n["id"] for n in shown[plan_block]["nodes"]] == ["orin-1", "orin-2"]
    assert matches({"a": [1.0, True]}, {"a": [1.0004, True], "b": 0}) == []
    assert matches({"a": [1.0, True]}, {"a": [1.01, False]}) == ["$.a[0]: 1.01, the README shows 1.0",
                                                                   "$.a[1]: False, the README shows True"]


@pytest.mark.slow
@pytest.mark.integration
@pytest.mark.timeout(600)  # a block may take its own 600 s; the suite's 300 s is for one test of many
def test_the_walkthrough_runs_as_written(tmp_path, monkeypatch, capsys):
    blocks = walkthrough_blocks((ROOT / "README.md").read_text())
    shown = shown_outputs((ROOT / "README.md").read_text())
    bin_dir = Path(sys.executable).parent  # the venv the tests run in: what `make install` made
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}
    monkeypatch.chdir(tmp_path)
    log: list[str] = []
    for i, block in enumerate(blocks, start=1):
        steps = in_process_steps(block)
        if steps is None:
            # one shell per block, in the same directory
            t0 = time.monotonic()
            done = subprocess.run(["bash", "-euo", "pipefail", "-c", block], cwd=tmp_path, env=env,
                                  capture_output=True, text=True, timeout=600)
            log.append(f"--- block {i} ({time.monotonic() - t0:.1f} s)\n{block}\n--- stdout\n{done.stdout[-3000:]}\n--- stderr\n{done.stderr[-3000:]}")
            assert done.returncode == 0, "\n".join(log[-2:])
            continue
        for kind, step in steps:
            if kind == "file":
                assert isinstance(step, str)
                name, body = step.split("\n", 1)
                (tmp_path / name).write_text(body)
                continue
            assert isinstance(step, list)
            t0 = time.monotonic()
            code = main(step)
            out, err = capsys.readouterr()
            log.append(f"--- block {i} ({time.monotonic() - t0:.1f} s): edgetune {shlex.join(step)}\n--- stdout\n{out[-3000:]}\n--- stderr\n{err[-3000:]}")
            assert code == 0, "\n".join(log[-2:])
        if i - 1 in shown:  # the README's excerpt of the block's last output
            differ = matches(shown[i - 1], json.loads(out))
            assert differ == [], f"block {i}'s output is not what the README shows: {differ}\n{log[-1]}"
    print("\n".join(entry.split("\n", 1)[0] for entry in log))  # each step's time, shown with -rP
    # The `up` block's run: ready file written, then removed at the stop; SIGTERM (its `kill`; `wait`
    # under `set -e` fails the block unless up exits 0) stops every process it started; a clean stop
    # logs no error (the coordinator used to log a traceback per open WatchConfig stream on every rollout).
    started = re.findall(r"logs in (\S+); run ([0-9a-f]+)", (tmp_path / "up.log").read_text())
    assert len(started) == 1, (tmp_path / "up.log").read_text()[-3000:]
    log_dir, run_id = Path(started[0][0]), started[0][1]
    assert find_marked(run_id) == [] and not (tmp_path / "up.json").exists()
    errors = [f"{f.name}: {line[:300]}" for f in sorted(log_dir.glob("*.log")) for line in f.read_text().splitlines()
              if '"level": "error"' in line or '"level": "critical"' in line]
    assert errors == [], errors
