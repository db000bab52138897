"""The estimator's energy estimate (THOR) prices networks with the Jetsons' physics (:mod:`edgetune.physics`),
not with the simulated device: importing its path loads no ``edgetune.devices.simulated`` module
(checked in a fresh interpreter, where nothing else has loaded it)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

PROBE = """
import json, sys
import {module}
print(json.dumps(sorted(m for m in sys.modules if m.startswith("edgetune."))))
"""


@pytest.mark.parametrize("module", ["edgetune.estimation.layerwise.energy", "edgetune.physics.costing"])
def test_the_energy_path_does_not_load_the_simulated_device(module):
    proc = subprocess.run([sys.executable, "-c", PROBE.format(module=module)], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    loaded = json.loads(proc.stdout.splitlines()[-1])
    assert "edgetune.physics.model" in loaded and "edgetune.physics.hardware" in loaded  # the physics it prices by
    assert [m for m in loaded if m.startswith("edgetune.devices.simulated")] == []


def test_the_old_modules_are_gone():
    import importlib.util

    for old in ("edgetune.devices.simulated.hardware", "edgetune.devices.simulated.model"):
        assert importlib.util.find_spec(old) is None, old
