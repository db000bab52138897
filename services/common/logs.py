"""Structured logs: one JSON object per line, through the standard ``logging`` module.

``setup_logging("profiler")`` once at start-up; then ordinary ``logging.getLogger(__name__)``
calls. Extra fields go in ``extra=``: ``log.info("applied", extra={"mode": "8c/1344/727/2133"})``
becomes ``{"ts": ..., "level": "info", "service": "profiler", "logger": ..., "msg": "applied",
"mode": "8c/1344/727/2133"}``.
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import IO, Any

# Attributes every LogRecord has; anything else on a record came from `extra=`.
_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime", "taskName"}


class JsonFormatter(logging.Formatter):
    def __init__(self, service: str = "") -> None:
        super().__init__()
        self.service = service

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
        }
        if self.service:
            out["service"] = self.service
        out["logger"] = record.name
        out["msg"] = record.getMessage()
        for key, value in vars(record).items():
            if key not in _STANDARD and not key.startswith("_"):
                out[key] = value
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str, ensure_ascii=False)


def setup_logging(service: str, level: int | str = "INFO", stream: IO[str] | None = None) -> logging.Logger:
    """Send every log record (root logger) as JSON lines to ``stream`` (stderr); return the
    service's logger ``edgetune.<service>``. Calling it again replaces the handler."""
    root = logging.getLogger()
    for handler in list(root.handlers):
        if getattr(handler, "_edgetune_json", False):
            root.removeHandler(handler)
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter(service))
    handler._edgetune_json = True  # type: ignore[attr-defined]
    root.addHandler(handler)
    root.setLevel(level.upper() if isinstance(level, str) else level)
    return logging.getLogger(f"edgetune.{service}")
