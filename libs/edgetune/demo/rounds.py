"""The demo's federated round (steps 6–7): PlanRound under the makespan and energy objectives, every
applied config measured on its agent, then a budget change mid-way and the coordinator's re-plan."""

from __future__ import annotations

import math
import time

import numpy as np

from edgetune.base.records import OptionTable
from edgetune.clients.calls import CallFailed, Status
from edgetune.demo.story import (
    RPC_TIMEOUT_S,
    ModeKey,
    NodeResult,
    RoundResult,
    Story,
    key,
    label,
    parallel,
    profile,
)
from edgetune.planning.rounds import RoundNode, RoundOutcome, RoundRequest
from edgetune.store import MeasurementRecord


# --- 6. round planning ------------------------------------------------------------------------------
def round_options(res: NodeResult, batch_size: int) -> OptionTable:
    """The node's option table for the planner: every mode measured on its agent at the round's batch size
    (the job's profiles and verifications, the held-out checks, the round's config checks) with its measured
    time and power. A later measurement of a mode replaces an earlier one, as in the coordinator's stored
    options, so a config measured over budget is out of the next plan. Predicted modes never measured are
    not options: a plan (and its all-fastest baseline) is only ever made of what the devices showed."""
    latest: dict[ModeKey, MeasurementRecord] = {}
    for m in (*res.profiled, *res.held_out, *res.round_checks):
        if m.batch_size == batch_size:
            latest[key(m.mode)] = m
    return OptionTable.from_rows([(m.mode, m.batch_size, m.time_ms, m.power_w) for m in latest.values()])


def _fastest(story: Story, budgets: dict[str, float], only: str | None = None) -> tuple[float, float]:
    """Energy and makespan of every node (or ``only`` one) at its fastest measured option within its budget."""
    total_e, makespan = 0.0, 0.0
    for r in story.nodes.values():
        if only is not None and r.node.node_id != only:
            continue
        opts = round_options(r, story.options.batch_size)
        fits = np.flatnonzero(opts.power_w <= budgets[r.node.node_id])
        if not fits.size:
            continue
        best = int(fits[np.lexsort((opts.power_w[fits], opts.time_ms[fits]))[0]])  # least time, then power
        t_s = math.ceil(r.node.samples / int(opts.batch_size[best])) * float(opts.time_ms[best]) / 1000.0
        total_e += t_s * float(opts.power_w[best])
        makespan = max(makespan, t_s)
    return total_e, makespan


def plan(story: Story, objective: str, *, deadline_s: float | None = None, apply: bool = False, round_id: str = "",
         must: bool = True) -> RoundOutcome:
    """PlanRound with every node's samples and measured options (:func:`round_options`). Re-planning an
    applied round under its own ``round_id`` changes only the configs whose mode or batch size changed."""
    nodes = []
    for r in story.nodes.values():
        options = round_options(r, story.options.batch_size)
        if not (options.power_w <= story.budgets[r.node.node_id]).any():  # nothing measured within: planned around
            note = f"left out of the round: no measured mode fits {story.budgets[r.node.node_id]:g} W"
            if note not in r.notes:
                r.notes.append(note)
            continue
        nodes.append(RoundNode(r.node.node_id, r.node.samples, options=options))
    request = RoundRequest(tuple(nodes), round_id=round_id, objective=objective, deadline_s=deadline_s,
                           workload={"name": story.options.workload, "batch_size": story.options.batch_size},
                           apply=apply)
    outcome = story.suite.coordinator.plan_round(request, timeout_s=RPC_TIMEOUT_S)
    if must and not outcome.plan.feasible:
        raise RuntimeError(f"PlanRound found no feasible plan: {outcome.reason}")
    return outcome


def round_result(name: str, objective: str, outcome: RoundOutcome, deadline_s: float | None = None) -> RoundResult:
    """A plan for the report, with the planner's own all-fastest baseline: every node at its fastest option
    within its budget on the same measured table, so a plan's energy and its baseline compare like with like."""
    p = outcome.plan
    return RoundResult(name, objective, outcome.round_id, p, p.fastest_energy_j or 0.0, p.fastest_makespan_s or 0.0,
                       deadline_s)


