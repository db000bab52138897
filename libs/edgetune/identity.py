"""Who is calling: bearer tokens, TLS certificates and the channels clients open with them.

Servers (``edgetune serve ...``) take :class:`ServerSecurity` (``--tls-cert``, ``--tls-key``,
``--tls-client-ca``, ``--auth-tokens FILE``, ``--insecure``); clients (the CLI, the agent's
link to the coordinator, the coordinator's calls to the estimator and the optimizer) take
:class:`ClientSecurity` (``--tls-ca``, ``--tls-cert``, ``--tls-key``, ``--token``) and open
their channels with :func:`open_channel`.

The token file (YAML)::

    tokens:
      - {token: "s3cret-at-least-16-chars", role: operator, name: alice}
      - {token: "...", role: agent, name: orin-agx-1}             # bound to node orin-agx-1
      - {token: "...", role: agent, name: rack-2, nodes: [n1, n2]} # bound to n1 and n2

A certificate's identity is its subject CN (else its first SAN); its role is its subject OU
when that names a role, else ``viewer``. An agent identity is bound to the node ids it names
(``nodes``, default its ``name``): it registers, heartbeats and watches for those only.
The per-method policy is :mod:`edgetune.services.common.auth`.
"""

from __future__ import annotations

import hmac
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from edgetune.errors import InvalidArgument

VIEWER, OPERATOR, AGENT, ADMIN = "viewer", "operator", "agent", "admin"
ROLES = (VIEWER, OPERATOR, AGENT, ADMIN)
#: A token shorter than this is guessable; the file is refused.
MIN_TOKEN_CHARS = 16
#: Bounds on the token file (it is read once at start, but it is still input).
MAX_TOKENS = 10_000
MAX_FIELD_CHARS = 512
_TOKEN_KEYS = ("token", "role", "name", "nodes")
AUTHORIZATION = "authorization"


@dataclass(frozen=True)
class Identity:
    """An authenticated caller: ``via`` is ``token`` or ``certificate``; ``nodes`` binds an agent."""

    name: str
    role: str
    via: str
    nodes: tuple[str, ...] = ()

    def may_act_for(self, node_id: str) -> bool:
        return self.role == ADMIN or node_id in self.nodes


@dataclass(frozen=True)
class TokenTable:
    """The tokens a server accepts (``--auth-tokens``); :meth:`identify` compares in constant time."""

    entries: tuple[tuple[bytes, Identity], ...] = ()

    def __len__(self) -> int:
        return len(self.entries)

    def identify(self, token: str) -> Identity | None:
        given = token.encode()
        found = None
        for secret, who in self.entries:  # every entry, so the time does not tell which one matched
            if hmac.compare_digest(secret, given):
                found = who
        return found


def _text(value: Any, where: str, *, required: bool = True) -> str:
    if value is None and not required:
        return ""
    if not isinstance(value, str) or (required and not value.strip()):
        raise InvalidArgument(where, "must be a non-empty string")
    if len(value) > MAX_FIELD_CHARS:
        raise InvalidArgument(where, f"is {len(value)} characters long", f"at most {MAX_FIELD_CHARS}")
    return value


