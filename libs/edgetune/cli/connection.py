"""How every CLI command that talks to a coordinator connects: one set of flags, the same everywhere.

    --coordinator HOST:PORT   --tls-ca PEM   --tls-cert PEM --tls-key PEM   --tls-server-name NAME
    --token TOKEN | --token-file FILE       --context NAME

Each flag also comes from an ``EDGETUNE_*`` variable (``EDGETUNE_COORDINATOR``, ``EDGETUNE_TLS_CA``,
``EDGETUNE_TLS_CERT``, ``EDGETUNE_TLS_KEY``, ``EDGETUNE_TLS_SERVER_NAME``, ``EDGETUNE_TOKEN``,
``EDGETUNE_TOKEN_FILE``, ``EDGETUNE_CONTEXT``) and from a context of the config file
(``$EDGETUNE_CONFIG``, default ``~/.config/edgetune/config.yaml``), kubectl-like::

    current-context: lab
    contexts:
      lab:
        coordinator: 10.0.0.5:50051
        tls-ca: ca.pem                 # paths relative to the config file
        tls-cert: alice.pem
        tls-key: alice-key.pem
        token-file: ~/.edgetune/token
      local: {coordinator: 127.0.0.1:50051}

Flags win over variables, variables over the file. A context's keys are exactly ``coordinator``,
``tls-ca``, ``tls-cert``, ``tls-key``, ``tls-server-name``, ``token`` and ``token-file``; anything
else, an unknown context or an unreadable file is an error naming it (exit 2).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar, cast

import click
import yaml

from edgetune.cli.errors import InputError
from edgetune.clients.calls import CallFailed, Status
from edgetune.clients.coordinator import CoordinatorClient
from edgetune.identity import ClientSecurity

F = TypeVar("F", bound=Callable[..., Any])
#: Server answers that mean the request was wrong: exit 2, like a bad option.
INPUT_CODES = (Status.INVALID_ARGUMENT, Status.NOT_FOUND, Status.ALREADY_EXISTS, Status.FAILED_PRECONDITION,
               Status.OUT_OF_RANGE)
UNREACHABLE_CODES = (Status.UNAVAILABLE, Status.DEADLINE_EXCEEDED)
DEFAULT_CONFIG = "~/.config/edgetune/config.yaml"
#: A context's keys, and the flag each stands for.
CONTEXT_KEYS = ("coordinator", "tls-ca", "tls-cert", "tls-key", "tls-server-name", "token", "token-file")
_PATH_KEYS = ("tls-ca", "tls-cert", "tls-key", "token-file")


class ServerError(click.ClickException):
    """The coordinator could not be reached or failed the call: exit 1."""

    exit_code = 1

    def format_message(self) -> str:
        return self.message


@dataclass(frozen=True)
class Connection:
    """Where a command's coordinator is and how to reach it (flags, then variables, then the context)."""

    address: str
    security: ClientSecurity


def config_path() -> Path:
    return Path(os.environ.get("EDGETUNE_CONFIG") or DEFAULT_CONFIG).expanduser()


def load_context(name: str | None, path: Path | None = None) -> dict[str, str]:
    """The named context (None: the file's ``current-context``; no file and no name: none) as
    ``{key: value}`` with its paths made absolute; InputError naming the file and the key."""
    path = path or config_path()
    if not path.exists():
        if name:
            raise InputError(f"--context: {name!r}: no config file {path} (set EDGETUNE_CONFIG or create it)")
        return {}
    try:
        doc = yaml.safe_load(path.read_text()) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise InputError(f"{path}: cannot read it as YAML: {exc}") from None
    if not isinstance(doc, Mapping) or set(doc) - {"current-context", "contexts"}:
        extra = sorted(set(doc) - {"current-context", "contexts"}) if isinstance(doc, Mapping) else [type(doc).__name__]
        raise InputError(f"{path}: unknown key {extra[0]!r} (allowed: current-context, contexts)")
    contexts = doc.get("contexts") or {}
    if not isinstance(contexts, Mapping):
        raise InputError(f"{path}: contexts: a mapping of names to contexts")
    name = name or doc.get("current-context")
    if not name:
        return {}
    if name not in contexts:
        raise InputError(f"--context: {name!r} is not in {path} (allowed: {', '.join(map(str, contexts)) or 'none'})")
    ctx = contexts[name] or {}
    if not isinstance(ctx, Mapping):
        raise InputError(f"{path}: contexts.{name}: a mapping of {', '.join(CONTEXT_KEYS)}")
    for key in ctx:
        if key not in CONTEXT_KEYS:
            raise InputError(f"{path}: contexts.{name}.{key}: unknown key (allowed: {', '.join(CONTEXT_KEYS)})")
    out = {str(k): str(v) for k, v in ctx.items() if v is not None}
    for key in _PATH_KEYS:
        if key in out:
            out[key] = str((path.parent / Path(out[key]).expanduser()).resolve())
    return out


