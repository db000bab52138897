"""Batch efficiency (Ahmed et al.'s passes to target per batch size) of the user's own model on the
user's own proxy data set: ``edgetune estimate efficiency --workload MODULE:FUNCTION --data MODULE:FUNCTION``.

- ``--workload MODULE:FUNCTION``: the user workload of :mod:`edgetune.workloads.user`
  (``FUNCTION()`` -> ``(model, make_batch, loss_fn)``); the model *as returned* is the checkpoint
  every run starts from, ``loss_fn`` the training loss (an inference-only workload is refused).
- ``--data MODULE:FUNCTION``: ``FUNCTION()`` takes no arguments and returns
  ``(train, val)``, each ``(inputs, targets)`` of tensors with one sample per row of the first
  dimension; ``inputs`` is what the model takes, ``targets`` class indices (int64, ``(n,)``):
  the accuracy is the share of ``val`` rows whose arg-max output is the target.

As for the built-in proxies (:func:`edgetune.estimation.batch_efficiency.estimate_batch_efficiency`):
one task per (batch size, seed) (on Ray, or in order), Adam at ``lr = base_lr · sqrt(b /
base_batch)``, a seeded sample stream (the same for every b), held-out accuracy after every s
samples, passes = the first k that reaches the target (``inf``: never within ``max_passes``).
Each task imports the workload by name again (on Ray: in the worker, from its ``PYTHONPATH``)
and loads the checkpoint's weights; the data travel with the tasks.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from edgetune import validation
from edgetune.base.records import default_samples_per_pass
from edgetune.base.workload import parse_spec
from edgetune.errors import InvalidArgument
from edgetune.estimation.batch_efficiency import (
    BASE_BATCH,
    BASE_LR,
    BatchEfficiencyEstimate,
    RunResult,
    check_settings,
    passes_to_target,
    scaled_lr,
)
from edgetune.estimation.parallel import Progress, run_tasks

FIELD = "data"
DATA_ALLOWED = "MODULE:FUNCTION whose FUNCTION() returns (train, val), each (inputs, targets) tensors"


def load_data(spec: str) -> tuple[tuple[Any, Any], tuple[Any, Any]]:
    """``(train, val)`` of the user's data function, checked; errors name ``data`` and the spec."""
    import torch  # deferred: torch

    from edgetune.workloads.user import call_entry  # deferred: torch

    got = call_entry(spec, field=FIELD, allowed=DATA_ALLOWED)
    function = parse_spec(spec)[1]
    if not isinstance(got, (tuple, list)) or len(got) != 2:
        raise InvalidArgument(FIELD, f"{spec}: {function}() returned {type(got).__name__}, not (train, val)",
                              DATA_ALLOWED)
    out = []
    for name, split in zip(("train", "val"), got, strict=True):
        if not isinstance(split, (tuple, list)) or len(split) != 2 \
                or not all(isinstance(t, torch.Tensor) for t in split):
            raise InvalidArgument(FIELD, f"{spec}: {name} is not (inputs, targets) tensors", DATA_ALLOWED)
        x, y = split
        if y.ndim != 1 or y.dtype != torch.int64 or len(x) != len(y) or len(y) == 0:
            raise InvalidArgument(FIELD, f"{spec}: {name} targets must be class indices (int64, one per input row); "
                                         f"got {tuple(y.shape)} {y.dtype} for {len(x)} inputs", DATA_ALLOWED)
        out.append((x, y))
    return out[0], out[1]


def _accuracy(model: Any, x: Any, y: Any) -> float:
    import torch  # deferred: torch

    model.eval()
    with torch.no_grad():
        correct = (model(x).argmax(dim=1) == y).sum().item()
    model.train()
    return float(correct) / len(y)


