"""The README's Walkthrough, run exactly as a newcomer would: every ```bash block of the section,
in order, in one shell, in an empty directory with the project's ``.venv/bin`` first on PATH.
The first command that fails fails the test, with the block and the output so far."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SECTION = "## Walkthrough"


def walkthrough_blocks(readme: str) -> list[str]:
    """The ```bash blocks between ``## Walkthrough`` and the next ``## `` heading."""
    start = readme.index(SECTION)
    end = readme.find("\n## ", start + len(SECTION))
    section = readme[start:] if end < 0 else readme[start:end]
    return re.findall(r"```bash\n(.*?)```", section, flags=re.S)


def test_the_readme_has_a_walkthrough_with_commands():
    blocks = walkthrough_blocks((ROOT / "README.md").read_text())
    assert len(blocks) >= 5 and all(b.strip() for b in blocks)


@pytest.mark.slow
@pytest.mark.integration
def test_the_walkthrough_runs_as_written(tmp_path):
    blocks = walkthrough_blocks((ROOT / "README.md").read_text())
    bin_dir = Path(sys.executable).parent  # the venv the tests run in: what `make install` made
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}
    log = []
    for i, block in enumerate(blocks, start=1):
        # one shell per block, in the same directory: files carry over, as in a terminal
        done = subprocess.run(["bash", "-euo", "pipefail", "-c", block], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=600)
        log.append(f"--- block {i}\n{block}\n--- stdout\n{done.stdout[-3000:]}\n--- stderr\n{done.stderr[-3000:]}")
        assert done.returncode == 0, "\n".join(log[-2:])
