"""The demo's round plans (issue 26): made on what the agents measured, so every planned mode was run on
its device and the energy plan never uses more energy than every node at its fastest measured mode, also
after an applied config measured over budget was re-planned.

The coordinator and the agents are small fakes: the coordinator plans with the library's planner (as
PlanRound does with inline options) and publishes the applied configs; an agent runs the applied mode
and measures it from a table of what the device shows now (no services, no processes)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any, cast

import pytest

from edgetune.base.mode import PowerMode
from edgetune.demo import rounds
from edgetune.demo.story import NodeResult, Options, Story, key
from edgetune.demo.suite import NodeSpec, Suite
from edgetune.planning import Fleet, NodeOptions, plan_round
from edgetune.planning.rounds import RoundOutcome, RoundRequest
from edgetune.store import MeasurementRecord, NodeConfig

BATCH = 16
A, B = NodeSpec("a", "orin-agx", 20.0, 1000), NodeSpec("b", "orin-agx", 15.0, 500)
M1, M2, M3, M4 = (PowerMode(8, 2201.6, g, 3199.0) for g in (1300.5, 1100.0, 700.0, 1500.0))
N1, N2, N3 = (PowerMode(4, 1190.4, g, 2133.0) for g in (900.0, 600.0, 300.0))


def measured(node: str, mode: PowerMode, time_ms: float, power_w: float, batch: int = BATCH) -> MeasurementRecord:
    return MeasurementRecord(f"{node}-{key(mode)}-{batch}-{power_w}", "orin-agx", "mobilenetv3", "train", mode,
                             batch, time_ms, power_w, node_id=node)


@dataclass
class FakeCoordinator:
    budgets: dict[str, float]
    configs: dict[str, NodeConfig] = field(default_factory=dict)
    plans: int = 0

    def plan_round(self, request: RoundRequest, timeout_s: float | None = None) -> RoundOutcome:
        fleet = Fleet([NodeOptions(n.node_id, n.samples, n.options.batch_size, n.options.time_ms, n.options.power_w,
                                   self.budgets[n.node_id], n.options.modes)
                       for n in request.nodes if n.options is not None], request.objective, request.deadline_s)
        plan = plan_round(fleet)
        self.plans += 1
        if request.apply and plan.feasible:
            for p in plan.nodes:
                old = self.configs.get(p.id)
                if old is None or old.mode != p.mode:  # a re-plan publishes only the configs that changed
                    self.configs[p.id] = NodeConfig(p.id, p.mode, p.batch_size, revision=(old.revision if old else 0) + 1)
        return RoundOutcome(request.round_id or f"r{self.plans}", plan)

    def config(self, node_id: str) -> NodeConfig:
        return self.configs[node_id]


class FakeProfiler:
    """The node's device: runs the applied config, measures a mode as ``now`` says (else as profiled)."""

    def __init__(self, node_id: str, coordinator: FakeCoordinator, now: dict[Any, tuple[float, float]]) -> None:
        self.node_id, self.coordinator, self.now = node_id, coordinator, now

    def device(self) -> SimpleNamespace:
        return SimpleNamespace(current_mode=self.coordinator.config(self.node_id).mode)

    def profile(self, job, timeout_s: float | None = None):
        for mode in job.modes:
            time_ms, power_w = self.now[key(mode)]
            yield measured(self.node_id, mode, time_ms, power_w, job.batch_sizes[0])


def story_with(now: dict[str, dict[Any, tuple[float, float]]]) -> tuple[Story, FakeCoordinator]:
    coordinator = FakeCoordinator({A.node_id: A.budget_w, B.node_id: B.budget_w})
    agents = {n.node_id: SimpleNamespace(profiler=FakeProfiler(n.node_id, coordinator, now.get(n.node_id, {}))) for n in (A, B)}
    suite = cast(Suite, SimpleNamespace(coordinator=coordinator, agents=agents))
    story = Story(suite, Options(batch_size=BATCH, budget_change=(B.node_id, 10.0)), (A, B))
    # What the job profiled and verified, and the held-out checks: the nodes' measurements. M4 is faster
    # than M1 but over a's budget; another batch size's row is not an option of this round.
    story.nodes = {
        A.node_id: NodeResult(A, profiled=[measured("a", M1, 50.0, 19.5), measured("a", M2, 60.0, 15.0),
                                           measured("a", M4, 40.0, 25.0), measured("a", M3, 10.0, 2.0, batch=32)],
                              held_out=[measured("a", M3, 80.0, 10.0)]),
        B.node_id: NodeResult(B, profiled=[measured("b", N1, 30.0, 14.0), measured("b", N2, 45.0, 9.0)],
                              held_out=[measured("b", N3, 70.0, 6.0)]),
    }
    return story, coordinator


