"""The public API: stubs are fresh, every service has its RPCs with the right streaming kinds,
units are in field names, and the library <-> protobuf conversions round-trip."""

from __future__ import annotations

import math
import shutil

import numpy as np
import pytest
from google.protobuf.descriptor import FieldDescriptor

from edgetune.base.mode import PowerMode
from edgetune.base.records import Predictions
from edgetune.base.roles import Role
from edgetune.errors import InvalidArgument
from edgetune.powermodes.spec import DeviceSpec, Preset
from edgetune.proto import generate
from edgetune.proto.serde import common as convert
from edgetune.proto.serde import tables
from edgetune.proto.v1 import (
    common_pb2,
    coordinator_pb2,
    estimator_pb2,
    optimizer_pb2,
    profiler_pb2,
)

MODULES = (common_pb2, profiler_pb2, estimator_pb2, optimizer_pb2, coordinator_pb2)

# --- freshness ------------------------------------------------------------------------------


def test_stubs_are_fresh(tmp_path):
    """Fails when a .proto changed without `make protos` (or the stubs were edited by hand)."""
    written = generate.generate(tmp_path)
    assert written, "no stubs generated"
    committed = generate.DEFAULT_OUT
    fresh_names = sorted(p.name for p in written)
    committed_names = sorted(p.name for p in committed.iterdir() if p.name.endswith(generate.GENERATED_SUFFIXES))
    assert committed_names == fresh_names, "stub files differ: run `make protos`"
    stale = [p.name for p in written if p.read_bytes() != (committed / p.name).read_bytes()]
    assert not stale, f"stale stubs {stale}: run `make protos`"


def test_check_flag_reports_stale_stubs(tmp_path, capsys):
    out = tmp_path / "v1"
    shutil.copytree(generate.DEFAULT_OUT, out)
    assert generate.main(["--check", "--out", str(out)]) == 0
    (out / "optimizer_pb2.py").write_text("# edited by hand\n")
    (out / "common_pb2_grpc.pyi").unlink()
    assert generate.main(["--check", "--out", str(out)]) == 1
    err = capsys.readouterr().err
    assert "optimizer_pb2.py (out of date)" in err
    assert "common_pb2_grpc.pyi (missing)" in err


def test_generation_is_deterministic(tmp_path):
    a = {p.name: p.read_bytes() for p in generate.generate(tmp_path / "a")}
    b = {p.name: p.read_bytes() for p in generate.generate(tmp_path / "b")}
    assert a == b


def test_imports_are_rewritten_but_descriptor_names_kept():
    for path in generate.DEFAULT_OUT.iterdir():
        if path.name.endswith(generate.GENERATED_SUFFIXES):
            text = path.read_text()
            assert "from edgetune.v1 import" not in text, path.name
            assert "import edgetune.v1." not in text, path.name
    # Reflection clients see the proto paths, not the Python package.
    assert profiler_pb2.DESCRIPTOR.name == "edgetune/v1/profiler.proto"
    assert [d.name for d in profiler_pb2.DESCRIPTOR.dependencies][0] == "edgetune/v1/common.proto"
    assert all(m.DESCRIPTOR.package == "edgetune.v1" for m in MODULES)


# --- services -------------------------------------------------------------------------------

U, SS = "unary", "server_stream"

EXPECTED_RPCS = {
    "Profiler": {"GetDevice": U, "ListPowerModes": U, "Profile": SS, "ApplyPowerMode": U,
                 "RestorePowerMode": U, "StreamPower": SS},
    "Estimator": {"Fit": U, "Transfer": U, "Predict": SS, "EstimateBatchEfficiency": U,
                  "EstimateEnergy": U, "ListModels": U},
    "Optimizer": {"ParetoFront": U, "Select": U, "SelectJoint": U, "StartSearch": U, "Ask": U, "Tell": U,
                  "Best": U, "EndSearch": U, "SelectConcurrent": U, "NextProfiles": U},
    "Coordinator": {"RegisterNode": U, "Heartbeat": U, "ListNodes": U, "PlanRound": U, "GetNodeConfig": U,
                    "WatchConfig": SS, "UpdateBudget": U, "SubmitTuningJob": U, "GetTuningJob": U,
                    "ListTuningJobs": U, "WatchTuningJob": SS, "CancelTuningJob": U, "SubmitProfiling": U},
}
SERVICE_MODULES = {"Profiler": profiler_pb2, "Estimator": estimator_pb2, "Optimizer": optimizer_pb2,
                   "Coordinator": coordinator_pb2}


