"""The Coordinator gRPC servicer: request -> coordination library -> response. Wiring only.

UpdateBudget with ``budgets.arrival_rps`` / ``budgets.latency_budget_ms`` / ``workload`` for a
node re-solves that inference node's placement (``RoundCoordinator.update_arrival_rate``).

Errors come from the library already naming the field (InvalidArgument -> INVALID_ARGUMENT,
NotFound -> NOT_FOUND, NotLeader / FailedPrecondition -> FAILED_PRECONDITION); ``map_errors``
turns them into statuses.

Replicas: any replica serves every RPC. Planning RPCs (PlanRound, UpdateBudget) act through the
leader: a standby **forwards** them to the leader's address (from the lease record, the part of
its holder id after ``@``) and relays the answer, so a client behind one Service address never
sees FAILED_PRECONDITION because it reached the standby (only while no replica holds the lease).
TuningJob writes are **desired state**: any replica stores the spec; the leader's reconcile loop
acts on it (:mod:`edgetune.control.reconcile`).

Each open WatchConfig holds one handler thread for its lifetime (waiting on an in-process
event, not on Redis: one reader of the store's change feed serves every stream, see
:mod:`edgetune.control.configs`), which is why the coordinator's default
``--max-workers`` is sized for a fleet, not 16.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator

import grpc

from edgetune import validation
from edgetune.control.configs import ConfigStore
from edgetune.control.jobs import JobQueue
from edgetune.control.leader import LeaderLease, NotLeader, leader_address
from edgetune.control.registry import NodeRegistry
from edgetune.control.rounds import RoundCoordinator
from edgetune.control.tuningjobs import TuningJobs
from edgetune.errors import NotFound
from edgetune.identity import AUTHORIZATION, ClientSecurity, open_channel
from edgetune.proto.serde import coordinator as serde
from edgetune.proto.serde.common import optional_value
from edgetune.proto.serde.profiler import profile_job_from_proto
from edgetune.proto.serde.tuning import job_to_proto, spec_from_proto
from edgetune.proto.v1 import coordinator_pb2, coordinator_pb2_grpc, tuning_pb2
from edgetune.services.common import map_errors
from edgetune.store import NodeRecord

#: Metadata key a standby sets on a forwarded call: the receiver does not forward it again.
FORWARDED = "x-edgetune-forwarded"
FORWARD_TIMEOUT_S = 30.0


def _caller_credentials(context: grpc.ServicerContext) -> list[tuple[str, str]]:
    """The caller's bearer token, passed on when forwarding so the leader authorises the caller,
    not this replica (a caller known by its certificate is authorised as this replica's identity)."""
    return [(k, v) for k, v in (context.invocation_metadata() or ()) if k == AUTHORIZATION]


class CoordinatorServicer(coordinator_pb2_grpc.CoordinatorServicer):
    def __init__(self, registry: NodeRegistry, configs: ConfigStore, rounds: RoundCoordinator,
                 lease: LeaderLease, *, on_register: Callable[[NodeRecord], None] | None = None,
                 watch_block_ms: int = 30_000, on_job_change: Callable[[], None] | None = None,
                 client: ClientSecurity | None = None) -> None:
        self.registry = registry
        self.configs = configs
        self.rounds = rounds
        self.lease = lease
        self.on_register = on_register
        self.watch_block_ms = watch_block_ms
        self.jobs = TuningJobs(registry.store)
        self.queue = JobQueue(registry.store)
        #: Wakes the leader's reconcile loop (a job submitted or cancelled); None: it polls.
        self.on_job_change = on_job_change
        #: How a standby reaches the leader (TLS, this replica's own token after the caller's).
        self.client = client
        self._channels: dict[str, grpc.Channel] = {}  # the leader's address -> channel (forwarding)
        self._channels_lock = threading.Lock()
        #: Set on shutdown so WatchConfig streams end promptly instead of holding the grace period.
        self.stopping = threading.Event()

    @map_errors
    def RegisterNode(self, request, context):
        record = self.registry.register(serde.registered_node_from_proto(request.node))
        if self.on_register is not None:
            self.on_register(record)
        return coordinator_pb2.RegisterNodeResponse(node_id=record.node_id,
                                                    heartbeat_interval_s=self.registry.heartbeat_interval_s,
                                                    config_revision=self.configs.revision(record.node_id),
                                                    config_epoch=self.configs.epoch())

    @map_errors
    def Heartbeat(self, request, context):
        beat = serde.heartbeat_from_proto(request)
        known = self.registry.heartbeat(request.node_id, state=beat.state, current_mode=beat.current_mode,
                                        power_w=beat.power_w, applied_revision=beat.applied_revision,
                                        applied_epoch=beat.applied_epoch, refused_revision=beat.refused_revision,
                                        refused_reason=beat.refused_reason)
        if not known:
            return coordinator_pb2.HeartbeatResponse(reregister=True)
        return coordinator_pb2.HeartbeatResponse(config_revision=self.configs.revision(request.node_id),
                                                 config_epoch=self.configs.epoch())

    @map_errors
    def ListNodes(self, request, context):
        return coordinator_pb2.ListNodesResponse(nodes=[serde.node_to_proto(n) for n in self.registry.nodes()])

    def _forward(self, rpc: str, request, context):
        """The leader's answer to ``request`` (this replica is a standby); NotLeader when nobody leads."""
        holder = self.lease.holder()
        address = leader_address(holder)
        if address is None:
            raise NotLeader(self.lease.name, holder)
        with self._channels_lock:
            channel = self._channels.get(address)
            if channel is None:
                channel = self._channels[address] = open_channel(address, self.client)
        try:
            return getattr(coordinator_pb2_grpc.CoordinatorStub(channel), rpc)(
                request, timeout=min(context.time_remaining() or FORWARD_TIMEOUT_S, FORWARD_TIMEOUT_S),
                metadata=[(FORWARDED, "1"), *_caller_credentials(context)])
        except grpc.RpcError as exc:
            context.abort(exc.code(), exc.details() or "")

    def _is_forwarded(self, context) -> bool:
        return any(k == FORWARDED for k, _v in (context.invocation_metadata() or ()))

    @map_errors
    def PlanRound(self, request, context):
        if not self.lease.is_leader and not self._is_forwarded(context):
            return self._forward("PlanRound", request, context)
        outcome = self.rounds.plan(serde.round_request_from_proto(request))
        return serde.round_outcome_to_proto(outcome)

    @map_errors
    def GetNodeConfig(self, request, context):
        return serde.config_to_proto(self.configs.get(request.node_id))

    @map_errors
    def WatchConfig(self, request, context) -> Iterator[coordinator_pb2.NodeConfig]:
        if not self.registry.exists(request.node_id):  # a typo, or a store that lost its state
            raise NotFound(f"node_id: node {request.node_id!r} is not registered")

        def should_stop() -> bool:
            return self.stopping.is_set() or not context.is_active()

        # The stream ends when the agent goes: wake its watch then, not at its next check.
        context.add_callback(lambda: self.configs.hub.wake([request.node_id]))
        try:
            for cfg in self.configs.watch(request.node_id, request.after_revision, block_ms=self.watch_block_ms,
                                          should_stop=should_stop, epoch=request.after_epoch):
                yield serde.config_to_proto(cfg)
        except Exception:
            # The stream already ended (the agent went away, or the server is stopping and has closed the
            # store under a blocked read): nobody is left to tell, and a clean stop logs no error.
            if should_stop():
                return
            raise

    @map_errors
    def UpdateBudget(self, request, context):
        if not self.lease.is_leader and not self._is_forwarded(context):
            return self._forward("UpdateBudget", request, context)
        self.lease.require()  # a re-plan follows: leader only, so a standby does not half-apply it
        # Each branch checks and plans first, then writes the budget with its re-plan in one step.
        inference = serde.inference_update_from_proto(request)
        if inference is not None:  # an inference node: re-solve its (mode, β) and publish its config only
            power = validation.optional(validation.power_budget_w, optional_value(request.budgets, "power_budget_w"),
                                        "budgets.power_budget_w")
            change = self.rounds.update_node_budget(request.node_id, power, set_budget=power is not None,
                                                    inference=inference)
            assert change.placement is not None
            return serde.placement_to_proto(change.placement, self.configs.revision(request.node_id))
        if request.node_id:
            change = self.rounds.update_node_budget(request.node_id, serde.node_budget_from_proto(request))
            self._changed()  # a TuningJob on the node without a budget of its own selects again
            assert change.record is not None
            return serde.node_budget_to_proto(change.record.power_budget_w)
        wanted = serde.site_budgets_from_proto(request)
        site = self.rounds.update_site_budgets(site_power_budget_w=wanted.site_power_budget_w,
                                               deadline_s=wanted.deadline_s).site
        assert site is not None
        return serde.site_budgets_to_proto(site)

    # -- tuning jobs: any replica writes the spec (desired state); the leader's loop acts on it -----
    def _changed(self) -> None:
        if self.on_job_change is not None:
            self.on_job_change()

    @map_errors
    def SubmitTuningJob(self, request, context):
        view = self.jobs.submit(spec_from_proto(request.spec))
        self._changed()
        return job_to_proto(view)

    @map_errors
    def GetTuningJob(self, request, context):
        return job_to_proto(self.jobs.get(request.name))

    @map_errors
    def ListTuningJobs(self, request, context):
        return tuning_pb2.ListTuningJobsResponse(jobs=[job_to_proto(v) for v in self.jobs.list()])

    @map_errors
    def WatchTuningJob(self, request, context) -> Iterator[tuning_pb2.TuningJob]:
        after = request.after_revision
        self.jobs.get(request.name)  # NotFound before the stream starts

        def should_stop() -> bool:
            return self.stopping.is_set() or not context.is_active()

        while not should_stop():
            view = self.jobs.wait(request.name, after, timeout_s=self.watch_block_ms / 1000.0,
                                  should_stop=should_stop)
            if view is None:
                continue
            after = view.revision
            yield job_to_proto(view)

    @map_errors
    def CancelTuningJob(self, request, context):
        view = self.jobs.cancel(request.name)
        self._changed()
        return job_to_proto(view)

    @map_errors
    def SubmitProfiling(self, request, context):
        if not self.registry.exists(request.node_id):
            raise NotFound(f"node_id: node {request.node_id!r} is not registered")
        job_id, duplicate = self.queue.submit_once(
            request.node_id, profile_job_from_proto(request.request, "request.").to_dict(), request.job_id)
        return tuning_pb2.SubmitProfilingResponse(job_id=job_id, duplicate=duplicate)
