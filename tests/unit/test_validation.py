"""edgetune.validation: every rule's edges, one meaning on every surface, nested field paths.

The cross-surface tests refuse the same 0 W budget through the library, the CLI (exit 2) and
a real optimizer server on loopback (INVALID_ARGUMENT), and compare the message and allowed
text each reports.
"""

import math

import grpc
import numpy as np
import pytest

from edgetune import validation as v
from edgetune.base.mode import PowerMode
from edgetune.cli import main
from edgetune.errors import InvalidArgument
from edgetune.optimization.problems import InferProblem, TrainProblem
from edgetune.optimization.select import Candidates, MinTime
from edgetune.powermodes.specs import get_spec
from edgetune.proto.serde.common import mode_to_proto
from edgetune.proto.v1 import common_pb2, optimizer_pb2, optimizer_pb2_grpc
from edgetune.services.common.errors import field_prefix
from edgetune.services.optimizer.server import create_server
from edgetune.store import open_store

ORIN = get_spec("orin-agx")
NAN, INF = math.nan, math.inf


def refused(rule, value, *args, **kwargs) -> InvalidArgument:
    with pytest.raises(InvalidArgument) as info:
        rule(value, *args, **kwargs)
    return info.value


# --- numbers --------------------------------------------------------------------------------------
POSITIVE_RULES = [(v.power_budget_w, "power_budget_w", v.POWER_BUDGET_ALLOWED),
                  (v.time_budget_ms, "time_budget_ms", v.TIME_BUDGET_ALLOWED),
                  (v.latency_budget_ms, "latency_budget_ms", v.TIME_BUDGET_ALLOWED),
                  (v.arrival_rps, "arrival_rps", v.ARRIVAL_RATE_ALLOWED)]


@pytest.mark.parametrize("rule,field,allowed", POSITIVE_RULES)
@pytest.mark.parametrize("bad", [0, 0.0, -0.0, -1, -1e-9, NAN, INF, -INF, True, False, "20", None, [20]])
def test_positive_rules_refuse(rule, field, allowed, bad):
    err = refused(rule, bad)
    assert (err.field, err.allowed) == (field, allowed)
    assert str(err) == f"{field}: {err.message} (allowed: {allowed})"


@pytest.mark.parametrize("rule,field,allowed", POSITIVE_RULES)
@pytest.mark.parametrize("good", [1e-6, 1, 20.5, np.float32(3.5), np.int64(7), 1e9])
def test_positive_rules_accept_and_return_floats(rule, field, allowed, good):
    got = rule(good)
    assert type(got) is float and got == pytest.approx(float(good))


def test_a_field_name_is_used_as_given():
    assert refused(v.power_budget_w, 0, "budgets.power_budget_w").field == "budgets.power_budget_w"
    assert refused(v.power_budget_w, 0, "--power-budget").message == refused(v.power_budget_w, 0.0).message


def test_sample_rate_has_an_upper_bound():
    assert v.sample_rate_hz(1000) == 1000.0
    assert refused(v.sample_rate_hz, 1000.5).field == "sample_rate_hz"
    assert v.sample_rate_hz(50, maximum=100) == 50.0
    err = refused(v.sample_rate_hz, 101, maximum=100)
    assert "100" in err.allowed
    for bad in (0, -1, NAN, INF, True):
        refused(v.sample_rate_hz, bad)


@pytest.mark.parametrize("good", [1e-9, 0.05, 0.2, 0.5, np.float64(0.1)])
def test_risk_accepts_probabilities_up_to_one_half(good):
    assert v.risk(good) == pytest.approx(float(good))


@pytest.mark.parametrize("bad", [0, 0.0, -0.1, 0.500001, 0.7, 1, 1.645, NAN, INF, True, "0.1"])
def test_risk_refuses(bad):
    err = refused(v.risk, bad, "--risk")
    assert err.field == "--risk" and err.allowed == v.RISK_ALLOWED