def _kind(method) -> str:
    return {(False, False): "unary", (False, True): "server_stream", (True, False): "client_stream",
            (True, True): "bidi_stream"}[(method.client_streaming, method.server_streaming)]


@pytest.mark.parametrize("service", sorted(EXPECTED_RPCS))
def test_service_has_its_rpcs_with_streaming_kinds(service):
    desc = SERVICE_MODULES[service].DESCRIPTOR.services_by_name[service]
    assert desc.full_name == f"edgetune.v1.{service}"
    assert {m.name: _kind(m) for m in desc.methods} == EXPECTED_RPCS[service]


def test_streamed_responses_carry_what_clients_need():
    profile_event = profiler_pb2.ProfileEvent.DESCRIPTOR
    assert {f.name for f in profile_event.oneofs_by_name["event"].fields} == {"progress", "measurement", "skipped"}
    predict = estimator_pb2.PredictResponse.DESCRIPTOR.fields_by_name
    assert {"table", "offset", "total"} <= set(predict) and predict["table"].message_type.name == "PredictionTable"
    # Columnar: every column a packed repeated scalar (no per-row messages anywhere a table crosses the wire).
    columns = common_pb2.PredictionTable.DESCRIPTOR.fields
    assert all(f.is_repeated and f.type != FieldDescriptor.TYPE_MESSAGE
               and f.is_packed for f in columns)
    assert "Prediction" not in common_pb2.DESCRIPTOR.message_types_by_name
    watch = coordinator_pb2.DESCRIPTOR.services_by_name["Coordinator"].methods_by_name["WatchConfig"]
    assert watch.output_type.name == "NodeConfig"
    assert {"node_id", "revision", "mode", "batch_size", "workload", "valid_from"} <= set(
        watch.output_type.fields_by_name)


def test_budgets_distinguish_absent_from_zero():
    for field in common_pb2.Budgets.DESCRIPTOR.fields:
        assert field.has_presence, f"Budgets.{field.name} must be optional"


# Dimensionless or mixed-unit doubles, each justified: everything else names its unit.
UNITLESS_DOUBLES = {
    "BatchEfficiency.passes_to_target", "BatchEfficiency.r", "ParetoFrontRequest.risk",
    "SelectRequest.risk", "EstimateBatchEfficiencyRequest.target_accuracy",
    "FitRequest.validation_fraction",
    # A sweep of whichever budget the objective is constrained by (W or ms).
    "BudgetSweep.start", "BudgetSweep.stop", "BudgetSweep.step",
}
UNIT_SUFFIXES = ("_ms", "_s", "_w", "_j", "_mhz", "_hz", "_rps")


def _messages(desc):
    for m in desc.message_types_by_name.values():
        yield m
        yield from m.nested_types


def test_units_are_in_field_names():
    offenders = []
    for module in MODULES:
        for msg in _messages(module.DESCRIPTOR):
            if msg.GetOptions().map_entry:
                continue
            for f in msg.fields:
                if f.type in (FieldDescriptor.TYPE_DOUBLE, FieldDescriptor.TYPE_FLOAT):
                    name = f"{msg.name}.{f.name}"
                    if name not in UNITLESS_DOUBLES and not f.name.endswith(UNIT_SUFFIXES):
                        offenders.append(name)
    assert not offenders, f"name the unit of {offenders}"


# --- conversions ----------------------------------------------------------------------------

NANO = DeviceSpec(
    name="nano", display_name="Jetson Nano 4GB", core_counts=(1, 2, 3, 4),
    cpu_mhz=(102.0, 204.0, 307.2, 403.2, 1428.0, 1479.0),
    gpu_mhz=(76.8, 153.6, 230.4, 307.2, 384.0, 460.8, 537.6, 614.4, 691.2, 768.0, 844.8, 921.6),
    emc_mhz=(204.0, 1600.0),
    presets=(Preset(0, "MAXN", 4, 1479.0, 921.6, 1600.0), Preset(1, "5W", 2, 918.0, 640.0, 1600.0, budget_w=5.0)),
    idle_power_w=1.2, max_power_w=10.0, soc="t210", notes="table for the test",
)


