"""Identity end to end: the anonymous attacks of the security review, refused with the right codes
once tokens are configured, and allowed for an operator; agents bound to their own node ids;
search sessions owned by who started them; the audit stream; TLS and mTLS handshakes with
certificates made here; the loopback-only default; the agent's link and the CLI with credentials.

Every server runs in this process on loopback (a MemoryStore, or an embedded Redis where the
service expects one); clients are real gRPC channels opened by :func:`edgetune.identity.open_channel`.
"""

from __future__ import annotations

import contextlib
import logging
import time
from pathlib import Path

import grpc
import harness
import pytest
import yaml
from click.testing import CliRunner
from grpc_health.v1 import health_pb2, health_pb2_grpc
from tls_certs import TestCA

from edgetune.cli import cli
from edgetune.devices.simulated.tables import truth_table
from edgetune.errors import InvalidArgument
from edgetune.identity import ClientSecurity, ServerSecurity, open_channel
from edgetune.powermodes.grids import named_grid
from edgetune.powermodes.specs import get_spec
from edgetune.proto.serde.common import mode_from_proto, mode_to_proto, spec_to_proto
from edgetune.proto.v1 import (
    common_pb2,
    coordinator_pb2,
    coordinator_pb2_grpc,
    estimator_pb2,
    estimator_pb2_grpc,
    optimizer_pb2,
    optimizer_pb2_grpc,
    profiler_pb2,
    profiler_pb2_grpc,
    tuning_pb2,
)
from edgetune.services.common.server import ServiceServer
from edgetune.services.estimator.server import create_server as create_estimator
from edgetune.services.optimizer.server import create_server as create_optimizer
from edgetune.services.profiler.server import create_server as create_agent
from edgetune.services.profiler.server import serve as serve_agent
from edgetune.store import MemoryStore

ORIN = get_spec("orin-agx")
FULCRUM = named_grid(ORIN, "fulcrum")
# token name -> (token, role[, nodes])
TOKENS = {
    "root": ("root-token-0123456789", "admin"),
    "alice": ("alice-token-0123456789", "operator"),
    "bob": ("bob-token-0123456789abc", "operator"),
    "vera": ("vera-token-0123456789ab", "viewer"),
    "jetson-a": ("agent-a-token-0123456789", "agent"),
}
UNAUTHENTICATED, DENIED = grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED


@pytest.fixture
def token_file(tmp_path: Path) -> Path:
    path = tmp_path / "tokens.yaml"
    path.write_text(yaml.safe_dump({"tokens": [{"token": t, "role": r, "name": n} for n, (t, r) in TOKENS.items()]}))
    path.chmod(0o600)  # a token file others may read is refused
    return path


def as_(name: str | None, **tls: str) -> ClientSecurity:
    return ClientSecurity(token=TOKENS[name][0] if name else "", **tls)


def code_of(call) -> grpc.StatusCode:
    with pytest.raises(grpc.RpcError) as err:
        result = call()
        if hasattr(result, "__iter__") and not hasattr(result, "ListFields"):  # a stream: read it
            next(iter(result))
    return err.value.code()


class Stubs:
    """One stub class per identity on one address (``stubs["alice"]``, ``stubs[None]``: anonymous)."""

    def __init__(self, address: str, stub_class, **tls: str) -> None:
        self.address, self.stub_class, self.tls = address, stub_class, tls
        self.channels: list[grpc.Channel] = []

    def __getitem__(self, name: str | None):
        channel = open_channel(self.address, as_(name, **self.tls))
        self.channels.append(channel)
        return self.stub_class(channel)

    def close(self) -> None:
        for c in self.channels:
            c.close()

    def __enter__(self) -> Stubs:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _node(node_id: str, budget: float, address: str = "127.0.0.1:50051") -> coordinator_pb2.NodeInfo:
    return coordinator_pb2.NodeInfo(node_id=node_id, hostname=node_id, address=address, device=spec_to_proto(ORIN),
                                    power_budget_w=budget)


