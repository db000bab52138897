"""Issue 25, secure chart defaults (the chart rendered with the Helm engine, no cluster):

- an agent pod holds only its own identity: its pod's projected service-account token (audience
  ``edgetune``, naming its node), a token file of SHA-256 digests it must refuse otherwise, its own
  certificate; no Redis credential, no operator or admin token, no other node's credential;
- it mounts read-only what it only reads and write access to the EMC clock's debugfs directories
  only (and, given the GPU's devfreq path, to the clock files' directories only);
- every service knows its callers (tokens and TLS, never TLS alone); the coordinator verifies the
  agents with the cluster's issuer keys;
- Redis: ACL users per role from an aclfile of hashed passwords (the same users and rules as
  ``edgetune.store.acl``), the default user off, protected mode on, AOF on, TLS with the chart's
  certificates, no password on a command line, no agent among its clients.
"""

from __future__ import annotations

import base64
import re
from typing import Any

import pytest
import yaml
from chart_render import manifests, render

pytest.importorskip("helm_python", reason="helm-python-sdk (the deploy extra) is not installed")

from edgetune.identity import ServerSecurity, parse_tokens  # noqa: E402
from edgetune.services.common.server import listen_host  # noqa: E402
from edgetune.store.acl import acl_file  # noqa: E402

SERVICES = ("agent", "coordinator", "estimator", "optimizer")


