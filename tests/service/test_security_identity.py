"""Issue 25, services' identity: no anonymous admin (TLS alone refused at start, tokens in clear text
kept on loopback), token files (private mode, unique names, sha256: digests, hashed-only servers),
and agents known by their pods' projected service-account tokens, each acting for its own node only.

Tokens are real JWTs signed in the test (RS256 and ES256, :mod:`sa_tokens`), the JWKS a file or an
HTTPS endpoint with a certificate made here (:mod:`tls_certs`); servers run in this process on
loopback, clients are real gRPC channels.
"""

from __future__ import annotations

import http.server
import json
import logging
import os
import socket
import ssl
import subprocess
import sys
import threading
import time
from pathlib import Path

import grpc
import harness
import pytest
import yaml
from cryptography.hazmat.primitives import serialization
from sa_tokens import Issuer, write_jwks
from tls_certs import TestCA

from edgetune.errors import InvalidArgument
from edgetune.identity import (
    AgentTokenPolicy,
    ClientSecurity,
    JwksSource,
    JwksVerifier,
    ServerSecurity,
    TokenRefused,
    TokenSource,
    hash_token,
    load_tokens,
    open_channel,
    parse_tokens,
)
from edgetune.powermodes.specs import get_spec
from edgetune.proto.serde.common import spec_to_proto
from edgetune.proto.v1 import common_pb2, coordinator_pb2, coordinator_pb2_grpc
from edgetune.services.common.server import ServiceServer
from edgetune.services.coordinator.server import main as coordinator_main
from edgetune.services.profiler.server import serve as serve_agent
from edgetune.store import MemoryStore

ROOT = Path(__file__).resolve().parents[2]
AGENT_SA = "edgetune:edgetune-agent"
ALICE = "alice-token-0123456789"
UNAUTHENTICATED, DENIED = grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED


def private(path: Path, text: str) -> Path:
    path.write_text(text)
    path.chmod(0o600)
    return path


@pytest.fixture
def token_file(tmp_path: Path) -> Path:
    return private(tmp_path / "tokens.yaml", yaml.safe_dump({"tokens": [
        {"token": hash_token(ALICE), "role": "operator", "name": "alice"}]}))


def code_of(call) -> grpc.StatusCode:
    with pytest.raises(grpc.RpcError) as err:
        result = call()
        if hasattr(result, "__iter__") and not hasattr(result, "ListFields"):  # a stream: read it
            next(iter(result))
    return err.value.code()


def serve_cli(*args: str, timeout_s: float = 60.0) -> subprocess.CompletedProcess:
    """``edgetune serve optimizer ARGS`` as its own process; a server that starts is killed at the timeout."""
    env = {**os.environ, "EDGETUNE_INSECURE": "", "EDGETUNE_AUTH_TOKENS": "", "EDGETUNE_TLS_CLIENT_CA": ""}
    try:
        return subprocess.run([sys.executable, "-m", "edgetune.services.optimizer.server", "--port", "0",
                               "--metrics-port", "0", "--redis", "memory://", *args], capture_output=True, text=True,
                              timeout=timeout_s, env=env, cwd=ROOT)
    except subprocess.TimeoutExpired:
        pytest.fail(f"the server started and served with {args} (it should have refused to start)")


# --------------------------------------------------------------------------- no anonymous admin


def test_tls_alone_is_refused_at_start_naming_the_missing_flags(tmp_path, token_file, caplog):
    cert = TestCA(tmp_path).server()
    tls = ["--tls-cert", str(cert.cert), "--tls-key", str(cert.key)]
    done = serve_cli(*tls, timeout_s=45)
    assert done.returncode == 2, done.stderr
    assert "--tls-client-ca" in done.stderr and "--auth-tokens" in done.stderr and "--insecure" in done.stderr
    security = ServerSecurity(tls_cert=str(cert.cert), tls_key=str(cert.key))
    with pytest.raises(InvalidArgument, match="TLS alone"):
        ServiceServer("probe", port=0, security=security)
    # A way to know callers makes it start on every address; --insecure makes it start and warn.
    for ok in (ServerSecurity(tls_cert=str(cert.cert), tls_key=str(cert.key), auth_tokens=str(token_file)),
               ServerSecurity(tls_cert=str(cert.cert), tls_key=str(cert.key), tls_client_ca=str(TestCA(tmp_path,
                                                                                                         "c").path))):
        server = ServiceServer("probe", port=0, security=ok)
        assert server.host == "0.0.0.0"
        server.stop(0)
    with caplog.at_level(logging.WARNING, logger="edgetune.services.common.server"):
        anyway = ServiceServer("probe", port=0, security=ServerSecurity(tls_cert=str(cert.cert), tls_key=str(cert.key),
                                                                         insecure=True))
    assert "every caller has every right" in caplog.text
    anyway.stop(0)


