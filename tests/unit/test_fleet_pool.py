"""The fleet pool's barrier (edgetune.tuning.fleet): who it waits for, how long, that it fits once, that a
failed fit is tried again, that a stop is seen; and the pooled points' order and bound."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from edgetune.base.records import Points
from edgetune.tuning.fleet import FleetPool, pooled
from edgetune.tuning.protocols import ModelRef


def _points(node: int, n: int = 3) -> Points:
    modes = np.column_stack([np.full(n, node), np.arange(n) + 1.0, np.ones(n), np.ones(n)])
    return Points(modes, np.full(n, 16), np.arange(n) + 10.0 * node, np.full(n, float(node)), "orin-agx", "w", "train")


class Fits:
    """A fit that records what it was given and returns a new model each time."""

    def __init__(self, fail_first: bool = False) -> None:
        self.calls: list[Points] = []
        self.fail_first = fail_first
        self.lock = threading.Lock()

    def __call__(self, points: Points) -> ModelRef:
        with self.lock:
            self.calls.append(points)
            if self.fail_first and len(self.calls) == 1:
                raise RuntimeError("estimator away")
            return ModelRef(f"fleet@{len(self.calls)}", "transfer")


def never() -> bool:
    return False


def test_pooled_points_are_in_node_order_whatever_the_join_order_and_bounded_by_a_seeded_draw():
    a, b = _points(1), _points(2)
    assert np.array_equal(pooled({"n2": b, "n1": a}).power_w, pooled({"n1": a, "n2": b}).power_w)
    assert list(pooled({"n2": b, "n1": a}).power_w) == [1.0] * 3 + [2.0] * 3
    big = {f"n{i}": _points(i, 10) for i in range(1, 11)}
    one, two = pooled(big, seed=3, max_rows=25), pooled(dict(reversed(big.items())), seed=3, max_rows=25)
    assert len(one) == 25 and np.array_equal(one.time_ms, two.time_ms)
    assert len(pooled(big, seed=4, max_rows=25)) == 25 and not np.array_equal(pooled(big, seed=4, max_rows=25).time_ms,
                                                                             one.time_ms)


def test_every_expected_node_joins_then_one_fit_on_all_of_their_points_serves_them_all():
    pool, fits = FleetPool({"n1", "n2", "n3"}, wait_s=30), Fits()
    got: dict[str, ModelRef | None] = {}

    def join(i: int) -> None:
        got[f"n{i}"] = pool.join(f"n{i}", _points(i), fits, never)

    threads = [threading.Thread(target=join, args=(i,)) for i in (1, 2)]
    for t in threads:
        t.start()
    threads[0].join(0.3)
    assert threads[0].is_alive() and not fits.calls  # two of three: still waiting
    join(3)
    for t in threads:
        t.join(5)
    assert len(fits.calls) == 1 and len(fits.calls[0]) == 9
    assert {m.model_id for m in got.values() if m} == {"fleet@1"} and len(got) == 3
    assert pool.fitted_from == (3, 9)
    # a node joining after the fit takes the model as it is: no second fit, its points not added
    assert pool.join("n4", _points(4), fits, never) == got["n1"] and len(fits.calls) == 1


def test_the_wait_is_bounded_a_lagging_node_is_left_out_of_the_pool():
    now = [0.0]
    pool, fits = FleetPool({"n1", "n2"}, wait_s=10, clock=lambda: now[0]), Fits()
    done: list[ModelRef | None] = []
    t = threading.Thread(target=lambda: done.append(pool.join("n1", _points(1), fits, never)))
    t.start()
    t.join(0.2)
    assert t.is_alive()
    now[0] = 10.5  # the wait is over: n1 fits on its own points
    t.join(5)
    assert done and done[0] is not None and len(fits.calls) == 1 and len(fits.calls[0]) == 3
    assert pool.join("n2", _points(2), fits, never) == done[0]


def test_a_failed_fit_is_tried_again_by_a_waiting_node_and_a_stop_ends_the_wait():
    assert FleetPool({"n1", "n2"}, wait_s=30).join("n1", _points(1), Fits(), lambda: True) is None
    pool, fits = FleetPool({"n1", "n2"}, wait_s=30), Fits(fail_first=True)
    waiting: list[ModelRef | None] = []
    t = threading.Thread(target=lambda: waiting.append(pool.join("n1", _points(1), fits, never)))
    t.start()
    t.join(0.2)
    with pytest.raises(RuntimeError, match="estimator away"):  # n2 completes the pool; its fit fails
        pool.join("n2", _points(2), fits, never)
    t.join(5)  # n1, still waiting, fits again
    assert waiting and waiting[0] is not None and waiting[0].model_id == "fleet@2"
    assert [len(p) for p in fits.calls] == [6, 6]


def test_a_node_without_peers_does_not_pool():
    assert not FleetPool({"n1"}).pools and FleetPool({"n1", "n2"}).pools
