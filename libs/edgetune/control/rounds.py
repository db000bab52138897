"""Rounds: turn a round request into a plan (the planning library) and into node configs.

:class:`RoundCoordinator` is what the Coordinator service calls; it holds the glue between
the registry (who is plannable, budgets, device tables), the store (measurements when the
request brings no options, site budgets, the last applied round), the planner
(:func:`edgetune.planning.plan_round`) and the config store (publish). Only
the leader plans: every planning entry point checks the lease, and publishing is fenced by
it (see :mod:`.configs`).

    kv site-budgets        SiteBudgets: the site's standing budgets
    round (Store.put_round) RoundState: the last *applied* round request, its options (npz) and
                           ``members`` (the round's nodes that were plannable then), for re-planning

Re-planning the last applied round follows a budget change (:meth:`update_node_budget`, :meth:`update_site_budgets`)
and a membership change (:meth:`replan_after_membership_change`: a node of the round lost,
back, or newly registered). Only nodes whose config changed get a new revision.

An inference node is placed on its own (:meth:`update_arrival_rate`, :mod:`.inference`): its
(mode, β) is re-solved from its inference measurements when its arrival rate, latency budget
or power budget moves, and only that node's config is re-published.

Batch size per node: a round (or one node) may fix the batch size or allow a list
(``batch_sizes``) and give Ahmed et al.'s batch-efficiency vector (``batch_efficiency``,
r_b or passes_to_target per batch size), which scales the node's work at batch size b to
``ceil(samples × r_b)``; a node's own values replace the round's.

Budget precedence for a node: the request's override, else its registered budget. For the
site: the request's values, else the standing site budgets.

Crash consistency: every change is planned first and written in one atomic step
(``Store.publish_configs`` with the docs, values and round it goes with): a round's configs
with ``round:last``; a budget (:meth:`update_node_budget`, :meth:`update_site_budgets`) with
the configs re-planned for it. A kill of the coordinator before that step leaves the old
state, after it the new one; a change that fails (InvalidArgument, FailedPrecondition,
NotFound) fails before it and writes nothing. :mod:`.faults` names the points around it.
"""

from __future__ import annotations

import io
import logging
import threading
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

import numpy as np

from edgetune import validation
from edgetune.base.mode import PowerMode
from edgetune.base.records import OPTION_COLUMNS, OptionTable
from edgetune.control import faults
from edgetune.control.configs import ConfigStore, NodeConfig, Published
from edgetune.control.inference import has_placement, placement_key, solve_placement
from edgetune.control.leader import LeaderLease, NotLeader
from edgetune.control.registry import DOC_KIND, NodeRegistry
from edgetune.errors import FailedPrecondition, InvalidArgument, NotFound
from edgetune.planning import Fleet, NodeOptions, RoundPlan, plan_round
from edgetune.planning.placement import InferencePlacement, InferenceUpdate
from edgetune.planning.rounds import OBJECTIVES, RoundNode, RoundOutcome, RoundRequest
from edgetune.powermodes.spec import FREQ_MATCH_REL_TOL, DeviceSpec
from edgetune.store import (
    ROLES,
    DocWrite,
    NodeRecord,
    NodeRegistration,
    RevisionConflict,
    RoundState,
    SiteBudgets,
    Store,
)

log = logging.getLogger(__name__)

SITE_KEY = ("site-budgets",)
#: A budget change retries this often when a re-registration changed the node meanwhile.
_MAX_CAS_ATTEMPTS = 20


@dataclass(frozen=True)
class _Pending:
    """Budgets being changed and not written yet: planning reads these instead of the stored ones."""

    node_budgets: Mapping[str, float | None] = field(default_factory=dict)
    site: SiteBudgets | None = None


@dataclass(frozen=True)
class _Writes:
    """A planned round's writes: its configs and the round state, committed together."""

    configs: tuple[NodeConfig, ...]
    round_state: RoundState


