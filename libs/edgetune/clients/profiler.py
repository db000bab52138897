"""A node agent's Profiler service with library records in and out (:mod:`edgetune.proto.serde.profiler`).

A failed call raises :class:`~edgetune.clients.calls.CallFailed` with its status code
(``FAILED_PRECONDITION`` while a profile holds the device, ``INVALID_ARGUMENT`` naming the field),
so a caller can tell a busy device from a refusal.
"""

from __future__ import annotations

from collections.abc import Iterator

import grpc

from edgetune.base.mode import PowerMode
from edgetune.clients.calls import translated
from edgetune.devices.base import DeviceInfo, PowerSample
from edgetune.profiling import PointSkipped, ProfileProgress
from edgetune.proto.serde.profiler import (
    RUN_KEY_METADATA,
    applied_from_proto,
    apply_request_to_proto,
    device_info_from_proto,
    power_sample_from_proto,
    profile_event_from_proto,
    profile_job_to_proto,
    restored_from_proto,
    stream_power_request,
)
from edgetune.proto.v1 import profiler_pb2, profiler_pb2_grpc
from edgetune.store import MeasurementRecord, ProfileJob

#: Deadline of a call; a profile of many points may need more (``profile(timeout_s=...)``).
RPC_TIMEOUT_S = 300.0


class ProfilerClient:
    """The Profiler service of the agent reached over ``channel``."""

    def __init__(self, channel: grpc.Channel, timeout_s: float = RPC_TIMEOUT_S) -> None:
        self._stub = profiler_pb2_grpc.ProfilerStub(channel)
        self.timeout_s = timeout_s

    def device(self) -> DeviceInfo:
        with translated():
            reply = self._stub.GetDevice(profiler_pb2.GetDeviceRequest(), timeout=self.timeout_s)
        return device_info_from_proto(reply)

    def profile(self, job: ProfileJob, *, run_key: str = "",
                timeout_s: float | None = None) -> Iterator[ProfileProgress | PointSkipped | MeasurementRecord]:
        """The profile's events as they come. ``run_key``: the same key again writes the same
        measurement ids (a retry); empty: a fresh run."""
        metadata = ((RUN_KEY_METADATA, run_key),) if run_key else None
        call = self._stub.Profile(profile_job_to_proto(job), metadata=metadata,
                                  timeout=self.timeout_s if timeout_s is None else timeout_s)
        try:
            with translated():
                for event in call:
                    yield profile_event_from_proto(event)
        finally:  # a caller that stops reading ends the profile (the agent restores the mode)
            call.cancel()

    def apply(self, target: PowerMode | str | int) -> tuple[PowerMode, PowerMode]:
        """Apply a mode, or an nvpmodel preset by name or id; (applied, previous)."""
        with translated():
            reply = self._stub.ApplyPowerMode(apply_request_to_proto(target), timeout=self.timeout_s)
        return applied_from_proto(reply)

    def restore(self) -> tuple[PowerMode, bool]:
        """Back to the mode from before the agent's first change; (mode now, whether it changed)."""
        with translated():
            reply = self._stub.RestorePowerMode(profiler_pb2.RestorePowerModeRequest(), timeout=self.timeout_s)
        return restored_from_proto(reply)

    def stream_power(self, rate_hz: float = 0.0, max_samples: int = 0,
                     include_rails: bool = False) -> Iterator[PowerSample]:
        """Power samples at ``rate_hz`` (0: the agent's default) until ``max_samples`` (0: until the
        caller stops iterating)."""
        call = self._stub.StreamPower(stream_power_request(rate_hz, max_samples, include_rails))
        try:
            with translated():
                for msg in call:
                    yield power_sample_from_proto(msg)
        finally:
            call.cancel()
