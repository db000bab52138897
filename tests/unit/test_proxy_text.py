"""Seed 000's text workload: stdlib corpora, windows, the slim char transformer, its checkpoint, its profile."""

from __future__ import annotations

import itertools
import math
import string

import numpy as np
import pytest
import torch
from torch import nn

from edgetune.errors import InvalidArgument
from edgetune.estimation import proxy_text as pt
from edgetune.estimation.batch_efficiency import default_optimizer, estimate_batch_efficiency, scaled_lr
from edgetune.estimation.proxy import accuracy, build_proxy_model, load_proxy_data, pretrained_state

torch.set_num_threads(1)  # the test machine's cores are shared


# -- corpora -----------------------------------------------------------------------------------
def test_vocabulary_is_the_papers_and_one_for_all_sets():
    assert pt.VOCAB == "\n" + " " + "".join(sorted(string.punctuation + string.digits + string.ascii_letters))
    assert pt.VOCAB_SIZE == 96 == len(set(pt.VOCAB))
    assert pt.filter_text("a\tb\u00e9c\u2019 d\r\n") == "abc d\n"  # tabs, CR, non-ASCII dropped
    assert pt.decode(pt.encode("Hello, world!\n")) == "Hello, world!\n"
    for name in pt.TEXT_DATASETS:
        assert set(pt.corpus_text(name)) <= set(pt.VOCAB), name
        d = pt.load_text_data(name)
        for t in (d.x_train, d.y_train, d.x_test, d.y_test):
            assert t.dtype == torch.int64 and int(t.min()) >= 0 and int(t.max()) < pt.VOCAB_SIZE


def test_corpora_are_disjoint_large_enough_and_fixed():
    groups = [set(pt.TARGET_A_MODULES), set(pt.TARGET_B_MODULES), set(pt.EXCLUDED_MODULES)]
    assert all(not (a & b) for a, b in itertools.combinations(groups, 2))
    texts = {name: pt.corpus_text(name) for name in pt.TEXT_DATASETS}
    assert all(len(t) >= 100_000 for t in texts.values()) and len(texts[pt.PRETRAIN]) >= 500_000
    paragraphs = {n: {p for p in t.split("\n\n") if len(p) >= 100} for n, t in texts.items()}
    for a, b in itertools.combinations(pt.TEXT_DATASETS, 2):
        assert not paragraphs[a] & paragraphs[b], (a, b)
    assert texts[pt.TEXT_PROXY].startswith('The "assert" statement\n')  # the language reference, A to Z
    assert texts[pt.TEXT_TARGETS[0]].startswith("A package for parsing, handling, and generating email")
    assert pt._corpora.__wrapped__() == pt._corpora()  # rebuilt: the same text


def test_windows_split_90_10_by_position_with_next_characters_as_labels():
    name = pt.TEXT_TARGETS[1]
    ids = pt.encode(pt.corpus_text(name))
    cut = int(len(ids) * 0.9)
    d = load_proxy_data(name)  # the estimation code's entry point dispatches to load_text_data
    assert d is pt.load_text_data(name) is pt.load_text_data(name, 64)  # cached: the same tensors
    assert d.x_train.shape == d.y_train.shape == (d.n_train, 64) and d.n_train == (cut - 1) // 64
    assert d.x_test.shape == d.y_test.shape == (pt.TEST_WINDOWS, 64)
    assert torch.equal(d.x_train[:, 1:], d.y_train[:, :-1])  # y is x shifted by one character
    assert torch.equal(d.y_train[:-1, -1], d.x_train[1:, 0])  # non-overlapping consecutive windows
    assert torch.equal(d.x_train.reshape(-1), torch.from_numpy(ids[: d.n_train * 64]))
    held_out = ids[cut:]
    grid = {tuple(held_out[s:s + 64]) for s in range(0, len(held_out) - 64, 64)}
    assert torch.equal(d.x_test[0], torch.from_numpy(held_out[:64]))  # the held-out text's first window ...
    assert all(tuple(w) in grid for w in d.x_test.tolist())  # ... and the others on its grid, spread out
    assert len({tuple(w) for w in d.x_test.tolist()}) == pt.TEST_WINDOWS
    assert torch.equal(d.x_test[:, 1:], d.y_test[:, :-1])
    assert pt.load_text_data(name, seq_len=32).x_train.shape[1] == 32


@pytest.mark.parametrize("call, field", [
    (lambda: pt.load_text_data("text-austen"), "proxy"),
    (lambda: pt.corpus_text("wikitext-2"), "proxy"),
    (lambda: load_proxy_data("text-dickens"), "proxy"),
    (lambda: pt.load_text_data("text-proxy", seq_len=0), "seq_len"),
    (lambda: load_proxy_data("text-proxy", eval_draws=2), "eval_draws"),
    (lambda: build_proxy_model("chartransformer-huge"), "workload"),
    (lambda: pt.SlimCharTransformer()(torch.zeros(1, 65, dtype=torch.int64)), "x"),
])
def test_bad_requests_name_the_field(call, field):
    with pytest.raises(InvalidArgument) as err:
        call()
    assert err.value.field == field


