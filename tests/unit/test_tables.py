"""Profile / mode table IO (docs/contract.md "Tables"): strict reading, errors at FILE:LINE:COLUMN."""

from __future__ import annotations

import io
import re

import pytest

from edgetune.errors import InvalidArgument
from edgetune.tables import (
    PROFILE_COLUMNS,
    read_mode_table,
    read_profile_table,
    table_to_csv,
    write_table,
)

HEADER = "cores,cpu_mhz,gpu_mhz,emc_mhz,batch_size,time_ms,power_w"
GOOD = "12,2201.6,1300.5,3199,32,41.5,38.2"


def write(tmp_path, text: str, name: str = "t.csv"):
    path = tmp_path / name
    path.write_text(text)
    return path


def refused(path, reader=read_profile_table) -> InvalidArgument:
    with pytest.raises(InvalidArgument) as err:
        reader(path)
    return err.value


def test_good_table_parses_with_types(tmp_path):
    t = read_profile_table(write(tmp_path, f"{HEADER}\n{GOOD}\n8,1497.6,828.75,2133,16,20,25.5\n"))
    assert t.columns == list(PROFILE_COLUMNS) and len(t) == 2
    row = t.rows[0]
    assert row == {"cores": 12, "cpu_mhz": 2201.6, "gpu_mhz": 1300.5, "emc_mhz": 3199.0, "batch_size": 32,
                   "time_ms": 41.5, "power_w": 38.2}
    assert isinstance(row["cores"], int) and isinstance(row["emc_mhz"], float)
    assert t.modes()[1].label() == "8c/1497.6/828.75/2133"
    assert t.mode_array().shape == (2, 4)


@pytest.mark.parametrize("missing", PROFILE_COLUMNS)
def test_missing_column_names_file_line_and_column(tmp_path, missing):
    cols = [c for c in PROFILE_COLUMNS if c != missing]
    path = write(tmp_path, ",".join(cols) + "\n")
    err = refused(path)
    assert err.field == f"{path}:1:{missing}"
    assert "missing" in str(err)


def test_error_field_is_file_line_column(tmp_path):
    path = write(tmp_path, f"{HEADER}\n{GOOD}\n12,2201.6,1300.5,3199,32,fast,38.2\n")
    err = refused(path)
    assert re.fullmatch(r".+\.csv:\d+:[a-z_]+", err.field)
    assert err.field == f"{path}:3:time_ms" and "'fast' is not a number" in str(err)


@pytest.mark.parametrize("cell, col", [("abc", "power_w"), ("", "power_w"), ("1e", "cpu_mhz"), ("nan", "time_ms"),
                                       ("inf", "power_w"), ("16.5", "batch_size"), ("x", "cores")])
def test_non_numeric_or_non_finite_value(tmp_path, cell, col):
    values = dict(zip(PROFILE_COLUMNS, GOOD.split(","), strict=False))
    values[col] = cell
    path = write(tmp_path, f"{HEADER}\n" + ",".join(values[c] for c in PROFILE_COLUMNS) + "\n")
    assert refused(path).field == f"{path}:2:{col}"


def test_integer_columns_accept_integral_floats(tmp_path):
    t = read_profile_table(write(tmp_path, f"{HEADER}\n12.0,2201.6,1300.5,3199,32.0,41.5,38.2\n"))
    assert t.rows[0]["cores"] == 12 and t.rows[0]["batch_size"] == 32


@pytest.mark.parametrize("col, value", [("time_ms", "-1"), ("power_w", "-0.5")])
def test_negative_time_or_power(tmp_path, col, value):
    values = dict(zip(PROFILE_COLUMNS, GOOD.split(","), strict=False))
    values[col] = value
    path = write(tmp_path, f"{HEADER}\n{GOOD}\n" + ",".join(values[c] for c in PROFILE_COLUMNS) + "\n")
    err = refused(path)
    assert err.field == f"{path}:3:{col}" and "negative" in str(err)


def test_zero_time_is_allowed_but_zero_cores_is_not(tmp_path):
    read_profile_table(write(tmp_path, f"{HEADER}\n12,2201.6,1300.5,3199,32,0,0\n"))
    path = write(tmp_path, f"{HEADER}\n0,2201.6,1300.5,3199,32,1,1\n", "z.csv")
    assert refused(path).field == f"{path}:2:cores"


def test_negative_optional_quantities(tmp_path):
    path = write(tmp_path, f"{HEADER},energy_j\n{GOOD},-3\n")
    assert refused(path).field == f"{path}:2:energy_j"


def test_duplicate_header_row(tmp_path):
    path = write(tmp_path, f"{HEADER}\n{GOOD}\n{HEADER}\n{GOOD}\n")
    err = refused(path)
    assert err.field == f"{path}:3:cores" and "duplicate header" in str(err)


