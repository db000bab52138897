"""Problem names → classes, every kind: the three of :mod:`.problems` and :mod:`.multi_infer`'s.

Above both modules, so that reading a saved problem (:func:`problem_from_dict`) knows every
kind without :mod:`.problems` importing the module that extends it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from edgetune.errors import InvalidArgument
from edgetune.optimization.multi_infer import UrgentPlusBatchProblem
from edgetune.optimization.problems import ConcurrentProblem, InferProblem, Problem, TrainProblem

PROBLEMS: dict[str, type[Problem]] = {
    "train": TrainProblem, "infer": InferProblem, "concurrent": ConcurrentProblem,
    UrgentPlusBatchProblem.name: UrgentPlusBatchProblem,
}


def problem_from_dict(d: Mapping[str, Any]) -> Problem:
    """Inverse of :meth:`Problem.to_dict`."""
    kind = d.get("problem")
    cls = PROBLEMS.get(str(kind))
    if cls is None:
        raise InvalidArgument("problem", f"unknown problem {kind!r}", ", ".join(PROBLEMS))
    args = {k: v for k, v in d.items() if k != "problem"}
    return cls(**args)
