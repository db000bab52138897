"""Real PyTorch minibatch runners: the timed unit every profile is made of.

:class:`MinibatchRunner` trains or infers one zoo workload minibatch by minibatch and
returns each minibatch's wall time in ms. :func:`time_module` times a single module's
forward pass (layer-level profiling, as NeuralPower and THOR do).

What one minibatch time covers (the same on CPU and CUDA):

1. fetching the next batch from the DataLoader (the CPU input pipeline: generation,
   preprocessing, collation; with ``num_workers`` > 0 only the wait for a prefetched batch),
2. the host→device copy (non-blocking from pinned memory on CUDA),
3. train: forward, loss, backward, optimizer step; infer: forward in ``inference_mode``.

It ends when the device has finished that work. On CPU that is ``time.perf_counter``
around the steps (CPU ops are synchronous). On CUDA a pair of ``torch.cuda.Event(enable_timing=True)``
is made per minibatch: the start event is recorded on an idle stream (the previous
minibatch ended with a synchronize) before the batch is fetched, so the host-side loading
gap falls inside the interval; ``torch.cuda.synchronize()`` runs before ``elapsed_time`` is
read. The DataLoader iterator (and its worker processes) is created before the first timed
minibatch; the first minibatch still carries one-off costs (cuDNN autotuning, allocator
growth), so profilers drop it.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Iterator, Sequence
from typing import Any

import torch
from torch import nn

from edgetune import stopping, validation
from edgetune.base.roles import Role
from edgetune.errors import InvalidArgument
from edgetune.workloads.data import make_loader
from edgetune.workloads.registry import WorkloadDef, get_workload
from edgetune.workloads.user import UserWorkload, call_model, loaded_workload

OPTIMIZERS = ("sgd", "adam")


def pick_device(device: torch.device | str | None = None) -> torch.device:
    """``device`` if given, else CUDA when available, else CPU."""
    if device is not None:
        return torch.device(device)
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def make_optimizer(name: str, params: Any, lr: float) -> torch.optim.Optimizer:
    if name == "sgd":
        return torch.optim.SGD(params, lr=lr, momentum=0.9)
    if name == "adam":
        return torch.optim.Adam(params, lr=lr)
    raise InvalidArgument("optimizer", f"unknown optimizer {name!r}", ", ".join(OPTIMIZERS))


def _to(batch: Any, device: torch.device, non_blocking: bool) -> Any:
    if isinstance(batch, torch.Tensor):
        return batch.to(device, non_blocking=non_blocking)
    if isinstance(batch, (list, tuple)):
        return type(batch)(_to(b, device, non_blocking) for b in batch)
    return batch


class MinibatchRunner:
    """Runs minibatches of a zoo workload on one device and times each one (see module doc).

    ``workload``: a name or a :class:`WorkloadDef`; ``role``: ``"train"`` or ``"infer"``;
    ``device``: None picks CUDA when available; ``optimizer`` / ``lr`` default to the
    workload's. After :meth:`run`, ``losses`` holds one training loss per minibatch run so far
    and ``times_ms`` every minibatch time.
    """

    def __init__(
        self,
        workload: WorkloadDef | str,
        role: Role | str,
        batch_size: int,
        device: torch.device | str | None = None,
        num_workers: int = 0,
        lr: float | None = None,
        optimizer: str | None = None,
        *,
        source: str = "synthetic",
        n_samples: int | None = None,
        seed: int = 0,
    ) -> None:
        self.workload = get_workload(workload) if isinstance(workload, str) else workload
        self.role = Role.parse(role)
        self.batch_size = validation.batch_size(batch_size)
        self.device = pick_device(device)
        self._cuda = self.device.type == "cuda"
        torch.manual_seed(seed)  # same initial weights for the same seed
        self.model = self.workload.build(self.device)
        self.optimizer: torch.optim.Optimizer | None = None
        if self.role is Role.TRAIN:
            self.model.train()
            self.optimizer = make_optimizer(
                optimizer or self.workload.optimizer,
                self.model.parameters(),
                lr if lr is not None else self.workload.lr,
            )
        else:
            self.model.eval()
        self.loader = make_loader(
            self.workload,
            batch_size,
            num_workers,
            n_samples=n_samples,
            source=source,
            seed=seed,
            pin_memory=self._cuda,  # page-locked host memory lets the copy run asynchronously
            persistent_workers=num_workers > 0,  # don't respawn workers at every epoch boundary
        )
        self._it: Iterator | None = None
        self.losses: list[float] = []
        self.times_ms: list[float] = []

    # --- one minibatch --------------------------------------------------------------------
    def _next_batch(self) -> Any:
        assert self._it is not None
        try:
            return next(self._it)
        except StopIteration:  # epoch boundary: start the next epoch, inside the timed interval
            self._it = iter(self.loader)
            return next(self._it)

    def _step(self) -> torch.Tensor | None:
        """Fetch, copy and compute one minibatch; returns the (unsynchronised) loss when training."""
        inputs, targets = _to(self._next_batch(), self.device, self._cuda)
        if self.optimizer is None:
            with torch.inference_mode():
                self.model(inputs)
            return None
        self.optimizer.zero_grad(set_to_none=True)
        loss = self.workload.loss(self.model(inputs), targets)
        loss.backward()
        self.optimizer.step()
        return loss.detach()

    def run(self, n_minibatches: int) -> list[float]:
        """Run ``n_minibatches`` and return each one's time in ms (also appended to ``times_ms``)."""
        validation.count(n_minibatches, "n_minibatches")
        if self._it is None:
            self._it = iter(self.loader)  # starts loader workers outside the timed interval
        times_ms: list[float] = []
        for _ in range(n_minibatches):
            stopping.check()  # a cancelled profile (client gone, agent stopping) stops between minibatches
            if self._cuda:
                time_ms, loss = self._timed_cuda()
            else:
                t0 = time.perf_counter()
                loss = self._step()
                time_ms = (time.perf_counter() - t0) * 1e3
            times_ms.append(time_ms)
            if loss is not None:
                self.losses.append(float(loss))  # after the timed interval: .item() would sync on CUDA
        self.times_ms.extend(times_ms)
        return times_ms

    def _timed_cuda(self) -> tuple[float, torch.Tensor | None]:
        with torch.cuda.device(self.device):  # events record on the current device's stream: make it ours
            torch.cuda.synchronize()  # the stream is idle, so `start` stamps the host's "now"
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            loss = self._step()
            end.record()
            torch.cuda.synchronize()  # elapsed_time needs both events completed
        return start.elapsed_time(end), loss

    def close(self) -> None:
        """Stop loader workers now (persistent ones would otherwise live until garbage collection)."""
        self._it = None
        # DataLoader keeps its persistent-worker iterator itself; torch has no public shutdown for it
        it = getattr(self.loader, "_iterator", None)
        if it is not None and hasattr(it, "_shutdown_workers"):
            it._shutdown_workers()
        self.loader._iterator = None

    def __enter__(self) -> MinibatchRunner:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def time_module(
    module: nn.Module,
    inputs: torch.Tensor | Sequence[torch.Tensor],
    repeats: int = 10,
    warmup: int = 1,
    grad: bool = False,
) -> list[float]:
    """Time ``repeats`` forward passes of ``module`` on ``inputs`` (already on the module's device), in ms.

    ``warmup`` untimed passes go first (lazy init, cuDNN algorithm choice). ``grad=False`` runs
    under ``inference_mode``; ``grad=True`` times forward + backward of the output's sum, for
    training-time layer profiles. CUDA inputs are timed with an event pair per repeat and a
    synchronize before reading; CPU inputs with ``perf_counter``.
    """
    if repeats < 1:
        raise InvalidArgument("repeats", f"{repeats} must be positive", ">= 1")
    args = (inputs,) if isinstance(inputs, torch.Tensor) else tuple(inputs)
    cuda_device = next((a.device for a in args if a.is_cuda), None)

    def once() -> None:
        if grad:
            out = module(*args)
            (out if isinstance(out, torch.Tensor) else torch.cat([o.flatten() for o in out])).sum().backward()
        else:
            with torch.inference_mode():
                module(*args)

    for _ in range(warmup):
        once()
    times_ms = []
    for _ in range(repeats):
        if cuda_device is not None:
            with torch.cuda.device(cuda_device):
                torch.cuda.synchronize()
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                once()
                end.record()
                torch.cuda.synchronize()
            times_ms.append(start.elapsed_time(end))
        else:
            t0 = time.perf_counter()
            once()
            times_ms.append((time.perf_counter() - t0) * 1e3)
    if grad:
        module.zero_grad(set_to_none=True)
    return times_ms


