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
A token may be stored hashed, ``token: "sha256:<64 hex digits>"`` (the SHA-256 of the token's
UTF-8 bytes): a server compares digests only, so a file of hashed tokens (what the agents mount)
holds nothing a thief could replay. Names are unique; the file must not be readable or writable by
group or others (as ssh insists for its keys), else it is refused naming the file and its mode.

Agents may instead present their pod's **projected Kubernetes service-account token** (audience
``edgetune``): a JWT signed by the cluster's service-account issuer, verified against the issuer's
public keys (:class:`JwksVerifier`, RS256 / ES256). The node is the token's
``kubernetes.io.node.name`` claim, so the identity names exactly the node the pod runs on; only
the service accounts the server names (``--agent-service-account NAMESPACE:NAME``) are agents.

The per-method policy is :mod:`edgetune.services.common.auth`.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import re
import ssl
import stat
import threading
import time
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import yaml
from cryptography import x509
from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa
from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature
from cryptography.x509.oid import NameOID

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
#: A hashed token: ``sha256:`` and the 64 hex digits of the SHA-256 of the token.
HASH_PREFIX = "sha256:"
_HASHED = re.compile(r"^sha256:[0-9a-fA-F]{64}$")
#: Permission bits a token file must not have (group / others may neither read nor write it).
_PRIVATE_MASK = stat.S_IRWXG | stat.S_IRWXO
#: The audience an agent's projected service-account token must carry.
AGENT_AUDIENCE = "edgetune"
#: Where Kubernetes mounts a pod's own service-account credentials (``--agent-jwks kubernetes``).
KUBE_SA_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
#: A bearer token longer than this is refused unread (a JWT of a service account is ~1 KB).
MAX_BEARER_CHARS = 16_384
#: Clock skew tolerated on a JWT's exp / nbf / iat.
JWT_LEEWAY_S = 60.0


def token_digest(token: str) -> bytes:
    """The SHA-256 of a token: what a token table stores and compares."""
    return hashlib.sha256(token.encode()).digest()


def hash_token(token: str) -> str:
    """``sha256:<hex>`` of ``token``: the form to put in a token file that must hold no secret."""
    return HASH_PREFIX + hashlib.sha256(token.encode()).hexdigest()


@dataclass(frozen=True)
class Identity:
    """An authenticated caller: ``via`` is ``token``, ``certificate`` or ``serviceaccount``; ``nodes`` binds an agent."""

    name: str
    role: str
    via: str
    nodes: tuple[str, ...] = ()

    def may_act_for(self, node_id: str) -> bool:
        return self.role == ADMIN or node_id in self.nodes


@dataclass(frozen=True)
class TokenTable:
    """The tokens a server accepts (``--auth-tokens``), each kept as its SHA-256 only;
    :meth:`identify` compares digests in constant time."""

    entries: tuple[tuple[bytes, Identity], ...] = ()

    def __len__(self) -> int:
        return len(self.entries)

    def identify(self, token: str) -> Identity | None:
        given = token_digest(token)
        found = None
        for digest, who in self.entries:  # every entry, so the time does not tell which one matched
            if hmac.compare_digest(digest, given):
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


def _entry_digest(token: str, where: str, *, hashed_only: bool) -> bytes:
    if token.startswith(HASH_PREFIX):
        if not _HASHED.match(token):
            raise InvalidArgument(where, "is not a SHA-256 digest", "sha256: and 64 hex digits")
        return bytes.fromhex(token[len(HASH_PREFIX):])
    if hashed_only:
        raise InvalidArgument(where, "is a plain token; this server accepts hashed tokens only",
                              'token: "sha256:<hex>" (edgetune.identity.hash_token)')
    if len(token) < MIN_TOKEN_CHARS:
        raise InvalidArgument(where, f"is {len(token)} characters long", f"at least {MIN_TOKEN_CHARS}")
    return token_digest(token)


