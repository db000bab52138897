"""The agent's link to the coordinator (``--coordinator ADDR``): register, heartbeat, run
profiling jobs, apply pushed configs. It drives the :class:`~edgetune.agent.node.NodeAgent`
(profiling, mode changes and their safety are its and its keeper's: every mode change goes
through ``ModeGuard``) and calls the coordinator through :class:`~edgetune.clients.nodes.NodesClient`.

Four daemon threads, each retrying with backoff while the coordinator or Redis is away:

- **heartbeat**: ``RegisterNode`` (device spec as discovered, address, budget) until it
  succeeds, then ``Heartbeat`` every interval the coordinator asked for (state, current mode,
  power, applied config revision); ``reregister`` (a coordinator that lost its state)
  registers again.
- **jobs**: ``JobQueue.claim`` on the node's stream in the agent's store (``--redis``, the
  cluster's Redis), or, with no store (``--redis none``: an agent that holds no store credential),
  the coordinator's ``NodeJobs`` for its own node (:class:`~edgetune.clients.nodejobs.RemoteJobQueue`);
  profile through :meth:`NodeAgent.start_profile` with the job id as run key
  (a re-delivered job writes the same measurement ids), ``complete`` (write + ack). A payload is
  a :class:`~edgetune.store.ProfileJob` (``to_dict()``). A payload that can never run (bad field,
  unknown schema) is acknowledged and logged; a device failure is left pending, so the queue
  re-delivers it and buries it after ``max_deliveries``.
- **watch**: ``WatchConfig`` from the last (epoch, revision) seen; hands each config to the
  applier. A config of another epoch (the coordinator's store lost its data) starts the count
  again: its revision may be lower than the last one seen.
- **apply**: a config's mode is applied at its ``valid_from`` and, with a ``valid_until``,
  restored then; a ``restore`` config restores at once. A newer config supersedes a pending
  one. While a profile holds the device the change waits for it (the profile returns to
  the config's mode when it ends). The mode is restored on shutdown by the keeper. A config
  the device refuses (a mode it does not have) is not applied: it is reported as refused,
  with the reason, in a heartbeat sent at once (``refused_revision`` / ``refused_reason``),
  and ``applied_revision`` stays on the last config applied.

A Flower client on the node brackets its local training with ApplyPowerMode /
RestorePowerMode as well (:mod:`edgetune.integrations.flower`); both paths go through the
same keeper, so applying a mode twice is harmless and the client's restore ends the round.
"""

from __future__ import annotations

import logging
import os
import queue
import socket
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from edgetune import validation
from edgetune.agent import metrics
from edgetune.agent.node import POLL_S, NodeAgent
from edgetune.clients.calls import CallFailed, Stream
from edgetune.clients.nodejobs import RemoteJobQueue
from edgetune.clients.nodes import NodesClient
from edgetune.control.jobs import DEFAULT_IDLE_TIMEOUT_MS, Job, JobQueue
from edgetune.errors import EdgetuneError, FailedPrecondition, InvalidArgument
from edgetune.identity import ClientSecurity, open_channel
from edgetune.profiling import Measurement
from edgetune.store import STORE_ERRORS, Heartbeat, NodeAnnouncement, NodeConfig, ProfileJob, UnknownSchema

log = logging.getLogger("edgetune.profiler.link")

#: Until the coordinator answers with its own interval (a third of its heartbeat TTL).
DEFAULT_HEARTBEAT_INTERVAL_S = 3.0
#: Backoff between attempts while the coordinator or Redis is unreachable.
RETRY_MIN_S, RETRY_MAX_S = 0.2, 5.0
#: While a profile holds the device, a config change or a job start tries again this often.
BUSY_RETRY_S = 0.1
#: Longest a job claim blocks; below the store client's socket timeout (1 s embedded, 30 s Redis).
CLAIM_BLOCK_MS = 500
#: A job stream away: the store's, or the coordinator's (an agent without a store).
JOB_ERRORS: tuple[type[BaseException], ...] = (*STORE_ERRORS, CallFailed)


