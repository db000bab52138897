"""A registered node as read: its registration (:class:`~edgetune.store.records.NodeRegistration`)
and its liveness (the last :class:`~edgetune.store.records.Heartbeat`); the registry
(:mod:`edgetune.control.registry`) writes and reads them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from edgetune.powermodes.spec import DeviceSpec, Preset
from edgetune.store.records import NodeRegistration

#: States an agent reports; "lost" and "unavailable" are the registry's own verdicts.
AGENT_STATES = ("ready", "profiling", "running")
STATE_LOST = "lost"
STATE_UNAVAILABLE = "unavailable"


@dataclass(frozen=True)
class NodeRecord:
    """A registered node and, when read back, its liveness.

    ``device`` is the discovered :class:`DeviceSpec` as a JSON dict (:func:`spec_to_dict`);
    ``power_budget_w`` None means no budget. ``last_seen_s`` (epoch seconds) and ``state``
    come from the heartbeat; ``live`` is False once the heartbeat TTL ran out.
    """

    node_id: str
    hostname: str = ""
    address: str = ""
    device: dict[str, Any] = field(default_factory=dict)
    labels: dict[str, str] = field(default_factory=dict)
    power_budget_w: float | None = None
    registered_s: float = 0.0
    # -- liveness, filled in by reads ---------------------------------------------------
    live: bool = False
    state: str = ""
    last_seen_s: float | None = None
    current_mode: dict[str, Any] | None = None
    power_w: float | None = None
    applied_revision: int = 0
    unavailable_reason: str | None = None
    #: The config epoch of applied_revision; the last refused config (0: none) and why.
    applied_epoch: int = 0
    refused_revision: int = 0
    refused_reason: str = ""

    @property
    def device_model(self) -> str:
        return str(self.device.get("name", ""))

    @property
    def spec(self) -> DeviceSpec | None:
        return spec_from_dict(self.device)

    @property
    def plannable(self) -> bool:
        return self.live and self.unavailable_reason is None

    def registration(self) -> NodeRegistration:
        """The persistent part (liveness is not stored with the registration)."""
        return NodeRegistration(node_id=self.node_id, hostname=self.hostname, address=self.address,
                                device=dict(self.device), labels=dict(self.labels),
                                power_budget_w=self.power_budget_w, registered_s=self.registered_s)

    @classmethod
    def from_registration(cls, reg: NodeRegistration) -> NodeRecord:
        return cls(node_id=reg.node_id, hostname=reg.hostname, address=reg.address, device=dict(reg.device),
                   labels=dict(reg.labels), power_budget_w=reg.power_budget_w, registered_s=reg.registered_s)


def spec_to_dict(spec: DeviceSpec) -> dict[str, Any]:
    """A DeviceSpec as the JSON dict the registry stores (``extra`` is library-internal: dropped)."""
    out = asdict(spec)
    out.pop("extra", None)
    return out


def spec_from_dict(doc: Mapping[str, Any]) -> DeviceSpec | None:
    """The DeviceSpec a node registered, or None when it sent no frequency tables."""
    if not doc or not all(doc.get(dim) for dim in ("core_counts", "cpu_mhz", "gpu_mhz", "emc_mhz")):
        return None
    return DeviceSpec(
        name=doc.get("name", ""), display_name=doc.get("display_name", ""),
        core_counts=tuple(int(c) for c in doc["core_counts"]),
        cpu_mhz=tuple(doc["cpu_mhz"]), gpu_mhz=tuple(doc["gpu_mhz"]), emc_mhz=tuple(doc["emc_mhz"]),
        presets=tuple(Preset(**p) for p in doc.get("presets") or ()),
        idle_power_w=float(doc.get("idle_power_w", 0.0)), max_power_w=float(doc.get("max_power_w", 0.0)),
        soc=doc.get("soc", ""), notes=doc.get("notes", ""),
    )
