"""Errors that name the offending field and what is allowed.

Every layer raises these for bad input; the CLI turns them into exit code 2 and the
services into INVALID_ARGUMENT / FAILED_PRECONDITION / NOT_FOUND, so a user never sees a
traceback for a mistake in what they asked.
"""

from __future__ import annotations

#: Longest message or ``allowed`` text of an error (and, on the wire, of a status's details: see
#: ``edgetune.services.common.errors``).
MAX_MESSAGE_CHARS = 1024


def _capped(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters, saying how many were left out."""
    text = str(text)
    if len(text) <= limit:
        return text
    keep = max(0, limit - 40)  # room for the note, so the whole stays within ``limit``
    return f"{text[:keep]}… ({len(text) - keep} more characters)"


def capped(text: str, limit: int = MAX_MESSAGE_CHARS) -> str:
    """A message cut to ``limit`` characters (what a status's details or a log line may carry)."""
    return _capped(text, limit)


class EdgetuneError(Exception):
    """Base class of every error edgetune raises on purpose."""


class InvalidArgument(EdgetuneError, ValueError):
    """A request field is out of range or malformed.

    ``field`` names the field (``"gpu_mhz"``, ``"batch_size"``, ``"profiles.csv:12:time_ms"``),
    ``allowed`` says what would have been accepted.
    """

    def __init__(self, field: str, message: str, allowed: str | None = None) -> None:
        # Each part capped: a message must never echo a whole oversized value (a 2 MiB node id
        # in the status details overflows gRPC's metadata and the caller sees no message at all).
        self.field = _capped(field, 200)
        self.message = _capped(message, MAX_MESSAGE_CHARS)
        self.allowed = None if allowed is None else _capped(allowed, MAX_MESSAGE_CHARS)
        field, message, allowed = self.field, self.message, self.allowed
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
