"""The model zoo, its FLOP counter, input pipelines and minibatch runners, on CPU at tiny sizes."""

from __future__ import annotations

import math

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from edgetune.errors import InvalidArgument
from edgetune.workloads import (
    MinibatchRunner,
    count_flops,
    get_workload,
    make_loader,
    pick_device,
    time_module,
    workload_names,
)
from edgetune.workloads.data import IGNORE_INDEX

torch.set_num_threads(1)  # the test machine's cores are shared

# per workload: config overrides that keep a CPU minibatch in the tens of ms
TINY = {
    "resnet18": dict(input_size=32, num_classes=10),
    "mobilenetv3": dict(input_size=32, num_classes=10),
    "mobilenetv3-large": dict(input_size=32, num_classes=10),
    "yolov8n": dict(input_size=64, num_classes=4),
    "lstm": dict(vocab_size=500, seq_len=8),
    "lstm-tiny": dict(),
    "bert-base": dict(num_layers=1, seq_len=16, vocab_size=500),
    "bert-tiny": dict(seq_len=16, vocab_size=500),
}
REQUIRED = {"resnet18", "mobilenetv3", "yolov8n", "lstm", "bert-base", "bert-tiny"}


def test_zoo_names():
    assert REQUIRED <= set(workload_names())
    assert set(TINY) == set(workload_names())  # a new zoo entry needs a tiny config here


# --- registry errors -----------------------------------------------------------------------
def test_unknown_workload_names_the_field_and_the_choices():
    with pytest.raises(InvalidArgument) as e:
        get_workload("resnet50")
    assert e.value.field == "workload"
    assert "resnet18" in e.value.allowed and "bert-base" in e.value.allowed
    assert "resnet50" in str(e.value)


def test_bad_overrides_are_invalid_arguments():
    with pytest.raises(InvalidArgument) as e:
        get_workload("resnet18", image_size=64)
    assert e.value.field == "image_size" and "input_size" in e.value.allowed
    with pytest.raises(InvalidArgument) as e:
        get_workload("yolov8n", input_size=100)  # not a multiple of 32
    assert e.value.field == "input_size"
    with pytest.raises(InvalidArgument) as e:
        get_workload("bert-tiny", num_heads=3)
    assert e.value.field == "num_heads"
    with pytest.raises(InvalidArgument) as e:
        get_workload("lstm", seq_len=0)
    assert e.value.field == "seq_len"


# --- every model trains and infers; output shapes --------------------------------------------
@pytest.mark.parametrize("name", sorted(TINY))
def test_every_model_trains_and_infers(name):
    wl = get_workload(name, **TINY[name])
    train = MinibatchRunner(wl, "train", batch_size=2, device="cpu")
    times_ms = train.run(2)
    assert len(times_ms) == 2 and all(t > 0 for t in times_ms)
    assert len(train.losses) == 2 and all(math.isfinite(x) for x in train.losses)
    infer = MinibatchRunner(wl, "infer", batch_size=2, device="cpu")
    assert len(infer.run(2)) == 2 and infer.losses == []
    assert not infer.model.training and train.model.training


def test_classifier_output_shapes():
    for name in ("resnet18", "mobilenetv3"):
        wl = get_workload(name, input_size=48, num_classes=7)
        x, y = wl.make_batch(3)
        assert x.shape == (3, 3, 48, 48) and y.shape == (3,) and y.dtype == torch.int64
        assert wl.build().eval()(x).shape == (3, 7)


def test_detector_output_shapes_and_loss():
    wl = get_workload("yolov8n", input_size=64, num_classes=5)
    model = wl.build()
    x, targets = wl.make_batch(2)
    assert targets.shape == (2, wl.config.max_boxes, 5)
    maps = model.train()(x)
    assert [tuple(m.shape) for m in maps] == [(2, 64 + 5, 8, 8), (2, 69, 4, 4), (2, 69, 2, 2)]
    loss = wl.loss(maps, targets)
    loss.backward()
    assert loss.item() > 0 and model.stem[0].conv.weight.grad.abs().sum() > 0
    with torch.no_grad():
        decoded = model.eval()(x)
    assert decoded.shape == (2, 64 + 16 + 4, 4 + 5)  # boxes xyxy + class scores per anchor
    assert ((decoded[..., 4:] >= 0) & (decoded[..., 4:] <= 1)).all()


def test_language_model_output_shapes():
    lm = get_workload("lstm-tiny")
    x, y = lm.make_batch(3)
    assert x.shape == y.shape == (3, 16) and torch.equal(x[:, 1:], y[:, :-1])  # next-token targets
    assert lm.build()(x).shape == (3, 16, 256)
    mlm = get_workload("bert-tiny", seq_len=12, vocab_size=300)
    x, y = mlm.make_batch(4)
    masked = y != IGNORE_INDEX
    assert masked.any(1).all() and (x[masked] == 103).all()  # every sample has a masked target
    assert mlm.build()(x).shape == (4, 12, 300)


