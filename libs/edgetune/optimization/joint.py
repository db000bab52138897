"""Joint batch size and power-mode selection under a power cap (Ahmed et al., Algorithm 1).

Inputs are two small tables:

- the **LUT**: one row per profiled (batch size, mode) with ``time_s``, the time to process
  the same number of samples s for every row, and ``power_w`` (the profiled peak power);
- the **batch efficiency**: per batch size, ``passes_to_target`` = how many s-sample passes
  training with that batch size needs to reach the target accuracy (``inf`` = never).

The time to target is ``TT(b, m) = time_s(b, m) × passes_to_target(b)``. Because passes do
not depend on the mode, Algorithm 1 is: per batch size, the feasible modes under the cap
(``power_w < cap``: the profiled peak power strictly under the cap, as the paper's set C is
defined; :func:`under_cap` is that one rule), the fastest of them (the candidate set C of the paper), then the
argmin of TT over C. Using passes normalised by their maximum (the paper's ``r``) gives the
same argmin; TT is reported in seconds with the passes as given.

The baselines of the paper, for experiments:

- :func:`baseline_largest_batch` (Baseline 1): the largest batch size with a feasible mode,
  at its fastest feasible mode (the highest frequency the cap allows);
- :func:`baseline_best_r` (Baseline 2): at that same mode, the batch size with the least
  passes (argmin r) among those whose row at that mode fits the cap;
- :func:`baseline_mode`: the fixed mode the paper gives both baselines per cap, by its rule
  (the fastest mode at which every model and batch size profiled fits the cap);
- :func:`oracle_select`: Algorithm 1 with the true passes of the target dataset.

Ties everywhere: less time to target, then lower power, then LUT order.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from edgetune import validation
from edgetune.base.records import BatchEfficiency
from edgetune.errors import InvalidArgument


@dataclass(frozen=True)
class JointLUT:
    """Profiled (batch size, mode) rows: parallel arrays in file order."""

    batch_size: np.ndarray
    mode: np.ndarray  # opaque ids, str
    time_s: np.ndarray
    power_w: np.ndarray

    def __post_init__(self) -> None:
        b = np.asarray(self.batch_size, dtype=np.int64).ravel()
        n = b.size
        object.__setattr__(self, "batch_size", b)
        object.__setattr__(self, "mode", np.asarray([str(m) for m in np.asarray(self.mode, dtype=object).ravel()],
                                                    dtype=object))
        for name in ("time_s", "power_w"):
            arr = np.asarray(getattr(self, name), dtype=float).ravel()
            if arr.size != n or self.mode.size != n:
                raise InvalidArgument(name, f"has {arr.size} values, expected {n}")
            if n and (~np.isfinite(arr) | (arr < 0)).any():
                raise InvalidArgument(name, "must be finite and non-negative", ">= 0")
            object.__setattr__(self, name, arr)
        if n and (b <= 0).any():
            raise InvalidArgument("batch_size", "must be positive", "> 0")

    def __len__(self) -> int:
        return int(self.batch_size.size)

    @classmethod
    def from_rows(cls, rows: Sequence[tuple[int, str, float, float]]) -> JointLUT:
        """From ``(batch_size, mode, time_s, power_w)`` tuples."""
        if not rows:
            return cls(np.zeros(0, int), np.zeros(0, object), np.zeros(0), np.zeros(0))
        b, m, t, p = zip(*rows, strict=True)
        return cls(np.asarray(b), np.asarray(m, dtype=object), np.asarray(t), np.asarray(p))


@dataclass(frozen=True)
class JointChoice:
    """A (batch size, mode) decision; ``closest`` set only when infeasible."""

    feasible: bool
    index: int | None = None
    batch_size: int | None = None
    mode: str | None = None
    time_s: float | None = None
    power_w: float | None = None
    passes_to_target: float | None = None
    time_to_target_s: float | None = None
    reason: str | None = None
    closest: int | None = None

    def to_json(self) -> dict:
        """The docs/contract.md object of ``edgetune optimize joint --json``."""
        if not self.feasible:
            return {"feasible": False, "reason": self.reason}
        return {"feasible": True, "batch_size": self.batch_size, "mode": self.mode,
                "time_to_target_s": self.time_to_target_s, "power_w": self.power_w}


def _check_cap(power_cap_w: float | None) -> None:
    validation.optional(validation.power_budget_w, power_cap_w, "power_cap_w")  # None: no cap


def _fits(lut: JointLUT, power_cap_w: float | None) -> np.ndarray:
    _check_cap(power_cap_w)
    if power_cap_w is None:
        return np.ones(len(lut), dtype=bool)
    return under_cap(lut.power_w, power_cap_w)


def under_cap(power_w: np.ndarray | float, power_cap_w: float) -> np.ndarray:
    """The joint method's feasibility rule: peak power strictly under the cap (Ahmed et al.'s set C:
    "the highest frequency whose profiled peak power is under P_max")."""
    return np.asarray(power_w, dtype=float) < power_cap_w


def _argmin(keys: Sequence[np.ndarray], mask: np.ndarray) -> int | None:
    """First index (in LUT order) minimising ``keys`` lexicographically among ``mask``."""
    idx = np.flatnonzero(mask)
    if idx.size == 0:
        return None
    for key in keys:
        k = key[idx]
        idx = idx[k == k.min()]
        if idx.size == 1:
            break
    return int(idx[0])


def _choice(lut: JointLUT, i: int, passes: np.ndarray) -> JointChoice:
    n = float(passes[i])
    tt = float(lut.time_s[i]) * n
    return JointChoice(True, i, int(lut.batch_size[i]), str(lut.mode[i]), float(lut.time_s[i]),
                       float(lut.power_w[i]), n, tt)


def _describe(lut: JointLUT, i: int) -> str:
    return (f"batch size {int(lut.batch_size[i])} at mode {lut.mode[i]!s} "
            f"({lut.time_s[i]:g} s, {lut.power_w[i]:g} W)")


def _infeasible(lut: JointLUT, passes: np.ndarray, fits: np.ndarray, power_cap_w: float | None) -> JointChoice:
    everything = np.ones(len(lut), dtype=bool)
    if len(lut) == 0:
        return JointChoice(False, reason="the LUT has no rows")
    reaches = np.isfinite(passes)
    # closest: least power among the rows that reach the target (else among all rows)
    pool = reaches if reaches.any() else everything
    closest = _argmin((lut.power_w, lut.time_s), pool)
    assert closest is not None  # pool has rows: the LUT is not empty
    if not fits.any():
        # the LUT holds what was profiled (cap-search profiles a few points) and their *peak* power: say
        # so, or this reads as a fact about the device, whose mean power may well fit the cap
        reason = (f"none of the {len(lut)} (batch size, mode) rows of the LUT has power < {power_cap_w:g} W (its "
                  f"power: each profiled point's peak, from --profiles; other modes were not profiled); "
                  f"closest is {_describe(lut, closest)}")
    elif not reaches.any():
        reason = "no batch size in the LUT reaches the target accuracy (passes_to_target empty or inf)"
    else:
        cap = "no cap" if power_cap_w is None else f"power < {power_cap_w:g} W"
        reason = (f"no batch size that fits {cap} reaches the target accuracy; "
                  f"closest is {_describe(lut, closest)}")
    return JointChoice(False, reason=reason, closest=closest)


def candidate_set(lut: JointLUT, power_cap_w: float | None) -> dict[int, int]:
    """Per batch size, the LUT row of its fastest mode within the cap (the paper's set C)."""
    fits = _fits(lut, power_cap_w)
    out: dict[int, int] = {}
    for b in np.unique(lut.batch_size[fits]):
        i = _argmin((lut.time_s, lut.power_w), fits & (lut.batch_size == b))
        assert i is not None  # b is the batch size of a fitting row
        out[int(b)] = i
    return out


def joint_select(lut: JointLUT, efficiency: BatchEfficiency, power_cap_w: float | None) -> JointChoice:
    """Algorithm 1: argmin over (b, m) with ``power_w < cap`` of ``time_s × passes_to_target(b)``."""
    fits = _fits(lut, power_cap_w)
    passes = efficiency.passes(lut.batch_size)
    tt = lut.time_s * passes  # inf where the target is never reached
    ok = fits & np.isfinite(tt)
    i = _argmin((tt, lut.power_w), ok)
    if i is None:
        return _infeasible(lut, passes, fits, power_cap_w)
    return _choice(lut, i, passes)


def oracle_select(lut: JointLUT, true_efficiency: BatchEfficiency, power_cap_w: float | None) -> JointChoice:
    """The fastest choice in hindsight: Algorithm 1 with the target dataset's true passes."""
    return joint_select(lut, true_efficiency, power_cap_w)


def baseline_largest_batch(lut: JointLUT, efficiency: BatchEfficiency, power_cap_w: float | None) -> JointChoice:
    """Baseline 1: the largest batch size with a mode within the cap, at its fastest such mode.

    Its time to target uses ``efficiency`` (pass the true passes to score it); a batch size
    that never reaches the target is still the baseline's choice, with ``time_to_target_s=inf``.
    """
    fits = _fits(lut, power_cap_w)
    passes = efficiency.passes(lut.batch_size)
    if not fits.any():
        return _infeasible(lut, passes, fits, power_cap_w)
    b_max = lut.batch_size[fits].max()
    i = _argmin((lut.time_s, lut.power_w), fits & (lut.batch_size == b_max))
    assert i is not None  # b_max is the batch size of a fitting row
    return _choice(lut, i, passes)


def baseline_best_r(lut: JointLUT, efficiency: BatchEfficiency, power_cap_w: float | None,
                    true_efficiency: BatchEfficiency | None = None) -> JointChoice:
    """Baseline 2: Baseline 1's mode, with the batch size of least passes (argmin r) at that mode.

    Only batch sizes whose row at that mode fits the cap compete; ties go to less time.
    ``true_efficiency`` (default ``efficiency``) scores the choice.
    """
    fits = _fits(lut, power_cap_w)
    passes = efficiency.passes(lut.batch_size)
    b1 = baseline_largest_batch(lut, efficiency, power_cap_w)
    if not b1.feasible:
        return b1
    pool = fits & (lut.mode == b1.mode) & np.isfinite(passes)
    i = _argmin((passes, lut.time_s, lut.power_w), pool)
    if i is None:  # no batch size reaches the target at that mode: keep Baseline 1's row
        i = b1.index
    assert i is not None  # a feasible choice has its row
    score = (true_efficiency or efficiency).passes(lut.batch_size)
    return _choice(lut, i, score)


def baseline_mode(luts: Sequence[JointLUT], power_cap_w: float | None) -> str | None:
    """The baselines' fixed mode under a cap, by Ahmed et al.'s rule, or None when no mode qualifies.

    The paper fixes one GPU frequency per power limit, "selecting the frequencies that assure a
    power limit is satisfied irrespective of what model or b is used": here, among the modes
    present in every LUT (one per model), those at which every row fits the cap; of them the
    fastest (least summed ``time_s`` over all rows, i.e. the highest frequency on a frequency
    ladder).
    """
    _check_cap(power_cap_w)
    if not luts:
        raise InvalidArgument("luts", "no LUT given", "one or more LUTs (one per model)")
    modes = set.intersection(*(set(lut.mode.tolist()) for lut in luts))
    best, best_time = None, math.inf
    for mode in sorted(modes):
        rows = [(lut.power_w[lut.mode == mode], lut.time_s[lut.mode == mode]) for lut in luts]
        if power_cap_w is not None and any((~under_cap(p, power_cap_w)).any() for p, _ in rows):
            continue
        total = float(sum(t.sum() for _, t in rows))
        if total < best_time:
            best, best_time = mode, total
    return best


def evaluate(lut: JointLUT, choice: JointChoice, true_efficiency: BatchEfficiency) -> float:
    """True time to target (s) of a feasible choice; inf when its batch size never gets there."""
    if not choice.feasible or choice.index is None:
        return math.inf
    return float(lut.time_s[choice.index]) * float(true_efficiency.passes(lut.batch_size[[choice.index]])[0])