def resolve(*, address: str | None, context: str | None, token: str | None, token_file: str | None,
            tls_ca: str | None, tls_cert: str | None, tls_key: str | None,
            tls_server_name: str | None) -> Connection:
    """Flags and variables (click gives them already merged), then the context for what is still unset."""
    ctx = load_context(context)
    address = address or ctx.get("coordinator")
    if not address:
        raise InputError("--coordinator: no coordinator address (allowed: --coordinator HOST:PORT, "
                         f"EDGETUNE_COORDINATOR, or a context's coordinator in {config_path()})")
    if not token and not token_file:  # a token given by flag or variable replaces the context's
        token, token_file = ctx.get("token"), ctx.get("token-file")
    security = ClientSecurity(ca=tls_ca or ctx.get("tls-ca", ""), cert=tls_cert or ctx.get("tls-cert", ""),
                              key=tls_key or ctx.get("tls-key", ""), token=token or "", token_file=token_file or "",
                              server_name=tls_server_name or ctx.get("tls-server-name", ""))
    return Connection(address, security)


def coordinator_options(fn: F) -> F:
    """The connection flags (module docstring); the command gets ``conn`` (a :class:`Connection`)."""

    command = fn

    @functools.wraps(command)
    def with_connection(*args: Any, address: str | None, context: str | None, token: str | None,
                        token_file: str | None, tls_ca: str | None, tls_cert: str | None, tls_key: str | None,
                        tls_server_name: str | None, **kwargs: Any) -> Any:
        conn = resolve(address=address, context=context, token=token, token_file=token_file, tls_ca=tls_ca,
                       tls_cert=tls_cert, tls_key=tls_key, tls_server_name=tls_server_name)
        return command(*args, conn=conn, **kwargs)

    fn = cast(F, with_connection)
    options = [
        ("--tls-server-name", "tls_server_name", "EDGETUNE_TLS_SERVER_NAME", "NAME",
         "Name the coordinator's certificate carries when the address's host is not it."),
        ("--tls-key", "tls_key", "EDGETUNE_TLS_KEY", "PEM", "Private key of --tls-cert."),
        ("--tls-cert", "tls_cert", "EDGETUNE_TLS_CERT", "PEM", "Client certificate (mTLS)."),
        ("--tls-ca", "tls_ca", "EDGETUNE_TLS_CA", "PEM", "Verify the coordinator's TLS certificate with this CA "
                                                         "(turns TLS on)."),
        ("--token-file", "token_file", "EDGETUNE_TOKEN_FILE", "FILE", "Read the bearer token from this file."),
        ("--token", "token", "EDGETUNE_TOKEN", "TOKEN", "Bearer token."),
        ("--context", "context", "EDGETUNE_CONTEXT", "NAME",
         f"A context of the config file ($EDGETUNE_CONFIG, default {DEFAULT_CONFIG}) for what the flags leave unset."),
        ("--coordinator", "address", "EDGETUNE_COORDINATOR", "HOST:PORT", "Coordinator address."),
    ]
    for flag, name, env, metavar, doc in options:
        fn = click.option(flag, name, envvar=env, default=None, metavar=metavar, help=f"{doc} (env {env})")(fn)
    return fn


def rpc_error(exc: CallFailed, conn: Connection) -> click.ClickException:
    """The CLI's form of a failed call: INVALID_ARGUMENT and the like exit 2 with the server's message;
    UNAVAILABLE (and a deadline passing) exits 1 saying the coordinator is unavailable, with a hint
    when the likely cause is a plain-text client talking to a TLS server."""
    details = exc.details or exc.code.value
    if exc.code in INPUT_CODES:
        return InputError(details)
    if exc.code == Status.UNAVAILABLE and not conn.security.uses_tls and "socket closed" in details.lower():
        return ServerError(f"coordinator {conn.address} unavailable: {details} (the server closed the "
                           "connection: it may serve TLS; pass --tls-ca PEM, EDGETUNE_TLS_CA or a context's tls-ca)")
    if exc.code in UNREACHABLE_CODES:
        return ServerError(f"coordinator {conn.address} unavailable: {details}")
    return ServerError(f"coordinator {conn.address}: {exc.code.value}: {details}")


@contextmanager
def connected(conn: Connection) -> Iterator[CoordinatorClient]:
    client = CoordinatorClient.connect(conn.address, conn.security)  # TLS when asked; every call carries the token
    try:
        yield client
    except CallFailed as exc:
        raise rpc_error(exc, conn) from None
    finally:
        client.close()
