"""Input pipelines for the zoo: map-style datasets made in-process, and the DataLoader factory.

Nothing is downloaded. Sources:

- ``"synthetic"`` (every task): samples generated from a per-sample seed, so item ``i`` is
  the same in any worker process and across runs. Images are seeded noise with a label;
  token streams follow a fixed random successor table 90 % of the time (learnable, so a
  language model's loss falls); detection images carry filled class-coloured boxes.
- ``"digits"`` (image classification): scikit-learn's bundled 8×8 handwritten digits (1,797
  images, 10 classes), upsampled per item to the model's input size — real per-item
  preprocessing work on the CPU, as a real pipeline has.

Each item is ``(input, target)``; default collation stacks them into a minibatch.

A loader over a synthetic source makes a bounded pool of distinct items once, when it is
built, and serves item ``i`` as pool item ``i mod P`` (:class:`PooledItems`): a minibatch's
timed interval then holds what a dataset already in memory costs (collation, pinning, the
copy), not our random number generator. On an H200 the per-item generation was 50–99 % of an
image workload's measured minibatch (``tools/cuda_check.py``, check ``pipeline``), so mode
choices would have followed the CPU clock that generator runs on. The digits source keeps its
per-item work: it stands for a real pipeline's preprocessing.
"""

from __future__ import annotations

from collections.abc import Sized
from typing import TYPE_CHECKING, cast

import numpy as np
import torch
from torch.nn import functional as F
from torch.utils.data import DataLoader, Dataset

from edgetune import validation
from edgetune.errors import InvalidArgument

if TYPE_CHECKING:
    from edgetune.workloads.registry import WorkloadDef

SOURCES = ("synthetic", "digits")
#: Most bytes a loader's pool of synthetic items holds (at least one minibatch is always pooled).
POOL_BYTES = 64 * 2**20
IGNORE_INDEX = -100  # target value the MLM loss skips (unmasked positions)


def _rng(seed: int, index: int | None = None) -> np.random.Generator:
    """Item ``index``'s own stream (workers and reruns see identical items); None: the dataset-wide one."""
    key = () if index is None else (index,)
    return np.random.default_rng(np.random.SeedSequence(seed, spawn_key=key))


class SyntheticImages(Dataset):
    """``n`` seeded-noise images (C, S, S) with uniform labels in [0, num_classes)."""

    def __init__(
        self, n: int, input_size: int, num_classes: int, in_channels: int = 3, seed: int = 0
    ) -> None:
        self.n, self.size, self.channels, self.seed = n, input_size, in_channels, seed
        self.num_classes = num_classes

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + i)  # one stream per item
        image = torch.randn(self.channels, self.size, self.size, generator=g)
        label = torch.randint(self.num_classes, (), generator=g)
        return image, label


class DigitsImages(Dataset):
    """scikit-learn's ``load_digits``, standardised, upsampled (bilinear) to S×S and repeated to C channels."""

    def __init__(self, input_size: int, in_channels: int = 3, n: int | None = None) -> None:
        from sklearn.datasets import load_digits  # bundled with scikit-learn: no download

        digits = load_digits()
        images = torch.tensor(digits.images, dtype=torch.float32) / 16.0
        images = (images - images.mean()) / images.std()
        self.images = images[:n] if n else images
        self.labels = torch.tensor(digits.target, dtype=torch.int64)[: len(self.images)]
        self.size, self.channels = input_size, in_channels

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        img = F.interpolate(
            self.images[i][None, None], size=(self.size, self.size), mode="bilinear", align_corners=False
        )
        return img[0].expand(self.channels, -1, -1).contiguous(), self.labels[i]


class SyntheticTokens(Dataset):
    """Token windows from a noisy successor chain over ``vocab_size`` tokens.

    ``task="lm"``: (tokens[0:T], tokens[1:T+1]) for next-token prediction.
    ``task="mlm"``: (tokens with ``mask_prob`` of positions replaced by the mask id, targets that
    are the original token at masked positions and ``IGNORE_INDEX`` elsewhere).
    """

    def __init__(
        self,
        n: int,
        seq_len: int,
        vocab_size: int,
        task: str = "lm",
        mask_prob: float = 0.15,
        follow_prob: float = 0.9,
        seed: int = 0,
    ) -> None:
        self.n, self.seq_len, self.vocab, self.task, self.seed = n, seq_len, vocab_size, task, seed
        self.mask_prob, self.follow_prob = mask_prob, follow_prob
        # the successor table is the learnable structure; shared by every item
        self.successor = _rng(seed).permutation(vocab_size)
        self.mask_id = 103 if vocab_size > 103 else vocab_size - 1  # 103 = [MASK] in BERT's vocabulary

    def __len__(self) -> int:
        return self.n

    def _chain(self, rng: np.random.Generator, length: int) -> np.ndarray:
        fresh = rng.integers(0, self.vocab, length)
        follow = rng.random(length) < self.follow_prob
        out = np.empty(length, dtype=np.int64)
        out[0] = fresh[0]
        for t in range(1, length):
            out[t] = self.successor[out[t - 1]] if follow[t] else fresh[t]
        return out

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        rng = _rng(self.seed, i)
        if self.task == "lm":
            s = torch.from_numpy(self._chain(rng, self.seq_len + 1))
            return s[:-1], s[1:]
        s = torch.from_numpy(self._chain(rng, self.seq_len))
        masked = torch.from_numpy(rng.random(self.seq_len) < self.mask_prob)
        masked[rng.integers(self.seq_len)] = True  # at least one target per sample
        target = torch.where(masked, s, torch.full_like(s, IGNORE_INDEX))
        return torch.where(masked, torch.full_like(s, self.mask_id), s), target