def parse_tokens(doc: Any, source: str = "auth_tokens") -> TokenTable:
    """The :class:`TokenTable` of a parsed token file; InvalidArgument naming the entry and key."""
    if not isinstance(doc, Mapping) or set(doc) != {"tokens"} or not isinstance(doc["tokens"], list):
        raise InvalidArgument(source, "must be a mapping with one key, tokens: a list",
                              "tokens: [{token, role, name[, nodes]}]")
    items = doc["tokens"]
    if len(items) > MAX_TOKENS:
        raise InvalidArgument(f"{source}: tokens", f"{len(items)} entries", f"at most {MAX_TOKENS}")
    entries: list[tuple[bytes, Identity]] = []
    seen: set[str] = set()
    for i, item in enumerate(items):
        where = f"{source}: tokens[{i}]"
        if not isinstance(item, Mapping):
            raise InvalidArgument(where, "must be a mapping", "{token, role, name[, nodes]}")
        unknown = sorted(set(map(str, item)) - set(_TOKEN_KEYS))
        if unknown:
            raise InvalidArgument(f"{where}.{unknown[0]}", "unknown key", ", ".join(_TOKEN_KEYS))
        token = _text(item.get("token"), f"{where}.token")
        if len(token) < MIN_TOKEN_CHARS:
            raise InvalidArgument(f"{where}.token", f"is {len(token)} characters long", f"at least {MIN_TOKEN_CHARS}")
        if token in seen:
            raise InvalidArgument(f"{where}.token", "appears twice", "one entry per token")
        seen.add(token)
        role = item.get("role")
        if role not in ROLES:
            raise InvalidArgument(f"{where}.role", f"{role!r}", ", ".join(ROLES))
        name = _text(item.get("name"), f"{where}.name")
        nodes_raw = item.get("nodes", [name] if role == AGENT else [])
        if not isinstance(nodes_raw, list) or not nodes_raw and role == AGENT:
            raise InvalidArgument(f"{where}.nodes", "must be a non-empty list of node ids", "[node-id, ...]")
        nodes = tuple(_text(n, f"{where}.nodes[{j}]") for j, n in enumerate(nodes_raw))
        entries.append((token.encode(), Identity(name, role, "token", nodes)))
    return TokenTable(tuple(entries))


def load_tokens(path: str | Path) -> TokenTable:
    """Read ``--auth-tokens FILE``; InvalidArgument naming the file when it is missing or malformed."""
    source = str(path)
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise InvalidArgument("auth_tokens", f"cannot read {source}: {exc.strerror}") from None
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise InvalidArgument("auth_tokens", f"{source} is not YAML: {exc}") from None
    return parse_tokens(doc, source)


def certificate_identity(pem: bytes | None, common_name: str = "", sans: Sequence[str] = ()) -> Identity | None:
    """The identity of a verified client certificate: CN (else the first SAN) and the role its OU names."""
    name = common_name or (sans[0] if sans else "")
    role = VIEWER
    if pem:
        from cryptography import x509
        from cryptography.x509.oid import NameOID

        cert = x509.load_pem_x509_certificate(pem)
        cns = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
        name = name or (str(cns[0].value) if cns else "")
        for ou in cert.subject.get_attributes_for_oid(NameOID.ORGANIZATIONAL_UNIT_NAME):
            if ou.value in ROLES:
                role = str(ou.value)
                break
    if not name:
        return None
    return Identity(name, role, "certificate", (name,) if role == AGENT else ())


