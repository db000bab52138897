"""Service settings from flags and the environment: flag > ``EDGETUNE_<NAME>`` > default.

Every service parses its flags with argparse through :func:`add_option`, so an operator can
set anything either way (Helm sets env vars, a developer types flags):

    parser = argparse.ArgumentParser()
    add_server_options(parser, default_port=50051)
    add_option(parser, "redis", "redis://localhost:6379/0", "Redis URL")
    args = parser.parse_args(argv)      # args.port, args.metrics_port, args.redis, ...
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Mapping
from typing import Any, TypeVar
from typing import cast as cast_to

from edgetune.errors import InvalidArgument
from edgetune.identity import ClientSecurity, ServerSecurity

ENV_PREFIX = "EDGETUNE_"
T = TypeVar("T")

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def env_name(name: str) -> str:
    """``metrics-port`` / ``metrics_port`` -> ``EDGETUNE_METRICS_PORT``."""
    return ENV_PREFIX + name.replace("-", "_").upper()


def parse_bool(text: str, field: str = "value") -> bool:
    value = text.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise InvalidArgument(field, f"{text!r} is not a boolean", "1/0, true/false, yes/no, on/off")


def setting(name: str, default: T, cast: Callable[[str], Any] | None = None,
            environ: Mapping[str, str] | None = None) -> T:
    """``EDGETUNE_<NAME>`` cast like ``default`` (or with ``cast``), else ``default``.

    A value that does not cast raises InvalidArgument naming the variable.
    """
    env = os.environ if environ is None else environ
    key = env_name(name)
    if key not in env:
        return default
    raw = env[key]
    convert: Callable[[str], Any]
    if cast is not None:
        convert = cast
    elif isinstance(default, bool):
        convert = lambda s: parse_bool(s, key)  # noqa: E731
    else:
        convert = _cast_like(default)
    try:
        return cast_to(T, convert(raw))
    except InvalidArgument:
        raise
    except (TypeError, ValueError):
        kind = getattr(convert, "__name__", "the expected type")
        raise InvalidArgument(key, f"{raw!r} is not a valid {kind}") from None


def _cast_like(default: object) -> Callable[[str], Any]:
    return str if default is None else default.__class__


def add_option(parser: argparse.ArgumentParser, name: str, default: Any, help: str,
               type: Callable[[str], Any] | None = None, environ: Mapping[str, str] | None = None,
               **kwargs: Any) -> argparse.Action:
    """Add ``--<name>`` whose default is ``EDGETUNE_<NAME>`` when set, else ``default``."""
    if type is None and default is not None and not isinstance(default, bool):
        type = default.__class__
    if isinstance(default, bool):
        type = lambda s: parse_bool(s, f"--{name}")  # noqa: E731
        kwargs.setdefault("nargs", "?")
        kwargs.setdefault("const", True)  # bare `--flag` means true
    # Bools: let setting() parse the env value itself, so its error names the variable.
    value = setting(name, default, None if isinstance(default, bool) else type, environ)
    if type is not None:
        kwargs["type"] = type
    return parser.add_argument(f"--{name.replace('_', '-')}", default=value,
                               help=f"{help} (env {env_name(name)}; default {default!r})", **kwargs)


def add_server_options(parser: argparse.ArgumentParser, default_port: int,
                       environ: Mapping[str, str] | None = None) -> None:
    """The options every service has; :func:`edgetune.services.common.server.build_server`
    takes them as keywords (``**server_kwargs(args)``)."""
    add_option(parser, "host", "", "address to listen on (default: every address when secured or --insecure, "
               "else 127.0.0.1 only)", environ=environ)
    add_option(parser, "port", default_port, "gRPC port (0: any free port)", environ=environ)
    add_option(parser, "metrics_port", 9090, "Prometheus metrics HTTP port (0: no metrics endpoint)",
               environ=environ)
    add_option(parser, "max_workers", 16, "gRPC handler threads", environ=environ)
    add_option(parser, "grace_s", 10.0, "seconds in-flight RPCs get to finish on shutdown", environ=environ)
    add_option(parser, "log_level", "INFO", "log level", environ=environ)
    add_option(parser, "ready_file", "", "once serving, write {service, address, port, metrics_port, pid} "
               "as JSON to this file (for supervisors: independent of the log level)", environ=environ)
    add_option(parser, "health_port", 0, "also serve gRPC health checks alone, in plain text, on this port "
               "(for probes that speak no TLS; 0: none)", environ=environ)
    add_security_options(parser, environ)


def add_security_options(parser: argparse.ArgumentParser, environ: Mapping[str, str] | None = None) -> None:
    """TLS, client certificates, bearer tokens (docs/contract.md, "Identity"); the client side
    (``--tls-ca``, ``--token``) is what this service uses when it calls another."""
    add_option(parser, "tls_cert", "", "serve TLS with this certificate chain (PEM); also this service's client "
               "certificate when it calls another with --tls-ca", environ=environ)
    add_option(parser, "tls_key", "", "private key of --tls-cert (PEM)", environ=environ)
    add_option(parser, "tls_client_ca", "", "require client certificates signed by this CA (PEM): mTLS; the "
               "certificate's CN is the caller, its OU the role", environ=environ)
    add_option(parser, "auth_tokens", "", "bearer tokens file (YAML: tokens: [{token, role, name[, nodes]}]); "
               "callers then need a token or a client certificate", environ=environ)
    add_option(parser, "insecure", False, "listen on every address without TLS or authentication (warns)",
               environ=environ)
    add_option(parser, "tls_ca", "", "CA (PEM) that verifies the services this one calls (turns TLS on for them)",
               environ=environ)
    add_option(parser, "token", "", "bearer token this service sends when it calls another", environ=environ)
    add_option(parser, "token_file", "", "file holding the bearer token this service sends (read again when it "
               "changes: a projected service-account token); instead of --token", environ=environ)
    add_option(parser, "hashed_tokens_only", False, "refuse an --auth-tokens file holding a plain token "
               "(only sha256: digests: what an agent keeps, so it holds nothing replayable)", environ=environ)
    add_option(parser, "agent_jwks", "", "identify agents by their pods' projected service-account tokens "
               "(audience edgetune), verified with the issuer's keys: a JWKS file, an https:// URL, or "
               "'kubernetes' (the API server's /openid/v1/jwks)", environ=environ)
    add_option(parser, "agent_issuer", "", "the iss claim agents' service-account tokens must carry (empty: "
               "any token the keys of --agent-jwks verify)", environ=environ)
    add_option(parser, "agent_service_account", "", "NAMESPACE:NAME[,...] of the agent pods' service accounts: "
               "only their tokens are agents (needed with --agent-jwks)", environ=environ)
    add_option(parser, "tls_server_name", "", "name in this service's own certificate: verifies a replica of it "
               "reached by IP (the coordinator forwarding to its leader)", environ=environ)


def server_security(args: argparse.Namespace) -> ServerSecurity:
    accounts = tuple(a.strip() for a in str(args.agent_service_account or "").split(",") if a.strip())
    return ServerSecurity(tls_cert=args.tls_cert, tls_key=args.tls_key, tls_client_ca=args.tls_client_ca,
                          auth_tokens=args.auth_tokens, insecure=bool(args.insecure),
                          hashed_tokens_only=bool(args.hashed_tokens_only), agent_jwks=args.agent_jwks,
                          agent_issuer=args.agent_issuer, agent_service_accounts=accounts)


def client_security(args: argparse.Namespace) -> ClientSecurity:
    """How this service calls others: TLS when ``--tls-ca`` is given (with its own certificate for
    mTLS), and its ``--token``."""
    tls = bool(args.tls_ca)
    return ClientSecurity(ca=args.tls_ca, cert=args.tls_cert if tls else "", key=args.tls_key if tls else "",
                          token=args.token, server_name=args.tls_server_name, token_file=args.token_file)


def server_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    """build_server keywords from :func:`add_server_options` flags.

    The flag's ``--metrics-port 0`` means "no endpoint"; build_server's ``metrics_port=None``.
    """
    return {
        "host": args.host,
        "port": args.port,
        "metrics_port": args.metrics_port or None,
        "max_workers": args.max_workers,
        "grace_s": args.grace_s,
        "ready_file": args.ready_file or None,
        "security": server_security(args),
        "health_port": args.health_port or None,
    }