def objs(values: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    return manifests(render(values))


def component(obj: dict[str, Any]) -> str:
    return obj["metadata"].get("labels", {}).get("app.kubernetes.io/component", "")


def workload(all_objs: list[dict[str, Any]], comp: str) -> dict[str, Any]:
    (w,) = [o for o in all_objs if o["kind"] in ("Deployment", "DaemonSet", "StatefulSet") and component(o) == comp]
    return w


def spec_of(w: dict[str, Any]) -> dict[str, Any]:
    return w["spec"]["template"]["spec"]


def env_of(container: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {e["name"]: e for e in container.get("env", [])}


def secret(all_objs: list[dict[str, Any]], name: str) -> dict[str, str]:
    (s,) = [o for o in all_objs if o["kind"] == "Secret" and o["metadata"]["name"] == name]
    return {k: base64.b64decode(v).decode() for k, v in s["data"].items()}


def secret_refs(pod_spec: dict[str, Any]) -> set[tuple[str, str]]:
    """Every (Secret, key) a pod's containers and volumes reach."""
    refs = set()
    for c in pod_spec["containers"] + pod_spec.get("initContainers", []):
        for e in c.get("env", []):
            ref = e.get("valueFrom", {}).get("secretKeyRef")
            if ref:
                refs.add((ref["name"], ref["key"]))
    for v in pod_spec.get("volumes", []):
        if "secret" in v:
            items = v["secret"].get("items") or [{"key": "*"}]
            refs |= {(v["secret"]["secretName"], i["key"]) for i in items}
    return refs


def test_an_agent_pod_holds_its_own_identity_and_nothing_it_could_replay_elsewhere():
    rendered = objs()
    agent = spec_of(workload(rendered, "agent"))
    c = agent["containers"][0]
    env = env_of(c)
    # No store credential: its node's jobs come through the coordinator.
    assert env["EDGETUNE_REDIS"] == {"name": "EDGETUNE_REDIS", "value": "none"} and "EDGETUNE_REDIS_PASSWORD" not in env
    # Every Secret it can read: its certificate, and the token file (digests only).
    assert secret_refs(agent) == {("edgetune-agent-tls", "*"), ("edgetune-tokens", "tokens.yaml")}
    assert "EDGETUNE_TOKEN" not in env  # no shared agent token
    tokens = secret(rendered, "edgetune-tokens")
    table = parse_tokens(yaml.safe_load(tokens["tokens.yaml"]), hashed_only=True)  # nothing replayable in it
    assert env["EDGETUNE_HASHED_TOKENS_ONLY"]["value"] == "true"
    assert {who.name for _d, who in table.entries} == {"admin", "coordinator"}
    assert tokens["admin"] not in tokens["tokens.yaml"] and tokens["coordinator"] not in tokens["tokens.yaml"]
    # Its identity: a projected service-account token for the audience edgetune, naming its node.
    (identity,) = [v for v in agent["volumes"] if v["name"] == "agent-identity"]
    (source,) = identity["projected"]["sources"]
    assert source["serviceAccountToken"]["audience"] == "edgetune" and source["serviceAccountToken"]["path"] == "token"
    assert env["EDGETUNE_TOKEN_FILE"]["value"] == "/var/run/secrets/edgetune/token"
    assert agent["automountServiceAccountToken"] is False  # no token the API server would take
    # The coordinator takes exactly the agents' service account as agents.
    coordinator = env_of(spec_of(workload(rendered, "coordinator"))["containers"][0])
    assert coordinator["EDGETUNE_AGENT_JWKS"]["value"] == "kubernetes"
    assert coordinator["EDGETUNE_AGENT_SERVICE_ACCOUNT"]["value"] == f"edgetune:{agent['serviceAccountName']}"


def test_the_agent_mounts_read_only_what_it_only_reads():
    agent = spec_of(workload(objs(), "agent"))
    host = {v["name"]: v["hostPath"]["path"] for v in agent["volumes"] if "hostPath" in v}
    mounts = {m["name"]: m for m in agent["containers"][0]["volumeMounts"]}
    writable = {host[n] for n, m in mounts.items() if n in host and not m.get("readOnly")}
    # debugfs: the EMC clock's directory only (its rate table read-only), never /sys/kernel/debug.
    assert "/sys/kernel/debug" not in host.values()
    assert writable == {"/sys/devices", "/sys/kernel/debug/bpmp/debug/clk/emc", "/var/lib/edgetune"}
    assert all(m.get("readOnly") for n, m in mounts.items() if n in ("auth", "tls", "agent-identity"))
    # Given the GPU's devfreq path, /sys/devices itself is read-only.
    gpu = "/sys/devices/platform/bus@0/17000000.gpu/devfreq/17000000.gpu"
    narrow = spec_of(workload(objs({"agent": {"hostAccess": {"gpuDevfreqDirs": [gpu]}}}), "agent"))
    host = {v["name"]: v["hostPath"]["path"] for v in narrow["volumes"] if "hostPath" in v}
    mounts = {m["name"]: m for m in narrow["containers"][0]["volumeMounts"]}
    writable = {host[n] for n, m in mounts.items() if n in host and not m.get("readOnly")}
    assert writable == {"/sys/devices/system/cpu", gpu, "/sys/kernel/debug/bpmp/debug/clk/emc", "/var/lib/edgetune"}
    assert mounts["host-sys-devices"]["readOnly"] is True
    assert {m["mountPath"] for m in mounts.values()} >= {"/host/sys/devices/system/cpu", f"/host{gpu}"}
    nano = objs({"agent": {"hostAccess": {"debugfsPaths": [{"path": "clk/emc"},
                                                            {"path": "clk/override.emc", "writable": True}]}}})
    mounts = {m["mountPath"]: m for m in spec_of(workload(nano, "agent"))["containers"][0]["volumeMounts"]}
    assert mounts["/host/sys/kernel/debug/clk/emc"]["readOnly"] is True
    assert not mounts["/host/sys/kernel/debug/clk/override.emc"].get("readOnly")


def _security_of(container: dict[str, Any]) -> ServerSecurity:
    env = {k: v.get("value", "") for k, v in env_of(container).items()}
    accounts = tuple(a for a in env.get("EDGETUNE_AGENT_SERVICE_ACCOUNT", "").split(",") if a)
    return ServerSecurity(tls_cert=env.get("EDGETUNE_TLS_CERT", ""), tls_key=env.get("EDGETUNE_TLS_KEY", ""),
                          auth_tokens=env.get("EDGETUNE_AUTH_TOKENS", ""), insecure=env.get("EDGETUNE_INSECURE") == "true",
                          agent_jwks=env.get("EDGETUNE_AGENT_JWKS", ""), agent_service_accounts=accounts)


@pytest.mark.parametrize("values", [None, {"security": {"tokens": {"existingSecret": "mine"}}}],
                         ids=["default", "own-tokens"])
def test_every_service_knows_its_callers_and_serves_on_its_pod_address(values):
    rendered = objs(values)
    for comp in SERVICES:
        security = _security_of(spec_of(workload(rendered, comp))["containers"][0])
        assert security.tls and security.authenticates and not security.insecure, comp
        assert listen_host("0.0.0.0", security) == "0.0.0.0"  # what the chart sets: starts (not TLS alone)
    for obj in rendered:  # the installer's own token is in no pod
        if obj["kind"] in ("Deployment", "DaemonSet", "StatefulSet"):
            assert not {r for r in secret_refs(spec_of(obj)) if r[1] == "admin"}, obj["metadata"]["name"]


def test_redis_users_per_role_from_hashed_passwords_protected_aof_and_tls():
    rendered = objs()
    auth = secret(rendered, "edgetune-redis-auth")
    passwords = {role: auth[f"{role}-password"] for role in ("coordinator", "estimator", "optimizer", "probe")}
    assert auth["users.acl"] == acl_file(passwords)  # the store's users and rules, exactly
    assert not any(p in auth["users.acl"] for p in passwords.values())
    assert len(set(passwords.values())) == 4 and all(len(p) >= 32 for p in passwords.values())
    (conf,) = [o for o in rendered if o["kind"] == "ConfigMap" and component(o) == "redis"]
    lines = {ln.strip() for ln in conf["data"]["redis.conf"].splitlines()}
    assert {"protected-mode yes", "aclfile /etc/redis/acl/users.acl", "appendonly yes", "port 0", "tls-port 6379",
            "tls-cert-file /etc/redis/tls/tls.crt"} <= lines
    assert not [ln for ln in lines if ln.startswith(("requirepass", "masterauth", "user "))]
    redis = spec_of(workload(rendered, "redis"))
    c = redis["containers"][0]
    assert c["args"] == ["/etc/redis/redis.conf"] and not re.search("pass", " ".join(c["command"] + c["args"]))
    assert c["readinessProbe"]["exec"]["command"][:3] == ["redis-cli", "--user", "probe"]
    assert env_of(c)["REDISCLI_AUTH"]["valueFrom"]["secretKeyRef"]["key"] == "probe-password"
    # Each control-plane service reads its own user's password; the agent none.
    for comp in ("coordinator", "estimator", "optimizer"):
        env = env_of(spec_of(workload(rendered, comp))["containers"][0])
        assert env["EDGETUNE_REDIS_PASSWORD"]["valueFrom"]["secretKeyRef"]["key"] == f"{comp}-password"
        assert env["EDGETUNE_REDIS"]["value"].startswith(f"rediss://{comp}:$(EDGETUNE_REDIS_PASSWORD)@")
    assert {r[0] for r in secret_refs(spec_of(workload(rendered, "agent")))}.isdisjoint({"edgetune-redis-auth"})
    policies = {p["metadata"]["name"]: p["spec"] for p in rendered if p["kind"] == "NetworkPolicy"}
    clients = policies["edgetune-redis"]["ingress"][0]["from"][0]["podSelector"]["matchExpressions"][1]["values"]
    assert set(clients) == {"coordinator", "estimator", "optimizer"}
    agent_egress = policies["edgetune-agent"]["egress"]
    assert all("redis" not in str(rule) for rule in agent_egress)
    plain = objs({"security": {"tls": {"mode": "none"}, "insecure": True}})  # no certificates: no Redis TLS
    (conf,) = [o for o in plain if o["kind"] == "ConfigMap" and component(o) == "redis"]
    assert "port 6379" in conf["data"]["redis.conf"] and "tls-port" not in conf["data"]["redis.conf"]
