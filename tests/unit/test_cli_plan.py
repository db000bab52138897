"""``edgetune plan --fleet fleet.json``: exact JSON (docs/contract.md), human output, exit codes."""

import json

import pytest
from click.testing import CliRunner

from edgetune.cli.plan import command as plan

TABLE = ("cores,cpu_mhz,gpu_mhz,emc_mhz,batch_size,time_ms,power_w\n"
         "8,1344,727,2133,16,100,20\n"
         "12,2200,1300,3199,16,60,51.1\n"
         "4,422,115,665,16,490,14.7\n"
         "8,1344,727,2133,32,180,21\n")
MID = {"cores": 8, "cpu_mhz": 1344.0, "gpu_mhz": 727.0, "emc_mhz": 2133.0}


def fleet(tmp_path, **doc):
    (tmp_path / "tables").mkdir(exist_ok=True)
    (tmp_path / "tables" / "orin.csv").write_text(TABLE)
    doc.setdefault("nodes", [{"id": "a", "power_budget_w": 40, "samples": 1000, "table": "tables/orin.csv"},
                             {"id": "b", "power_budget_w": 60, "samples": 500, "table": "tables/orin.csv"}])
    path = tmp_path / "fleet.json"
    path.write_text(json.dumps(doc))
    return str(path)


def run(*args):
    return CliRunner().invoke(plan, [str(a) for a in args])


def test_makespan_json_exact(tmp_path):
    # a (≤ 40 W): fastest is b=32 at 180 ms: 32 minibatches = 5.76 s; b at 21 W = 2.88 s, least energy
    r = run("--fleet", fleet(tmp_path, objective="makespan", site_power_budget_w=60), "--json")
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert out == {
        "feasible": True, "makespan_s": 5.76, "energy_j": pytest.approx(181.44),
        "nodes": [
            {"id": "a", "mode": MID, "batch_size": 32, "time_s": 5.76, "power_w": 21.0,
             "energy_j": pytest.approx(120.96)},
            {"id": "b", "mode": MID, "batch_size": 32, "time_s": 2.88, "power_w": 21.0,
             "energy_j": pytest.approx(60.48)},
        ]}
    assert list(out) == ["feasible", "makespan_s", "energy_j", "nodes"]
    assert list(out["nodes"][0]) == ["id", "mode", "batch_size", "time_s", "power_w", "energy_j"]


def test_site_budget_slows_the_round(tmp_path):
    # 40 W for two nodes: a cannot take its 21 W b=32 option (b would drop to 14.7 W and take
    # 15.68 s), so both run b=16 at 20 W: a needs 63 minibatches × 100 ms
    out = json.loads(run("--fleet", fleet(tmp_path, site_power_budget_w=40), "--json").stdout)
    assert out["feasible"] and sum(n["power_w"] for n in out["nodes"]) <= 40
    assert out["makespan_s"] == pytest.approx(6.3)
    assert [n["power_w"] for n in out["nodes"]] == [20.0, 20.0]


def test_energy_objective_with_deadline(tmp_path):
    out = json.loads(run("--fleet", fleet(tmp_path, objective="energy", deadline_s=100), "--json").stdout)
    # least energy per node: b=16 at 100 ms × 20 W (2 J/minibatch) ≈ b=32 180 ms × 21 W / 2 per 16 samples
    assert out["feasible"]
    assert out["energy_j"] == pytest.approx(sum(n["energy_j"] for n in out["nodes"]))
    assert all(n["time_s"] <= 100 for n in out["nodes"])


def test_infeasible_exit_0(tmp_path):
    r = run("--fleet", fleet(tmp_path, site_power_budget_w=20), "--json")
    assert r.exit_code == 0
    out = json.loads(r.stdout)
    assert set(out) == {"feasible", "reason"} and out["feasible"] is False and "site power budget" in out["reason"]
    r = run("--fleet", fleet(tmp_path, objective="energy", deadline_s=1), "--json")
    assert json.loads(r.stdout)["feasible"] is False
    r = run("--fleet", fleet(tmp_path, site_power_budget_w=20))
    assert r.exit_code == 0 and "infeasible" in r.stdout


def test_human_output(tmp_path):
    r = run("--fleet", fleet(tmp_path, site_power_budget_w=60))
    assert r.exit_code == 0
    assert "makespan" in r.stdout and "8c/1344/727/2133" in r.stdout and "saves" in r.stdout


@pytest.mark.parametrize("nodes,where", [
    ([{"id": "a", "samples": 5, "table": "tables/orin.csv"}, {"id": "b", "samples": 5, "table": "tables/orin.csv"},
      {"id": "c", "samples": 5, "table": "tables/orin.csv", "power_budget_w": "lots"}], "nodes[2].power_budget_w"),
    ([{"id": "a", "samples": 0, "table": "tables/orin.csv"}], "nodes[0].samples"),
    ([{"id": "a", "samples": 5, "table": "tables/none.csv"}], "nodes[0].table"),
])
def test_bad_fleet_exit_2(tmp_path, nodes, where):
    r = run("--fleet", fleet(tmp_path, nodes=nodes))
    assert r.exit_code == 2 and where in r.output


def test_missing_and_malformed_fleet_exit_2(tmp_path):
    r = run("--fleet", tmp_path / "nope.json")
    assert r.exit_code == 2 and "nope.json" in r.output
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    r = run("--fleet", bad)
    assert r.exit_code == 2 and "malformed JSON" in r.output


def test_through_the_edgetune_entry_point(tmp_path, capsys):
    from edgetune.cli import main

    assert main(["plan", "--fleet", fleet(tmp_path, site_power_budget_w=60), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["makespan_s"] == 5.76
    assert main(["plan", "--fleet", str(tmp_path / "nope.json")]) == 2


@pytest.mark.parametrize("doc,key,allowed", [
    ({"objectve": "energy"}, "fleet.json:objectve", "objective"),
    ({"nodes": [{"id": "a", "power_budget": 20, "samples": 10, "table": "tables/orin.csv"}]},
     "fleet.json:nodes[0].power_budget", "power_budget_w"),
])
def test_misspelt_keys_are_errors_naming_the_key_and_the_allowed_ones(tmp_path, doc, key, allowed):
    """A misspelt budget used to be ignored: the node was planned at 51.1 W instead of within 20 W."""
    r = run("--fleet", fleet(tmp_path, **doc), "--json")
    assert r.exit_code == 2, r.output
    assert key in r.output and allowed in r.output and "unknown key" in r.output


def test_a_missing_required_key_is_named(tmp_path):
    r = run("--fleet", fleet(tmp_path, nodes=[{"id": "a", "table": "tables/orin.csv"}]), "--json")
    assert r.exit_code == 2 and "fleet.json:nodes[0].samples: is missing" in r.output
