"""A workload reference: a zoo name, or a user's ``MODULE:FUNCTION`` (its grammar and its id, in one place).

A name without ``:`` is a zoo model or a workload id; ``MODULE:FUNCTION`` names a function that
returns ``(model, make_batch, loss_fn)`` (:mod:`edgetune.workloads.user` loads and checks it).

Code has **one id formula**, :func:`workload_id`: ``NAME-HASH``, where NAME is a spec's last module
component and function (``pkg.models:make`` -> ``models.make``) or a plain name as given (the
online tuner's class name), and HASH the :data:`HASH_CHARS` hex digits of the model's structure
(:func:`edgetune.workloads.user.structure_hash`: torch, so it is computed where the code is loaded).
The CLI, an agent (``devices.workloads.resolve_workload``), a TuningJob's nodes and the online tuner
all name a workload from code by it, so their measurements and models match up.

Only the process that imports the code knows the hash: a coordinator holds a :class:`WorkloadRef`
whose id is *pending* until the node's first measurement reports it (:meth:`WorkloadRef.resolve`).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from edgetune import validation
from edgetune.errors import InvalidArgument

#: The agent's ``--workload-path`` setting: directories separated by ``os.pathsep``.
WORKLOAD_PATH_ENV = "EDGETUNE_WORKLOAD_PATH"


def split_workload_path(text: str) -> list[Path]:
    """``--workload-path`` / ``EDGETUNE_WORKLOAD_PATH``: directories separated by ``os.pathsep``, blanks dropped."""
    return [Path(p.strip()) for p in text.split(os.pathsep) if p.strip()]


SPEC_ALLOWED = "MODULE:FUNCTION, e.g. mypkg.models:make, FUNCTION() returning (model, make_batch, loss_fn)"
#: Dotted Python module name and a function name (no attribute paths, no arguments).
_SPEC_RE = re.compile(r"^(?P<module>[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*):(?P<function>[A-Za-z_][A-Za-z0-9_]*)$")
#: Longest spec accepted (an id is the spec's name plus ``-`` and the hash: it must stay an identifier).
MAX_SPEC_LENGTH = 100
#: Hex digits of the structure hash in a workload id.
HASH_CHARS = 10
_HASH_RE = re.compile(rf"^[0-9a-f]{{{HASH_CHARS}}}$")


def parse_spec(spec: object) -> tuple[str, str]:
    """``"pkg.mod:make"`` → ``("pkg.mod", "make")``, or ``InvalidArgument("workload")``."""
    if not isinstance(spec, str):
        raise InvalidArgument("workload", f"{spec!r} is not a string", SPEC_ALLOWED)
    if len(spec) > MAX_SPEC_LENGTH:
        raise InvalidArgument("workload", f"{spec[:40]!r}... has {len(spec)} characters (at most {MAX_SPEC_LENGTH})",
                              SPEC_ALLOWED)
    m = _SPEC_RE.match(spec)
    if m is None:
        raise InvalidArgument("workload", f"{spec!r} is not MODULE:FUNCTION", SPEC_ALLOWED)
    return m["module"], m["function"]


def is_user_workload(name: object) -> bool:
    """Whether a workload name is a ``MODULE:FUNCTION`` entry (zoo names and workload ids have no ``:``)."""
    return isinstance(name, str) and ":" in name


def id_name(source: str) -> str:
    """The name part of a workload id: ``pkg.models:make`` -> ``models.make`` (the module's last
    component: the same file imported as ``pkg.models`` from PYTHONPATH or as ``models`` from an
    agent's workload path is one workload); any other name as it is."""
    if is_user_workload(source):
        module, function = parse_spec(source)
        return f"{module.rsplit('.', 1)[-1]}.{function}"
    return validation.identifier(source, "workload")


def workload_id(source: str, structure_hash: str) -> str:
    """The id of a workload from code: ``NAME-HASH`` (module docs); ``source`` a ``MODULE:FUNCTION``
    or a plain name, ``structure_hash`` its model's :data:`HASH_CHARS` hex digits."""
    if not isinstance(structure_hash, str) or not _HASH_RE.match(structure_hash):
        raise InvalidArgument("structure_hash", f"{structure_hash!r}", f"{HASH_CHARS} lowercase hex digits")
    return f"{id_name(source)}-{structure_hash}"


@dataclass(frozen=True)
class WorkloadRef:
    """A workload as a job, a request or a tuner names it (``name``) and the id its measurements are
    recorded under (``id``).

    A zoo name (or an id) is its own id. A ``MODULE:FUNCTION`` is *pending* (``id`` None) until the
    code is loaded where it runs and the id reported back: :meth:`resolve` sets it once, and refuses
    an id that is not this spec's or that differs from the one already resolved (the node's code
    changed half-way: its later measurements describe another model).
    """

    name: str
    id: str | None

    @classmethod
    def parse(cls, name: str, field: str = "workload") -> WorkloadRef:
        """``name`` as a reference; a ``MODULE:FUNCTION`` is checked for its form only
        (``InvalidArgument(field)``): it is imported where it runs, never here."""
        if is_user_workload(name):
            try:
                parse_spec(name)
            except InvalidArgument as exc:
                raise exc.renamed(field) from None
            return cls(name, None)
        return cls(name, name)

    @property
    def is_user(self) -> bool:
        """A ``MODULE:FUNCTION`` (its id carries the structure hash)."""
        return is_user_workload(self.name)

    @property
    def resolved(self) -> bool:
        """Whether the id is known (always for a zoo name; for user code once it was loaded)."""
        return self.id is not None

    @property
    def recorded_as(self) -> str:
        """What its measurements are recorded under: the id, or the name while the id is pending."""
        return self.id if self.id is not None else self.name

    def resolve(self, reported: str, field: str = "workload") -> WorkloadRef:
        """This reference with the id ``reported`` by the process that loaded the code (itself when
        already resolved to it); InvalidArgument(field) for an id of other code."""
        if self.id is not None:
            if reported != self.id:
                raise InvalidArgument(field, f"{self.name} was measured as {self.id}, now as {reported}: "
                                             "its code changed", f"one {self.name} for the whole run")
            return self
        if not reported.startswith(f"{id_name(self.name)}-") or not _HASH_RE.match(reported.rsplit("-", 1)[1]):
            raise InvalidArgument(field, f"{reported!r} is not an id of {self.name}",
                                  f"{id_name(self.name)}-HASH ({HASH_CHARS} hex digits)")
        return WorkloadRef(self.name, reported)
