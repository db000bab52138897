"""PowerTrain's MLP predictor (PowerTrain) and its transfer to a new workload or device.

Network: ``d → 256 → 128 → 64 → 1`` with ReLU, dropout after the first two hidden layers,
Adam (lr 1e-3), MSE on standardised targets (log time for ``time_ms``), ``epochs`` epochs
(default 100) of shuffled minibatches, keeping the weights of the epoch with the least loss
on a held-out split (10 %). Optional early stopping (``patience`` epochs without improvement).

Transfer (PowerTrain: keep the reference net, replace the output layer, fine-tune on ~50 new
modes). What this implementation does, chosen on the simulator (``experiments/powertrain_mape.py``):

1. copy the reference net and replace its output layer;
2. initialise the new output layer by ridge regression on the frozen 64 penultimate features
   of the new rows (a closed-form "linear probe", so fine-tuning starts from the best head the
   reference features allow instead of from noise);
3. fine-tune with Adam: the new output layer at ``transfer_lr`` (1e-3) and, with
   ``transfer_mode="all"`` (default), every hidden layer at a tenth of that rate;
   ``"head+last"`` unfreezes only the last hidden layer (at the low rate), ``"head"`` trains
   the output layer alone. On the simulator (50 noisy modes, 3 draws, MAPE time / power)
   "all" was best or tied: MobileNetV3 8.2 / 3.6 % (head 8.6 / 4.1, head+last 9.0 / 4.0),
   YOLOv8n 6.2 / 2.4, LSTM 6.9 / 3.7, BERT-base 10.6 / 11.1 (head 13.4 / 10.9);
4. pick the number of fine-tuning epochs on a held-out 20 % of the new rows (when there are
   at least 20), then fine-tune again from step 1 on all rows for that many epochs, so no
   profiled mode is wasted on validation alone.

Training is seeded (weights, dropout, shuffling) inside a forked RNG, uses ``threads`` torch
threads (default 1: these nets are too small to gain from more, and cores are shared), and
is deterministic on CPU. Optional ``progress(stage, epoch, epochs)`` callback.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import contextmanager
from typing import Any

import numpy as np
import torch
from torch import nn

from edgetune.errors import InvalidArgument
from edgetune.estimation.asymmetric import UNDER_WEIGHT, asymmetric_mape_loss
from edgetune.estimation.base import Predictor

LOSSES = ("mse", "asym-mape")
TRANSFER_MODES = ("head", "head+last", "all")
HIDDEN = (256, 128, 64)

ProgressFn = Callable[[str, int, int], None]


def build_mlp(in_dim: int, hidden: tuple[int, ...] = HIDDEN, dropout: float = 0.1) -> nn.Sequential:
    """Dense layers with ReLU; dropout after each hidden layer but the last (two for 256-128-64)."""
    layers: list[nn.Module] = []
    width = in_dim
    for i, h in enumerate(hidden):
        layers += [nn.Linear(width, h), nn.ReLU()]
        if i < len(hidden) - 1 and dropout > 0:
            layers.append(nn.Dropout(dropout))
        width = h
    layers.append(nn.Linear(width, 1))
    return nn.Sequential(*layers)


@contextmanager
def _torch_session(seed: int, threads: int):
    """Seeded, forked torch RNG and a fixed thread count, restored afterwards."""
    before = torch.get_num_threads()
    torch.set_num_threads(max(int(threads), 1))
    try:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            yield
    finally:
        torch.set_num_threads(before)


class NNPredictor(Predictor):
    """PowerTrain MLP; ``loss="asym-mape"`` gives Fulcrum's asymmetric loss (``nn-asym``)."""

    method = "nn"
    supports_transfer = True

    def __init__(self, target: str = "time_ms", transform: str | None = None, seed: int = 0, *,
                 epochs: int = 100, batch_size: int = 64, lr: float = 1e-3, dropout: float = 0.1,
                 val_frac: float = 0.1, patience: int | None = None, loss: str = "mse",
                 under_weight: float = UNDER_WEIGHT, hidden: tuple[int, ...] | list[int] = HIDDEN,
                 transfer_mode: str = "all", transfer_epochs: int = 300, transfer_lr: float = 1e-3,
                 threads: int = 1) -> None:
        super().__init__(target, transform, seed)
        if loss not in LOSSES:
            raise InvalidArgument("loss", f"unknown loss {loss!r}", ", ".join(LOSSES))
        if transfer_mode not in TRANSFER_MODES:
            raise InvalidArgument("transfer_mode", f"unknown transfer mode {transfer_mode!r}",
                                  ", ".join(TRANSFER_MODES))
        if int(epochs) < 1:
            raise InvalidArgument("epochs", f"{epochs} must be at least 1", ">= 1")
        if not 0.0 <= dropout < 1.0:
            raise InvalidArgument("dropout", f"{dropout} is not a probability", "0 <= p < 1")
        self.epochs, self.batch_size, self.lr, self.dropout = int(epochs), int(batch_size), float(lr), float(dropout)
        self.val_frac, self.patience, self.loss = float(val_frac), patience, loss
        self.under_weight = float(under_weight)
        self.hidden = tuple(int(h) for h in hidden)
        self.transfer_mode, self.transfer_epochs, self.transfer_lr = transfer_mode, int(transfer_epochs), float(transfer_lr)
        self.threads = int(threads)
        self.net: nn.Sequential | None = None
        self.progress: ProgressFn | None = None

    def params(self) -> dict[str, Any]:
        return {"epochs": self.epochs, "batch_size": self.batch_size, "lr": self.lr, "dropout": self.dropout,
                "val_frac": self.val_frac, "patience": self.patience, "loss": self.loss,
                "under_weight": self.under_weight, "hidden": list(self.hidden), "transfer_mode": self.transfer_mode,
                "transfer_epochs": self.transfer_epochs, "transfer_lr": self.transfer_lr, "threads": self.threads}

    # -- loss ------------------------------------------------------------------------------------
    def _loss_fn(self) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
        if self.loss == "mse":
            return nn.functional.mse_loss
        y_scaler = self._fitted_parts()[1]
        mean, std = float(y_scaler.mean[0]), float(y_scaler.std[0])
        log = self.transform == "log"

        def to_units(scaled: torch.Tensor) -> torch.Tensor:  # standardised → target units, differentiably
            u = scaled * std + mean
            return torch.exp(u) if log else u

        return lambda pred, true: asymmetric_mape_loss(to_units(pred), to_units(true), self.under_weight)

    # -- fit -------------------------------------------------------------------------------------
    def _fit(self, xs: np.ndarray, ys: np.ndarray) -> dict[str, Any]:
        rng = np.random.default_rng(self.seed)
        n = xs.shape[0]
        n_val = max(int(round(self.val_frac * n)), 2) if self.val_frac > 0 else 0
        perm = rng.permutation(n)
        val, tr = perm[:n_val], perm[n_val:]
        with _torch_session(self.seed, self.threads):
            net = build_mlp(xs.shape[1], self.hidden, self.dropout)
            opt = torch.optim.Adam(net.parameters(), lr=self.lr)
            best_epoch, best_val = _train(net, opt, xs, ys, tr, val, self.epochs, self.batch_size, self._loss_fn(),
                                          rng, self.patience, self._report("fit"))
        self.net = net
        return {"epochs": self.epochs, "best_epoch": best_epoch, "val_loss": best_val, "val_rows": int(n_val)}

    # -- transfer --------------------------------------------------------------------------------
    def _transfer(self, xs: np.ndarray, ys: np.ndarray) -> dict[str, Any]:
        if self.net is None:
            raise InvalidArgument("base", "the reference network is missing")
        reference = {k: v.clone() for k, v in self.net.state_dict().items()}
        rng = np.random.default_rng(self.seed + 1)
        n = xs.shape[0]
        chosen = self.transfer_epochs
        val_loss = None
        if n >= 20:  # choose the epoch count on a held-out fifth, then use every row
            perm = rng.permutation(n)
            n_val = max(int(round(0.2 * n)), 4)
            val, tr = perm[:n_val], perm[n_val:]
            net = self._fresh_head(reference, xs[tr], ys[tr])
            with _torch_session(self.seed + 1, self.threads):
                best_epoch, val_loss = _train(net, self._transfer_optimizer(net), xs, ys, tr, val,
                                              self.transfer_epochs, self.batch_size, self._loss_fn(), rng, None,
                                              self._report("transfer (choosing epochs)"), allow_zero=True)
            chosen = best_epoch
        every = np.arange(n)
        net = self._fresh_head(reference, xs, ys)
        if chosen > 0:
            with _torch_session(self.seed + 2, self.threads):
                _train(net, self._transfer_optimizer(net), xs, ys, every, np.array([], dtype=int), chosen,
                       self.batch_size, self._loss_fn(), rng, None, self._report("transfer"))
        self.net = net
        return {"mode": self.transfer_mode, "epochs": int(chosen), "val_loss": val_loss}

    def _fresh_head(self, reference: dict[str, torch.Tensor], xs: np.ndarray, ys: np.ndarray) -> nn.Sequential:
        """The reference net with a new output layer fitted by ridge regression on its features."""
        net = build_mlp(xs.shape[1], self.hidden, self.dropout)
        net.load_state_dict(reference)
        net.eval()
        with torch.no_grad():
            feats = net[:-1](torch.as_tensor(xs, dtype=torch.float32)).double().numpy()
        design = np.hstack([feats, np.ones((feats.shape[0], 1))])
        # ridge strength relative to the features' energy; the bias is not shrunk
        lam = 1e-3 * float(np.mean(np.sum(feats**2, axis=0))) + 1e-8
        reg = lam * np.eye(design.shape[1])
        reg[-1, -1] = 0.0
        coef = np.linalg.solve(design.T @ design + reg, design.T @ ys)
        head = nn.Linear(feats.shape[1], 1)
        with torch.no_grad():
            head.weight.copy_(torch.as_tensor(coef[:-1][None, :], dtype=torch.float32))
            head.bias.copy_(torch.as_tensor(coef[-1:], dtype=torch.float32))
        net[-1] = head
        return net

    def _transfer_optimizer(self, net: nn.Sequential) -> torch.optim.Optimizer:
        linears = [m for m in net if isinstance(m, nn.Linear)]
        head, last = linears[-1], linears[-2]
        for p in net.parameters():
            p.requires_grad_(self.transfer_mode == "all")
        groups: list[dict[str, Any]] = [{"params": list(head.parameters()), "lr": self.transfer_lr}]
        if self.transfer_mode == "head+last":
            groups.append({"params": list(last.parameters()), "lr": self.transfer_lr * 0.1})
        elif self.transfer_mode == "all":
            groups.append({"params": [p for m in linears[:-1] for p in m.parameters()], "lr": self.transfer_lr * 0.1})
        for g in groups:
            for p in g["params"]:
                p.requires_grad_(True)
        return torch.optim.Adam(groups)

    # -- predict ---------------------------------------------------------------------------------
    def _predict(self, xs: np.ndarray) -> tuple[np.ndarray, None]:
        return self.forward(xs), None

    def forward(self, xs: np.ndarray) -> np.ndarray:
        """The net's output on standardised features (standardised target space)."""
        assert self.net is not None
        self.net.eval()
        before = torch.get_num_threads()
        torch.set_num_threads(max(self.threads, 1))
        try:
            with torch.no_grad():
                return self.net(torch.as_tensor(xs, dtype=torch.float32)).double().numpy().ravel()
        finally:
            torch.set_num_threads(before)

    # -- state -----------------------------------------------------------------------------------
    def _state(self) -> tuple[dict[str, Any], dict[str, np.ndarray], dict[str, bytes]]:
        assert self.net is not None
        arrays = {f"net.{k}": v.detach().numpy().copy() for k, v in self.net.state_dict().items()}
        return {"in_dim": len(self.columns)}, arrays, {}

    def _load_state(self, state: dict[str, Any], arrays: dict[str, np.ndarray], blobs: dict[str, bytes]) -> None:
        net = build_mlp(int(state["in_dim"]), self.hidden, self.dropout)
        net.load_state_dict({k[len("net."):]: torch.as_tensor(v) for k, v in arrays.items() if k.startswith("net.")})
        self.net = net

    def _report(self, stage: str) -> Callable[[int, int], None] | None:
        if self.progress is None:
            return None
        progress = self.progress
        return lambda epoch, total: progress(f"{self.target} {stage}", epoch, total)