# --- integers -------------------------------------------------------------------------------------
def test_batch_size_edges():
    assert v.batch_size(1) == 1 and v.batch_size(v.MAX_BATCH_SIZE) == v.MAX_BATCH_SIZE
    assert type(v.batch_size(np.int32(16))) is int
    for bad in (0, -1, v.MAX_BATCH_SIZE + 1, 16.0, 16.5, NAN, INF, True, False, "16", None):
        err = refused(v.batch_size, bad)
        assert err.field == "batch_size" and err.allowed == v.BATCH_SIZE_ALLOWED


def test_batch_sizes_are_distinct_and_named_by_index():
    assert v.batch_sizes([16, 1, 64]) == (16, 1, 64)
    assert v.batch_sizes(np.array([4, 8])) == (4, 8)
    assert refused(v.batch_sizes, [16, 0]).field == "batch_sizes[1]"
    assert refused(v.batch_sizes, [16, 32, 16], "infer_batch_sizes").field == "infer_batch_sizes[2]"
    assert refused(v.batch_sizes, []).field == "batch_sizes"
    assert refused(v.batch_sizes, "16").field == "batch_sizes"
    assert refused(v.batch_sizes, 16).field == "batch_sizes"


def test_seed_and_count_edges():
    assert v.seed(0) == 0 and v.seed(v.MAX_SEED) == v.MAX_SEED
    for bad in (-1, v.MAX_SEED + 1, 1.0, True, NAN, "0"):
        assert refused(v.seed, bad).allowed == v.SEED_ALLOWED
    assert v.count(1, "profiles") == 1 and v.count(0, "rounds", minimum=0) == 0
    assert v.count(5, "n", maximum=5) == 5
    for bad, kw in ((0, {}), (-3, {}), (6, {"maximum": 5}), (2.0, {}), (True, {}), (INF, {})):
        err = refused(v.count, bad, "profiles", **kw)
        assert err.field == "profiles"


def test_optional_passes_none_only():
    assert v.optional(v.power_budget_w, None, "x") is None
    assert v.optional(v.power_budget_w, 5, "x") == 5.0
    assert refused(lambda value: v.optional(v.power_budget_w, value, "x"), 0).field == "x"


# --- identifiers and modes ------------------------------------------------------------------------
def test_identifier():
    assert v.identifier("orin-agx-1", "node_id") == "orin-agx-1"
    assert v.identifier("x" * v.MAX_IDENTIFIER_LENGTH, "node_id")
    for bad in ("", "   ", " a", "a\n", "x" * (v.MAX_IDENTIFIER_LENGTH + 1), 5, None, b"a"):
        assert refused(v.identifier, bad, "node_id").field == "node_id"
    assert refused(v.identifier, "abcd", "id", max_length=3).allowed.endswith("at most 3 characters")


def test_power_mode_reuses_the_spec_and_nests_its_field():
    good = PowerMode(12, 2201.6, 1300.5, 3199.0)
    assert v.power_mode(ORIN, good) == ORIN.validate(good)
    bad = PowerMode(12, 2201.6, 1234.0, 3199.0)
    with pytest.raises(InvalidArgument) as lib:
        ORIN.validate(bad)
    err = refused(lambda m: v.power_mode(ORIN, m, "modes[3]"), bad)
    assert err.field == "modes[3].gpu_mhz"
    assert (err.message, err.allowed) == (lib.value.message, lib.value.allowed)  # nothing re-worded
    assert refused(lambda m: v.power_mode(ORIN, m, "modes.csv:4", ":"), bad).field == "modes.csv:4:gpu_mhz"


# --- nesting --------------------------------------------------------------------------------------
def test_prefixed_keeps_message_and_allowed():
    inner = InvalidArgument("gpu_mhz", "1234 is not an orin-agx gpu_mhz value", "114.75 … 1300.5")
    outer = inner.prefixed("modes[3]").prefixed("request")
    assert outer.field == "request.modes[3].gpu_mhz"
    assert (outer.message, outer.allowed) == (inner.message, inner.allowed)
    assert str(outer) == "request.modes[3].gpu_mhz: 1234 is not an orin-agx gpu_mhz value (allowed: 114.75 … 1300.5)"
    assert InvalidArgument("[2]", "bad").prefixed("rows").field == "rows[2]"
    assert InvalidArgument("time_ms", "bad").prefixed("t.csv:7", ":").field == "t.csv:7:time_ms"
    assert inner.prefixed("").field == "gpu_mhz"


