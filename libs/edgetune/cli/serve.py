"""``edgetune serve``: start one gRPC service in this process.

    edgetune serve profiler|estimator|optimizer|coordinator --port P [--redis URL]
                   [--device SPEC] [--metrics-port N] [--state-dir DIR] [--host H] [...]

Everything after the service name goes to that service's own ``main(argv)``, which parses its
flags (and ``EDGETUNE_<NAME>`` env vars) and serves until SIGTERM / SIGINT;
``edgetune serve profiler --help`` lists them. A service plugs in with one line in
:data:`SERVICES`: its name and the module holding ``main(argv) -> exit code``.
"""

from __future__ import annotations

import importlib

import click

from edgetune.cli.errors import reports_errors
from edgetune.errors import InvalidArgument

#: Service name -> module with ``main(argv: list[str]) -> int``; ``None``: not available yet.
SERVICES: dict[str, str | None] = {
    "profiler": "edgetune.services.profiler.server",
    "estimator": "edgetune.services.estimator.server",
    "optimizer": "edgetune.services.optimizer.server",
    "coordinator": "edgetune.services.coordinator.server",
}


class ServiceUnavailable(click.ClickException):
    exit_code = 2


# No click help option: `--help` after the service name belongs to the service's own parser.
@click.command("serve", context_settings={"ignore_unknown_options": True, "allow_extra_args": True,
                                          "help_option_names": []})
@click.argument("service", required=False)
@click.argument("service_args", nargs=-1, type=click.UNPROCESSED)
@click.pass_context
@reports_errors
def command(ctx: click.Context, service: str | None, service_args: tuple[str, ...]) -> None:
    """Start a service: profiler, estimator, optimizer or coordinator.

    \b
    edgetune serve SERVICE --port P [--redis URL] [--metrics-port N] [--host H] ...
    Common flags: --port, --host, --metrics-port (0: none), --grace-s, --log-level.
    The profiler also takes --device SPEC (sim:<model>, sysfs[:ROOT], replay:FILE.csv),
    --redis URL (embedded by default; none: no store), --state-dir DIR, --node-id ID.
    `edgetune serve SERVICE --help` lists all of a service's flags.
    """
    if service in (None, "-h", "--help"):
        click.echo(ctx.get_help())
        return
    if service not in SERVICES:
        raise InvalidArgument("SERVICE", f"unknown service {service!r}", ", ".join(SERVICES))
    module_name = SERVICES[service]
    if module_name is None:
        available = ", ".join(n for n, m in SERVICES.items() if m)
        raise ServiceUnavailable(f"the {service} service is not available yet in this version of edgetune "
                                 f"(available: {available})")
    main = importlib.import_module(module_name).main
    try:
        code = main(list(service_args))
    except SystemExit as exc:  # argparse's --help (0) and usage errors (2)
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
    if code:
        raise SystemExit(code)  # the service already said why
