"""The Helm chart (charts/edgetune), rendered with the real Helm engine for the default values
and every deploy/values-examples/*.yaml: lint, Kubernetes schema validity, the properties that
matter (placement, privileges, RBAC, probes, persistence, policies), the values schema, image
hygiene, and a checkov scan whose findings must all be justified in charts/edgetune/README.md.
"""

from __future__ import annotations

import functools
import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
from chart_render import CHART, EXAMPLES, ROOT, load_values, manifests, render, to_yaml

helm = pytest.importorskip("helm_python", reason="helm-python-sdk (the deploy extra) is not installed")
kubernetes_validate = pytest.importorskip("kubernetes_validate", reason="the deploy extra is not installed")
# kubernetes-validate reads and parses its schema files again on every call (~1.3 s of each variant's
# validation); the files do not change during a run, so each is parsed once
kubernetes_validate.utils.schema_contents = functools.cache(kubernetes_validate.utils.schema_contents)

VARIANTS = ["default"] + sorted(p.name for p in EXAMPLES.glob("*.yaml"))
#: Kubernetes versions every manifest must validate against (strict: unknown fields fail).
KUBE_VERSIONS = ("1.30.0", kubernetes_validate.latest_version())
WORKLOAD_KINDS = ("Deployment", "DaemonSet", "StatefulSet")
SERVICES = ("agent", "coordinator", "estimator", "optimizer")