def parse_tokens(doc: Any, source: str = "auth_tokens", *, hashed_only: bool = False) -> TokenTable:
    """The :class:`TokenTable` of a parsed token file; InvalidArgument naming the entry and key.

    ``hashed_only``: refuse plain tokens (a server that must hold nothing replayable: the agents)."""
    if not isinstance(doc, Mapping) or set(doc) != {"tokens"} or not isinstance(doc["tokens"], list):
        raise InvalidArgument(source, "must be a mapping with one key, tokens: a list",
                              "tokens: [{token, role, name[, nodes]}]")
    items = doc["tokens"]
    if len(items) > MAX_TOKENS:
        raise InvalidArgument(f"{source}: tokens", f"{len(items)} entries", f"at most {MAX_TOKENS}")
    entries: list[tuple[bytes, Identity]] = []
    seen: set[bytes] = set()
    names: dict[str, int] = {}
    for i, item in enumerate(items):
        where = f"{source}: tokens[{i}]"
        if not isinstance(item, Mapping):
            raise InvalidArgument(where, "must be a mapping", "{token, role, name[, nodes]}")
        unknown = sorted(set(map(str, item)) - set(_TOKEN_KEYS))
        if unknown:
            raise InvalidArgument(f"{where}.{unknown[0]}", "unknown key", ", ".join(_TOKEN_KEYS))
        digest = _entry_digest(_text(item.get("token"), f"{where}.token"), f"{where}.token", hashed_only=hashed_only)
        if digest in seen:
            raise InvalidArgument(f"{where}.token", "appears twice", "one entry per token")
        seen.add(digest)
        role = item.get("role")
        if role not in ROLES:
            raise InvalidArgument(f"{where}.role", f"{role!r}", ", ".join(ROLES))
        name = _text(item.get("name"), f"{where}.name")
        if name in names:  # names own things (search sessions): two entries must not share one
            raise InvalidArgument(f"{where}.name", f"{name[:64]!r} is also the name of tokens[{names[name]}]",
                                  "a unique name per entry")
        names[name] = i
        nodes_raw = item.get("nodes", [name] if role == AGENT else [])
        if not isinstance(nodes_raw, list) or not nodes_raw and role == AGENT:
            raise InvalidArgument(f"{where}.nodes", "must be a non-empty list of node ids", "[node-id, ...]")
        nodes = tuple(_text(n, f"{where}.nodes[{j}]") for j, n in enumerate(nodes_raw))
        entries.append((digest, Identity(name, role, "token", nodes)))
    return TokenTable(tuple(entries))


def check_private_file(path: str | Path, flag: str) -> None:
    """Refuse a secret file that group or others may read or write (InvalidArgument naming the file
    and its mode), as ssh refuses such a private key."""
    try:
        mode = stat.S_IMODE(os.stat(path).st_mode)
    except OSError as exc:
        raise InvalidArgument(flag, f"cannot read {path}: {exc.strerror}") from None
    if mode & _PRIVATE_MASK:
        raise InvalidArgument(flag, f"{path} has mode {mode:04o}: group or others may read or write it",
                              f"a file only its owner can read (chmod 600 {path})")


def load_tokens(path: str | Path, *, hashed_only: bool = False) -> TokenTable:
    """Read ``--auth-tokens FILE``; InvalidArgument naming the file when it is missing, malformed or
    readable by others."""
    source = str(path)
    check_private_file(path, "auth_tokens")
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise InvalidArgument("auth_tokens", f"cannot read {source}: {exc.strerror}") from None
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise InvalidArgument("auth_tokens", f"{source} is not YAML: {exc}") from None
    return parse_tokens(doc, source, hashed_only=hashed_only)


def certificate_identity(pem: bytes | None, common_name: str = "", sans: Sequence[str] = ()) -> Identity | None:
    """The identity of a verified client certificate: CN (else the first SAN) and the role its OU names."""
    name = common_name or (sans[0] if sans else "")
    role = VIEWER
    if pem:
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


# --------------------------------------------------------------------------- service-account tokens


class TokenRefused(Exception):
    """A JWT that does not verify; the message says why (never the token)."""


def _b64url(part: str) -> bytes:
    try:
        return base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))
    except (ValueError, TypeError):
        raise TokenRefused("not base64url") from None


def looks_like_jwt(token: str) -> bool:
    """Three base64url parts, the first a JSON header (``eyJ`` is ``{"``)."""
    return token.startswith("eyJ") and token.count(".") == 2


def _public_key(jwk: Mapping[str, Any]) -> Any:
    kty = jwk.get("kty")
    if kty == "RSA":
        n = int.from_bytes(_b64url(str(jwk["n"])), "big")
        e = int.from_bytes(_b64url(str(jwk["e"])), "big")
        return rsa.RSAPublicNumbers(e, n).public_key()
    if kty == "EC" and jwk.get("crv") == "P-256":
        x = int.from_bytes(_b64url(str(jwk["x"])), "big")
        y = int.from_bytes(_b64url(str(jwk["y"])), "big")
        return ec.EllipticCurvePublicNumbers(x, y, ec.SECP256R1()).public_key()
    raise ValueError(f"unsupported key type {kty!r} / curve {jwk.get('crv')!r} (RSA or EC P-256)")