def test_service_field_prefix_nests_a_library_error():
    with pytest.raises(InvalidArgument) as info, field_prefix("modes[2]"):
        ORIN.validate(PowerMode(99, 2201.6, 1300.5, 3199.0))
    assert info.value.field == "modes[2].cores"
    assert info.value.allowed and "(allowed:" not in info.value.message  # not re-wrapped through its text


# --- budget sweeps --------------------------------------------------------------------------------
@pytest.mark.parametrize("spec,expected", [("20", [20.0]), (" 17:19 ", [17.0, 18.0, 19.0]),
                                           ("17:18:0.5", [17.0, 17.5, 18.0]), ("0.1:0.3:0.1", [0.1, 0.2, 0.3])])
def test_budget_sweep(spec, expected):
    assert v.budget_sweep(spec) == pytest.approx(expected)
    assert v.is_sweep(spec) == (":" in spec)


@pytest.mark.parametrize("spec", ["0", "-1", "0:10", "0:10:1", "-5:5:1", "10:5", "1:5:0", "1:5:-1", "1:nan:1",
                                  "inf", "1:2:3:4", "", "a", f"1:{v.MAX_SWEEP_POINTS + 1}:1"])
def test_budget_sweep_refuses(spec):
    err = refused(v.budget_sweep, spec, "--power-budget")
    assert err.field == "--power-budget" and err.allowed


def test_budget_range_names_the_sweep():
    assert v.budget_range(17.0, 19.0, 1.0) == [17.0, 18.0, 19.0]
    err = refused(lambda s: v.budget_range(s, 10.0, 1.0), 0.0)
    assert err.field == "sweep" and "0:10:1" in err.message


# --- one meaning on every surface -----------------------------------------------------------------
def test_the_library_refuses_a_0_w_budget_everywhere():
    cands = Candidates([10.0, 20.0], [15.0, 9.0])
    errors = [refused(lambda b: MinTime().select(cands, b), 0),
              refused(lambda b: MinTime().sweep(cands, [5, b]), 0),
              refused(lambda b: TrainProblem(b), 0),
              refused(lambda b: InferProblem(b, 50.0, 10.0), 0)]
    assert {(e.message, e.allowed) for e in errors} == {("0 is not > 0", v.POWER_BUDGET_ALLOWED)}
    assert errors[1].field == "power_budgets_w[1]"


OPTIONS = ("cores,cpu_mhz,gpu_mhz,emc_mhz,batch_size,time_ms,power_w\n"
           "12,2201.6,1300.5,3199,16,60,51.1\n8,1344,727,2133,16,100,20\n")


@pytest.fixture(scope="module")
def optimizer():
    store = open_store("embedded")
    server, _ = create_server(port=0, host="127.0.0.1", metrics_port=None, store=store, grace_s=1.0, max_workers=4)
    server.start()
    channel = grpc.insecure_channel(server.address)
    yield optimizer_pb2_grpc.OptimizerStub(channel)
    channel.close()
    server.stop(0)
    store.close()


def _candidates() -> optimizer_pb2.Candidates:
    return optimizer_pb2.Candidates(table=common_pb2.PredictionTable(
        cores=[12, 8], cpu_mhz=[2201.6, 1344.0], gpu_mhz=[1300.5, 727.0], emc_mhz=[3199.0, 2133.0], batch_size=[16, 16],
        time_ms=[60.0, 100.0], power_w=[51.1, 20.0]))


