"""Round planning (makespan / energy objectives) exact against brute force on small fleets."""

import itertools
import json
import math
import time

import numpy as np
import pytest

from edgetune.errors import InvalidArgument
from edgetune.planning import Fleet, NodeOptions, bench_plan, load_fleet, plan_round
from edgetune.planning.knapsack import min_energy_choice

TOL = 1e-9


def random_fleet(rng, objective, site, deadline, integer=True):
    nodes = []
    for i in range(int(rng.integers(1, 5))):
        n_opt = int(rng.integers(1, 6))
        draw = (lambda lo, hi, k=n_opt: rng.integers(lo, hi, k).astype(float)) if integer else \
            (lambda lo, hi, k=n_opt: rng.uniform(lo, hi, k))
        budget = None if rng.random() < 0.3 else float(rng.integers(3, 12))
        nodes.append(NodeOptions(f"n{i}", int(rng.integers(1, 12)), rng.choice([1, 2, 4], n_opt),
                                 draw(1, 10), draw(1, 10), budget))
    return Fleet(nodes, objective, deadline, site)


def options(node):
    t = node.round_time_s()
    return [(j, t[j], node.power_w[j], t[j] * node.power_w[j]) for j in range(len(node))
            if node.power_budget_w is None or node.power_w[j] <= node.power_budget_w]


def brute(fleet):
    """(makespan, energy) of the best plan, or None."""
    site = fleet.site_power_budget_w
    combos = []
    for combo in itertools.product(*[options(n) for n in fleet.nodes]):
        p = sum(c[2] for c in combo)
        if site is not None and p > site + TOL * max(1, site):
            continue
        combos.append((max(c[1] for c in combo), sum(c[3] for c in combo)))
    if not combos:
        return None
    least_ms = min(m for m, _ in combos)
    if fleet.deadline_s is not None and fleet.deadline_s < least_ms:
        return None
    deadline = fleet.deadline_s if (fleet.objective == "energy" and fleet.deadline_s is not None) else least_ms
    best = min((e, m) for m, e in combos if m <= deadline)
    return best[1], best[0]


@pytest.mark.parametrize("objective", ["makespan", "energy"])
@pytest.mark.parametrize("integer", [True, False])
def test_plan_matches_brute_force(objective, integer):
    rng = np.random.default_rng(7 if integer else 8)
    seen_infeasible = seen_feasible = 0
    for _ in range(300):
        site = None if rng.random() < 0.3 else float(rng.uniform(2, 30))
        deadline = None if rng.random() < 0.5 else float(rng.uniform(0.005, 0.4))
        fleet = random_fleet(rng, objective, site, deadline, integer)
        plan = plan_round(fleet)
        want = brute(fleet)
        if want is None:
            assert not plan.feasible and plan.reason
            assert plan.to_json() == {"feasible": False, "reason": plan.reason}
            seen_infeasible += 1
            continue
        seen_feasible += 1
        assert plan.feasible, plan.reason
        assert plan.exact
        assert plan.energy_j == pytest.approx(want[1], rel=1e-9)
        if objective == "makespan" or deadline is None:
            assert plan.makespan_s == pytest.approx(want[0], rel=1e-12)
        # the plan is what it says it is
        assert plan.makespan_s == max(n.time_s for n in plan.nodes)
        assert plan.energy_j == pytest.approx(sum(n.energy_j for n in plan.nodes))
        if site is not None:
            assert sum(n.power_w for n in plan.nodes) <= site * (1 + 1e-9)
        for spec, n in zip(fleet.nodes, plan.nodes, strict=True):
            assert n.id == spec.id
            assert spec.power_budget_w is None or n.power_w <= spec.power_budget_w
    assert seen_infeasible > 10 and seen_feasible > 100


def test_knapsack_core_dp_exact_against_brute_force():
    rng = np.random.default_rng(11)
    used_core = 0
    for _ in range(300):
        n_nodes, n_opt = int(rng.integers(2, 7)), int(rng.integers(2, 5))
        node = np.repeat(np.arange(n_nodes), n_opt)
        p = rng.uniform(1, 10, node.size)
        e = 100 / p + rng.uniform(0, 8, node.size)  # more power, less energy (plus noise)
        per_node = [list(range(i * n_opt, (i + 1) * n_opt)) for i in range(n_nodes)]
        lo = sum(p[o].min() for o in per_node)
        hi = sum(p[o].max() for o in per_node)
        site = float(rng.uniform(lo, hi))
        res = min_energy_choice(node, p, e, n_nodes, site)
        best = min((sum(e[list(c)]), c) for c in itertools.product(*per_node) if p[list(c)].sum() <= site)
        assert res.feasible and res.exact
        assert res.energy_j == pytest.approx(best[0], rel=1e-9)
        assert p[res.choice].sum() <= site * (1 + 1e-9)
        assert res.lower_bound_j <= res.energy_j + 1e-9
        used_core += res.core_nodes > 0
    assert used_core > 20  # the exact DP path was exercised


