"""Fixtures shared by the unit tests."""

from __future__ import annotations

import pytest

from edgetune.coordination.store import MemoryStore


@pytest.fixture
def store():
    """A fresh in-memory store: the coordination unit tests start no server
    (``test_store_contract.py`` holds the Redis backends to the same contract)."""
    with MemoryStore() as s:
        yield s