@dataclass(frozen=True)
class BudgetChange:
    """What a budget change did: the node as now registered (:meth:`RoundCoordinator.update_node_budget`)
    or the site's effective budgets (:meth:`~RoundCoordinator.update_site_budgets`), the re-plan of
    the last round (None: no round, or the node is not in it) and the inference re-solve (None: none)."""

    record: NodeRecord | None = None
    site: SiteBudgets | None = None
    outcome: RoundOutcome | None = None
    placement: InferencePlacement | None = None


def new_round_id() -> str:
    return f"r-{datetime.now(UTC).strftime('%Y%m%dT%H%M%S')}-{uuid.uuid4().hex[:6]}"


class RoundCoordinator:
    """Plans rounds, publishes configs, re-plans on budget changes (see module doc)."""

    def __init__(self, store: Store, registry: NodeRegistry, configs: ConfigStore,
                 lease: LeaderLease | None = None, *, clock_s: Any = time.time) -> None:
        self.store = store
        self.registry = registry
        self.configs = configs
        self.lease = lease
        self._now_s = clock_s
        #: Re-plans (budget, membership, periodic check) run one at a time.
        self._replan_lock = threading.RLock()

    # -- budgets ------------------------------------------------------------------------

    def site_budgets(self, pending: _Pending | None = None) -> SiteBudgets:
        if pending is not None and pending.site is not None:
            return pending.site
        raw = self.store.get(SITE_KEY)
        return SiteBudgets.from_dict(raw) if raw is not None else SiteBudgets()

    def update_site_budgets(self, *, site_power_budget_w: float | None = None,
                            deadline_s: float | None = None) -> BudgetChange:
        """Set the given site budgets (None: keep) and re-plan the last applied round under them
        (the round's own site values are replaced by the standing ones), written together (see
        module doc); ``site`` holds the effective budgets."""
        if self.lease is not None:
            self.lease.require()
        site = self.site_budgets()
        if site_power_budget_w is not None:
            site = replace(site, site_power_budget_w=validation.optional(
                validation.power_budget_w, site_power_budget_w, "budgets.site_power_budget_w"))
        if deadline_s is not None:
            site = replace(site, deadline_s=validation.positive(deadline_s, "budgets.deadline_s", "> 0"))
        with self._replan_lock:
            replanned = self._replan_for_budget(None, _Pending(site=site))
            outcome, writes = replanned if replanned is not None else (None, None)
            published = self._commit("budget", writes, values=[(SITE_KEY, site.to_dict(), None)])
        if outcome is not None and writes is not None:
            outcome = replace(outcome, published=tuple(published))
        return BudgetChange(site=site, outcome=outcome)

    def update_node_budget(self, node_id: str, power_budget_w: float | None, *, set_budget: bool = True,
                           inference: InferenceUpdate | None = None) -> BudgetChange:
        """Set (or clear, None) a node's budget (checked where it came in: :func:`validation.power_budget_w`)
        and re-plan what depends on it, written together.

        The last applied round is re-planned when the node is in it (its round override is
        dropped: the new budget is the operator's latest word); a node with an inference
        placement is re-solved (``inference``: ``arrival_rps`` / ``latency_budget_ms`` /
        ``workload`` to change too, as :meth:`update_arrival_rate`). ``set_budget`` False:
        keep the budget, only re-solve the inference placement. Everything is checked and
        planned first, then the registration, the configs and the round are written in one
        atomic step: a failure (InvalidArgument, NotFound, FailedPrecondition) writes nothing.
        """
        if self.lease is not None:
            self.lease.require()
        validation.identifier(node_id, "node_id")
        budget = power_budget_w if set_budget else None
        with self._replan_lock:
            # Optimistic concurrency: a concurrent re-registration must not be lost (bounded retries).
            for _attempt in range(_MAX_CAS_ATTEMPTS):
                current = self.store.get_doc(DOC_KIND, node_id, missing_ok=True)
                if current is None:
                    raise NotFound(f"node_id: node {node_id!r} is not registered")
                reg = NodeRegistration.from_dict(current.doc)
                new_budget = budget if set_budget else reg.power_budget_w
                pending = _Pending(node_budgets={node_id: new_budget})
                replanned = self._replan_for_budget(node_id, pending) if set_budget else None
                outcome, writes = replanned if replanned is not None else (None, None)
                placement = None
                if inference is not None or has_placement(self.store, node_id):
                    load = inference or InferenceUpdate()
                    placement = solve_placement(
                        self.store, self.registry, self.configs, node_id, lease=self.lease, now_s=self._now_s(),
                        power_budget_w=new_budget, budget_given=True, write=False, arrival_rps=load.arrival_rps,
                        latency_budget_ms=load.latency_budget_ms, workload=load.workload)
                docs = ([DocWrite(DOC_KIND, node_id, replace(reg, power_budget_w=budget).to_dict(), current.revision)]
                        if set_budget else [])
                values = ([(placement_key(node_id), placement.target.to_dict(), None)]
                          if placement is not None and placement.target is not None else [])
                extra = [placement.config] if placement is not None and placement.config is not None else []
                try:
                    published = self._commit("budget", writes, docs=docs, values=values, configs=extra)
                except RevisionConflict:
                    continue
                if outcome is not None and writes is not None:
                    outcome = replace(outcome, published=tuple(p for p in published if p.node_id in
                                                               {c.node_id for c in writes.configs}))
                if placement is not None and placement.config is not None:
                    placement = replace(placement, published=[p for p in published if p.node_id == node_id][-1])
                return BudgetChange(self.registry.get(node_id), outcome=outcome, placement=placement)
        raise FailedPrecondition(f"node {node_id!r} changed {_MAX_CAS_ATTEMPTS} times while updating its budget")

    def _commit(self, point: str, writes: _Writes | None, *, docs: Sequence[DocWrite] = (),
                values: Sequence[tuple[Any, Any, float | None]] = (),
                configs: Sequence[NodeConfig] = ()) -> list[Published]:
        """Write a planned change in one atomic step, fenced by the lease (see module doc).
        ``configs`` replace the round's for the same node (an inference re-solve has the last word)."""
        own = {c.node_id for c in configs}
        all_configs = [c for c in (writes.configs if writes is not None else ()) if c.node_id not in own]
        all_configs += list(configs)
        faults.point(f"{point}.planned")
        published = self.configs.publish_many(all_configs, fence=self.lease, docs=docs, values=values,
                                              round_state=writes.round_state if writes is not None else None)
        faults.point(f"{point}.committed")
        return published

    # -- planning -----------------------------------------------------------------------

    def plan(self, request: RoundRequest, *, lenient: bool = False) -> RoundOutcome:
        """Plan ``request``; with ``apply`` (and a feasible plan) publish the configs.

        Raises NotLeader (FAILED_PRECONDITION) on a standby, InvalidArgument / NotFound
        naming ``nodes[i]....`` for a bad request. ``lenient`` (re-plans): a node without
        options is planned around rather than failing the round.
        """
        outcome, writes = self._plan(request, lenient)
        if writes is not None:
            outcome = replace(outcome, published=tuple(self._commit("round", writes)))
        return outcome

    def _plan(self, request: RoundRequest, lenient: bool = False,
              pending: _Pending | None = None) -> tuple[RoundOutcome, _Writes | None]:
        """The outcome and, with ``apply`` and a feasible plan, what to write (nothing written here)."""
        if self.lease is not None:
            self.lease.require()
        request = replace(request, round_id=request.round_id or new_round_id())
        fleet, around, resolved, members = self._fleet(request, lenient, pending)
        if not fleet.nodes:
            why = "no plannable node in the request" + (
                "" if not around else ": " + ", ".join(f"{n} ({w})" for n, w in around))
            return RoundOutcome(request.round_id, RoundPlan(False, request.objective, why), tuple(around)), None
        plan = plan_round(fleet)
        outcome = RoundOutcome(request.round_id, plan, tuple(around))
        writes = None
        if request.apply and plan.feasible:
            # Options are stored resolved (inline), so a re-plan needs no measurement look-up.
            writes = _Writes(tuple(self._configs_of(request, fleet, plan)),
                             self._round_state(replace(request, nodes=resolved), members))
        log.info("round planned", extra={"round_id": request.round_id, "feasible": plan.feasible,
                                         "makespan_s": plan.makespan_s, "energy_j": plan.energy_j,
                                         "apply": writes is not None, "planned_around": around})
        return outcome, writes

    def last_round(self) -> RoundRequest | None:
        state = self.store.get_round()
        if state is None:
            return None
        doc = dict(state.request)
        doc["nodes"] = [dict(n) for n in doc["nodes"]]
        with np.load(io.BytesIO(state.options_npz)) as arrays:
            for i, node in enumerate(doc["nodes"]):
                if f"{i}.batch_size" in arrays.files:  # absent: a node planned around, nothing resolved
                    node["options"] = {name: arrays[f"{i}.{name}"] for name in OPTION_COLUMNS}
        return RoundRequest.from_json(doc)

    def _round_state(self, request: RoundRequest, members: Sequence[str]) -> RoundState:
        # Options as one npz blob beside the JSON: thousands of modes per node would make a
        # multi-megabyte JSON that costs more to format than the plan does to compute.
        doc = replace(request, nodes=tuple(replace(n, options=None) for n in request.nodes)).to_json()
        arrays = {f"{i}.{name}": getattr(n.options, name) for i, n in enumerate(request.nodes)
                  if n.options is not None for name in OPTION_COLUMNS}
        buf = io.BytesIO()
        np.savez(buf, **arrays)
        return RoundState(doc, tuple(n.node_id for n in request.nodes), tuple(sorted(members)), buf.getvalue())

    def update_arrival_rate(self, node_id: str, arrival_rps: float | None = None,
                            latency_budget_ms: float | None = None, *,
                            workload: str | None = None) -> InferencePlacement:
        """Re-solve one inference node's (mode, β) for a new arrival rate and publish it.

        None keeps the node's standing value (each is required the first time). Only this
        node's config is touched, and it gets a new revision only when the decision changed;
        an infeasible selection keeps the previous config (see :func:`.inference.solve_placement`
        for the errors).
        """
        with self._replan_lock:
            return self._update_arrival_rate(node_id, arrival_rps, latency_budget_ms, workload)

    def _update_arrival_rate(self, node_id: str, arrival_rps: float | None, latency_budget_ms: float | None,
                             workload: str | None) -> InferencePlacement:
        if self.lease is not None:
            self.lease.require()
        return solve_placement(self.store, self.registry, self.configs, node_id, arrival_rps=arrival_rps,
                               latency_budget_ms=latency_budget_ms, workload=workload, lease=self.lease,
                               now_s=self._now_s())

    def _replan_for_budget(self, node_id: str | None,
                           pending: _Pending | None) -> tuple[RoundOutcome, _Writes | None] | None:
        """The re-plan of the last applied round for a budget change (None: no round, or the
        node is not in it); nothing written."""
        last = self.last_round()
        if last is None:
            return None
        if node_id is not None:
            if all(n.node_id != node_id for n in last.nodes):
                return None
            nodes = tuple(replace(n, power_budget_w=None) if n.node_id == node_id else n for n in last.nodes)
            request = replace(last, nodes=nodes, apply=True)
        else:
            site = self.site_budgets(pending)
            request = replace(last, apply=True,
                              site_power_budget_w=site.site_power_budget_w or last.site_power_budget_w,
                              deadline_s=site.deadline_s or last.deadline_s)
        # A node that was planned around (lost) may be back without options: plan around it again.
        outcome, writes = self._plan(request, lenient=True, pending=pending)
        if not outcome.plan.feasible:
            log.warning("re-plan after a budget change is infeasible; configs unchanged",
                        extra={"round_id": request.round_id, "reason": outcome.reason})
        return outcome, writes

    def replan_after_membership_change(self, node_id: str | None = None) -> RoundOutcome | None:
        """Re-plan the last applied round when the plannable nodes of its scope changed.

        The round's *members* are its nodes that were plannable (live, not unavailable) when it
        was planned. A member that is lost (heartbeat expired) or flagged unavailable, or a
        node of the round that is back (heartbeat again, re-registered), changes them: the
        round is re-planned (lost nodes planned around) and only nodes whose config changed
        get a new revision. ``node_id``: the node that just (re-)registered; None: check the
        whole scope (the leader's periodic check). Returns None when nothing changed, there
        is no applied round, or ``node_id`` is not in it. A node outside the round's scope
        does not join it (the round's node list is the FL job's). An infeasible re-plan
        keeps the previous configs and records the new members, so it is not retried each check.
        """
        if self.lease is not None:
            self.lease.require()
        with self._replan_lock:
            state = self.store.get_round()
            if state is None:
                return None
            if node_id is not None and node_id not in state.scope:
                return None
            now = self.registry.plannable_ids(state.scope)
            before = set(state.members)
            if now == before:
                return None
            last = self.last_round()
            if last is None:
                return None
            log.info("round membership changed: re-planning",
                     extra={"round_id": last.round_id, "lost": sorted(before - now), "back": sorted(now - before)})
            outcome = self.plan(replace(last, apply=True), lenient=True)
            if not outcome.plan.feasible:
                self.store.set_round_members(sorted(now))
                log.warning("re-plan after a membership change is infeasible; configs unchanged",
                            extra={"round_id": last.round_id, "reason": outcome.reason})
            return outcome

    # -- helpers ------------------------------------------------------------------------

    def _fleet(self, request: RoundRequest, lenient: bool = False, pending: _Pending | None = None,
               ) -> tuple[Fleet, list[tuple[str, str]], tuple[RoundNode, ...], list[str]]:
        """The planner's input, the nodes planned around, the resolved nodes and the round's
        plannable nodes; ``lenient`` plans around nodes without options instead of failing."""
        if request.objective not in OBJECTIVES:
            raise InvalidArgument("objective", f"unknown objective {request.objective!r}", ", ".join(OBJECTIVES))
        if request.role not in ROLES:
            raise InvalidArgument("workload.role", f"{request.role!r}", ", ".join(ROLES))
        if not request.nodes:
            raise InvalidArgument("nodes", "is empty", "at least one node with node_id and samples")
        site = self.site_budgets(pending)
        deadline = request.deadline_s if request.deadline_s is not None else site.deadline_s
        site_w = request.site_power_budget_w if request.site_power_budget_w is not None else site.site_power_budget_w
        if deadline is not None:
            validation.positive(deadline, "budgets.deadline_s", "> 0")
        validation.optional(validation.power_budget_w, site_w, "budgets.site_power_budget_w")
        seen: set[str] = set()
        nodes: list[NodeOptions] = []
        resolved: list[RoundNode] = []
        around: list[tuple[str, str]] = []
        members: list[str] = []
        for i, n in enumerate(request.nodes):
            at = f"nodes[{i}]"
            if not n.node_id:
                raise InvalidArgument(f"{at}.node_id", "is empty", "a registered node id")
            if n.node_id in seen:
                raise InvalidArgument(f"{at}.node_id", f"duplicate node {n.node_id!r}")
            seen.add(n.node_id)
            if isinstance(n.samples, bool) or not isinstance(n.samples, int | np.integer) or n.samples <= 0:
                raise InvalidArgument(f"{at}.samples", f"{n.samples!r}", "an integer > 0")
            override = validation.optional(validation.power_budget_w, n.power_budget_w, f"{at}.power_budget_w")
            record = self._record(n.node_id, at)
            if not record.plannable:  # planned around; its options are resolved if it comes back
                around.append((n.node_id, "lost: no heartbeat" if not record.live
                               else f"unavailable: {record.unavailable_reason}"))
                resolved.append(n)
                continue
            members.append(n.node_id)
            try:
                options = n.options if n.options is not None and len(n.options) else self._stored_options(
                    record, request, at)
            except FailedPrecondition as exc:
                if not lenient:
                    raise
                around.append((n.node_id, f"no options: {exc}"))
                resolved.append(n)
                continue
            _check_options(options, record, at)
            resolved.append(replace(n, options=options))
            registered = (pending.node_budgets[n.node_id] if pending is not None and n.node_id in pending.node_budgets
                          else record.power_budget_w)
            budget = override if override is not None else registered
            batches = _check_batch_sizes(n.batch_sizes if n.batch_sizes is not None else request.batch_sizes,
                                         f"{at}.batch_sizes" if n.batch_sizes is not None else "batch_sizes")
            eff = _check_efficiency(n.batch_efficiency if n.batch_efficiency is not None else request.batch_efficiency,
                                    f"{at}.batch_efficiency" if n.batch_efficiency is not None else "batch_efficiency")
            nodes.append(NodeOptions(n.node_id, int(n.samples), options.batch_size, options.time_ms,
                                     options.power_w, budget, options.modes, batches, eff))
        fleet = Fleet(nodes, request.objective, deadline, site_w)
        return fleet, around, tuple(resolved), members

    def _record(self, node_id: str, at: str) -> NodeRecord:
        try:
            return self.registry.get(node_id)
        except NotFound:
            raise NotFound(f"{at}.node_id: node {node_id!r} is not registered") from None

    def _stored_options(self, record: NodeRecord, request: RoundRequest, at: str) -> OptionTable:
        """The node's own measurements of the workload, else its device model's (any node)."""
        name = str(request.workload.get("name") or "")
        if not name:
            raise InvalidArgument(f"{at}.options", "no options and no workload.name to look measurements up by",
                                  "inline options, or workload.name with stored measurements")
        device = record.device_model
        rows = self.store.get_measurements(device, name, request.role, record.node_id) if device else []
        if not rows and device:
            rows = self.store.get_measurements(device, name, request.role)
        latest: dict[tuple, tuple[PowerMode, int, float, float]] = {}
        for m in rows:  # write order: a later measurement of the same point replaces an earlier one
            latest[(m.mode.as_tuple(), m.batch_size)] = (m.mode, m.batch_size, m.time_ms, m.power_w)
        if not latest:
            raise FailedPrecondition(
                f"{at}.options: none given and no stored measurements of {name}/{request.role} for node "
                f"{record.node_id!r} (device {device or 'unknown'}): profile it first or pass options")
        return OptionTable.from_rows(list(latest.values()))

    def _configs_of(self, request: RoundRequest, fleet: Fleet, plan: RoundPlan) -> list[NodeConfig]:
        now = self._now_s()
        budgets = {n.id: n.power_budget_w for n in fleet.nodes}
        configs = [NodeConfig(node_id=p.id, mode=p.mode, batch_size=p.batch_size, workload=dict(request.workload),
                              role=request.role, round_id=request.round_id, valid_from_s=now,
                              power_budget_w=budgets.get(p.id),
                              reason=f"round {request.round_id} ({request.objective})")
                   for p in plan.nodes]
        return configs


