"""Errors that name the offending field and what is allowed.

Every layer raises these for bad input; the CLI turns them into exit code 2 and the
services into INVALID_ARGUMENT / FAILED_PRECONDITION / NOT_FOUND, so a user never sees a
traceback for a mistake in what they asked.
"""

from __future__ import annotations


class EdgetuneError(Exception):
    """Base class of every error edgetune raises on purpose."""


class InvalidArgument(EdgetuneError, ValueError):
    """A request field is out of range or malformed.

    ``field`` names the field (``"gpu_mhz"``, ``"batch_size"``, ``"profiles.csv:12:time_ms"``),
    ``allowed`` says what would have been accepted.
    """

    def __init__(self, field: str, message: str, allowed: str | None = None) -> None:
        self.field = field
        self.message = message
        self.allowed = allowed
        text = f"{field}: {message}"
        if allowed:
            text += f" (allowed: {allowed})"
        super().__init__(text)

    def renamed(self, field: str) -> InvalidArgument:
        """The same error about another field (a library's ``gpu_mhz`` → a request's ``modes[3].gpu_mhz``)."""
        return InvalidArgument(field, self.message, self.allowed)

    def prefixed(self, prefix: str, sep: str = ".") -> InvalidArgument:
        """The same error one level down a path: ``gpu_mhz`` under ``modes[3]`` is ``modes[3].gpu_mhz``.

        ``sep`` joins the two (``":"`` for a file position: ``modes.csv:12`` + ``gpu_mhz``); an
        index field (``[2]``) joins without it. ``message`` and ``allowed`` are kept, so nesting
        never goes through ``str(exc)``.
        """
        if not prefix:
            return self.renamed(self.field)
        joiner = "" if self.field.startswith("[") else sep
        return self.renamed(f"{prefix}{joiner}{self.field}")


class FailedPrecondition(EdgetuneError):
    """The request is well formed but the system is not in a state to serve it (busy device, ...)."""


class NotFound(EdgetuneError, KeyError):
    """A named thing (node, model, session, workload) does not exist."""

    def __str__(self) -> str:  # KeyError quotes its argument; we want the plain message
        return str(self.args[0]) if self.args else ""