def test_mode_round_trip():
    mode = PowerMode(8, 1344.0, 726.75, 2133.0)
    msg = convert.mode_to_proto(mode)
    assert (msg.cores, msg.cpu_mhz, msg.gpu_mhz, msg.emc_mhz) == (8, 1344.0, 726.75, 2133.0)
    assert convert.mode_from_proto(common_pb2.PowerMode.FromString(msg.SerializeToString())) == mode


def test_unset_mode_is_refused_naming_the_field():
    with pytest.raises(InvalidArgument, match=r"^request\.mode\.cores"):
        convert.mode_from_proto(common_pb2.PowerMode(), field="request.mode")
    with pytest.raises(InvalidArgument, match=r"mode\.gpu_mhz"):
        convert.mode_from_proto(common_pb2.PowerMode(cores=4, cpu_mhz=1.0, gpu_mhz=-3.0, emc_mhz=1.0))


def test_preset_round_trip_keeps_absent_budget():
    for preset in NANO.presets:
        msg = convert.preset_to_proto(preset)
        assert msg.HasField("budget_w") == (preset.budget_w is not None)
        assert convert.preset_from_proto(msg) == preset


def test_spec_round_trip():
    msg = common_pb2.DeviceSpec.FromString(convert.spec_to_proto(NANO).SerializeToString())
    assert list(msg.gpu_mhz) == list(NANO.gpu_mhz)
    back = convert.spec_from_proto(msg)
    assert back == NANO
    assert back.n_modes == NANO.n_modes


def test_spec_with_an_empty_table_is_refused():
    msg = convert.spec_to_proto(NANO)
    del msg.emc_mhz[:]
    with pytest.raises(InvalidArgument, match=r"spec\.emc_mhz"):
        convert.spec_from_proto(msg)


def test_enums():
    assert convert.role_to_proto(Role.TRAIN) == common_pb2.ROLE_TRAIN
    assert convert.role_to_proto("infer") == common_pb2.ROLE_INFER
    assert convert.role_from_proto(common_pb2.ROLE_INFER) is Role.INFER
    assert convert.role_from_proto(0, default=Role.TRAIN) is Role.TRAIN
    with pytest.raises(InvalidArgument, match=r"^workload\.role: is not set \(allowed: train, infer\)"):
        convert.role_from_proto(0, field="workload.role")
    assert convert.GRID.from_proto(common_pb2.GRID_UNSPECIFIED) == "full"
    assert convert.GRID.from_proto(common_pb2.GRID_POWERTRAIN) == "powertrain"
    assert convert.GRID.to_proto("fulcrum") == common_pb2.GRID_FULCRUM
    assert convert.STRATEGY.names == ("gmd", "als", "random", "nn", "exhaustive")
    assert convert.PROBLEM.to_proto("concurrent") == optimizer_pb2.PROBLEM_CONCURRENT
    assert convert.OBJECTIVE.from_proto(0) == "min_time"
    assert convert.ROUND_OBJECTIVE.from_proto(coordinator_pb2.ROUND_OBJECTIVE_ENERGY) == "energy"
    with pytest.raises(InvalidArgument, match="strategy.*gmd, als"):
        convert.STRATEGY.to_proto("annealing")


def _arrays(n: int = 5, std: bool = True) -> Predictions:
    rng = np.random.default_rng(0)
    modes = np.column_stack([rng.integers(1, 13, n), rng.uniform(100, 2200, n), rng.uniform(100, 1300, n),
                             rng.uniform(200, 3200, n)])
    return Predictions(modes, rng.integers(0, 65, n), rng.uniform(1, 500, n), rng.uniform(0, 60, n),
                       rng.uniform(0, 5, n) if std else None, rng.uniform(0, 2, n) if std else None)


@pytest.mark.parametrize("std", [True, False])
def test_prediction_table_round_trips_columns(std):
    rows = _arrays(std=std)
    msg = tables.table_to_proto(rows)
    # Columnar on the wire: one packed repeated field per column, not a message per row.
    assert list(msg.cores) == rows.modes[:, 0].astype(int).tolist() and len(msg.time_ms) == 5
    back = tables.table_from_proto(common_pb2.PredictionTable.FromString(msg.SerializeToString()))
    for name in ("modes", "batch_size", "time_ms", "power_w", "time_std_ms", "power_std_w"):
        want, got = getattr(rows, name), getattr(back, name)
        assert (got is None) == (not std and name.endswith(("std_ms", "std_w")))
        if want is not None:
            np.testing.assert_array_equal(got, want)
    assert back.mode(2) == PowerMode(int(rows.modes[2, 0]), *map(float, rows.modes[2, 1:]))
    assert len(back.subset([4, 0])) == 2 and back.subset([4, 0]).time_ms[0] == rows.time_ms[4]
    joined = Predictions.concat([back.slice(0, 2), back.slice(2, 5)])
    np.testing.assert_array_equal(joined.power_w, rows.power_w)


