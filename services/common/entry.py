"""The ``main(argv)`` every service shares: flags, logs, start, and exit codes.

Bad flags or ``EDGETUNE_*`` values, an unreachable Redis or a busy port exit with code 2 and
a one-line message (never a traceback), so ``edgetune serve`` behaves like the rest of the CLI.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable, Sequence

from edgetune.errors import EdgetuneError
from edgetune.services.common.logs import setup_logging


def run_main(name: str, argv: Sequence[str] | None,
             parse_args: Callable[[Sequence[str] | None], argparse.Namespace],
             start: Callable[[argparse.Namespace], object]) -> int:
    """Parse flags, set up JSON logs for ``name``, run ``start(args)`` (blocking) and map errors to exit 2."""
    try:
        args = parse_args(argv)
    except EdgetuneError as exc:  # a bad EDGETUNE_* value
        print(f"error: {exc}", file=sys.stderr)
        return 2
    setup_logging(name, args.log_level)
    try:
        start(args)
    except (EdgetuneError, OSError) as exc:  # bad flags, busy port, unreachable Redis, unwritable dir
        logging.getLogger(f"edgetune.services.{name}").error("cannot start the %s: %s", name, exc)
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0
