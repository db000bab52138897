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

import copy
from collections.abc import Callable, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
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
        return fine_tune_many([self], [xs], [ys])[0]

    @classmethod
    def _transfer_many(cls, preds, xss, yss) -> list[dict[str, Any]]:
        return fine_tune_many(preds, xss, yss)

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

    def _layer_rates(self) -> list[float]:
        """Fine-tuning learning rate of each linear layer (0: frozen): the head at ``transfer_lr``, the hidden
        layers ``transfer_mode`` unfreezes at a tenth of it."""
        n = len(self.hidden) + 1
        low = self.transfer_lr * 0.1
        if self.transfer_mode == "all":
            return [low] * (n - 1) + [self.transfer_lr]
        if self.transfer_mode == "head+last":
            return [0.0] * (n - 2) + [low, self.transfer_lr]
        return [0.0] * (n - 1) + [self.transfer_lr]

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


# -- fine-tuning many nets at once ------------------------------------------------------------------
#: Epochs of dropout masks drawn at once per net (bounded memory; a net's draws do not depend on it).
MASK_CHUNK_EPOCHS = 25
ADAM_BETAS = (0.9, 0.999)
ADAM_EPS = 1e-8


@dataclass
class _Run:
    """One net's training in a batch: its rows, epochs, seeds and where its result goes."""

    pred: NNPredictor
    net: nn.Sequential
    xs: np.ndarray
    ys: np.ndarray
    tr: np.ndarray
    val: np.ndarray
    epochs: int
    rng: np.random.Generator
    torch_seed: int
    allow_zero: bool
    report: Callable[[int, int], None] | None
    result: tuple[int, float | None] = (0, None)


def fine_tune_many(preds: Sequence[NNPredictor], xss: Sequence[np.ndarray], yss: Sequence[np.ndarray]) -> list[dict[str, Any]]:
    """Every predictor's transfer (module docstring, steps 1-4) on its own standardised rows, in place.

    Nets of the same shape and settings train together as one stacked batch (:func:`_train_many`):
    a batch's per-step cost is close to one net's, and each net's numbers depend only on its own
    rows and seeds, so a net fine-tuned in a batch of any size ends bit-identical to one fine-tuned
    alone (tested). Returns each transfer's metadata.
    """
    for p in preds:
        if p.net is None:
            raise InvalidArgument("base", "the reference network is missing")
    refs = [{k: v.clone() for k, v in p.net.state_dict().items()} for p in preds]  # type: ignore[union-attr]
    rngs = [np.random.default_rng(p.seed + 1) for p in preds]
    chosen = [p.transfer_epochs for p in preds]
    val_loss: list[float | None] = [None] * len(preds)
    choosing: list[_Run] = []
    for i, (p, xs, ys) in enumerate(zip(preds, xss, yss, strict=True)):
        n = xs.shape[0]
        if n >= 20:  # choose the epoch count on a held-out fifth, then use every row
            perm = rngs[i].permutation(n)
            n_val = max(int(round(0.2 * n)), 4)
            val, tr = perm[:n_val], perm[n_val:]
            choosing.append(_Run(p, p._fresh_head(refs[i], xs[tr], ys[tr]), xs, ys, tr, val, p.transfer_epochs,
                                 rngs[i], p.seed + 1, True, p._report("transfer (choosing epochs)")))
    _train_many(choosing)
    for run in choosing:
        i = next(j for j, p in enumerate(preds) if p is run.pred)
        chosen[i], val_loss[i] = run.result
    final: list[_Run] = []
    nets = []
    for i, (p, xs, ys) in enumerate(zip(preds, xss, yss, strict=True)):
        net = p._fresh_head(refs[i], xs, ys)
        nets.append(net)
        if chosen[i] > 0:
            final.append(_Run(p, net, xs, ys, np.arange(xs.shape[0]), np.array([], dtype=int), chosen[i], rngs[i],
                              p.seed + 2, False, p._report("transfer")))
    _train_many(final)
    for p, net in zip(preds, nets, strict=True):
        p.net = net
    return [{"mode": p.transfer_mode, "epochs": int(c), "val_loss": v} for p, c, v in zip(preds, chosen, val_loss,
                                                                                           strict=True)]