def test_knapsack_work_cap_gives_certified_bound():
    rng = np.random.default_rng(12)
    n_nodes, n_opt = 400, 6
    node = np.repeat(np.arange(n_nodes), n_opt)
    p = rng.uniform(1, 10, node.size)
    e = 100 / p + rng.uniform(0, 8, node.size)
    site = float(np.mean([p[node == i].min() + p[node == i].max() for i in range(n_nodes)]) * n_nodes / 2)
    capped = min_energy_choice(node, p, e, n_nodes, site, max_work=10)
    full = min_energy_choice(node, p, e, n_nodes, site)
    assert full.exact
    assert capped.lower_bound_j <= full.energy_j + 1e-6 <= capped.energy_j + 1e-6
    if not capped.exact:
        assert capped.energy_j - capped.lower_bound_j >= 0


def test_infeasible_reasons():
    t = NodeOptions("a", 10, [1, 2], [10.0, 5.0], [8.0, 12.0], power_budget_w=5)
    assert "'a'" in plan_round(Fleet([t])).reason
    u = NodeOptions("b", 10, [1, 2], [10.0, 5.0], [8.0, 12.0])
    r = plan_round(Fleet([u, u], site_power_budget_w=10))
    assert not r.feasible and "site power budget" in r.reason
    r = plan_round(Fleet([u], objective="energy", deadline_s=0.01))
    assert not r.feasible and "deadline" in r.reason


def test_makespan_ties_to_least_energy_and_reports_savings():
    # node: fast-hungry (b=1: 10 ms, 20 W) vs equally fast frugal option; plus a slow one
    n = NodeOptions("x", 100, [1, 1, 1], [10.0, 10.0, 30.0], [20.0, 15.0, 5.0])
    plan = plan_round(Fleet([n]))
    assert plan.nodes[0].row == 1 and plan.makespan_s == pytest.approx(1.0)
    e_plan = plan_round(Fleet([n], objective="energy", deadline_s=10))
    assert e_plan.nodes[0].row == 2  # 3 s × 5 W = 15 J < 1 s × 15 W
    assert e_plan.fastest_energy_j == pytest.approx(15.0)
    assert e_plan.energy_saved_j == pytest.approx(0.0)
    assert plan_round(Fleet([n], objective="energy", deadline_s=10)).energy_j == pytest.approx(15.0)


def write_table(path, rows):
    path.write_text("cores,cpu_mhz,gpu_mhz,emc_mhz,batch_size,time_ms,power_w\n" +
                    "".join(",".join(str(v) for v in r) + "\n" for r in rows))


def test_load_fleet_relative_tables(tmp_path):
    (tmp_path / "t").mkdir()
    write_table(tmp_path / "t" / "orin.csv", [(8, 1344, 727, 2133, 16, 100, 20), (12, 2200, 1300, 3199, 32, 60, 51)])
    (tmp_path / "fleet.json").write_text(json.dumps({
        "objective": "energy", "deadline_s": 100, "site_power_budget_w": 80,
        "nodes": [{"id": "a", "power_budget_w": 60, "samples": 1000, "table": "t/orin.csv"},
                  {"id": "b", "power_budget_w": 30, "samples": 200, "table": "t/orin.csv"}]}))
    fleet = load_fleet(tmp_path / "fleet.json")
    assert [n.id for n in fleet.nodes] == ["a", "b"] and fleet.deadline_s == 100.0
    assert fleet.nodes[0].modes.shape == (2, 4)
    plan = plan_round(fleet)
    assert plan.feasible and plan.nodes[1].batch_size == 16


