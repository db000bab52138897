"""Estimator messages <-> the estimation library's inputs and outputs (the servicer's edges only).

Readers check what the library would otherwise reject without saying which request field was
wrong, and raise :class:`~edgetune.errors.InvalidArgument` naming it: ``measurements[3].time_ms``
(NaN, negative), ``measurements[0].mode.gpu_mhz`` (not a frequency of the device),
``modes[7].cores``, ``kind`` (unknown method), ``grid``, ``chunk_size``, ``params.epochs``.

Model ids. A model is a versioned store blob keyed by (device, workload, role, method); its id is
those parts joined by ``/`` (``orin-agx/resnet18/train/nn``) unless the request names its own.
``<id>@<version>`` names one version, a bare id the latest (every Fit / Transfer to the same
id adds a version).
"""

from __future__ import annotations

import inspect
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from edgetune import validation
from edgetune.base.mode import MODE_FIELDS
from edgetune.errors import InvalidArgument
from edgetune.estimation.bundle import held_out_count
from edgetune.estimation.features import BATCH_FEATURE, TARGETS
from edgetune.estimation.registry import METHODS, TRANSFER_METHODS, make_predictor
from edgetune.powermodes.spec import DeviceSpec
from edgetune.powermodes.specs import get_spec
from edgetune.proto.serde.common import GRID, mode_from_proto, role_from_proto
from edgetune.proto.v1 import common_pb2, estimator_pb2
from edgetune.store import ModelRecord
from edgetune.tables import Table

#: Store blob kind of estimator models.
BLOB_KIND = "estimator-model"
DEFAULT_FIT_METHOD = "nn"
#: Proto-level kind names that mean one of the library's methods.
KIND_ALIASES = {"powertrain-nn": "nn", "powertrain": "nn", "nn-gp": "nn+gp"}
#: Methods whose predictor is (or wraps) the PowerTrain MLP.
NN_METHODS = ("nn", "transfer", "nn-asym", "nn+gp")
MAX_VALIDATION_FRACTION = 0.5
DEFAULT_CHUNK_ROWS = 8192
#: A columnar row is at most ~66 bytes (two std columns): a chunk stays near 2 MB, under gRPC's 4 MiB.
MAX_CHUNK_ROWS = 32_768

#: device / workload / role / method (each an identifier) and @version.
MAX_MODEL_ID_LENGTH = 4 * validation.MAX_IDENTIFIER_LENGTH + 24
_ID_PART = re.compile(r"^[A-Za-z0-9._+\-]+$")


# --- model ids ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class ModelRef:
    """A model id split into store key parts, with the version asked for (None: the latest)."""

    parts: tuple[str, ...]
    version: int | None = None

    @property
    def model_id(self) -> str:
        return "/".join(self.parts)

    def versioned(self, version: int) -> str:
        return f"{self.model_id}@{version}"


def default_model_id(device: str, workload: str, role: str, method: str) -> str:
    return "/".join((device, workload, role, method))


def parse_model_id(text: str, field: str = "model_id", *, allow_version: bool = True) -> ModelRef:
    """``a/b/c[@version]`` -> ModelRef; parts are non-empty ``[A-Za-z0-9._+-]`` words."""
    allowed = "parts of letters, digits, . _ + - joined by /, optionally @<version>"
    if not text:
        raise InvalidArgument(field, "is empty", allowed)
    if len(text) > MAX_MODEL_ID_LENGTH:
        raise InvalidArgument(field, f"has {len(text)} characters", f"at most {MAX_MODEL_ID_LENGTH}")
    base, at, version_text = text.partition("@")
    version = None
    if at:
        if not allow_version:
            raise InvalidArgument(field, f"{text!r}: a new model's id takes no @version (the store assigns it)",
                                  allowed.replace(", optionally @<version>", ""))
        if not version_text.isdigit() or int(version_text) < 1:
            raise InvalidArgument(field, f"{text!r} has a bad version {version_text!r}", "@1, @2, ...")
        version = int(version_text)
    parts = tuple(base.split("/"))
    bad = next((p for p in parts if not _ID_PART.match(p)), None)
    if bad is not None:
        raise InvalidArgument(field, f"{validation.shown(text)} has a bad part {validation.shown(bad)}", allowed)
    return ModelRef(parts, version)


def id_part(value: str, field: str) -> str:
    """A device / workload name used as a model id part."""
    validation.identifier(value, field)
    if not _ID_PART.match(value):
        raise InvalidArgument(field, f"{value!r} has characters a model id cannot hold", "letters, digits, . _ + -")
    return value


# --- enums and methods --------------------------------------------------------------------------
def method_from_kind(kind: str, default: str, field: str = "kind") -> str:
    name = KIND_ALIASES.get(kind.strip().lower(), kind.strip().lower()) or default
    if name not in METHODS:
        raise InvalidArgument(field, f"unknown kind {kind!r}", ", ".join((*METHODS, *KIND_ALIASES)))
    return name


