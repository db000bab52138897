"""The data sets the batch-efficiency proxies train on, as one record (image and text alike).

Its own module so that :mod:`edgetune.estimation.proxy` (image sets, the models, training) and
:mod:`edgetune.estimation.proxy_text` (text sets) both build it without importing each other.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class ProxyData:
    """Train / held-out tensors of one data set: x (n, C, S, S) float32, y (n,) int64.

    A text set (:mod:`edgetune.estimation.proxy_text`) holds windows: x and y (n, T) int64.
    """

    name: str
    x_train: torch.Tensor
    y_train: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor

    @property
    def n_train(self) -> int:
        """Training samples (images, or text windows)."""
        return int(self.y_train.shape[0])