class MembershipCheck:
    """The leader's periodic check: re-plan the last round when its plannable nodes changed."""

    def __init__(self, rounds: RoundCoordinator, lease: LeaderLease, interval_s: float) -> None:
        self.rounds = rounds
        self.lease = lease
        self.interval_s = interval_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def check(self) -> None:
        if not self.lease.is_leader:
            return
        try:
            self.rounds.replan_after_membership_change()
        except NotLeader:
            pass  # lost the lease meanwhile: the new leader checks
        except Exception:  # Redis hiccup, a bad stored round: log and try again next time
            log.exception("membership check failed")

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="membership-check", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.interval_s + 5.0)
            self._thread = None

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.check()


def _check_batch_sizes(values: Sequence[int] | None, field_name: str) -> tuple[int, ...] | None:
    if values is None:
        return None
    out = tuple(values)
    if not out:
        raise InvalidArgument(field_name, "is empty", "batch sizes >= 1, or absent for any")
    for k, b in enumerate(out):
        if isinstance(b, bool) or not isinstance(b, int | np.integer) or b <= 0:
            raise InvalidArgument(f"{field_name}[{k}]", f"{b!r}", ">= 1")
    return out


def _check_efficiency(eff: Mapping[int, float] | None, field_name: str) -> dict[int, float] | None:
    if eff is None:
        return None
    if not eff:
        raise InvalidArgument(field_name, "is empty", "r_b > 0 per batch size, or absent")
    for b, r in eff.items():
        if isinstance(b, bool) or not isinstance(b, int | np.integer) or b <= 0:
            raise InvalidArgument(f"{field_name}[{b!r}]", "is not a batch size", ">= 1")
        if isinstance(r, bool) or not isinstance(r, int | float) or np.isnan(r) or r <= 0:
            raise InvalidArgument(f"{field_name}[{b}]", f"{r!r}", "> 0 (inf: never reaches the target)")
    return {int(b): float(r) for b, r in eff.items()}


