"""Who may call what: the per-method policy, and the interceptor that enforces and audits it.

:data:`POLICY` is the one table. Roles: ``viewer`` reads; ``operator`` also changes budgets,
jobs, power modes, plans, models and search sessions; ``admin`` may do everything; ``agent``
may only register, heartbeat and watch / read configs for the node ids its identity names
(a request about another node is PERMISSION_DENIED; an empty node id is filled in with the
agent's node when it has one). Health checking and reflection are open to everyone (probes).
A method missing from the table needs ``admin``.

:class:`AuthInterceptor` runs on every server. When the server authenticates (``--auth-tokens``
or ``--tls-client-ca``) a call without a known bearer token or a verified client certificate
is UNAUTHENTICATED, one whose identity lacks the role PERMISSION_DENIED. Without either
every caller is ``anonymous`` with every right (the server then listens on loopback only,
unless ``--insecure``). Either way, every call the policy marks ``audit`` (and every refused
call) is written to the audit stream: a structured log record ``audit`` and, when the service
has a store, :meth:`Store.append_audit`.

Search sessions are owned: the identity that started one (StartSearch) is the only one, besides
an admin, that may Ask, Tell or end it.

Agents may also identify with their pod's projected service-account token (``--agent-jwks``,
:class:`~edgetune.identity.JwksVerifier`): a bearer token that is a JWT goes to the verifier, whose
identity is the node named in the token's claims.

Refused calls are audited at a bounded rate (:class:`RefusedAuditLimiter`): at most
``REFUSED_PER_PEER_PER_S`` records a second per peer host (bursts of ``REFUSED_PER_PEER_BURST``) and
``REFUSED_TOTAL_PER_S`` over all peers; the rest are counted and summed up in one record per peer
(outcome RESOURCE_EXHAUSTED, ``target`` "N refused calls not recorded") once the peer may write
again. Calls that were let in are always recorded, so a flood of anonymous calls can no longer
push genuine records out of the audit stream's ``AUDIT_MAX_LEN``.

While a call runs, :func:`current_caller` is its identity (the limits interceptor shares heavy
slots and watch streams by it).
"""

from __future__ import annotations

import contextvars
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import grpc

from edgetune.identity import (
    ADMIN,
    AGENT,
    AUTHORIZATION,
    MAX_BEARER_CHARS,
    OPERATOR,
    VIEWER,
    Identity,
    JwksVerifier,
    TokenRefused,
    TokenTable,
    certificate_identity,
    looks_like_jwt,
)
from edgetune.services.common.handlers import wrap_handler
from edgetune.services.common.metrics import split_method
from edgetune.store import AuditRecord, Store

log = logging.getLogger("edgetune.audit")

ANONYMOUS = Identity("anonymous", ADMIN, "none")
#: Records the audit stream keeps (the structured log keeps them all).
AUDIT_MAX_LEN = 100_000
#: Identity names, targets and peers are cut to this in audit records (they come from requests).
_AUDIT_FIELD_CHARS = 256
#: How long an ownership record lives: at least a search session's default idle lifetime.
OWNER_TTL_S = 7 * 24 * 3600.0
_RANK = {VIEWER: 1, OPERATOR: 2, ADMIN: 3}
#: Refused calls written to the audit stream: per peer host (a second, burst) and over all peers.
REFUSED_PER_PEER_PER_S = 2.0
REFUSED_PER_PEER_BURST = 20.0
REFUSED_TOTAL_PER_S = 20.0
REFUSED_TOTAL_BURST = 200.0
#: Peers the limiter remembers (least recently refused forgotten first).
MAX_TRACKED_PEERS = 10_000

_CALLER: contextvars.ContextVar[tuple[Identity, str] | None] = contextvars.ContextVar("edgetune_caller",
                                                                                      default=None)


def current_caller() -> tuple[Identity, str] | None:
    """(identity, peer) of the call this thread serves now; None outside an authenticated call."""
    return _CALLER.get()


def peer_host(peer: str) -> str:
    """``ipv4:10.0.0.7:51234`` -> ``ipv4:10.0.0.7``; ``ipv6:[::1]:5`` -> ``ipv6:[::1]``; others as they are."""
    if peer.startswith(("ipv4:", "ipv6:")) and peer.count(":") >= 2:
        return peer.rsplit(":", 1)[0]
    return peer


