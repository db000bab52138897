"""Batch-size efficiency on the digits proxy (Ahmed et al.): lr rule, passes to target, r, eff.csv."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from edgetune.errors import InvalidArgument
from edgetune.estimation.batch_efficiency import (
    BatchEfficiencyEstimate,
    estimate_batch_efficiency,
    initial_accuracy,
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
    (dict(batch_sizes=[8, 8]), "batch_sizes[1]"),  # the repeat, by index (edgetune.validation)
    (dict(target_accuracy=1.5), "target_accuracy"),
    (dict(samples_per_pass=64, batch_sizes=[128]), "samples_per_pass"),
    (dict(samples_per_pass=1024), "samples_per_pass"),  # more than the 560 training samples
    (dict(target_accuracy=0.5), "target_accuracy"),  # the pre-trained model is already there
    (dict(proxy="imagenet"), "proxy"),
    (dict(workload="bert-tiny"), "workload"),
    (dict(eval_draws=4), "eval_draws"),  # clean digits have no noise to redraw
    (dict(proxy="digits-noisy", eval_draws=0), "eval_draws"),
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


def test_target_held_out_digits_under_several_noise_draws_keep_its_own_draw_first():
    from edgetune.estimation.proxy import EVAL_DRAWS, NOISY_PROXY

    one, eight = load_proxy_data("digits-noisy"), load_proxy_data("digits-noisy", eval_draws=8)
    assert len(one.y_test) == 140 and len(eight.y_test) == 8 * 140  # default: the target as drawn
    assert torch.equal(eight.x_train, one.x_train) and torch.equal(eight.y_train, one.y_train)  # training unchanged
    assert torch.equal(eight.x_test[:140], one.x_test)  # its own draw first ...
    assert torch.equal(eight.y_test, one.y_test.repeat(8))  # ... of the same digits
    draws = eight.x_test.reshape(8, 140, *eight.x_test.shape[1:])
    assert all(not torch.equal(draws[0], draws[k]) for k in range(1, 8))  # independent redraws
    # every draw is the same clean digits plus independent noise of the target's sigma 0.3
    assert float((draws - draws.mean(0)).std()) == pytest.approx(0.3 * math.sqrt(7 / 8), rel=0.05)
    assert load_proxy_data(NOISY_PROXY) is load_proxy_data(NOISY_PROXY, eval_draws=EVAL_DRAWS)
    assert len(load_proxy_data(NOISY_PROXY, eval_draws=2).y_test) == 280
    assert load_proxy_data("digits-noisy", 16, eval_draws=2).x_test.shape == (280, 3, 16, 16)
    for name, bad in (("digits", 2), ("digits-noisy", 0), ("digits-noisy", 1.5), ("digits-noisy", True),
                      (NOISY_PROXY, 65), ("pretrain", 3)):
        with pytest.raises(InvalidArgument) as err:
            load_proxy_data(name, eval_draws=bad)
        assert err.value.field == "eval_draws"


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
    assert (est.optimizer, est.fresh_head) == ("adam", False)  # how the runs trained is recorded ...
    assert (again.optimizer, again.fresh_head) == ("adam", False)  # ... and kept when re-scored


def test_noise_scale_fit_recovers_mccandlish_parameters_and_handles_edge_cases():
    from edgetune.estimation.batch_efficiency import fit_noise_scale

    # E(b) = E_min (1 + b / B_noise) with N_min = 12 passes, B_noise = 32: exact data -> exact fit
    exact = {b: 12.0 * (1 + b / 32) for b in (4, 8, 16, 32, 64, 128)}
    fit = fit_noise_scale(exact)
    assert fit.n_min == pytest.approx(12.0) and fit.b_noise == pytest.approx(32.0)
    assert fit.passes(48) == pytest.approx(12.0 * 2.5)
    # passes falling with b: no negative slope, the best constant instead (B_noise = inf)
    falling = fit_noise_scale({4: 30.0, 16: 20.0, 64: 10.0})
    assert falling.slope == 0.0 and math.isinf(falling.b_noise) and 10.0 < falling.n_min < 30.0
    # steeper than proportional: no negative intercept, a line through the origin
    steep = fit_noise_scale({8: 1.0, 16: 10.0, 32: 30.0})
    assert steep.intercept == 0.0 and steep.slope > 0
    # never-reached batch sizes are left out of the fit; fewer than two finite points is an error
    assert fit_noise_scale({**exact, 256: math.inf}) == fit
    for bad in ({8: 10.0, 16: math.inf}, {8: 10.0, 16: -1.0}, {}):
        with pytest.raises(InvalidArgument) as err:
            fit_noise_scale(bad)
        assert err.value.field == "passes_by_batch"


def test_fit_smooths_noisy_means_and_efficiency_rejects_unknown_fits():
    # seed noise around a line: the fit follows the line, not the noise (b=16 measured above b=32)
    passes = np.array([[10.0, 12.0], [13.0, 13.0], [19.0, 19.0], [17.0, 17.0], [22.0, 24.0], [math.inf, 40.0]])
    est = BatchEfficiencyEstimate("m", "digits", 0.9, 128, (4, 8, 16, 32, 64, 128), (0, 1), passes, 0.5)
    fitted = est.fitted_passes()
    assert fitted[128] == math.inf  # a censored mean stays never
    assert fitted[4] < fitted[8] < fitted[16] < fitted[32] < fitted[64]  # monotone, unlike the raw means
    eff = est.efficiency(fit="noise-scale")
    assert eff.passes_by_batch == fitted
    assert est.efficiency().passes_by_batch == est.passes_mean()  # default unchanged: raw means
    assert est.efficiency(seed=1, fit="noise-scale").passes_by_batch[128] < math.inf  # seed 1 reached it
    with pytest.raises(InvalidArgument) as err:
        est.efficiency(fit="spline")
    assert err.value.field == "fit"
    with pytest.raises(InvalidArgument) as err:
        est.efficiency(seed=7)
    assert err.value.field == "seed"


def _curve_estimate(curves: dict[tuple[int, int], tuple[float, ...]], initial: float = 0.8):
    from edgetune.estimation.batch_efficiency import RunResult

    bs, seeds = sorted({b for b, _ in curves}), sorted({s for _, s in curves})
    runs = tuple(RunResult(b, s, math.inf, curves[(b, s)], 1e-3, 0.0) for b in bs for s in seeds)
    return BatchEfficiencyEstimate("m", "digits", 1.0, 64, tuple(bs), tuple(seeds),
                                   np.full((len(bs), len(seeds)), math.inf), initial, runs)


def test_plateau_target_is_reached_by_every_run():
    # b=32 plateaus at 0.90, b=8 climbs to 0.96: the lowest plateau is 0.90
    est = _curve_estimate({(8, 0): (0.82, 0.9, 0.96), (8, 1): (0.85, 0.93, 0.95),
                           (32, 0): (0.84, 0.88, 0.90), (32, 1): (0.86, 0.9, 0.89)})
    goal = est.plateau_target(0.7)  # 0.8 + 0.7 * (0.90 - 0.8) = 0.87, snapped down to a measured 0.86
    assert goal == 0.86
    again = est.retargeted(goal)
    assert np.isfinite(again.passes).all()
    assert again.passes_mean() == {8: 2.0, 32: 1.5}
    top = est.retargeted(est.plateau_target(1.0))  # the edge itself: still reached, by the last look
    assert np.isfinite(top.passes).all() and top.passes_mean()[32] == 2.5
    for bad in (0.0, 1.5, -0.2, "half"):
        with pytest.raises(InvalidArgument) as err:
            est.plateau_target(bad)
        assert err.value.field == "fraction"
    flat = _curve_estimate({(8, 0): (0.7, 0.75)})
    with pytest.raises(InvalidArgument) as err:
        flat.plateau_target(0.5)
    assert err.value.field == "runs"


def test_a_computed_target_on_a_count_ratio_is_reached_there_not_one_image_later():
    # 125/140 -> 130/140 at fraction 0.8 is 129/140 in exact arithmetic, but not in floating point
    est = _curve_estimate({(8, 0): (127 / 140, 129 / 140, 130 / 140)}, initial=125 / 140)
    assert 125 / 140 + 0.8 * (130 / 140 - 125 / 140) != 129 / 140  # the rounding this guards against
    goal = est.plateau_target(0.8)
    assert goal == 129 / 140  # snapped onto the measured level
    assert est.retargeted(goal).passes_mean() == {8: 2.0}
    assert est.retargeted(129 / 140 + 1e-12).passes_mean() == {8: 2.0}  # a rounding error above still counts
    # 0.5 of the way is 127.5 / 140: the measured level below (127), not 128 / 129 above it
    assert est.plateau_target(0.5) == 127 / 140
    assert est.retargeted(est.plateau_target(0.5)).passes_mean() == {8: 1.0}


def test_fresh_head_reinitialises_only_the_classifier_layer_the_same_way_every_time():
    from edgetune.estimation.proxy import head_layer, pretrained_state, with_fresh_head

    for workload in ("resnet-slim", "mobilenetv3-slim", "mobilenetv2-slim"):
        # which layer is the head and how it is redrawn does not depend on how long the checkpoint
        # trained: one epoch each (the 10-epoch default of the mobilenets is minutes of CPU)
        state = pretrained_state(workload, epochs=1)
        fresh = with_fresh_head(workload, state)
        model = build_proxy_model(workload)
        head = head_layer(model)
        head_keys = {n for n, p in model.named_parameters() if p is head.weight or p is head.bias}
        changed = {k for k in state if not torch.equal(state[k], fresh[k])}
        assert changed == head_keys and len(head_keys) == 2  # the head's weight and bias, nothing else
        again = with_fresh_head(workload, state)
        assert all(torch.equal(fresh[k], again[k]) for k in state)  # one fresh head for every b and seed
        assert state is not fresh and all(torch.equal(state[k], pretrained_state(workload, epochs=1)[k])
                                          for k in state)
    # fine-tuning then starts near chance instead of at the checkpoint's accuracy (the default checkpoint)
    assert initial_accuracy("resnet-slim", "digits-noisy", fresh_head=True) < 0.5 < initial_accuracy("resnet-slim",
                                                                                                    "digits-noisy")


def test_fresh_head_needs_an_image_classifier():
    from edgetune.estimation.proxy import head_layer
    from edgetune.estimation.proxy_text import SlimCharTransformer

    with pytest.raises(InvalidArgument, match="head"):
        head_layer(SlimCharTransformer())


def test_mobilenetv2_slim_has_mobilenetv2_blocks_not_v3s():
    from edgetune.estimation.proxy import SLIM_MODELS, SlimMobileNetV2, SlimMobileNetV3

    assert "mobilenetv2-slim" in SLIM_MODELS
    v2, v3 = build_proxy_model("mobilenetv2-slim"), build_proxy_model("mobilenetv3-slim")
    assert isinstance(v2, SlimMobileNetV2) and isinstance(v3, SlimMobileNetV3)
    kinds = {type(m) for m in v2.modules()}
    assert torch.nn.ReLU6 in kinds and torch.nn.Hardswish not in kinds  # V2's activation, not V3's
    assert not any(type(m).__name__ == "SqueezeExcite" for m in v2.modules())
    depthwise = [m for m in v2.modules() if isinstance(m, torch.nn.Conv2d) and m.groups > 1]
    assert len(depthwise) == 6 and all(m.groups == m.in_channels for m in depthwise)  # one per block
    assert 60_000 < sum(p.numel() for p in v2.parameters()) < 100_000
    assert v2(torch.zeros(5, 3, 8, 8)).shape == (5, 10)


def test_an_estimate_from_a_fresh_head_says_so_and_starts_near_chance():
    est = estimate_batch_efficiency("resnet-slim", [32], target_accuracy=1.0, seeds=(0,), max_passes=1,
                                    parallel=False, samples_per_pass=64, fresh_head=True)
    assert est.fresh_head and est.optimizer == "adam"
    assert est.initial_accuracy < 0.5