def test_a_tls_setup_the_server_cannot_use_exits_2_with_one_line_naming_the_flag(tmp_path, token_file, capsys):
    """Issue 26: the chart's TLS refusal was a Python traceback (gRPC's "Failed to bind" RuntimeError on a
    certificate or key it could not use). The coordinator as the chart starts it (``main`` with its flags),
    in this process: exit 2, one ``error:`` line naming the flag and what is allowed, no traceback."""
    ca = TestCA(tmp_path)
    good, other = ca.server(), ca.server("other")
    garbage = private(tmp_path / "garbage.pem", "not a PEM file\n")
    encrypted = tmp_path / "encrypted.key"
    key = serialization.load_pem_private_key(good.key.read_bytes(), None)
    encrypted.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                            serialization.BestAvailableEncryption(b"passphrase")))
    base = ["--port", "0", "--metrics-port", "0", "--redis", "memory://", "--kube", "none"]
    cases = [  # (TLS flags, the flag the error names, what the line says is allowed or wrong)
        (["--tls-cert", str(good.cert), "--tls-key", str(good.key)], "--tls-client-ca/--auth-tokens", "--insecure"),
        (["--tls-cert", str(garbage), "--tls-key", str(good.key), "--auth-tokens", str(token_file)],
         "--tls-cert", "BEGIN CERTIFICATE"),
        (["--tls-cert", str(good.cert), "--tls-key", str(garbage), "--auth-tokens", str(token_file)],
         "--tls-key", "PEM private key"),
        (["--tls-cert", str(good.cert), "--tls-key", str(encrypted), "--auth-tokens", str(token_file)],
         "--tls-key", "unencrypted"),
        (["--tls-cert", str(good.cert), "--tls-key", str(other.key), "--auth-tokens", str(token_file)],
         "--tls-key", "not the key of the certificate"),
        (["--tls-cert", str(tmp_path / "missing.crt"), "--tls-key", str(good.key), "--auth-tokens", str(token_file)],
         "--tls-cert", "cannot read"),
        (["--tls-cert", str(good.cert), "--tls-key", str(good.key), "--tls-client-ca", str(garbage)],
         "--tls-client-ca", "BEGIN CERTIFICATE"),
    ]
    env = {"EDGETUNE_INSECURE": "", "EDGETUNE_AUTH_TOKENS": "", "EDGETUNE_TLS_CLIENT_CA": ""}
    with pytest.MonkeyPatch.context() as mp:
        for name, value in env.items():
            mp.setenv(name, value)
        for flags, flag, says in cases:
            code = coordinator_main([*base, *flags])
            err = capsys.readouterr().err
            lines = [line for line in err.splitlines() if line.startswith("error: ")]
            assert code == 2, (flags, err)
            assert "Traceback" not in err and len(lines) == 1, (flags, err)
            assert lines[0].startswith(f"error: {flag}:") and says in lines[0], (flags, lines[0])
    # The certificate and key that belong together start (and stop).
    server = ServiceServer("probe", port=0, security=ServerSecurity(tls_cert=str(good.cert), tls_key=str(good.key),
                                                                     auth_tokens=str(token_file)))
    server.stop(0)


def test_a_port_in_use_exits_2_naming_the_flag_not_a_traceback(capsys):
    # gRPC raised RuntimeError ("Failed to bind") where the server expected port 0. A plain socket holds
    # the port (another gRPC server would share it: SO_REUSEPORT).
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        code = coordinator_main(["--port", str(busy.getsockname()[1]), "--metrics-port", "0", "--redis", "memory://",
                                 "--kube", "none"])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err, err
    assert any(line.startswith("error: ") and "--port" in line and "in use" in line for line in err.splitlines()), err


def test_tokens_in_clear_text_on_a_network_address_need_insecure(token_file):
    done = serve_cli("--auth-tokens", str(token_file), "--host", "0.0.0.0", timeout_s=45)
    assert done.returncode == 2 and "clear text" in done.stderr and "--tls-cert" in done.stderr, done.stderr


# --------------------------------------------------------------------------- token files


