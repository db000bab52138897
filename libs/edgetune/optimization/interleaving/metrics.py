"""What a concurrent training + inference run records, and the statistics drawn from it.

:class:`RunResult` is shared by the managed-interleaving scheduler and the naive
time-sharing baseline so the two compare column for column:

- per request: arrival, service start (its inference minibatch began) and completion, in
  seconds since the run started; NaN for requests still queued when the run stopped;
- the device timeline as :class:`Segment`\\ s: which model ran (``train`` / ``infer``) or the
  device idled, when, and on how many samples (the naive baseline's segments overlap: both
  models are on the device at once);
- training losses (real backends).

Statistics: latency percentiles, budget violations (a request still queued at the end whose
age already exceeds the budget counts too, so a backlog cannot hide), training throughput
(minibatches completed within the horizon per second), inference batch sizes, and the queue
length over time (rebuilt exactly from arrivals and service starts).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

TRAIN, INFER, IDLE = "train", "infer", "idle"


@dataclass(frozen=True)
class Segment:
    kind: str  # TRAIN, INFER or IDLE
    start_s: float
    end_s: float
    batch_size: int = 0  # samples in the minibatch (inference: requests served)

    @property
    def duration_ms(self) -> float:
        return (self.end_s - self.start_s) * 1000.0


@dataclass
class RunResult:
    method: str  # "interleaved" or "naive"
    horizon_s: float
    arrival_s: np.ndarray
    service_start_s: np.ndarray
    completion_s: np.ndarray
    segments: list[Segment]
    end_s: float  # when the run stopped (after the post-horizon flush)
    train_batch_size: int = 0
    params: dict[str, Any] = field(default_factory=dict)
    losses: list[float] = field(default_factory=list)

    # --- requests -------------------------------------------------------------------------
    @property
    def served(self) -> np.ndarray:
        return ~np.isnan(self.completion_s)

    @property
    def n_requests(self) -> int:
        return int(self.arrival_s.size)

    @property
    def n_unserved(self) -> int:
        return int((~self.served).sum())

    @property
    def latency_ms(self) -> np.ndarray:
        """Arrival → completion of every served request, in arrival order."""
        s = self.served
        return (self.completion_s[s] - self.arrival_s[s]) * 1000.0

    @property
    def queueing_ms(self) -> np.ndarray:
        s = self.served
        return (self.service_start_s[s] - self.arrival_s[s]) * 1000.0

    def latency_percentiles_ms(self, qs: tuple[float, ...] = (50, 95, 99)) -> dict[str, float]:
        lat = self.latency_ms
        out = {f"p{q:g}_ms": float(np.percentile(lat, q)) if lat.size else float("nan") for q in qs}
        out["max_ms"] = float(lat.max()) if lat.size else float("nan")
        return out

    @property
    def peak_latency_ms(self) -> float:
        lat = self.latency_ms
        return float(lat.max()) if lat.size else float("nan")

    def violations(self, latency_budget_ms: float) -> int:
        """Requests over budget: served late, or still queued at the end and already older than the budget."""
        late = int((self.latency_ms > latency_budget_ms).sum())
        age_ms = (self.end_s - self.arrival_s[~self.served]) * 1000.0
        return late + int((age_ms > latency_budget_ms).sum())

    # --- the device -----------------------------------------------------------------------
    def segments_of(self, kind: str) -> list[Segment]:
        return [s for s in self.segments if s.kind == kind]

    @property
    def infer_batch_sizes(self) -> np.ndarray:
        return np.array([s.batch_size for s in self.segments_of(INFER)], dtype=int)

    @property
    def train_minibatches(self) -> int:
        """Training minibatches completed within the horizon."""
        return sum(1 for s in self.segments_of(TRAIN) if s.end_s <= self.horizon_s + 1e-9)

    @property
    def train_minibatches_per_s(self) -> float:
        return self.train_minibatches / self.horizon_s

    @property
    def train_samples_per_s(self) -> float:
        return self.train_minibatches_per_s * self.train_batch_size

    def busy_fraction(self, kind: str) -> float:
        """Share of the horizon the device spent on ``kind`` (overlapping segments add up)."""
        busy = sum(min(s.end_s, self.horizon_s) - s.start_s for s in self.segments_of(kind)
                   if s.start_s < self.horizon_s)
        return busy / self.horizon_s

    def queue_length(self) -> tuple[np.ndarray, np.ndarray]:
        """Step series (t_s, queued requests): +1 at each arrival, −k when a minibatch of k starts."""
        starts = self.service_start_s[self.served]
        t = np.concatenate([self.arrival_s, starts])
        d = np.concatenate([np.ones(self.arrival_s.size), -np.ones(starts.size)])
        order = np.lexsort((-d, t))  # at equal instants count the arrival before its service
        return t[order], np.cumsum(d[order]).astype(int)

    def model_on_device(self) -> list[tuple[float, float, str]]:
        """(start_s, end_s, kind) of every segment, in start order: which model ran when."""
        return [(s.start_s, s.end_s, s.kind) for s in sorted(self.segments, key=lambda s: s.start_s)]

    # --- one row ----------------------------------------------------------------------------
    def summary(self, latency_budget_ms: float | None = None) -> dict[str, Any]:
        sizes = self.infer_batch_sizes
        row: dict[str, Any] = {
            "method": self.method,
            **{k: v for k, v in self.params.items() if isinstance(v, (int, float, str))},
            "horizon_s": self.horizon_s,
            "requests": self.n_requests,
            "served": int(self.served.sum()),
            "unserved": self.n_unserved,
            **self.latency_percentiles_ms((50, 95, 99)),
            "mean_infer_batch": float(sizes.mean()) if sizes.size else 0.0,
            "infer_batches": int(sizes.size),
            "train_minibatches": self.train_minibatches,
            "train_minibatches_per_s": self.train_minibatches_per_s,
            "max_queue": int(self.queue_length()[1].max()) if self.n_requests else 0,
        }
        if latency_budget_ms is not None:
            row["latency_budget_ms"] = latency_budget_ms
            row["violations"] = self.violations(latency_budget_ms)
            row["violation_rate"] = row["violations"] / self.n_requests if self.n_requests else 0.0
        return row