def parse_jwks(doc: Any, source: str) -> dict[str, list[tuple[str, Any]]]:
    """``kid -> [(kty, public key)]`` of a JWKS document (keys without a kid under ""); InvalidArgument
    naming the source when it is not one."""
    if not isinstance(doc, Mapping) or not isinstance(doc.get("keys"), list):
        raise InvalidArgument("agent_jwks", f"{source} is not a JWKS document", '{"keys": [{kty, kid, ...}]}')
    keys: dict[str, list[tuple[str, Any]]] = {}
    for i, jwk in enumerate(doc["keys"]):
        if not isinstance(jwk, Mapping) or jwk.get("use", "sig") != "sig":
            continue
        try:
            keys.setdefault(str(jwk.get("kid", "")), []).append((str(jwk["kty"]), _public_key(jwk)))
        except (KeyError, ValueError, TypeError) as exc:
            raise InvalidArgument(f"agent_jwks: keys[{i}]", f"not a usable public key: {exc}") from None
    if not keys:
        raise InvalidArgument("agent_jwks", f"{source} holds no signing key", "RSA or EC P-256 keys")
    return keys


def verify_jwt(token: str, keys: Mapping[str, list[tuple[str, Any]]], now_s: float | None = None) -> dict[str, Any]:
    """The claims of a JWT signed (RS256 / ES256) by one of ``keys``, its time claims checked; TokenRefused else."""
    parts = token.split(".")
    if len(parts) != 3:
        raise TokenRefused("not a JWT")
    try:
        header = json.loads(_b64url(parts[0]))
        claims = json.loads(_b64url(parts[1]))
    except ValueError:
        raise TokenRefused("not a JWT: header or claims are not JSON") from None
    if not isinstance(header, dict) or not isinstance(claims, dict):
        raise TokenRefused("not a JWT")
    alg = header.get("alg")
    kty = {"RS256": "RSA", "ES256": "EC"}.get(str(alg))
    if kty is None:
        raise TokenRefused(f"algorithm {str(alg)[:16]!r} is not accepted (RS256, ES256)")
    candidates = keys.get(str(header.get("kid", "")), []) if header.get("kid") else [k for ks in keys.values() for k in ks]
    candidates = [(t, k) for t, k in candidates if t == kty]
    if not candidates:
        raise TokenRefused("signed by a key the issuer does not publish")
    signed, signature = f"{parts[0]}.{parts[1]}".encode(), _b64url(parts[2])
    for _kty, key in candidates:
        try:
            if kty == "RSA":
                key.verify(signature, signed, padding.PKCS1v15(), hashes.SHA256())
            else:
                if len(signature) != 64:
                    raise InvalidSignature()
                der = encode_dss_signature(int.from_bytes(signature[:32], "big"), int.from_bytes(signature[32:], "big"))
                key.verify(der, signed, ec.ECDSA(hashes.SHA256()))
            break
        except InvalidSignature:
            continue
    else:
        raise TokenRefused("bad signature")
    now = time.time() if now_s is None else now_s
    exp = claims.get("exp")
    if not isinstance(exp, int | float) or now > exp + JWT_LEEWAY_S:
        raise TokenRefused("expired (or no exp claim)")
    nbf = claims.get("nbf", claims.get("iat", 0))
    if isinstance(nbf, int | float) and now + JWT_LEEWAY_S < nbf:
        raise TokenRefused("not valid yet")
    return claims