@functools.cache
def objects(variant: str, api_versions: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    return manifests(render(load_values(variant), api_versions=api_versions))


def render_with(values: dict[str, Any], api_versions: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    return manifests(render(values, api_versions=api_versions))


def component(obj: dict[str, Any]) -> str:
    return obj["metadata"].get("labels", {}).get("app.kubernetes.io/component", "")


def workloads(objs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [o for o in objs if o["kind"] in WORKLOAD_KINDS]


def find(objs: list[dict[str, Any]], kind: str, comp: str | None = None) -> list[dict[str, Any]]:
    return [o for o in objs if o["kind"] == kind and (comp is None or component(o) == comp)]


def pod_spec(obj: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = obj["spec"]["template"]["spec"]
    return spec


def env_of(container: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {e["name"]: e for e in container.get("env", [])}


# --------------------------------------------------------------------------- lint / validity


@pytest.mark.parametrize("variant", VARIANTS)
def test_helm_lint_is_clean(variant: str) -> None:
    report = helm.lint(str(CHART), load_values(variant), strict=True, namespace="edgetune",
                       kube_version="v1.30.0")
    problems = [m for m in report["messages"] if m["severity"] >= 2]  # warnings and errors
    assert not problems and not report["errors"], report


@pytest.mark.parametrize("variant", VARIANTS)
def test_every_manifest_is_valid_kubernetes(variant: str) -> None:
    objs = objects(variant)
    assert objs
    for obj in objs:
        if obj["apiVersion"].startswith(("ray.io/", "monitoring.coreos.com/", "cert-manager.io/")):
            continue  # a CRD (KubeRay, Prometheus Operator, cert-manager): no schema in kubernetes-validate
        for version in KUBE_VERSIONS:
            try:
                kubernetes_validate.validate(obj, version, strict=True)
            except kubernetes_validate.ValidationError as exc:
                pytest.fail(f"{variant}: {obj['kind']}/{obj['metadata']['name']} invalid for {version}: {exc}")


@pytest.mark.parametrize("variant", VARIANTS)
def test_examples_pass_the_values_schema_and_names_are_unique(variant: str) -> None:
    with helm.Chart.load(CHART) as chart:
        chart.validate_schema(load_values(variant))
    keys = [(o["kind"], o["metadata"]["name"]) for o in objects(variant)]
    assert len(keys) == len(set(keys))


@pytest.mark.parametrize("bad, where", [
    ({"coordinator": {"replicas": -1}}, "/coordinator/replicas"),
    ({"coordinator": {"replicas": 0}}, "/coordinator/replicas"),
    ({"estimator": {"replicas": -1}}, "/estimator/replicas"),
    ({"agent": {"port": 70000}}, "/agent/port"),
    ({"agent": {"device": "gpu0"}}, "/agent/device"),
    ({"agent": {"privileged": "yes"}}, "/agent/privileged"),
    ({"redis": {"appendfsync": "sometimes"}}, "/redis/appendfsync"),
    ({"redis": {"external": {"url": "http://redis:6379"}}}, "/redis/external/url"),
    ({"ray": {"mode": "operator"}}, "/ray/mode"),
    ({"image": {"pullPolicy": "Sometimes"}}, "/image/pullPolicy"),
    ({"estimator": {"replica": 2}}, "replica"),  # a typo: unknown keys are refused
])
def test_values_schema_rejects_bad_values(bad: dict[str, Any], where: str) -> None:
    with pytest.raises(helm.HelmValuesError, match=re.escape(where)):
        render(bad)


def test_external_redis_without_url_fails_with_a_message() -> None:
    with pytest.raises(helm.HelmError, match="redis.external.url or redis.external.existingSecret"):
        render({"redis": {"enabled": False}})


# --------------------------------------------------------------------------- placement


@pytest.mark.parametrize("variant", VARIANTS)
def test_agent_daemonset_runs_only_on_jetson_nodes(variant: str) -> None:
    daemonsets = find(objects(variant), "DaemonSet")
    assert [component(d) for d in daemonsets] == ["agent"]
    spec = pod_spec(daemonsets[0])
    assert spec["nodeSelector"]["edgetune.io/jetson"] == "true"
    assert spec["hostPID"] is False and spec["hostNetwork"] is False and spec["hostIPC"] is False
    # Nothing else is pinned to Jetsons, and nothing else selects on the Jetson label.
    for w in workloads(objects(variant)):
        if w["kind"] != "DaemonSet":
            assert "edgetune.io/jetson" not in json.dumps(pod_spec(w).get("nodeSelector", {}))


def test_device_models_restrict_the_agent_through_node_affinity() -> None:
    ds = find(render_with({"agent": {"deviceModels": ["orin-agx", "orin-nano"]}}), "DaemonSet")[0]
    terms = pod_spec(ds)["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    expr = terms["nodeSelectorTerms"][0]["matchExpressions"][0]
    assert expr == {"key": "edgetune.io/device-model", "operator": "In", "values": ["orin-agx", "orin-nano"]}
    assert pod_spec(ds)["nodeSelector"]["edgetune.io/jetson"] == "true"


def test_agent_tolerates_the_edge_taints_and_user_node_selector_cannot_drop_the_jetson_label() -> None:
    ds = find(render_with({"agent": {"nodeSelector": {"edgetune.io/jetson": "false", "zone": "a"}}}), "DaemonSet")[0]
    assert pod_spec(ds)["nodeSelector"]["edgetune.io/jetson"] == "true"
    assert pod_spec(ds)["nodeSelector"]["zone"] == "a"
    keys = {t["key"] for t in pod_spec(find(objects("default"), "DaemonSet")[0])["tolerations"]}
    assert "edgetune.io/jetson" in keys


# --------------------------------------------------------------------------- privileges


@pytest.mark.parametrize("variant", VARIANTS)
def test_every_pod_and_container_has_a_restrictive_security_context(variant: str) -> None:
    for w in workloads(objects(variant)):
        spec = pod_spec(w)
        name = f"{variant}: {w['kind']}/{w['metadata']['name']}"
        psc = spec.get("securityContext")
        assert psc, f"{name}: no pod securityContext"
        assert psc["seccompProfile"]["type"] == "RuntimeDefault", name
        host_agent = component(w) == "agent" and any("hostPath" in v for v in spec.get("volumes", [])
                                                      if v["name"].startswith("host-"))
        for c in spec["containers"] + spec.get("initContainers", []):
            sc = c.get("securityContext")
            assert sc, f"{name}/{c['name']}: no container securityContext"
            assert sc["capabilities"]["drop"] == ["ALL"], name
            assert sc["readOnlyRootFilesystem"] is True, name
            assert sc["seccompProfile"]["type"] == "RuntimeDefault", name
            assert sc["privileged"] is False and sc["allowPrivilegeEscalation"] is False, name
            assert not sc["capabilities"].get("add"), name
            if host_agent:  # root only for the agent that writes the host's clock files
                assert sc["runAsUser"] == 0 and psc["runAsUser"] == 0, name
            else:
                assert sc["runAsNonRoot"] is True and psc["runAsNonRoot"] is True, name
                assert sc["runAsUser"] >= 10000, name


def test_agent_host_mounts_are_the_needed_subtrees_only() -> None:
    spec = pod_spec(find(objects("default"), "DaemonSet")[0])
    host = {v["name"]: v["hostPath"]["path"] for v in spec["volumes"] if "hostPath" in v}
    assert set(host.values()) == {"/sys/devices", "/sys/class", "/sys/bus", "/sys/firmware/devicetree/base",
                                  "/etc/nv_tegra_release", "/sys/kernel/debug/bpmp/debug/clk/emc",
                                  "/sys/kernel/debug/bpmp/debug/emc", "/var/lib/edgetune"}
    mounts = {m["name"]: m for m in spec["containers"][0]["volumeMounts"]}
    writable = {host[n] for n, m in mounts.items() if n in host and not m.get("readOnly")}
    assert writable == {"/sys/devices", "/sys/kernel/debug/bpmp/debug/clk/emc", "/var/lib/edgetune"}
    assert mounts["host-sys-devices"]["mountPath"] == "/host/sys/devices"
    env = env_of(spec["containers"][0])
    assert env["EDGETUNE_DEVICE"]["value"] == "sysfs:/host"
    assert env["EDGETUNE_STATE_DIR"]["value"] == "/var/lib/edgetune"
    # Only the agent touches the host.
    for w in workloads(objects("default")):
        if component(w) != "agent":
            assert not any("hostPath" in v for v in pod_spec(w).get("volumes", [])), w["metadata"]["name"]


def test_agent_debugfs_off_and_simulated_agent_is_non_root() -> None:
    spec = pod_spec(find(render_with({"agent": {"hostAccess": {"debugfs": False}}}), "DaemonSet")[0])
    assert "/sys/kernel/debug" not in {v["hostPath"]["path"] for v in spec["volumes"] if "hostPath" in v}
    spec = pod_spec(find(objects("simulated.yaml"), "DaemonSet")[0])
    assert not any("hostPath" in v for v in spec["volumes"])
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert "runtimeClassName" not in spec


def test_privileged_is_an_explicit_opt_in() -> None:
    c = pod_spec(find(render_with({"agent": {"privileged": True}}), "DaemonSet")[0])["containers"][0]
    assert c["securityContext"]["privileged"] is True
    c = pod_spec(find(objects("default"), "DaemonSet")[0])["containers"][0]
    assert c["securityContext"]["privileged"] is False


@pytest.mark.parametrize("variant", VARIANTS)
def test_only_the_coordinator_has_rbac_get_list_watch_nodes(variant: str) -> None:
    objs = objects(variant)
    assert not find(objs, "Role") and not find(objs, "RoleBinding")
    roles = find(objs, "ClusterRole")
    assert len(roles) == 1 and component(roles[0]) == "coordinator"
    assert roles[0]["rules"] == [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch"]}]
    bindings = {b["roleRef"]["name"]: b for b in find(objs, "ClusterRoleBinding")}
    # Its nodes role, and the built-in one that reads the issuer's keys verifying the agents' tokens.
    assert set(bindings) == {roles[0]["metadata"]["name"], "system:service-account-issuer-discovery"}
    coordinator_sa = pod_spec(find(objs, "Deployment", "coordinator")[0])["serviceAccountName"]
    for binding in bindings.values():
        assert component(binding) == "coordinator"
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": coordinator_sa, "namespace": "edgetune"}]
    # Tokens: mounted for the coordinator only.
    for w in workloads(objs):
        assert pod_spec(w)["automountServiceAccountToken"] is (component(w) == "coordinator"), w["metadata"]["name"]
    # One ServiceAccount per component, each pod on its own.
    sas = {pod_spec(w)["serviceAccountName"] for w in workloads(objs)}
    assert sas <= {s["metadata"]["name"] for s in find(objs, "ServiceAccount")}
    assert len({(component(w), pod_spec(w)["serviceAccountName"]) for w in workloads(objs)}) == len(
        {component(w) for w in workloads(objs)})


def test_node_access_off_means_no_rbac_and_no_token() -> None:
    # With the issuer's keys from a Secret the coordinator needs no token at all.
    objs = render_with({"coordinator": {"nodeAccess": False},
                        "security": {"agentIdentity": {"jwksSecret": "cluster-jwks"}}})
    assert not find(objs, "ClusterRole") and not find(objs, "ClusterRoleBinding")
    spec = pod_spec(find(objs, "Deployment", "coordinator")[0])
    assert spec["automountServiceAccountToken"] is False
    env = env_of(spec["containers"][0])
    assert env["EDGETUNE_KUBE"]["value"] == "none" and env["EDGETUNE_AGENT_JWKS"]["value"] == "/etc/edgetune/jwks/jwks.json"
    assert volumes_of(objs, "coordinator")["agent-jwks"]["secret"]["secretName"] == "cluster-jwks"
    # Else it keeps its token for /openid/v1/jwks only: no node role.
    objs = render_with({"coordinator": {"nodeAccess": False}})
    assert not find(objs, "ClusterRole")
    assert [b["roleRef"]["name"] for b in find(objs, "ClusterRoleBinding")] == ["system:service-account-issuer-discovery"]
    assert pod_spec(find(objs, "Deployment", "coordinator")[0])["automountServiceAccountToken"] is True


# --------------------------------------------------------------------------- services


@pytest.mark.parametrize("variant", VARIANTS)
def test_service_probes_are_grpc_on_the_plain_health_port(variant: str) -> None:
    objs = objects(variant)
    seen = set()
    for w in workloads(objs):
        if component(w) not in SERVICES:
            continue
        seen.add(component(w))
        c = pod_spec(w)["containers"][0]
        grpc_port = next(p["containerPort"] for p in c["ports"] if p["name"] == "grpc")
        env = env_of(c)
        for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
            # kubelet's gRPC probes speak no TLS: the services answer them on a plain health-only port.
            assert c[probe]["grpc"]["port"] == 8086 == int(env["EDGETUNE_HEALTH_PORT"]["value"]), \
                f"{w['metadata']['name']} {probe}"
        assert c["command"] == ["edgetune", "serve"] and c["args"][0] == (
            "profiler" if component(w) == "agent" else component(w))
        env = env_of(c)
        assert env["EDGETUNE_PORT"]["value"] == str(grpc_port)
        assert "EDGETUNE_REDIS" in env and "EDGETUNE_METRICS_PORT" in env
        assert c["resources"]["requests"] and c["resources"]["limits"]["memory"]
        annotations = w["spec"]["template"]["metadata"]["annotations"]
        assert annotations["prometheus.io/scrape"] == "true"
        assert annotations["prometheus.io/port"] == env["EDGETUNE_METRICS_PORT"]["value"]
    assert seen == set(SERVICES)
    for svc in find(objs, "Service"):
        assert svc["spec"]["type"] == "ClusterIP"


def test_coordinator_has_two_replicas_spread_and_a_pdb() -> None:
    objs = objects("default")
    (dep,) = find(objs, "Deployment", "coordinator")
    assert dep["spec"]["replicas"] == 2
    assert pod_spec(dep)["topologySpreadConstraints"]
    pdbs = {component(p): p for p in find(objs, "PodDisruptionBudget")}
    assert set(pdbs) == {"coordinator"} and pdbs["coordinator"]["spec"]["maxUnavailable"] == 1
    env = env_of(pod_spec(dep)["containers"][0])
    assert env["EDGETUNE_KUBE"]["value"] == "incluster"
    assert env["EDGETUNE_KUBE_SELECTOR"]["value"] == "edgetune.io/jetson=true"
    assert env["EDGETUNE_ESTIMATOR"]["value"] == "edgetune-estimator.edgetune.svc:50052"
    assert env["EDGETUNE_OPTIMIZER"]["value"] == "edgetune-optimizer.edgetune.svc:50053"
    assert env["EDGETUNE_LEASE_MS"]["value"] == "5000" and env["EDGETUNE_HEARTBEAT_TTL_S"]["value"] == "10"
    # Single coordinator: still a PDB that lets a drain through.
    objs = objects("single-coordinator.yaml")
    assert find(objs, "Deployment", "coordinator")[0]["spec"]["replicas"] == 1
    assert find(objs, "PodDisruptionBudget", "coordinator")[0]["spec"]["maxUnavailable"] == 1


def test_coordinator_leader_values_and_tuning_addresses_follow_the_values() -> None:
    default = env_of(pod_spec(find(objects("default"), "Deployment", "coordinator")[0])["containers"][0])
    assert (default["EDGETUNE_RECONCILE_S"]["value"], default["EDGETUNE_DRIFT_CHECK_S"]["value"],
            default["EDGETUNE_DRIFT_TIME_TOLERANCE"]["value"]) == ("1", "0", "0.25")
    objs = render_with({"coordinator": {"leaseMs": 3000, "heartbeatTtlS": 7.5, "reconcileS": 2,
                                        "driftCheckS": 300, "driftTimeTolerance": 0.3},
                        "optimizer": {"enabled": False}})
    env = env_of(pod_spec(find(objs, "Deployment", "coordinator")[0])["containers"][0])
    assert env["EDGETUNE_LEASE_MS"]["value"] == "3000" and env["EDGETUNE_HEARTBEAT_TTL_S"]["value"] == "7.5"
    assert (env["EDGETUNE_RECONCILE_S"]["value"], env["EDGETUNE_DRIFT_CHECK_S"]["value"],
            env["EDGETUNE_DRIFT_TIME_TOLERANCE"]["value"]) == ("2", "300", "0.3")
    assert env["EDGETUNE_ESTIMATOR"]["value"] == "edgetune-estimator.edgetune.svc:50052"
    assert "EDGETUNE_OPTIMIZER" not in env  # no optimizer deployed: the coordinator is told of none


def test_estimator_and_optimizer_get_a_pdb_only_with_replicas() -> None:
    objs = render_with({"estimator": {"replicas": 2}, "optimizer": {"replicas": 3}})
    assert {component(p) for p in find(objs, "PodDisruptionBudget")} == {"coordinator", "estimator", "optimizer"}


def test_image_tag_defaults_to_app_version_and_follows_image_tag() -> None:
    with helm.Chart.load(CHART) as chart:
        app_version = chart.metadata["appVersion"]
    images = {pod_spec(w)["containers"][0]["image"] for w in workloads(objects("default")) if component(w) in SERVICES}
    assert images == {f"ghcr.io/edgetune/edgetune:{app_version}", f"ghcr.io/edgetune/edgetune-agent:{app_version}"}
    objs = render_with({"image": {"tag": "0.2.0"}, "imagePullSecrets": [{"name": "regcred"}],
                        "optimizer": {"image": {"repository": "me/opt", "tag": "dev", "pullPolicy": "Always"}}})
    by = {component(w): pod_spec(w) for w in workloads(objs)}
    assert by["coordinator"]["containers"][0]["image"] == "ghcr.io/edgetune/edgetune:0.2.0"
    assert by["optimizer"]["containers"][0]["image"] == "ghcr.io/me/opt:dev"
    assert by["optimizer"]["containers"][0]["imagePullPolicy"] == "Always"
    assert all(s["imagePullSecrets"] == [{"name": "regcred"}] for s in by.values())


# --------------------------------------------------------------------------- redis


def test_bundled_redis_has_aof_a_pvc_and_a_password() -> None:
    objs = objects("default")
    (conf,) = [c for c in find(objs, "ConfigMap") if component(c) == "redis"]
    lines = {ln.strip() for ln in conf["data"]["redis.conf"].splitlines()}
    assert "appendonly yes" in lines and "appendfsync everysec" in lines
    (sts,) = find(objs, "StatefulSet", "redis")
    assert sts["spec"]["volumeClaimTemplates"][0]["spec"]["resources"]["requests"]["storage"] == "2Gi"
    c = pod_spec(sts)["containers"][0]
    assert {"name": "data", "mountPath": "/data"} in c["volumeMounts"]
    assert c["args"] == ["/etc/redis/redis.conf"]  # no password on the command line: an aclfile
    coordinator_env = env_of(service_containers(objs)["coordinator"])
    assert coordinator_env["EDGETUNE_REDIS"]["value"] == ("rediss://coordinator:$(EDGETUNE_REDIS_PASSWORD)@"
                                                          "edgetune-redis.edgetune.svc:6379/0"
                                                          "?ssl_ca_certs=/etc/edgetune/tls/ca.crt")
    secret = coordinator_env["EDGETUNE_REDIS_PASSWORD"]["valueFrom"]["secretKeyRef"]
    assert secret == {"name": "edgetune-redis-auth", "key": "coordinator-password"}
    assert secret["name"] in {s["metadata"]["name"] for s in find(objs, "Secret")}


def test_external_redis_replaces_the_statefulset() -> None:
    objs = objects("external-redis.yaml")
    assert not find(objs, "StatefulSet")
    for w in workloads(objs):
        redis_env = env_of(pod_spec(w)["containers"][0])["EDGETUNE_REDIS"]
        if component(w) == "agent":  # agents hold no store credential
            assert redis_env == {"name": "EDGETUNE_REDIS", "value": "none"}
            continue
        assert redis_env["valueFrom"]["secretKeyRef"] == {"name": "edgetune-redis-url", "key": "redis-url"}
    objs = render_with({"redis": {"enabled": False, "external": {"url": "rediss://:pw@r.example:6380/1"}}})
    (secret,) = [s for s in find(objs, "Secret") if s["metadata"]["name"] == "edgetune-redis-url"]
    assert secret["data"]["redis-url"]  # created by the chart from the value


# --------------------------------------------------------------------------- ray


def test_ray_uses_kuberay_when_the_api_is_served_else_deployments() -> None:
    values = {"ray": {"enabled": True}}
    with_api = render_with(values, api_versions=("ray.io/v1",))
    (cluster,) = [o for o in with_api if o["kind"] == "RayCluster"]
    assert cluster["apiVersion"] == "ray.io/v1"
    assert not [w for w in workloads(with_api) if component(w) == "ray"]
    est = env_of(pod_spec(find(with_api, "Deployment", "estimator")[0])["containers"][0])
    assert est["EDGETUNE_RAY_ADDRESS"]["value"] == f"ray://{cluster['metadata']['name']}-head-svc.edgetune.svc:10001"
    without = render_with(values)
    assert not [o for o in without if o["kind"] == "RayCluster"]
    ray = {w["metadata"]["name"] for w in workloads(without) if component(w) == "ray"}
    assert ray == {"edgetune-ray-head", "edgetune-ray-worker"}
    assert [o for o in objects("kuberay.yaml") if o["kind"] == "RayCluster"]  # mode: kuberay forces it


# --------------------------------------------------------------------------- network policies


def test_network_policies_default_deny_and_allowed_paths() -> None:
    objs = objects("default")
    pols = {p["metadata"]["name"]: p for p in find(objs, "NetworkPolicy")}
    deny = pols["edgetune-default-deny"]
    assert deny["spec"]["policyTypes"] == ["Ingress", "Egress"] and "ingress" not in deny["spec"]

    def peers(rule: dict[str, Any]) -> set[str]:
        return {p.get("podSelector", {}).get("matchLabels", {}).get("app.kubernetes.io/component", "?")
                for p in rule.get("from", rule.get("to", []))}

    coord = pols["edgetune-coordinator"]["spec"]
    assert {"agent", "coordinator"} <= peers(coord["ingress"][0])
    assert coord["ingress"][0]["ports"] == [{"port": 50054, "protocol": "TCP"}]
    # The coordinator calls the estimator, the optimizer and its leader replica; never an agent (they pull).
    assert {c for r in coord["egress"] for c in peers(r)} >= {"estimator", "optimizer", "coordinator"}
    assert "agent" not in {c for r in coord["egress"] for c in peers(r)}
    assert peers(pols["edgetune-estimator"]["spec"]["ingress"][0]) == {"coordinator"}
    assert peers(pols["edgetune-agent"]["spec"]["ingress"][0]) == {"?"}  # clients: by namespace and label
    redis_in = pols["edgetune-redis"]["spec"]["ingress"][0]["from"][0]["podSelector"]["matchExpressions"]
    assert set(redis_in[1]["values"]) == {"coordinator", "estimator", "optimizer"}  # never an agent
    metrics_rules = [r for r in pols["edgetune-agent"]["spec"]["ingress"] if r["ports"][0]["port"] == 9090]
    assert metrics_rules, "Prometheus scrape of the agent's metrics port"
    assert not find(objects("no-network-policies.yaml"), "NetworkPolicy")


# --------------------------------------------------------------------------- images, scripts


def dockerfiles() -> list[Path]:
    return sorted((ROOT / "deploy" / "docker").glob("Dockerfile*"))


@pytest.mark.parametrize("path", dockerfiles(), ids=lambda p: str(p.relative_to(ROOT)))
def test_dockerfile_hygiene(path: Path) -> None:
    text = path.read_text()
    args = dict(re.findall(r"^ARG\s+(\w+)=(\S+)", text, re.M))
    froms = re.findall(r"^FROM\s+(?:--platform=\S+\s+)?(\S+)", text, re.M)
    assert len(froms) >= 2, "multi-stage build expected"
    stages = set(re.findall(r"^FROM\s+.*\s+AS\s+(\w+)", text, re.M | re.I))
    for ref in froms:
        if ref in stages:
            continue
        resolved = re.sub(r"\$\{(\w+)\}", lambda m: args.get(m.group(1), m.group(0)), ref)
        assert "$" not in resolved, f"{ref}: base image from an ARG without a default"
        assert re.search(r":[\w.-]+$|@sha256:", resolved) and not resolved.endswith(":latest"), \
            f"{resolved}: base image tag not pinned"
    users = re.findall(r"^USER\s+(\S+)", text, re.M)
    # The profiler agent's image may stay root (it writes /sys); every service image may not.
    agent = path.name == "Dockerfile.agent"
    assert agent or users and users[-1].split(":")[0] not in ("root", "0"), "the image must end as a non-root USER"
    assert re.search(r'^ENTRYPOINT \["edgetune", ?"serve"[,\]]', text, re.M)


def test_local_run_script_is_valid_bash() -> None:
    script = ROOT / "deploy" / "local" / "run.sh"
    subprocess.run(["bash", "-n", str(script)], check=True)
    assert "edgetune serve" in script.read_text()


# --------------------------------------------------------------------------- checkov


def accepted_findings() -> dict[str, set[str]]:
    """check id -> resources ("*" or "Kind/component") from the README's justified table."""
    text = (CHART / "README.md").read_text()
    table = text[text.index("<!-- checkov-accepted"):]
    accepted: dict[str, set[str]] = {}
    for check, resources, why in re.findall(r"^\| (CKV\w+) \| ([^|]+) \| ([^|]+) \|$", table, re.M):
        assert len(why.strip()) > 30, f"{check}: give a reason"
        accepted.setdefault(check, set()).update(r.strip() for r in resources.split(","))
    return accepted


def checkov_executable() -> str:
    script = ROOT / "deploy" / "checkov" / "ensure-checkov.sh"
    try:
        done = subprocess.run([str(script)], capture_output=True, text=True, timeout=600)
    except subprocess.TimeoutExpired:
        pytest.skip("installing checkov took more than 10 minutes")
    if done.returncode != 0:  # offline, no python3.11 ...: the scan cannot run here
        pytest.skip(f"checkov could not be installed by {script.name}: {done.stderr.strip()[-300:]}")
    return done.stdout.strip().splitlines()[-1]


@pytest.mark.timeout(900)
def test_checkov_findings_are_all_justified(tmp_path: Path) -> None:
    checkov = checkov_executable()
    for variant in VARIANTS:
        (tmp_path / f"{variant.removesuffix('.yaml')}.yaml").write_text(to_yaml(render(load_values(variant))))
    done = subprocess.run([checkov, "-d", str(tmp_path), "--framework", "kubernetes", "-o", "json",
                           "--compact", "--quiet", "--skip-download"],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert done.returncode in (0, 1), done.stderr[-2000:]
    report = json.loads(done.stdout)
    reports = report if isinstance(report, list) else [report]
    assert sum(r.get("summary", r).get("resource_count", 0) for r in reports) > 0, "checkov scanned nothing"
    accepted = accepted_findings()
    unjustified = set()
    for r in reports:
        for f in r.get("results", {}).get("failed_checks", []):
            kind, _ns, name = f["resource"].split(".", 2)
            comp = name.removeprefix("edgetune-")
            allowed = accepted.get(f["check_id"], set())
            if "*" not in allowed and f"{kind}/{comp}" not in allowed:
                unjustified.add(f"{f['check_id']} {kind}/{comp} ({f['check_name']}) in {Path(f['file_path']).name}")
    assert not unjustified, "checkov findings not justified in charts/edgetune/README.md:\n" + "\n".join(
        sorted(unjustified))


# --------------------------------------------------------------------------- monitoring
MONITORING = {"metrics": {"podMonitor": {"enabled": True, "labels": {"release": "kube-prometheus-stack"}},
                          "serviceMonitor": {"enabled": True}, "dashboard": {"enabled": True}}}
DASHBOARD = CHART / "dashboards" / "edgetune-telemetry.json"
#: What Grafana needs of a dashboard (a minimal schema of its JSON model) and of each panel.
DASHBOARD_SCHEMA = {
    "type": "object",
    "required": ["uid", "title", "schemaVersion", "panels"],
    "properties": {
        "uid": {"type": "string", "pattern": "^[A-Za-z0-9_-]{1,40}$"},
        "title": {"type": "string", "minLength": 1},
        "schemaVersion": {"type": "integer", "minimum": 16},
        "templating": {"type": "object", "required": ["list"],
                       "properties": {"list": {"type": "array", "items": {
                           "type": "object", "required": ["name", "type"]}}}},
        "panels": {"type": "array", "minItems": 1, "items": {
            "type": "object",
            "required": ["id", "type", "title", "gridPos", "targets"],
            "properties": {
                "id": {"type": "integer"},
                "type": {"enum": ["timeseries", "stat", "gauge", "table", "bargauge", "text", "row"]},
                "title": {"type": "string", "minLength": 1},
                "gridPos": {"type": "object", "required": ["h", "w", "x", "y"],
                            "properties": {k: {"type": "integer", "minimum": 0} for k in ("h", "w", "x", "y")}},
                "targets": {"type": "array", "minItems": 1, "items": {
                    "type": "object", "required": ["refId", "expr"],
                    "properties": {"refId": {"type": "string"}, "expr": {"type": "string", "minLength": 1}}}},
            },
        }},
    },
}


def test_monitoring_objects_are_opt_in() -> None:
    kinds = {o["kind"] for o in objects("default")}
    assert not kinds & {"PodMonitor", "ServiceMonitor"}
    assert not any(o["kind"] == "ConfigMap" and o["metadata"]["name"].endswith("-dashboard") for o in objects("default"))


def test_pod_monitor_scrapes_the_agents_with_a_node_label_and_service_monitor_the_rest() -> None:
    objs = render_with(MONITORING)
    (pm,) = find(objs, "PodMonitor")
    (ds,) = find(objs, "DaemonSet", "agent")
    assert pm["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    selector = pm["spec"]["selector"]["matchLabels"]
    assert selector.items() <= ds["spec"]["template"]["metadata"]["labels"].items()
    (ep,) = pm["spec"]["podMetricsEndpoints"]
    ports = {p["name"] for c in pod_spec(ds)["containers"] for p in c["ports"]}
    assert ep["port"] == "metrics" in ports and ep["path"] == "/metrics"
    assert {"sourceLabels": ["__meta_kubernetes_pod_node_name"], "targetLabel": "node"} in ep["relabelings"]
    (sm,) = find(objs, "ServiceMonitor")
    allowed = sm["spec"]["selector"]["matchExpressions"][0]["values"]
    assert set(allowed) == {"coordinator", "estimator", "optimizer"}  # agents: the PodMonitor only
    for svc in find(objs, "Service"):
        labels = svc["metadata"]["labels"]
        if component(svc) in allowed:
            assert sm["spec"]["selector"]["matchLabels"].items() <= labels.items()
            assert "metrics" in {p["name"] for p in svc["spec"]["ports"]}


def test_dashboard_configmap_carries_the_sidecar_label_and_the_dashboard_file() -> None:
    objs = render_with(MONITORING)
    (cm,) = [o for o in find(objs, "ConfigMap") if o["metadata"]["name"].endswith("-dashboard")]
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(cm["data"]["edgetune-telemetry.json"]) == json.loads(DASHBOARD.read_text())
    for version in KUBE_VERSIONS:
        kubernetes_validate.validate(cm, version, strict=True)


def test_dashboard_is_schema_valid_and_every_query_names_an_agent_metric() -> None:
    jsonschema = pytest.importorskip("jsonschema")
    from edgetune.agent.metrics import exported_metric_names

    dash = json.loads(DASHBOARD.read_text())
    jsonschema.validate(dash, DASHBOARD_SCHEMA)
    exported = exported_metric_names()  # from the agent's own registry code, not a list kept here
    assert {"edgetune_profiler_energy_joules_total", "edgetune_profiler_temperature_celsius"} <= exported
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids))
    titles = " ".join(p["title"].lower() for p in dash["panels"])
    for topic in ("power", "energy rate", "temperature", "applied power mode", "predicted", "measured"):
        assert topic in titles
    for panel in dash["panels"]:
        for target in panel["targets"]:
            names = set(re.findall(r"\b(edgetune_[a-z0-9_]+)\b", target["expr"]))
            assert names, f"{panel['title']}: {target['expr']} names no edgetune metric"
            assert names <= exported, f"{panel['title']}: {sorted(names - exported)} not exported by the agent"
    variables = {v["name"]: v for v in dash["templating"]["list"]}
    assert set(re.findall(r"\b(edgetune_[a-z0-9_]+)\b", variables["node"]["definition"])) <= exported


def test_user_workloads_mount_read_only_and_become_the_agents_workload_path() -> None:
    spec = pod_spec(find(objects("default"), "DaemonSet")[0])  # default: zoo workloads only
    assert "EDGETUNE_WORKLOAD_PATH" not in env_of(spec["containers"][0])
    assert "workloads" not in {v["name"] for v in spec["volumes"]}
    for values, source in (({"configMap": "my-models"}, {"configMap": {"name": "my-models"}}),
                           ({"volume": {"persistentVolumeClaim": {"claimName": "models"}}},
                            {"persistentVolumeClaim": {"claimName": "models"}})):
        spec = pod_spec(find(render_with({"agent": {"workloads": values}}), "DaemonSet")[0])
        container = spec["containers"][0]
        assert env_of(container)["EDGETUNE_WORKLOAD_PATH"]["value"] == "/opt/edgetune/workloads"
        mount = {m["name"]: m for m in container["volumeMounts"]}["workloads"]
        assert mount["mountPath"] == "/opt/edgetune/workloads" and mount["readOnly"] is True
        volume = {v["name"]: v for v in spec["volumes"]}["workloads"]
        assert {k: v for k, v in volume.items() if k != "name"} == source


# --------------------------------------------------------------------------- security

CERT_MANAGER = ("cert-manager.io/v1",)
TOKENS = {"security": {"tokens": {"existingSecret": "edgetune-tokens"}}}


def service_containers(objs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {component(w): pod_spec(w)["containers"][0] for w in workloads(objs) if component(w) in SERVICES}


def volumes_of(objs: list[dict[str, Any]], comp: str) -> dict[str, dict[str, Any]]:
    (w,) = [w for w in workloads(objs) if component(w) == comp]
    return {v["name"]: v for v in pod_spec(w)["volumes"]}


def test_without_cert_manager_the_chart_generates_a_ca_and_a_certificate_for_every_service() -> None:
    import base64

    from cryptography import x509

    objs = objects("default")
    (secret,) = [o for o in find(objs, "Secret") if o["metadata"]["name"] == "edgetune-tls"]
    assert secret["type"] == "kubernetes.io/tls" and secret["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    cert = x509.load_pem_x509_certificate(base64.b64decode(secret["data"]["tls.crt"]))
    ca = x509.load_pem_x509_certificate(base64.b64decode(secret["data"]["ca.crt"]))
    cert.verify_directly_issued_by(ca)
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value.get_values_for_type(x509.DNSName)
    for comp in ("coordinator", "estimator", "optimizer", "redis"):
        assert f"edgetune-{comp}.edgetune.svc" in names
    assert "edgetune-agent.edgetune.svc" not in names  # the agents have their own certificate
    (agent_secret,) = [o for o in find(objs, "Secret") if o["metadata"]["name"] == "edgetune-agent-tls"]
    agent_cert = x509.load_pem_x509_certificate(base64.b64decode(agent_secret["data"]["tls.crt"]))
    agent_cert.verify_directly_issued_by(ca)
    agent_names = agent_cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert set(agent_names.get_values_for_type(x509.DNSName)) == {
        "edgetune-agent", "edgetune-agent.edgetune", "edgetune-agent.edgetune.svc", "edgetune-agent.edgetune.svc.cluster.local"}
    assert not [o for o in objs if o["apiVersion"].startswith("cert-manager.io/")]
    for comp, c in service_containers(objs).items():
        env = env_of(c)
        assert env["EDGETUNE_TLS_CERT"]["value"] == "/etc/edgetune/tls/tls.crt", comp
        assert env["EDGETUNE_TLS_KEY"]["value"] == "/etc/edgetune/tls/tls.key"
        assert env["EDGETUNE_TLS_CA"]["value"] == "/etc/edgetune/tls/ca.crt"  # verifies whom it calls
        assert "EDGETUNE_INSECURE" not in env
        assert env["EDGETUNE_AUTH_TOKENS"]["value"] == "/etc/edgetune/auth/tokens.yaml"  # TLS is never alone
        assert {"name": "tls", "mountPath": "/etc/edgetune/tls", "readOnly": True} in c["volumeMounts"]
        assert volumes_of(objs, comp)["tls"]["secret"]["secretName"] == (
            "edgetune-agent-tls" if comp == "agent" else "edgetune-tls")
    coord = env_of(service_containers(objs)["coordinator"])
    assert coord["EDGETUNE_TLS_SERVER_NAME"]["value"] == "edgetune-coordinator.edgetune.svc"  # standby -> leader by IP


def test_with_cert_manager_a_self_signed_issuer_signs_the_services_certificate() -> None:
    objs = render_with({}, api_versions=CERT_MANAGER)
    for obj in objs:
        if not obj["apiVersion"].startswith(("cert-manager.io/", "ray.io/", "monitoring.coreos.com/")):
            kubernetes_validate.validate(obj, KUBE_VERSIONS[0], strict=True)
    cm = {(o["kind"], o["metadata"]["name"]): o for o in objs if o["apiVersion"] == "cert-manager.io/v1"}
    assert set(cm) == {("Issuer", "edgetune-selfsigned"), ("Certificate", "edgetune-ca"), ("Issuer", "edgetune-ca"),
                       ("Certificate", "edgetune-tls"), ("Certificate", "edgetune-agent-tls")}
    assert "edgetune-agent.edgetune.svc" not in cm[("Certificate", "edgetune-tls")]["spec"]["dnsNames"]
    assert "edgetune-agent.edgetune.svc" in cm[("Certificate", "edgetune-agent-tls")]["spec"]["dnsNames"]
    tls = cm[("Certificate", "edgetune-tls")]["spec"]
    assert tls["issuerRef"] == {"kind": "Issuer", "name": "edgetune-ca"} and tls["secretName"] == "edgetune-tls"
    assert {"server auth", "client auth"} <= set(tls["usages"])
    assert "edgetune-optimizer.edgetune.svc" in tls["dnsNames"]
    assert not [o for o in find(objs, "Secret") if o["metadata"]["name"] == "edgetune-tls"]  # cert-manager writes it
    # A user issuer: no self-signed chain.
    objs = render_with({"security": {"tls": {"certManager": {"issuerRef": {"kind": "ClusterIssuer", "name": "corp"}}}}},
                       api_versions=CERT_MANAGER)
    cm = {(o["kind"], o["metadata"]["name"]): o for o in objs if o["apiVersion"] == "cert-manager.io/v1"}
    assert set(cm) == {("Certificate", "edgetune-tls"), ("Certificate", "edgetune-agent-tls")}
    assert cm[("Certificate", "edgetune-tls")]["spec"]["issuerRef"] == {"kind": "ClusterIssuer", "name": "corp"}


def test_a_user_tls_secret_is_mounted_as_is() -> None:
    objs = render_with({"security": {"tls": {"existingSecret": "my-tls"}}})
    assert not [o for o in find(objs, "Secret") if o["metadata"]["name"] in ("edgetune-tls", "edgetune-agent-tls")]
    for comp in SERVICES:
        assert volumes_of(objs, comp)["tls"]["secret"]["secretName"] == "my-tls"
    objs = render_with({"security": {"tls": {"existingSecret": "my-tls", "agentExistingSecret": "my-agent-tls"}}})
    assert volumes_of(objs, "agent")["tls"]["secret"]["secretName"] == "my-agent-tls"
    assert volumes_of(objs, "coordinator")["tls"]["secret"]["secretName"] == "my-tls"
    with pytest.raises(helm.HelmError, match="security.tls.existingSecret is required"):
        render({"security": {"tls": {"mode": "secret"}}})


def test_tokens_come_from_a_secret_and_the_callers_send_theirs() -> None:
    for objs, secret in ((render_with(TOKENS), "edgetune-tokens"), (objects("default"), "edgetune-tokens")):
        for comp, c in service_containers(objs).items():
            env = env_of(c)
            assert env["EDGETUNE_AUTH_TOKENS"]["value"] == "/etc/edgetune/auth/tokens.yaml", comp
            # Only the token file, copied mode 0600 by the init container (services refuse a readable one).
            auth = volumes_of(objs, comp)["auth-src"]["secret"]
            assert auth["secretName"] == secret and auth["items"] == [{"key": "tokens.yaml", "path": "tokens.yaml"}]
            assert volumes_of(objs, comp)["auth"]["emptyDir"]["medium"] == "Memory"
            (w,) = [w for w in workloads(objs) if component(w) == comp]
            (init,) = pod_spec(w)["initContainers"]
            assert "umask 077" in init["command"][-1] and init["command"][-1].endswith("/etc/edgetune/auth/tokens.yaml")
            sends = env.get("EDGETUNE_TOKEN", {}).get("valueFrom", {}).get("secretKeyRef")
            want = {"coordinator": "coordinator"}.get(comp)  # agents send their service-account token
            assert (sends == {"name": secret, "key": want}) if want else sends is None, comp


def test_no_tls_is_refused_unless_insecure_is_explicit() -> None:
    with pytest.raises(helm.HelmError, match="security.insecure=true"):
        render({"security": {"tls": {"mode": "none"}}})
    with pytest.raises(helm.HelmError, match="security.insecure=true"):  # tokens in clear text are not enough
        render({"security": {"tls": {"mode": "none"}, "tokens": {"existingSecret": "edgetune-tokens"}}})
    objs = render_with({"security": {"tls": {"mode": "none"}, "insecure": True}})
    for comp, c in service_containers(objs).items():
        env = env_of(c)
        assert env["EDGETUNE_INSECURE"]["value"] == "true" and "EDGETUNE_TLS_CERT" not in env, comp
        assert "tls" not in volumes_of(objs, comp)


@pytest.mark.parametrize("variant", VARIANTS)
def test_every_edgetune_env_var_the_chart_sets_is_read_by_its_service(variant: str) -> None:
    """A misspelt variable (the agent's EDGETUNE_ADVERTISE_ADDRESS, the coordinator's EDGETUNE_AGENTS)
    is silently ignored by the service: each must be one of its flags or a variable it reads itself."""
    import importlib

    read_directly = {"EDGETUNE_POD_NAME", "EDGETUNE_POD_NAMESPACE", "EDGETUNE_POD_IP", "EDGETUNE_REDIS_PASSWORD",
                     "EDGETUNE_RAY_ADDRESS"}
    modules = {"agent": "profiler", "coordinator": "coordinator", "estimator": "estimator", "optimizer": "optimizer"}
    for comp, c in service_containers(objects(variant)).items():
        parser_of = importlib.import_module(f"edgetune.services.{modules[comp]}.server").parse_args
        flags = vars(parser_of([]))
        for name in env_of(c):
            if not name.startswith("EDGETUNE_") or name in read_directly:
                continue
            assert name.removeprefix("EDGETUNE_").lower() in flags, f"{variant}: {comp} does not read {name}"


def test_every_in_cluster_peer_is_selected_by_namespace_as_well_as_by_label() -> None:
    objs = render_with({"networkPolicy": {"clientNamespaces": ["flower"]}})
    for pol in find(objs, "NetworkPolicy"):
        spec = pol["spec"]
        for rule in spec.get("ingress", []) + spec.get("egress", []):
            for peer in rule.get("from", rule.get("to", [])):
                if "ipBlock" in peer:
                    continue
                if "podSelector" in peer and pol["metadata"]["name"] != "edgetune-redis":
                    ns = peer.get("namespaceSelector")
                    assert ns, f"{pol['metadata']['name']}: a peer by label only"
                    assert ns.get("matchLabels") or ns.get("matchExpressions"), \
                        f"{pol['metadata']['name']}: a peer in any namespace"
    pols = {p["metadata"]["name"]: p["spec"] for p in find(objs, "NetworkPolicy")}
    clients = pols["edgetune-agent"]["ingress"][0]["from"][0]
    assert clients["namespaceSelector"]["matchExpressions"][0]["values"] == ["flower"]
    assert clients["podSelector"]["matchLabels"] == {"edgetune.io/client": "true"}
    default = {p["metadata"]["name"]: p["spec"] for p in find(objects("default"), "NetworkPolicy")}
    peer = default["edgetune-coordinator"]["ingress"][0]["from"][-1]
    assert peer["namespaceSelector"]["matchExpressions"][0]["values"] == ["edgetune"]  # the release's namespace only
