"""Seed 000 joint batch size + mode selection, baselines and LUT / efficiency reading."""

import itertools
import math

import numpy as np
import pytest

from edgetune.base.records import BatchEfficiency
from edgetune.errors import InvalidArgument
from edgetune.optimization.joint import (
    JointLUT,
    baseline_best_r,
    baseline_largest_batch,
    baseline_mode,
    candidate_set,
    evaluate,
    joint_select,
    oracle_select,
)
from edgetune.optimization.joint_tables import read_efficiency, read_lut

NANO_F = [76.8, 153.6, 230.4, 307.2, 384, 460.8, 537.6, 614.4, 691.2, 768, 844.8, 921.6]


def nano_lut():
    """Nano-like LUT: time for s samples falls with frequency and batch size, power rises with both."""
    rows = []
    for b in (4, 8, 16, 32, 64, 128):
        for f in NANO_F:
            time_s = 50.0 * (1 + 16 / b) * (921.6 / f) ** 0.8
            power_w = 2.0 + 5.5 * (f / 921.6) ** 1.5 * (1 + math.log2(b) / 14)
            rows.append((b, f"{f:g}", time_s, power_w))
    return JointLUT.from_rows(rows)


ANCHOR_EFF = BatchEfficiency.from_pairs({4: 9, 8: 10, 16: 13, 32: 15, 64: 22, 128: 40})

# Ahmed et al.'s anchor shape: N(8)/N(32) = 10/15; b=32 draws more power at a frequency, so a low
# cap forces it to a slow frequency and b=8 wins; at 7 W both run fast and b=32 wins.
ANCHOR_ROWS = [
    (8, "307", 100.0, 4.0), (8, "460", 70.0, 4.4), (8, "614", 55.0, 5.2),
    (32, "153", 150.0, 4.2), (32, "307", 80.0, 4.8), (32, "460", 56.0, 5.6), (32, "614", 35.0, 6.6),
]


def test_ahmed_anchor_b8_at_low_cap_b32_at_high_cap():
    lut = JointLUT.from_rows(ANCHOR_ROWS)
    eff = BatchEfficiency.from_pairs({8: 10, 32: 15})
    low = joint_select(lut, eff, 4.5)
    assert (low.batch_size, low.mode, low.time_to_target_s) == (8, "460", 700.0)
    assert joint_select(lut, eff, 5.0).batch_size == 8
    high = joint_select(lut, eff, 7.0)
    assert (high.batch_size, high.mode, high.time_to_target_s) == (32, "614", 525.0)
    assert joint_select(lut, eff, None) == high
    # Baseline 1 at 4.5 W: the largest batch that fits (32) at its fastest feasible mode (153)
    b1 = baseline_largest_batch(lut, eff, 4.5)
    assert (b1.batch_size, b1.mode, b1.time_to_target_s) == (32, "153", 2250.0)


def test_baseline_mode_is_the_fastest_mode_every_model_and_batch_fits():
    lut = nano_lut()
    p = {(int(b), m): w for b, m, w in zip(lut.batch_size, lut.mode, lut.power_w, strict=True)}
    for cap in (3.0, 4.5, 7.0):
        mode = baseline_mode([lut], cap)
        # every batch size fits at the chosen mode, and the next frequency up breaks the cap for some b
        assert all(p[(b, mode)] <= cap for b in (4, 8, 16, 32, 64, 128))
        above = NANO_F[NANO_F.index(float(mode)) + 1]
        assert any(p[(b, f"{above:g}")] > cap for b in (4, 8, 16, 32, 64, 128))
    assert baseline_mode([lut], None) == "921.6"
    # a second model that draws more power pulls the shared mode down; a cap nothing fits gives None
    hot = JointLUT(lut.batch_size, lut.mode, lut.time_s, lut.power_w + 1.0)
    assert float(baseline_mode([lut, hot], 7.0)) < float(baseline_mode([lut], 7.0))
    assert baseline_mode([lut], 1.0) is None
    with pytest.raises(InvalidArgument, match="luts"):
        baseline_mode([], 7.0)


def test_algorithm1_never_slower_than_baselines():
    lut = nano_lut()
    # baselines are never faster than Algorithm 1 (same passes), oracle equals it here
    for cap in (4.5, 5.0, 7.0, None):
        ours = joint_select(lut, ANCHOR_EFF, cap)
        assert ours.time_to_target_s <= baseline_largest_batch(lut, ANCHOR_EFF, cap).time_to_target_s
        assert ours.time_to_target_s <= baseline_best_r(lut, ANCHOR_EFF, cap).time_to_target_s
        assert oracle_select(lut, ANCHOR_EFF, cap) == ours


def test_baselines():
    lut = nano_lut()
    b1 = baseline_largest_batch(lut, ANCHOR_EFF, 4.5)
    # largest batch that fits, at its fastest (highest-frequency) feasible mode
    fits = [(b, m, t) for b, m, t, p in zip(lut.batch_size, lut.mode, lut.time_s, lut.power_w, strict=True)
            if p <= 4.5]
    assert b1.batch_size == max(b for b, _, _ in fits)
    assert b1.time_s == min(t for b, _, t in fits if b == b1.batch_size)
    b2 = baseline_best_r(lut, ANCHOR_EFF, 4.5)
    assert b2.mode == b1.mode
    assert b2.batch_size == 4  # least passes among batch sizes feasible at that mode
    # scoring with other (true) passes
    true = BatchEfficiency.from_pairs({4: 20, 8: 10, 16: 13, 32: 15, 64: 22, 128: 40})
    assert evaluate(lut, b2, true) == pytest.approx(b2.time_s * 20)
    assert baseline_best_r(lut, ANCHOR_EFF, 4.5, true).time_to_target_s == pytest.approx(b2.time_s * 20)
    assert not baseline_largest_batch(lut, ANCHOR_EFF, 1.0).feasible