class JwksSource:
    """Where the issuer's public keys come from: a JWKS file (re-read when it changes), an
    ``https://`` URL (optionally with a bearer token file and a CA), or ``kubernetes``: the API
    server's ``/openid/v1/jwks`` with this pod's own service-account token. Fetched keys are kept
    ``refresh_s``; an unknown key id fetches again (at most every ``min_fetch_s``)."""

    def __init__(self, source: str, *, token_file: str = "", ca_file: str = "", refresh_s: float = 300.0,
                 min_fetch_s: float = 10.0) -> None:
        self.source = source
        self.token_file, self.ca_file = token_file, ca_file
        if source == "kubernetes":
            host = os.environ.get("KUBERNETES_SERVICE_HOST", "kubernetes.default.svc")
            port = os.environ.get("KUBERNETES_SERVICE_PORT", "443")
            self.url = f"https://{host}:{port}/openid/v1/jwks"
            self.token_file = token_file or f"{KUBE_SA_DIR}/token"
            self.ca_file = ca_file or f"{KUBE_SA_DIR}/ca.crt"
        elif source.startswith("https://"):
            self.url = source
        else:
            self.url = ""
            self.path = source.removeprefix("file:")
        self.refresh_s, self.min_fetch_s = refresh_s, min_fetch_s
        self._keys: dict[str, list[tuple[str, Any]]] = {}
        self._stamp: Any = None
        self._fetched_at = -1e18
        self._attempted_at = -1e18
        self._error = ""
        self._lock = threading.Lock()

    def _fetch(self) -> dict[str, list[tuple[str, Any]]]:
        if not self.url:
            try:
                return parse_jwks(json.loads(Path(self.path).read_text()), self.path)
            except OSError as exc:
                raise InvalidArgument("agent_jwks", f"cannot read {self.path}: {exc.strerror}") from None
            except ValueError as exc:
                if isinstance(exc, InvalidArgument):
                    raise
                raise InvalidArgument("agent_jwks", f"{self.path} is not JSON: {exc}") from None
        request = urllib.request.Request(self.url, headers={"Accept": "application/json"})
        if self.token_file:
            request.add_header("Authorization", f"Bearer {Path(self.token_file).read_text().strip()}")
        context = ssl.create_default_context(cafile=self.ca_file or None)
        try:
            with urllib.request.urlopen(request, timeout=10, context=context) as reply:  # noqa: S310 - https only
                return parse_jwks(json.loads(reply.read(1_000_000)), self.url)
        except (OSError, ValueError) as exc:
            if isinstance(exc, InvalidArgument):
                raise
            raise InvalidArgument("agent_jwks", f"cannot fetch {self.url}: {exc}") from None

    def keys(self, *, unknown_kid: bool = False) -> dict[str, list[tuple[str, Any]]]:
        """The current keys; a file is re-read when its mtime changed, a URL after ``refresh_s`` or
        (``unknown_kid``) after ``min_fetch_s``."""
        with self._lock:
            if not self.url:
                try:
                    stamp = os.stat(self.path).st_mtime_ns
                except OSError:
                    stamp = None
                if stamp != self._stamp or not self._keys:
                    self._keys, self._stamp = self._fetch(), stamp
                return self._keys
            now = time.monotonic()
            age = now - self._fetched_at
            due = not self._keys or age > self.refresh_s or (unknown_kid and age > self.min_fetch_s)
            # At most one attempt every min_fetch_s, failed ones included (agents retry while it is away).
            if due and now - self._attempted_at >= self.min_fetch_s:
                self._attempted_at = now
                try:
                    self._keys = self._fetch()
                    self._fetched_at = now
                except InvalidArgument as exc:
                    self._error = str(exc)
            if not self._keys:
                raise InvalidArgument("agent_jwks", f"no keys yet: {self._error or 'not fetched'}")
            return self._keys


@dataclass(frozen=True)
class AgentTokenPolicy:
    """Which service-account tokens are agents: the issuer (``iss``), the audience the token must
    carry and the service accounts (``NAMESPACE:NAME``) of the agent pods."""

    issuer: str = ""
    audience: str = AGENT_AUDIENCE
    service_accounts: tuple[str, ...] = ()


class JwksVerifier:
    """Identifies an agent by its pod's projected service-account token (module doc)."""

    def __init__(self, source: JwksSource, policy: AgentTokenPolicy) -> None:
        self.source, self.policy = source, policy

    def identify(self, token: str, now_s: float | None = None) -> Identity:
        """The agent identity of a token; TokenRefused saying why it is not one."""
        if len(token) > MAX_BEARER_CHARS:
            raise TokenRefused("too long")
        try:
            header = json.loads(_b64url(token.split(".", 1)[0]))
        except ValueError:
            raise TokenRefused("not a JWT") from None
        kid = str(header.get("kid", "")) if isinstance(header, dict) else ""
        try:
            keys = self.source.keys()
            if kid and kid not in keys:
                keys = self.source.keys(unknown_kid=True)  # the issuer rotated its keys
        except InvalidArgument as exc:  # the issuer's keys cannot be read now: the agent retries
            raise TokenRefused(f"the issuer's keys are not available ({exc.message})") from None
        claims = verify_jwt(token, keys, now_s)
        if self.policy.issuer and claims.get("iss") != self.policy.issuer:
            raise TokenRefused("issued by another issuer")
        aud = claims.get("aud")
        audiences = aud if isinstance(aud, list) else [aud]
        if self.policy.audience not in audiences:
            raise TokenRefused(f"not issued for the audience {self.policy.audience!r}")
        kube = claims.get("kubernetes.io")
        if not isinstance(kube, dict):
            raise TokenRefused("no kubernetes.io claims: not a projected service-account token")
        namespace = kube.get("namespace")
        account = (kube.get("serviceaccount") or {}).get("name")
        if f"{namespace}:{account}" not in self.policy.service_accounts:
            raise TokenRefused(f"service account {str(namespace)[:64]}:{str(account)[:64]} is not an agent's")
        if claims.get("sub") != f"system:serviceaccount:{namespace}:{account}":
            raise TokenRefused("subject and service account differ")
        node = (kube.get("node") or {}).get("name")
        if not isinstance(node, str) or not node:
            raise TokenRefused("no node claim (kubernetes.io.node.name: Kubernetes >= 1.30, or the "
                               "ServiceAccountTokenPodNodeInfo feature)")
        return Identity(node[:253], AGENT, "serviceaccount", (node[:253],))