class _UserBatches:
    """A user workload's ``make_batch`` as an endless loader: one call per minibatch, fetched inside
    the timed interval as a DataLoader's next batch is."""

    def __init__(self, make_batch: Any, batch_size: int) -> None:
        self.make_batch, self.batch_size = make_batch, batch_size
        self._iterator = None  # what MinibatchRunner.close() looks for on a DataLoader

    def __iter__(self) -> Iterator[Any]:
        while True:
            yield self.make_batch(self.batch_size)


class UserRunner(MinibatchRunner):
    """Minibatches of a user's ``MODULE:FUNCTION`` workload (:mod:`edgetune.workloads.user`), timed
    as :class:`MinibatchRunner` times the zoo's: ``make_batch``, the copy, forward (+ its ``loss_fn``,
    backward and an SGD step when training). Runs on a copy of the model, so profiling leaves the
    loaded workload's weights alone."""

    def __init__(self, workload: UserWorkload, role: Role | str, batch_size: int,
                 device: torch.device | str | None = None, lr: float = 0.01, optimizer: str = "sgd",
                 *, seed: int = 0) -> None:
        self.user = workload
        self.role = Role.parse(role)
        if self.role is Role.TRAIN and workload.loss_fn is None:
            raise InvalidArgument("role", f"{workload.spec} has no loss_fn: it runs only as infer", "infer")
        self.batch_size = validation.batch_size(batch_size)
        self.device = pick_device(device)
        self._cuda = self.device.type == "cuda"
        torch.manual_seed(seed)
        self.model = copy.deepcopy(workload.model).to(self.device)
        self.optimizer = None
        if self.role is Role.TRAIN:
            self.model.train()
            self.optimizer = make_optimizer(optimizer, self.model.parameters(), lr)
        else:
            self.model.eval()
        self.loader = _UserBatches(workload.make_batch, self.batch_size)  # type: ignore[assignment]
        self._it = None
        self.losses = []
        self.times_ms = []

    def _step(self) -> torch.Tensor | None:
        inputs, targets = _to(self._next_batch(), self.device, self._cuda)
        if self.optimizer is None:
            with torch.inference_mode():
                call_model(self.model, inputs)
            return None
        assert self.user.loss_fn is not None
        self.optimizer.zero_grad(set_to_none=True)
        loss = self.user.loss_fn(call_model(self.model, inputs), targets)
        loss.backward()
        self.optimizer.step()
        return loss.detach()