# --- FLOPs and parameters against published values ------------------------------------------
def _near(value: float, expected: float, rel: float) -> bool:
    return abs(value - expected) <= rel * expected


def test_resnet18_size():
    wl = get_workload("resnet18")
    assert wl.param_count() == 11_689_512  # torchvision resnet18
    assert _near(wl.flops(), 3.64e9, 0.02)  # 1.82 GMACs at 224×224


def test_mobilenetv3_size():
    small, large = get_workload("mobilenetv3"), get_workload("mobilenetv3-large")
    assert small.param_count() == 2_542_856 and large.param_count() == 5_483_032  # torchvision
    assert _near(small.flops() / 2, 0.057e9, 0.06)  # ≈ 0.06 GMACs
    assert _near(large.flops() / 2, 0.22e9, 0.03)  # PowerTrain Table 2: 225 M


def test_yolov8n_size():
    wl = get_workload("yolov8n")
    assert _near(wl.param_count(), 3.157e6, 0.01)  # Ultralytics: 3,157,200
    assert _near(wl.flops(), 8.7e9, 0.02)  # Ultralytics: 8.7 GFLOPs at 640


def test_bert_base_size_and_encoder_flops():
    wl = get_workload("bert-base")
    assert _near(wl.param_count(), 110e6, 0.01)
    report = wl.flop_report()
    t, h, layers, vocab = 128, 768, 12, 30522
    # per layer: Q, K, V, out (4·T·H²) + FFN (8·T·H²) + the two attention products (2·T²·H) MACs
    encoder_macs = layers * (12 * t * h * h + 2 * t * t * h)
    assert report.under("encoder") == 2 * encoder_macs  # ≈ 22.3 GFLOPs
    assert report.total_flops == 2 * (encoder_macs + t * h * h + t * h * vocab)  # + MLM head
    assert report.by_type()["MatMul"] == 2 * layers * 2 * t * t * h


def test_lstm_flops_are_counted_per_step_and_layer():
    wl = get_workload("lstm")
    c = wl.config
    gates_macs = sum(4 * c.hidden_size * (c.embed_dim + c.hidden_size) for _ in range(c.num_layers))
    assert wl.flops() == 2 * c.seq_len * (gates_macs + c.hidden_size * c.vocab_size)
    assert _near(wl.param_count(), 7.33e6, 0.01)


@pytest.mark.parametrize("name", ["resnet18", "mobilenetv3", "yolov8n", "bert-tiny"])
def test_hook_counter_matches_torch_flop_counter(name):
    wl = get_workload(name, **TINY[name])
    model = wl.build().eval()
    x, _ = wl.make_batch(2)
    with FlopCounterMode(display=False) as torch_counter, torch.no_grad():
        model(x)
    assert count_flops(model, x).total_flops == torch_counter.get_total_flops() > 0
    assert wl.flops(batch_size=2) == torch_counter.get_total_flops()  # meta-device count agrees


def test_flops_scale_with_batch_size():
    wl = get_workload("mobilenetv3")
    assert wl.flops(batch_size=4) == 4 * wl.flops()


# --- training makes progress ----------------------------------------------------------------
def test_lstm_loss_decreases_on_synthetic_tokens():
    runner = MinibatchRunner("lstm-tiny", "train", batch_size=32, device="cpu", lr=3e-2)
    runner.run(40)
    first, last = sum(runner.losses[:5]) / 5, sum(runner.losses[-5:]) / 5
    assert last < first - 1.0


def test_mobilenet_loss_decreases_on_digits():
    wl = get_workload("mobilenetv3", input_size=32, num_classes=10)
    runner = MinibatchRunner(
        wl, "train", batch_size=32, device="cpu", optimizer="adam", lr=1e-3, source="digits"
    )
    runner.run(15)
    first, last = sum(runner.losses[:3]) / 3, sum(runner.losses[-3:]) / 3
    assert last < first - 0.4


# --- runner ----------------------------------------------------------------------------------
def test_runner_times_and_validation():
    runner = MinibatchRunner("lstm-tiny", "infer", batch_size=4)
    assert runner.device == pick_device()  # CUDA when available, else CPU
    assert len(runner.run(5)) == 5 and all(t > 0 for t in runner.times_ms)
    runner.run(3)
    assert len(runner.times_ms) == 8
    with pytest.raises(InvalidArgument) as e:
        runner.run(0)
    assert e.value.field == "n_minibatches"
    with pytest.raises(InvalidArgument) as e:
        MinibatchRunner("lstm-tiny", "finetune", batch_size=4)
    assert e.value.field == "role"
    with pytest.raises(InvalidArgument) as e:
        MinibatchRunner("lstm-tiny", "train", batch_size=4, optimizer="lamb")
    assert e.value.field == "optimizer"


