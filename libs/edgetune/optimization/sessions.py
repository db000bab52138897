"""Search sessions kept in the Store, so that any optimizer replica (or a restarted one) can
continue them. :meth:`SessionStore.start` / :meth:`~SessionStore.ask` / :meth:`~SessionStore.tell` /
:meth:`~SessionStore.best` / :meth:`~SessionStore.end_search` answer the optimizer's search RPCs
(:class:`~edgetune.optimization.records.SearchRequest` in, records out); :func:`search_spec` checks
a request's problem and space.

One JSON doc per session (kind ``optimizer-session``, key the session id)::

    {"schema": 1, "session_id": …, "created_s": …, "updated_s": …,
     "space": {"device": …, "grid": …, "modes": [[cores, cpu, gpu, emc], …] | null,
               "train_batch_size": …, "infer_batch_sizes": […]},
     "strategy": <SearchStrategy.state_dict() without its "space">,
     "partial": {"<trial number>": {"<role>:<batch size>": [time_ms, power_w]}}}

- The strategy's own :meth:`~edgetune.optimization.strategies.base.SearchStrategy.state_dict`
  (configuration + told history + pending trials) is the session; ``from_state`` replays the
  history into a fresh strategy, which lands in exactly the same state. The space is stored
  as the request described it (device + grid, or the explicit modes), not as the library's
  mode list, so a doc stays small on an 18,096-mode grid.
- ``partial`` holds the points of a trial told so far when a trial needs several (a
  concurrent trial: the mode's training point and its inference point) and a Tell brought
  only some; the strategy is told once the trial is complete.
- Every change is load → change → ``put_doc(expected_revision=…)``. A conflict means another
  replica changed the session in between: the local copy is dropped, the change is retried
  on what the store holds now (a Tell whose points the other replica already recorded with
  the same values is then a no-op), so two replicas never interleave half-applied states.
- Each process keeps the strategies it last loaded, keyed by revision: an RPC reads the
  doc's revision (one round trip) and rebuilds from the doc only when another process has
  written since. Sessions expire ``ttl_s`` after their last change.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from prometheus_client import Counter

from edgetune import validation
from edgetune.base.mode import PowerMode
from edgetune.errors import FailedPrecondition, InvalidArgument, NotFound
from edgetune.optimization import problems as P
from edgetune.optimization.answers import verdict_of_problem
from edgetune.optimization.records import (
    Asked,
    Best,
    SearchPoint,
    SearchRequest,
    Started,
    TellResult,
    Told,
    Verdict,
)
from edgetune.optimization.strategies import SearchSpace, SearchStrategy, make_strategy
from edgetune.optimization.strategies.base import Trial
from edgetune.powermodes.grids import ModeGrid, named_grid
from edgetune.powermodes.specs import get_spec
from edgetune.store import RevisionConflict, SearchSessionRecord, Store, UnknownSchema

log = logging.getLogger(__name__)

# What *this* process did to the sessions every replica shares (the optimizer serves them).
SESSIONS_ENDED = Counter("edgetune_optimizer_sessions_ended_total",
                         "Search sessions removed: ended by EndSearch, or expired when idle.", ["how"])
SESSIONS_LOADED = Counter("edgetune_optimizer_sessions_loaded_total",
                          "Sessions rebuilt from the store (written by another replica or a previous process).")
REVISION_CONFLICTS = Counter("edgetune_optimizer_revision_conflicts_total",
                             "Session writes that lost a race with another replica and were retried.")
SESSIONS_STARTED = Counter("edgetune_optimizer_sessions_started_total",
                           "Search sessions started, by strategy and problem.", ["strategy", "problem"])
POINTS_TOLD = Counter("edgetune_optimizer_points_told_total", "Measured points recorded by Tell.")

DOC_KIND = "optimizer-session"
#: Default idle lifetime of a session (no change for this long: gone).
DEFAULT_TTL_S = 24 * 3600.0
#: Retries of a change that lost a revision race before giving up with FAILED_PRECONDITION.
MAX_ATTEMPTS = 8
#: Strategies each process keeps in memory (least recently used go first; the store keeps all).
CACHE_SIZE = 256
#: Least interval between two sweeps for expired sessions (run on StartSearch).
SWEEP_INTERVAL_S = 60.0
_LOCK_STRIPES = 64

T = TypeVar("T")


# --- the search space, as the request described it ---------------------------------------------------
def space_ref(device: str, grid: str, modes: list[PowerMode] | None, train_batch_size: int,
              infer_batch_sizes: list[int]) -> dict[str, Any]:
    return {"device": device, "grid": grid, "modes": [list(m.as_tuple()) for m in modes] if modes else None,
            "train_batch_size": int(train_batch_size), "infer_batch_sizes": [int(b) for b in infer_batch_sizes]}


def build_space(ref: Mapping[str, Any]) -> SearchSpace:
    """The library's SearchSpace of a :func:`space_ref` (deterministic: a restart rebuilds the same)."""
    spec = get_spec(ref["device"]) if ref.get("device") else None
    if ref.get("modes"):
        modes = tuple(PowerMode(int(m[0]), float(m[1]), float(m[2]), float(m[3])) for m in ref["modes"])
        grid = ModeGrid.from_modes(modes, name="request", device=ref.get("device") or "")
    else:
        if spec is None:
            raise InvalidArgument("device", "a grid needs a device", "a device name, or explicit modes")
        grid = named_grid(spec, ref["grid"])
        modes = tuple(grid.modes())
    return SearchSpace(grid, modes, tuple(sorted(ref["infer_batch_sizes"])), int(ref["train_batch_size"]),
                       max_power_w=spec.max_power_w if spec is not None else None)