@dataclass(frozen=True)
class Rule:
    """What one method needs: ``role`` (viewer < operator < admin); ``node`` reads the node id an
    agent may call it for (None: agents may not); ``audit``: write OK calls to the audit stream;
    ``creates`` / ``owned``: the ownership kind and how to read the id from the response / request."""

    role: str
    node: Callable[[Any], str] | None = None
    set_node: Callable[[Any, str], None] | None = None
    audit: bool = False
    creates: tuple[str, Callable[[Any], str]] | None = None
    owned: tuple[str, Callable[[Any], str]] | None = None


def _node_id(request: Any) -> str:
    return str(request.node_id)


def _set_node_id(request: Any, node_id: str) -> None:
    request.node_id = node_id


def _registered_id(request: Any) -> str:
    return str(request.node.node_id)


def _set_registered_id(request: Any, node_id: str) -> None:
    request.node.node_id = node_id


def _session(message: Any) -> str:
    return str(message.session_id)


_SESSION = "optimizer-session"
_AGENT_READ = {"node": _node_id, "set_node": _set_node_id}

#: The policy: "/package.Service/Method" -> Rule.
POLICY: dict[str, Rule] = {
    # Coordinator
    "/edgetune.v1.Coordinator/RegisterNode": Rule(ADMIN, _registered_id, _set_registered_id, audit=True),
    "/edgetune.v1.Coordinator/Heartbeat": Rule(ADMIN, _node_id, _set_node_id),
    "/edgetune.v1.Coordinator/ListNodes": Rule(VIEWER),
    "/edgetune.v1.Coordinator/PlanRound": Rule(OPERATOR, audit=True),
    "/edgetune.v1.Coordinator/GetNodeConfig": Rule(VIEWER, **_AGENT_READ),  # type: ignore[arg-type]
    "/edgetune.v1.Coordinator/WatchConfig": Rule(VIEWER, **_AGENT_READ),  # type: ignore[arg-type]
    "/edgetune.v1.Coordinator/UpdateBudget": Rule(OPERATOR, audit=True),
    "/edgetune.v1.Coordinator/SubmitTuningJob": Rule(OPERATOR, audit=True),
    "/edgetune.v1.Coordinator/GetTuningJob": Rule(VIEWER),
    "/edgetune.v1.Coordinator/ListTuningJobs": Rule(VIEWER),
    "/edgetune.v1.Coordinator/WatchTuningJob": Rule(VIEWER),
    "/edgetune.v1.Coordinator/CancelTuningJob": Rule(OPERATOR, audit=True),
    "/edgetune.v1.Coordinator/SubmitProfiling": Rule(OPERATOR, audit=True),
    # A node's profiling jobs through the coordinator (its own agent, or an admin)
    "/edgetune.v1.NodeJobs/ClaimJobs": Rule(ADMIN, _node_id, _set_node_id),
    "/edgetune.v1.NodeJobs/CompleteJob": Rule(ADMIN, _node_id, _set_node_id, audit=True),
    "/edgetune.v1.NodeJobs/RefuseJob": Rule(ADMIN, _node_id, _set_node_id, audit=True),
    # Estimator
    "/edgetune.v1.Estimator/Fit": Rule(OPERATOR, audit=True),
    "/edgetune.v1.Estimator/Transfer": Rule(OPERATOR, audit=True),
    "/edgetune.v1.Estimator/Predict": Rule(VIEWER),
    "/edgetune.v1.Estimator/EstimateBatchEfficiency": Rule(VIEWER),
    "/edgetune.v1.Estimator/EstimateEnergy": Rule(VIEWER),
    "/edgetune.v1.Estimator/ListModels": Rule(VIEWER),
    # Optimizer
    "/edgetune.v1.Optimizer/ParetoFront": Rule(VIEWER),
    "/edgetune.v1.Optimizer/Select": Rule(VIEWER),
    "/edgetune.v1.Optimizer/SelectJoint": Rule(VIEWER),
    "/edgetune.v1.Optimizer/SelectConcurrent": Rule(VIEWER),
    "/edgetune.v1.Optimizer/NextProfiles": Rule(VIEWER),
    "/edgetune.v1.Optimizer/StartSearch": Rule(OPERATOR, audit=True, creates=(_SESSION, _session)),
    "/edgetune.v1.Optimizer/Ask": Rule(OPERATOR, owned=(_SESSION, _session)),
    "/edgetune.v1.Optimizer/Tell": Rule(OPERATOR, owned=(_SESSION, _session)),
    "/edgetune.v1.Optimizer/Best": Rule(VIEWER),
    "/edgetune.v1.Optimizer/EndSearch": Rule(OPERATOR, audit=True, owned=(_SESSION, _session)),
    # Profiler agent
    "/edgetune.v1.Profiler/GetDevice": Rule(VIEWER),
    "/edgetune.v1.Profiler/ListPowerModes": Rule(VIEWER),
    "/edgetune.v1.Profiler/StreamPower": Rule(VIEWER),
    "/edgetune.v1.Profiler/Profile": Rule(OPERATOR, audit=True),
    "/edgetune.v1.Profiler/ApplyPowerMode": Rule(OPERATOR, audit=True),
    "/edgetune.v1.Profiler/RestorePowerMode": Rule(OPERATOR, audit=True),
}
#: Services anyone may call: health checks (kubelet, load balancers) and reflection.
PUBLIC_SERVICES = ("grpc.health.v1.Health", "grpc.reflection.v1alpha.ServerReflection",
                   "grpc.reflection.v1.ServerReflection")
