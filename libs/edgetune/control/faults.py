"""Fault injection for crash tests: ``EDGETUNE_FAULT_POINT=<name>`` makes this process SIGKILL
itself when it reaches the named point (no cleanup, no atexit: as a kill from outside).

The points sit around each multi-key write of the coordinator, so a test can check that a
kill before or after it leaves the registry, the configs and the last round in agreement:

- ``round.planned`` / ``round.committed``: a round's configs and ``round:last`` (PlanRound
  with apply, a re-plan);
- ``budget.planned`` / ``budget.committed``: a node's or the site's budget with the configs
  re-planned for it (UpdateBudget).
"""

from __future__ import annotations

import os
import signal

ENV = "EDGETUNE_FAULT_POINT"
POINTS = ("round.planned", "round.committed", "budget.planned", "budget.committed")


def point(name: str) -> None:
    """SIGKILL this process when ``$EDGETUNE_FAULT_POINT`` names ``name`` (else nothing)."""
    if os.environ.get(ENV) == name:
        os.kill(os.getpid(), signal.SIGKILL)
