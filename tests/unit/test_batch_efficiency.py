"""Batch-size efficiency on the digits proxy (seed 000): lr rule, passes to target, r, eff.csv."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from edgetune.errors import InvalidArgument
from edgetune.estimation.batch_efficiency import (
    BatchEfficiencyEstimate,
    estimate_batch_efficiency,
    scaled_lr,
    train_to_target,
    write_efficiency_csv,
)
from edgetune.estimation.proxy import DATASETS, build_proxy_model, load_proxy_data

torch.set_num_threads(1)  # the test machine's cores are shared


def test_lr_scales_with_the_square_root_of_the_batch_size_from_5e_4_at_128():
    assert scaled_lr(128) == pytest.approx(5e-4)
    assert scaled_lr(32) == pytest.approx(2.5e-4)
    assert scaled_lr(8) == pytest.approx(1.25e-4)
    assert scaled_lr(512) == pytest.approx(1e-3)
    assert scaled_lr(64, base_lr=1e-3, base_batch=64) == pytest.approx(1e-3)
    with pytest.raises(InvalidArgument, match="batch_size"):
        scaled_lr(0)


def test_proxy_sets_are_disjoint_fixed_and_split_80_20():
    a, b = (load_proxy_data(name) for name in DATASETS)
    assert (a.n_train, len(a.y_test)) == (560, 140) == (b.n_train, len(b.y_test))
    assert a.x_train.shape[1:] == (3, 8, 8)
    assert load_proxy_data("digits") is a  # cached: the same tensors for every task
    with pytest.raises(InvalidArgument, match="proxy"):
        load_proxy_data("cifar10")


def test_tiny_estimate_gives_finite_passes_and_r_in_0_1_with_max_1():
    est = estimate_batch_efficiency("resnet-slim", [16, 64], target_accuracy=0.9, seeds=(0,), max_passes=20,
                                    parallel=False, samples_per_pass=64)
    mean = est.passes_mean()
    assert set(mean) == {16, 64} and all(math.isfinite(n) and n >= 1 for n in mean.values())
    r = est.ratio()
    assert all(0.0 < v <= 1.0 for v in r.values()) and max(r.values()) == 1.0
    assert est.initial_accuracy < 0.9
    for run in est.runs:  # stopped at the first pass at target, counted in s-sample passes
        assert run.accuracy_by_pass[-1] >= 0.9 and all(a < 0.9 for a in run.accuracy_by_pass[:-1])
        assert run.passes_to_target == len(run.accuracy_by_pass)
        assert run.lr == pytest.approx(scaled_lr(run.batch_size))


def test_never_reaching_the_target_is_inf_and_written_as_inf(tmp_path):
    from edgetune.optimization.joint_tables import read_efficiency

    est = estimate_batch_efficiency("resnet-slim", [32], target_accuracy=1.0, seeds=(0,), max_passes=1,
                                    parallel=False, samples_per_pass=32)
    assert est.passes_mean() == {32: math.inf} and math.isnan(est.passes_std()[32])
    path = tmp_path / "eff.csv"
    est.to_csv(path)
    assert path.read_text().splitlines() == ["batch_size,passes_to_target", "32,inf"]
    assert read_efficiency(path).passes_by_batch == {32: math.inf}


def test_csv_round_trips_through_the_joint_commands_reader(tmp_path):
    from edgetune.optimization.joint_tables import read_efficiency

    passes = {64: 15.0, 8: 10.0, 4: 9.333333333333334, 128: math.inf}
    path = tmp_path / "eff.csv"
    write_efficiency_csv(path, passes)
    assert path.read_text().splitlines()[0] == "batch_size,passes_to_target"
    assert [line.split(",")[0] for line in path.read_text().splitlines()[1:]] == ["4", "8", "64", "128"]
    assert read_efficiency(path).passes_by_batch == passes  # floats exactly, inf kept


def test_summary_mean_std_and_r_from_passes_per_seed():
    est = BatchEfficiencyEstimate("m", "digits", 0.9, 256, (8, 32, 128), (0, 1),
                                  np.array([[10.0, 10.0], [14.0, 16.0], [20.0, math.inf]]), 0.5)
    assert est.passes_mean() == {8: 10.0, 32: 15.0, 128: math.inf}  # a censored seed: no finite mean
    assert est.passes_std()[32] == pytest.approx(1.0)
    assert est.ratio() == {8: pytest.approx(10 / 15), 32: 1.0, 128: math.inf}  # the paper's 10/15 anchor shape
    assert est.efficiency(seed=1).passes_by_batch == {8: 10.0, 32: 16.0, 128: math.inf}


def test_training_is_deterministic_per_seed():
    torch.manual_seed(0)
    kw = dict(workload="resnet-slim", batch_size=8, target_accuracy=1.01, lr=scaled_lr(8), samples_per_pass=16,
              max_passes=2, input_size=8, data=load_proxy_data("digits"),
              init_state=build_proxy_model("resnet-slim").state_dict())
    a, b, c = train_to_target(seed=3, **kw), train_to_target(seed=3, **kw), train_to_target(seed=4, **kw)
    assert a.accuracy_by_pass == b.accuracy_by_pass and a.passes_to_target == math.inf
    assert a.accuracy_by_pass != c.accuracy_by_pass


@pytest.mark.parametrize("bad, field", [
    (dict(batch_sizes=[]), "batch_sizes"),
    (dict(batch_sizes=[8, 8]), "batch_sizes"),
    (dict(target_accuracy=1.5), "target_accuracy"),
    (dict(samples_per_pass=64, batch_sizes=[128]), "samples_per_pass"),
    (dict(samples_per_pass=1024), "samples_per_pass"),  # more than the 560 training samples
    (dict(target_accuracy=0.5), "target_accuracy"),  # the pre-trained model is already there
    (dict(proxy="imagenet"), "proxy"),
    (dict(workload="bert-tiny"), "workload"),
])
def test_bad_requests_name_the_field(bad, field):
    args = dict(workload="resnet-slim", batch_sizes=[8, 32], target_accuracy=0.95, seeds=(0,), parallel=False)
    args.update(bad)
    with pytest.raises(InvalidArgument) as info:
        estimate_batch_efficiency(**args)
    assert info.value.field == field


def test_noisy_proxy_has_the_proxy_digits_and_a_larger_held_out_set():
    from edgetune.estimation.proxy import NOISY_PROXY

    clean, noisy = load_proxy_data("digits"), load_proxy_data(NOISY_PROXY)
    assert noisy.x_train.shape == clean.x_train.shape and torch.equal(noisy.y_train, clean.y_train)
    assert not torch.equal(noisy.x_train, clean.x_train)  # noise added
    assert len(noisy.y_test) == 8 * len(clean.y_test)  # 8 noise draws of the same held-out digits
    assert torch.equal(noisy.y_test[: len(clean.y_test)], clean.y_test)


def test_matched_target_closes_the_same_share_of_the_remaining_error():
    from edgetune.estimation.batch_efficiency import matched_target_accuracy

    # the device's target closes half of the pre-trained model's remaining error (0.8 -> 0.9) ...
    assert matched_target_accuracy(0.6, 0.8, 0.9) == pytest.approx(0.8)  # ... so the proxy's goes 0.6 -> 0.8
    with pytest.raises(InvalidArgument) as err:
        matched_target_accuracy(0.6, 0.9, 0.8)
    assert err.value.field == "target_accuracy"


def test_retargeted_rescores_the_same_runs_at_a_lower_target():
    est = estimate_batch_efficiency("resnet-slim", [16], target_accuracy=0.9, seeds=(0,), max_passes=20,
                                    parallel=False, samples_per_pass=64)
    lower = (est.initial_accuracy + 0.9) / 2
    again = est.retargeted(lower)
    assert again.passes_mean()[16] <= est.passes_mean()[16]
    run = again.runs[0]
    assert run.accuracy_by_pass[-1] >= lower and all(a < lower for a in run.accuracy_by_pass[:-1])
    assert est.reachable_accuracy() >= 0.9