def _plan(node_ids) -> coordinator_pb2.PlanRoundRequest:
    options = common_pb2.PredictionTable(cores=[12, 4], cpu_mhz=[2201.6, 1113.6], gpu_mhz=[1300.5, 522.75],
                                         emc_mhz=[3199.0, 2133.0], batch_size=[32, 32], time_ms=[100.0, 260.0],
                                         power_w=[42.0, 16.0])
    return coordinator_pb2.PlanRoundRequest(
        round_id="r1", objective=coordinator_pb2.ROUND_OBJECTIVE_MAKESPAN,
        workload=common_pb2.Workload(name="resnet18", role=common_pb2.ROLE_TRAIN),
        nodes=[coordinator_pb2.NodeRound(node_id=n, samples=320, options=options) for n in node_ids], apply=True)


@pytest.fixture
def coordinator(token_file):
    with MemoryStore() as store, harness.coordinator(store, security=ServerSecurity(auth_tokens=str(token_file))) as c, \
            Stubs(c.server.address, coordinator_pb2_grpc.CoordinatorStub) as stubs:
        yield c, store, stubs


def test_anonymous_coordinator_attacks_are_refused_and_an_operator_succeeds(coordinator):
    c, store, stubs = coordinator
    assert c.server.host == "127.0.0.1"  # tokens without TLS: loopback only (tokens would cross the network in clear)
    # The agent registers itself (its token names its node), an admin registers another.
    assert stubs["jetson-a"].RegisterNode(coordinator_pb2.RegisterNodeRequest(node=_node("jetson-a", 30.0))).node_id \
        == "jetson-a"
    stubs["root"].RegisterNode(coordinator_pb2.RegisterNodeRequest(node=_node("jetson-b", 30.0)))

    def budget(node_id: str) -> float:
        nodes = stubs["vera"].ListNodes(coordinator_pb2.ListNodesRequest()).nodes
        return next(n.power_budget_w for n in nodes if n.node_id == node_id)

    cut = coordinator_pb2.UpdateBudgetRequest(node_id="jetson-a", budgets=common_pb2.Budgets(power_budget_w=20.0))
    site = coordinator_pb2.UpdateBudgetRequest(budgets=common_pb2.Budgets(site_power_budget_w=10.0))
    overwrite = coordinator_pb2.RegisterNodeRequest(node=_node("jetson-a", 999.0, "10.6.6.6:1"))
    # Anonymous: UNAUTHENTICATED; a bad token too; a viewer or an agent: PERMISSION_DENIED. Nothing changes.
    assert code_of(lambda: stubs[None].UpdateBudget(cut)) == UNAUTHENTICATED
    assert code_of(lambda: stubs[None].UpdateBudget(site)) == UNAUTHENTICATED
    bad = coordinator_pb2_grpc.CoordinatorStub(open_channel(c.server.address, ClientSecurity(token="x" * 20)))
    assert code_of(lambda: bad.UpdateBudget(cut)) == UNAUTHENTICATED
    assert code_of(lambda: stubs["vera"].UpdateBudget(cut)) == DENIED
    assert code_of(lambda: stubs["jetson-a"].UpdateBudget(cut)) == DENIED
    assert code_of(lambda: stubs[None].PlanRound(_plan(["jetson-a", "jetson-b"]))) == UNAUTHENTICATED
    assert code_of(lambda: stubs["vera"].PlanRound(_plan(["jetson-a"]))) == DENIED
    assert code_of(lambda: stubs[None].RegisterNode(overwrite)) == UNAUTHENTICATED
    assert code_of(lambda: stubs["alice"].RegisterNode(overwrite)) == DENIED  # operators plan; agents register
    assert code_of(lambda: stubs[None].ListNodes(coordinator_pb2.ListNodesRequest())) == UNAUTHENTICATED
    assert code_of(lambda: stubs[None].SubmitTuningJob(tuning_pb2.SubmitTuningJobRequest())) == UNAUTHENTICATED
    assert budget("jetson-a") == 30.0
    node_a = next(n for n in stubs["vera"].ListNodes(coordinator_pb2.ListNodesRequest()).nodes if n.node_id == "jetson-a")
    assert node_a.address == "127.0.0.1:50051"
    assert code_of(lambda: stubs["vera"].GetNodeConfig(coordinator_pb2.GetNodeConfigRequest(node_id="jetson-a"))) \
        == grpc.StatusCode.NOT_FOUND  # no round was applied

    # The agent acts for its own node only.
    other = coordinator_pb2.RegisterNodeRequest(node=_node("jetson-b", 999.0))
    assert code_of(lambda: stubs["jetson-a"].RegisterNode(other)) == DENIED
    assert code_of(lambda: stubs["jetson-a"].Heartbeat(coordinator_pb2.HeartbeatRequest(node_id="jetson-b"))) == DENIED
    assert code_of(lambda: stubs["jetson-a"].WatchConfig(coordinator_pb2.WatchConfigRequest(node_id="jetson-b"))) \
        == DENIED
    assert code_of(lambda: stubs["jetson-a"].ListNodes(coordinator_pb2.ListNodesRequest())) == DENIED
    assert not stubs["jetson-a"].Heartbeat(coordinator_pb2.HeartbeatRequest(node_id="jetson-a", state="ready")).reregister
    assert budget("jetson-b") == 30.0

    # An operator: the same calls succeed.
    assert stubs["alice"].UpdateBudget(cut).budgets.power_budget_w == 20.0
    assert budget("jetson-a") == 20.0
    assert stubs["alice"].PlanRound(_plan(["jetson-a", "jetson-b"])).feasible
    assert stubs["jetson-a"].GetNodeConfig(coordinator_pb2.GetNodeConfigRequest(node_id="jetson-a")).revision == 1
    # Health stays open to probes.
    health = health_pb2_grpc.HealthStub(open_channel(c.server.address))
    assert health.Check(health_pb2.HealthCheckRequest()).status == health_pb2.HealthCheckResponse.SERVING

    audit = [(r.method, r.who, r.outcome, r.target) for r in store.audit_records(1000)]
    assert ("UpdateBudget", "unauthenticated", "UNAUTHENTICATED", "") in audit
    assert ("UpdateBudget", "vera", "PERMISSION_DENIED", "") in audit
    assert ("RegisterNode", "jetson-a", "PERMISSION_DENIED", "") in audit
    assert ("RegisterNode", "jetson-a", "OK", "jetson-a") in audit
    assert ("UpdateBudget", "alice", "OK", "") in audit and ("PlanRound", "alice", "OK", "") in audit
    assert not any(m == "ListNodes" and o == "OK" for m, _w, o, _t in audit)  # reads are not audited
    record = next(r for r in store.audit_records(1000) if r.who == "alice" and r.method == "UpdateBudget")
    assert record.role == "operator" and record.via == "token" and record.service == "coordinator"
    assert record.peer.startswith("ipv4:127.0.0.1") and time.time() - record.time_s < 60