def test_runner_crosses_epoch_boundaries():
    runner = MinibatchRunner("lstm-tiny", "train", batch_size=4, device="cpu", n_samples=8)
    assert len(runner.run(5)) == 5  # 2 minibatches per epoch


def test_runner_with_loader_workers():
    with MinibatchRunner(
        "lstm-tiny", "train", batch_size=4, device="cpu", num_workers=2, n_samples=8
    ) as runner:
        assert len(runner.run(5)) == 5  # crosses an epoch boundary with persistent workers
        workers = runner.loader._iterator._workers
        assert len(workers) == 2 and all(w.is_alive() for w in workers)
    assert not any(w.is_alive() for w in workers)  # close() stopped them


def test_pick_device_respects_the_given_device():
    assert pick_device("cpu") == torch.device("cpu")
    if not torch.cuda.is_available():
        assert pick_device() == torch.device("cpu")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_runner_on_cuda():
    runner = MinibatchRunner(
        get_workload("resnet18", input_size=64), "train", 8, device="cuda", num_workers=2
    )
    times_ms = runner.run(4)
    assert all(t > 0 for t in times_ms) and next(runner.model.parameters()).is_cuda
    assert runner.loader.pin_memory
    assert len(time_module(runner.model, torch.randn(2, 3, 64, 64, device="cuda"), repeats=3)) == 3


# --- input pipelines -------------------------------------------------------------------------
def test_loader_with_two_workers_matches_in_process_loading():
    wl = get_workload("yolov8n", input_size=64)
    inline = list(make_loader(wl, 4, num_workers=0, n_samples=12, shuffle=False))
    workers = list(make_loader(wl, 4, num_workers=2, n_samples=12, shuffle=False))
    assert len(inline) == len(workers) == 3
    for (xa, ya), (xb, yb) in zip(inline, workers, strict=True):
        assert xa.shape == (4, 3, 64, 64) and torch.equal(xa, xb) and torch.equal(ya, yb)


def test_synthetic_loader_serves_a_pool_made_when_it_is_built():
    """The timed interval holds collation and the copy, not item generation (data.py docs): the
    items are made once, bounded in bytes, and item i is pool item i mod P, as in-process and in
    loader workers alike."""
    from edgetune.workloads.data import POOL_BYTES, PooledItems, dataset_for

    wl = get_workload("resnet18", input_size=32)
    loader = make_loader(wl, 8, n_samples=4096, shuffle=False)
    pooled = loader.dataset
    assert isinstance(pooled, PooledItems) and len(pooled) == 4096
    item_bytes = 3 * 32 * 32 * 4 + 8
    assert len(pooled.items) == min(4096, POOL_BYTES // item_bytes)
    plain = dataset_for(wl, 4096)
    p = len(pooled.items)
    assert torch.equal(pooled[5][0], plain[5][0]) and torch.equal(pooled[p + 5][0], plain[5][0])
    # a minibatch larger than the byte bound is still pooled whole, so no minibatch repeats an item
    big = make_loader(get_workload("yolov8n", input_size=640), 16, n_samples=32).dataset
    assert len(big.items) == 16
    assert not isinstance(make_loader(wl, 8, source="digits").dataset, PooledItems)


def test_digits_loader():
    wl = get_workload("resnet18", input_size=40, num_classes=10)
    x, y = next(iter(make_loader(wl, 16, source="digits")))
    assert x.shape == (16, 3, 40, 40) and y.min() >= 0 and y.max() <= 9
    with pytest.raises(InvalidArgument) as e:
        make_loader(get_workload("lstm-tiny"), 4, source="digits")
    assert e.value.field == "source"
    with pytest.raises(InvalidArgument) as e:
        make_loader(get_workload("lstm-tiny"), 4, source="imagenet")
    assert e.value.field == "source"
    with pytest.raises(InvalidArgument) as e:
        make_loader(wl, 4, num_workers=-1)
    assert e.value.field == "num_workers"


def test_batches_are_seeded():
    wl = get_workload("resnet18", input_size=32)
    a, b, c = wl.make_batch(2, seed=1), wl.make_batch(2, seed=1), wl.make_batch(2, seed=2)
    assert torch.equal(a[0], b[0]) and not torch.equal(a[0], c[0])


# --- layer timing ----------------------------------------------------------------------------
def test_time_module():
    conv = torch.nn.Conv2d(8, 16, 3, padding=1)
    x = torch.randn(2, 8, 16, 16)
    times_ms = time_module(conv, x, repeats=4)
    assert len(times_ms) == 4 and all(t > 0 for t in times_ms)
    assert len(time_module(conv, x, repeats=2, grad=True)) == 2 and conv.weight.grad is None
    with pytest.raises(InvalidArgument):
        time_module(conv, x, repeats=0)