def _train(net: nn.Sequential, opt: torch.optim.Optimizer, xs: np.ndarray, ys: np.ndarray, tr: np.ndarray,
           val: np.ndarray, epochs: int, batch_size: int, loss_fn: Callable, rng: np.random.Generator,
           patience: int | None, report: Callable[[int, int], None] | None,
           allow_zero: bool = False) -> tuple[int, float | None]:
    """Minibatch Adam; keeps the best-validation weights in ``net``. Returns (best epoch, its loss).

    Without validation rows the last epoch's weights are kept. With ``allow_zero`` epoch 0
    (the starting weights) competes too.
    """
    x_all = torch.as_tensor(xs, dtype=torch.float32)
    y_all = torch.as_tensor(ys, dtype=torch.float32).reshape(-1, 1)
    x_tr, y_tr = x_all[tr], y_all[tr]
    x_val, y_val = x_all[val], y_all[val]
    has_val = len(val) > 0
    best_state, best_val, best_epoch = None, float("inf"), 0

    def val_loss() -> float:
        net.eval()
        with torch.no_grad():
            return float(loss_fn(net(x_val), y_val))

    if has_val and allow_zero:
        best_val, best_state = val_loss(), {k: v.clone() for k, v in net.state_dict().items()}
    n_tr = x_tr.shape[0]
    bs = min(batch_size, n_tr)
    for epoch in range(1, epochs + 1):
        net.train()
        order = torch.as_tensor(rng.permutation(n_tr))
        for start in range(0, n_tr, bs):
            idx = order[start:start + bs]
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(net(x_tr[idx]), y_tr[idx])
            loss.backward()
            opt.step()
        if has_val:
            v = val_loss()
            if v < best_val:
                best_val, best_epoch = v, epoch
                best_state = {k: v.clone() for k, v in net.state_dict().items()}
            elif patience is not None and epoch - best_epoch >= patience:
                if report:
                    report(epochs, epochs)
                break
        if report:
            report(epoch, epochs)
    if has_val and best_state is not None:
        net.load_state_dict(best_state)
        return best_epoch, best_val
    return epochs, None
