"""What the store holds, as frozen dataclasses with one serialiser each.

Every record class has a ``SCHEMA_VERSION`` and one serialiser: its fields are said once
(``_fields`` / ``_from_fields``), and ``to_dict`` / ``from_dict`` (the JSON value a doc or
kv value holds) and ``to_json`` / ``from_json`` (the same as bytes) frame them with
``"schema": <version>``. ``from_dict`` refuses a schema version it does not know (a newer
writer's record) with :class:`UnknownSchema`, naming the record type and the version it
reads. Data written before records had a schema (no ``"schema"`` key) is converted on read:
a legacy measurement, for instance, may say ``device``/``node`` and carry the knobs flat.

One shape per concept: a measurement says ``device_model`` and ``node_id`` and nests its
``mode``; the profile-table row shape (``device``, ``node``, flat knobs: docs/contract.md) is
:meth:`MeasurementRecord.to_row`, for the code that reads tables.

A new resource (the coming ``TuningJob``, its per-node status) is a record class here plus a
doc kind (``tuning-job/<id>``, ``tuning-job-node/<id>:<node>``): ``Store.put_doc`` with
``expected_revision`` gives it compare-and-set (a reconcile loop's read-modify-write),
``list_docs`` its index, and a leader-only writer fences itself with the lease as config
publishing does. Delivered, not stored: :class:`Job`, :class:`DeadJob`, :class:`Published`, and
what a node's agent tells the coordinator (:class:`NodeAnnouncement`) and hears back
(:class:`NodeRegistered`). :class:`ProfileJob` is a job's payload (``Job.payload``), with its own
schema version like the stored records.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar, TypeVar

from edgetune import validation
from edgetune.base.mode import MODE_FIELDS, PowerMode
from edgetune.base.roles import Role
from edgetune.errors import FailedPrecondition, InvalidArgument
from edgetune.powermodes.spec import DeviceSpec

#: Roles a measurement may have (docs/contract.md: ``role`` is ``train`` or ``infer``).
ROLES: tuple[str, ...] = ("train", "infer")

#: JSON scalars a measurement's extra profile columns may hold.
Scalar = str | int | float | bool | None

R = TypeVar("R", bound="_Record")


class UnknownSchema(FailedPrecondition):
    """A stored record has a schema version this code does not read (written by a newer edgetune)."""

    def __init__(self, record: str, found: object, known: int) -> None:
        self.record, self.found, self.known = record, found, known
        super().__init__(
            f"stored {record} has schema version {found!r}; this edgetune reads version {known} "
            "(and legacy records without one): upgrade edgetune or migrate the store"
        )


def dumps(value: Any, field_name: str) -> bytes:
    """Compact JSON bytes; a value JSON cannot hold raises InvalidArgument naming ``field_name``."""
    try:
        return json.dumps(value, separators=(",", ":")).encode()
    except (TypeError, ValueError) as exc:
        raise InvalidArgument(field_name, f"not JSON-serialisable: {exc}") from None


class _Record:
    """The serialiser every record shares: a subclass says its fields in ``_fields`` / ``_from_fields``.

    ``to_dict`` / ``from_dict`` are the JSON-value form (what a doc holds), ``to_json`` /
    ``from_json`` the same as bytes; the schema version is checked in ``from_dict`` only.
    """

    SCHEMA_VERSION: ClassVar[int] = 1

    def _fields(self) -> dict[str, Any]:
        raise NotImplementedError

    @classmethod
    def _from_fields(cls: type[R], doc: Mapping[str, Any]) -> R:
        raise NotImplementedError

    @classmethod
    def _from_legacy(cls: type[R], doc: Mapping[str, Any]) -> R:
        """A record written before schemas: by default the same fields."""
        return cls._from_fields(doc)

    def to_dict(self) -> dict[str, Any]:
        return {"schema": self.SCHEMA_VERSION, **self._fields()}

    @classmethod
    def from_dict(cls: type[R], doc: Any) -> R:
        if not isinstance(doc, Mapping):
            raise UnknownSchema(cls.__name__, type(doc).__name__, cls.SCHEMA_VERSION)
        if "schema" not in doc:
            return cls._from_legacy(doc)
        if doc["schema"] != cls.SCHEMA_VERSION:
            raise UnknownSchema(cls.__name__, doc["schema"], cls.SCHEMA_VERSION)
        return cls._from_fields(doc)

    def to_json(self) -> bytes:
        return dumps(self.to_dict(), type(self).__name__)

    @classmethod
    def from_json(cls: type[R], data: bytes | str) -> R:
        return cls.from_dict(json.loads(data))


def _text(value: Any, field_name: str, *, empty_ok: bool = False) -> str:
    if not isinstance(value, str) or (not value and not empty_ok):
        raise InvalidArgument(field_name, f"missing or not a non-empty string: {value!r}")
    return value


def _number(value: Any, field_name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise InvalidArgument(field_name, f"{value!r} is not a finite number")
    return float(value)


def _opt_float(value: Any) -> float | None:
    return None if value is None else float(value)


# -- measurements -------------------------------------------------------------------------------

#: Columns of a profile-table row that are typed fields of the record (not ``extra``).
_ROW_CORE = ("id", "device", "device_model", "node", "node_id", "workload", "role", "mode", "cores", "cpu_mhz",
             "gpu_mhz", "emc_mhz", "batch_size", "time_ms", "power_w")


@dataclass(frozen=True)
class MeasurementRecord(_Record):
    """One profiled point, idempotent by ``id`` (``edgetune.profiling.measurement_id``).

    ``extra`` holds the profile's other columns (``energy_j``, ``peak_power_w``, ...) as JSON
    scalars. ``node_id`` None: not tied to a node (indexed by device model only).
    """

    SCHEMA_VERSION: ClassVar[int] = 1

    id: str
    device_model: str
    workload: str
    role: str
    mode: PowerMode
    batch_size: int
    time_ms: float
    power_w: float
    node_id: str | None = None
    extra: Mapping[str, Scalar] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in ("id", "device_model", "workload"):
            _text(getattr(self, name), f"measurement.{name}")
        if self.role not in ROLES:
            raise InvalidArgument("measurement.role", f"{self.role!r}", allowed=", ".join(ROLES))
        if self.node_id is not None:
            _text(self.node_id, "measurement.node_id")
        if not isinstance(self.mode, PowerMode):
            raise InvalidArgument("measurement.mode", f"must be a PowerMode, got {type(self.mode).__name__}")
        if isinstance(self.batch_size, bool) or not isinstance(self.batch_size, int) or self.batch_size < 1:
            raise InvalidArgument("measurement.batch_size", f"{self.batch_size!r}", allowed="an int >= 1")
        _number(self.time_ms, "measurement.time_ms")
        _number(self.power_w, "measurement.power_w")
        for key, value in self.extra.items():
            if not isinstance(value, str | int | float | bool | type(None)):
                raise InvalidArgument(f"measurement.{key}", f"must be a JSON scalar, got {type(value).__name__}")

    @classmethod
    def from_row(cls, row: Mapping[str, Any], node_id: str | None = None) -> MeasurementRecord:
        """From a profile-table row (``device``/``node``, flat knobs) or any legacy stored shape
        (``device_model``/``node_id``, a nested ``mode``); ``node_id`` fills a missing node."""
        if not isinstance(row, Mapping):
            raise InvalidArgument("measurement", f"must be a mapping, got {type(row).__name__}")
        if not row.get("id"):
            raise InvalidArgument("measurement.id", "is missing: ids make re-delivered writes idempotent",
                                  "edgetune.profiling.measurement_id(...)")
        knobs = row["mode"] if isinstance(row.get("mode"), Mapping) else row
        try:
            mode = PowerMode(int(knobs["cores"]), float(knobs["cpu_mhz"]), float(knobs["gpu_mhz"]),
                             float(knobs["emc_mhz"]))
        except KeyError as exc:
            raise InvalidArgument(f"measurement.{exc.args[0]}", "is missing", "a power mode's four knobs") from None
        except (TypeError, ValueError) as exc:
            raise InvalidArgument("measurement.mode", str(exc)) from None
        for name in ("batch_size", "time_ms", "power_w"):
            if name not in row:
                raise InvalidArgument(f"measurement.{name}", "is missing")
        batch = row["batch_size"]
        node = row.get("node_id") or row.get("node") or node_id
        return cls(
            id=row["id"], device_model=row.get("device_model") or row.get("device") or "",
            workload=row.get("workload", ""), role=row.get("role", ""), mode=mode,
            batch_size=int(batch) if isinstance(batch, int | float) and not isinstance(batch, bool) else batch,
            time_ms=row["time_ms"], power_w=row["power_w"], node_id=node or None,
            extra={k: v for k, v in row.items() if k not in _ROW_CORE},
        )

    def to_row(self) -> dict[str, Any]:
        """The profile-table row (docs/contract.md: flat knobs, ``device``, ``node``) with the extras."""
        return {**self.mode.as_dict(), "batch_size": self.batch_size, "time_ms": self.time_ms,
                "power_w": self.power_w, "device": self.device_model, "workload": self.workload,
                "role": self.role, **self.extra, "node": self.node_id or "", "id": self.id}

    def _fields(self) -> dict[str, Any]:
        return {"id": self.id, "device_model": self.device_model, "node_id": self.node_id,
                "workload": self.workload, "role": self.role, "mode": self.mode.as_dict(),
                "batch_size": self.batch_size, "time_ms": self.time_ms, "power_w": self.power_w,
                "extra": dict(self.extra)}

    @classmethod
    def _from_fields(cls, doc: Mapping[str, Any]) -> MeasurementRecord:
        return cls(id=doc["id"], device_model=doc["device_model"], node_id=doc.get("node_id"),
                   workload=doc["workload"], role=doc["role"], mode=PowerMode.from_mapping(dict(doc["mode"])),
                   batch_size=int(doc["batch_size"]), time_ms=float(doc["time_ms"]),
                   power_w=float(doc["power_w"]), extra=dict(doc.get("extra") or {}))

    @classmethod
    def _from_legacy(cls, doc: Mapping[str, Any]) -> MeasurementRecord:
        return cls.from_row(doc)


# -- nodes ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class NodeRegistration(_Record):
    """What a node registered (its liveness is in :class:`Heartbeat`). ``device`` is its
    DeviceSpec as a JSON dict (:func:`~edgetune.store.nodes.spec_to_dict`); ``power_budget_w`` None: no budget."""

    SCHEMA_VERSION: ClassVar[int] = 1

    node_id: str
    hostname: str = ""
    address: str = ""
    device: Mapping[str, Any] = field(default_factory=dict)
    labels: Mapping[str, str] = field(default_factory=dict)
    power_budget_w: float | None = None
    registered_s: float = 0.0

    def _fields(self) -> dict[str, Any]:
        return {"node_id": self.node_id, "hostname": self.hostname, "address": self.address,
                "device": dict(self.device), "labels": dict(self.labels), "power_budget_w": self.power_budget_w,
                "registered_s": self.registered_s}

    @classmethod
    def _from_fields(cls, doc: Mapping[str, Any]) -> NodeRegistration:
        return cls(node_id=doc["node_id"], hostname=doc.get("hostname", ""), address=doc.get("address", ""),
                   device=dict(doc.get("device") or {}), labels=dict(doc.get("labels") or {}),
                   power_budget_w=_opt_float(doc.get("power_budget_w")),
                   registered_s=float(doc.get("registered_s", 0.0)))


@dataclass(frozen=True)
class Heartbeat(_Record):
    """A node's last beat: what its agent reported and when (epoch seconds)."""

    SCHEMA_VERSION: ClassVar[int] = 1

    state: str = "ready"
    current_mode: Mapping[str, Any] | None = None
    power_w: float | None = None
    applied_revision: int = 0
    ts_s: float = 0.0
    #: The config epoch ``applied_revision`` / ``refused_revision`` belong to (0: not said).
    applied_epoch: int = 0
    #: The last config the agent refused (0: none since it applied one) and why.
    refused_revision: int = 0
    refused_reason: str = ""

    def _fields(self) -> dict[str, Any]:
        return {"state": self.state, "current_mode": dict(self.current_mode) if self.current_mode else None,
                "power_w": self.power_w, "applied_revision": self.applied_revision, "ts_s": self.ts_s,
                "applied_epoch": self.applied_epoch, "refused_revision": self.refused_revision,
                "refused_reason": self.refused_reason}

    @classmethod
    def _from_fields(cls, doc: Mapping[str, Any]) -> Heartbeat:
        mode = doc.get("current_mode")
        return cls(state=doc.get("state") or "ready", current_mode=dict(mode) if mode else None,
                   power_w=_opt_float(doc.get("power_w")), applied_revision=int(doc.get("applied_revision") or 0),
                   ts_s=float(doc.get("ts_s") or 0.0), applied_epoch=int(doc.get("applied_epoch") or 0),
                   refused_revision=int(doc.get("refused_revision") or 0),
                   refused_reason=str(doc.get("refused_reason") or ""))