def _train_many(runs: Sequence[_Run]) -> None:
    """Fine-tune ``runs`` (each net's result in ``run.result``, its weights in ``run.net``), batched by shape."""
    groups: dict[tuple[Any, ...], list[_Run]] = {}
    for r in runs:
        p = r.pred
        key = (r.xs.shape[1], p.hidden, p.dropout, tuple(p._layer_rates()), p.batch_size, p.loss, p.transform,
               p.under_weight, len(r.tr), len(r.val), r.allow_zero)
        groups.setdefault(key, []).append(r)
    for group in groups.values():
        if len(group) == 1:
            # bmm takes another kernel for a batch of one, whose sums round differently: a lone net trains
            # beside a throw-away twin (own copies of its rows, generators and weights) to end as in a batch
            r = group[0]
            twin = _Run(r.pred, copy.deepcopy(r.net), r.xs, r.ys, r.tr, r.val, r.epochs, copy.deepcopy(r.rng),
                        r.torch_seed, r.allow_zero, None)
            group = [r, twin]
        _train_group(group)


def _train_group(runs: Sequence[_Run]) -> None:
    """Minibatch Adam on K nets of one shape as stacked tensors (``bmm``): forward, loss per net, backward of
    their sum (each net's gradient is its own loss's), Adam per net. Dropout masks and row orders come from
    each net's own generators. Keeps each net's best-validation weights (epoch 0 too with ``allow_zero``),
    or its weights after its own last epoch."""
    first = runs[0].pred
    k_nets = len(runs)
    rates = first._layer_rates()
    n_layers = len(rates)
    with _torch_session(0, first.threads):
        linears = [[m for m in r.net if isinstance(m, nn.Linear)] for r in runs]
        weights = [torch.stack([ls[li].weight.detach() for ls in linears]) for li in range(n_layers)]
        biases = [torch.stack([ls[li].bias.detach() for ls in linears]).unsqueeze(1) for li in range(n_layers)]
        params: list[tuple[torch.Tensor, float]] = []
        for li, rate in enumerate(rates):
            weights[li] = weights[li].clone().requires_grad_(rate > 0)
            biases[li] = biases[li].clone().requires_grad_(rate > 0)
            if rate > 0:
                params += [(weights[li], rate), (biases[li], rate)]
        moments = [(torch.zeros_like(t), torch.zeros_like(t)) for t, _ in params]
        x_all = torch.stack([torch.as_tensor(r.xs, dtype=torch.float32) for r in runs])
        y_all = torch.stack([torch.as_tensor(r.ys, dtype=torch.float32).reshape(-1, 1) for r in runs])
        rows = torch.arange(k_nets).unsqueeze(1)
        tr_idx = torch.as_tensor(np.stack([r.tr for r in runs]), dtype=torch.long)
        x_tr, y_tr = x_all[rows, tr_idx], y_all[rows, tr_idx]
        has_val = len(runs[0].val) > 0
        if has_val:
            val_idx = torch.as_tensor(np.stack([r.val for r in runs]), dtype=torch.long)
            x_val, y_val = x_all[rows, val_idx], y_all[rows, val_idx]
        loss_fn = _stacked_loss([r.pred for r in runs])
        n_drop = len(first.hidden) - 1 if first.dropout > 0 else 0
        keep = 1.0 - first.dropout
        gens = [torch.Generator().manual_seed(r.torch_seed) for r in runs]
        n_tr = x_tr.shape[1]
        bs = min(first.batch_size, n_tr)
        widths = first.hidden

        def forward(x: torch.Tensor, masks: list[torch.Tensor] | None) -> torch.Tensor:
            h = x
            for li in range(n_layers):
                h = torch.baddbmm(biases[li], h, weights[li].transpose(1, 2))
                if li < n_layers - 1:
                    h = torch.relu(h)
                    if masks is not None and li < n_drop:
                        h = h * masks[li]
            return h

        def snapshot(k: int) -> list[torch.Tensor]:
            return [t[k].detach().clone() for t in (*weights, *biases)]

        def val_losses() -> torch.Tensor:
            with torch.no_grad():
                return loss_fn(forward(x_val, None), y_val)

        best_val = [float("inf")] * k_nets
        best_epoch = [0] * k_nets
        best: list[list[torch.Tensor] | None] = [None] * k_nets
        done: list[list[torch.Tensor] | None] = [None] * k_nets
        if has_val and runs[0].allow_zero:
            start = val_losses()
            for k in range(k_nets):
                best_val[k], best[k] = float(start[k]), snapshot(k)
        epochs = [r.epochs for r in runs]
        step = 0
        chunk: list[torch.Tensor] = []
        for epoch in range(1, max(epochs) + 1):
            if n_drop and (epoch - 1) % MASK_CHUNK_EPOCHS == 0:  # each net's next masks from its own generator
                chunk = [torch.stack([torch.empty((MASK_CHUNK_EPOCHS, n_tr, widths[li])).bernoulli_(keep, generator=g)
                                      for g in gens]).div_(keep) for li in range(n_drop)]
            order = torch.as_tensor(np.stack([r.rng.permutation(n_tr) if epoch <= r.epochs else np.arange(n_tr)
                                              for r in runs]), dtype=torch.long)
            at = (epoch - 1) % MASK_CHUNK_EPOCHS
            for s0 in range(0, n_tr, bs):
                idx = order[:, s0:s0 + bs]
                masks = [c[:, at, s0:s0 + idx.shape[1]] for c in chunk] if n_drop else None
                loss = loss_fn(forward(x_tr[rows, idx], masks), y_tr[rows, idx]).sum()
                grads = torch.autograd.grad(loss, [t for t, _ in params])
                step += 1
                _adam_step(params, grads, moments, step)
            if has_val:
                v = val_losses()
                for k in range(k_nets):
                    if epoch <= epochs[k] and float(v[k]) < best_val[k]:
                        best_val[k], best_epoch[k], best[k] = float(v[k]), epoch, snapshot(k)
            for k in range(k_nets):
                if epoch == epochs[k]:
                    done[k] = snapshot(k)
                if epoch <= epochs[k] and runs[k].report is not None:
                    runs[k].report(epoch, epochs[k])  # type: ignore[misc]
    for k, r in enumerate(runs):
        state = best[k] if has_val and best[k] is not None else done[k]
        if state is not None:
            with torch.no_grad():
                for li, m in enumerate([m for m in r.net if isinstance(m, nn.Linear)]):
                    m.weight.copy_(state[li])
                    m.bias.copy_(state[n_layers + li].reshape(-1))
        r.result = (best_epoch[k], best_val[k]) if has_val and best[k] is not None else (r.epochs, None)