def plan_rounds(story: Story) -> str:
    """PlanRound twice on the coordinator: least makespan, then least energy by a deadline 50 % longer
    (that plan is applied: configs are pushed to the agents and measured there). Both are planned on the
    nodes' measurements; the makespan plan is planned again after the applied configs were measured, so the
    two rows of the report stand on the same measurements (a config measured over budget is in neither)."""
    budgets = {n.node_id: n.budget_w for n in story.fleet}
    ms = plan(story, "makespan")
    # The deadline: 50 % over the least makespan, and long enough for the node whose budget will drop
    # in the next step to still make it at its fastest under the new budget (else that re-plan is infeasible).
    node_id, new_w = story.options.budget_change
    _, slow_after = _fastest(story, {**budgets, node_id: new_w}, only=node_id)
    assert ms.plan.makespan_s is not None
    deadline = round(max(ms.plan.makespan_s * 1.5, slow_after * 1.1), 1)
    en = plan(story, "energy", deadline_s=deadline, apply=True)
    story.round_id = en.round_id
    story.round_deadline_s = deadline
    en = verify_configs(story, [n.id for n in en.plan.nodes], budgets, deadline) or en
    deadline = story.round_deadline_s
    ms = plan(story, "makespan")  # on the measurements the verification added
    story.rounds.append(round_result("makespan", "makespan", ms))
    story.rounds.append(round_result("energy", "energy", en, deadline))
    checks = [c for r in story.nodes.values() for c in r.config_checks]
    fixed = sum(not c["within_budget"] for c in checks)
    checked = ("every applied config measured on its agent within budget"
               + (f" after {fixed} re-plan(s) of configs measured over" if fixed else ""))
    fast_e, fast_ms = story.rounds[-1].fastest_energy_j, story.rounds[-1].fastest_makespan_s

    def saved(e: float) -> str:
        pct = 100.0 * (1 - e / fast_e) if fast_e else math.nan
        return f"{abs(pct):.1f} % {'less' if pct >= 0 else 'more'} energy"

    ms_s, ms_j = ms.plan.makespan_s or 0.0, ms.plan.energy_j or 0.0  # feasible plans: both set
    en_s, en_j = en.plan.makespan_s or 0.0, en.plan.energy_j or 0.0
    return (f"every node at its fastest measured mode: {fast_ms:.0f} s, {fast_e / 1000:.2f} kJ; least makespan: "
            f"{ms_s:.0f} s, {ms_j / 1000:.2f} kJ ({saved(ms_j)}); least energy by "
            f"a {deadline:.0f} s deadline: {en_s:.0f} s, {en_j / 1000:.2f} kJ ({saved(en_j)}); "
            f"applied as round {en.round_id}; {checked}")


def verify_configs(story: Story, node_ids: list[str], budgets: dict[str, float], deadline_s: float | None,
                   max_attempts: int = 4) -> RoundOutcome | None:
    """Measure each node's applied config on its agent once the agent runs it; the measurement joins the
    node's round options (:func:`round_options`). A config measured over the node's budget is then out of
    them: re-plan (PlanRound, apply): only that node's config changes. Returns the last re-plan (None:
    none needed)."""
    replanned = None
    for _ in range(max_attempts):
        def check(node_id: str) -> bool:
            res, agent = story.nodes[node_id], story.agent(node_id)
            cfg = story.suite.coordinator.config(node_id)
            assert cfg.mode is not None  # a round's config runs a mode
            deadline = time.monotonic() + 15
            current = None
            while time.monotonic() < deadline:
                current = agent.profiler.device().current_mode
                if key(current) == key(cfg.mode):
                    break
                time.sleep(0.1)
            rows = profile(agent, story.profile_job([cfg.mode], batch_size=cfg.batch_size or story.options.batch_size,
                                                    seed=story.options.seed + 7 + cfg.revision))
            power = rows[0].power_w if rows else math.inf
            ok = power <= budgets[node_id]
            res.round_checks.extend(rows)  # the node's round options from now on (round_options)
            res.config_checks.append({"revision": cfg.revision, "mode": label(cfg.mode),
                                      "agent_applied": current is not None and key(current) == key(cfg.mode),
                                      "power_w": power, "time_ms": rows[0].time_ms if rows else None,
                                      "budget_w": budgets[node_id], "within_budget": ok})
            return ok

        over = [n for n, ok in zip(node_ids, parallel(node_ids, check, workers=3), strict=True) if not ok]
        if not over:
            return replanned
        replanned = plan(story, "energy", deadline_s=deadline_s, apply=True, round_id=story.round_id, must=False)
        if not replanned.plan.feasible and deadline_s is not None:
            # A miss can drop the node's only mode fast enough for the deadline: rather
            # than keep a config measured over budget, extend the deadline to what the options allow.
            _, fastest_s = _fastest(story, budgets)
            if fastest_s * 1.1 > deadline_s:
                deadline_s = round(fastest_s * 1.1, 1)
                story.round_deadline_s = deadline_s
                for n in over:
                    story.nodes[n].notes.append(f"deadline extended to {deadline_s:g} s after a config measured "
                                                "over budget removed faster modes")
                replanned = plan(story, "energy", deadline_s=deadline_s, apply=True, round_id=story.round_id,
                                 must=False)
        if not replanned.plan.feasible:  # nothing published: the previous configs stay; say why
            for n in over:
                story.nodes[n].notes.append(f"re-plan after a config measured over budget: {replanned.reason}")
            return None
        node_ids = over
    return replanned


