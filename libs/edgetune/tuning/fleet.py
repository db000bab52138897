"""A fleet's shared model: the nodes of one device model in a TuningJob pool their profiles.

Each node of a job profiles its own random modes (12 by default). Nodes of one device model running
one workload share most of what a transfer has to learn (how that board's time and power answer the
clocks), so the leader fine-tunes the reference once on the points of all of them (the *fleet
model*, method ``transfer``, :data:`FLEET_TRANSFER_EPOCHS`) and each node then fits only its own
residual on top of it: ``ref+gp`` with the ``prior`` candidate (the fleet model's prediction, an
affine correction and a GP over the node's own points; the std its cross-validated conformal
calibration gives). A board unlike its peers moves its own correction, not the fleet model.

Measured (``experiments/fleet_pooling.py``: 40 Orin AGX nodes of 12 profiles, boards' power ±10 %, the
same nodes, points and noise each way in one run; a GP from scratch on each node's points beside: 17.6 % time
MAPE, 5.1 % power, choices up to 3.0× the best): time MAPE p50 14.1 % → 3.0 %, power 5.8 % → 2.3 %, the
90 % power interval covering 15 % → 89 % of the modes, each node's choice 1.045× → 1.035× the best within
its budget (worst 1.37× → 1.15×), estimation CPU per node 2.1 s → 0.3 s. Not shown on real boards: the
real measurements at hand are of one board per device (``experiments/results/fleet_pooling.md``). The nodes
must profile different modes (the coordinator seeds each node's draw by its id): 40 nodes that all profiled
the same 12 modes gave a fleet model no better than each node's own (time MAPE 21.8 %, against 3.8 %).

The barrier: the first node of (job, device model) to finish profiling opens the pool with the nodes
expected to join (the job's live targets of that model still being tuned). The pool is fitted once,
when all of them have joined or :data:`FLEET_WAIT_S` after it opened, whichever comes first; a node
that joins after the fit transfers from the fitted model (its points in its own residual only). A
failed fit is tried again by the next node that asks. Fewer than :data:`FLEET_MIN_NODES` expected: no
pool, the node transfers from the reference alone, as before. A leader taking over pools again from
the replayed points (the same points, the same fleet model).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import numpy as np

from edgetune.base.records import Points
from edgetune.tuning.protocols import ModelRef

#: Nodes of one device model a job must be tuning for them to pool (one node transfers alone).
FLEET_MIN_NODES = 2
#: How long the first node to finish profiling waits for the others before the pool is fitted.
FLEET_WAIT_S = 30.0
#: Fine-tuning epochs of the fleet model (its pooled rows choose the count on a held-out fifth first).
FLEET_TRANSFER_EPOCHS = 100
#: Rows the fleet model learns from at most (a seeded draw beyond), so that its fine-tune costs the same for 40
#: nodes as for 400 (40 Orin nodes: 480 rows gave its nodes 3.8 % time MAPE, 240 rows 4.9 %, at half the CPU).
FLEET_MAX_ROWS = 480
#: How each node adapts the fleet model to its own points, and with which settings: the GP's kernel from one
#: start and 3 calibration folds (not 2 starts, 5 folds) cost 0.08 CPU s a node, not 0.11-0.14, with the same
#: time MAPE and choices as good (40 Orin / 30 Xavier nodes of experiments/fleet_pooling.py: worst choice 1.146 /
#: 1.127x the best within budget, was 1.146 / 1.176x; 90 % intervals cover 0.92 / 0.93 of the modes, was 0.89).
NODE_METHOD = "ref+gp"
NODE_PARAMS = {"candidates": "prior", "folds": "3", "restarts": "1"}


def fleet_model_id(job: str, device: str) -> str:
    """The estimator id of a job's fleet model for one device model."""
    return f"tuning-{job}-{device}-fleet"


def pooled(points: dict[str, Points], *, seed: int = 0, max_rows: int = FLEET_MAX_ROWS) -> Points:
    """Every node's points, in node-id order (whatever order they joined in); at most ``max_rows``, a
    seeded draw in row order."""
    ids = sorted(points)
    first = points[ids[0]]  # a pool holds at least the node that fits it
    out = Points.empty(first.device, first.workload, first.role)
    for node_id in ids:
        out = out + points[node_id]
    if len(out) > max_rows:
        out = out.subset(np.sort(np.random.default_rng(seed).choice(len(out), max_rows, replace=False)))
    return out


class FleetPool:
    """One (job, device model)'s barrier and its fleet model, fitted once (module docstring)."""

    def __init__(self, expected: set[str] | frozenset[str], *, wait_s: float = FLEET_WAIT_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.expected = frozenset(expected)
        self.wait_s, self._clock = float(wait_s), clock
        self._opened = clock()
        self._points: dict[str, Points] = {}
        self._model: ModelRef | None = None
        self._fitted_from: tuple[int, int] = (0, 0)  # (nodes, rows) of the fitted pool
        self._fitting = False
        self._cond = threading.Condition()

    @property
    def pools(self) -> bool:
        """Whether enough nodes are expected to pool at all."""
        return len(self.expected) >= FLEET_MIN_NODES

    @property
    def fitted_from(self) -> tuple[int, int]:
        """(nodes, rows) the fleet model was fitted on; (0, 0) before."""
        return self._fitted_from

    def join(self, node_id: str, points: Points, fit: Callable[[Points], ModelRef],
             should_stop: Callable[[], bool], *, seed: int = 0) -> ModelRef | None:
        """Offer ``node_id``'s points and wait for the fleet model: fitted by ``fit`` on the pooled points by
        the node that completes the pool (or finds the wait over). None when ``should_stop`` says so."""
        with self._cond:
            if self._model is None:  # no one woken: the node completing the pool fits it itself
                self._points.setdefault(node_id, points)
            while self._model is None:
                if should_stop():
                    return None
                remaining = self._opened + self.wait_s - self._clock()
                if not self._fitting and (self.expected <= self._points.keys() or remaining <= 0):
                    self._fitting = True
                    snapshot = dict(self._points)
                    break
                # woken by the fit's end; the timeout bounds how late a stop (or the wait's end) is seen. While
                # another node fits, once a second: a thousand waiters waking every 50 ms held the leader's GIL
                self._cond.wait(timeout=1.0 if self._fitting else min(max(remaining, 0.05), 1.0))
            else:
                return self._model
        try:
            data = pooled(snapshot, seed=seed)
            model = fit(data)
        except BaseException:
            with self._cond:
                self._fitting = False  # the next node to ask tries again
                self._cond.notify_all()
            raise
        with self._cond:
            self._model, self._fitting = model, False
            self._fitted_from = (len(snapshot), len(data))
            self._cond.notify_all()
        return model