@pytest.mark.parametrize("doc,where", [
    ({"nodes": []}, "nodes"),
    ({"objective": "speed", "nodes": [{}]}, "objective"),
    ({"deadline_s": -1, "nodes": [{}]}, "deadline_s"),
    ({"site_power_budget_w": "x", "nodes": [{}]}, "site_power_budget_w"),
    ({"nodes": [{"id": "a", "samples": 5, "table": "t.csv"}, 3]}, "nodes[1]"),
    ({"nodes": [{"id": "a", "samples": 5, "table": "t.csv"}, {"id": "b", "samples": 5, "table": "t.csv"},
                {"id": "c", "samples": 5, "table": "t.csv", "power_budget_w": -2}]}, "nodes[2].power_budget_w"),
    ({"nodes": [{"id": "a", "samples": 5, "table": "t.csv", "power_budget_w": True}]}, "nodes[0].power_budget_w"),
    ({"nodes": [{"id": "a", "samples": 2.5, "table": "t.csv"}]}, "nodes[0].samples"),
    ({"nodes": [{"id": "a", "table": "t.csv"}]}, "nodes[0].samples"),
    ({"nodes": [{"samples": 5, "table": "t.csv"}]}, "nodes[0].id"),
    ({"nodes": [{"id": "a", "samples": 5, "table": "t.csv"}, {"id": "a", "samples": 5, "table": "t.csv"}]},
     "nodes[1].id"),
    ({"nodes": [{"id": "a", "samples": 5, "table": "missing.csv"}]}, "nodes[0].table"),
    ({"nodes": [{"id": "a", "samples": 5}]}, "nodes[0].table"),
])
def test_fleet_errors_name_the_key_path(tmp_path, doc, where):
    write_table(tmp_path / "t.csv", [(8, 1344, 727, 2133, 16, 100, 20)])
    (tmp_path / "fleet.json").write_text(json.dumps(doc))
    with pytest.raises(InvalidArgument) as err:
        load_fleet(tmp_path / "fleet.json")
    assert f"fleet.json:{where}" in str(err.value)


def test_malformed_json_and_bad_table(tmp_path):
    (tmp_path / "fleet.json").write_text("{\"nodes\": [")
    with pytest.raises(InvalidArgument, match="malformed JSON"):
        load_fleet(tmp_path / "fleet.json")
    (tmp_path / "t.csv").write_text("cores,cpu_mhz,gpu_mhz,emc_mhz,batch_size,time_ms\n8,1,1,1,1,1\n")
    (tmp_path / "fleet.json").write_text(json.dumps({"nodes": [{"id": "a", "samples": 5, "table": "t.csv"}]}))
    with pytest.raises(InvalidArgument, match="t.csv:1:power_w"):
        load_fleet(tmp_path / "fleet.json")


def test_bench_1000_nodes_fast():
    bench_plan(50)  # warm-up
    t0 = time.perf_counter()
    out = bench_plan(1000)
    assert out["makespan"]["feasible"] and out["energy"]["exact"]
    # target < 1 s per objective; a shared 2-core CI box gets 4× slack
    assert out["makespan"]["seconds"] < 4 and out["energy"]["seconds"] < 4, out
    assert time.perf_counter() - t0 < 20


# -- batch size per node: fixed, a list, the batch-efficiency vector ------------

# b=8 is fast per sample but (r 0.5 vs 1.0) b=32 needs twice the samples... here the reverse:
# per 320 samples b=8 takes 40 × 15 ms = 0.6 s at 20 W, b=32 10 × 50 ms = 0.5 s at 25 W.
B, T, P = [8, 8, 32, 32], [30.0, 15.0, 100.0, 50.0], [10.0, 20.0, 12.0, 25.0]


def test_batch_sizes_fixed_and_list():
    free = plan_round(Fleet([NodeOptions("a", 320, B, T, P)]))
    assert free.nodes[0].batch_size == 32 and free.makespan_s == pytest.approx(0.5)
    fixed = plan_round(Fleet([NodeOptions("a", 320, B, T, P, batch_sizes=(8,))]))
    assert fixed.nodes[0].batch_size == 8 and fixed.makespan_s == pytest.approx(0.6)
    # the baseline of "energy saved" is the fastest *admissible* option
    assert fixed.fastest_makespan_s == pytest.approx(0.6)
    listed = plan_round(Fleet([NodeOptions("a", 320, B, T, P, batch_sizes=(8, 32, 64))]))
    assert listed.nodes[0].batch_size == 32
    none = plan_round(Fleet([NodeOptions("a", 320, B, T, P, batch_sizes=(16,))]))
    assert not none.feasible and "'a'" in none.reason and "batch sizes 16" in none.reason


