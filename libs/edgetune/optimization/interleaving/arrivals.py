"""Inference request arrival processes: when requests reach the device.

Every process answers ``times_s(horizon_s)``: the sorted arrival instants in seconds from
the start of a run, all in ``[0, horizon_s)``. Seeded processes give the same instants on
every call, so a managed and a naive run can be fed the identical stream.

- :class:`Deterministic`     one request every 1/α: Fulcrum's constant arrival rate α, under
                             which the peak-latency formula λ = (β−1)/α + t_in is exact
- :class:`Poisson`           homogeneous Poisson at α rps (exponential gaps)
- :class:`PiecewisePoisson`  dynamic rate: Poisson whose rate changes every window (Fulcrum
                             §7.4 replays rate traces that change every 5 minutes)
- :class:`MMPP`              bursty: a two-state Markov-modulated Poisson process (high / low
                             rate, exponential dwell times); ``MMPP.on_off`` has a silent state
- :class:`Replay`            a recorded trace of timestamps (text or CSV file)

Helpers: :func:`counts_per_window`, :func:`index_of_dispersion` (variance / mean of counts per
window: 1 for Poisson, > 1 for bursty traffic), :func:`write_trace`.
"""

from __future__ import annotations

import csv
import math
import pathlib
from abc import ABC, abstractmethod
from collections.abc import Sequence

import numpy as np

from edgetune import validation
from edgetune.errors import InvalidArgument


def _horizon(horizon_s: float) -> float:
    return validation.positive(horizon_s, "horizon_s", "> 0")


class ArrivalProcess(ABC):
    """Produces request arrival instants over a horizon."""

    @abstractmethod
    def times_s(self, horizon_s: float) -> np.ndarray:
        """Sorted arrival instants in ``[0, horizon_s)``, seconds."""

    @property
    @abstractmethod
    def mean_rate_rps(self) -> float:
        """Long-run mean arrival rate (requests per second); what a planner assumes for α."""

    def describe(self) -> str:
        return f"{type(self).__name__}({self.mean_rate_rps:g} rps)"


class Deterministic(ArrivalProcess):
    """A request at ``phase_s + k/α`` for k = 0, 1, ...: Fulcrum's constant arrival rate."""

    def __init__(self, rate_rps: float, phase_s: float = 0.0) -> None:
        self.rate_rps = validation.positive(rate_rps, "rate_rps", "> 0")
        self.phase_s = validation.non_negative(phase_s, "phase_s", ">= 0")

    @property
    def mean_rate_rps(self) -> float:
        return self.rate_rps

    def times_s(self, horizon_s: float) -> np.ndarray:
        h = _horizon(horizon_s)
        # k/α rather than a cumulative sum: no drift from adding 1/α many times
        k = np.arange(int(math.ceil((h - self.phase_s) * self.rate_rps)) + 1)
        t = self.phase_s + k / self.rate_rps
        return t[t < h]


class Poisson(ArrivalProcess):
    """Poisson arrivals at ``rate_rps``, seeded: N ~ Poisson(α·H), instants uniform on [0, H)."""

    def __init__(self, rate_rps: float, seed: int = 0) -> None:
        self.rate_rps = validation.positive(rate_rps, "rate_rps", "> 0")
        self.seed = seed

    @property
    def mean_rate_rps(self) -> float:
        return self.rate_rps

    def times_s(self, horizon_s: float) -> np.ndarray:
        h = _horizon(horizon_s)
        rng = np.random.default_rng(self.seed)
        return _poisson_between(rng, self.rate_rps, 0.0, h)

    def describe(self) -> str:
        return f"Poisson({self.rate_rps:g} rps, seed {self.seed})"


def _poisson_between(rng: np.random.Generator, rate_rps: float, t0_s: float, t1_s: float) -> np.ndarray:
    # given the count, Poisson instants are i.i.d. uniform over the interval
    n = rng.poisson(rate_rps * (t1_s - t0_s)) if rate_rps > 0 and t1_s > t0_s else 0
    return np.sort(rng.uniform(t0_s, t1_s, n))