def test_an_agent_token_without_a_node_id_registers_as_its_node(coordinator):
    _c, _store, stubs = coordinator
    reply = stubs["jetson-a"].RegisterNode(coordinator_pb2.RegisterNodeRequest(node=_node("", 20.0)))
    assert reply.node_id == "jetson-a"


def test_profiler_apply_power_mode_needs_an_operator(token_file, tmp_path):
    with harness.serving(create_agent("sim:orin-agx", port=0, state_dir=tmp_path, store=MemoryStore(), grace_s=0.5,
                                      security=ServerSecurity(auth_tokens=str(token_file)), telemetry_hz=0)) \
            as (server, servicer), Stubs(server.address, profiler_pb2_grpc.ProfilerStub) as stubs:
        before = servicer.device.current_mode()
        low = FULCRUM.mode_at(0)
        request = profiler_pb2.ApplyPowerModeRequest(mode=mode_to_proto(low))
        assert code_of(lambda: stubs[None].ApplyPowerMode(request)) == UNAUTHENTICATED
        assert code_of(lambda: stubs["vera"].ApplyPowerMode(request)) == DENIED
        assert code_of(lambda: stubs["jetson-a"].ApplyPowerMode(request)) == DENIED
        assert code_of(lambda: stubs[None].Profile(profiler_pb2.ProfileRequest(random_modes=1))) == UNAUTHENTICATED
        assert servicer.device.current_mode() == before  # the refused calls changed nothing
        assert mode_from_proto(stubs["vera"].GetDevice(profiler_pb2.GetDeviceRequest()).current_mode) == before
        assert mode_from_proto(stubs["alice"].ApplyPowerMode(request).applied) == low
        assert servicer.device.current_mode() == low
        stubs["alice"].RestorePowerMode(profiler_pb2.RestorePowerModeRequest())
        assert servicer.device.current_mode() == before


