"""Fixtures shared by the unit tests."""

from __future__ import annotations

import pytest

from edgetune.store import ManualClock, MemoryStore


@pytest.fixture
def clock():
    """The TTL clock of :func:`store`: it moves only on ``clock.advance(seconds)``."""
    return ManualClock()


@pytest.fixture
def store(clock):
    """A fresh in-memory store: the coordination unit tests start no server
    (``test_store_contract.py`` holds the Redis backends to the same contract). Its TTLs
    (heartbeats, leases, job idle times) run on ``clock``."""
    with MemoryStore(clock=clock) as s:
        yield s