@pytest.mark.parametrize("budget", [0.0, -3.0, NAN])
def test_the_same_bad_budget_is_refused_alike_by_library_cli_and_grpc(budget, tmp_path, capsys, optimizer):
    lib = refused(lambda b: MinTime().select(Candidates([60.0, 100.0], [51.1, 20.0]), b), budget)

    table = tmp_path / "t.csv"
    table.write_text(OPTIONS)
    assert main(["optimize", "select", "--table", str(table), "--power-budget", repr(budget), "--json"]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err == f"Error: --power-budget: {lib.message} (allowed: {lib.allowed})\n"

    with pytest.raises(grpc.RpcError) as info:
        optimizer.Select(optimizer_pb2.SelectRequest(candidates=_candidates(),
                                                     budgets=common_pb2.Budgets(power_budget_w=budget)))
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert info.value.details() == f"budgets.power_budget_w: {lib.message} (allowed: {lib.allowed})"


def test_a_good_budget_passes_on_every_surface(tmp_path, capsys, optimizer):
    table = tmp_path / "t.csv"
    table.write_text(OPTIONS)
    assert main(["optimize", "select", "--table", str(table), "--power-budget", "30", "--json"]) == 0
    assert '"power_w": 20.0' in capsys.readouterr().out
    got = optimizer.Select(optimizer_pb2.SelectRequest(candidates=_candidates(),
                                                       budgets=common_pb2.Budgets(power_budget_w=30.0)))
    assert got.decisions[0].feasible and got.decisions[0].power_w == 20.0


def test_grpc_nested_mode_error_keeps_its_path(optimizer):
    req = optimizer_pb2.StartSearchRequest(strategy=optimizer_pb2.STRATEGY_RANDOM, problem=optimizer_pb2.PROBLEM_TRAIN,
                                           device="orin-agx", modes=[mode_to_proto(PowerMode(12, 2201.6, 1234.0,
                                                                                             3199.0))],
                                           budgets=common_pb2.Budgets(power_budget_w=30.0))
    with pytest.raises(grpc.RpcError) as info:
        optimizer.StartSearch(req)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert info.value.details().startswith("modes[0].gpu_mhz: ")


@pytest.mark.parametrize("argv,field", [
    (["search", "--strategy", "gmd", "--replay", "{table}", "--problem", "train", "--power-budget", "0"],
     "--power-budget"),
    (["search", "--strategy", "random", "--replay", "{table}", "--problem", "train", "--power-budget", "30",
      "--seed", "-1"], "--seed"),
    (["optimize", "select", "--table", "{table}", "--power-budget", "30", "--risk", "0.7"], "--risk"),
    (["optimize", "select", "--table", "{table}", "--power-budget", "30", "--time-budget-ms", "0"],
     "--time-budget-ms"),
    (["optimize", "joint", "--lut", "{table}", "--efficiency", "{table}", "--power-cap", "0"], "--power-cap"),
    (["optimize", "frontier", "--table", "{table}", "--profiled", "{table}", "--n", "0"], "--n"),
    (["profile", "--device", "sim:orin-agx", "--workload", "resnet18", "--random", "2", "--batch-sizes", "16,0",
      "--out", "{out}"], "--batch-sizes[1]"),
    (["profile", "--device", "sim:orin-agx", "--workload", "resnet18", "--random", "0", "--out", "{out}"],
     "--random"),
    (["modes", "--device", "pi4"], "--device"),
    (["device", "--device", "sim:orin-agx", "--hard-limit-w", "0"], "--hard-limit-w"),
    (["serve", "teleporter"], "SERVICE"),
])
def test_every_command_reports_field_message_allowed_and_exits_2(argv, field, tmp_path, capsys):
    table = tmp_path / "t.csv"
    table.write_text(OPTIONS)
    args = [a.format(table=table, out=tmp_path / "out.csv") for a in argv]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"Error: {field}: ") and "(allowed: " in err and "Traceback" not in err, err
    assert len(err.strip().splitlines()) == 1, err  # no usage block, no second wording


def test_a_fleet_file_refuses_a_0_w_node_budget(tmp_path, capsys):
    (tmp_path / "t.csv").write_text(OPTIONS)
    fleet = tmp_path / "fleet.json"
    fleet.write_text('{"objective": "makespan", "nodes": [{"id": "a", "power_budget_w": 0, "samples": 100, '
                     '"table": "t.csv"}]}')
    assert main(["plan", "--fleet", str(fleet), "--json"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("Error: ") and "nodes[0].power_budget_w: 0 is not > 0" in err
    assert f"(allowed: {v.POWER_BUDGET_ALLOWED})" in err
