"""Estimator model ids: the grammar, one place.

A stored model is a versioned store blob keyed by (device, workload, role, method); its id is
those parts joined by ``/`` (``orin-agx/resnet18/train/nn``) unless whoever fits it names its own.
``<id>@<version>`` names one version, a bare id the latest (every fit or transfer to the same id
adds a version). :class:`ModelId` is such an id parsed; a model *handle* (what a tuner holds) is
:class:`edgetune.tuning.protocols.ModelRef`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from edgetune import validation
from edgetune.errors import InvalidArgument

#: device / workload / role / method (each an identifier) and @version.
MAX_MODEL_ID_LENGTH = 4 * validation.MAX_IDENTIFIER_LENGTH + 24
ID_PART_CHARS = "letters, digits, . _ + -"
_ID_PART = re.compile(r"^[A-Za-z0-9._+\-]+$")


@dataclass(frozen=True)
class ModelId:
    """A model id split into store key parts, with the version asked for (None: the latest)."""

    parts: tuple[str, ...]
    version: int | None = None

    @property
    def name(self) -> str:
        """The id without a version (``orin-agx/resnet18/train/nn``)."""
        return "/".join(self.parts)

    def versioned(self, version: int) -> str:
        return f"{self.name}@{version}"


def default_model_id(device: str, workload: str, role: str, method: str) -> str:
    return "/".join((device, workload, role, method))


def parse_model_id(text: str, field: str = "model_id", *, allow_version: bool = True) -> ModelId:
    """``a/b/c[@version]`` -> ModelId; parts are non-empty ``[A-Za-z0-9._+-]`` words."""
    allowed = "parts of letters, digits, . _ + - joined by /, optionally @<version>"
    if not text:
        raise InvalidArgument(field, "is empty", allowed)
    if len(text) > MAX_MODEL_ID_LENGTH:
        raise InvalidArgument(field, f"has {len(text)} characters", f"at most {MAX_MODEL_ID_LENGTH}")
    base, at, version_text = text.partition("@")
    version = None
    if at:
        if not allow_version:
            raise InvalidArgument(field, f"{text!r}: a new model's id takes no @version (the store assigns it)",
                                  allowed.replace(", optionally @<version>", ""))
        if not version_text.isdigit() or int(version_text) < 1:
            raise InvalidArgument(field, f"{text!r} has a bad version {version_text!r}", "@1, @2, ...")
        version = int(version_text)
    parts = tuple(base.split("/"))
    bad = next((p for p in parts if not _ID_PART.match(p)), None)
    if bad is not None:
        raise InvalidArgument(field, f"{validation.shown(text)} has a bad part {validation.shown(bad)}", allowed)
    return ModelId(parts, version)


def id_part(value: str, field: str) -> str:
    """A device / workload name used as a model id part."""
    validation.identifier(value, field)
    if not _ID_PART.match(value):
        raise InvalidArgument(field, f"{value!r} has characters a model id cannot hold", ID_PART_CHARS)
    return value