def test_a_token_file_readable_by_group_or_others_is_refused_naming_file_and_mode(tmp_path):
    path = tmp_path / "tokens.yaml"
    path.write_text(yaml.safe_dump({"tokens": [{"token": ALICE, "role": "operator", "name": "alice"}]}))
    for mode in (0o644, 0o640, 0o604, 0o620):
        path.chmod(mode)
        with pytest.raises(InvalidArgument, match=f"{path} has mode {mode:04o}"):
            load_tokens(path)
    path.chmod(0o644)
    done = serve_cli("--auth-tokens", str(path), timeout_s=45)
    assert done.returncode == 2 and str(path) in done.stderr and "0644" in done.stderr, done.stderr
    path.chmod(0o600)
    assert load_tokens(path).identify(ALICE).name == "alice"
    path.chmod(0o400)
    assert len(load_tokens(path)) == 1


def test_token_names_are_unique_and_tokens_may_be_stored_hashed():
    with pytest.raises(InvalidArgument) as err:
        parse_tokens({"tokens": [{"token": "a" * 20, "role": "operator", "name": "alice"},
                                 {"token": "b" * 20, "role": "viewer", "name": "alice"}]})
    assert err.value.field.endswith("tokens[1].name") and "tokens[0]" in err.value.message
    table = parse_tokens({"tokens": [{"token": hash_token("a" * 20), "role": "operator", "name": "alice"},
                                     {"token": "b" * 20, "role": "viewer", "name": "vera"}]})
    assert table.identify("a" * 20).name == "alice" and table.identify(hash_token("a" * 20)) is None
    assert table.identify("b" * 20).name == "vera"
    assert all(len(digest) == 32 for digest, _who in table.entries)  # only digests are kept, never a token
    with pytest.raises(InvalidArgument, match="hashed tokens only"):
        parse_tokens({"tokens": [{"token": "b" * 20, "role": "viewer", "name": "vera"}]}, hashed_only=True)
    for bad in ("sha256:abc", "sha256:" + "z" * 64):
        with pytest.raises(InvalidArgument, match="not a SHA-256 digest"):
            parse_tokens({"tokens": [{"token": bad, "role": "viewer", "name": "vera"}]})
    with pytest.raises(InvalidArgument, match="appears twice"):  # a plain token and its own digest are one token
        parse_tokens({"tokens": [{"token": "a" * 20, "role": "viewer", "name": "v"},
                                 {"token": hash_token("a" * 20), "role": "admin", "name": "r"}]})


# --------------------------------------------------------------------------- service-account tokens


def _node(node_id: str) -> coordinator_pb2.NodeInfo:
    return coordinator_pb2.NodeInfo(node_id=node_id, hostname=node_id, address="127.0.0.1:50051",
                                    device=spec_to_proto(get_spec("orin-agx")), power_budget_w=30.0)


@pytest.fixture
def issuers(tmp_path):
    rsa_issuer, ec_issuer = Issuer("rsa"), Issuer("ec")
    return rsa_issuer, ec_issuer, write_jwks(tmp_path / "jwks.json", rsa_issuer, ec_issuer)


@pytest.fixture
def coordinator(issuers, token_file):
    _rsa, _ec, jwks = issuers
    security = ServerSecurity(auth_tokens=str(token_file), agent_jwks=str(jwks), agent_service_accounts=(AGENT_SA,))
    with MemoryStore() as store, harness.coordinator(store, security=security) as c:
        yield c, store


def stub_with(address: str, token: str) -> coordinator_pb2_grpc.CoordinatorStub:
    return coordinator_pb2_grpc.CoordinatorStub(open_channel(address, ClientSecurity(token=token)))