def all_fastest_energy_j(story: Story, node_ids: list[str]) -> float:
    """Every node at its fastest measured mode within its budget (least time, then power), the last
    measurement of a mode standing: computed here from the records, not by the code under test."""
    total = 0.0
    for node_id in node_ids:
        res = story.nodes[node_id]
        latest = {key(m.mode): m for m in (*res.profiled, *res.held_out, *res.round_checks) if m.batch_size == BATCH}
        fits = [m for m in latest.values() if m.power_w <= story.budgets[node_id]]
        best = min(fits, key=lambda m: (m.time_ms, m.power_w))
        total += math.ceil(res.node.samples / BATCH) * best.time_ms / 1000.0 * best.power_w
    return total


def test_round_options_are_the_nodes_measurements_the_last_one_of_a_mode_standing():
    story, _ = story_with({})
    res = story.nodes["a"]
    res.round_checks.append(measured("a", M2, 61.0, 20.5))  # M2 measured again, over the budget
    table = rounds.round_options(res, BATCH)
    rows = {key(PowerMode(int(m[0]), *m[1:])): (t, p, b) for m, t, p, b in
            zip(table.modes.tolist(), table.time_ms, table.power_w, table.batch_size, strict=True)}
    assert set(rows) == {key(M1), key(M2), key(M3), key(M4)}
    assert rows[key(M2)] == (61.0, 20.5, BATCH)  # the later measurement replaced the earlier one
    assert rows[key(M3)] == (80.0, 10.0, BATCH)  # batch 32's row is not an option at batch 16


def test_round_plans_use_measured_modes_and_the_energy_plan_never_beats_all_fastest_in_energy_used():
    # On the device now, a's M2 draws 20.5 W (> 20 W): the energy plan picks it, its check misses, and
    # the re-plan must not keep it; everything else measures as profiled.
    now = {"a": {key(M1): (50.0, 19.5), key(M2): (61.0, 20.5), key(M3): (80.0, 10.0), key(M4): (40.0, 25.0)},
           "b": {key(N1): (30.0, 14.0), key(N2): (45.0, 9.0), key(N3): (70.0, 6.0)}}
    story, coordinator = story_with(now)
    summary = rounds.plan_rounds(story)

    checks = story.nodes["a"].config_checks
    assert [c["within_budget"] for c in checks] == [False, True], checks  # M2 missed, M1 held
    assert [r.label for r in story.rounds] == ["makespan", "energy"]
    for rr in story.rounds:
        assert rr.plan.feasible
        for n in rr.plan.nodes:
            res = story.nodes[n.id]
            seen = {key(m.mode) for m in (*res.profiled, *res.held_out, *res.round_checks)}
            assert n.mode is not None and key(n.mode) in seen, f"{rr.label}: {n.id} runs a mode never measured"
            assert n.power_w <= story.budgets[n.id]
        assert key(M2) not in {key(n.mode) for n in rr.plan.nodes if n.mode is not None}  # measured over: out
        # the baseline is all-fastest on the same measurements, and no plan uses more energy than it
        assert rr.fastest_energy_j == pytest.approx(all_fastest_energy_j(story, ["a", "b"]))
        assert rr.plan.energy_j is not None and rr.plan.energy_j <= rr.fastest_energy_j * (1 + 1e-12), rr.label
    assert "more energy" not in summary
    assert key(coordinator.config("a").mode) == key(M1)  # the applied config is the re-planned one