class SyntheticDetection(Dataset):
    """Images with 1…``max_boxes`` filled boxes in class colours on faint noise.

    Target: (max_boxes, 5) rows of (class, x1, y1, x2, y2) in pixels; unused rows are −1.
    """

    def __init__(
        self,
        n: int,
        input_size: int,
        num_classes: int,
        max_boxes: int = 4,
        in_channels: int = 3,
        seed: int = 0,
    ) -> None:
        self.n, self.size, self.channels, self.seed = n, input_size, in_channels, seed
        self.num_classes, self.max_boxes = num_classes, max_boxes
        self.colours = torch.from_numpy(_rng(seed).uniform(-1, 1, (num_classes, in_channels))).float()

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        rng = _rng(self.seed, i)
        s = self.size
        image = torch.from_numpy(rng.normal(0, 0.1, (self.channels, s, s))).float()
        target = torch.full((self.max_boxes, 5), -1.0)
        for k in range(int(rng.integers(1, self.max_boxes + 1))):
            w, h = rng.uniform(0.1, 0.5, 2) * s
            x1, y1 = rng.uniform(0, s - w), rng.uniform(0, s - h)
            cls = int(rng.integers(self.num_classes))
            image[:, int(y1) : int(y1 + h), int(x1) : int(x1 + w)] = self.colours[cls][:, None, None]
            target[k] = torch.tensor([cls, x1, y1, x1 + w, y1 + h])
        return image, target


class PooledItems(Dataset):
    """``dataset``'s first ``pool`` items, made now, served as item ``i mod pool`` (``len`` unchanged)."""

    def __init__(self, dataset: Dataset, pool: int) -> None:
        self.n = len(cast(Sized, dataset))
        self.items = [dataset[i] for i in range(min(pool, self.n))]

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.items[i % len(self.items)]


def pool_size(item: tuple[torch.Tensor, ...], batch_size: int, n_items: int) -> int:
    """Items a pool holds: as many as :data:`POOL_BYTES` allows, at least ``batch_size``, at most ``n_items``."""
    item_bytes = max(sum(t.numel() * t.element_size() for t in item), 1)
    return min(n_items, max(batch_size, POOL_BYTES // item_bytes))


def dataset_for(
    workload: WorkloadDef, n_samples: int | None = None, source: str = "synthetic", seed: int = 0
) -> Dataset:
    """The dataset a workload trains on, from ``source`` (see :data:`SOURCES`).

    ``n_samples``: synthetic sources make that many (default 1,024); digits keep the first
    ``n_samples`` of their 1,797 (default all).
    """
    c = workload.config
    if source not in SOURCES:
        raise InvalidArgument("source", f"unknown data source {source!r}", ", ".join(SOURCES))
    if source == "digits":
        if workload.task != "classify":
            raise InvalidArgument(
                "source",
                f"digits are images with labels; {workload.name} is a {workload.task} workload",
                "synthetic",
            )
        if c.num_classes < 10:
            raise InvalidArgument("num_classes", f"{c.num_classes} < the 10 digit classes", ">= 10")
        return DigitsImages(c.input_size, c.in_channels, n=n_samples)
    if n_samples is None:
        n_samples = 1024
    if workload.task == "classify":
        return SyntheticImages(n_samples, c.input_size, c.num_classes, c.in_channels, seed)
    if workload.task == "detect":
        return SyntheticDetection(n_samples, c.input_size, c.num_classes, c.max_boxes, c.in_channels, seed)
    if workload.task in ("lm", "mlm"):
        mask_prob = getattr(c, "mask_prob", 0.15)
        return SyntheticTokens(n_samples, c.seq_len, c.vocab_size, workload.task, mask_prob, seed=seed)
    raise AssertionError(f"no dataset for task {workload.task!r}")  # registry and data out of sync


def make_loader(
    workload: WorkloadDef,
    batch_size: int,
    num_workers: int = 0,
    *,
    n_samples: int | None = None,
    source: str = "synthetic",
    shuffle: bool = True,
    seed: int = 0,
    pin_memory: bool = False,
    drop_last: bool = True,
    prefetch_factor: int | None = None,
    persistent_workers: bool = False,
) -> DataLoader:
    """A DataLoader over ``workload``'s dataset (a registry entry: ``get_workload(name)``).

    ``num_workers`` = 0 loads in the calling process (no overlap with compute, like the
    PowerTrain YOLO runs); n ≥ 1 starts n loader processes that prefetch. ``pin_memory``
    (for CUDA) puts batches in page-locked memory so ``.to(device, non_blocking=True)`` can
    overlap the copy. ``drop_last`` keeps every minibatch at ``batch_size`` so their times
    compare. ``n_samples`` defaults to 64 minibatches (the digits source has 1,797 items); a
    synthetic source serves them from a pool made here (module docs).
    """
    validation.batch_size(batch_size)
    if num_workers < 0:
        raise InvalidArgument("num_workers", f"{num_workers} must not be negative", ">= 0")
    if n_samples is None and source != "digits":
        n_samples = 64 * batch_size
    ds = dataset_for(workload, n_samples, source, seed)
    n_items = len(cast(Sized, ds))
    if batch_size > n_items:
        raise InvalidArgument("batch_size", f"{batch_size} exceeds the {n_items} samples", f"1..{n_items}")
    if source == "synthetic":
        ds = PooledItems(ds, pool_size(ds[0], batch_size, n_items))
    kwargs: dict = {}
    if num_workers > 0:
        kwargs["prefetch_factor"] = prefetch_factor or 2
        kwargs["persistent_workers"] = persistent_workers
    return DataLoader(
        ds,
        batch_size=batch_size,
        shuffle=shuffle,
        num_workers=num_workers,
        pin_memory=pin_memory,
        drop_last=drop_last,
        generator=torch.Generator().manual_seed(seed),
        **kwargs,
    )