def advertised_address(host: str, port: int) -> str:
    """Where the coordinator's clients reach this agent: the bind host, else the pod IP or hostname."""
    if host and host not in ("0.0.0.0", "::", "[::]"):
        return f"{host}:{port}"
    return f"{os.environ.get('EDGETUNE_POD_IP') or socket.gethostname()}:{port}"


class _Backoff:
    def __init__(self) -> None:
        self.delay_s = RETRY_MIN_S

    def reset(self) -> None:
        self.delay_s = RETRY_MIN_S

    def wait(self, stop: threading.Event) -> None:
        stop.wait(self.delay_s)
        self.delay_s = min(RETRY_MAX_S, self.delay_s * 2)


class CoordinatorLink:
    """Registers the agent's device with the coordinator and keeps it in step (see module doc)."""

    def __init__(self, agent: NodeAgent, coordinator: str, address: str, *,
                 power_budget_w: float | None = None, node_id: str = "",
                 labels: Mapping[str, str] | None = None, job_idle_timeout_ms: int = DEFAULT_IDLE_TIMEOUT_MS,
                 security: ClientSecurity | None = None) -> None:
        if not coordinator:
            raise InvalidArgument("coordinator", "is empty", "host:port of the coordinator")
        validation.optional(validation.power_budget_w, power_budget_w, "power_budget_w")
        self.agent = agent
        self.coordinator = coordinator
        self.address = address
        self.power_budget_w = power_budget_w
        self.node_id = node_id or agent.node_id
        self.labels = dict(labels or {})
        self.heartbeat_interval_s = DEFAULT_HEARTBEAT_INTERVAL_S
        #: Revision (and epoch) of the last config applied (or superseded while pending): reported in heartbeats.
        self.applied_revision = 0
        self.applied_epoch = 0
        #: The last config refused (0: none since one was applied) and why: reported in heartbeats.
        self.refused_revision = 0
        self.refused_reason = ""
        self._channel = open_channel(coordinator, security)
        self._nodes = NodesClient(self._channel)
        # Without a store credential (the chart's agents) the node's jobs come through the coordinator.
        self._jobs: JobQueue | RemoteJobQueue = (
            JobQueue(agent.store, idle_timeout_ms=job_idle_timeout_ms) if agent.store is not None
            else RemoteJobQueue(self._channel, idle_timeout_ms=job_idle_timeout_ms))
        self._consumer = f"{socket.gethostname()}-{os.getpid()}"
        self._stop = threading.Event()
        self._registered = threading.Event()
        self._profiling = threading.Event()
        self._watch: Stream[NodeConfig] | None = None
        self._configs: queue.Queue[NodeConfig] = queue.Queue()
        self._seen_revision = 0
        self._seen_epoch = 0
        #: Set to send a heartbeat now (a config was refused) rather than at the next interval.
        self._beat_now = threading.Event()
        self._threads: list[threading.Thread] = []

    # -- life cycle ----------------------------------------------------------------------
    def start(self) -> CoordinatorLink:
        for name, target in (("heartbeat", self._heartbeat_loop), ("watch", self._watch_loop),
                             ("apply", self._apply_loop), ("jobs", self._job_loop)):
            thread = threading.Thread(target=target, name=f"link-{name}", daemon=True)
            thread.start()
            self._threads.append(thread)
        return self

    def stop(self, timeout_s: float = 5.0) -> None:
        """Stop the threads (a running job is cancelled and left for re-delivery); the keeper restores."""
        self._stop.set()
        self._beat_now.set()
        watch = self._watch
        if watch is not None:
            watch.close()
        deadline = time.monotonic() + timeout_s
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        self._channel.close()

    def wait_registered(self, timeout_s: float | None = None) -> bool:
        return self._registered.wait(timeout_s)

    # -- registration and heartbeats -------------------------------------------------------
    def _register(self) -> None:
        device = self.agent.device
        reply = self._nodes.register(NodeAnnouncement(
            node_id=self.node_id, hostname=socket.gethostname(), address=self.address, spec=device.spec,
            current_mode=device.current_mode(), state=self._state(), labels=self.labels,
            power_budget_w=self.power_budget_w))
        self.node_id = reply.node_id
        self.agent.node_id = reply.node_id  # measurements carry the id the coordinator knows
        self.heartbeat_interval_s = reply.heartbeat_interval_s or DEFAULT_HEARTBEAT_INTERVAL_S
        self._registered.set()
        log.info("registered with the coordinator", extra={"node_id": reply.node_id, "coordinator": self.coordinator,
                                                           "config_revision": reply.config_revision})

    def _state(self) -> str:
        if self._profiling.is_set():
            return "profiling"
        return "running" if self.agent.keeper.active else "ready"

    def _beat(self) -> Heartbeat:
        """What the next heartbeat reports."""
        return Heartbeat(current_mode=self.agent.device.current_mode().as_dict(),
                         power_w=self.agent.heartbeat_power_w(), state=self._state(),
                         applied_revision=self.applied_revision, applied_epoch=self.applied_epoch,
                         refused_revision=self.refused_revision, refused_reason=self.refused_reason)

    def _heartbeat_loop(self) -> None:
        backoff = _Backoff()
        while not self._stop.is_set():
            try:
                if not self._registered.is_set():
                    self._register()
                else:
                    self._beat_now.clear()
                    if self._nodes.heartbeat(self.node_id, self._beat()):
                        log.warning("the coordinator forgot this node: registering again")
                        self._register()
                backoff.reset()
                self._beat_now.wait(self.heartbeat_interval_s)
            except CallFailed as exc:
                log.warning("coordinator unreachable", extra={"coordinator": self.coordinator,
                                                              "code": exc.code, "error": exc.details})
                backoff.wait(self._stop)

    # -- config push -----------------------------------------------------------------------
    def _watch_loop(self) -> None:
        backoff = _Backoff()
        while not self._stop.is_set():
            if not self._registered.wait(POLL_S):
                continue
            try:
                self._watch = self._nodes.watch_configs(self.node_id, self._seen_revision, self._seen_epoch)
                if self._stop.is_set():  # stop() ran before the watch existed: nothing cancelled it
                    self._watch.close()
                for config in self._watch:
                    backoff.reset()
                    if config.epoch != self._seen_epoch:  # the store lost its data: revisions count anew
                        self._seen_epoch, self._seen_revision = config.epoch, config.revision
                    self._seen_revision = max(self._seen_revision, config.revision)
                    self._configs.put(config)
            except CallFailed as exc:
                if self._stop.is_set():
                    return
                log.warning("config watch ended; watching again", extra={"code": exc.code, "error": exc.details})
            except InvalidArgument as exc:  # a config this agent cannot read: watch again after a pause
                log.error("unreadable config; watching again", extra={"error": str(exc)})
            backoff.wait(self._stop)  # a stream the server ended (shutdown): reconnect after a pause

    def _newest(self, config: NodeConfig | None) -> NodeConfig | None:
        """``config`` or a newer one that arrived meanwhile (a pending change is superseded, not applied)."""
        while True:
            try:
                config = self._configs.get_nowait()
            except queue.Empty:
                return config

    def _apply_loop(self) -> None:
        while not self._stop.is_set():
            try:
                config = self._newest(self._configs.get(timeout=POLL_S))
            except queue.Empty:
                continue
            while config is not None and not self._stop.is_set():
                config = self._handle(config)

    def _handle(self, config: NodeConfig) -> NodeConfig | None:
        """Apply one config; returns a newer config that superseded it (None when done)."""
        if config.restore or config.mode is None:
            self._until_done(self.agent.restore_mode)
            self._applied(config)
            log.info("config applied: mode restored", extra={"revision": config.revision})
            return None
        newer = self._wait_until(config.valid_from_s or 0.0)
        if newer is not None:
            self._applied(config)
            return newer
        mode = config.mode
        try:  # the device validates the mode against its own tables
            applied = self._until_done(lambda: self.agent.apply_mode(mode))
        except EdgetuneError as exc:  # a mode this device refuses: keep the current one, tell the coordinator why
            log.error("config refused", extra={"revision": config.revision, "error": str(exc)})
            self.refused_revision, self.refused_reason = config.revision, str(exc)
            self._beat_now.set()
            return None
        self._applied(config)
        if config.power_budget_w is not None:
            metrics.CONFIG_POWER_BUDGET_W.set(config.power_budget_w)
        if applied is not None:
            log.info("config applied", extra={"revision": config.revision, "round_id": config.round_id,
                                              "mode": applied[0].label(), "batch_size": config.batch_size})
        if config.valid_until_s is not None:
            newer = self._wait_until(config.valid_until_s)
            if newer is not None:
                return newer  # the next config decides the mode
            if not self._stop.is_set():
                self._until_done(self.agent.restore_mode)
                log.info("config expired: mode restored", extra={"revision": config.revision})
        return None

    def _applied(self, config: NodeConfig) -> None:
        self.applied_revision, self.applied_epoch = config.revision, config.epoch
        self.refused_revision, self.refused_reason = 0, ""

    def _wait_until(self, epoch_s: float) -> NodeConfig | None:
        """Sleep until ``epoch_s``; a newer config arriving first is returned (None: time reached or stop)."""
        while not self._stop.is_set():
            left_s = epoch_s - time.time()
            if left_s <= 0:
                return None
            try:
                return self._newest(self._configs.get(timeout=min(left_s, POLL_S)))
            except queue.Empty:
                continue
        return None

    def _until_done(self, change: Callable[[], Any]) -> Any:
        """Run a mode change, waiting while a profile holds the device; None if stopped first."""
        while not self._stop.is_set():
            try:
                return change()
            except FailedPrecondition:  # busy: the profile ends with the device back in this mode
                self._stop.wait(BUSY_RETRY_S)
        return None

    # -- profiling jobs --------------------------------------------------------------------
    def _job_loop(self) -> None:
        backoff = _Backoff()
        while not self._stop.is_set():
            if not self._registered.wait(POLL_S):
                continue
            try:
                for job in self._jobs.claim(self.node_id, self._consumer, block_ms=CLAIM_BLOCK_MS):
                    self._run_job(job)
                backoff.reset()
            except JOB_ERRORS as exc:
                log.warning("job stream unreachable", extra={"error": str(exc)})
                backoff.wait(self._stop)

    def _run_job(self, job: Job) -> None:
        try:
            plan = self.agent.plan(ProfileJob.from_dict(job.payload), run_key=job.job_id)
        except (InvalidArgument, UnknownSchema) as exc:  # can never run: acknowledged (not re-delivered), the reason kept
            log.error("profiling job refused", extra={"job_id": job.job_id, "error": str(exc)})
            self._jobs.refuse(job, str(exc))
            return
        started = self._until_done(lambda: self.agent.start_profile(plan))
        if started is None:
            return  # stopping before it began: left pending for re-delivery
        self._profiling.set()
        measured: list[Measurement] = []
        failure: BaseException | None = None
        try:
            for event in started.events():
                if event is None:
                    if self._stop.is_set():
                        started.cancel()
                elif isinstance(event, Measurement):
                    measured.append(event)
        except Exception as exc:  # noqa: BLE001 - the run failed: left pending, the queue re-delivers it
            failure = exc
        finally:
            self._profiling.clear()
        if started.outcome != "completed":
            log.warning("profiling job not completed; left for re-delivery",
                        extra={"job_id": job.job_id, "outcome": started.outcome,
                               "error": str(failure) if failure else None})
            return
        # The agent stored each point as it went; complete() re-writes the same ids (no-ops) and acks.
        self._jobs.complete(job, measured)
        log.info("profiling job done", extra={"job_id": job.job_id, "measurements": len(measured)})