# --- a search as asked for --------------------------------------------------------------------------
@dataclass(frozen=True)
class SearchSpec:
    """A checked :class:`SearchRequest`: the strategy, its problem, its space (:func:`space_ref`)."""

    strategy: str
    problem: P.Problem
    space: dict[str, Any]
    budget: int | None
    seed: int


def _batch_sizes(values: tuple[int, ...], field: str) -> list[int]:
    """Distinct batch sizes (:func:`validation.batch_sizes`); none given is an empty list (the default)."""
    return list(validation.batch_sizes(values, field)) if values else []


def _required(value: float | None, name: str, allowed: str) -> float:
    if value is None:
        raise InvalidArgument(f"budgets.{name}", "is required", allowed)
    return value


def search_spec(request: SearchRequest) -> SearchSpec:
    """The request's problem and space, checked: one training batch size, the budgets the problem needs,
    a device's grid or distinct modes (of the device, when one is named)."""
    if request.max_profiles < 0:
        raise InvalidArgument("max_profiles", f"{request.max_profiles} is negative",
                              "0 (the strategy's default) or more")
    train_sizes = _batch_sizes(request.batch_sizes, "batch_sizes")
    if len(train_sizes) > 1:
        raise InvalidArgument("batch_sizes", f"{len(train_sizes)} training batch sizes given; a search keeps the "
                              "training minibatch size fixed (it is the user's, not tuned)", "one value, or none (16)")
    train_bs = train_sizes[0] if train_sizes else P.TRAIN_BATCH_SIZE
    infer_sizes = _batch_sizes(request.infer_batch_sizes, "infer_batch_sizes") or list(P.INFER_BATCH_SIZES)

    power = _required(request.power_budget_w, "power_budget_w", validation.POWER_BUDGET_ALLOWED)
    if request.problem == "train":
        problem: P.Problem = P.TrainProblem(power, train_bs, request.train_workload or None)
    else:
        latency = _required(request.latency_budget_ms, "latency_budget_ms", validation.TIME_BUDGET_ALLOWED)
        rate = _required(request.arrival_rps, "arrival_rps", validation.ARRIVAL_RATE_ALLOWED)
        if request.problem == "infer":
            problem = P.InferProblem(power, latency, rate, request.infer_workload or None)
        else:
            problem = P.ConcurrentProblem(power, latency, rate, request.train_workload or None,
                                          request.infer_workload or None, train_bs)

    spec = get_spec(request.device) if request.device else None
    modes: list[PowerMode] | None = None
    if request.modes:
        modes = []
        seen: dict[tuple, int] = {}
        for i, mode in enumerate(request.modes):
            at = f"modes[{i}]"
            if spec is not None:
                mode = validation.power_mode(spec, mode, at)
            key = mode.as_tuple()
            if key in seen:
                raise InvalidArgument(at, f"{mode.label()} repeats modes[{seen[key]}]", "distinct modes")
            seen[key] = i
            modes.append(mode)
    elif spec is None:
        raise InvalidArgument("modes", "no search space: no modes and no device", "modes, or a device (and a grid)")
    else:
        named_grid(spec, request.grid)  # refuse an unknown grid now, not at the first Ask
    return SearchSpec(request.strategy, problem, space_ref(request.device, request.grid, modes, train_bs, infer_sizes),
                      request.max_profiles or None, 0 if request.seed is None else validation.seed(request.seed))


def _label(mode: PowerMode, role: str | None, batch_size: int) -> str:
    return f"{mode.label()} {role or '?'} bs={batch_size}"


