"""What the leader looks up once per (job, device model) — a job's reference, its fleet pool — is made by one
worker while the others starting beside it wait for its answer, and its failure reaches them at once."""

from __future__ import annotations

import threading

import pytest
from harness import wait_for

from edgetune.control.configs import ConfigStore
from edgetune.control.leader import LeaderLease
from edgetune.control.reconcile import Reconciler
from edgetune.control.registry import NodeRegistry
from edgetune.errors import FailedPrecondition
from edgetune.store import MemoryStore

KEY = ("job", "orin-agx")
WORKERS = 8


def _reconciler() -> Reconciler:
    store = MemoryStore()
    return Reconciler(store, NodeRegistry(store), ConfigStore(store), LeaderLease(store, "coordinator"), None, None)


def _ask_together(rec: Reconciler, cache: dict, make, kind: str = "reference") -> list:
    """WORKERS threads asking at once; what each got (its value or its exception)."""
    got: list = [None] * WORKERS
    started = threading.Barrier(WORKERS)

    def ask(i: int) -> None:
        started.wait(10)  # every worker running before any asks: they ask within microseconds of each other
        try:
            got[i] = rec._per_device(cache, kind, KEY, make)
        except Exception as exc:  # noqa: BLE001 - the answer under test
            got[i] = exc

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(WORKERS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    return got


def test_one_worker_makes_it_and_the_others_wait_for_its_answer():
    rec, cache, calls, release = _reconciler(), {}, [], threading.Event()

    def make() -> str:
        calls.append(1)
        release.wait(5)  # the others arrive meanwhile
        return "reference@1"

    threading.Timer(0.5, release.set).start()
    assert _ask_together(rec, cache, make) == ["reference@1"] * WORKERS
    assert len(calls) == 1 and cache == {KEY: "reference@1"}
    assert rec._per_device(cache, "reference", KEY, make) == "reference@1" and len(calls) == 1  # kept


def test_its_failure_is_every_waiters_at_once_and_the_next_ask_tries_again():
    rec, cache, calls, release = _reconciler(), {}, [], threading.Event()

    def failing() -> str:
        calls.append(1)
        release.wait(5)
        raise FailedPrecondition("estimator: connection refused")

    threading.Timer(0.5, release.set).start()
    got = _ask_together(rec, cache, failing)
    assert len(calls) == 1  # not each worker in turn after it (a hung estimator: one timeout, not eight)
    assert all(isinstance(g, FailedPrecondition) for g in got)
    # asked again, not the error
    assert rec._per_device(cache, "reference", KEY, lambda: "reference@2") == "reference@2"
    with pytest.raises(KeyError):
        rec._making[(*KEY, "reference")]  # nothing left waiting


def test_a_pool_asked_while_the_reference_is_being_made_is_a_pool():
    # a job's first workers find its reference while others already ask for its fleet pool: same (job, device
    # model), other caches; each asker gets its own kind (a pool asker once got the reference's tuple)
    rec, release = _reconciler(), threading.Event()
    references: dict = {}
    pools: dict = {}

    def find_reference() -> tuple[str, str]:
        release.wait(5)
        return ("reference@1", "the shipped reference")

    finding = threading.Thread(target=lambda: rec._per_device(references, "reference", KEY, find_reference))
    finding.start()
    try:
        wait_for(lambda: rec._making or None, 5, "the reference being made")
        got = _ask_together(rec, pools, lambda: "pool", kind="pool")
    finally:
        release.set()
        finding.join(10)
    assert got == ["pool"] * WORKERS and pools == {KEY: "pool"}
    assert references == {KEY: ("reference@1", "the shipped reference")}