class PiecewisePoisson(ArrivalProcess):
    """Poisson whose rate is ``rates_rps[i]`` in window i (each ``window_s`` long).

    Past the last window the last rate holds. Zero rates are allowed (a silent window).
    """

    def __init__(self, rates_rps: Sequence[float], window_s: float, seed: int = 0) -> None:
        if len(rates_rps) == 0:
            raise InvalidArgument("rates_rps", "no rates given", "one rate per window, >= 0")
        self.rates_rps = [validation.non_negative(r, f"rates_rps[{i}]", ">= 0") for i, r in enumerate(rates_rps)]
        if not any(self.rates_rps):
            raise InvalidArgument("rates_rps", "every rate is zero", "at least one rate > 0")
        self.window_s = validation.positive(window_s, "window_s", "> 0")
        self.seed = seed

    @classmethod
    def from_file(cls, path: str | pathlib.Path, window_s: float, column: str = "rate_rps",
                  seed: int = 0) -> PiecewisePoisson:
        """Rates from a file: one number per line, or a CSV with a ``column`` header."""
        return cls(_read_column(pathlib.Path(path), column), window_s, seed)

    @property
    def mean_rate_rps(self) -> float:
        return float(np.mean(self.rates_rps))

    def rate_at(self, t_s: float) -> float:
        return self.rates_rps[min(int(t_s // self.window_s), len(self.rates_rps) - 1)]

    def times_s(self, horizon_s: float) -> np.ndarray:
        h = _horizon(horizon_s)
        rng = np.random.default_rng(self.seed)
        parts, i = [], 0
        while i * self.window_s < h:
            t0 = i * self.window_s
            parts.append(_poisson_between(rng, self.rate_at(t0), t0, min(t0 + self.window_s, h)))
            i += 1
        return np.concatenate(parts) if parts else np.empty(0)

    def describe(self) -> str:
        return f"PiecewisePoisson({len(self.rates_rps)} windows of {self.window_s:g} s, mean {self.mean_rate_rps:g} rps)"


class MMPP(ArrivalProcess):
    """Two-state Markov-modulated Poisson process: bursts at ``rates_rps[0]``, lulls at ``rates_rps[1]``.

    The state dwells an exponential time of mean ``mean_dwell_s[state]`` and then flips; the
    first state is drawn from the stationary distribution. Counts per window are
    over-dispersed (variance > mean), unlike Poisson's.
    """

    def __init__(self, rates_rps: tuple[float, float], mean_dwell_s: tuple[float, float], seed: int = 0) -> None:
        if len(rates_rps) != 2 or len(mean_dwell_s) != 2:
            raise InvalidArgument("rates_rps", "a two-state MMPP needs two rates and two dwell times",
                                  "(burst, lull) pairs")
        self.rates_rps = tuple(validation.non_negative(r, f"rates_rps[{i}]", ">= 0") for i, r in enumerate(rates_rps))
        self.mean_dwell_s = tuple(validation.positive(d, f"mean_dwell_s[{i}]", "> 0") for i, d in enumerate(mean_dwell_s))
        if not any(self.rates_rps):
            raise InvalidArgument("rates_rps", "both rates are zero", "at least one rate > 0")
        self.seed = seed

    @classmethod
    def on_off(cls, rate_on_rps: float, mean_on_s: float, mean_off_s: float, seed: int = 0) -> MMPP:
        """Bursts at ``rate_on_rps`` separated by silences."""
        return cls((rate_on_rps, 0.0), (mean_on_s, mean_off_s), seed)

    @property
    def mean_rate_rps(self) -> float:
        (r0, r1), (d0, d1) = self.rates_rps, self.mean_dwell_s
        return (r0 * d0 + r1 * d1) / (d0 + d1)

    def times_s(self, horizon_s: float) -> np.ndarray:
        h = _horizon(horizon_s)
        rng = np.random.default_rng(self.seed)
        d0, d1 = self.mean_dwell_s
        state = 0 if rng.random() < d0 / (d0 + d1) else 1
        t, parts = 0.0, []
        while t < h:
            end = min(t + rng.exponential(self.mean_dwell_s[state]), h)
            parts.append(_poisson_between(rng, self.rates_rps[state], t, end))
            t, state = end, 1 - state
        return np.concatenate(parts) if parts else np.empty(0)

    def describe(self) -> str:
        return (f"MMPP({self.rates_rps[0]:g}/{self.rates_rps[1]:g} rps, dwell "
                f"{self.mean_dwell_s[0]:g}/{self.mean_dwell_s[1]:g} s, mean {self.mean_rate_rps:.3g} rps)")


class Replay(ArrivalProcess):
    """A recorded trace: the given instants (seconds), sorted, cut at the horizon. Exact."""

    def __init__(self, times_s: Sequence[float] | np.ndarray, name: str = "trace") -> None:
        t = np.asarray(times_s, dtype=float).ravel()
        if t.size and (not np.all(np.isfinite(t)) or t.min() < 0):
            raise InvalidArgument("times_s", "arrival instants must be finite and >= 0", ">= 0 seconds")
        self._times = np.sort(t)
        self.name = name

    @classmethod
    def from_file(cls, path: str | pathlib.Path, column: str | None = None, unit: str = "s",
                  start_at_zero: bool = True, time_scale: float = 1.0) -> Replay:
        """Timestamps from ``path``: one per line, or a CSV column (``column``; default the first of
        ``arrival_s``, ``timestamp``, ``time_s``, ``t`` present, else the first column).

        ``unit``: ``"s"`` or ``"ms"``. ``start_at_zero`` shifts the first request to t = 0
        (traces carry wall-clock stamps). ``time_scale`` stretches (> 1) or compresses (< 1) time,
        i.e. divides the rate by it.
        """
        p = pathlib.Path(path)
        if unit not in ("s", "ms"):
            raise InvalidArgument("unit", f"unknown time unit {unit!r}", "s, ms")
        values = np.asarray(_read_column(p, column), dtype=float)
        if unit == "ms":
            values = values / 1000.0
        if start_at_zero and values.size:
            values = values - values.min()
        return cls(values * validation.positive(time_scale, "time_scale", "> 0"), name=p.name)

    @property
    def mean_rate_rps(self) -> float:
        if self._times.size < 2:
            return float(self._times.size)
        return (self._times.size - 1) / float(self._times[-1] - self._times[0])

    def times_s(self, horizon_s: float) -> np.ndarray:
        h = _horizon(horizon_s)
        return self._times[self._times < h].copy()

    def describe(self) -> str:
        return f"Replay({self.name}, {self._times.size} requests)"


# --------------------------------------------------------------------------- files and statistics


def _read_column(path: pathlib.Path, column: str | None) -> list[float]:
    if not path.is_file():
        raise InvalidArgument("path", f"no such file {str(path)!r}", "an existing text or CSV file")
    lines = [ln for ln in path.read_text().splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    if not lines:
        return []
    first = lines[0].split(",")[0].strip()
    try:
        float(first)
        has_header = False
    except ValueError:
        has_header = True
    if not has_header:  # plain numbers, one per line (first column if there are commas)
        rows, col = [ln.split(",") for ln in lines], 0
    else:
        reader = csv.reader(lines)
        header = [h.strip() for h in next(reader)]
        rows = list(reader)
        wanted = [column] if column else ["arrival_s", "timestamp", "time_s", "t", "rate_rps"]
        found = next((header.index(c) for c in wanted if c in header), None if column else 0)
        if found is None:
            raise InvalidArgument("column", f"{column!r} is not a column of {path.name}", ", ".join(header))
        col = found
    out = []
    for i, row in enumerate(rows, start=2 if has_header else 1):
        try:
            out.append(float(row[col]))
        except (ValueError, IndexError):
            raise InvalidArgument(f"{path.name}:{i}", f"not a number: {row!r}", "numbers") from None
    return out


def write_trace(path: str | pathlib.Path, times_s: Sequence[float] | np.ndarray) -> pathlib.Path:
    """Write arrival instants as a one-column CSV (``arrival_s``) that :meth:`Replay.from_file` reads back exactly."""
    p = pathlib.Path(path)
    p.write_text("arrival_s\n" + "".join(f"{float(t)!r}\n" for t in times_s))
    return p


def counts_per_window(times_s: np.ndarray, horizon_s: float, window_s: float) -> np.ndarray:
    """Number of arrivals in each ``window_s`` window of ``[0, horizon_s)``."""
    n = int(math.floor(_horizon(horizon_s) / validation.positive(window_s, "window_s", "> 0")))
    return np.histogram(times_s, bins=n, range=(0.0, n * window_s))[0]


def index_of_dispersion(times_s: np.ndarray, horizon_s: float, window_s: float) -> float:
    """Variance / mean of counts per window: ≈ 1 for Poisson, > 1 for bursty arrivals."""
    c = counts_per_window(times_s, horizon_s, window_s)
    return float(c.var() / c.mean()) if c.mean() > 0 else float("nan")