_DEFAULT_RULE = Rule(ADMIN)


def rule_for(method: str) -> Rule | None:
    """The method's rule; None for a public one."""
    service, _name = split_method(method)
    if service in PUBLIC_SERVICES:
        return None
    return POLICY.get(method, _DEFAULT_RULE)


class Denied(Exception):
    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code


def check(rule: Rule, who: Identity, request: Any) -> str:
    """Raise :class:`Denied` unless ``who`` may make this call; return the node it is about ("" if none)."""
    if who.role == AGENT:
        if rule.node is None:
            raise Denied(grpc.StatusCode.PERMISSION_DENIED, f"{who.name} (agent) may not call this method")
        node = rule.node(request)
        if not node and len(who.nodes) == 1 and rule.set_node is not None:
            node = who.nodes[0]
            rule.set_node(request, node)  # an agent that does not know its id yet is the node it names
        if not who.may_act_for(node):
            raise Denied(grpc.StatusCode.PERMISSION_DENIED,
                         f"{who.name} (agent) may act for node {', '.join(who.nodes) or 'none'} only, not {node[:64]!r}")
        return node
    if _RANK.get(who.role, 0) < _RANK[rule.role]:
        raise Denied(grpc.StatusCode.PERMISSION_DENIED,
                     f"{who.name} ({who.role}) may not call this method: it needs {rule.role}")
    return rule.node(request) if rule.node is not None else ""


def _bearer(metadata: Any) -> str | None:
    """The bearer token of the call; "" when the header is there but is not a bearer token; None when absent."""
    for key, value in metadata or ():
        if key == AUTHORIZATION:
            text = value.decode() if isinstance(value, bytes) else str(value)
            scheme, _, token = text.partition(" ")
            return token.strip() if scheme.lower() == "bearer" else ""
    return None