@pytest.mark.parametrize("batch_high", [65, 300, 20_000])
def test_prediction_table_wire_form_holds_exactly_the_values(batch_high):
    """Tables are written and read through their packed wire form (numpy bytes, not one number at a
    time): the fields hold exactly the values, one- to three-byte varints included (batch sizes past
    2^14 are written field by field, and still read from the wire)."""
    rng = np.random.default_rng(batch_high)
    n = 501
    modes = np.column_stack([rng.integers(1, 200, n), rng.uniform(100, 2200, n), rng.uniform(100, 1300, n),
                             rng.uniform(200, 3200, n)])
    rows = Predictions(modes, rng.integers(0, batch_high, n), rng.uniform(1, 500, n),
                       rng.uniform(0, 60, n), rng.uniform(0, 5, n), None)
    msg = tables.table_to_proto(rows)
    assert list(msg.cores) == rows.modes[:, 0].astype(int).tolist()
    assert list(msg.batch_size) == rows.batch_size.tolist() and list(msg.time_ms) == rows.time_ms.tolist()
    assert list(msg.time_std_ms) == rows.time_std_ms.tolist() and len(msg.power_std_w) == 0
    back = tables.table_from_proto(msg)
    np.testing.assert_array_equal(back.modes, rows.modes)
    np.testing.assert_array_equal(back.batch_size, rows.batch_size)
    np.testing.assert_array_equal(back.time_std_ms, rows.time_std_ms)
    assert back.power_std_w is None


@pytest.mark.parametrize(("column", "value", "field"), [
    ("time_ms", math.nan, "cands.time_ms[3]"),
    ("time_ms", 0.0, "cands.time_ms[3]"),
    ("power_w", -1.0, "cands.power_w[3]"),
    ("power_std_w", math.inf, "cands.power_std_w[3]"),
    ("time_std_ms", -0.5, "cands.time_std_ms[3]"),
    ("gpu_mhz", math.nan, "cands.gpu_mhz[3]"),
    ("cores", 0, "cands.cores[3]"),
    ("batch_size", -2, "cands.batch_size[3]"),
])
def test_prediction_table_refuses_bad_values_naming_column_and_row(column, value, field):
    msg = tables.table_to_proto(_arrays())
    getattr(msg, column)[3] = value
    with pytest.raises(InvalidArgument) as info:
        tables.table_from_proto(msg, "cands")
    assert info.value.field == field


def test_prediction_table_refuses_ragged_columns_and_empty():
    msg = tables.table_to_proto(_arrays())
    del msg.power_w[-1]
    with pytest.raises(InvalidArgument) as info:
        tables.table_from_proto(msg, "t")
    assert info.value.field == "t.power_w" and "4 values" in info.value.message
    msg = tables.table_to_proto(_arrays())
    del msg.time_std_ms[0]
    with pytest.raises(InvalidArgument) as info:
        tables.table_from_proto(msg, "t")
    assert info.value.field == "t.time_std_ms"
    with pytest.raises(InvalidArgument, match="is empty"):
        tables.table_from_proto(common_pb2.PredictionTable(), "t")
    assert len(tables.table_from_proto(common_pb2.PredictionTable(), "t", allow_empty=True)) == 0


def test_merge_tables_appends_every_column_in_order():
    rows = _arrays(7)
    chunks = [tables.table_to_proto(rows.slice(i, min(i + 3, 7))) for i in range(0, 7, 3)]
    merged = tables.merge_tables(chunks)
    assert merged == tables.table_to_proto(rows)
    np.testing.assert_array_equal(tables.table_from_proto(merged).modes, rows.modes)


def test_prediction_table_from_rows():
    rows = [{"cores": 4, "cpu_mhz": 422.4, "gpu_mhz": 114.75, "emc_mhz": 665.0, "batch_size": 16, "time_ms": 490.0,
             "power_w": 14.7, "power_std_w": 0.3}]
    got = Predictions.from_rows(rows)
    assert got.mode(0) == PowerMode(4, 422.4, 114.75, 665.0) and got.time_std_ms is None
    assert got.power_std_w is not None and got.power_std_w.tolist() == [0.3]