def test_an_agent_acts_for_the_node_its_service_account_token_names_only(coordinator, issuers):
    c, store = coordinator
    rsa_issuer, ec_issuer, _jwks = issuers
    a = stub_with(c.server.address, rsa_issuer.token("jetson-a"))
    b = stub_with(c.server.address, ec_issuer.token("jetson-b"))  # ES256 as well as RS256
    assert a.RegisterNode(coordinator_pb2.RegisterNodeRequest(node=_node("jetson-a"))).node_id == "jetson-a"
    assert b.RegisterNode(coordinator_pb2.RegisterNodeRequest(node=_node(""))).node_id == "jetson-b"  # its own
    # Node a's credential acting on node b: every node-scoped call refused, nothing changed.
    hijack = coordinator_pb2.RegisterNodeRequest(node=coordinator_pb2.NodeInfo(
        node_id="jetson-b", hostname="x", address="10.6.6.6:1", device=spec_to_proto(get_spec("orin-agx"))))
    assert code_of(lambda: a.RegisterNode(hijack)) == DENIED
    assert code_of(lambda: a.Heartbeat(coordinator_pb2.HeartbeatRequest(node_id="jetson-b", state="ready"))) == DENIED
    assert code_of(lambda: a.WatchConfig(coordinator_pb2.WatchConfigRequest(node_id="jetson-b"))) == DENIED
    assert code_of(lambda: a.GetNodeConfig(coordinator_pb2.GetNodeConfigRequest(node_id="jetson-b"))) == DENIED
    cut = coordinator_pb2.UpdateBudgetRequest(node_id="jetson-b", budgets=common_pb2.Budgets(power_budget_w=5.0))
    assert code_of(lambda: a.UpdateBudget(cut)) == DENIED
    assert code_of(lambda: a.ListNodes(coordinator_pb2.ListNodesRequest())) == DENIED
    alice = stub_with(c.server.address, ALICE)
    nodes = {n.node_id: n for n in alice.ListNodes(coordinator_pb2.ListNodesRequest()).nodes}
    assert nodes["jetson-b"].address == "127.0.0.1:50051" and nodes["jetson-b"].power_budget_w == 30.0
    assert not a.Heartbeat(coordinator_pb2.HeartbeatRequest(node_id="jetson-a", state="ready")).reregister
    audit = {(r.method, r.who, r.via, r.outcome) for r in store.audit_records(100)}
    assert ("RegisterNode", "jetson-a", "serviceaccount", "OK") in audit
    assert ("RegisterNode", "jetson-a", "serviceaccount", "PERMISSION_DENIED") in audit


def _tampered(token: str, node: str) -> str:
    import base64

    header, claims, signature = token.split(".")
    doc = json.loads(base64.urlsafe_b64decode(claims + "=" * (-len(claims) % 4)))
    doc["kubernetes.io"]["node"]["name"] = node
    forged = base64.urlsafe_b64encode(json.dumps(doc).encode()).rstrip(b"=").decode()
    return f"{header}.{forged}.{signature}"


def test_forged_expired_or_foreign_service_account_tokens_are_unauthenticated(coordinator, issuers):
    c, store = coordinator
    rsa_issuer, ec_issuer, _jwks = issuers
    stranger = Issuer("rsa", kid=rsa_issuer.kid)  # same key id, another key: a forged issuer
    register = coordinator_pb2.RegisterNodeRequest(node=_node("jetson-b"))
    bad = {
        "claims edited (node b)": _tampered(rsa_issuer.token("jetson-a"), "jetson-b"),
        "ES256 claims edited": _tampered(ec_issuer.token("jetson-a"), "jetson-b"),
        "another key": stranger.token("jetson-b"),
        "expired": rsa_issuer.token("jetson-b", issued_s=time.time() - 7200, lifetime_s=600),
        "not yet valid": rsa_issuer.token("jetson-b", issued_s=time.time() + 3600),
        "the API server's audience": rsa_issuer.token("jetson-b", audience="https://kubernetes.default.svc"),
        "another service account": rsa_issuer.token("jetson-b", account="default"),
        "another namespace": rsa_issuer.token("jetson-b", namespace="kube-system"),
        "no node claim": rsa_issuer.token("jetson-b", **{"kubernetes.io": {
            "namespace": "edgetune", "serviceaccount": {"name": "edgetune-agent"}}}),
        "alg none": ".".join([*rsa_issuer.token("jetson-b").split(".")[:2], ""]).replace(
            rsa_issuer.token("jetson-b").split(".")[0], "eyJhbGciOiAibm9uZSJ9"),
    }
    for why, token in bad.items():
        assert code_of(lambda t=token: stub_with(c.server.address, t).RegisterNode(register)) == UNAUTHENTICATED, why
    assert not stub_with(c.server.address, ALICE).ListNodes(coordinator_pb2.ListNodesRequest()).nodes
    refused = [r for r in store.audit_records(100) if r.method == "RegisterNode"]
    assert refused and all(r.outcome == "UNAUTHENTICATED" and r.who == "unauthenticated" for r in refused)


