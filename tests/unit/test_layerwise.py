"""Layer records, NeuralPower's polynomial Lasso and real layer timing, and the simulator's layer costing."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from edgetune.base.mode import PowerMode
from edgetune.errors import InvalidArgument
from edgetune.estimation.layerwise.neuralpower import (
    NP_KINDS,
    NeuralPowerModel,
    PolyLasso,
    build_layer,
    collect,
    layer_features,
    measure_time_ms,
    repetitions,
    sample_configs,
)
from edgetune.physics.costing import LayerCostModel
from edgetune.workloads import get_workload
from edgetune.workloads.layers import extract_layers, kind_counts, layers_on_meta, total_flops

torch.set_num_threads(1)  # shared cores


# -- features -------------------------------------------------------------------------------
def test_resnet18_records_by_type_and_shape():
    wl = get_workload("resnet18")
    with torch.device("meta"):
        model = wl.build()
        records = extract_layers(model, torch.zeros(2, 3, 224, 224))
    counts = kind_counts(records)
    # 17 main-path convs + 3 projection shortcuts; max pool + global pool; torch.flatten is functional
    assert counts == {"conv": 20, "pool": 2, "flatten": 0, "fc": 1, "other": 37}
    first = records[0]
    assert (first.kind, first.batch_size, first.in_h, first.out_h) == ("conv", 2, 224, 112)
    assert (first.c_in, first.c_out, first.kernel, first.stride, first.padding) == (3, 64, 7, 2, 3)
    assert first.bytes_in == 2 * 3 * 224 * 224 * 4 and first.bytes_weights == 64 * 3 * 49 * 4
    assert first.bytes_moved == first.bytes_in + first.bytes_weights + first.bytes_out
    fc = records[-1]
    assert (fc.kind, fc.c_in, fc.c_out, fc.in_h) == ("fc", 512, 1000, 1)
    assert total_flops(records) == wl.flops(2)  # the zoo's counter, layer by layer
    pools = [r for r in records if r.kind == "pool"]
    assert (pools[0].kernel, pools[0].stride, pools[0].in_h, pools[0].out_h) == (3, 2, 112, 56)


def test_sequential_records_real_weights_and_flatten():
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(8 * 16, 5))
    records = extract_layers(model, torch.randn(4, 3, 8, 8))
    assert [r.kind for r in records] == ["conv", "other", "pool", "flatten", "fc"]
    flat = records[3]
    assert (flat.c_in, flat.in_h, flat.out_shape) == (8, 4, (4, 128))
    assert records[0].flops == 2 * 4 * 8 * 8 * 8 * 27 and records[2].flops == 0
    assert records[0].params == 8 * 27 + 8


# -- NeuralPower ----------------------------------------------------------------------------
@pytest.mark.parametrize(("n", "expected"), [(1, 2), (7, 8), (23, 30), (95, 100), (150, 200), (999, 1000)])
def test_repetition_rule(n, expected):
    assert repetitions(n) == expected


def test_polylasso_picks_degree_and_beats_the_mean():
    rng = np.random.default_rng(0)
    X = rng.uniform(1, 10, (160, 3))
    y = 3 + 2 * X[:, 0] + 0.5 * X[:, 0] * X[:, 1] ** 2 + rng.normal(0, 0.5, 160)  # degree 3 with an interaction
    model = PolyLasso().fit(X[:120], y[:120])
    assert model.degree_ >= 3 and model.alpha_ <= 1e-2
    assert model.cv_rmse < 0.05 * y.std()
    held_out_rmse = float(np.sqrt(np.mean((model.predict(X[120:]) - y[120:]) ** 2)))
    mean_rmse = float(np.sqrt(np.mean((y[:120].mean() - y[120:]) ** 2)))
    assert held_out_rmse < 0.1 * mean_rmse
    linear = PolyLasso().fit(X[:120], 1.0 + 2.0 * X[:120, 0] - X[:120, 2])  # exactly linear: K = 1 wins
    assert linear.degree_ == 1


def test_polylasso_rejects_too_few_samples():
    with pytest.raises(InvalidArgument, match="samples"):
        PolyLasso().fit(np.ones((4, 2)), np.ones(4))


def test_generated_layers_build_and_match_their_features():
    for kind in NP_KINDS:
        for cfg in sample_configs(kind, 5, seed=3):
            module, shape = build_layer(kind, cfg)
            record = next(r for r in extract_layers(module, torch.zeros(shape)) if r.kind == kind)
            x = layer_features(record)
            assert x is not None and x[-1] == cfg["batch_size"]
    with pytest.raises(InvalidArgument, match="kind"):
        sample_configs("lstm", 3)


def test_real_timing_and_network_sum():
    small = nn.Conv2d(4, 8, 3)
    big = nn.Conv2d(32, 64, 3)
    t_small = measure_time_ms(small, torch.randn(1, 4, 16, 16), window_ms=5)
    t_big = measure_time_ms(big, torch.randn(4, 32, 32, 32), window_ms=5)
    assert 0 < t_small < t_big
    cost = LayerCostModel("orin-agx")
    samples = [s for kind in NP_KINDS
               for s in collect(kind, 12, seed=1, window_ms=2,
                                power_fn=lambda r: cost.cost_records([r], training=False).layers[0].power_w)]
    model = NeuralPowerModel().fit(samples)
    assert set(model.models) == {(k, t) for k in NP_KINDS for t in ("time", "power")}
    net = nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(8 * 15 * 15, 10))
    t_ms, p_w, skipped = model.predict_network(extract_layers(net, torch.zeros(2, 3, 32, 32)))
    assert t_ms > 0 and skipped == 1  # the ReLU is not one of the four types
    assert 0 < p_w < 100


# -- simulator layer costing ----------------------------------------------------------------
def _conv_cost(cm: LayerCostModel, c: int, mode: PowerMode | None = None, training: bool = True):
    net = nn.Sequential(nn.Conv2d(c, c, 3, 1, 1), nn.BatchNorm2d(c), nn.ReLU())
    return cm.cost_records(layers_on_meta(net, (16, c, 32, 32)), mode, training)


def test_energy_per_flop_falls_with_channels():
    cm = LayerCostModel("xavier-agx")
    per_gflop = [(lambda c_: c_.energy_above_idle_j / (c_.flops / 1e9))(_conv_cost(cm, c)) for c in (2, 8, 32, 128, 512)]
    assert all(a > b for a, b in zip(per_gflop, per_gflop[1:], strict=False))
    assert per_gflop[0] > 50 * per_gflop[-1]
    occupancy = [_conv_cost(cm, c).layers[0].occupancy for c in (2, 4, 8)]
    assert occupancy[0] < occupancy[1] < occupancy[2] <= 1.0


def test_wave_quantisation_steps_and_training_costs():
    cm = LayerCostModel("xavier-agx")
    t = {c: _conv_cost(cm, c).layers[0].t_compute_ms for c in (64, 65, 128)}
    assert t[65] > 1.4 * t[64]  # one more channel opens a second column of tiles
    assert t[128] < 2.5 * t[65]
    infer, train = _conv_cost(cm, 64, training=False), _conv_cost(cm, 64)
    assert train.layers[0].flops == pytest.approx(2 * infer.layers[0].flops)  # first layer: no input gradient
    assert train.time_ms > 2 * infer.time_ms and train.layers[-1].name == "<iteration>"
    assert infer.idle_power_w < infer.power_w < 60


def test_small_layers_follow_the_cpu_clock():
    cm = LayerCostModel("orin-agx")
    spec = cm.spec
    fast = spec.maxn()
    third = min(spec.cpu_mhz, key=lambda f: abs(f - fast.cpu_mhz / 3))  # a third of the CPU clock
    slow_cpu = PowerMode(fast.cores, third, fast.gpu_mhz, fast.emc_mhz)
    slow_gpu = PowerMode(fast.cores, fast.cpu_mhz, min(spec.gpu_mhz, key=lambda f: abs(f - fast.gpu_mhz / 3)),
                         fast.emc_mhz)
    tiny = [_conv_cost(cm, 2, m).time_ms for m in (fast, slow_cpu, slow_gpu)]
    big = [_conv_cost(cm, 256, m).time_ms for m in (fast, slow_cpu, slow_gpu)]
    assert tiny[1] > 2.5 * tiny[0] and tiny[2] < 1.2 * tiny[0]
    assert big[2] > 2 * big[0] and big[1] < 1.2 * big[0]


def test_measurement_noise_is_seeded():
    cm = LayerCostModel("xavier-agx")
    cost = _conv_cost(cm, 32)
    a = cm.measure(cost, np.random.default_rng(7), 0.02)
    b = cm.measure(cost, np.random.default_rng(7), 0.02)
    assert a == b and a != (cost.time_ms, cost.energy_above_idle_j)
    assert cm.measure(cost) == (cost.time_ms, cost.energy_above_idle_j)
    with pytest.raises(InvalidArgument, match="noise_cv"):
        cm.measure(cost, np.random.default_rng(0), -1.0)
