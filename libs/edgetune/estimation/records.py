"""The estimator's questions and answers as typed records (what ``edgetune.v1.Estimator`` carries).

:mod:`edgetune.proto.serde.estimator` maps them to and from the messages, the typed client
(:mod:`edgetune.clients.estimator`) takes and returns them, and the library answers them
(:mod:`.jobs`, :mod:`.repository`, :mod:`.layerwise.energy`). A record holds what was asked,
read but not yet judged: empty strings and zeros mean "the default", as on the wire, and the
library's rules (methods, device tables, model ids, parameters) are applied where it answers.

This module imports nothing heavy: clients read and write these records without torch.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from edgetune.base.mode import PowerMode
from edgetune.base.records import BatchEfficiency, Points
from edgetune.base.roles import Role


@dataclass(frozen=True)
class MeasuredRow:
    """One measurement a Fit / Transfer learns from; empty device / workload and no role: the request's."""

    mode: PowerMode
    batch_size: int
    time_ms: float
    power_w: float
    device: str = ""
    workload: str = ""
    role: Role | None = None


def measured_rows(points: Points) -> tuple[MeasuredRow, ...]:
    """``points`` as rows, each naming the points' device, workload and role."""
    role = Role.parse(points.role) if points.role else None
    return tuple(MeasuredRow(PowerMode(int(m[0]), float(m[1]), float(m[2]), float(m[3])), int(b), float(t), float(p),
                             points.device, points.workload, role)
                 for m, b, t, p in zip(points.modes, points.batch_size, points.time_ms, points.power_w, strict=True))


@dataclass(frozen=True)
class FitSpec:
    """A reference model to fit on ``measurements`` (none: the store's of device / workload / role)."""

    device: str
    workload: str
    role: Role = Role.TRAIN
    method: str = ""  # "": nn; aliases as the wire's ``kind`` allows (powertrain-nn, nn-gp)
    model_id: str = ""  # "": device/workload/role/method
    measurements: tuple[MeasuredRow, ...] = ()
    epochs: int = 0  # 0: the method's default
    seed: int | None = None
    validation_fraction: float = 0.0  # 0: the tuning policy's
    params: Mapping[str, str] = field(default_factory=dict)  # constructor keywords, as text


@dataclass(frozen=True)
class TransferSpec:
    """A new model from ``base_model_id`` (stored, or ``reference:DEVICE``) and a few measurements.
    Empty device / workload and no role: the base's; ``method`` "": the tuning policy's."""

    base_model_id: str
    model_id: str = ""
    device: str = ""
    workload: str = ""
    role: Role | None = None
    measurements: tuple[MeasuredRow, ...] = ()
    epochs: int = 0  # fine-tuning epochs (0: the default)
    seed: int | None = None
    method: str = ""
    params: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class ModelInfo:
    """One stored model version as the estimator lists it."""

    model_id: str  # id@version
    kind: str
    device: str = ""
    workload: str = ""
    role: Role | None = None
    base_model_id: str = ""
    n_train: int = 0
    has_std: bool = False
    metrics: Mapping[str, float] = field(default_factory=dict)
    created_s: float = 0.0  # Unix seconds; 0: unknown


@dataclass(frozen=True)
class PredictSpec:
    """Predictions of a model for ``modes`` (none: every mode of ``grid``) at ``batch_sizes`` (none:
    the model's); ``device`` "": the model's."""

    model_id: str
    device: str = ""
    modes: tuple[PowerMode, ...] = ()
    grid: str = "full"
    batch_sizes: tuple[int, ...] = ()


@dataclass(frozen=True)
class EfficiencySpec:
    """Ahmed et al.'s batch efficiency: ``observed`` passes as they are, else trained on a proxy data set
    (zeros and empty strings: the estimator's defaults)."""

    workload: str = ""
    proxy_dataset: str = ""
    batch_sizes: tuple[int, ...] = ()
    target_accuracy: float = 0.0
    samples_per_pass: int = 0
    max_passes: int = 0
    seed: int | None = None
    observed: BatchEfficiency | None = None


@dataclass(frozen=True)
class LayerSpec:
    """One layer of a network given by its layers (the first gives the input shape); in an answer,
    ``position`` is THOR's block position (input / hidden / output)."""

    type: str
    position: str = ""
    input_height: int = 0
    input_width: int = 0
    in_channels: int = 0
    out_channels: int = 0
    kernel_size: int = 0
    stride: int = 0
    padding: int = 0


@dataclass(frozen=True)
class EnergySpec:
    """THOR's energy of one training iteration of a network (a layer-wise zoo ``workload`` or ``layers``)
    on ``device`` in ``mode`` (None: MAXN) at ``batch_size`` (0: the default)."""

    device: str = ""
    mode: PowerMode | None = None
    workload: str = ""
    layers: tuple[LayerSpec, ...] = ()
    batch_size: int = 0
    role: Role | None = None
    model_id: str = ""  # refused: THOR is fitted per request


@dataclass(frozen=True)
class LayerEnergy:
    layer: LayerSpec
    energy_j: float
    energy_std_j: float | None = None


@dataclass(frozen=True)
class EnergyEstimate:
    """Energy above idle of one training iteration, and of each block (std: the GPs' own)."""

    energy_j: float
    energy_std_j: float | None = None
    layers: tuple[LayerEnergy, ...] = ()