# --- one session ---------------------------------------------------------------------------------
@dataclass
class Session:
    """A loaded session: the live strategy and the doc's bookkeeping, at ``revision``."""

    session_id: str
    strategy: SearchStrategy
    space: dict[str, Any]
    partial: dict[int, dict[str, tuple[float, float]]] = field(default_factory=dict)
    created_s: float = 0.0
    updated_s: float = 0.0
    revision: int = 0

    @property
    def profiled(self) -> int:
        """Distinct points measured (a concurrent trial is two)."""
        return len(self.strategy.obs)

    def pending(self) -> list[Trial]:
        """Trials asked and not yet told. The strategy has always asked ahead (after StartSearch and
        after each completed batch), so this never advances it."""
        return self.strategy.ask()

    def asked_points(self) -> list[tuple[PowerMode, str, int]]:
        """Distinct (mode, role, batch size) points of the pending trials not told yet, in trial order.
        A point several trials need (a concurrent mode's training point) is listed, and measured, once."""
        out: list[tuple[PowerMode, str, int]] = []
        for t in self.pending():
            told = self.partial.get(t.number, {})
            for role, b in t.points:
                if f"{role}:{b}" not in told and (t.mode, role, b) not in out:
                    out.append((t.mode, role, b))
        return out

    def record(self, told: list[Told]) -> int:
        """Record measured points against the pending trials; returns how many distinct points were new.

        A point fills every pending trial that needs it; a trial is told to the strategy once all its
        points are in (trials in the order they were asked), and when the batch is complete the
        strategy asks ahead. A point already recorded with the same values is a no-op (a client's
        retry, or another replica's write); with other values, or not asked at all, it is refused.
        Everything is checked before the strategy is touched.
        """
        strategy, problem = self.strategy, self.strategy.problem
        pending = {t.number: t for t in self.pending()}
        fills: list[tuple[int, str, tuple[float, float], tuple]] = []
        for m in told:
            key = m.mode.as_tuple()
            matches = [(n, r, b) for n, tr in pending.items() if tr.mode.as_tuple() == key
                       for r, b in tr.points if b == m.batch_size and m.role in (None, r)]
            if len({r for _, r, _ in matches}) > 1:
                raise InvalidArgument(f"{m.field}.role", f"{_label(m.mode, None, m.batch_size)} is asked for both "
                                      "roles; say which", "ROLE_TRAIN, ROLE_INFER")
            value = (m.time_ms, m.power_w)
            if not matches:
                roles = [m.role] if m.role else list(problem.roles)
                old = [p for p in (strategy.obs.get(m.mode, r, m.batch_size) for r in roles) if p is not None]
                if any((p.time_ms, p.power_w) == value for p in old):
                    continue  # recorded already with these values: a retry
                if old:
                    raise InvalidArgument(m.field, f"{_label(m.mode, m.role or roles[0], m.batch_size)} was already "
                                          "told with other values", "each point once, with the values first told")
                if strategy.done:
                    raise FailedPrecondition(f"{m.field}: the search is done and asks for nothing more; "
                                             "call Best or EndSearch")
                asked = [_label(mode, r, b) for mode, r, b in self.asked_points()]
                raise InvalidArgument(m.field, f"no pending trial asks for {_label(m.mode, m.role, m.batch_size)}",
                                      "; ".join(asked[:20]) or "nothing pending")
            role = matches[0][1]
            wanted = problem.workload_for(role)
            if m.workload and wanted and m.workload != wanted:
                raise InvalidArgument(f"{m.field}.workload", f"{m.workload!r} is not the session's {role} workload",
                                      wanted)
            for n, r, b in matches:
                got = self.partial.get(n, {}).get(f"{r}:{b}")
                if got is not None and got != value:
                    raise InvalidArgument(m.field, f"{_label(m.mode, r, b)} was already told with other values",
                                          "each point once, with the values first told")
                fills.append((n, f"{r}:{b}", value, (key, r, b)))
        new_points = set()
        for n, point, value, distinct in fills:
            slot = self.partial.setdefault(n, {})
            if point not in slot:
                slot[point] = value
                new_points.add(distinct)
        for n in sorted(self.partial):
            trial, pts = pending.get(n), self.partial[n]
            if trial is not None and all(f"{r}:{b}" in pts for r, b in trial.points):
                strategy.tell(trial, {k: P.Point(*v) for k, v in pts.items()})
                del self.partial[n]
        # Ask ahead once the batch is told: the next trials (or done) are decided now and saved with
        # this revision, so Ask only ever reads and TellResponse.done is exact.
        self.pending()
        return len(new_points)

    def to_doc(self) -> dict[str, Any]:
        state = self.strategy.state_dict()
        state.pop("space", None)  # rebuilt from self.space: small docs on big grids
        return SearchSessionRecord(self.session_id, self.space, state, self.partial, self.created_s,
                                   self.updated_s).to_dict()

    @classmethod
    def from_doc(cls, doc: Mapping[str, Any], revision: int) -> Session:
        try:
            record = SearchSessionRecord.from_dict(doc)
        except UnknownSchema as exc:
            raise FailedPrecondition(f"session {doc.get('session_id')!r}: {exc}") from None
        space = build_space(record.space)
        strategy = SearchStrategy.from_state(dict(record.strategy), space=space)
        partial = {n: dict(pts) for n, pts in record.partial.items()}
        return cls(record.session_id, strategy, dict(record.space), partial, record.created_s, record.updated_s,
                   revision)