def test_estimator_fit_refused_without_a_token_plants_nothing(token_file):
    store = MemoryStore()
    with harness.serving(create_estimator(port=0, store=store, use_ray=False, grace_s=0.5, max_workers=4,
                                          security=ServerSecurity(auth_tokens=str(token_file)))) as (server, _), \
            Stubs(server.address, estimator_pb2_grpc.EstimatorStub) as stubs:
        modes = FULCRUM.modes()
        rows = truth_table(ORIN, "resnet18", "train", [modes[i] for i in range(0, len(modes), 9)], [16])
        fit = estimator_pb2.FitRequest(device="orin-agx", workload="resnet18", role=common_pb2.ROLE_TRAIN, epochs=5,
                                       seed=0, model_id="reference-orin-agx-train", measurements=[
            common_pb2.Measurement(mode=common_pb2.PowerMode(cores=r["cores"], cpu_mhz=r["cpu_mhz"],
                                                             gpu_mhz=r["gpu_mhz"], emc_mhz=r["emc_mhz"]),
                                   batch_size=r["batch_size"], time_ms=r["time_ms"], power_w=r["power_w"])
            for r in rows])
        assert code_of(lambda: stubs[None].Fit(fit)) == UNAUTHENTICATED
        assert code_of(lambda: stubs["vera"].Fit(fit)) == DENIED
        assert not stubs["vera"].ListModels(estimator_pb2.ListModelsRequest()).models
        assert stubs["alice"].Fit(fit).model.model_id.startswith("reference-orin-agx-train")
        assert len(stubs["vera"].ListModels(estimator_pb2.ListModelsRequest()).models) == 1
        assert [(r.method, r.who, r.outcome) for r in store.audit_records(10)] == [
            ("Fit", "unauthenticated", "UNAUTHENTICATED"), ("Fit", "vera", "PERMISSION_DENIED"), ("Fit", "alice", "OK")]


def _start_search() -> optimizer_pb2.StartSearchRequest:
    return optimizer_pb2.StartSearchRequest(
        strategy=optimizer_pb2.STRATEGY_RANDOM, problem=optimizer_pb2.PROBLEM_TRAIN,
        budgets=common_pb2.Budgets(power_budget_w=25.0), device="orin-agx", grid=common_pb2.GRID_FULCRUM,
        batch_sizes=[16], train_workload="resnet18", max_profiles=4, seed=1)


@pytest.fixture
def optimizer(token_file):
    with harness.serving(create_optimizer(port=0, store=MemoryStore(), grace_s=0.5, max_workers=4,
                                          security=ServerSecurity(auth_tokens=str(token_file)))) as (server, _), \
            Stubs(server.address, optimizer_pb2_grpc.OptimizerStub) as stubs:
        yield server, stubs


def test_optimizer_sessions_are_owned_by_who_started_them(optimizer):
    _server, stubs = optimizer
    assert code_of(lambda: stubs[None].StartSearch(_start_search())) == UNAUTHENTICATED
    sid = stubs["alice"].StartSearch(_start_search()).session_id
    end = optimizer_pb2.EndSearchRequest(session_id=sid)
    assert code_of(lambda: stubs[None].EndSearch(end)) == UNAUTHENTICATED
    assert code_of(lambda: stubs["vera"].EndSearch(end)) == DENIED
    assert code_of(lambda: stubs["bob"].EndSearch(end)) == DENIED  # another operator's session
    assert code_of(lambda: stubs["bob"].Ask(optimizer_pb2.AskRequest(session_id=sid))) == DENIED
    assert stubs["vera"].Best(optimizer_pb2.BestRequest(session_id=sid)).decision is not None  # still there
    assert stubs["alice"].Ask(optimizer_pb2.AskRequest(session_id=sid)).points
    stubs["alice"].EndSearch(end)
    assert code_of(lambda: stubs["vera"].Best(optimizer_pb2.BestRequest(session_id=sid))) == grpc.StatusCode.NOT_FOUND
    # An admin may end anyone's session.
    sid2 = stubs["bob"].StartSearch(_start_search()).session_id
    stubs["root"].EndSearch(optimizer_pb2.EndSearchRequest(session_id=sid2))


# --------------------------------------------------------------------------- TLS and mTLS


@pytest.fixture
def ca(tmp_path) -> TestCA:
    return TestCA(tmp_path)


