"""ProfilerServicer: the ``edgetune.v1.Profiler`` RPCs over one node agent. Wiring only.

Each RPC reads its request through :mod:`edgetune.proto.serde.profiler`, calls the
:class:`~edgetune.agent.node.NodeAgent` and answers through serde; edgetune errors become gRPC
statuses through :func:`~edgetune.services.common.errors.map_errors`, naming the request field.

A profile runs in the agent's worker; this thread forwards its events. The client cancelling,
the deadline passing or the server stopping reaches the worker through ``context.add_callback``
even while this thread sits in a yield, and the worker itself restores the mode and releases
the device (:mod:`edgetune.agent.node`).
"""

from __future__ import annotations

import logging
import threading
import time
import uuid

import grpc

from edgetune import validation
from edgetune.agent.node import DEFAULT_STREAM_RATE_HZ, MAX_STREAM_RATE_HZ, NodeAgent
from edgetune.base.mode import PowerMode
from edgetune.proto.serde import profiler as serde
from edgetune.proto.serde.common import GRID
from edgetune.proto.v1 import profiler_pb2, profiler_pb2_grpc
from edgetune.services.common.errors import field_named, field_prefix, map_errors
from edgetune.services.common.paging import paginate

log = logging.getLogger(__name__)


class ProfilerServicer(profiler_pb2_grpc.ProfilerServicer):
    def __init__(self, agent: NodeAgent) -> None:
        self.agent = agent

    @map_errors
    def GetDevice(self, request: profiler_pb2.GetDeviceRequest, context: grpc.ServicerContext):
        return serde.device_info_to_proto(self.agent.describe())

    @map_errors
    def ListPowerModes(self, request: profiler_pb2.ListPowerModesRequest, context: grpc.ServicerContext):
        modes = self.agent.power_modes(GRID.from_proto(request.grid, "grid"))
        page, token = paginate(modes, request.page_size, request.page_token)
        return serde.power_modes_page_to_proto(page, token, len(modes))

    @map_errors
    def Profile(self, request: profiler_pb2.ProfileRequest, context: grpc.ServicerContext):
        plan = self.agent.plan(serde.profile_job_from_proto(request), self._run_key(context))
        run = self.agent.start_profile(plan)
        if not context.add_callback(run.cancel):  # the RPC already ended
            run.cancel()
        try:
            for event in run.events():
                if event is None:
                    if not context.is_active():
                        run.cancel()
                        return
                    continue
                yield serde.profile_event_to_proto(event, time.time())
        finally:
            run.cancel()  # no-op once finished; a stream closed early stops the worker

    @map_errors
    def ApplyPowerMode(self, request: profiler_pb2.ApplyPowerModeRequest, context: grpc.ServicerContext):
        target = serde.apply_target_from_proto(request)
        if isinstance(target, PowerMode):
            mode = target
        else:
            with field_named("preset_name" if isinstance(target, str) else "preset_id"):
                mode = self.agent.preset_mode(target)
        with field_prefix("mode"):
            applied, previous = self.agent.apply_mode(mode)
        log.info("power mode applied", extra={"mode": applied.label(), "previous": previous.label()})
        return serde.applied_to_proto(applied, previous)

    @map_errors
    def RestorePowerMode(self, request: profiler_pb2.RestorePowerModeRequest, context: grpc.ServicerContext):
        return serde.restored_to_proto(*self.agent.restore_mode())

    @map_errors
    def StreamPower(self, request: profiler_pb2.StreamPowerRequest, context: grpc.ServicerContext):
        rate_hz = validation.sample_rate_hz(request.sample_rate_hz or DEFAULT_STREAM_RATE_HZ, "sample_rate_hz",
                                            maximum=MAX_STREAM_RATE_HZ)  # 0: the default
        max_samples = validation.count(request.max_samples, "max_samples", minimum=0)  # 0: until cancelled
        stop = threading.Event()
        if not context.add_callback(stop.set):
            return
        for sample in self.agent.stream_power(rate_hz, stop, max_samples=max_samples,
                                              include_rails=request.include_rails):
            yield serde.power_sample_to_proto(sample, time.time())

    @staticmethod
    def _run_key(context: grpc.ServicerContext) -> str:
        for key, value in context.invocation_metadata() or ():
            if key == serde.RUN_KEY_METADATA and value:
                return str(value)
        return uuid.uuid4().hex  # a fresh profile: new ids, new rows in the store
