"""Issue 25, Redis locked to its users: on a real redis-server 7 with the store's ACL file
(:mod:`edgetune.store.acl`), each service works with its own user and can do nothing else; the
``default`` user is off; and an agent has no Redis credential at all (its token opens nothing).

Before: one password for every pod, agents included; with it the issue's probe rewrote a node's
address and deleted ~10,000 audit records directly in Redis. Now the estimator's and the optimizer's
users (the only ones besides the coordinator's) cannot write a node's config, registration, job
stream or budget, nor delete or trim the audit stream, nor reconfigure the server.
"""

from __future__ import annotations

import sys
from pathlib import Path

import grpc
import harness
import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from edgetune.base.mode import PowerMode
from edgetune.control.jobs import JobQueue
from edgetune.control.registry import NodeRecord, NodeRegistry
from edgetune.devices.simulated.tables import truth_table
from edgetune.errors import FailedPrecondition
from edgetune.identity import ClientSecurity
from edgetune.powermodes.grids import named_grid
from edgetune.powermodes.specs import get_spec
from edgetune.proto.v1 import common_pb2, estimator_pb2, estimator_pb2_grpc, optimizer_pb2, optimizer_pb2_grpc
from edgetune.services.estimator.server import create_server as create_estimator
from edgetune.services.optimizer.server import create_server as create_optimizer
from edgetune.store import EmbeddedRedisServer, NodeConfig, open_store
from edgetune.store.acl import ROLES, acl_file
from edgetune.store.redis_store import LoginFailsFast

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "unit"))
from redis_servers import NO_SYSTEM_REDIS, SYSTEM_REDIS  # noqa: E402

pytestmark = pytest.mark.skipif(not SYSTEM_REDIS, reason=NO_SYSTEM_REDIS)
PASSWORDS = {role: f"{role}-password-0123456789abcdef" for role in ROLES}
AGENT_TOKEN = "agent-a-token-0123456789"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    folder = tmp_path_factory.mktemp("acl")
    (folder / "users.acl").write_text(acl_file(PASSWORDS))
    server = EmbeddedRedisServer(port=0, executable=SYSTEM_REDIS,
                                 extra_config=(f"aclfile {folder / 'users.acl'}", "protected-mode yes"))
    server.probe_auth = ("probe", PASSWORDS["probe"])
    server.start()
    yield server
    server.stop()


def url(server: EmbeddedRedisServer, role: str, password: str | None = None) -> str:
    return f"redis://{role}:{password or PASSWORDS[role]}@127.0.0.1:{server.port}/0"


def raw(server: EmbeddedRedisServer, role: str | None, password: str | None = None) -> redis.Redis:
    """A plain client as ``role`` (None: no user), with no retries: redis-py retries a refused login
    (an AuthenticationError is a ConnectionError) with backoff, ~3.5 s each."""
    return redis.Redis(host="127.0.0.1", port=server.port, username=role,
                       password=PASSWORDS[role] if role is not None and password is None else password,
                       retry=Retry(NoBackoff(), 0))


def refused(call) -> None:
    with pytest.raises(redis.exceptions.NoPermissionError):
        call()


def test_the_coordinator_runs_the_fleet_with_its_user(server):
    with open_store(url(server, "coordinator")) as store:
        registry = NodeRegistry(store)
        registry.register(NodeRecord(node_id="jetson-a", address="10.0.0.7:50051"))
        store.publish_configs([NodeConfig("jetson-a", mode=PowerMode(8, 1728.0, 930.75, 3199.0), batch_size=16)])
        JobQueue(store).submit("jetson-a", {"random_modes": 1}, job_id="j1")
        assert store.get_config("jetson-a").revision == 1 and store.incarnation()
        client = raw(server, "coordinator")
        for dangerous in (lambda: client.flushall(), lambda: client.config_set("appendonly", "no"),
                          lambda: client.execute_command("ACL", "SETUSER", "x", "on", ">p", "~*", "+@all"),
                          lambda: client.keys("*"), lambda: client.set("other-app:key", "1")):
            refused(dangerous)


def _fit() -> estimator_pb2.FitRequest:
    spec = get_spec("orin-agx")
    modes = named_grid(spec, "fulcrum").modes()
    rows = truth_table(spec, "resnet18", "train", [modes[i] for i in range(0, len(modes), 9)], [16])
    return estimator_pb2.FitRequest(device="orin-agx", workload="resnet18", role=common_pb2.ROLE_TRAIN, epochs=3,
                                    seed=0, model_id="acl-fit", measurements=[
        common_pb2.Measurement(mode=common_pb2.PowerMode(cores=r["cores"], cpu_mhz=r["cpu_mhz"], gpu_mhz=r["gpu_mhz"],
                                                         emc_mhz=r["emc_mhz"]),
                               batch_size=r["batch_size"], time_ms=r["time_ms"], power_w=r["power_w"])
        for r in rows])


