"""The ``edgetune`` command: one click group, one module per command (``cli/<command>.py``).

Each command module exposes a click command (or group) named ``command``; this root only
registers them and turns :class:`edgetune.errors.EdgetuneError` into exit code 2 with the
message (never a traceback).
"""

from __future__ import annotations

import importlib
import sys

import click

from edgetune import __version__
from edgetune.errors import EdgetuneError

#: Command modules under edgetune.cli, registered in this order.
COMMAND_MODULES = ("modes", "device", "profile", "serve", "optimize", "plan")


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="edgetune")
def cli() -> None:
    """Pick power modes and batch sizes for DNN work on Jetson edge clusters."""


for _name in COMMAND_MODULES:
    cli.add_command(importlib.import_module(f"edgetune.cli.{_name}").command)


def main(argv: list[str] | None = None) -> int:
    try:
        # Without standalone mode click *returns* the code of a raised Exit (and a command's
        # return value): an int here is the exit code.
        rv = cli.main(args=argv, prog_name="edgetune", standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        return 130
    except click.exceptions.ClickException as exc:  # usage errors: exit 2 like click does
        exc.show()
        return exc.exit_code
    except EdgetuneError as exc:
        click.echo(f"error: {exc}", err=True)
        return 2
    except click.exceptions.Exit as exc:
        return exc.exit_code
    return rv if isinstance(rv, int) else 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