def _check_options(options: OptionTable, record: NodeRecord, at: str) -> None:
    """Options must be positive numbers and valid modes of the node's registered tables (a node without
    tables has no options that can be checked: FailedPrecondition).
    Errors name the column and row, as on the wire's PredictionTable (``nodes[0].options.power_w[1]``)."""
    for name in ("time_ms", "power_w"):
        values = getattr(options, name)
        bad = np.flatnonzero(~(np.isfinite(values) & (values > 0)))
        if bad.size:
            raise InvalidArgument(f"{at}.options.{name}[{int(bad[0])}]", f"{values[bad[0]]!r}", "> 0")
    bad = np.flatnonzero(options.batch_size <= 0)
    if bad.size:
        raise InvalidArgument(f"{at}.options.batch_size[{int(bad[0])}]", f"{options.batch_size[bad[0]]}", ">= 1")
    spec = record.spec
    if spec is None:  # nothing to check a mode against: never push an unchecked mode (13 cores at 9,999 MHz)
        raise FailedPrecondition(f"{at}.options: node {record.node_id!r} registered no power-mode tables "
                                 f"(device {record.device_model or 'unnamed'!r}), so its modes cannot be checked; "
                                 "register it with its device's tables or a built-in device name")
    # Vectorised screen (thousands of options per node); spec.validate has the last word and the message.
    for j in np.flatnonzero(~_modes_in_tables(options.modes, spec)):
        row = options.modes[j]
        try:
            spec.validate(PowerMode(int(row[0]), float(row[1]), float(row[2]), float(row[3])))
        except InvalidArgument as exc:
            raise InvalidArgument(f"{at}.options.{exc.field}[{int(j)}]",
                                  f"{exc.message} of node {record.node_id!r}", exc.allowed) from None


def _modes_in_tables(modes: np.ndarray, spec: DeviceSpec) -> np.ndarray:
    """Per row: every knob is in the spec's tables (frequencies within the table-match tolerance)."""
    ok = np.isin(modes[:, 0], np.asarray(spec.core_counts, dtype=float))
    for col, dim in ((1, "cpu_mhz"), (2, "gpu_mhz"), (3, "emc_mhz")):
        table = np.asarray(spec.table(dim), dtype=float)
        values = modes[:, col]
        hi = np.clip(np.searchsorted(table, values), 0, table.size - 1)
        lo = np.clip(hi - 1, 0, table.size - 1)
        near = np.where(np.abs(table[lo] - values) < np.abs(table[hi] - values), table[lo], table[hi])
        ok &= np.abs(near - values) <= FREQ_MATCH_REL_TOL * np.maximum(near, 1.0)
    return ok
