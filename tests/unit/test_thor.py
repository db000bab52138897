"""THOR: block parsing, subtraction identities on the simulator, GP active learning, estimates, pruning."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from edgetune.errors import InvalidArgument
from edgetune.estimation.layerwise.blocks import blocks_of, instantiate, parse
from edgetune.estimation.layerwise.pruning import random_prune
from edgetune.estimation.layerwise.thor import LayerGP, Thor, mape_pct, model_flops, true_energy_j
from edgetune.estimation.layerwise.zoo import parsed_model, random_channels
from edgetune.physics.costing import LayerCostModel
from edgetune.workloads.layers import extract_layers

torch.set_num_threads(1)  # shared cores


@pytest.fixture(scope="module")
def cost() -> LayerCostModel:
    return LayerCostModel("xavier-agx")


@pytest.fixture(scope="module")
def fitted(cost) -> Thor:
    return Thor(parsed_model("cnn5"), cost, cap_1d=6, cap_2d=12, seed=1).fit()


# -- parsing ---------------------------------------------------------------------------------
def test_cnn5_parses_into_input_hidden_output():
    p = parsed_model("cnn5")
    _, blocks = blocks_of(p)
    assert [b.kind.role for b in blocks] == ["input", "hidden", "hidden", "hidden", "output"]
    assert [b.kind.in_h for b in blocks] == [64, 32, 16, 8, 4]
    assert [(b.c_in, b.c_out) for b in blocks] == [(3, 32), (32, 64), (64, 128), (128, 256), (256, 2)]
    assert blocks[0].kind.signature == ("Conv2d", "BatchNorm2d", "ReLU", "MaxPool2d")
    assert blocks[-1].kind.signature == ("Flatten", "Linear")  # the connector goes with the FC
    assert blocks[1].gp_input() == (32, 64) and blocks[0].gp_input() == (32,) and blocks[-1].gp_input() == (256,)


def test_rebuilt_models_follow_channels_and_depthwise_inputs():
    p = parsed_model("mobilenet-ish")
    rng = np.random.default_rng(0)
    ch = random_channels(p, rng)
    model, blocks = blocks_of(p, ch)
    for b in blocks[1:-1]:
        if b.kind.layer == "dwconv":
            assert b.c_in == b.c_out
    assert blocks[-1].c_in == ch[-1]
    out = model.to_empty(device="cpu")(torch.zeros(2, 3, 64, 64))
    assert out.shape == (2, 10)
    one = [1] * len(ch)  # depthwise at one channel stays a depthwise kind
    assert [b.kind for b in blocks_of(p, one)[1]] == [b.kind for b in blocks]


def test_parse_rejects_models_without_output_fc():
    with pytest.raises(InvalidArgument, match="Linear"):
        parse(nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU()), (1, 3, 8, 8))


# -- subtraction identities on the simulator ---------------------------------------------------
def _energy(cost, blocks, chans, shape, connector, training=True) -> tuple[float, list[float]]:
    """Energy above idle of a network of block templates, and per block (overhead in the last)."""
    model, sizes = instantiate(blocks, chans, shape, connector)
    layers = cost.cost_records(extract_layers(model, torch.zeros(shape, device="meta")), training=training).layers
    per_block, pos = [], 0
    for n in sizes:
        per_block.append(sum(c.energy_above_idle_j for c in layers[pos:pos + n]))
        pos += n
    per_block[-1] += sum(c.energy_above_idle_j for c in layers[pos:])  # the per-iteration overhead
    return sum(c.energy_above_idle_j for c in layers), per_block


def test_subtraction_identities_hold_on_the_simulator(cost):
    p = parsed_model("cnn5")
    t_in, t_hidden, t_out = p.blocks[0], p.blocks[1], p.blocks[-1]
    conn = p.connector
    # inference: E_in = E(input + output) − E_out, exactly
    e_io, blocks_io = _energy(cost, (t_in, t_out), [24], p.input_shape, conn, training=False)
    e_o, _ = _energy(cost, (t_out,), [], (16, 24, 32, 32), conn, training=False)
    assert e_io - e_o == pytest.approx(blocks_io[0], rel=1e-9)
    # E_hidden(C1, C2) = E(input + hidden + output) − E_in(C1) − E_out(C2), exactly
    shape = (16, 3, 64, 64)
    e_iho, blocks_iho = _energy(cost, (t_in, t_hidden, t_out), [20, 40], shape, conn, training=False)
    e_in = _energy(cost, (t_in, t_out), [20], shape, conn, False)[0] - _energy(cost, (t_out,), [], (16, 20, 32, 32),
                                                                                conn, False)[0]
    e_out = _energy(cost, (t_out,), [], (16, 40, 16, 16), conn, False)[0]
    assert e_iho - e_in - e_out == pytest.approx(blocks_iho[1], rel=1e-9)
    # training: additive over blocks; the output layer's input gradient (skipped when it is the
    # first layer, as autograd does) is what the subtraction hands to E_in
    e_io, blocks_io = _energy(cost, (t_in, t_out), [24], p.input_shape, conn)
    e_o, _ = _energy(cost, (t_out,), [], (16, 24, 32, 32), conn)
    context = (e_io - e_o) - blocks_io[0]
    assert 0 < context < 0.25 * blocks_io[0]
    thor = Thor(p, cost, noise_cv=0.0)
    in_need = next(n for n in thor.plan().values() if n.kind.role == "input" and n.data_shape == p.input_shape)
    assert thor.measure_variant(in_need, [24]) == pytest.approx(e_io, rel=1e-12)  # what THOR profiles
    model_e, per_block = _energy(cost, p.blocks, p.channels(), p.input_shape, conn)
    assert sum(per_block) == pytest.approx(model_e, rel=1e-12) == pytest.approx(true_energy_j(p, cost), rel=1e-12)


# -- active learning ----------------------------------------------------------------------------
def test_active_learning_starts_at_bounds_and_stops_by_variance():
    gp = LayerGP(((1, 256),))
    calls = []

    def smooth(c):
        calls.append(c)
        return 0.01 + 1e-4 * c[0]

    gp.learn(smooth, cap=20)
    assert calls[:2] == [(1,), (256,)]
    assert gp.stop_reason == "variance" and len(gp.X) < 20
    mean = gp.predict([[128]])
    assert mean[0] == pytest.approx(0.01 + 1e-4 * 128, rel=0.1)


def test_active_learning_stops_at_the_cap_and_picks_max_variance():
    gp = LayerGP(((1, 64), (1, 64)))
    gp.learn(lambda c: float(np.sin(c[0] / 5.0) * np.cos(c[1] / 7.0)), cap=5)
    assert gp.stop_reason == "cap" and len(gp.X) == 5
    assert set(gp.X[:4]) == {(1, 1), (1, 64), (64, 1), (64, 64)}
    # the fifth point is the most uncertain candidate given the four corners
    first4 = LayerGP(gp.bounds, X=gp.X[:4], y=gp.y[:4]).fit()
    cands = first4.candidates()
    _, std = first4.predict(cands, return_std=True)
    assert gp.X[4] not in gp.X[:4]
    assert std[[tuple(c) for c in cands].index(gp.X[4])] == pytest.approx(std.max(), rel=1e-6)


def test_unknown_kernel_and_strategy_are_rejected(cost):
    with pytest.raises(InvalidArgument, match="kernel"):
        Thor(parsed_model("cnn5"), cost, kernel="cosine")
    with pytest.raises(InvalidArgument, match="strategy"):
        LayerGP(((1, 4),)).learn(lambda c: 1.0, cap=3, strategy="greedy")


# -- estimates ----------------------------------------------------------------------------------
def test_thor_beats_flops_linear_regression_on_random_variants(fitted, cost):
    p = fitted.parsed
    rng = np.random.default_rng(5)
    variants = [random_channels(p, rng) for _ in range(15)]
    truth = [true_energy_j(p, cost, ch) for ch in variants]
    thor = [fitted.estimate_j(ch) for ch in variants]
    flops_lr = fitted.flops_baseline().predict([model_flops(p, ch) for ch in variants])
    assert mape_pct(thor, truth) < 10.0
    assert mape_pct(thor, truth) < 0.5 * mape_pct(flops_lr, truth)
    assert fitted.profiling_s > 0 and all(g.stop_reason in ("cap", "variance") for g in fitted.gps.values())


def test_pruning_reaches_the_budget(fitted, cost):
    p = fitted.parsed
    e0 = true_energy_j(p, cost)
    by_thor = random_prune(p, fitted.estimate_j, "thor", 0.5, np.random.default_rng(0))
    by_flops = random_prune(p, lambda ch: model_flops(p, ch), "flops", 0.5, np.random.default_rng(0))
    assert by_thor.reached and by_thor.guide_ratio <= 0.5
    assert by_flops.reached and by_flops.guide_ratio <= 0.5
    assert true_energy_j(p, cost, by_thor.channels) / e0 == pytest.approx(0.5, abs=0.06)
    assert true_energy_j(p, cost, by_flops.channels) / e0 > 0.55  # FLOPs overshoot the energy budget
    with pytest.raises(InvalidArgument, match="budget_ratio"):
        random_prune(p, fitted.estimate_j, budget_ratio=1.5)