@pytest.mark.parametrize("bad, field", [
    (dict(proxy="digits"), "proxy"),  # a text model needs a text data set
    (dict(workload="resnet-slim"), "workload"),  # and a text data set a text model
    (dict(optimizer="sgd"), "optimizer"),
    (dict(eval_draws=8), "eval_draws"),
])
def test_estimate_rejects_mismatched_requests_before_training(bad, field):
    args = dict(workload="chartransformer-slim", batch_sizes=[8], target_accuracy=0.9, seeds=(0,),
                proxy="text-proxy", parallel=False, samples_per_pass=128)
    args.update(bad)
    with pytest.raises(InvalidArgument) as err:
        estimate_batch_efficiency(**args)
    assert err.value.field == field


# -- model -------------------------------------------------------------------------------------
def test_model_returns_logits_vocab_second_and_is_causal():
    torch.manual_seed(0)
    model = build_proxy_model("chartransformer-slim").eval()
    assert isinstance(model, pt.SlimCharTransformer)
    assert 50_000 < sum(p.numel() for p in model.parameters()) < 150_000
    x = torch.randint(0, pt.VOCAB_SIZE, (3, 64))
    with torch.no_grad():
        out = model(x)
        assert out.shape == (3, pt.VOCAB_SIZE, 64)
        assert model(x[:, :10]).shape == (3, pt.VOCAB_SIZE, 10)
        x2 = x.clone()
        x2[:, 40] = (x2[:, 40] + 1) % pt.VOCAB_SIZE
        out2 = model(x2)
    assert torch.allclose(out[:, :, :40], out2[:, :, :40], atol=1e-6)  # earlier positions never see it
    assert not torch.allclose(out[:, :, 40:], out2[:, :, 40:])  # later ones do
    loss = nn.functional.cross_entropy(model.train()(x), x)  # y (B, T) works unchanged
    assert loss.shape == () and math.isfinite(loss.item())


def test_accuracy_counts_every_position():
    class Fixed(nn.Module):  # predicts character 1 everywhere
        def forward(self, x):
            logits = torch.zeros(x.shape[0], pt.VOCAB_SIZE, x.shape[1])
            logits[:, 1] = 1.0
            return logits

    y = torch.zeros(4, 8, dtype=torch.int64)
    y[0, :3] = 1  # 3 of 32 positions right
    assert accuracy(Fixed(), torch.zeros(4, 8, dtype=torch.int64), y) == pytest.approx(3 / 32)


def test_pretraining_is_seeded_and_uses_adamw():
    a, b = (pt.pretrain_text_state(steps=2, batch_size=4) for _ in range(2))
    c = pt.pretrain_text_state(steps=2, batch_size=4, seed=1)
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert any(not torch.equal(a[k], c[k]) for k in a)
    assert default_optimizer("chartransformer-slim") == "adamw" and default_optimizer("resnet-slim") == "adam"


def test_fine_tuning_the_checkpoint_raises_held_out_accuracy():
    state = pretrained_state("chartransformer-slim")
    assert pretrained_state("chartransformer-slim", 8) is state  # one checkpoint per process
    model = build_proxy_model("chartransformer-slim")
    model.load_state_dict(state)
    for name in pt.TEXT_TARGETS:  # headroom on the targets too
        d = load_proxy_data(name)
        assert 0.2 < accuracy(model, d.x_test, d.y_test) < 0.45
    est = estimate_batch_efficiency("chartransformer-slim", [16], target_accuracy=1.0, seeds=(0,),
                                    proxy="text-proxy", max_passes=6, base_lr=1e-3, base_batch=128,
                                    parallel=False, samples_per_pass=128)
    run = est.runs[0]
    assert run.lr == pytest.approx(scaled_lr(16, 1e-3, 128)) and len(run.accuracy_by_pass) == 6
    assert 0.3 < est.initial_accuracy < 0.55
    assert max(run.accuracy_by_pass) > est.initial_accuracy + 0.005
    target = est.plateau_target(0.5)
    assert math.isfinite(est.retargeted(target).passes_mean()[16])
    assert est.optimizer == "adamw"  # the paper's optimizer for the transformer, recorded


# -- simulated device profile -------------------------------------------------------------------
@pytest.mark.parametrize("device", ["nano", "tx2-nx"])
def test_char_transformer_profile_time_per_sample_falls_and_power_rises_with_batch_and_clock(device):
    from edgetune.devices.simulated.device import SimulatedJetson
    from edgetune.devices.simulated.profiles import PROFILES

    assert "char-transformer" in PROFILES
    dev = SimulatedJetson(device, noise=False)
    spec = dev.spec
    modes = np.array([(max(spec.core_counts), spec.cpu_mhz[-1], g, spec.emc_mhz[-1]) for g in spec.gpu_mhz])
    batches = (4, 8, 16, 32, 64, 128)
    t = np.array([dev.true_time_ms(modes, "char-transformer", "train", b) / b for b in batches])  # per sample
    p = np.array([dev.true_power_w(modes, "char-transformer", "train", b) for b in batches])
    assert (np.diff(t, axis=0) < 0).all() and (np.diff(t, axis=1) < 0).all()
    assert (np.diff(p, axis=0) > 0).all() and (np.diff(p, axis=1) > 0).all()
    assert (p > dev.true_idle_power_w(modes)).all() and (p < spec.max_power_w).all()
    one = dev.true_time_ms(spec.maxn(), "char-transformer", "train", 128)
    assert one == pytest.approx(t[-1, -1] * 128)  # a mode in, a float out
    assert dev.true_time_ms(spec.maxn(), "char-transformer", "infer", 16) < dev.true_time_ms(
        spec.maxn(), "char-transformer", "train", 16)