# --- the sessions of a store ------------------------------------------------------------------------
class SessionStore:
    """Sessions in ``store`` with optimistic concurrency, a per-process cache and idle expiry."""

    def __init__(self, store: Store, ttl_s: float = DEFAULT_TTL_S,
                 clock: Callable[[], float] = time.time) -> None:
        if not ttl_s > 0:
            raise InvalidArgument("session_ttl_s", f"{ttl_s:g} must be positive", "> 0 s")
        self.store = store
        self.ttl_s = float(ttl_s)
        self.clock = clock
        self._cache: OrderedDict[str, Session] = OrderedDict()
        self._cache_lock = threading.Lock()
        # Striped locks: RPCs on one session in this process run one at a time (no self-inflicted
        # revision conflicts); other processes are kept out by the revision check.
        self._locks = [threading.Lock() for _ in range(_LOCK_STRIPES)]
        self._last_sweep_s = 0.0

    def _lock(self, session_id: str) -> threading.Lock:
        return self._locks[hash(session_id) % _LOCK_STRIPES]

    # -- cache ---------------------------------------------------------------------------------------
    def _cached(self, session_id: str, revision: int) -> Session | None:
        with self._cache_lock:
            s = self._cache.get(session_id)
            if s is None or s.revision != revision:
                return None
            self._cache.move_to_end(session_id)
            return s

    def _remember(self, s: Session) -> None:
        with self._cache_lock:
            self._cache[s.session_id] = s
            self._cache.move_to_end(s.session_id)
            while len(self._cache) > CACHE_SIZE:
                self._cache.popitem(last=False)

    def _forget(self, session_id: str) -> None:
        with self._cache_lock:
            self._cache.pop(session_id, None)

    # -- life cycle ----------------------------------------------------------------------------------
    def create(self, strategy: SearchStrategy, space: dict[str, Any]) -> Session:
        now = self.clock()
        s = Session(uuid.uuid4().hex, strategy, space, {}, now, now)
        s.pending()  # ask ahead: from here on Ask only reads (see Session.pending)
        s.revision = self.store.put_doc(DOC_KIND, s.session_id, s.to_doc(), expected_revision=0)
        self._remember(s)
        self.sweep()
        return s

    def _load(self, session_id: str) -> Session:
        validation.identifier(session_id, "session_id")
        found = self.store.get_doc(DOC_KIND, session_id, missing_ok=True)
        if found is None:
            self._forget(session_id)
            raise NotFound(f"session_id: no search session {session_id!r} (ended, expired, or never started)")
        doc, revision = found
        if self.clock() - float(doc.get("updated_s", 0.0)) > self.ttl_s:
            self._expire(session_id, revision)
            raise NotFound(f"session_id: search session {session_id!r} expired after {self.ttl_s:g} s idle")
        s = self._cached(session_id, revision)
        if s is None:
            # Written by another process (or this one forgot it): rebuild by replaying the history.
            s = Session.from_doc(doc, revision)
            SESSIONS_LOADED.inc()
            self._remember(s)
        return s

    def _expire(self, session_id: str, revision: int) -> None:
        try:
            if self.store.delete_doc(DOC_KIND, session_id, expected_revision=revision):
                SESSIONS_ENDED.labels("expired").inc()
        except RevisionConflict:
            pass  # changed meanwhile: somebody is using it after all
        self._forget(session_id)

    def read(self, session_id: str, fn: Callable[[Session], T]) -> T:
        """``fn(session)`` without writing (Ask, Best)."""
        with self._lock(session_id):
            s = self._load(session_id)
            try:
                return fn(s)
            except BaseException:
                self._forget(session_id)  # fn may have touched the strategy: rebuild next time
                raise

    def change(self, session_id: str, fn: Callable[[Session], tuple[T, bool]]) -> T:
        """``fn(session)`` -> (result, changed); a changed session is written at the revision it was
        read at, and the whole step retried on a fresh copy when another writer got there first."""
        for _ in range(MAX_ATTEMPTS):
            with self._lock(session_id):
                s = self._load(session_id)
                try:
                    result, changed = fn(s)
                    if changed:
                        s.updated_s = self.clock()
                        s.revision = self.store.put_doc(DOC_KIND, session_id, s.to_doc(),
                                                        expected_revision=s.revision)
                        self._remember(s)
                    return result
                except RevisionConflict:
                    self._forget(session_id)
                    REVISION_CONFLICTS.inc()
                    log.info("session changed by another replica; retrying", extra={"session_id": session_id})
                    continue
                except BaseException:
                    self._forget(session_id)
                    raise
        raise FailedPrecondition(f"session_id: search session {session_id!r} is being changed concurrently "
                                 f"({MAX_ATTEMPTS} attempts lost the race); retry")

    def end(self, session_id: str, fn: Callable[[Session], T]) -> T:
        """``fn(session)`` on the last revision, then the session is deleted (EndSearch)."""
        for _ in range(MAX_ATTEMPTS):
            with self._lock(session_id):
                s = self._load(session_id)
                try:
                    result = fn(s)
                    self.store.delete_doc(DOC_KIND, session_id, expected_revision=s.revision)
                except RevisionConflict:
                    self._forget(session_id)
                    REVISION_CONFLICTS.inc()
                    continue
                self._forget(session_id)
                SESSIONS_ENDED.labels("ended").inc()
                return result
        raise FailedPrecondition(f"session_id: search session {session_id!r} is being changed concurrently; retry")

    def sweep(self, force: bool = False) -> int:
        """Delete sessions idle for longer than the TTL (at most once per SWEEP_INTERVAL_S)."""
        now = self.clock()
        if not force and now - self._last_sweep_s < SWEEP_INTERVAL_S:
            return 0
        self._last_sweep_s = now
        removed = 0
        for key in self.store.list_docs(DOC_KIND):
            found = self.store.get_doc(DOC_KIND, key, missing_ok=True)
            if found is not None and now - float(found.doc.get("updated_s", 0.0)) > self.ttl_s:
                self._expire(key, found.revision)
                removed += 1
        return removed

    # -- the search API (StartSearch / Ask / Tell / Best / EndSearch) -------------------------------
    def start(self, request: SearchRequest) -> Started:
        """A new session of the request's strategy over its problem and space."""
        spec = search_spec(request)
        strategy = make_strategy(spec.strategy, spec.problem, build_space(spec.space), budget=spec.budget,
                                 seed=spec.seed)
        session = self.create(strategy, spec.space)
        SESSIONS_STARTED.labels(spec.strategy, spec.problem.kind).inc()
        log.info("search started", extra={"session_id": session.session_id, "strategy": spec.strategy,
                                          "problem": spec.problem.describe(), "budget": strategy.budget})
        return Started(session.session_id, strategy.budget)

    def ask(self, session_id: str, max_points: int = 0) -> Asked:
        """The points the session waits for (at most ``max_points``; 0: all), and whether it is done."""
        if max_points < 0:
            raise InvalidArgument("max_points", f"{max_points} is negative", "0 (all ready) or more")

        def ask(s: Session) -> Asked:
            points = [SearchPoint(mode, role, b, s.strategy.problem.workload_for(role) or "")
                      for mode, role, b in s.asked_points()]
            return Asked(tuple(points[:max_points] if max_points else points), s.strategy.done)

        return self.read(session_id, ask)

    def tell(self, session_id: str, told: list[Told]) -> TellResult:
        """Record measured points (:meth:`Session.record`)."""
        if not told:
            raise InvalidArgument("measurements", "is empty", "at least one measured point")

        def tell(s: Session) -> tuple[TellResult, bool]:
            added = s.record(told)
            POINTS_TOLD.inc(added)
            return TellResult(s.profiled, s.strategy.done), added > 0

        return self.change(session_id, tell)

    def best(self, session_id: str) -> Best:
        return self.read(session_id, lambda s: Best(verdict_of_session(s), s.strategy.done))

    def end_search(self, session_id: str) -> Verdict:
        """The session's best, and the session removed."""
        return self.end(session_id, verdict_of_session)


def verdict_of_session(s: Session) -> Verdict:
    return verdict_of_problem(s.strategy.best(), s.strategy.problem, s.profiled)