def test_tls_with_tokens_handshakes_only_with_the_right_ca(ca, token_file, tmp_path):
    cert = ca.server()
    with harness.serving(create_optimizer(port=0, store=MemoryStore(), grace_s=0.5, max_workers=4, health_port=0,
                                          security=ServerSecurity(tls_cert=str(cert.cert), tls_key=str(cert.key),
                                                                  auth_tokens=str(token_file)))) as (server, _):
        address = f"localhost:{server.port}"
        # Probes speak no TLS: the plain health port answers health checks, and nothing else.
        probe = grpc.insecure_channel(f"127.0.0.1:{server.health_port}")
        assert health_pb2_grpc.HealthStub(probe).Check(health_pb2.HealthCheckRequest(), timeout=5).status \
            == health_pb2.HealthCheckResponse.SERVING
        assert code_of(lambda: optimizer_pb2_grpc.OptimizerStub(probe).StartSearch(_start_search(), timeout=5)) \
            == grpc.StatusCode.UNIMPLEMENTED
        good = optimizer_pb2_grpc.OptimizerStub(open_channel(address, as_("alice", ca=str(ca.path))))
        assert good.StartSearch(_start_search(), timeout=10).session_id
        anonymous_tls = optimizer_pb2_grpc.OptimizerStub(open_channel(address, ClientSecurity(ca=str(ca.path))))
        assert code_of(lambda: anonymous_tls.StartSearch(_start_search(), timeout=10)) == UNAUTHENTICATED
        plain = optimizer_pb2_grpc.OptimizerStub(open_channel(address, as_("alice")))
        assert code_of(lambda: plain.StartSearch(_start_search(), timeout=3)) == grpc.StatusCode.UNAVAILABLE
        other = TestCA(tmp_path, "other-ca")
        wrong = optimizer_pb2_grpc.OptimizerStub(open_channel(address, as_("alice", ca=str(other.path))))
        assert code_of(lambda: wrong.StartSearch(_start_search(), timeout=3)) == grpc.StatusCode.UNAVAILABLE


def test_mtls_identity_and_role_come_from_the_client_certificate(ca):
    cert = ca.server()
    store = MemoryStore()
    with harness.coordinator(store, security=ServerSecurity(tls_cert=str(cert.cert), tls_key=str(cert.key),
                                                            tls_client_ca=str(ca.path))) as c:
        address = f"localhost:{c.server.port}"

        def stub(issued=None):
            tls = {"ca": str(ca.path)}
            if issued is not None:
                tls.update(cert=str(issued.cert), key=str(issued.key))
            return coordinator_pb2_grpc.CoordinatorStub(open_channel(address, ClientSecurity(**tls)))

        agent = stub(ca.client("jetson-a", "agent"))
        assert agent.RegisterNode(coordinator_pb2.RegisterNodeRequest(node=_node("jetson-a", 30.0)), timeout=10).node_id \
            == "jetson-a"
        assert code_of(lambda: agent.RegisterNode(coordinator_pb2.RegisterNodeRequest(node=_node("jetson-b", 30.0)),
                                                  timeout=10)) == DENIED
        cut = coordinator_pb2.UpdateBudgetRequest(node_id="jetson-a", budgets=common_pb2.Budgets(power_budget_w=5.0))
        assert code_of(lambda: stub(ca.client("dave", "viewer")).UpdateBudget(cut, timeout=10)) == DENIED
        assert code_of(lambda: stub(ca.client("eve")).UpdateBudget(cut, timeout=10)) == DENIED  # no OU: a viewer
        assert stub(ca.client("carol", "operator")).UpdateBudget(cut, timeout=10).budgets.power_budget_w == 5.0
        # No client certificate: the handshake itself fails.
        assert code_of(lambda: stub().ListNodes(coordinator_pb2.ListNodesRequest(), timeout=3)) \
            == grpc.StatusCode.UNAVAILABLE
        who = {(r.method, r.who, r.via, r.outcome) for r in store.audit_records(100)}
        assert ("UpdateBudget", "carol", "certificate", "OK") in who
        assert ("RegisterNode", "jetson-a", "certificate", "PERMISSION_DENIED") in who


