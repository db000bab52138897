"""The token file, certificate identities and the per-method policy table (no servers here)."""

from __future__ import annotations

import pytest
import yaml

from edgetune.errors import InvalidArgument
from edgetune.identity import ClientSecurity, Identity, ServerSecurity, load_tokens, parse_tokens
from edgetune.proto.v1 import coordinator_pb2, estimator_pb2, nodejobs_pb2, optimizer_pb2, profiler_pb2
from edgetune.services.common.auth import POLICY, PUBLIC_SERVICES, Denied, check, rule_for

GOOD = "x" * 16


def test_token_file_gives_identities_and_agents_their_nodes(tmp_path):
    path = tmp_path / "tokens.yaml"
    path.write_text(yaml.safe_dump({"tokens": [
        {"token": "a" * 20, "role": "operator", "name": "alice"},
        {"token": "b" * 20, "role": "agent", "name": "orin-1"},
        {"token": "c" * 20, "role": "agent", "name": "rack-2", "nodes": ["n1", "n2"]},
    ]}))
    path.chmod(0o600)
    table = load_tokens(path)
    assert len(table) == 3
    assert table.identify("a" * 20) == Identity("alice", "operator", "token", ())
    assert table.identify("b" * 20) == Identity("orin-1", "agent", "token", ("orin-1",))
    assert table.identify("c" * 20).nodes == ("n1", "n2")
    assert table.identify("a" * 19) is None and table.identify("") is None


@pytest.mark.parametrize("doc, field", [
    ({"tokens": [{"token": "short", "role": "admin", "name": "x"}]}, "tokens[0].token"),
    ({"tokens": [{"token": GOOD, "role": "root", "name": "x"}]}, "tokens[0].role"),
    ({"tokens": [{"token": GOOD, "role": "admin", "name": ""}]}, "tokens[0].name"),
    ({"tokens": [{"token": GOOD, "role": "admin", "name": "x", "rol": 1}]}, "tokens[0].rol"),
    ({"tokens": [{"token": GOOD, "role": "admin", "name": "x"}, {"token": GOOD, "role": "viewer", "name": "y"}]},
     "tokens[1].token"),
    ({"tokens": [{"token": GOOD, "role": "agent", "name": "x", "nodes": []}]}, "tokens[0].nodes"),
    ({"tokens": [{"token": GOOD, "role": "agent", "name": "x", "nodes": "n1"}]}, "tokens[0].nodes"),
    ({"tokens": [{"token": GOOD, "role": "viewer", "name": "x" * 600}]}, "tokens[0].name"),
    ({"token": []}, "auth_tokens"),
    ([], "auth_tokens"),
])
def test_bad_token_files_name_the_entry(doc, field):
    with pytest.raises(InvalidArgument) as err:
        parse_tokens(doc)
    assert err.value.field.endswith(field)


def test_unreadable_token_file_names_it(tmp_path):
    with pytest.raises(InvalidArgument, match="cannot read"):
        load_tokens(tmp_path / "missing.yaml")
    (tmp_path / "bad.yaml").write_text("tokens: [")
    (tmp_path / "bad.yaml").chmod(0o600)
    with pytest.raises(InvalidArgument, match="not YAML"):
        load_tokens(tmp_path / "bad.yaml")


def test_tls_flags_go_together():
    with pytest.raises(InvalidArgument, match="--tls-key"):
        ServerSecurity(tls_cert="c.pem")
    with pytest.raises(InvalidArgument, match="--tls-client-ca"):
        ServerSecurity(tls_client_ca="ca.pem")
    with pytest.raises(InvalidArgument, match="--tls-cert"):
        ClientSecurity(key="k.pem").check()
    assert not ServerSecurity().secured and ServerSecurity(auth_tokens="t.yaml").secured


def _methods(module, service: str) -> list[str]:
    desc = module.DESCRIPTOR.services_by_name[service]
    return [f"/{desc.full_name}/{m.name}" for m in desc.methods]


def test_every_rpc_of_every_service_has_a_rule_and_health_is_public():
    methods = (_methods(coordinator_pb2, "Coordinator") + _methods(estimator_pb2, "Estimator")
               + _methods(optimizer_pb2, "Optimizer") + _methods(profiler_pb2, "Profiler")
               + _methods(nodejobs_pb2, "NodeJobs"))
    assert sorted(methods) == sorted(POLICY)  # none falls through to the admin-only default unnoticed
    assert rule_for("/grpc.health.v1.Health/Check") is None and "grpc.health.v1.Health" in PUBLIC_SERVICES
    assert rule_for("/edgetune.v1.Coordinator/NewMethod").role == "admin"  # unknown: admins only


def test_roles_rank_and_agents_act_for_their_own_nodes_only():
    update = rule_for("/edgetune.v1.Coordinator/UpdateBudget")
    listing = rule_for("/edgetune.v1.Coordinator/ListNodes")
    register = rule_for("/edgetune.v1.Coordinator/RegisterNode")
    viewer, operator, admin = (Identity("v", "viewer", "token"), Identity("o", "operator", "token"),
                               Identity("a", "admin", "token"))
    agent = Identity("n1", "agent", "token", ("n1",))
    req = coordinator_pb2.UpdateBudgetRequest()
    check(update, operator, req), check(update, admin, req), check(listing, viewer, req)
    for who, rule in ((viewer, update), (agent, update), (agent, listing), (operator, register)):
        with pytest.raises(Denied):
            check(rule, who, coordinator_pb2.RegisterNodeRequest())
    mine = coordinator_pb2.RegisterNodeRequest(node=coordinator_pb2.NodeInfo(node_id="n1"))
    assert check(register, agent, mine) == "n1"
    with pytest.raises(Denied, match="n2"):
        check(register, agent, coordinator_pb2.RegisterNodeRequest(node=coordinator_pb2.NodeInfo(node_id="n2")))
    blank = coordinator_pb2.RegisterNodeRequest(node=coordinator_pb2.NodeInfo())
    assert check(register, agent, blank) == "n1" and blank.node.node_id == "n1"  # filled in with its node
    two = Identity("rack", "agent", "token", ("n1", "n2"))
    with pytest.raises(Denied):  # an identity of several nodes must say which
        check(register, two, coordinator_pb2.RegisterNodeRequest(node=coordinator_pb2.NodeInfo()))