def role_name(value: int, field: str = "role") -> str:
    """ROLE_TRAIN / ROLE_INFER; unspecified reads as train (the reference workloads are trainings)."""
    from edgetune.base.roles import Role

    return role_from_proto(value, field, default=Role.TRAIN).value


def spec_for(device: str, field: str = "device") -> DeviceSpec:
    try:
        return get_spec(device)
    except InvalidArgument as exc:
        raise exc.renamed(field) from None


def grid_name(value: int, field: str = "grid") -> str:
    return GRID.from_proto(value, field)


def _typed(text: str) -> Any:
    """A param value: int, float, bool, or the string itself."""
    low = text.strip().lower()
    if low in ("true", "false"):
        return low == "true"
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return text


def predictor_params(method: str, epochs: int, params: Mapping[str, str], *, transfer: bool = False,
                     field_prefix: str = "params") -> dict[str, Any]:
    """Constructor keywords of ``method`` from the request's ``epochs`` and ``params`` (checked here, so a
    typo is INVALID_ARGUMENT naming it instead of a failed Ray task)."""
    _epochs(epochs)
    kw: dict[str, Any] = {k: _typed(v) for k, v in params.items()}
    if transfer:
        return kw  # transfer params are checked by _transfer_params
    defaults = _constructor_defaults(method)
    for name, value in kw.items():
        if name in defaults:
            kw[name] = validation.parameter(value, defaults[name], f"{field_prefix}.{name}")
    if epochs:
        if method not in NN_METHODS:
            raise InvalidArgument("epochs", f"applies to the NN methods, not {method!r}", "0 for " + method)
        if method == "nn+gp":
            kw["nn_params"] = {**kw.get("nn_params", {}), "epochs": epochs}
        else:
            kw["epochs"] = epochs
    try:
        make_predictor(method, TARGETS[0], **kw)  # cheap: nothing is built before fit
    except TypeError:
        names = _constructor_names(method)
        bad = sorted(set(kw) - names)
        raise InvalidArgument(f"{field_prefix}.{bad[0] if bad else '?'}", f"not a parameter of {method!r}",
                              ", ".join(sorted(names))) from None
    except InvalidArgument as exc:
        raise exc.prefixed(field_prefix) from None
    return kw