def round_rows(story: Story) -> list[dict]:
    rows = []
    for rr in story.rounds:
        for n in rr.plan.nodes:
            assert n.mode is not None
            rows.append({"plan": rr.label, "node": n.id, "mode": label(n.mode), "batch": n.batch_size,
                         "time_s": round(n.time_s, 1), "power_w": round(n.power_w, 2),
                         "energy_kj": round(n.energy_j / 1000, 2)})
    return rows


# --- 7. budget change -------------------------------------------------------------------------------
def revisions(story: Story) -> dict[str, int]:
    out = {}
    for n in story.fleet:
        try:
            cfg = story.suite.coordinator.config(n.node_id)
        except CallFailed as exc:  # a node left out of the round has no config yet
            if exc.code != Status.NOT_FOUND:
                raise
            out[n.node_id] = 0
            continue
        out[n.node_id] = cfg.revision
    return out


def change_budget(story: Story) -> str:
    """UpdateBudget on one node mid-way: the coordinator re-plans the applied round and pushes a new
    config to that node only (its revision bumps, WatchConfig delivers it, the agent applies it); the
    new config is then measured on the agent (and re-planned again if it is over the new budget)."""
    node_id, new_w = story.options.budget_change
    coord = story.suite.coordinator
    before = revisions(story)
    old_w = next(n.budget_w for n in story.fleet if n.node_id == node_id)
    coord.update_node_budget(node_id, new_w, timeout_s=RPC_TIMEOUT_S)
    watch = coord.watch_config(node_id, before[node_id], timeout_s=15)
    pushed = None
    try:
        pushed = next(watch)
    except CallFailed as exc:  # no new config: the coordinator's re-plan was infeasible or unchanged
        if exc.code != Status.DEADLINE_EXCEEDED:
            raise
    finally:
        watch.close()
    story.budgets[node_id] = new_w
    budgets = dict(story.budgets)
    res = story.nodes[node_id]
    n_checks = len(res.config_checks)
    replanned = verify_configs(story, [node_id], budgets, story.round_deadline_s)
    if replanned is None:  # the coordinator's own re-plan stands: the same request, planned again to show it
        replanned = plan(story, "energy", deadline_s=story.round_deadline_s, must=False)
    if not replanned.plan.feasible:
        raise RuntimeError(f"after the budget change no plan meets the round's deadline: {replanned.reason}")
    story.rounds.append(round_result("energy, after budget change", "energy", replanned, story.round_deadline_s))
    after = revisions(story)
    checks = res.config_checks[n_checks:]
    final = checks[-1]
    bumped = sorted(n for n in before if after[n] != before[n])
    story.budget_change = {"node": node_id, "old_budget_w": old_w, "new_budget_w": new_w,
                           "revisions_before": before, "revisions_after": after, "bumped": bumped,
                           "watched_revision": pushed.revision if pushed else None,
                           "watched_mode": label(pushed.mode) if pushed and pushed.mode else None,
                           "final_mode": final["mode"], "agent_applied": final["agent_applied"],
                           "measured_power_w": final["power_w"], "measured_time_ms": final["time_ms"],
                           "within_budget": final["within_budget"], "checks": checks,
                           "makespan_s": replanned.plan.makespan_s, "energy_j": replanned.plan.energy_j}
    extra = (f" (after {len(checks) - 1} more re-plan(s): configs measured over were dropped)"
             if len(checks) > 1 else "")
    watched = f"WatchConfig delivered r{pushed.revision}" if pushed else "no new config within 15 s"
    return (f"{node_id}: {old_w:g} W → {new_w:g} W; {watched}; revisions bumped: "
            f"{', '.join(bumped) or 'none'} (r{before[node_id]} → r{after[node_id]}); the agent runs "
            f"{final['mode']}, measured {final['power_w']:.1f} W{extra}")