class RunnerPool:
    """A ``(workload, role, batch_size, n) -> times_ms`` callable over cached runners.

    Real devices (``SysfsJetson``) profile many modes of the same workload: building the model
    and its loader once per (workload, role, batch size) keeps that cost out of every point.
    """

    def __init__(self, device: str | torch.device | None = None, num_workers: int = 0, max_cached: int = 4) -> None:
        # a workload id of a loaded MODULE:FUNCTION runs as a UserRunner, any other name as the zoo's
        self.device = device
        self.num_workers = num_workers
        self.max_cached = max_cached
        self._runners: dict[tuple[str, str, int], MinibatchRunner] = {}

    def __call__(self, workload: str, role: Role | str, batch_size: int, n_minibatches: int) -> list[float]:
        key = (workload, Role.parse(role).value, int(batch_size))
        runner = self._runners.get(key)
        if runner is None:
            if len(self._runners) >= self.max_cached:  # drop the oldest: models hold device memory
                self._runners.pop(next(iter(self._runners))).close()
            user = loaded_workload(workload)  # a MODULE:FUNCTION this process loaded, by its id
            runner = (UserRunner(user, key[1], key[2], device=self.device) if user is not None else
                      MinibatchRunner(workload, key[1], key[2], device=self.device, num_workers=self.num_workers))
            self._runners[key] = runner
        return runner.run(n_minibatches)

    def close(self) -> None:
        for runner in self._runners.values():
            runner.close()
        self._runners.clear()
