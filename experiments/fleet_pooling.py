"""A fleet's nodes of one device model: each node's own transfer against one fleet model plus each node's residual.

The setting of the 100-node bench (``tuning_job_100_nodes``): a TuningJob of 12 random profiles per node,
MobileNetV3 on the Orin AGX (or ``--device``) at the node's default budget, a ResNet18 reference fitted as
``edgetune up`` fits it, the bench agents' noise (3 % time, 1.5 % power). Boards of one model are not
identical: with ``--spread S`` each node's power and time are scaled by its own factors, uniform in
[1 - S, 1 + S] (power) and [1 - S/2, 1 + S/2] (time).

The same nodes, the same profiled points and noise, tuned two ways in one run:

* ``gp``: each node a GP from scratch on its own points (the baseline every transfer must beat; ``ref+gp``'s
  ``scratch`` candidate alone: the reference lends only its feature ranges, so every mode may be predicted);
* ``per-node``: each node fine-tunes the reference on its own points (``nn+gp``, the policy's epochs),
  what the controller did before;
* ``fleet``: the reference fine-tuned once on the pooled points (``edgetune.tuning.fleet``: ``transfer``,
  ``FLEET_TRANSFER_EPOCHS``, at most ``FLEET_MAX_ROWS`` rows), each node then fits its own residual on it
  (``ref+gp``, prior candidate), what the controller does now.

Scored per node on its own noise-free table over every candidate mode: MAPE of time and power, the share
of modes inside the 90 % power interval (``μ ± 1.645 σ``), and the decision ``select_and_verify`` makes:
its true time over the best true time within the budget, its true power against the budget; and the
estimation CPU seconds each way. Writes ``experiments/results/fleet_pooling.{md,png}``.

    python experiments/fleet_pooling.py [--device orin-agx] [--nodes 40] [--spread 0.1]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

from edgetune.base.records import Points
from edgetune.control.reconcile import CANDIDATE_GRID
from edgetune.devices.simulated.tables import truth_table
from edgetune.estimation.metrics import mape_pct
from edgetune.localrun.controlplane import REFERENCE_EPOCHS, REFERENCE_POINTS, default_budget_w
from edgetune.powermodes.grids import named_grid
from edgetune.powermodes.specs import get_spec
from edgetune.tuning.fleet import FLEET_TRANSFER_EPOCHS, fleet_model_id, pooled
from edgetune.tuning.local import LibraryEstimator, LibrarySelector
from edgetune.tuning.policy import default_policy
from edgetune.tuning.tuner import NodeTuner

WORKLOAD, REFERENCE_WORKLOAD, BATCH = "mobilenetv3", "resnet18", 16
TIME_NOISE, POWER_NOISE = 0.03, 0.015  # the bench's simulated agents
Z90 = 1.645
RESULTS = Path(__file__).parent / "results"


class Board:
    """One node's board: the simulator's truth scaled by the board's factors, with the agents' noise."""

    def __init__(self, device: str, seed: int, spread: float) -> None:
        rng = np.random.default_rng(1000 + seed)
        self.device = device
        self.power_factor = float(rng.uniform(1 - spread, 1 + spread))
        self.time_factor = float(rng.uniform(1 - spread / 2, 1 + spread / 2))
        self.rng = np.random.default_rng(seed)

    def truth(self, modes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        rows = truth_table(self.device, WORKLOAD, "train", modes, [BATCH])
        return (np.array([r["time_ms"] for r in rows]) * self.time_factor,
                np.array([r["power_w"] for r in rows]) * self.power_factor)

    def measure(self, modes: np.ndarray, batch_size: int, *, seed: int = 0, purpose: str = "profile") -> Points:
        modes = np.asarray(modes, dtype=float).reshape(-1, 4)
        t, p = self.truth(modes)
        return Points(modes, np.full(len(modes), batch_size), t * self.rng.normal(1, TIME_NOISE, len(t)),
                      p * self.rng.normal(1, POWER_NOISE, len(p)), self.device, WORKLOAD, "train")


def reference(estimator: LibraryEstimator, device: str, candidates: np.ndarray):
    picks = candidates[np.sort(np.random.default_rng(0).choice(len(candidates), REFERENCE_POINTS, replace=False))]
    rows = truth_table(device, REFERENCE_WORKLOAD, "train", picks, [BATCH])
    points = Points(picks, np.full(len(picks), BATCH), np.array([r["time_ms"] for r in rows]),
                    np.array([r["power_w"] for r in rows]), device, REFERENCE_WORKLOAD, "train")
    return estimator.fit(points, model_id="reference", method="nn", seed=0, epochs=REFERENCE_EPOCHS)


def score(tuner: NodeTuner, board: Board, candidates: np.ndarray, budget_w: float) -> dict[str, float]:
    true_t, true_p = board.truth(candidates)
    pred = tuner.predictions
    assert pred is not None and pred.power_std_w is not None
    d = tuner.select_and_verify(budget_w)
    best = float(true_t[true_p <= budget_w].min())
    ok = d.feasible and d.within_budget and d.index is not None
    return {"time_mape": mape_pct(pred.time_ms, true_t), "power_mape": mape_pct(pred.power_w, true_p),
            "coverage": float(np.mean(np.abs(true_p - pred.power_w) <= Z90 * pred.power_std_w)),
            "over_best": float(true_t[d.index] / best) if ok else float("nan"),
            "true_power_w": float(true_p[d.index]) if ok else float("nan"), "attempts": float(d.attempts)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="orin-agx")
    ap.add_argument("--nodes", type=int, default=40)
    ap.add_argument("--spread", type=float, default=0.1)
    ap.add_argument("--tag", default="")
    args = ap.parse_args(argv)
    budget_w = default_budget_w(args.device)
    candidates = named_grid(get_spec(args.device), CANDIDATE_GRID).array()
    estimator, selector = LibraryEstimator(), LibrarySelector()
    base = reference(estimator, args.device, candidates)
    policy = default_policy().with_(n_initial=12, rounds=0)  # a job's 12 random profiles (reconcile.policy_for)
    results: dict[str, list[dict[str, float]]] = {}
    cpu: dict[str, float] = {}
    for way in ("gp", "per-node", "fleet"):
        boards = [Board(args.device, seed, args.spread) for seed in range(args.nodes)]
        # each node's own random modes, as the controller's tuners draw them (seeded by node in the bench)
        own = policy.with_(transfer_method="ref+gp") if way == "gp" else policy
        tuners = [NodeTuner(own.with_(seed=seed), board, estimator, selector, base=base, candidates=candidates,
                            batch_size=BATCH, device=args.device, workload=WORKLOAD, model_id=f"{way}-{seed}",
                            power_range_w=(0.7 * budget_w, budget_w),
                            transfer_params={"candidates": "scratch"} if way == "gp" else None)
                  for seed, board in enumerate(boards)]
        for t in tuners:
            t.profile_initial()
        c0 = time.process_time()
        if way == "fleet":  # what every node's FleetPool.join gives once all have joined
            data = pooled({f"node-{i:04d}": t.points for i, t in enumerate(tuners)}, seed=policy.seed)
            fleet = estimator.transfer(base, data, model_id=fleet_model_id("experiment", args.device),
                                       method="transfer", seed=policy.seed, transfer_epochs=FLEET_TRANSFER_EPOCHS)
            for t in tuners:
                t.use_fleet(fleet)
        for t in tuners:
            t.explore()
        cpu[way] = time.process_time() - c0
        results[way] = [score(t, b, candidates, budget_w) for t, b in zip(tuners, boards, strict=True)]
        print(f"{way}: {cpu[way]:.1f} CPU s", file=sys.stderr)
    lines = [f"# Fleet pooling: {args.nodes} {args.device} nodes, spread {args.spread:g}, budget {budget_w:g} W",
             "", f"`python experiments/fleet_pooling.py --device {args.device} --nodes {args.nodes} --spread "
             f"{args.spread:g}`; the same nodes, profiles and noise both ways (module docstring).", "",
             "| way | time MAPE % p50 / max | power MAPE % p50 / max | 90 % power interval covers (p50 / min) | "
             "time / best within budget p50 / max | over budget by > 0.5 W | estimation CPU s per node |",
             "|---|---|---|---|---|---|---|"]
    for way, rows in results.items():
        col = {k: np.array([r[k] for r in rows]) for k in rows[0]}
        over = int(np.sum(col["true_power_w"] > budget_w + 0.5))
        lines.append(f"| {way} | {np.median(col['time_mape']):.2f} / {col['time_mape'].max():.2f} | "
                     f"{np.median(col['power_mape']):.2f} / {col['power_mape'].max():.2f} | "
                     f"{np.median(col['coverage']):.2f} / {col['coverage'].min():.2f} | "
                     f"{np.nanmedian(col['over_best']):.3f} / {np.nanmax(col['over_best']):.3f} | {over} | "
                     f"{cpu[way] / args.nodes:.3f} |")
    text = "\n".join(lines) + "\n"
    print(text)
    RESULTS.mkdir(exist_ok=True)
    stem = f"fleet_pooling{'_' + args.tag if args.tag else ''}"
    (RESULTS / f"{stem}.md").write_text(text)
    _plot(results, RESULTS / f"{stem}.png", f"{args.nodes} {args.device} nodes, spread {args.spread:g}")
    return 0


def _plot(results: dict[str, list[dict[str, float]]], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(11, 3.4))
    for ax, key, label in zip(axes, ("time_mape", "power_mape", "over_best"),
                              ("time MAPE %", "power MAPE %", "time / best within budget"), strict=True):
        data = [[r[key] for r in rows if np.isfinite(r[key])] for rows in results.values()]
        ax.boxplot(data, tick_labels=list(results))
        ax.set_title(label)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    sys.exit(main())
