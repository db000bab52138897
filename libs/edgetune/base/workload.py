"""A workload reference: a zoo name, or a user's ``MODULE:FUNCTION`` (its grammar, in one place).

A name without ``:`` is a zoo model or a workload id; ``MODULE:FUNCTION`` names a function that
returns ``(model, make_batch, loss_fn)`` (:mod:`edgetune.workloads.user` loads and checks it).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from edgetune.errors import InvalidArgument

#: The agent's ``--workload-path`` setting: directories separated by ``os.pathsep``.
WORKLOAD_PATH_ENV = "EDGETUNE_WORKLOAD_PATH"


def split_workload_path(text: str) -> list[Path]:
    """``--workload-path`` / ``EDGETUNE_WORKLOAD_PATH``: directories separated by ``os.pathsep``, blanks dropped."""
    return [Path(p.strip()) for p in text.split(os.pathsep) if p.strip()]


SPEC_ALLOWED = "MODULE:FUNCTION, e.g. mypkg.models:make, FUNCTION() returning (model, make_batch, loss_fn)"
#: Dotted Python module name and a function name (no attribute paths, no arguments).
_SPEC_RE = re.compile(r"^(?P<module>[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*):(?P<function>[A-Za-z_][A-Za-z0-9_]*)$")
#: Longest spec accepted (an id is the spec's name plus ``-`` and the hash: it must stay an identifier).
MAX_SPEC_LENGTH = 100


def parse_spec(spec: object) -> tuple[str, str]:
    """``"pkg.mod:make"`` → ``("pkg.mod", "make")``, or ``InvalidArgument("workload")``."""
    if not isinstance(spec, str):
        raise InvalidArgument("workload", f"{spec!r} is not a string", SPEC_ALLOWED)
    if len(spec) > MAX_SPEC_LENGTH:
        raise InvalidArgument("workload", f"{spec[:40]!r}... has {len(spec)} characters (at most {MAX_SPEC_LENGTH})",
                              SPEC_ALLOWED)
    m = _SPEC_RE.match(spec)
    if m is None:
        raise InvalidArgument("workload", f"{spec!r} is not MODULE:FUNCTION", SPEC_ALLOWED)
    return m["module"], m["function"]


def is_user_workload(name: object) -> bool:
    """Whether a workload name is a ``MODULE:FUNCTION`` entry (zoo names and workload ids have no ``:``)."""
    return isinstance(name, str) and ":" in name
