"""Children that die with their parent: the launch rule, and the embedded Redis and supervisor children under it."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import time

import pytest

from edgetune import parent_death
from edgetune.store import EmbeddedRedisServer


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as fh:  # a zombie is dead
        return fh.read().rsplit(")", 1)[1].split()[0] != "Z"


def _program(pid: int) -> str:
    """The name of the program ``pid`` runs (its command line's first word, without the path)."""
    with open(f"/proc/{pid}/cmdline", "rb") as fh:
        return os.path.basename(fh.read().split(b"\0", 1)[0].decode())


def test_the_signal_never_needs_a_fork_through_python_with_grpc_loaded(monkeypatch):
    # A preexec_fn forces a plain fork: gRPC's fork handlers then run in the child and, with live
    # channels, can kill it before exec (grpc/grpc#43055). setpriv sets the signal instead.
    import grpc  # noqa: F401  (loaded, as in every service process)

    argv, preexec = parent_death.launch_argv(["redis-server", "x.conf"])
    assert preexec is None and argv[-2:] == ["redis-server", "x.conf"]
    if shutil.which("setpriv"):  # util-linux (Debian: essential)
        assert argv[:4] == [shutil.which("setpriv"), "--pdeathsig", "TERM", "--"]
    monkeypatch.setattr(parent_death.shutil, "which", lambda name: None)  # no setpriv: no signal with gRPC
    assert parent_death.launch_argv(["redis-server", "x.conf"]) == (["redis-server", "x.conf"], None)
    monkeypatch.delitem(sys.modules, "grpc")
    assert parent_death.launch_argv(["redis-server"])[1] is parent_death.die_with_parent  # safe without gRPC


def test_a_worker_thread_never_sets_it():
    # the signal follows the forking *thread*: a worker thread's child would die when the thread ends
    got = []
    worker = threading.Thread(target=lambda: got.append(parent_death.launch_argv(["x"])))
    worker.start()
    worker.join()
    assert got == [(["x"], None)]


def test_the_embedded_server_is_still_the_child_itself():
    with EmbeddedRedisServer(port=0) as server:  # setpriv execs redis-server: same pid
        assert os.readlink(f"/proc/{server.pid}/exe").endswith("redis-server")


# what each owner starts: a program that prints the pid of the child it started, then waits
OWNERS = {
    "embedded redis-server": (
        "from edgetune.store import EmbeddedRedisServer\n"
        "s = EmbeddedRedisServer(port=0)\n"
        "s.start()\n"
        "pid = s.pid\n"
    ),
    "supervisor child": (
        "import os\n"
        "from pathlib import Path\n"
        "from edgetune.localrun.processes import Supervisor\n"
        "import grpc\n"  # as in the demo: gRPC is loaded when children are spawned
        "sup = Supervisor(Path(os.environ['TMPDIR']) / 'logs')\n"
        "pid = sup.spawn('sleeper', ['-c', 'import time; time.sleep(60)']).pid\n"
    ),
}


@pytest.mark.parametrize("what", list(OWNERS))
def test_a_child_dies_with_its_sigkilled_owner(tmp_path, what):
    code = OWNERS[what] + "print(pid, flush=True)\nimport time\ntime.sleep(60)\n"
    # TMPDIR: the killed owner cannot remove its runtime dir; keep it where pytest cleans up.
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    owner = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, env=env)
    try:
        pid = int(owner.stdout.readline())
        assert _alive(pid)
        # setpriv sets the signal, then execs the command: until that exec the child has no signal yet
        # (an owner killed in those microseconds leaves it behind; on a loaded machine the test hit them)
        deadline = time.monotonic() + 10
        while _program(pid) == "setpriv" and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        owner.send_signal(signal.SIGKILL)  # no atexit, no handler: only the kernel's signal is left
        owner.wait()
        owner.stdout.close()
    deadline = time.monotonic() + 5
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not _alive(pid), f"the {what} {pid} outlived its owner"