def test_the_issuer_rotating_its_keys_is_followed_from_the_jwks_file(coordinator, issuers):
    c, _store = coordinator
    rsa_issuer, ec_issuer, jwks = issuers
    fresh = Issuer("ec")
    register = coordinator_pb2.RegisterNodeRequest(node=_node("jetson-c"))
    assert code_of(lambda: stub_with(c.server.address, fresh.token("jetson-c")).RegisterNode(register)) \
        == UNAUTHENTICATED
    time.sleep(0.01)
    write_jwks(jwks, fresh)  # the old keys retired, a new one published
    os.utime(jwks, (time.time() + 5, time.time() + 5))
    assert stub_with(c.server.address, fresh.token("jetson-c")).RegisterNode(register).node_id == "jetson-c"
    assert code_of(lambda: stub_with(c.server.address, rsa_issuer.token("jetson-c")).RegisterNode(register)) \
        == UNAUTHENTICATED


def test_the_api_servers_jwks_endpoint_is_fetched_with_the_pods_token_and_refetched_for_a_new_key(tmp_path):
    ca = TestCA(tmp_path)
    cert = ca.server()
    old, new = Issuer("rsa"), Issuer("ec")
    served = {"keys": [old.jwk]}
    seen_auth: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - http.server's name
            seen_auth.append(self.headers.get("Authorization", ""))
            body = json.dumps(served).encode() if self.path == "/openid/v1/jwks" else b"{}"
            self.send_response(200 if self.path == "/openid/v1/jwks" else 404)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert.cert, cert.key)
    httpd.socket = context.wrap_socket(httpd.socket, server_side=True)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        pod_token = private(tmp_path / "token", "the-coordinators-own-token")
        source = JwksSource(f"https://localhost:{httpd.server_address[1]}/openid/v1/jwks", token_file=str(pod_token),
                            ca_file=str(ca.path), min_fetch_s=0.0)
        verifier = JwksVerifier(source, AgentTokenPolicy(service_accounts=(AGENT_SA,)))
        assert verifier.identify(old.token("jetson-a")).nodes == ("jetson-a",)
        assert seen_auth == ["Bearer the-coordinators-own-token"]
        served["keys"] = [new.jwk]  # the issuer rotated: an unknown key id fetches again
        assert verifier.identify(new.token("jetson-b")).name == "jetson-b"
        assert len(seen_auth) == 2
        with pytest.raises(TokenRefused):
            verifier.identify(Issuer("ec").token("jetson-b"))
    finally:
        httpd.shutdown()


def test_an_agent_sends_its_projected_token_from_a_file_and_registers_as_its_node(coordinator, issuers, tmp_path):
    c, _store = coordinator
    rsa_issuer, _ec, _jwks = issuers
    token_path = private(tmp_path / "sa-token", rsa_issuer.token("jetson-k"))
    source = TokenSource(path=str(token_path))
    first = source.current()
    agent = serve_agent("sim:orin-agx", port=0, redis_url="none", state_dir=tmp_path / "state", block=False,
                        coordinator=c.server.address, client=ClientSecurity(token_file=str(token_path)),
                        grace_s=0.5, telemetry_hz=0)
    try:
        alice = stub_with(c.server.address, ALICE)
        ids = harness.wait_for(lambda: [n.node_id for n in alice.ListNodes(coordinator_pb2.ListNodesRequest()).nodes]
                               or None, 20, "the agent's registration")
        assert ids == ["jetson-k"]
    finally:
        agent.stop(0)
    token_path.write_text(rsa_issuer.token("jetson-k"))  # kubelet rotates the token: the next call sends the new one
    assert source.current() != first


def test_a_hashed_only_server_refuses_a_file_with_a_plain_token(tmp_path):
    path = private(tmp_path / "tokens.yaml", yaml.safe_dump({"tokens": [{"token": ALICE, "role": "operator",
                                                                          "name": "alice"}]}))
    with pytest.raises(InvalidArgument, match="hashed tokens only"):
        ServiceServer("probe", port=0, security=ServerSecurity(auth_tokens=str(path), hashed_tokens_only=True))


def test_a_coordinator_starts_while_the_issuers_keys_are_away_and_refuses_agents_until_they_come(tmp_path):
    from edgetune.services.common.server import listen_host

    security = ServerSecurity(auth_tokens=str(private(tmp_path / "t.yaml", "tokens: []\n")),
                              agent_jwks="https://127.0.0.1:9/openid/v1/jwks", agent_service_accounts=(AGENT_SA,))
    verifier = security.agent_verifier()  # no fetch yet: the start does not wait for the API server
    assert verifier is not None and listen_host("", security) == "127.0.0.1"
    with pytest.raises(TokenRefused, match="keys are not available"):
        verifier.identify(Issuer("rsa").token("jetson-a"))
    with pytest.raises(TokenRefused, match="keys are not available"):  # asked again within 10 s: not fetched again
        verifier.identify(Issuer("rsa").token("jetson-a"))