def _adam_step(params: list[tuple[torch.Tensor, float]], grads: Sequence[torch.Tensor],
               moments: list[tuple[torch.Tensor, torch.Tensor]], step: int) -> None:
    """torch's Adam (no weight decay) on the stacked tensors, element by element, so each net's update is its
    own (torch's fused kernel is not: its results vary with the stack's size)."""
    beta1, beta2 = ADAM_BETAS
    bias1 = 1 - beta1 ** step
    bias2_sqrt = (1 - beta2 ** step) ** 0.5
    with torch.no_grad():
        # the same element-wise steps on every tensor at once (torch's _foreach ops: one call per step,
        # not per tensor; the same numbers as the loop over tensors)
        ms, vs, gs = [m for m, _ in moments], [v for _, v in moments], list(grads)
        torch._foreach_lerp_(ms, gs, 1 - beta1)
        torch._foreach_mul_(vs, beta2)
        torch._foreach_addcmul_(vs, gs, gs, value=1 - beta2)
        denoms = torch._foreach_sqrt(vs)
        torch._foreach_div_(denoms, bias2_sqrt)
        torch._foreach_add_(denoms, ADAM_EPS)
        for (p, lr), m, d in zip(params, ms, denoms, strict=True):
            p.addcdiv_(m, d, value=-lr / bias1)


def _stacked_loss(preds: Sequence[NNPredictor]) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    """Each net's loss over its rows, ``(K, rows, 1)`` → ``(K,)``: MSE, or the asymmetric MAPE in target units."""
    first = preds[0]
    if first.loss == "mse":
        return lambda pred, true: ((pred - true) ** 2).mean(dim=(1, 2))
    scalers = [p._fitted_parts()[1] for p in preds]
    mean = torch.tensor([float(s.mean[0]) for s in scalers]).reshape(-1, 1, 1)
    std = torch.tensor([float(s.std[0]) for s in scalers]).reshape(-1, 1, 1)
    log = first.transform == "log"

    def to_units(scaled: torch.Tensor) -> torch.Tensor:  # standardised → target units, differentiably
        u = scaled * std + mean
        return torch.exp(u) if log else u

    def loss(pred: torch.Tensor, true: torch.Tensor) -> torch.Tensor:
        p, t = to_units(pred), to_units(true)
        rel = (p - t) / t.abs().clamp_min(1e-9)
        weight = torch.where(rel < 0, torch.full_like(rel, first.under_weight), torch.ones_like(rel))
        return (weight * rel.abs()).mean(dim=(1, 2))

    return loss
