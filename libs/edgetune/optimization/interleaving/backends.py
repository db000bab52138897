"""What executes the minibatches a scheduler asks for: real models or timed stand-ins.

A :class:`Backend` runs one training minibatch (``train_step``) or one inference minibatch
over ``k`` requests (``infer_step(k)``) and returns its time in ms; its ``clock`` is the time
the scheduler and the request queue live on.

- :class:`TorchBackend` (real clock): a zoo training workload through
  :class:`~edgetune.workloads.MinibatchRunner` and a zoo inference model served on a
  pre-built pool of samples (a minibatch of k requests is the first k); both models stay
  resident, as on a Jetson, and a step runs one of them. Safe to call ``train_step`` and
  ``infer_step`` from two threads at once (separate models) — that is the naive baseline.
- :class:`TimedBackend` (virtual clock): takes t_tr and t_in(β) — constants, callables or a
  table of measured / simulated minibatch times — and advances the clock by them, so a run
  with simulator numbers is exact and takes milliseconds.

:func:`measure_step_times` profiles a backend's t_tr and t_in(β) (medians) for the planner.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping

import numpy as np

from edgetune.base.clocks import Clock, RealClock, VirtualClock
from edgetune.errors import InvalidArgument


class Backend(ABC):
    """Runs training and inference minibatches on one device."""

    #: True when steps take real time (threads and a RealClock); False for a virtual clock.
    realtime: bool = True
    train_batch_size: int = 0

    @property
    @abstractmethod
    def clock(self) -> Clock: ...

    @abstractmethod
    def train_step(self) -> float:
        """Run one training minibatch; its time in ms."""

    @abstractmethod
    def infer_step(self, batch_size: int) -> float:
        """Run one inference minibatch over ``batch_size`` requests; its time in ms."""

    @property
    def losses(self) -> list[float]:
        return []

    def close(self) -> None:  # noqa: B027 - optional hook, nothing to release by default
        """Release resources."""

    def __enter__(self) -> Backend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class TimedBackend(Backend):
    """Minibatch times from numbers; a virtual clock advanced by each step.

    ``train_time_ms``: a constant or a zero-argument callable (e.g. drawing noise).
    ``infer_time_ms``: a callable ``k -> ms`` or a mapping {batch size: ms}; a mapping is
    interpolated linearly in k between measured sizes and held constant outside them (a
    served minibatch smaller than β happens under the eager policy and at the end of a run).
    """

    realtime = False

    def __init__(self, train_time_ms: float | Callable[[], float],
                 infer_time_ms: Mapping[int, float] | Callable[[int], float],
                 train_batch_size: int = 16, clock: VirtualClock | None = None) -> None:
        if callable(train_time_ms):
            self._t_tr = train_time_ms
        else:
            t_tr = float(train_time_ms)
            if not t_tr > 0:
                raise InvalidArgument("train_time_ms", f"{train_time_ms!r} must be positive", "> 0")
            self._t_tr = lambda: t_tr
        if isinstance(infer_time_ms, Mapping):
            if not infer_time_ms:
                raise InvalidArgument("infer_time_ms", "no inference times given", "{batch size: ms}")
            sizes = np.array(sorted(infer_time_ms), dtype=float)
            times = np.array([float(infer_time_ms[int(b)]) for b in sizes])
            if np.any(times <= 0):
                raise InvalidArgument("infer_time_ms", "times must be positive", "> 0")
            self._t_in: Callable[[int], float] = lambda k: float(np.interp(k, sizes, times))
        elif callable(infer_time_ms):
            self._t_in = infer_time_ms
        else:
            raise InvalidArgument("infer_time_ms", f"{type(infer_time_ms).__name__} given",
                                  "a mapping {batch size: ms} or a callable")
        self.train_batch_size = train_batch_size
        self._clock = clock or VirtualClock()

    @classmethod
    def from_simulator(cls, device, train_workload: str, infer_workload: str, mode=None,
                       batch_sizes: Iterable[int] = (1, 4, 16, 32, 64), train_batch_size: int = 16) -> TimedBackend:
        """Noise-free times of ``device`` (a :class:`~edgetune.devices.simulated.SimulatedJetson`) in ``mode``
        (default: its current mode)."""
        m = mode if mode is not None else device.current_mode()
        t_tr = float(device.true_time_ms(m, train_workload, "train", train_batch_size))
        t_in = {int(b): float(device.true_time_ms(m, infer_workload, "infer", int(b))) for b in batch_sizes}
        return cls(t_tr, t_in, train_batch_size)

    @property
    def clock(self) -> VirtualClock:
        return self._clock

    def train_time_ms(self) -> float:
        return float(self._t_tr())

    def infer_time_ms(self, batch_size: int) -> float:
        return float(self._t_in(batch_size))

    def train_step(self) -> float:
        ms = self.train_time_ms()
        self._clock.advance(ms / 1000.0)
        return ms

    def infer_step(self, batch_size: int) -> float:
        ms = self.infer_time_ms(batch_size)
        self._clock.advance(ms / 1000.0)
        return ms


class TorchBackend(Backend):
    """Real zoo models on a torch device (CPU in tests and experiments), on the real clock."""

    realtime = True

    def __init__(self, train_workload, infer_workload, train_batch_size: int = 16, max_infer_batch: int = 64,
                 device: str = "cpu", seed: int = 0) -> None:
        # torch and the model zoo only for this backend: the simulated ones need neither
        import torch  # deferred: torch

        from edgetune.workloads import MinibatchRunner, get_workload  # deferred: torch

        if max_infer_batch < 1:
            raise InvalidArgument("max_infer_batch", f"{max_infer_batch} must be positive", ">= 1")
        self._torch = torch
        self.train_batch_size = train_batch_size
        self.max_infer_batch = max_infer_batch
        self._trainer = MinibatchRunner(train_workload, "train", train_batch_size, device=device, seed=seed)
        infer_wl = get_workload(infer_workload) if isinstance(infer_workload, str) else infer_workload
        self.infer_workload = infer_wl
        self._device = torch.device(device)
        self._model = infer_wl.build(self._device).eval()
        # the requests' payloads: one pre-made sample each, so serving times only the model
        self._inputs = infer_wl.make_batch(max_infer_batch, seed=seed + 1, device=self._device)[0]
        self._clock = RealClock()

    @property
    def clock(self) -> RealClock:
        return self._clock

    def warmup(self, n: int = 2) -> None:
        """Untimed minibatches of both models (allocator growth, lazy init) before a run."""
        self._trainer.run(n)
        self._trainer.losses.clear()
        self._trainer.times_ms.clear()
        for _ in range(n):
            self.infer_step(self.max_infer_batch)
            self.infer_step(1)

    def train_step(self) -> float:
        return self._trainer.run(1)[0]

    def infer_step(self, batch_size: int) -> float:
        if not 1 <= batch_size <= self.max_infer_batch:
            raise InvalidArgument("batch_size", f"{batch_size} out of range", f"1..{self.max_infer_batch}")
        t0 = time.perf_counter()
        with self._torch.inference_mode():
            out = self._model(self._inputs[:batch_size])
        if self._device.type == "cuda":
            self._torch.cuda.synchronize(self._device)
        del out
        return (time.perf_counter() - t0) * 1000.0

    @property
    def losses(self) -> list[float]:
        return self._trainer.losses

    def close(self) -> None:
        self._trainer.close()


def measure_step_times(backend: Backend, infer_batch_sizes: Iterable[int], repeats: int = 5,
                       quantile: float = 0.5) -> tuple[float, dict[int, float]]:
    """t_tr and t_in(β) in ms: the ``quantile`` of ``repeats`` minibatches each (the planner's inputs).

    The median (0.5) is the profiler's usual statistic; on a shared, noisy CPU a higher
    quantile (0.9) plans for the slow minibatches that a static τ_tr must absorb.
    """
    if repeats < 1:
        raise InvalidArgument("repeats", f"{repeats} must be positive", ">= 1")
    if not 0 <= quantile <= 1:
        raise InvalidArgument("quantile", f"{quantile!r} out of range", "0..1")
    t_tr = float(np.quantile([backend.train_step() for _ in range(repeats)], quantile))
    t_in = {int(b): float(np.quantile([backend.infer_step(int(b)) for _ in range(repeats)], quantile))
            for b in infer_batch_sizes}
    return t_tr, t_in
