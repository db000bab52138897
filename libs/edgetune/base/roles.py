"""What a workload does on a device: train or infer."""

from __future__ import annotations

from enum import Enum

from edgetune.errors import InvalidArgument


class Role(str, Enum):  # noqa: UP042 - str() and format() of members are relied on as-is
    TRAIN = "train"
    INFER = "infer"

    @classmethod
    def parse(cls, value: str | Role) -> Role:
        try:
            return cls(value)
        except ValueError:
            raise InvalidArgument("role", f"unknown role {value!r}", "train, infer") from None
