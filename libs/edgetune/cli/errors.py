"""Bad input on the command line: one mapping for every command.

Every command reports an :class:`edgetune.errors.EdgetuneError` the same way, on stderr with
exit code 2 and no traceback::

    Error: --power-budget: 0 is not > 0 (allowed: a finite number of watts > 0)

i.e. ``Error: FIELD: message (allowed: ...)`` from the error's own fields. Three ways in, all
ending in :class:`InputError`:

- :func:`reports_errors` decorates a command's function (errors raised while it runs);
- :func:`checked` makes an option callback of a :mod:`edgetune.validation` rule (errors while
  click parses the options, before the function runs);
- the root group (``edgetune.cli``) maps whatever a command let through, so a command run as
  ``edgetune …`` is covered even without the decorator.

:func:`options_named` renames a library field (``power_budget_w``) to the option that set it
(``--power-budget``), keeping message and allowed text.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, TypeVar

import click

from edgetune.errors import EdgetuneError, InvalidArgument

F = TypeVar("F", bound=Callable[..., Any])
T = TypeVar("T")


class InputError(click.ClickException):
    """Bad input: exit 2 with ``Error: <message>``, whether run through ``edgetune.cli.main`` or click."""

    exit_code = 2

    def format_message(self) -> str:
        return self.message


def input_error(exc: EdgetuneError) -> InputError:
    """The CLI's form of an edgetune error (``FIELD: message (allowed: ...)`` for InvalidArgument)."""
    return InputError(str(exc))


def reports_errors(fn: F) -> F:
    """Turn :class:`EdgetuneError` raised by a command into :class:`InputError` (exit 2, no traceback)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except EdgetuneError as exc:
            raise input_error(exc) from None

    return wrapper  # type: ignore[return-value]


def checked(rule: Callable[[Any, str], T]) -> Callable[[click.Context, click.Parameter, Any], T | None]:
    """A click callback applying a validation rule to an option, named by its flag (``--seed``).

    ``@click.option("--seed", type=int, callback=checked(validation.seed))``; None (unset) passes.
    """

    def callback(ctx: click.Context, param: click.Parameter, value: Any) -> T | None:
        if value is None:
            return None
        name = max(param.opts, key=len) if param.opts else str(param.name)
        try:
            return rule(value, name)
        except EdgetuneError as exc:
            raise input_error(exc) from None

    return callback


@contextmanager
def options_named(options: Mapping[str, str]) -> Iterator[None]:
    """Re-raise an InvalidArgument about a library field as one about the option that set it."""
    try:
        yield
    except InvalidArgument as exc:
        option = options.get(exc.field)
        if option is None:
            raise
        raise exc.renamed(option) from None