def test_agent_link_over_tls_with_its_token_registers_its_own_node_only(ca, token_file, tmp_path):
    cert = ca.server()
    security = ServerSecurity(tls_cert=str(cert.cert), tls_key=str(cert.key), auth_tokens=str(token_file))
    store = MemoryStore()
    with harness.coordinator(store, leader=False, security=security) as c, contextlib.ExitStack() as agents:
        address = f"localhost:{c.server.port}"
        # Its token names jetson-a: with no --node-id it registers as jetson-a.
        agents.callback(serve_agent("sim:orin-agx", port=0, redis_url="none", state_dir=tmp_path / "a", block=False,
                                    coordinator=address, client=as_("jetson-a", ca=str(ca.path)), grace_s=0.5,
                                    telemetry_hz=0, security=security).stop, 0)
        # The same token claiming another node id is refused, so that agent never registers.
        agents.callback(serve_agent("sim:orin-agx", port=0, redis_url="none", state_dir=tmp_path / "b", block=False,
                                    coordinator=address, client=as_("jetson-a", ca=str(ca.path)), grace_s=0.5,
                                    telemetry_hz=0, node_id="jetson-b", security=security).stop, 0)
        viewer = coordinator_pb2_grpc.CoordinatorStub(open_channel(address, as_("vera", ca=str(ca.path))))
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            ids = [n.node_id for n in viewer.ListNodes(coordinator_pb2.ListNodesRequest(), timeout=5).nodes]
            if ids:
                break
            time.sleep(0.1)
        time.sleep(1.0)  # the second agent has had time to try (and retry)
        assert [n.node_id for n in viewer.ListNodes(coordinator_pb2.ListNodesRequest(), timeout=5).nodes] == ["jetson-a"]
        refused = [r for r in store.audit_records(100) if r.method == "RegisterNode" and r.outcome != "OK"]
        assert refused and all(r.who == "jetson-a" and r.outcome == "PERMISSION_DENIED" for r in refused)


def test_cli_job_commands_send_tls_and_token(ca, token_file):
    cert = ca.server()
    with harness.coordinator(MemoryStore(), leader=False, security=ServerSecurity(
            tls_cert=str(cert.cert), tls_key=str(cert.key), auth_tokens=str(token_file))) as c:
        address = f"localhost:{c.server.port}"
        runner = CliRunner()
        ok = runner.invoke(cli, ["job", "list", "--coordinator", address, "--tls-ca", str(ca.path),
                                 "--token", TOKENS["vera"][0], "--json"])
        assert ok.exit_code == 0 and ok.output.strip() == "[]", ok.output
        anonymous = runner.invoke(cli, ["job", "list", "--coordinator", address, "--tls-ca", str(ca.path)],
                                  env={"EDGETUNE_TOKEN": ""})
        assert anonymous.exit_code == 1 and "UNAUTHENTICATED" in anonymous.output
        half = runner.invoke(cli, ["job", "list", "--coordinator", address, "--tls-cert", str(cert.cert)])
        assert half.exit_code == 2 and "--tls-key" in half.output


# --------------------------------------------------------------------------- where a server listens


def test_an_unsecured_server_listens_on_loopback_only_unless_insecure(token_file, caplog):
    server = ServiceServer("probe", port=0)
    assert server.host == "127.0.0.1"
    server.stop(0)
    with pytest.raises(InvalidArgument, match="--host.*--insecure"):
        ServiceServer("probe", host="0.0.0.0", port=0)
    with caplog.at_level(logging.WARNING, logger="edgetune.services.common.server"):
        insecure = ServiceServer("probe", port=0, security=ServerSecurity(insecure=True))
    assert insecure.host == "0.0.0.0" and "--insecure" in caplog.text
    insecure.stop(0)
    tokens = ServiceServer("probe", port=0, security=ServerSecurity(auth_tokens=str(token_file)))
    assert tokens.host == "127.0.0.1"  # tokens in clear text stay on loopback ...
    tokens.stop(0)
    with pytest.raises(InvalidArgument, match="--host.*clear text.*--tls-cert"):
        ServiceServer("probe", host="0.0.0.0", port=0, security=ServerSecurity(auth_tokens=str(token_file)))
    with caplog.at_level(logging.WARNING, logger="edgetune.services.common.server"):  # ... unless on purpose
        exposed = ServiceServer("probe", host="0.0.0.0", port=0,
                                security=ServerSecurity(auth_tokens=str(token_file), insecure=True))
    assert exposed.host == "0.0.0.0" and "clear text" in caplog.text
    exposed.stop(0)
