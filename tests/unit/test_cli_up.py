"""``edgetune up``: ``--nodes`` parsing, node ids and budgets, bad input exits 2 before any
process starts, the ready file's content (``up`` running, with a job and SIGTERM: the README
walkthrough's ``up`` block, tests/integration/test_walkthrough.py; a child failing at start:
tests/integration/test_up_jobs.py)."""

import json
from types import SimpleNamespace

import pytest

from edgetune.cli import main
from edgetune.cli.up import write_ready_file
from edgetune.errors import InvalidArgument
from edgetune.localrun.controlplane import (
    ControlPlane,
    NodeRequest,
    default_budget_w,
    local_nodes,
    parse_nodes,
)


def test_issue_example_ids_and_default_budgets():
    nodes = local_nodes(parse_nodes("orin-agx:2,xavier-agx,nano"))
    assert [(n.node_id, n.device, n.budget_w) for n in nodes] == [
        ("orin-agx-1", "orin-agx", 34.0), ("orin-agx-2", "orin-agx", 34.0),
        ("xavier-agx-1", "xavier-agx", 29.0), ("nano-1", "nano", 6.0)]


def test_budget_syntax_and_numbering_across_items():
    assert parse_nodes(" orin-agx:2@20 , orin-agx@45.5,orin-nano") == [
        NodeRequest("orin-agx", 2, 20.0), NodeRequest("orin-agx", 1, 45.5), NodeRequest("orin-nano", 1, None)]
    nodes = local_nodes(parse_nodes("orin-agx:2@20,orin-agx@45.5,orin-nano"))
    assert [(n.node_id, n.budget_w) for n in nodes] == [
        ("orin-agx-1", 20.0), ("orin-agx-2", 20.0), ("orin-agx-3", 45.5), ("orin-nano-1", default_budget_w("orin-nano"))]
    assert default_budget_w("orin-nano") == 10.0


@pytest.mark.parametrize(("text", "field", "says"), [
    ("", "--nodes", "no nodes"),
    ("orin-agx,", "--nodes[1]", "empty item"),
    ("orin-agz", "--nodes[0]", "unknown device 'orin-agz'"),
    ("nano:two", "--nodes[0]", "not an integer"),
    ("nano:0", "--nodes[0]", "out of range"),
    ("nano@0", "--nodes[0]", "0 is not > 0"),
    ("nano@hot", "--nodes[0]", "not a number"),
    ("nano:40,orin-agx:40", "--nodes", "80 nodes"),
])
def test_bad_nodes_named(text, field, says):
    with pytest.raises(InvalidArgument) as err:
        parse_nodes(text)
    assert err.value.field == field
    assert says in err.value.message or says in str(err.value)


def test_unknown_device_lists_the_known_ones():
    with pytest.raises(InvalidArgument) as err:
        parse_nodes("orin-agz")
    assert "orin-agx" in (err.value.allowed or "") and "nano" in (err.value.allowed or "")


def test_cli_bad_nodes_exit_2_without_starting(tmp_path, capsys):
    code = main(["up", "--nodes", "orin-agx:2,jetson-tx9", "--log-dir", str(tmp_path / "logs")])
    err = capsys.readouterr().err
    assert code == 2
    assert "--nodes[1]: unknown device 'jetson-tx9'" in err
    assert not (tmp_path / "logs").exists()  # nothing was started


def test_the_ready_file_names_the_coordinator_and_the_node_ids_in_order(tmp_path):
    cluster = SimpleNamespace(coordinator=SimpleNamespace(address="127.0.0.1:50099"))
    plane = ControlPlane(cluster, local_nodes(parse_nodes("orin-agx,nano")))  # type: ignore[arg-type]
    write_ready_file(tmp_path / "run" / "up.json", plane.ready_record())
    assert json.loads((tmp_path / "run" / "up.json").read_text()) == {"coordinator": "127.0.0.1:50099",
                                                                      "nodes": ["orin-agx-1", "nano-1"]}
    assert [p.name for p in (tmp_path / "run").iterdir()] == ["up.json"]  # written whole: no temporary left
