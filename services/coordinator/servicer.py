"""The Coordinator gRPC servicer: request -> coordination library -> response. Wiring only.

UpdateBudget with ``budgets.arrival_rps`` / ``budgets.latency_budget_ms`` / ``workload`` for a
node re-solves that inference node's placement (``RoundCoordinator.update_arrival_rate``).

Errors come from the library already naming the field (InvalidArgument -> INVALID_ARGUMENT,
NotFound -> NOT_FOUND, NotLeader / FailedPrecondition -> FAILED_PRECONDITION); ``map_errors``
turns them into statuses. Planning RPCs (PlanRound, UpdateBudget) need the leader lease: a
standby answers FAILED_PRECONDITION naming the leader.

Each open WatchConfig holds one handler thread (and one blocked Redis read) for its lifetime,
which is why the coordinator's default ``--max-workers`` is sized for a fleet, not 16.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator

from edgetune.coordination.configs import ConfigStore
from edgetune.coordination.leader import LeaderLease
from edgetune.coordination.registry import NodeRecord, NodeRegistry
from edgetune.coordination.rounds import RoundCoordinator
from edgetune.errors import NotFound
from edgetune.proto.convert import budgets_from_dict, mode_from_proto, optional_value
from edgetune.proto.v1 import coordinator_pb2, coordinator_pb2_grpc
from edgetune.services.common import map_errors
from edgetune.services.coordinator import convert


class CoordinatorServicer(coordinator_pb2_grpc.CoordinatorServicer):
    def __init__(self, registry: NodeRegistry, configs: ConfigStore, rounds: RoundCoordinator,
                 lease: LeaderLease, *, on_register: Callable[[NodeRecord], None] | None = None,
                 watch_block_ms: int = 500) -> None:
        self.registry = registry
        self.configs = configs
        self.rounds = rounds
        self.lease = lease
        self.on_register = on_register
        self.watch_block_ms = watch_block_ms
        #: Set on shutdown so WatchConfig streams end promptly instead of holding the grace period.
        self.stopping = threading.Event()

    @map_errors
    def RegisterNode(self, request, context):
        record = self.registry.register(convert.node_record_from_proto(request.node))
        if self.on_register is not None:
            self.on_register(record)
        return coordinator_pb2.RegisterNodeResponse(node_id=record.node_id,
                                                    heartbeat_interval_s=self.registry.heartbeat_interval_s,
                                                    config_revision=self.configs.revision(record.node_id))

    @map_errors
    def Heartbeat(self, request, context):
        current = (mode_from_proto(request.current_mode, "current_mode").as_dict()
                   if request.current_mode.cores else None)
        known = self.registry.heartbeat(request.node_id, state=request.state, current_mode=current,
                                        power_w=request.power_w, applied_revision=request.applied_revision)
        if not known:
            return coordinator_pb2.HeartbeatResponse(reregister=True)
        return coordinator_pb2.HeartbeatResponse(config_revision=self.configs.revision(request.node_id))

    @map_errors
    def ListNodes(self, request, context):
        return coordinator_pb2.ListNodesResponse(nodes=[convert.node_info_to_proto(n) for n in self.registry.nodes()])

    @map_errors
    def PlanRound(self, request, context):
        outcome = self.rounds.plan(convert.round_request_from_proto(request))
        return convert.round_outcome_to_proto(outcome)

    @map_errors
    def GetNodeConfig(self, request, context):
        return convert.config_to_proto(self.configs.get(request.node_id))

    @map_errors
    def WatchConfig(self, request, context) -> Iterator[coordinator_pb2.NodeConfig]:
        if not self.registry.exists(request.node_id):  # a typo, or a store that lost its state
            raise NotFound(f"node_id: node {request.node_id!r} is not registered")

        def should_stop() -> bool:
            return self.stopping.is_set() or not context.is_active()

        for cfg in self.configs.watch(request.node_id, request.after_revision, block_ms=self.watch_block_ms,
                                      should_stop=should_stop):
            yield convert.config_to_proto(cfg)

    @map_errors
    def UpdateBudget(self, request, context):
        self.lease.require()  # a re-plan follows: leader only, so a standby does not half-apply it
        inference = convert.inference_update_from_proto(request)
        if inference is not None:  # an inference node: re-solve its (mode, β) and publish its config only
            power = optional_value(request.budgets, "power_budget_w")
            if power is not None:
                self.registry.update_budget(request.node_id, power)
                self.rounds.replan_after_budget_change(request.node_id, inference=False)
            placement = self.rounds.update_arrival_rate(request.node_id, **inference)
            return convert.placement_to_proto(placement, self.configs.revision(request.node_id))
        if request.node_id:
            record = self.registry.update_budget(request.node_id, convert.node_budget_from_proto(request))
            self.rounds.replan_after_budget_change(record.node_id)
            return coordinator_pb2.UpdateBudgetResponse(
                budgets=budgets_from_dict({"power_budget_w": record.power_budget_w}))
        site = self.rounds.update_site_budgets(
            site_power_budget_w=optional_value(request.budgets, "site_power_budget_w"),
            deadline_s=optional_value(request.budgets, "deadline_s"))
        self.rounds.replan_after_budget_change(None)
        return coordinator_pb2.UpdateBudgetResponse(budgets=budgets_from_dict(site))