def _read(path: str, flag: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise InvalidArgument(flag, f"cannot read {path}: {exc.strerror}") from None


def _pem_certificates(path: str, flag: str) -> tuple[bytes, list[x509.Certificate]]:
    """The file's bytes and its certificates; InvalidArgument naming ``flag`` when it holds none."""
    data = _read(path, flag)
    try:
        return data, x509.load_pem_x509_certificates(data)
    except ValueError:
        raise InvalidArgument(flag, f"{path} holds no PEM certificate",
                              "a PEM file of -----BEGIN CERTIFICATE----- blocks") from None


def _pem_private_key(path: str, flag: str) -> tuple[bytes, Any]:
    """The file's bytes and its private key; InvalidArgument naming ``flag`` when it holds no usable one."""
    data = _read(path, flag)
    try:
        return data, serialization.load_pem_private_key(data, password=None)
    except TypeError:  # a passphrase is needed: gRPC cannot take one
        raise InvalidArgument(flag, f"{path} is an encrypted private key", "an unencrypted PEM private key") from None
    except (ValueError, UnsupportedAlgorithm):
        raise InvalidArgument(flag, f"{path} holds no PEM private key",
                              "a PEM private key (-----BEGIN PRIVATE KEY-----, RSA or EC)") from None


def _spki(public_key: Any) -> bytes:
    return public_key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)


@dataclass(frozen=True)
class ServerSecurity:
    """How a server authenticates (see the module doc); all empty: plain, loopback only unless ``insecure``.

    ``agent_jwks`` (a JWKS file, an ``https://`` URL or ``kubernetes``) with ``agent_service_accounts``
    identifies agents by their service-account tokens; ``hashed_tokens_only`` refuses a token file
    holding a plain token (what the agents run with: they keep nothing replayable)."""

    tls_cert: str = ""
    tls_key: str = ""
    tls_client_ca: str = ""
    auth_tokens: str = ""
    insecure: bool = False
    hashed_tokens_only: bool = False
    agent_jwks: str = ""
    agent_issuer: str = ""
    agent_service_accounts: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if bool(self.tls_cert) != bool(self.tls_key):
            raise InvalidArgument("--tls-cert" if not self.tls_cert else "--tls-key",
                                  "is needed with the other", "both --tls-cert and --tls-key, or neither")
        if self.tls_client_ca and not self.tls_cert:
            raise InvalidArgument("--tls-client-ca", "needs --tls-cert and --tls-key (mTLS is TLS first)")
        if self.agent_jwks and not self.agent_service_accounts:
            raise InvalidArgument("--agent-service-account", "is needed with --agent-jwks",
                                  "NAMESPACE:NAME of the agent pods' service account")
        for sa in self.agent_service_accounts:
            if sa.count(":") != 1 or not all(sa.split(":")):
                raise InvalidArgument("--agent-service-account", f"{sa[:80]!r}", "NAMESPACE:NAME")

    @property
    def tls(self) -> bool:
        return bool(self.tls_cert)

    @property
    def authenticates(self) -> bool:
        """Callers must prove who they are (tokens, client certificates or service-account tokens)."""
        return bool(self.auth_tokens or self.tls_client_ca or self.agent_jwks)

    @property
    def secured(self) -> bool:
        return self.tls or self.authenticates

    def credentials(self) -> Any:
        """``grpc.ServerCredentials`` for TLS (requiring a client certificate with ``tls_client_ca``).

        The files are checked here, naming the flag: gRPC itself only fails to bind the port, with no
        reason, on a certificate or key it cannot use."""
        client_ca = _pem_certificates(self.tls_client_ca, "--tls-client-ca")[0] if self.tls_client_ca else None
        cert, chain = _pem_certificates(self.tls_cert, "--tls-cert")
        key, private_key = _pem_private_key(self.tls_key, "--tls-key")
        if _spki(private_key.public_key()) != _spki(chain[0].public_key()):
            raise InvalidArgument("--tls-key", f"{self.tls_key} is not the key of the certificate in {self.tls_cert}",
                                  "the private key of --tls-cert's first certificate")
        return grpc.ssl_server_credentials([(key, cert)], root_certificates=client_ca,
                                           require_client_auth=client_ca is not None)

    def tokens(self) -> TokenTable | None:
        return load_tokens(self.auth_tokens, hashed_only=self.hashed_tokens_only) if self.auth_tokens else None

    def agent_verifier(self) -> JwksVerifier | None:
        """The service-account token verifier. A JWKS file is read now (a bad one fails the start); keys
        from a URL are fetched at the first token, and again until they come (the API server may be
        away while this service starts: agents are UNAUTHENTICATED until then)."""
        if not self.agent_jwks:
            return None
        source = JwksSource(self.agent_jwks)
        if not source.url:
            source.keys()
        # Without --agent-issuer the keys are the check: only the issuer holds their private halves.
        return JwksVerifier(source, AgentTokenPolicy(issuer=self.agent_issuer,
                                                     service_accounts=self.agent_service_accounts))


