"""Fixtures shared by the unit tests."""

from __future__ import annotations

import pytest

from edgetune.coordination.store import EmbeddedStore


@pytest.fixture(scope="module")
def shared_store():
    """One embedded Redis per test module: starting a server per test would dominate the time."""
    s = EmbeddedStore()
    yield s
    s.close()


@pytest.fixture
def store(shared_store):
    """The module's embedded store, emptied for this test."""
    shared_store.client.flushall()
    return shared_store
