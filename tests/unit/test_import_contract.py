"""The control plane imports no ML stack: the coordinator and optimizer server modules, and the CLI's
light commands (their ``--help``), load none of torch, sklearn, scipy, ray, gpytorch, matplotlib (each checked in a
fresh interpreter, since this test process has most of them loaded already)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

HEAVY = ("torch", "sklearn", "scipy", "ray", "gpytorch", "matplotlib")

PROBE = """
import json, sys
{code}
print(json.dumps(sorted(p for p in {heavy!r} if p in sys.modules)))
"""


def loaded_after(code: str) -> list[str]:
    out = subprocess.run([sys.executable, "-c", PROBE.format(code=code, heavy=HEAVY)],
                         capture_output=True, text=True, timeout=120, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("module", ["edgetune.services.coordinator.server", "edgetune.services.optimizer.server"])
def test_control_plane_server_imports_no_ml_stack(module):
    assert loaded_after(f"import {module}") == []


#: The CLI commands whose help (and import) must stay light: all but ``estimate`` and ``tune``.
LIGHT_COMMANDS = ("", "modes", "device", "profile", "optimize", "search", "plan", "serve", "up", "job")


def test_cli_light_commands_import_no_ml_stack():
    code = ("import contextlib, io\nfrom edgetune.cli import main\n"
            f"for command in {LIGHT_COMMANDS!r}:\n"
            "    with contextlib.redirect_stdout(io.StringIO()):\n"
            "        assert main([*command.split(), '--help']) == 0, command")
    assert loaded_after(code) == []


def test_the_probe_sees_a_heavy_import():
    """The check can fail: a module that loads torch is reported."""
    assert "torch" in loaded_after("import edgetune.estimation.nn")
