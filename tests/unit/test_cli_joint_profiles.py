"""``edgetune optimize joint --profiles``: the joint method's LUT straight from profile tables (time per
minibatch scaled to s samples, PEAK power, the cap strict), and ``edgetune profile --order cap-search``
(the method's efficient profiling order) feeding it."""

from __future__ import annotations

import json

import pytest

from edgetune.cli import main
from edgetune.optimization.joint_tables import lut_from_profiles
from edgetune.tables import read_profile_table, write_table

HEAD = ["cores", "cpu_mhz", "gpu_mhz", "emc_mhz", "batch_size", "time_ms", "power_w", "peak_power_w"]


def _joint(capsys, *args) -> tuple[int, dict | str]:
    code = main(["optimize", "joint", *map(str, args)])
    out, err = capsys.readouterr()
    return code, (json.loads(out) if code == 0 and "--json" in args else out + err)


@pytest.fixture()
def eff(tmp_path):
    write_table([{"batch_size": 8, "passes_to_target": 10}, {"batch_size": 32, "passes_to_target": 15}],
                tmp_path / "eff.csv")
    return tmp_path / "eff.csv"


def test_the_lut_is_time_per_minibatch_scaled_to_s_samples_and_peak_power(tmp_path, eff, capsys):
    rows = [dict(zip(HEAD, r, strict=True)) for r in [
        (4, 1479.0, 921.6, 1600.0, 32, 200.0, 5.0, 6.5),   # s=64 (2 x 32): 0.4 s per pass, peak 6.5 W
        (4, 1479.0, 460.8, 1600.0, 32, 380.0, 4.0, 5.2),   # 0.76 s
        (4, 1479.0, 921.6, 1600.0, 8, 60.0, 4.5, 5.9),     # 8 minibatches per pass: 0.48 s
        (4, 1479.0, 460.8, 1600.0, 8, 100.0, 3.5, 4.4)]]   # 0.8 s
    write_table(rows, tmp_path / "p.csv")
    lut = lut_from_profiles([tmp_path / "p.csv"])
    # s defaults to 2 x the largest batch size, as estimate efficiency counts its passes (a time to target
    # half the truth came from the two defaults differing)
    assert lut.time_s.tolist() == pytest.approx([0.4, 0.76, 0.48, 0.8])
    assert lut.power_w.tolist() == [6.5, 5.2, 5.9, 4.4]  # the peak, not the mean
    assert lut.mode[0] == "4c/1479/921.6/1600"
    # no cap: b=8 at 921.6 MHz (0.48 s x 10 passes = 4.8 s) beats b=32 there (0.4 s x 15 = 6.0 s)
    code, got = _joint(capsys, "--profiles", tmp_path / "p.csv", "--efficiency", eff, "--power-cap", "none", "--json")
    assert code == 0 and got["batch_size"] == 8 and got["time_to_target_s"] == pytest.approx(4.8)
    # a cap exactly at b=8's fast peak rules it out (strict): b=8 slow (8.0 s) vs b=32 slow (11.4 s)
    code, got = _joint(capsys, "--profiles", tmp_path / "p.csv", "--efficiency", eff, "--power-cap", 5.9, "--json")
    assert code == 0 and got["batch_size"] == 8 and got["mode"] == "4c/1479/460.8/1600"
    assert got["power_w"] == 4.4 and got["time_to_target_s"] == pytest.approx(8.0)
    code, got = _joint(capsys, "--profiles", tmp_path / "p.csv", "--efficiency", eff, "--power-cap", 5.91, "--json")
    assert got["mode"] == "4c/1479/921.6/1600"
    # s given: every time scales by s / b
    lut32 = lut_from_profiles([tmp_path / "p.csv"], samples_per_pass=32)
    assert lut32.time_s.tolist() == pytest.approx([0.2, 0.38, 0.24, 0.4])


@pytest.mark.parametrize(("args", "needle"), [
    (["--power-cap", "5"], "exactly one of --lut"),
    (["--lut", "x.csv", "--profiles", "x.csv", "--power-cap", "5"], "exactly one of --lut"),
    (["--profiles", "p.csv", "--samples-per-pass", "16", "--power-cap", "5"], "--samples-per-pass"),
])
def test_bad_joint_inputs_exit_2(tmp_path, eff, capsys, monkeypatch, args, needle):
    monkeypatch.chdir(tmp_path)
    write_table([dict(zip(HEAD, (4, 1479.0, 921.6, 1600.0, 32, 200.0, 5.0, 6.5), strict=True))], tmp_path / "p.csv")
    code, text = _joint(capsys, *args, "--efficiency", eff)
    assert code == 2 and needle in text


def test_cap_search_profiles_fewer_points_and_gives_the_same_choice(tmp_path, eff, capsys):
    common = ["--device", "sim:nano", "--workload", "resnet18", "--batch-sizes", "8,32", "--n-minibatches", "3",
              "--warmup", "1", "--idle-s", "0"]
    assert main(["profile", *common, "--order", "cap-search", "--power-cap", "5", "--out",
                 str(tmp_path / "cap.csv")]) == 0
    cap_rows = read_profile_table(tmp_path / "cap.csv").rows
    n_levels = len({r["gpu_mhz"] for r in cap_rows})
    assert main(["profile", *common, "--modes", str(_ladder(tmp_path, cap_rows)), "--order", "as-given",
                 "--out", str(tmp_path / "all.csv")]) == 0
    all_rows = read_profile_table(tmp_path / "all.csv").rows
    capsys.readouterr()
    assert len(cap_rows) < len(all_rows) == 2 * len({r["gpu_mhz"] for r in all_rows})
    assert n_levels <= len({r["gpu_mhz"] for r in all_rows})
    _, by_cap = _joint(capsys, "--profiles", tmp_path / "cap.csv", "--efficiency", eff, "--power-cap", 5, "--json")
    _, by_all = _joint(capsys, "--profiles", tmp_path / "all.csv", "--efficiency", eff, "--power-cap", 5, "--json")
    assert by_cap["feasible"] and by_cap["power_w"] < 5
    assert (by_cap["batch_size"], by_cap["mode"]) == (by_all["batch_size"], by_all["mode"])


def _ladder(tmp_path, rows) -> object:
    """Every GPU clock of the sim Nano with the other knobs as cap-search fixes them."""
    from edgetune.powermodes.specs import get_spec

    spec, r = get_spec("nano"), rows[0]
    write_table([{"cores": r["cores"], "cpu_mhz": r["cpu_mhz"], "gpu_mhz": f, "emc_mhz": r["emc_mhz"]}
                 for f in sorted(spec.gpu_mhz)], tmp_path / "ladder.csv")
    return tmp_path / "ladder.csv"
