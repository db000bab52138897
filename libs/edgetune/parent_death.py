"""Children that die with their parent: the parent-death signal (``PR_SET_PDEATHSIG``) on Linux.

:func:`launch_argv` rewrites a child's command so that the kernel sends it SIGTERM when the
thread that started it dies, which covers a parent killed with SIGKILL (no ``atexit``, no
signal handler). The embedded Redis server and the process supervisor's children use it.

``setpriv --pdeathsig`` (util-linux) sets the signal in the child and execs the command, so
``Popen`` keeps its vfork path. A ``preexec_fn`` would force a plain fork, which runs gRPC's
fork handlers in the child; with live channels they can kill it before ``exec``
(grpc/grpc#43055: EBADF on the poller's epoll fd once ``close_fds`` has run). Without
``setpriv`` the ``preexec_fn`` is used only while gRPC is not loaded, and otherwise nothing.
The signal is set once ``setpriv`` runs: a parent killed between ``Popen`` returning and that
moment (microseconds; a loaded test machine hit it) leaves the child behind.
"""

from __future__ import annotations

import ctypes
import shutil
import signal
import sys
import threading
from collections.abc import Callable, Sequence

_PR_SET_PDEATHSIG = 1


def launch_argv(argv: Sequence[str]) -> tuple[list[str], Callable[[], None] | None]:
    """``(argv, preexec_fn)`` for ``subprocess.Popen``: ``argv`` with the parent-death signal set."""
    argv = list(argv)
    if not pdeathsig_ok():
        return argv, None
    setpriv = shutil.which("setpriv")
    if setpriv is not None:
        return [setpriv, "--pdeathsig", "TERM", "--", *argv], None
    return argv, (None if "grpc" in sys.modules else die_with_parent)


def die_with_parent() -> None:  # runs in the child between fork and exec
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


def pdeathsig_ok() -> bool:
    # Only from the main thread: the signal fires when the *forking thread* exits, which for a
    # worker thread could be long before the process does.
    return sys.platform.startswith("linux") and threading.current_thread() is threading.main_thread()