@dataclass(frozen=True)
class NodeAnnouncement:
    """What a node's agent registers with the coordinator: who it is, where it answers, its device
    as discovered (``spec``), the mode it is in and its state (``ready`` / ``running`` / ``profiling``);
    ``power_budget_w`` None: none sent (the coordinator keeps the stored one). The coordinator keeps
    it as a :class:`NodeRegistration` plus a first :class:`Heartbeat`."""

    node_id: str
    hostname: str
    address: str
    spec: DeviceSpec
    current_mode: PowerMode
    state: str = "ready"
    labels: Mapping[str, str] = field(default_factory=dict)
    power_budget_w: float | None = None


@dataclass(frozen=True)
class NodeRegistered:
    """The coordinator's answer to a registration: the id it knows the node by, how often to beat
    (0: not said) and the node's config (epoch, revision) now."""

    node_id: str
    heartbeat_interval_s: float = 0.0
    config_revision: int = 0
    config_epoch: int = 0


#: Fields that say *when* or *why*, not *what*: changing only these is not a new config.
NON_IDENTITY_FIELDS = ("node_id", "revision", "epoch", "valid_from_s", "valid_until_s", "reason")


@dataclass(frozen=True)
class NodeConfig(_Record):
    """What a node should run. ``mode`` None with ``restore`` True: go back to the node's own mode.

    Times are epoch seconds; ``workload`` is the Workload as a JSON dict (name, dataset, ...).
    ``revision`` is the store's (per node: 1, 2, ...) and ``epoch`` the store's config epoch
    (a millisecond timestamp taken when the store first published, again after it lost its data):
    neither is part of the stored JSON. (epoch, revision) only goes up.
    """

    SCHEMA_VERSION: ClassVar[int] = 1

    node_id: str
    mode: PowerMode | None = None
    batch_size: int = 0
    workload: Mapping[str, Any] = field(default_factory=dict)
    role: str = "train"
    round_id: str = ""
    valid_from_s: float | None = None
    valid_until_s: float | None = None
    power_budget_w: float | None = None
    restore: bool = False
    reason: str = ""
    revision: int = 0
    epoch: int = 0

    def _fields(self) -> dict[str, Any]:
        return {"node_id": self.node_id, "mode": self.mode.as_dict() if self.mode is not None else None,
                "batch_size": self.batch_size, "workload": dict(self.workload), "role": self.role,
                "round_id": self.round_id, "valid_from_s": self.valid_from_s, "valid_until_s": self.valid_until_s,
                "power_budget_w": self.power_budget_w, "restore": self.restore, "reason": self.reason}

    @classmethod
    def _from_fields(cls, doc: Mapping[str, Any]) -> NodeConfig:
        mode = doc.get("mode")
        return cls(node_id=doc["node_id"], mode=PowerMode.from_mapping(dict(mode)) if mode else None,
                   batch_size=int(doc.get("batch_size", 0)), workload=dict(doc.get("workload") or {}),
                   role=doc.get("role", "train"), round_id=doc.get("round_id", ""),
                   valid_from_s=_opt_float(doc.get("valid_from_s")),
                   valid_until_s=_opt_float(doc.get("valid_until_s")),
                   power_budget_w=_opt_float(doc.get("power_budget_w")), restore=bool(doc.get("restore", False)),
                   reason=doc.get("reason", ""))

    def with_revision(self, revision: int, epoch: int | None = None) -> NodeConfig:
        return replace(self, revision=int(revision), epoch=self.epoch if epoch is None else int(epoch))

    def digest(self) -> str:
        """Hash of what to run (see :data:`NON_IDENTITY_FIELDS`)."""
        identity = {k: v for k, v in self._fields().items() if k not in NON_IDENTITY_FIELDS}
        return hashlib.sha256(json.dumps(identity, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


@dataclass(frozen=True)
class Published:
    """The outcome of publishing one node's config: its revision, and whether it changed."""

    node_id: str
    revision: int
    changed: bool
    epoch: int = 0


# -- optimizer search sessions -------------------------------------------------------------------


@dataclass(frozen=True)
class SearchSessionRecord(_Record):
    """An optimizer search session as stored (doc kind ``optimizer-session``, compare-and-set).

    ``space`` is the request's search space (device, grid or modes, batch sizes), ``strategy``
    the strategy's ``state_dict()`` without its space (rebuilt from ``space``: small docs on
    big grids), ``partial`` the points told so far of trials not complete yet:
    trial number -> ``"<role>:<batch size>"`` -> (time_ms, power_w).
    """

    SCHEMA_VERSION: ClassVar[int] = 1

    session_id: str
    space: Mapping[str, Any]
    strategy: Mapping[str, Any]
    partial: Mapping[int, Mapping[str, tuple[float, float]]] = field(default_factory=dict)
    created_s: float = 0.0
    updated_s: float = 0.0

    def _fields(self) -> dict[str, Any]:
        return {"session_id": self.session_id, "created_s": self.created_s, "updated_s": self.updated_s,
                "space": dict(self.space), "strategy": dict(self.strategy),
                "partial": {str(n): {k: list(v) for k, v in pts.items()} for n, pts in self.partial.items()}}

    @classmethod
    def _from_fields(cls, doc: Mapping[str, Any]) -> SearchSessionRecord:
        partial = {int(n): {k: (float(v[0]), float(v[1])) for k, v in pts.items()}
                   for n, pts in (doc.get("partial") or {}).items()}
        return cls(str(doc["session_id"]), dict(doc["space"]), dict(doc["strategy"]), partial,
                   float(doc["created_s"]), float(doc["updated_s"]))

    @classmethod
    def _from_legacy(cls, doc: Mapping[str, Any]) -> SearchSessionRecord:
        # Sessions carried a schema from the start: one without is not a session.
        raise UnknownSchema(cls.__name__, None, cls.SCHEMA_VERSION)


# -- models ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ModelRecord(_Record):
    """What the estimator stores beside a model's bytes (blob meta, kind ``model``): ListModels and
    the checks on a transfer's base read it without loading the model.

    ``metrics`` holds the pipeline's accuracy on held-out (fit) or profiled (transfer) rows, as
    ``time_mape`` / ``power_mape`` / ... (None where a target has no score); ``seconds`` the time the
    fit or transfer took.
    """

    SCHEMA_VERSION: ClassVar[int] = 1

    model_id: str
    kind: str
    device: str
    workload: str
    role: str
    n_train: int
    rows: int
    has_std: bool
    batch_sizes: tuple[int, ...] = ()
    columns: tuple[str, ...] = ()
    metrics: Mapping[str, float | None] = field(default_factory=dict)
    source: str = ""
    base_model_id: str = ""
    seconds: float = 0.0
    created_s: float = 0.0
    held_out_rows: int | None = None
    validation_fraction: float | None = None
    seed: int | None = None

    def _fields(self) -> dict[str, Any]:
        return {"model_id": self.model_id, "kind": self.kind, "device": self.device, "workload": self.workload,
                "role": self.role, "n_train": self.n_train, "rows": self.rows, "has_std": self.has_std,
                "batch_sizes": list(self.batch_sizes), "columns": list(self.columns), "metrics": dict(self.metrics),
                "source": self.source, "base_model_id": self.base_model_id, "seconds": self.seconds,
                "created_s": self.created_s, "held_out_rows": self.held_out_rows,
                "validation_fraction": self.validation_fraction, "seed": self.seed}

    @classmethod
    def _from_fields(cls, doc: Mapping[str, Any]) -> ModelRecord:
        def opt_int(v: Any) -> int | None:
            return None if v is None else int(v)

        return cls(str(doc.get("model_id", "")), str(doc.get("kind", "")), str(doc.get("device", "")),
                   str(doc.get("workload", "")), str(doc.get("role", "")), int(doc.get("n_train", 0)),
                   int(doc.get("rows", 0)), bool(doc.get("has_std", False)),
                   tuple(int(b) for b in doc.get("batch_sizes") or ()), tuple(str(c) for c in doc.get("columns") or ()),
                   {str(k): _opt_float(v) for k, v in (doc.get("metrics") or {}).items()}, str(doc.get("source", "")),
                   str(doc.get("base_model_id", "")),
                   float(doc.get("seconds", doc.get("fit_s", doc.get("transfer_s", 0.0))) or 0.0),
                   float(doc.get("created_s", 0.0)), opt_int(doc.get("held_out_rows")),
                   _opt_float(doc.get("validation_fraction")), opt_int(doc.get("seed")))


# -- jobs -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Job:
    """One delivered job: ``entry_id`` is what to acknowledge, ``payload`` the job (JSON object)."""

    node_id: str
    job_id: str
    entry_id: str
    payload: Mapping[str, Any]
    consumer: str
    deliveries: int = 1


@dataclass(frozen=True)
class DeadJob:
    """A job given up after too many deliveries (it killed or hung its agents)."""

    job_id: str
    payload: Mapping[str, Any]
    deliveries: int


#: A profiling job's protocol knobs when its submitter leaves them out (the Profile RPC's zero values
#: mean these too: profiler.proto); they are :class:`~edgetune.profiling.ProfileConfig`'s (PowerTrain's).
DEFAULT_PROFILE_BATCH_SIZE = 16
DEFAULT_N_MINIBATCHES = 40
DEFAULT_WARMUP_MINIBATCHES = 1
DEFAULT_PROFILE_SAMPLE_RATE_HZ = 1.0


@dataclass(frozen=True)
class ProfileJob(_Record):
    """What to profile on one node: the points, then how to measure them.

    Points are ``modes`` (or ``random_modes`` drawn with ``seed`` from the device's ``random_grid``)
    x ``batch_sizes``, in that order (``descending_order``: modes from the fastest down, for
    JetPacks that only clock down). The knobs are the measurement protocol's
    (``warmup_minibatches`` 0: none); ``power_limit_w`` skips a point that draws more. A Profile
    RPC and a queued profiling job (``Job.payload`` is :meth:`to_dict`) carry the same record; the
    node's agent plans it against its device (modes within the tables, a workload it can load).
    """

    SCHEMA_VERSION: ClassVar[int] = 1

    workload: str
    role: Role = Role.TRAIN
    modes: tuple[PowerMode, ...] = ()
    random_modes: int = 0
    random_grid: str = "full"
    seed: int = 0
    batch_sizes: tuple[int, ...] = (DEFAULT_PROFILE_BATCH_SIZE,)
    n_minibatches: int = DEFAULT_N_MINIBATCHES
    warmup_minibatches: int = DEFAULT_WARMUP_MINIBATCHES
    sample_rate_hz: float = DEFAULT_PROFILE_SAMPLE_RATE_HZ
    power_limit_w: float | None = None
    descending_order: bool = False

    def _fields(self) -> dict[str, Any]:
        return {"workload": self.workload, "role": self.role.value, "modes": [m.as_dict() for m in self.modes],
                "random_modes": self.random_modes, "random_grid": self.random_grid, "seed": self.seed,
                "batch_sizes": list(self.batch_sizes), "n_minibatches": self.n_minibatches,
                "warmup_minibatches": self.warmup_minibatches, "sample_rate_hz": self.sample_rate_hz,
                "power_limit_w": self.power_limit_w, "descending_order": self.descending_order}

    @classmethod
    def _from_fields(cls, doc: Mapping[str, Any]) -> ProfileJob:
        """A payload read from a node's queue: checked here, its edge (InvalidArgument naming ``job.<field>``);
        the bounds are the Profile RPC's."""
        modes = doc.get("modes") or []
        if not isinstance(modes, list):
            raise InvalidArgument("job.modes", f"{validation.shown(modes)} is not a list of modes")
        validation.repeated(modes, "job.modes", maximum=validation.MAX_PROFILE_POINTS)
        random_modes = validation.count(doc.get("random_modes", 0), "job.random_modes", minimum=0,
                                        maximum=validation.MAX_PROFILE_POINTS)
        if bool(modes) == bool(random_modes):
            raise InvalidArgument("job.modes", "give either modes or random_modes", "modes, or random_modes > 0")
        limit = doc.get("power_limit_w")
        return cls(
            workload=_text(doc.get("workload"), "job.workload"),
            role=_role(doc.get("role", "train"), "job.role"),
            modes=tuple(_mode(m, f"job.modes[{i}]") for i, m in enumerate(modes)),
            random_modes=random_modes,
            random_grid=_text(doc.get("random_grid", "full"), "job.random_grid"),
            seed=validation.seed(doc.get("seed", 0), "job.seed"),
            batch_sizes=validation.batch_sizes(doc.get("batch_sizes", ()), "job.batch_sizes"),
            n_minibatches=validation.count(doc.get("n_minibatches", DEFAULT_N_MINIBATCHES), "job.n_minibatches",
                                           maximum=validation.MAX_MINIBATCHES),
            warmup_minibatches=validation.count(doc.get("warmup_minibatches", DEFAULT_WARMUP_MINIBATCHES),
                                                "job.warmup_minibatches", minimum=0,
                                                maximum=validation.MAX_MINIBATCHES),
            sample_rate_hz=validation.sample_rate_hz(doc.get("sample_rate_hz", DEFAULT_PROFILE_SAMPLE_RATE_HZ),
                                                     "job.sample_rate_hz"),
            power_limit_w=None if limit is None else validation.power_budget_w(limit, "job.power_limit_w"),
            descending_order=doc.get("descending_order", False) is True,
        )

    @classmethod
    def _from_legacy(cls, doc: Mapping[str, Any]) -> ProfileJob:
        # Payloads were a ProfileRequest's proto-JSON before they had a schema; none is kept across
        # an upgrade (a queue drains in minutes), so one is refused like an unknown version.
        raise UnknownSchema(cls.__name__, None, cls.SCHEMA_VERSION)


def _role(value: Any, field_name: str) -> Role:
    try:
        return Role.parse(value)
    except InvalidArgument as exc:
        raise exc.renamed(field_name) from None


def _mode(value: Any, field_name: str) -> PowerMode:
    if not isinstance(value, Mapping) or not all(k in value for k in MODE_FIELDS):
        raise InvalidArgument(field_name, f"{validation.shown(value)} is not a power mode", ", ".join(MODE_FIELDS))
    try:
        return PowerMode(validation.count(value["cores"], f"{field_name}.cores"),
                         *(_number(value[k], f"{field_name}.{k}") for k in MODE_FIELDS[1:]))
    except TypeError as exc:
        raise InvalidArgument(field_name, str(exc)) from None


# -- coordinator state ----------------------------------------------------------------------------


@dataclass(frozen=True)
class SiteBudgets(_Record):
    """The site's standing budgets (None: none)."""

    SCHEMA_VERSION: ClassVar[int] = 1

    site_power_budget_w: float | None = None
    deadline_s: float | None = None

    def _fields(self) -> dict[str, Any]:
        return {"site_power_budget_w": self.site_power_budget_w, "deadline_s": self.deadline_s}

    @classmethod
    def _from_fields(cls, doc: Mapping[str, Any]) -> SiteBudgets:
        return cls(_opt_float(doc.get("site_power_budget_w")), _opt_float(doc.get("deadline_s")))


@dataclass(frozen=True)
class InferenceTarget(_Record):
    """An inference node's standing load: what a re-solve of its placement starts from."""

    SCHEMA_VERSION: ClassVar[int] = 1

    workload: str
    arrival_rps: float
    latency_budget_ms: float

    def _fields(self) -> dict[str, Any]:
        return {"workload": self.workload, "arrival_rps": self.arrival_rps,
                "latency_budget_ms": self.latency_budget_ms}

    @classmethod
    def _from_fields(cls, doc: Mapping[str, Any]) -> InferenceTarget:
        return cls(str(doc["workload"]), float(doc["arrival_rps"]), float(doc["latency_budget_ms"]))


@dataclass(frozen=True)
class RoundState(_Record):
    """The last *applied* round, kept for re-planning.

    ``request`` is the RoundRequest's JSON without the node options; ``options_npz`` holds
    them (numpy ``.npz``, arrays ``<node index>.<column>``) and is stored beside the JSON, not
    in it: thousands of modes per node would make megabytes of JSON. ``scope`` is the
    round's node list, ``members`` the ones that were plannable when it was planned.
    """

    SCHEMA_VERSION: ClassVar[int] = 1

    request: Mapping[str, Any]
    scope: tuple[str, ...]
    members: tuple[str, ...]
    options_npz: bytes = field(default=b"", repr=False)

    def _fields(self) -> dict[str, Any]:  # options_npz travels beside the JSON
        return {"request": dict(self.request), "scope": list(self.scope), "members": sorted(self.members)}

    @classmethod
    def _from_fields(cls, doc: Mapping[str, Any]) -> RoundState:
        return cls(dict(doc["request"]), tuple(doc["scope"]), tuple(doc["members"]))

    def with_options(self, options_npz: bytes) -> RoundState:
        return replace(self, options_npz=bytes(options_npz))

    def with_members(self, members: Sequence[str]) -> RoundState:
        return replace(self, members=tuple(sorted(members)))


# -- audit ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class AuditRecord(_Record):
    """One mutating (or refused) RPC: who called what, when, and how it ended."""

    SCHEMA_VERSION: ClassVar[int] = 1

    time_s: float
    service: str
    method: str
    #: The caller's identity name ("anonymous" when the server authenticates nobody).
    who: str
    role: str
    #: ``token``, ``certificate`` or ``none``.
    via: str
    #: The gRPC status code name (OK, PERMISSION_DENIED, ...).
    outcome: str
    peer: str = ""
    #: The node / session / model the call was about, when the policy names one.
    target: str = ""

    def _fields(self) -> dict[str, Any]:
        return {"time_s": self.time_s, "service": self.service, "method": self.method, "who": self.who,
                "role": self.role, "via": self.via, "outcome": self.outcome, "peer": self.peer, "target": self.target}

    @classmethod
    def _from_fields(cls, doc: Mapping[str, Any]) -> AuditRecord:
        return cls(_number(doc.get("time_s"), "time_s"), _text(doc.get("service"), "service"),
                   _text(doc.get("method"), "method"), _text(doc.get("who"), "who"),
                   _text(doc.get("role"), "role", empty_ok=True), _text(doc.get("via"), "via"),
                   _text(doc.get("outcome"), "outcome"), _text(doc.get("peer", ""), "peer", empty_ok=True),
                   _text(doc.get("target", ""), "target", empty_ok=True))