def test_matches_brute_force_on_random_luts():
    rng = np.random.default_rng(0)
    for _ in range(200):
        bs = sorted(rng.choice([2, 4, 8, 16, 32, 64], size=int(rng.integers(1, 5)), replace=False).tolist())
        modes = [str(m) for m in range(int(rng.integers(1, 5)))]
        rows = [(b, m, float(rng.integers(1, 10)), float(rng.integers(1, 10))) for b, m in itertools.product(bs, modes)
                if rng.random() < 0.8]
        if not rows:
            continue
        lut = JointLUT.from_rows(rows)
        eff = BatchEfficiency.from_pairs({b: (math.inf if rng.random() < 0.2 else float(rng.integers(1, 6)))
                                          for b in bs})
        cap = None if rng.random() < 0.2 else float(rng.integers(1, 10))
        got = joint_select(lut, eff, cap)
        best = None
        for i, (b, _m, t, p) in enumerate(rows):
            n = eff.passes_by_batch[b]
            if (cap is None or p < cap) and math.isfinite(n):  # strictly under the cap
                key = (t * n, p, i)
                best = key if best is None or key < best else best
        if best is None:
            assert not got.feasible and got.reason and got.closest is not None
        else:
            assert got.feasible and got.index == best[2] and got.time_to_target_s == best[0]
        c = candidate_set(lut, cap)
        for b, i in c.items():
            assert lut.batch_size[i] == b and (cap is None or lut.power_w[i] < cap)


def test_the_cap_is_strict():
    """Peak power exactly at the cap does not fit (the paper's C: peak power under P_max)."""
    lut = JointLUT.from_rows([(8, "fast", 10.0, 7.0), (8, "slow", 20.0, 6.5)])
    eff = BatchEfficiency.from_pairs({8: 2.0})
    assert joint_select(lut, eff, 7.0).mode == "slow"
    assert joint_select(lut, eff, 7.01).mode == "fast"
    assert not joint_select(lut, eff, 6.5).feasible


def test_infeasible_reasons():
    lut = JointLUT.from_rows([(8, "a", 10.0, 5.0), (16, "a", 6.0, 6.0)])
    eff = BatchEfficiency.from_pairs({8: 3, 16: math.inf})
    r = joint_select(lut, eff, 4.0)
    assert not r.feasible and "4 W" in r.reason and r.closest == 0
    # what was profiled, and its peak power, not a fact about the device (issue 26)
    assert "rows of the LUT has power < 4 W" in r.reason and "peak" in r.reason and "no (batch size" not in r.reason
    r = joint_select(lut, BatchEfficiency.from_pairs({8: math.inf, 16: math.inf}), None)
    assert not r.feasible and "never" in r.reason or "reaches" in r.reason
    r = joint_select(lut, eff, 5.5)
    assert r.feasible and r.batch_size == 8
    r = joint_select(JointLUT.from_rows([(16, "a", 6.0, 6.0), (8, "a", 1.0, 9.0)]), eff, 7.0)
    assert not r.feasible and "reaches the target" in r.reason
    assert r.to_json() == {"feasible": False, "reason": r.reason}
    with pytest.raises(InvalidArgument):
        joint_select(lut, eff, -1.0)


def write(path, text):
    path.write_text(text)
    return str(path)


def test_read_lut_and_efficiency(tmp_path):
    lut = read_lut(write(tmp_path / "l.csv", "batch_size,mode,time_s,power_w\n8,307,10,4\n\n32,614,5,6.5\n"))
    assert lut.batch_size.tolist() == [8, 32] and lut.mode.tolist() == ["307", "614"]
    eff = read_efficiency(write(tmp_path / "e.csv", "batch_size,passes_to_target\n8,10\n16,\n32,nan\n64,inf\n"))
    assert eff.passes_by_batch == {8: 10.0, 16: math.inf, 32: math.inf, 64: math.inf}
    assert eff.ratio()[8] == 1.0


@pytest.mark.parametrize("text,where", [
    ("batch_size,mode,time_s\n8,a,1\n", "l.csv:1:power_w"),
    ("batch_size,mode,time_s,power_w\n8,a,x,1\n", "l.csv:2:time_s"),
    ("batch_size,mode,time_s,power_w\n8,a,1,1\n\n8,a,2,2\n", "l.csv:4:mode"),
    ("batch_size,mode,time_s,power_w\n8,,1,1\n", "l.csv:2:mode"),
    ("batch_size,mode,time_s,power_w\n8,a,-1,1\n", "l.csv:2:time_s"),
    ("batch_size,mode,time_s,power_w\n", "l.csv:2:batch_size"),
])
def test_read_lut_rejects(tmp_path, text, where):
    with pytest.raises(InvalidArgument) as err:
        read_lut(write(tmp_path / "l.csv", text))
    assert where in str(err.value)


@pytest.mark.parametrize("text,where", [
    ("batch_size,passes_to_target\n8,abc\n", "e.csv:2:passes_to_target"),
    ("batch_size,passes_to_target\n8,-3\n", "e.csv:2:passes_to_target"),
    ("batch_size,passes_to_target\n8,1\n8,2\n", "e.csv:3:batch_size"),
    ("batch_size\n8\n", "e.csv:1:passes_to_target"),
    ("batch_size,passes_to_target\n0,1\n", "e.csv:2:batch_size"),
])
def test_read_efficiency_rejects(tmp_path, text, where):
    with pytest.raises(InvalidArgument) as err:
        read_efficiency(write(tmp_path / "e.csv", text))
    assert where in str(err.value)
