"""The narrow interfaces the :class:`~edgetune.tuning.tuner.NodeTuner` talks to.

Something that measures (a local device's profiler, an agent's ``Profile`` stream), something
that fits and predicts (the estimation pipeline in-process, the Estimator service), something
that selects (the library's selectors, ``Optimizer.Select``). :mod:`.local` and :mod:`edgetune.clients.tuning`
implement them, so a CLI on a device, the services over gRPC and the tests run the same tuner.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np

from edgetune.base.objective import Objective
from edgetune.base.records import Choice, Points, Predictions


@dataclass(frozen=True)
class ModelRef:
    """A handle on a model an :class:`Estimator` holds: its id and what it is (the parsed form of an
    estimator model id is :class:`edgetune.estimation.ids.ModelId`)."""

    model_id: str
    kind: str
    device: str = ""
    workload: str = ""
    has_std: bool = False
    n_train: int = 0


class Measurer(Protocol):
    """Measures points on one node's device with the measurement protocol."""

    def measure(self, modes: np.ndarray, batch_size: int, *, seed: int = 0, purpose: str = "profile") -> Points:
        """Every mode at ``batch_size``; points the device skipped are left out. ``purpose``: ``profile``
        (initial, held-out and frontier modes) or ``verify`` (a chosen configuration)."""
        ...


class Estimator(Protocol):
    """Fits, transfers and predicts time and power (one pipeline, wherever it runs)."""

    where: str

    def fit(self, points: Points, *, model_id: str, method: str = "nn", seed: int = 0,
            epochs: int | None = None) -> ModelRef: ...

    def transfer(self, base: ModelRef, points: Points, *, model_id: str, method: str, seed: int = 0,
                 transfer_epochs: int | None = None, params: dict[str, str] | None = None) -> ModelRef: ...

    def predict(self, model: ModelRef, modes: np.ndarray, batch_size: int) -> Predictions: ...

    def find(self, model_id: str) -> ModelRef | None:
        """The model of that id, or None when the estimator holds none."""
        ...


def reference_model_id(device: str, role: str = "train") -> str:
    """The id of a device model's reference (``reference-orin-agx-train``): what ``edgetune up`` fits and
    what a tuning job without a reference model transfers from."""
    return f"reference-{device}-{role}"


class Selector(Protocol):
    """Chooses one option of a pool under a power budget at a risk (a probability)."""

    def select(self, pool: Predictions, power_budget_w: float, *, risk: float, objective: Objective) -> Choice: ...