def test_duplicate_header_row_with_spaces(tmp_path):
    spaced = ", ".join(HEADER.split(","))
    path = write(tmp_path, f"{HEADER}\n{GOOD}\n{spaced}\n")
    assert refused(path).field == f"{path}:3:cores"


def test_duplicate_column(tmp_path):
    path = write(tmp_path, f"{HEADER},time_ms\n{GOOD},1\n")
    err = refused(path)
    assert err.field == f"{path}:1:time_ms" and "duplicate column" in str(err)


@pytest.mark.parametrize("role", ["train", "infer"])
def test_role_values_accepted(tmp_path, role):
    t = read_profile_table(write(tmp_path, f"{HEADER},role\n{GOOD},{role}\n"))
    assert t.rows[0]["role"] == role


@pytest.mark.parametrize("role", ["training", "Train", "inference", ""])
def test_role_values_refused(tmp_path, role):
    path = write(tmp_path, f"{HEADER},role\n{GOOD},{role}\n")
    err = refused(path)
    assert err.field == f"{path}:2:role" and err.allowed == "train, infer"


def test_unknown_columns_are_carried_through(tmp_path):
    path = write(tmp_path, f"note,{HEADER},device,workload\nfirst run,{GOOD},orin-agx,resnet18\n")
    t = read_profile_table(path)
    assert t.columns[0] == "note" and t.columns[-2:] == ["device", "workload"]
    assert t.rows[0]["note"] == "first run" and t.rows[0]["workload"] == "resnet18"
    out = tmp_path / "out.csv"
    write_table(t.rows, out, t.columns)
    assert out.read_text().splitlines()[0] == f"note,{HEADER},device,workload"


def test_round_trip(tmp_path):
    rows = [{"cores": 12, "cpu_mhz": 2201.6, "gpu_mhz": 1300.5, "emc_mhz": 3199.0, "batch_size": 32,
             "time_ms": 41.12345679, "power_w": 38.2, "role": "train", "workload": "resnet18",
             "time_std_ms": 0.25, "extra": "a,b"},
            {"cores": 1, "cpu_mhz": 115.2, "gpu_mhz": 114.75, "emc_mhz": 204.0, "batch_size": 1,
             "time_ms": 1e-3, "power_w": 7.0, "role": "infer", "workload": "bert", "time_std_ms": 0.0,
             "extra": ""}]
    path = tmp_path / "sub" / "rt.csv"
    assert write_table(rows, path) == 2
    back = read_profile_table(path)
    assert back.columns == list(rows[0]) and back.rows == rows
    assert read_profile_table(io.StringIO(table_to_csv(rows)), name="mem.csv").rows == rows


def test_floats_round_trip_exactly(tmp_path):
    # Predictions and measurements go through CSV between commands: no digit may be lost.
    rows = [{**dict(zip(PROFILE_COLUMNS, (4, 1113.6, 420.75, 2133.0, 16, 41.123456789, 1 / 3), strict=False))}]
    back = read_profile_table(io.StringIO(table_to_csv(rows)), name="mem.csv").rows[0]
    assert back["time_ms"] == 41.123456789
    assert back["power_w"] == 1 / 3
    assert "1113.6," in table_to_csv(rows)  # shortest form, not 1113.5999999


def test_errors_count_physical_lines_past_blank_lines(tmp_path):
    path = write(tmp_path, f"{HEADER}\n{GOOD}\n\n12,2201.6,1300.5,3199,32,41.5,-1\n")
    assert refused(path).field == f"{path}:4:power_w"


def test_short_row_and_empty_file_and_missing_file(tmp_path):
    path = write(tmp_path, f"{HEADER}\n12,2201.6\n")
    assert refused(path).field == f"{path}:2:row"
    empty = write(tmp_path, "", "empty.csv")
    assert refused(empty).field == f"{empty}:1:header"
    assert refused(tmp_path / "nope.csv").field == str(tmp_path / "nope.csv")


def test_mode_table(tmp_path):
    t = read_mode_table(write(tmp_path, "cores,cpu_mhz,gpu_mhz,emc_mhz,batch_size\n4,1113.6,420.75,2133,16\n"))
    assert t.rows[0]["batch_size"] == 16
    path = write(tmp_path, "cores,cpu_mhz,gpu_mhz\n4,1113.6,420.75\n", "m.csv")
    assert refused(path, read_mode_table).field == f"{path}:1:emc_mhz"


def test_where_and_column(tmp_path):
    t = read_profile_table(write(tmp_path, f"{HEADER},workload\n{GOOD},a\n{GOOD},b\n"))
    assert len(t.where(workload="b")) == 1
    assert t.column("time_ms").tolist() == [41.5, 41.5]
    with pytest.raises(InvalidArgument):
        t.column("latency_ms")
