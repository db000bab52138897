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


def test_nondominated_matches_brute_force_in_three_objectives():
    from edgetune.optimization.pareto import nondominated

    rng = np.random.default_rng(3)
    c = rng.integers(0, 6, size=(700, 3)).astype(float)  # ties on purpose; > one 512-row block
    brute = np.array([not any((c[j] <= c[i]).all() and (c[j] < c[i]).any() for j in range(len(c)))
                      for i in range(len(c))])
    assert (nondominated(c) == brute).all() and brute.any() and not brute.all()
    # two objectives: the same front as pareto_mask where points are distinct
    d = rng.random((300, 2))
    assert (nondominated(d) == pareto_mask(d[:, 0], d[:, 1])).all()
    assert nondominated(np.empty((0, 3))).size == 0
