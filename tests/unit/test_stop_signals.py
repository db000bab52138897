"""Ctrl-C / SIGTERM for ``edgetune up`` and the demo (issue 26): the handler only sets a stop event that the
run checks, so where the signal lands does not matter. A KeyboardInterrupt raised from the handler was once
delivered inside a finalizer (``redis.Redis.__del__``), where Python ignores it, and the demo ran on."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from edgetune.localrun.processes import Interrupted, catch_stop_signals, run_until_stopped


def test_a_signal_landing_inside_a_finalizer_is_not_lost():
    class Finalized:
        def __del__(self) -> None:  # the signal arrives while Python runs a finalizer
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.01)

    before = signal.getsignal(signal.SIGINT)
    stop = catch_stop_signals()
    try:
        obj = Finalized()
        del obj  # with a raising handler: "Exception ignored in ... __del__", the interrupt gone
        assert stop.wait(2.0) and stop.signal_name == "SIGINT"
        with pytest.raises(Interrupted, match="SIGINT"):
            stop.check()
        assert issubclass(Interrupted, KeyboardInterrupt)  # a Ctrl-C handler catches it as one
    finally:
        stop.restore()
    assert signal.getsignal(signal.SIGINT) is before


def test_run_until_stopped_returns_raises_or_stops_at_once():
    stop = catch_stop_signals()
    try:
        assert run_until_stopped(lambda: 42, stop) == 42
        with pytest.raises(ValueError, match="boom"):
            run_until_stopped(lambda: (_ for _ in ()).throw(ValueError("boom")), stop)

        released = threading.Event()

        def long_step() -> None:  # a step that would run for minutes (a job, a fit)
            released.wait(60)

        threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGTERM)).start()
        t0 = time.monotonic()
        with pytest.raises(Interrupted, match="SIGTERM"):
            run_until_stopped(long_step, stop, poll_s=0.05)
        assert time.monotonic() - t0 < 5.0  # not after the step
        released.set()
    finally:
        stop.restore()
