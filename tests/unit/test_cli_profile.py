"""``edgetune profile``: the docs/contract.md command against the simulated Orin AGX."""

from __future__ import annotations

import pytest

from edgetune.base.mode import PowerMode
from edgetune.cli import main
from edgetune.powermodes.specs import ORIN_AGX
from edgetune.tables import PROFILE_COLUMNS, read_profile_table, write_table

BASE = ["profile", "--device", "sim:orin-agx", "--workload", "resnet18"]


def run(capsys, *args: str) -> tuple[int, str, str]:
    code = main([*BASE, *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_random_20_writes_20_plausible_rows_in_contract_format(tmp_path, capsys):
    # The acceptance check of docs/contract.md.
    out = tmp_path / "p.csv"
    code, stdout, err = run(capsys, "--random", "20", "--out", str(out))
    assert code == 0, err
    table = read_profile_table(out)  # strict reader: types, signs, required columns
    assert len(table) == 20
    assert table.columns[:len(PROFILE_COLUMNS)] == list(PROFILE_COLUMNS)
    for col in ("device", "workload", "role", "peak_power_w", "energy_j", "time_std_ms", "power_std_w", "samples"):
        assert table.has(col)
    modes = set(table.modes())
    assert len(modes) == 20 and all(ORIN_AGX.contains(m) for m in modes)
    for r in table:
        assert r["device"] == "orin-agx" and r["workload"] == "resnet18" and r["role"] == "train"
        assert r["batch_size"] == 16
        assert 20.0 < r["time_ms"] < 20_000.0  # MAXN ≈ 60 ms, slowest modes seconds (PowerTrain)
        assert ORIN_AGX.idle_power_w * 0.8 < r["power_w"] < 70.0
        assert r["peak_power_w"] >= r["power_w"]
        assert r["samples"] >= 1 and r["time_std_ms"] >= 0
        # energy of the 40 clean minibatches ≈ mean power × their total time
        assert r["energy_j"] == pytest.approx(r["power_w"] * 40 * r["time_ms"] / 1000.0, rel=0.05)
    assert "20 points" in stdout


def test_same_seed_same_modes_and_batch_size_cross_product(tmp_path, capsys):
    a, b = tmp_path / "a.csv", tmp_path / "b.csv"
    assert run(capsys, "--random", "3", "--seed", "7", "--batch-sizes", "8,32", "--n-minibatches", "5",
               "--out", str(a))[0] == 0
    assert run(capsys, "--random", "3", "--seed", "7", "--n-minibatches", "5", "--out", str(b))[0] == 0
    ta, tb = read_profile_table(a), read_profile_table(b)
    assert len(ta) == 6 and sorted(r["batch_size"] for r in ta) == [8, 8, 8, 32, 32, 32]
    assert set(ta.modes()) == set(tb.modes())


def test_modes_file_keeps_row_order_and_per_row_batch_sizes(tmp_path, capsys):
    modes = tmp_path / "modes.csv"
    rows = [dict(PowerMode(4, 422.4, 114.75, 665.6).as_dict(), batch_size=8),
            dict(ORIN_AGX.maxn().as_dict(), batch_size=32)]
    write_table(rows, modes)
    out = tmp_path / "p.csv"
    code, _, err = run(capsys, "--modes", str(modes), "--role", "infer", "--n-minibatches", "5", "--out", str(out))
    assert code == 0, err
    t = read_profile_table(out)
    assert [(r["cores"], r["batch_size"], r["role"]) for r in t] == [(4, 8, "infer"), (12, 32, "infer")]


@pytest.mark.parametrize("args, needle", [
    (["--random", "3", "--modes", "m.csv"], "--modes"),
    ([], "--random"),
    (["--random", "0"], "--random"),
    (["--random", "-2"], "--random"),
    (["--random", "3", "--batch-sizes", "16,x"], "--batch-sizes"),
    (["--random", "3", "--batch-sizes", "0"], "--batch-sizes"),
    (["--random", "20000"], "--random"),
])
def test_bad_options_exit_2_naming_the_option(tmp_path, capsys, args, needle):
    out = tmp_path / "p.csv"
    code, _, err = run(capsys, *args, "--out", str(out))
    assert code == 2 and needle in err
    assert not out.exists()


def test_unknown_workload_and_device_exit_2(tmp_path, capsys):
    out = str(tmp_path / "p.csv")
    code = main(["profile", "--device", "sim:orin-agx", "--workload", "alexnet", "--random", "2", "--out", out])
    err = capsys.readouterr().err
    assert code == 2 and "--workload" in err and "resnet18" in err
    code = main(["profile", "--device", "sim:pi4", "--workload", "resnet18", "--random", "2", "--out", out])
    assert code == 2 and "device" in capsys.readouterr().err


def test_modes_invalid_on_the_device_exit_2_naming_file_line_and_field(tmp_path, capsys):
    modes = tmp_path / "modes.csv"
    write_table([ORIN_AGX.maxn().as_dict(), PowerMode(8, 1344.0, 700.0, 2133.0).as_dict()], modes)
    out = tmp_path / "p.csv"
    code, _, err = run(capsys, "--modes", str(modes), "--out", str(out))
    assert code == 2 and "modes.csv:3" in err and "gpu_mhz" in err
    assert not out.exists()
    broken = tmp_path / "broken.csv"
    broken.write_text("cores,cpu_mhz,gpu_mhz\n4,422.4,114.75\n")
    code, _, err = run(capsys, "--modes", str(broken), "--out", str(out))
    assert code == 2 and "emc_mhz" in err


def test_hard_limit_writes_partial_rows_and_exits_2(tmp_path, capsys):
    modes = tmp_path / "modes.csv"
    write_table([PowerMode(4, 422.4, 114.75, 665.6).as_dict(), ORIN_AGX.maxn().as_dict()], modes)
    out = tmp_path / "p.csv"
    code, _, err = run(capsys, "--modes", str(modes), "--hard-limit-w", "25", "--n-minibatches", "5",
                       "--out", str(out))
    assert code == 2 and "hard_limit_w" in err
    assert len(read_profile_table(out)) == 1