class AuthInterceptor(grpc.ServerInterceptor):
    """Authenticates, authorises by :data:`POLICY`, records ownership and audits (module doc)."""

    def __init__(self, service: str, *, tokens: TokenTable | None = None, client_certs: bool = False,
                 store: Store | None = None, agents: JwksVerifier | None = None,
                 refused: RefusedAuditLimiter | None = None) -> None:
        self.service = service
        self.tokens = tokens
        self.client_certs = client_certs
        self.agents = agents
        self.store = store
        self.refused = refused or RefusedAuditLimiter()

    @property
    def enforcing(self) -> bool:
        return self.tokens is not None or self.client_certs or self.agents is not None

    def identify(self, context: grpc.ServicerContext) -> Identity:
        if not self.enforcing:
            return ANONYMOUS
        token = _bearer(context.invocation_metadata())
        if token is not None:
            if len(token) > MAX_BEARER_CHARS:
                raise Denied(grpc.StatusCode.UNAUTHENTICATED, "bearer token too long")
            if self.agents is not None and looks_like_jwt(token):
                try:
                    return self.agents.identify(token)
                except TokenRefused as exc:
                    raise Denied(grpc.StatusCode.UNAUTHENTICATED, f"service-account token refused: {exc}") from None
            who = self.tokens.identify(token) if (self.tokens is not None and token) else None
            if who is None:
                raise Denied(grpc.StatusCode.UNAUTHENTICATED, "unknown bearer token")
            return who
        if self.client_certs:
            auth = context.auth_context() or {}
            pem = (auth.get("x509_pem_cert") or [None])[0]
            cn = (auth.get("x509_common_name") or [b""])[0]
            sans = [s.decode() for s in auth.get("x509_subject_alternative_name") or []]
            if pem or cn:
                who = certificate_identity(pem, cn.decode() if isinstance(cn, bytes) else str(cn), sans)
                if who is not None:
                    return who
        raise Denied(grpc.StatusCode.UNAUTHENTICATED,
                     "no credentials: send 'authorization: Bearer TOKEN' metadata"
                     + (" or a client certificate" if self.client_certs else ""))

    def intercept_service(self, continuation: Callable[..., Any], handler_call_details: Any) -> Any:
        handler = continuation(handler_call_details)
        if handler is None:
            return None
        method = handler_call_details.method
        rule = rule_for(method)
        if rule is None:
            return handler

        def wrap(behavior: Callable[..., Any], kind: str) -> Callable[..., Any]:
            if kind.startswith("stream_"):  # no client-streaming method is in the policy: admit by role only
                return lambda requests, context: self._call(behavior, requests, context, method, rule, streaming=
                                                            kind.endswith("_stream"), message=False)
            return lambda request, context: self._call(behavior, request, context, method, rule,
                                                       streaming=kind.endswith("_stream"), message=True)

        return wrap_handler(handler, wrap)

    def _call(self, behavior: Callable[..., Any], request: Any, context: grpc.ServicerContext, method: str,
              rule: Rule, *, streaming: bool, message: bool) -> Any:
        who: Identity | None = None
        try:
            who = self.identify(context)
            target = check(rule, who, request) if message else ""
            if message and rule.owned is not None:
                target = self._check_owner(rule.owned, who, request)
        except Denied as exc:
            self.audit(method, who, exc.code.name, context, "")
            context.abort(exc.code, str(exc))
        assert who is not None
        if streaming:
            return self._stream(behavior, request, context, method, rule, who, target)
        failed = True
        token = _CALLER.set((who, context.peer() or ""))
        try:
            response = behavior(request, context)
            failed = False
        finally:
            _CALLER.reset(token)
            outcome = _code(context, failed)
            if rule.audit:
                self.audit(method, who, outcome, context, target)
        if outcome == "OK" and rule.creates is not None:
            self._record_owner(rule.creates, who, response)
        return response

    def _stream(self, behavior: Callable[..., Any], request: Any, context: grpc.ServicerContext, method: str,
                rule: Rule, who: Identity, target: str) -> Iterator[Any]:
        outcome = "UNKNOWN"
        # The whole stream is served by this one thread (grpc's sync server), so the caller holds while it runs.
        token = _CALLER.set((who, context.peer() or ""))
        try:
            yield from behavior(request, context)
            outcome = _code(context, False)
        except GeneratorExit:
            outcome = "CANCELLED"
            raise
        except BaseException:
            outcome = _code(context, True)
            raise
        finally:
            try:
                _CALLER.reset(token)
            except ValueError:  # closed from another context (garbage-collected elsewhere): nothing to undo here
                pass
            if rule.audit:
                self.audit(method, who, outcome, context, target)

    # -- ownership ---------------------------------------------------------------------------
    def _owner_key(self, kind: str, resource: str) -> tuple[str, str, str]:
        return ("owner", kind, resource)

    def _record_owner(self, creates: tuple[str, Callable[[Any], str]], who: Identity, response: Any) -> None:
        if self.store is None or not self.enforcing:
            return
        kind, read = creates
        try:
            self.store.set_with_ttl(self._owner_key(kind, read(response)), who.name, OWNER_TTL_S)
        except Exception:  # the call succeeded; without the record only admins and the creator's role check apply
            log.exception("cannot record the owner", extra={"kind": kind})

    def _check_owner(self, owned: tuple[str, Callable[[Any], str]], who: Identity, request: Any) -> str:
        kind, read = owned
        resource = read(request)
        if self.store is None or not self.enforcing or who.role == ADMIN or not resource:
            return resource
        owner = self.store.get(self._owner_key(kind, resource))
        if owner is not None and owner != who.name:
            raise Denied(grpc.StatusCode.PERMISSION_DENIED, f"{who.name} does not own {kind} {resource[:64]!r}")
        return resource

    # -- audit -------------------------------------------------------------------------------
    def audit(self, method: str, who: Identity | None, outcome: str, context: grpc.ServicerContext,
              target: str, *, refused: bool | None = None) -> None:
        """Write one audit record. A refused call (``refused``: by default, one without an identity
        or refused for its credentials / role) is written only as the limiter allows; the ones it
        holds back are summed up in the peer's next record."""
        _service, name = split_method(method)
        peer = (context.peer() or "")[:_AUDIT_FIELD_CHARS]
        if refused is None:
            refused = who is None or outcome in ("UNAUTHENTICATED", "PERMISSION_DENIED")
        if refused:
            allowed, suppressed = self.refused.admit(peer_host(peer))
            if not allowed:
                return
            if suppressed:
                self._write(AuditRecord(time.time(), self.service, name, "unauthenticated", "", "none",
                                        "RESOURCE_EXHAUSTED", peer, f"{suppressed} refused calls not recorded"))
        self._write(AuditRecord(time.time(), self.service, name,
                                (who.name if who else "unauthenticated")[:_AUDIT_FIELD_CHARS],
                                who.role if who else "", who.via if who else "none", outcome, peer,
                                target[:_AUDIT_FIELD_CHARS]))

    def _write(self, record: AuditRecord) -> None:
        log.info("audit", extra={"audit": record.to_dict()})
        if self.store is not None:
            try:
                self.store.append_audit(record, max_len=AUDIT_MAX_LEN)
            except Exception:  # the structured log has it; a store hiccup must not fail the call
                log.exception("cannot write the audit record", extra={"method": record.method})


