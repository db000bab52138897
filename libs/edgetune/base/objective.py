"""What a selection minimises: :class:`Objective`, one enum for every spelling of it.

The value is the selectors' name, which the CLI takes (``--objective time``) and prints. The other
spellings are parsed where they come in: a job file's ``min-time`` (:meth:`Objective.from_job_name`,
:attr:`Objective.job_name`), the wire's ``OBJECTIVE_MIN_TIME`` and ``TUNING_OBJECTIVE_MIN_TIME``
(:mod:`edgetune.proto.serde.optimizer`, :mod:`edgetune.proto.serde.tuning`).
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import StrEnum

from edgetune.errors import InvalidArgument


class Objective(StrEnum):
    """Least time within the power budget, least power within the time budget, or least energy
    (time × power) within whichever budgets are given."""

    MIN_TIME = "time"
    MIN_POWER = "power"
    MIN_ENERGY = "energy"

    @property
    def job_name(self) -> str:
        """The job file's spelling (``min-time``), as a TuningJob is stored too."""
        return f"min-{self.value}"

    @classmethod
    def parse(cls, value: object, field: str = "objective") -> Objective:
        """The objective a selector's name (``time``) or an :class:`Objective` says; InvalidArgument
        naming ``field`` otherwise."""
        if isinstance(value, cls):
            return value
        for objective in cls:
            if value == objective.value:
                return objective
        raise InvalidArgument(field, f"unknown objective {value!r}", ", ".join(o.value for o in cls))

    @classmethod
    def from_job_name(cls, value: object, field: str = "objective",
                      allowed: Iterable[Objective] | None = None) -> Objective:
        """The objective a job file's name (``min-time``) says, one of ``allowed`` (default:
        :data:`JOB_OBJECTIVES`)."""
        choices = tuple(JOB_OBJECTIVES if allowed is None else allowed)
        for objective in choices:
            if value == objective.job_name or value is objective:
                return objective
        raise InvalidArgument(field, f"{value!r}", ", ".join(o.job_name for o in choices))


#: The objectives a TuningJob may ask for (``min-energy`` with a time budget).
JOB_OBJECTIVES = (Objective.MIN_TIME, Objective.MIN_ENERGY)