def _read(path: str, flag: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise InvalidArgument(flag, f"cannot read {path}: {exc.strerror}") from None


@dataclass(frozen=True)
class ServerSecurity:
    """How a server authenticates (see the module doc); all empty: plain, loopback only unless ``insecure``."""

    tls_cert: str = ""
    tls_key: str = ""
    tls_client_ca: str = ""
    auth_tokens: str = ""
    insecure: bool = False

    def __post_init__(self) -> None:
        if bool(self.tls_cert) != bool(self.tls_key):
            raise InvalidArgument("--tls-cert" if not self.tls_cert else "--tls-key",
                                  "is needed with the other", "both --tls-cert and --tls-key, or neither")
        if self.tls_client_ca and not self.tls_cert:
            raise InvalidArgument("--tls-client-ca", "needs --tls-cert and --tls-key (mTLS is TLS first)")

    @property
    def tls(self) -> bool:
        return bool(self.tls_cert)

    @property
    def authenticates(self) -> bool:
        """Callers must prove who they are (tokens or client certificates)."""
        return bool(self.auth_tokens or self.tls_client_ca)

    @property
    def secured(self) -> bool:
        return self.tls or self.authenticates

    def credentials(self) -> Any:
        """``grpc.ServerCredentials`` for TLS (requiring a client certificate with ``tls_client_ca``)."""
        import grpc

        client_ca = _read(self.tls_client_ca, "--tls-client-ca") if self.tls_client_ca else None
        return grpc.ssl_server_credentials([(_read(self.tls_key, "--tls-key"), _read(self.tls_cert, "--tls-cert"))],
                                           root_certificates=client_ca, require_client_auth=client_ca is not None)

    def tokens(self) -> TokenTable | None:
        return load_tokens(self.auth_tokens) if self.auth_tokens else None


@dataclass(frozen=True)
class ClientSecurity:
    """How a client reaches a service: TLS (``ca`` to verify it; ``cert``/``key`` for mTLS) and a bearer token."""

    ca: str = ""
    cert: str = ""
    key: str = ""
    token: str = ""
    #: The name the server's certificate must carry when it is not the address's host.
    server_name: str = ""
    #: Force TLS with the system roots (no ``ca``).
    tls: bool = field(default=False)

    def check(self) -> None:
        """InvalidArgument naming the flag when the settings cannot work (checked when a channel opens)."""
        if bool(self.cert) != bool(self.key):
            raise InvalidArgument("--tls-cert" if not self.cert else "--tls-key",
                                  "is needed with the other", "both --tls-cert and --tls-key, or neither")

    @property
    def uses_tls(self) -> bool:
        return self.tls or bool(self.ca or self.cert)

    def metadata(self) -> tuple[tuple[str, str], ...]:
        return ((AUTHORIZATION, f"Bearer {self.token}"),) if self.token else ()


def _bearer_interceptor(token: str) -> Any:
    import grpc

    header = (AUTHORIZATION, f"Bearer {token}")

    class _Details(grpc.ClientCallDetails):
        def __init__(self, d: Any) -> None:
            self.method, self.timeout, self.credentials = d.method, d.timeout, d.credentials
            self.wait_for_ready, self.compression = d.wait_for_ready, d.compression
            self.metadata = [*(d.metadata or ()), header]

    class Bearer(grpc.UnaryUnaryClientInterceptor, grpc.UnaryStreamClientInterceptor,
                 grpc.StreamUnaryClientInterceptor, grpc.StreamStreamClientInterceptor):
        def intercept_unary_unary(self, continuation: Any, details: Any, request: Any) -> Any:
            return continuation(_Details(details), request)

        def intercept_unary_stream(self, continuation: Any, details: Any, request: Any) -> Any:
            return continuation(_Details(details), request)

        def intercept_stream_unary(self, continuation: Any, details: Any, requests: Any) -> Any:
            return continuation(_Details(details), requests)

        def intercept_stream_stream(self, continuation: Any, details: Any, requests: Any) -> Any:
            return continuation(_Details(details), requests)

    return Bearer()


def open_channel(address: str, security: ClientSecurity | None = None,
                 options: Sequence[tuple[str, Any]] = ()) -> Any:
    """A ``grpc.Channel`` to ``address``: TLS when ``security`` says so, every call carrying its token."""
    import grpc

    security = security or ClientSecurity()
    security.check()
    opts = list(options)
    if security.uses_tls:
        creds = grpc.ssl_channel_credentials(
            root_certificates=_read(security.ca, "--tls-ca") if security.ca else None,
            private_key=_read(security.key, "--tls-key") if security.key else None,
            certificate_chain=_read(security.cert, "--tls-cert") if security.cert else None)
        if security.server_name:
            opts.append(("grpc.ssl_target_name_override", security.server_name))
        channel = grpc.secure_channel(address, creds, options=opts)
    else:
        channel = grpc.insecure_channel(address, options=opts)
    if security.token:
        channel = grpc.intercept_channel(channel, _bearer_interceptor(security.token))
    return channel