def _code(context: grpc.ServicerContext, failed: bool) -> str:
    code = context.code()
    if code is None:
        return "UNKNOWN" if failed else "OK"
    return code.name if isinstance(code, grpc.StatusCode) else str(code)


class _Bucket:
    __slots__ = ("tokens", "stamp", "suppressed")

    def __init__(self, tokens: float, stamp: float) -> None:
        self.tokens, self.stamp, self.suppressed = tokens, stamp, 0


class RefusedAuditLimiter:
    """Token buckets for refused calls' audit records: one per peer host and one over all peers
    (module doc). :meth:`admit` says whether a record may be written now and how many of the
    peer's earlier ones were held back (to be summed up in one record)."""

    def __init__(self, per_peer_per_s: float = REFUSED_PER_PEER_PER_S, per_peer_burst: float = REFUSED_PER_PEER_BURST,
                 total_per_s: float = REFUSED_TOTAL_PER_S, total_burst: float = REFUSED_TOTAL_BURST,
                 clock: Callable[[], float] = time.monotonic, max_peers: int = MAX_TRACKED_PEERS) -> None:
        self.per_peer_per_s, self.per_peer_burst = per_peer_per_s, per_peer_burst
        self.total_per_s, self.total_burst = total_per_s, total_burst
        self.clock, self.max_peers = clock, max_peers
        self._peers: OrderedDict[str, _Bucket] = OrderedDict()
        self._total = _Bucket(total_burst, clock())
        self._lock = threading.Lock()
        #: Records held back since the start (all peers).
        self.suppressed_total = 0

    @staticmethod
    def _refill(bucket: _Bucket, rate: float, burst: float, now: float) -> None:
        bucket.tokens = min(burst, bucket.tokens + (now - bucket.stamp) * rate)
        bucket.stamp = now

    def admit(self, peer: str) -> tuple[bool, int]:
        now = self.clock()
        with self._lock:
            bucket = self._peers.pop(peer, None) or _Bucket(self.per_peer_burst, now)
            self._peers[peer] = bucket  # most recent last
            while len(self._peers) > self.max_peers:
                self._peers.popitem(last=False)
            self._refill(bucket, self.per_peer_per_s, self.per_peer_burst, now)
            self._refill(self._total, self.total_per_s, self.total_burst, now)
            # A summary needs a token of its own, so a record and its summary take two.
            need = 2.0 if bucket.suppressed else 1.0
            if bucket.tokens < need or self._total.tokens < need:
                bucket.suppressed += 1
                self.suppressed_total += 1
                return False, 0
            bucket.tokens -= need
            self._total.tokens -= need
            suppressed, bucket.suppressed = bucket.suppressed, 0
            return True, suppressed
