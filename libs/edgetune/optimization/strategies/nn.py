"""NN-N: Fulcrum's NN baseline — profile N random configurations, predict the rest, pick the
predicted best, then profile that pick.

The pick comes from predictions, but the decision is the pick's *observed* evaluation: when
the profiled pick misses a budget the answer is ``feasible=False`` (the paper counts that as
"no solution found"). That keeps the rule that decisions only ever rest on measurements, and
shows the cost of trusting a predicted front. Budget: N + 1.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from edgetune.base.mode import PowerMode
from edgetune.optimization.problems import ROLE_INFER, ROLE_TRAIN, Observations, Point, Solution
from edgetune.optimization.strategies.als import config_features, mode_features
from edgetune.optimization.strategies.base import SearchGen, SearchStrategy
from edgetune.optimization.strategies.guide import MLPGuide
from edgetune.optimization.strategies.random import random_configurations

#: Default N (the paper's NN250).
NN_SAMPLES = 250


class NNSearch(SearchStrategy):
    """NN-N (``budget`` = N + 1)."""

    name = "nn"

    def __init__(self, problem, space, *, budget=None, seed=0, epochs: int = 300, **options: Any) -> None:
        super().__init__(problem, space, budget=budget, seed=seed, epochs=epochs, **options)
        self.epochs = epochs
        self.pick: tuple[PowerMode, int] | None = None
        self.no_pick_reason = ""

    def default_budget(self) -> int:
        return NN_SAMPLES + 1

    def _search(self) -> SearchGen:
        yield from self.measure(random_configurations(self, max(1, self.budget - 1)))
        predicted = self.predict_all()
        decision = self.problem.solve(predicted)
        if not decision.feasible or decision.evaluation is None:
            self.no_pick_reason = "the predicted front holds no configuration within the budgets: " + decision.reason
        else:
            self.pick = (decision.evaluation.mode, decision.evaluation.batch_size)
            yield from self.measure([self.pick])

    def predict_all(self) -> Observations:
        """Every configuration's points: observed where profiled, predicted elsewhere (fits the guides)."""
        pred = Observations()
        modes = list(self.space.modes)
        for role in self.problem.roles:
            if role == ROLE_TRAIN:
                sizes = [self.space.train_batch_size]
                cfg = [(m, b) for m in modes for b in sizes]
                x = mode_features([m for m, _ in cfg])
            else:
                sizes = list(self.space.infer_batch_sizes)
                cfg = [(m, b) for m in modes for b in sizes]
                x = config_features([m for m, _ in cfg], [b for _, b in cfg])
            pts = [self.obs.get(m, role, b) for m, b in cfg]
            seen = np.array([p is not None for p in pts])
            if not seen.any():
                continue
            t = np.array([p.time_ms if p else np.nan for p in pts])
            p = np.array([q.power_w if q else np.nan for q in pts])
            salt = 1 if role == ROLE_INFER else 3
            for target, k in ((t, 0), (p, 1)):
                guide = MLPGuide(x, seed=self.seed * 1000 + salt + k, epochs=self.epochs)
                guide.fit(x[seen], target[seen])
                if (~seen).any():
                    target[~seen] = guide.predict(x[~seen])
            for (m, b), ti, pi in zip(cfg, t, p, strict=True):
                pred.add(m, role, b, Point(float(max(ti, 1e-6)), float(pi)))
        return pred

    def best(self) -> Solution:
        """Before the pick: the observed best so far; after: the pick as observed."""
        if self.pick is not None:
            return self.problem.decide(self.problem.evaluate(self.pick[0], self.pick[1], self.obs))
        if self.no_pick_reason:
            return Solution(False, None, self.no_pick_reason, problem=self.problem.kind)
        return self.problem.solve(self.obs)