class TokenSource:
    """The bearer token a client sends: fixed, or read from a file and read again when the file
    changes (a projected service-account token, which the kubelet rotates)."""

    def __init__(self, token: str = "", path: str = "") -> None:
        self._token, self.path = token.strip(), path
        self._stamp: Any = None
        self._lock = threading.Lock()
        if path:
            self.current()  # an unreadable file fails now, naming the flag

    def current(self) -> str:
        if not self.path:
            return self._token
        with self._lock:
            try:
                st = os.stat(self.path)
                stamp = (st.st_mtime_ns, st.st_size, st.st_ino)
                if stamp != self._stamp:
                    self._token, self._stamp = Path(self.path).read_text().strip(), stamp
            except OSError as exc:
                if self._stamp is None:
                    raise InvalidArgument("--token-file", f"cannot read {self.path}: {exc.strerror}") from None
            return self._token


@dataclass(frozen=True)
class ClientSecurity:
    """How a client reaches a service: TLS (``ca`` to verify it; ``cert``/``key`` for mTLS) and a bearer
    token (``token``, or ``token_file``: read again whenever the file changes)."""

    ca: str = ""
    cert: str = ""
    key: str = ""
    token: str = ""
    #: The name the server's certificate must carry when it is not the address's host.
    server_name: str = ""
    #: Force TLS with the system roots (no ``ca``).
    tls: bool = field(default=False)
    token_file: str = ""

    def check(self) -> None:
        """InvalidArgument naming the flag when the settings cannot work (checked when a channel opens)."""
        if bool(self.cert) != bool(self.key):
            raise InvalidArgument("--tls-cert" if not self.cert else "--tls-key",
                                  "is needed with the other", "both --tls-cert and --tls-key, or neither")
        if self.token and self.token_file:
            raise InvalidArgument("--token-file", "is given with --token", "one of --token and --token-file")

    @property
    def uses_tls(self) -> bool:
        return self.tls or bool(self.ca or self.cert)

    @property
    def sends_token(self) -> bool:
        return bool(self.token or self.token_file)

    def token_source(self) -> TokenSource:
        return TokenSource(self.token, self.token_file)

    def metadata(self) -> tuple[tuple[str, str], ...]:
        token = self.token_source().current() if self.sends_token else ""
        return ((AUTHORIZATION, f"Bearer {token}"),) if token else ()


def _bearer_interceptor(source: TokenSource | Callable[[], str]) -> Any:
    current = source.current if isinstance(source, TokenSource) else source

    class _Details(grpc.ClientCallDetails):
        def __init__(self, d: Any) -> None:
            self.method, self.timeout, self.credentials = d.method, d.timeout, d.credentials
            self.wait_for_ready, self.compression = d.wait_for_ready, d.compression
            self.metadata = [*(d.metadata or ()), (AUTHORIZATION, f"Bearer {current()}")]

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
    if security.sends_token:
        channel = grpc.intercept_channel(channel, _bearer_interceptor(security.token_source()))
    return channel