def test_the_estimator_and_the_optimizer_work_with_their_users_and_touch_nothing_else(server):
    with open_store(url(server, "estimator")) as est_store, open_store(url(server, "optimizer")) as opt_store:
        with harness.serving(create_estimator(port=0, store=est_store, use_ray=False, grace_s=0.5,
                                              max_workers=4)) as (est, _):
            stub = estimator_pb2_grpc.EstimatorStub(grpc.insecure_channel(est.address))
            model = stub.Fit(_fit(), timeout=300).model
            assert [m.model_id for m in stub.ListModels(estimator_pb2.ListModelsRequest()).models] == [model.model_id]
        with harness.serving(create_optimizer(port=0, store=opt_store, grace_s=0.5, max_workers=4)) as (opt, _):
            stub = optimizer_pb2_grpc.OptimizerStub(grpc.insecure_channel(opt.address))
            sid = stub.StartSearch(optimizer_pb2.StartSearchRequest(
                strategy=optimizer_pb2.STRATEGY_RANDOM, problem=optimizer_pb2.PROBLEM_TRAIN,
                budgets=common_pb2.Budgets(power_budget_w=25.0), device="orin-agx", grid=common_pb2.GRID_FULCRUM,
                batch_sizes=[16], train_workload="resnet18", max_profiles=4, seed=1)).session_id
            assert stub.Ask(optimizer_pb2.AskRequest(session_id=sid)).points
            stub.EndSearch(optimizer_pb2.EndSearchRequest(session_id=sid))
    coordinator = raw(server, "coordinator")
    assert coordinator.xlen("edgetune:audit") >= 2  # the services' audit records went in
    for role in ("estimator", "optimizer"):
        c = raw(server, role)
        # The attacks, with a control-plane service's credential: all refused.
        refused(lambda c=c: c.hset("edgetune:config:jetson-a", "config", "{}"))
        refused(lambda c=c: c.hset("edgetune:doc:node:jetson-a", "doc", '{"address": "10.6.6.6:1"}'))
        refused(lambda c=c: c.xadd("edgetune:jobs:jetson-a", {"job_id": "x", "job": "{}"}))
        refused(lambda c=c: c.set("edgetune:kv:budget:site", "1"))
        refused(lambda c=c: c.delete("edgetune:audit"))
        refused(lambda c=c: c.xtrim("edgetune:audit", maxlen=0))
        refused(lambda c=c: c.xrange("edgetune:audit"))
        refused(lambda c=c: c.flushall())
        refused(lambda c=c: c.config_set("appendonly", "no"))
    refused(lambda: raw(server, "estimator").hset("edgetune:meas:x", "doc", "{}"))  # measurements: read only
    refused(lambda: raw(server, "optimizer").hget("edgetune:blob:estimator-model:x:1", "data"))
    assert coordinator.xlen("edgetune:audit") >= 2


def test_a_refused_login_fails_at_once_and_says_so(server):
    # redis-py counts a refused login as a connection error; the store's retry (5 retries, ~3.7 s of backoff)
    # gives up on it at the first
    with pytest.raises(FailedPrecondition, match="refused the login: invalid username-password pair"):
        open_store(url(server, "coordinator", "not-its-password"))
    retry = LoginFailsFast(NoBackoff(), 5)  # the store's, without the waits
    for error, tries in ((redis.AuthenticationError("refused"), 1), (redis.ConnectionError("reset"), 6)):
        calls: list[int] = []

        def do(error=error, calls=calls):
            calls.append(1)
            raise error

        with pytest.raises(type(error)):
            retry.call_with_retry(do, lambda _: None)
        assert len(calls) == tries
    with open_store(url(server, "coordinator")) as store:  # its own password: the same retry connects
        assert store.ping()


def test_no_default_user_the_probe_pings_only_and_an_agents_token_opens_nothing(server):
    with pytest.raises(redis.exceptions.AuthenticationError):
        raw(server, None).ping()
    probe = raw(server, "probe")
    assert probe.ping()
    refused(lambda: probe.get("edgetune:incarnation"))
    for user in ("default", "agent", "jetson-a", *ROLES):
        with pytest.raises(redis.exceptions.AuthenticationError):
            raw(server, user, AGENT_TOKEN).ping()
    assert ClientSecurity(token=AGENT_TOKEN).token  # (what an agent holds: a gRPC token, no Redis user)