def train_user_to_target(*, workload: str, batch_size: int, seed: int, lr: float, target_accuracy: float,
                         samples_per_pass: int, max_passes: int, init_state: dict, train: tuple, val: tuple) -> RunResult:
    """One (batch size, seed) run of the user's model from its checkpoint (module doc)."""
    import torch  # deferred: torch

    from edgetune.workloads.user import load_workload  # deferred: torch

    t0 = time.perf_counter()
    user = load_workload(workload)
    assert user.loss_fn is not None  # checked before the tasks were made
    torch.manual_seed(seed)
    model = user.model
    model.load_state_dict(init_state)
    model.train()
    passes, curve = passes_to_target(model, torch.optim.Adam(model.parameters(), lr=lr), user.loss_fn, train,
                                     lambda: _accuracy(model, *val), batch_size=batch_size, seed=seed,
                                     target_accuracy=target_accuracy, samples_per_pass=samples_per_pass,
                                     max_passes=max_passes)
    return RunResult(batch_size, seed, passes, curve, lr, time.perf_counter() - t0)


def estimate_user_batch_efficiency(workload: str, data: str, batch_sizes: Sequence[int], target_accuracy: float,
                                   seeds: Sequence[int] = (0, 1, 2), *, max_passes: int = 60,
                                   samples_per_pass: int | None = None, base_lr: float = BASE_LR,
                                   base_batch: int = BASE_BATCH, parallel: bool = True, address: str | None = None,
                                   progress: Progress | None = None) -> BatchEfficiencyEstimate:
    """Passes to ``target_accuracy`` of the user's model on the user's data per (batch size, seed)
    (module doc); ``samples_per_pass`` defaults to 2 × the largest batch size."""
    from edgetune.workloads.user import load_workload  # deferred: torch

    batch_sizes, seeds = [int(b) for b in batch_sizes], [int(s) for s in seeds]
    s = samples_per_pass if samples_per_pass is not None else default_samples_per_pass(
        validation.batch_sizes(batch_sizes))
    check_settings(batch_sizes, seeds, target_accuracy, s, max_passes)
    t0 = time.perf_counter()
    user = load_workload(workload)
    if user.loss_fn is None:
        raise InvalidArgument("workload", f"{workload}: an inference-only workload (no loss_fn) cannot be trained",
                              "a workload whose FUNCTION() returns a loss_fn")
    train, val = load_data(data)
    if s > len(train[1]):
        raise InvalidArgument("samples_per_pass", f"s={s} exceeds the {len(train[1])} training samples of {data}",
                              f"<= {len(train[1])}")
    init_state = {k: v.detach().clone() for k, v in user.model.state_dict().items()}
    try:
        initial = _accuracy(user.model, *val)
    except Exception as exc:  # the model does not take the data's inputs, or gives no class scores
        raise InvalidArgument(FIELD, f"{data}: {user.workload_id} cannot score its val split: "
                                     f"{type(exc).__name__}: {exc}", DATA_ALLOWED) from None
    if initial >= target_accuracy:  # zero passes would make r meaningless
        raise InvalidArgument("target_accuracy", f"the checkpoint of {user.workload_id} already has {initial:.3f} "
                              f"on {data}", f"> {initial:.3f}")
    tasks = [{"batch_size": b, "seed": seed, "lr": scaled_lr(b, base_lr, base_batch)} for b in batch_sizes
             for seed in seeds]
    shared = {"workload": workload, "target_accuracy": target_accuracy, "samples_per_pass": s,
              "max_passes": max_passes, "init_state": init_state, "train": train, "val": val}
    runs = run_tasks(train_user_to_target, tasks, parallel=parallel, address=address, progress=progress,
                     shared=shared)
    passes = np.array([r.passes_to_target for r in runs], dtype=float).reshape(len(batch_sizes), len(seeds))
    return BatchEfficiencyEstimate(user.workload_id, data, target_accuracy, s, tuple(batch_sizes), tuple(seeds),
                                   passes, initial, tuple(runs), time.perf_counter() - t0, "adam")