def test_batch_efficiency_scales_the_work():
    # r_8 = 0.5: b=8 needs 160 samples (20 × 15 ms = 0.3 s), now faster than b=32 (0.5 s)
    eff = plan_round(Fleet([NodeOptions("a", 320, B, T, P, batch_efficiency={8: 0.5, 32: 1.0})]))
    assert eff.nodes[0].batch_size == 8 and eff.makespan_s == pytest.approx(0.3)
    assert eff.energy_j == pytest.approx(0.3 * 20)
    # r as passes_to_target (3 vs 2 passes): the work is samples × passes, the choice follows
    passes = plan_round(Fleet([NodeOptions("a", 320, B, T, P, batch_efficiency={8: 2.0, 32: 3.0})]))
    assert passes.nodes[0].batch_size == 8 and passes.makespan_s == pytest.approx(80 * 0.015)
    # a batch size missing from the vector, or inf, never reaches the target
    only32 = plan_round(Fleet([NodeOptions("a", 320, B, T, P, batch_efficiency={8: math.inf, 32: 1.0})]))
    assert only32.nodes[0].batch_size == 32
    never = plan_round(Fleet([NodeOptions("a", 320, B, T, P, batch_efficiency={64: 1.0})]))
    assert not never.feasible and "reach the target (64)" in never.reason
    # float noise in samples × r does not add a minibatch: 0.67 × 300 = 201 samples exactly
    n = NodeOptions("a", 300, [67], [10.0], [5.0], batch_efficiency={67: 0.67})
    assert n.round_time_s()[0] == pytest.approx(3 * 0.010)


def test_batch_constraints_with_energy_objective_and_site_budget():
    nodes = [NodeOptions("a", 320, B, T, P, batch_efficiency={8: 0.5, 32: 1.0}),
             NodeOptions("b", 320, B, T, P, batch_sizes=(32,))]
    plan = plan_round(Fleet(nodes, objective="energy", deadline_s=10, site_power_budget_w=30))
    assert plan.feasible and sum(p.power_w for p in plan.nodes) <= 30
    assert plan.nodes[1].batch_size == 32
    # brute force over both nodes' admissible options
    best = min((ea + eb) for ta, pa, ea in _opts(nodes[0]) for tb, pb, eb in _opts(nodes[1])
               if pa + pb <= 30 and max(ta, tb) <= 10)
    assert plan.energy_j == pytest.approx(best)


def _opts(n):
    t = n.round_time_s()
    return [(t[j], n.power_w[j], t[j] * n.power_w[j]) for j in np.flatnonzero(n.admissible())]


def test_fleet_json_batch_keys(tmp_path):
    write_table(tmp_path / "t.csv", [(8, 1344, 727, 2133, b, t, p) for b, t, p in zip(B, T, P, strict=True)])
    doc = {"batch_efficiency": {"8": 0.5, "32": 1.0},
           "nodes": [{"id": "a", "samples": 320, "table": "t.csv"},
                     {"id": "b", "samples": 320, "table": "t.csv", "batch_sizes": [32]},
                     {"id": "c", "samples": 320, "table": "t.csv", "batch_sizes": 8,
                      "batch_efficiency": {"8": None, "32": 1}},
                     {"id": "d", "samples": 320, "table": "t.csv", "batch_efficiency": None}]}
    (tmp_path / "fleet.json").write_text(json.dumps(doc))
    fleet = load_fleet(tmp_path / "fleet.json")
    a, b, c, d = fleet.nodes
    assert a.batch_efficiency == {8: 0.5, 32: 1.0} and a.batch_sizes is None
    assert b.batch_sizes == (32,) and b.batch_efficiency == {8: 0.5, 32: 1.0}
    assert c.batch_sizes == (8,) and c.batch_efficiency == {8: math.inf, 32: 1.0}
    assert d.batch_efficiency is None
    plan = plan_round(fleet)
    assert not plan.feasible and "'c'" in plan.reason  # c's only batch size never reaches the target
    doc["nodes"].pop(2)
    (tmp_path / "fleet.json").write_text(json.dumps(doc))
    plan = plan_round(load_fleet(tmp_path / "fleet.json"))
    assert [p.batch_size for p in plan.nodes] == [8, 32, 32]


@pytest.mark.parametrize("extra,where", [
    ({"batch_sizes": []}, "batch_sizes"),
    ({"batch_sizes": [8, 0]}, "batch_sizes[1]"),
    ({"batch_sizes": [8.5]}, "batch_sizes[0]"),
    ({"batch_efficiency": {"x": 1}}, "batch_efficiency.x"),
    ({"batch_efficiency": {"8": -1}}, "batch_efficiency.8"),
    ({"batch_efficiency": [1, 2]}, "batch_efficiency"),
])
def test_fleet_batch_key_errors(tmp_path, extra, where):
    write_table(tmp_path / "t.csv", [(8, 1344, 727, 2133, 16, 100, 20)])
    (tmp_path / "fleet.json").write_text(json.dumps({"nodes": [{"id": "a", "samples": 5, "table": "t.csv", **extra}]}))
    with pytest.raises(InvalidArgument) as err:
        load_fleet(tmp_path / "fleet.json")
    assert f"fleet.json:nodes[0].{where}" in str(err.value)
