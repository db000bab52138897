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
from edgetune.cli.errors import input_error
from edgetune.errors import EdgetuneError

#: Commands, each in its own module ``edgetune.cli.<name>`` (exposing ``command``), with the
#: one-line help shown by ``edgetune --help``. Modules are imported only when their command
#: runs: some pull in torch or scikit-learn, and ``edgetune modes`` should not wait for them.
COMMANDS: dict[str, str] = {
    "modes": "Write a device's power modes (full space or a grid).",
    "device": "Show what a device backend discovers.",
    "profile": "Profile modes on a device with the measurement protocol.",
    "estimate": "Fit, transfer and apply time / power predictors.",
    "optimize": "Select modes (and batch sizes) from tables.",
    "search": "Run a search strategy against a recorded table.",
    "tune": "Profile on the predicted front, transfer and select: one node, one command.",
    "plan": "Plan one federated round across nodes.",
    "serve": "Start one of the gRPC services.",
    "up": "Run the whole control plane on this machine with simulated nodes (until Ctrl-C).",
    "job": "Submit, get, list, watch, cancel tuning jobs on a coordinator, and show their events.",
    "node": "List a coordinator's nodes, show one, set a node's power budget.",
    "site": "Set the site's power budget on a coordinator.",
}
COMMAND_MODULES = tuple(COMMANDS)


class LazyGroup(click.Group):
    def invoke(self, ctx: click.Context):
        # One mapping for every command, its option callbacks included (they run in here, when
        # the subcommand's context is made): an edgetune error is "Error: FIELD: message", exit 2.
        try:
            return super().invoke(ctx)
        except EdgetuneError as exc:
            raise input_error(exc) from None

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name in self.commands:  # added directly (tests, plugins)
            return self.commands[name]
        if name not in COMMANDS:
            return None
        return importlib.import_module(f"edgetune.cli.{name}").command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(name, COMMANDS.get(name) or self.commands[name].get_short_help_str())
                for name in [*COMMANDS, *[n for n in self.commands if n not in COMMANDS]]]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="edgetune")
def cli() -> None:
    """Pick power modes and batch sizes for DNN work on Jetson edge clusters."""


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
    except EdgetuneError as exc:  # raised outside a command (e.g. while the group parses)
        error = input_error(exc)
        error.show()
        return error.exit_code
    except click.exceptions.Exit as exc:
        return exc.exit_code
    return rv if isinstance(rv, int) else 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