def transfer_params(method: str, epochs: int, params: Mapping[str, str]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(keywords for ``adapt``, attributes to set on the reference NN before fine-tuning).

    Fine-tuning settings (``transfer_epochs``, ``transfer_lr``, ``transfer_mode``) live on the reference
    MLP, as in ``edgetune estimate transfer``; ``epochs`` is ``transfer_epochs``.
    """
    _epochs(epochs)
    kw = {k: _typed(v) for k, v in params.items()}
    nn_defaults = _constructor_defaults("nn")
    nn_attrs: dict[str, Any] = {k: validation.parameter(kw.pop(k), nn_defaults[k], f"params.{k}")
                                for k in ("transfer_epochs", "transfer_lr", "transfer_mode") if k in kw}
    if epochs:
        if method not in TRANSFER_METHODS:
            raise InvalidArgument("epochs", f"fine-tuning epochs apply to {', '.join(TRANSFER_METHODS)}, not "
                                  f"{method!r} (it fits the new rows from scratch)", "0")
        nn_attrs["transfer_epochs"] = epochs
    if nn_attrs and method not in TRANSFER_METHODS:
        raise InvalidArgument(f"params.{next(iter(nn_attrs))}", f"applies to {', '.join(TRANSFER_METHODS)} only")
    if method == "nn+gp":
        names = {"combine", "restarts"}
    elif method in TRANSFER_METHODS:
        names = set()
    else:
        names = _constructor_names(method) - {"transform"}
    bad = sorted(set(kw) - names)
    if bad:
        raise InvalidArgument(f"params.{bad[0]}", f"not a transfer parameter of {method!r}",
                              ", ".join(sorted(names | {"transfer_epochs", "transfer_lr", "transfer_mode"})) or "none")
    if "transfer_epochs" in nn_attrs and (not isinstance(nn_attrs["transfer_epochs"], int)
                                          or nn_attrs["transfer_epochs"] < 1):
        raise InvalidArgument("params.transfer_epochs", f"{nn_attrs['transfer_epochs']!r}", ">= 1")
    defaults = _constructor_defaults(method)
    for name, value in kw.items():
        if name in defaults:
            kw[name] = validation.parameter(value, defaults[name], f"params.{name}")
    return kw, nn_attrs


def seed(request: Any) -> int:
    """The request's optional seed (absent: 0), as :func:`edgetune.validation.seed` (no negative seeds)."""
    return validation.seed(request.seed, "seed") if request.HasField("seed") else 0


def _epochs(epochs: int) -> int:
    return validation.count(epochs, "epochs", minimum=0, maximum=validation.MAX_EPOCHS)


def _constructor_defaults(method: str) -> dict[str, Any]:
    cls = type(make_predictor(method, TARGETS[0]))
    return {n: p.default for n, p in inspect.signature(cls.__init__).parameters.items()
            if n not in ("self", "target", "seed") and p.default is not inspect.Parameter.empty}


def _constructor_names(method: str) -> set[str]:
    cls = type(make_predictor(method, TARGETS[0]))
    sig = inspect.signature(cls.__init__)
    return {n for n, p in sig.parameters.items()
            if n not in ("self", "target", "seed") and p.kind is not inspect.Parameter.VAR_KEYWORD}


# --- measurements -> arrays ---------------------------------------------------------------------
@dataclass
class Rows:
    """Checked measurements as arrays: modes (n, 4), batch sizes (n,), targets."""

    modes: np.ndarray
    batch_size: np.ndarray
    time_ms: np.ndarray
    power_w: np.ndarray
    source: str  # what the rows came from, for messages and history

    def __len__(self) -> int:
        return int(self.modes.shape[0])

    @property
    def batch_sizes(self) -> list[int]:
        return sorted({int(b) for b in self.batch_size})

    def table(self, device: str, workload: str, role: str) -> Table:
        """The rows as the profile table the estimation pipeline learns from."""
        cols = [*MODE_FIELDS, BATCH_FEATURE, "time_ms", "power_w", "device", "workload", "role"]
        return Table(cols, [{**dict(zip(MODE_FIELDS, (int(m[0]), *map(float, m[1:])), strict=True)),
                             BATCH_FEATURE: int(b), "time_ms": float(t), "power_w": float(p), "device": device,
                             "workload": workload, "role": role}
                            for m, b, t, p in zip(self.modes, self.batch_size, self.time_ms, self.power_w,
                                                  strict=True)])


def rows_from_measurements(msgs: Sequence[common_pb2.Measurement], spec: DeviceSpec, workload: str, role: str,
                           field: str = "measurements") -> Rows:
    """Inline measurements, each checked: a valid mode of ``spec``, batch size >= 1, finite time > 0 and
    power >= 0, and no other device / workload / role than the request's."""
    n = len(msgs)
    modes = np.empty((n, 4))
    batch = np.empty(n, dtype=np.int64)
    time_ms = np.empty(n)
    power_w = np.empty(n)
    for i, m in enumerate(msgs):
        at = f"{field}[{i}]"
        for name, want in (("device", spec.name), ("workload", workload)):
            got = getattr(m, name)
            if got and got != want:
                raise InvalidArgument(f"{at}.{name}", f"{got!r} differs from the request's {want!r}",
                                      f"{want!r} or empty: a model is per device, workload and role")
        if m.role and role_name(m.role, f"{at}.role") != role:
            raise InvalidArgument(f"{at}.role", f"differs from the request's {role!r}", f"{role!r} or unspecified")
        modes[i] = valid_mode(spec, mode_from_proto(m.mode, f"{at}.mode"), f"{at}.mode")
        batch[i] = _batch(m.batch_size, f"{at}.batch_size")
        time_ms[i] = _positive(m.time_ms, f"{at}.time_ms", "ms")
        power_w[i] = _non_negative(m.power_w, f"{at}.power_w", "W")
    return Rows(modes, batch, time_ms, power_w, "request")


def rows_from_store(docs: Sequence[Mapping[str, Any]], spec: DeviceSpec, source: str) -> Rows:
    """Profile-table rows the profiler stored; a bad one is named by its position and id."""
    n = len(docs)
    modes = np.empty((n, 4))
    batch = np.empty(n, dtype=np.int64)
    time_ms = np.empty(n)
    power_w = np.empty(n)
    for i, d in enumerate(docs):
        at = f"{source}[{i}]" + (f" (id {d['id']})" if d.get("id") else "")
        try:
            from edgetune.base.mode import PowerMode

            mode = PowerMode(int(d["cores"]), float(d["cpu_mhz"]), float(d["gpu_mhz"]), float(d["emc_mhz"]))
            values = float(d["time_ms"]), float(d["power_w"]), d.get("batch_size", 0)
        except (KeyError, TypeError, ValueError) as exc:
            raise InvalidArgument(at, f"stored measurement is not a profile row ({exc})") from None
        modes[i] = valid_mode(spec, mode, f"{at}.mode")
        batch[i] = _batch(values[2], f"{at}.batch_size")
        time_ms[i] = _positive(values[0], f"{at}.time_ms", "ms")
        power_w[i] = _non_negative(values[1], f"{at}.power_w", "W")
    return Rows(modes, batch, time_ms, power_w, source)


def valid_mode(spec: DeviceSpec, mode: Any, field: str) -> tuple[float, ...]:
    return validation.power_mode(spec, mode, field).as_tuple()


def _batch(value: Any, field: str) -> int:
    return validation.batch_size(value, field)


def _positive(value: float, field: str, unit: str) -> float:
    if not (math.isfinite(value) and value > 0):
        raise InvalidArgument(field, f"{value!r} is not a finite positive number", f"> 0 {unit}")
    return float(value)


def _non_negative(value: float, field: str, unit: str) -> float:
    if not (math.isfinite(value) and value >= 0):
        raise InvalidArgument(field, f"{value!r} is not a finite non-negative number", f">= 0 {unit}")
    return float(value)


def min_fit_rows(validation_fraction: float, min_train_rows: int) -> int:
    """Fewest rows that leave ``min_train_rows`` to train on after the held-out split."""
    n = min_train_rows + 1
    while n - held_out_count(n, validation_fraction) < min_train_rows:
        n += 1
    return n


def validation_fraction(value: float, default: float) -> float:
    """The request's held-out fraction; 0: ``default`` (the tuning policy's)."""
    if value == 0:
        return default
    if not (math.isfinite(value) and 0 < value <= MAX_VALIDATION_FRACTION):
        raise InvalidArgument("validation_fraction", f"{value!r} is out of range",
                              f"0 (default {default}) or (0, {MAX_VALIDATION_FRACTION}]")
    return float(value)


def chunk_rows(value: int) -> int:
    if value == 0:
        return DEFAULT_CHUNK_ROWS
    if not 0 < value <= MAX_CHUNK_ROWS:
        raise InvalidArgument("chunk_size", f"{value} is out of range",
                              f"0 (default {DEFAULT_CHUNK_ROWS}) or 1 to {MAX_CHUNK_ROWS}")
    return int(value)


def modes_from_request(msgs: Sequence[common_pb2.PowerMode], spec: DeviceSpec, field: str = "modes") -> np.ndarray:
    """Explicit modes, each validated against ``spec`` (a mode of another device is named by index)."""
    out = np.empty((len(msgs), 4))
    for i, m in enumerate(msgs):
        out[i] = valid_mode(spec, mode_from_proto(m, f"{field}[{i}]"), f"{field}[{i}]")
    return out


# --- responses ------------------------------------------------------------------------------------
def model_info(meta: ModelRecord, version: int) -> estimator_pb2.ModelInfo:
    from edgetune.proto.serde.common import ROLE

    msg = estimator_pb2.ModelInfo(
        model_id=f"{meta.model_id}@{version}", kind=meta.kind, device=meta.device, workload=meta.workload,
        base_model_id=meta.base_model_id, n_train=meta.n_train, has_std=meta.has_std,
        metrics={k: float(v) for k, v in meta.metrics.items() if v is not None},
    )
    if meta.role:
        msg.role = ROLE.to_proto(meta.role)  # type: ignore[assignment]
    created = meta.created_s
    if created:
        seconds = math.floor(created)
        msg.created.FromNanoseconds(seconds * 10**9 + round((created - seconds) * 1e9))
    return msg


def efficiency_to_proto(passes_by_batch: Mapping[int, float],
                        ratio: Mapping[int, float]) -> list[common_pb2.BatchEfficiency]:
    """One row per batch size, ascending; ``passes_to_target`` / ``r`` absent for never."""
    out = []
    for b in sorted(passes_by_batch):
        msg = common_pb2.BatchEfficiency(batch_size=int(b))
        if math.isfinite(passes_by_batch[b]):
            msg.passes_to_target = float(passes_by_batch[b])
        if math.isfinite(ratio.get(b, math.inf)):
            msg.r = float(ratio[b])
        out.append(msg)
    return out


def observed_passes(rows: Sequence[common_pb2.BatchEfficiency]) -> dict[int, float]:
    """Already-measured passes by batch size (absent = never); checked."""
    out: dict[int, float] = {}
    for i, r in enumerate(rows):
        at = f"observed[{i}]"
        if r.batch_size < 1:
            raise InvalidArgument(f"{at}.batch_size", f"{r.batch_size} is not a batch size", ">= 1")
        if r.batch_size in out:
            raise InvalidArgument(f"{at}.batch_size", f"batch size {r.batch_size} repeats", "one row per batch size")
        passes = r.passes_to_target if r.HasField("passes_to_target") else math.inf
        if math.isnan(passes) or passes <= 0:
            raise InvalidArgument(f"{at}.passes_to_target", f"{passes!r} is not a pass count",
                                  "> 0, or absent for never")
        out[int(r.batch_size)] = float(passes)
    return out
