"""The predictor that *guides* ALS and the NN baseline: which configurations to profile next.

Fulcrum's NN (Fulcrum, §5.2): dense 256-128-64-1, ReLU, Adam, inputs standardised
([cores, cpu, gpu, emc], plus the inference batch size), a MAPE loss that weighs
under-prediction 4× (an under-predicted power breaks a budget). One network per target
(time, power). Departures, for fits that must take a second or two on a shared CPU: 300
epochs (the paper: 1000) at learning rate 3e-3 (1e-3), refits warm-started for 60 epochs,
frequencies given as clock periods (``als.mode_features``), an exp output layer.

This is a small implementation behind the :class:`Guide` interface (the loss is
``edgetune.estimation.asymmetric``'s), kept inside ``optimization`` because it must refit warm
in a fraction of a second per round and was written before ``edgetune.estimation``'s
predictors existed; any object with ``fit`` / ``predict`` can replace it (``ALS(guide_factory=…)``).
Fits are deterministic for a given seed (one ``torch.Generator`` per network, single-process
full-batch training), which session resumption relies on.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from contextlib import contextmanager
from typing import TYPE_CHECKING

import numpy as np

from edgetune.estimation.asymmetric import UNDER_WEIGHT, asymmetric_mape_loss
from edgetune.estimation.features import Standardizer

if TYPE_CHECKING:
    from edgetune.estimation.gp import GaussianProcess


class Guide(ABC):
    """A regressor from configuration features to one positive target."""

    @abstractmethod
    def fit(self, x: np.ndarray, y: np.ndarray) -> None:
        """(Re)fit on all observations so far (warm-started when the guide supports it)."""

    @abstractmethod
    def predict(self, x: np.ndarray) -> np.ndarray:
        ...


class MLPGuide(Guide):
    """Fulcrum's 256-128-64-1 MLP with the asymmetric MAPE loss (torch, CPU).

    ``x_domain``: every feature row the guide will ever see (the whole search space), used to
    standardise inputs once, so a warm start keeps meaning the same thing. Targets are scaled by
    their geometric mean (MAPE does not care) and the output is exp(·) of the last layer, so the
net regresses log-scaled targets — one learning rate suits milliseconds and watts, and a
batch-size sweep spanning 50× in time is fitted evenly.
    ``epochs`` for the first fit, ``refit_epochs`` for warm-started refits.
    """

    def __init__(self, x_domain: np.ndarray, seed: int = 0, hidden: tuple[int, ...] = (256, 128, 64),
                 epochs: int = 300, refit_epochs: int = 60, lr: float = 3e-3,
                 under_weight: float = UNDER_WEIGHT) -> None:
        import torch  # deferred: the optimizer process imports this module without torch (GPGuide is the default)

        dom = np.asarray(x_domain, dtype=np.float64)
        self._mu = dom.mean(axis=0)
        self._sd = np.where(dom.std(axis=0) > 0, dom.std(axis=0), 1.0)
        self.epochs, self.refit_epochs, self.lr, self.under_weight = epochs, refit_epochs, lr, under_weight
        gen = torch.Generator().manual_seed(int(seed))
        layers: list = []
        width = dom.shape[1]
        for h in hidden:
            lin = torch.nn.Linear(width, h)
            _init(lin, gen)
            layers += [lin, torch.nn.ReLU()]
            width = h
        out = torch.nn.Linear(width, 1)
        _init(out, gen)
        layers.append(out)
        self.net = torch.nn.Sequential(*layers).double()
        self.opt = torch.optim.Adam(self.net.parameters(), lr=lr)
        self._scale = 1.0
        self._fitted = False

    @staticmethod
    def _out(z):
        # exp output: the net learns log(y / scale), so targets spanning 20 ms … 2 s are equally easy;
        # the clamp keeps an untrained net from overflowing
        return z.clamp(-20.0, 20.0).exp()

    def _x(self, x: np.ndarray):
        import torch  # deferred (torch), as in __init__

        return torch.from_numpy((np.asarray(x, dtype=np.float64) - self._mu) / self._sd)

    def fit(self, x: np.ndarray, y: np.ndarray) -> None:
        import torch  # deferred (torch), as in __init__

        y = np.asarray(y, dtype=np.float64)
        if not self._fitted:
            self._scale = float(np.exp(np.log(np.maximum(y, 1e-12)).mean()))  # geometric mean
        xt = self._x(x)
        yt = torch.from_numpy(y / self._scale).unsqueeze(1)
        epochs = self.refit_epochs if self._fitted else self.epochs
        self.net.train()
        with _one_thread():
            for _ in range(epochs):
                self.opt.zero_grad()
                loss = asymmetric_mape_loss(self._out(self.net(xt)), yt, self.under_weight)
                loss.backward()
                self.opt.step()
        self._fitted = True

    def predict(self, x: np.ndarray) -> np.ndarray:
        import torch  # deferred (torch), as in __init__

        self.net.eval()
        with torch.no_grad(), _one_thread():
            out = self._out(self.net(self._x(x))).squeeze(1).numpy()
        return out * self._scale


@contextmanager
def _one_thread():
    """Run a tiny network on one thread: intra-op threads only add contention at this size."""
    import torch  # deferred (torch), as in MLPGuide

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _init(lin, gen) -> None:
    """He-uniform weights from ``gen`` (torch's default init draws from the global RNG)."""
    import torch  # deferred: the optimizer process imports this module without torch

    bound = math.sqrt(6.0 / lin.in_features)
    with torch.no_grad():
        lin.weight.copy_(torch.rand(lin.weight.shape, generator=gen, dtype=lin.weight.dtype) * 2 * bound - bound)
        lin.bias.zero_()


class GPGuide(Guide):
    """A Matérn GP (``edgetune.estimation.gp``'s kernel, ``normalize_y``) on the standardised
    features and the log target: ALS's default guide.

    On concurrent ALS the MLP guide, fitted on 50–100 points, predicted a low-power mode's
    inference power 3–5 W (15–25 %) high, so the system power max(p_tr, p_in) of the modes that
    answer tight power budgets at high rates looked like a higher-power band already sampled;
    the GP predicts them within ~2 %. A refit starts its hyper-parameter search from the last
    fit's (no random restarts): fast, and deterministic, as session resumption needs.
    """

    def __init__(self, x_domain: np.ndarray, seed: int = 0) -> None:
        self._scale = Standardizer.fit(np.asarray(x_domain, dtype=np.float64))
        self.seed = int(seed)
        self._gp: GaussianProcess | None = None

    def _x(self, x: np.ndarray) -> np.ndarray:
        return self._scale.transform(x)

    def fit(self, x: np.ndarray, y: np.ndarray) -> None:
        from edgetune.estimation.gp import GaussianProcess  # deferred: torch (the NN) loads on first fit

        start = self._gp.state()[1]["theta"] if self._gp is not None else None
        self._gp = GaussianProcess(0, self.seed).fit(
            self._x(x), np.log(np.maximum(np.asarray(y, dtype=np.float64), 1e-12)), start=start)

    def predict(self, x: np.ndarray) -> np.ndarray:
        if self._gp is None:
            return np.ones(np.asarray(x).shape[0])
        return np.exp(self._gp.predict(self._x(x))[0])
