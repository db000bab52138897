import numpy as np

from edgetune.optimization.pareto import pareto_front, pareto_mask, throughput_front


def brute_force_mask(a, b):
    n = len(a)
    keep = np.ones(n, dtype=bool)
    for i in range(n):
        for j in range(n):
            if j == i:
                continue
            dominates = a[j] <= a[i] and b[j] <= b[i] and (a[j] < a[i] or b[j] < b[i])
            duplicate_earlier = a[j] == a[i] and b[j] == b[i] and j < i
            if dominates or duplicate_earlier:
                keep[i] = False
                break
    return keep


def test_matches_brute_force_on_random_points_with_ties():
    rng = np.random.default_rng(0)
    for _ in range(30):
        n = rng.integers(1, 60)
        a = rng.integers(0, 12, n).astype(float)  # many ties on purpose
        b = rng.integers(0, 12, n).astype(float)
        assert (pareto_mask(a, b) == brute_force_mask(a, b)).all()


def test_front_is_sorted_by_time_and_power_falls():
    rng = np.random.default_rng(1)
    t = rng.uniform(10, 100, 500)
    p = 2000 / t + rng.uniform(0, 20, 500)
    idx = pareto_front(t, p)
    assert (np.diff(t[idx]) > 0).all()
    assert (np.diff(p[idx]) < 0).all()


def test_throughput_front_maximises_throughput():
    thr = np.array([1.0, 2.0, 3.0, 2.5])
    p = np.array([5.0, 6.0, 9.0, 10.0])
    assert list(throughput_front(thr, p)) == [0, 1, 2]


def test_empty_input():
    assert pareto_mask(np.array([]), np.array([])).size == 0
