"""Workload profiles: what one minibatch of a (model, role) asks of the CPU, GPU and DRAM.

A profile is device-independent work; ``model.py`` turns it into time and power on a
device's clocks. The numbers are calibrated on the Orin AGX so that docs/papers.md's anchors
hold (see ``tests/unit/test_simulated.py`` and the calibration table in the module docs of
``model.py``); the same work then runs slower or faster on other devices by their peak
compute, per-core CPU speed and DRAM bandwidth (``hardware.py``).

Units: GPU work in GFLOP, DRAM traffic in MB, CPU work in core-milliseconds *on an A78AE at
2201.6 MHz with the Orin AGX's full bandwidth* (``REF_CPU_MHZ`` / ``REF_BW_GBS``).
"""

from __future__ import annotations

import copy
import threading
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass

from edgetune import validation
from edgetune.base.roles import Role
from edgetune.errors import InvalidArgument
from edgetune.physics.costing import GEMM_PEAK_EFF, REF_CPU_MHZ, LayerCostModel


@dataclass(frozen=True)
class RoleProfile:
    """One minibatch of one workload in one role."""

    # --- GPU ------------------------------------------------------------------------------
    gflop_per_sample: float  # fwd (+ bwd + update for training) GPU work per sample
    gpu_eff: float  # achieved share of the device's effective peak at full occupancy
    batch_half: float  # batch size at which occupancy is half: util(b) = b / (b + batch_half)
    gpu_mb_per_sample: float  # DRAM traffic per sample (activations, gradients)
    gpu_mb_fixed: float  # DRAM traffic per minibatch (weights, optimizer state)
    # --- main thread ----------------------------------------------------------------------
    kernels: int  # kernel launches per minibatch (eager PyTorch dispatch, CPU-bound)
    host_ms: float  # other main-thread work per minibatch (optimizer loop, loss.item, logging)
    # --- data pipeline --------------------------------------------------------------------
    data_ms_per_sample: float  # decode / augment / collate, core-ms per sample
    data_mem_frac: float  # share of CPU work that waits on DRAM (scales with bandwidth)
    workers: float  # parallel data-pipeline processes / threads
    overlap_p: float  # how well the pipeline overlaps the GPU step: 1 = serial, 4+ = near max()
    # --- fixed ----------------------------------------------------------------------------
    fixed_ms: float  # per-minibatch latency that no clock changes (sync, allocator, IRQ)
    warmup_ms: float  # extra time of the first minibatch of a run (cuDNN autotune, allocation)
    # --- power ----------------------------------------------------------------------------
    gpu_activity: float  # switching activity of the kernels relative to dense conv training
    cpu_activity: float = 1.0  # switching activity of the CPU work
    time_cv: float = 0.02  # minibatch-to-minibatch coefficient of variation


@dataclass(frozen=True)
class WorkloadProfile:
    name: str
    description: str
    roles: dict[Role, RoleProfile]

    def role(self, role: Role | str) -> RoleProfile:
        r = Role.parse(role)
        if r not in self.roles:
            allowed = ", ".join(x.value for x in self.roles)
            raise InvalidArgument("role", f"workload {self.name!r} has no {r.value} profile", allowed)
        return self.roles[r]


# ResNet18 on ImageNet (PowerTrain's reference): 1.8 GMAC fwd -> ~11 GFLOP/sample for
# fwd+bwd; JPEG decode + random-resized-crop dominate the CPU side (4 DataLoader workers).
RESNET18 = WorkloadProfile(
    "resnet18",
    "ResNet-18, ImageNet 224x224 (PowerTrain reference workload)",
    {
        Role.TRAIN: RoleProfile(
            gflop_per_sample=10.9, gpu_eff=0.51, batch_half=3.0, gpu_mb_per_sample=22.0,
            gpu_mb_fixed=4534.0, kernels=650, host_ms=3.0, data_ms_per_sample=6.26,
            data_mem_frac=0.17, workers=3.0, overlap_p=4.0, fixed_ms=2.0, warmup_ms=1500.0,
            gpu_activity=1.0, cpu_activity=1.0),
        Role.INFER: RoleProfile(
            gflop_per_sample=3.64, gpu_eff=0.5, batch_half=4.0, gpu_mb_per_sample=6.0,
            gpu_mb_fixed=47.0, kernels=70, host_ms=0.5, data_ms_per_sample=0.25,
            data_mem_frac=0.3, workers=1, overlap_p=3.0, fixed_ms=1.0, warmup_ms=600.0,
            gpu_activity=0.95, cpu_activity=0.8),
    },
)

# MobileNetV3-Large on GLD-23k: cheap on the GPU (225 MFLOP fwd) but depthwise layers are
# memory-bound and many small kernels; big landmark JPEGs make the data pipeline heavy.
MOBILENETV3 = WorkloadProfile(
    "mobilenetv3",
    "MobileNetV3-Large, GLD-23k landmarks",
    {
        Role.TRAIN: RoleProfile(
            gflop_per_sample=1.35, gpu_eff=0.0355, batch_half=6.0, gpu_mb_per_sample=30.0,
            gpu_mb_fixed=70.0, kernels=1900, host_ms=4.0, data_ms_per_sample=14.68,
            data_mem_frac=0.2, workers=3.0, overlap_p=4.0, fixed_ms=2.0, warmup_ms=1200.0,
            gpu_activity=0.8, cpu_activity=1.0),
        Role.INFER: RoleProfile(
            gflop_per_sample=0.45, gpu_eff=0.0329, batch_half=3.02, gpu_mb_per_sample=92.1,
            gpu_mb_fixed=22.0, kernels=1701, host_ms=1.0, data_ms_per_sample=0.08,
            data_mem_frac=0.3, workers=1, overlap_p=3.0, fixed_ms=1.5, warmup_ms=500.0,
            gpu_activity=0.50, cpu_activity=0.8),
    },
)

# YOLOv8n on COCO minitrain, num_workers=0 (PowerTrain): loading and mosaic augmentation run
# on the main process (OpenCV threads) and barely overlap the GPU.
YOLOV8N = WorkloadProfile(
    "yolov8n",
    "YOLOv8n detection, COCO minitrain 640x640, num_workers=0",
    {
        Role.TRAIN: RoleProfile(
            gflop_per_sample=26.0, gpu_eff=0.511, batch_half=4.0, gpu_mb_per_sample=55.0,
            gpu_mb_fixed=60.0, kernels=1500, host_ms=6.0, data_ms_per_sample=14.05,
            data_mem_frac=0.2, workers=1.6, overlap_p=1.6, fixed_ms=3.0, warmup_ms=2500.0,
            gpu_activity=0.9, cpu_activity=1.0),
        Role.INFER: RoleProfile(
            gflop_per_sample=8.7, gpu_eff=0.45, batch_half=2.0, gpu_mb_per_sample=14.0,
            gpu_mb_fixed=13.0, kernels=230, host_ms=2.0, data_ms_per_sample=1.0,
            data_mem_frac=0.2, workers=1, overlap_p=2.0, fixed_ms=1.5, warmup_ms=800.0,
            gpu_activity=0.85, cpu_activity=0.9),
    },
)

# BERT-base fine-tuning on SQuAD v2 (seq 384): GEMM-heavy, tensor-core friendly, GPU-bound;
# tokenised text needs almost no CPU work.
BERT_BASE = WorkloadProfile(
    "bert-base",
    "BERT-base uncased, SQuAD v2 question answering (seq 384)",
    {
        Role.TRAIN: RoleProfile(
            gflop_per_sample=265.0, gpu_eff=0.462, batch_half=1.0, gpu_mb_per_sample=120.0,
            gpu_mb_fixed=1800.0, kernels=1400, host_ms=8.0, data_ms_per_sample=0.3,
            data_mem_frac=0.2, workers=4, overlap_p=4.0, fixed_ms=3.0, warmup_ms=2000.0,
            gpu_activity=1.01, cpu_activity=0.8),
        Role.INFER: RoleProfile(
            gflop_per_sample=88.0, gpu_eff=0.42, batch_half=1.0, gpu_mb_per_sample=30.0,
            gpu_mb_fixed=440.0, kernels=420, host_ms=1.5, data_ms_per_sample=0.1,
            data_mem_frac=0.2, workers=1, overlap_p=3.0, fixed_ms=1.5, warmup_ms=800.0,
            gpu_activity=1.01, cpu_activity=0.8),
    },
)

# BERT-large inference (Fulcrum), seq 384: ~0.26 TFLOP per sample, GPU-bound even at bs 1.
BERT_LARGE = WorkloadProfile(
    "bert-large",
    "BERT-large, SQuAD inference (seq 384) — inference only",
    {
        Role.INFER: RoleProfile(
            gflop_per_sample=255.0, gpu_eff=0.405, batch_half=0.049, gpu_mb_per_sample=45.0,
            gpu_mb_fixed=1340.0, kernels=840, host_ms=2.0, data_ms_per_sample=0.1,
            data_mem_frac=0.2, workers=1, overlap_p=3.0, fixed_ms=1.5, warmup_ms=1500.0,
            gpu_activity=1.03, cpu_activity=0.8),
    },
)

# 2-layer LSTM language model on WikiText: small cuDNN RNN kernels, launch-bound.
LSTM = WorkloadProfile(
    "lstm",
    "2-layer LSTM next-word prediction, WikiText",
    {
        Role.TRAIN: RoleProfile(
            gflop_per_sample=2.0, gpu_eff=0.475, batch_half=8.0, gpu_mb_per_sample=4.0,
            gpu_mb_fixed=105.0, kernels=260, host_ms=1.5, data_ms_per_sample=0.05,
            data_mem_frac=0.2, workers=4, overlap_p=4.0, fixed_ms=1.0, warmup_ms=400.0,
            gpu_activity=0.75, cpu_activity=0.9),
        Role.INFER: RoleProfile(
            gflop_per_sample=0.7, gpu_eff=0.4, batch_half=8.0, gpu_mb_per_sample=1.0,
            gpu_mb_fixed=35.0, kernels=60, host_ms=0.4, data_ms_per_sample=0.02,
            data_mem_frac=0.2, workers=1, overlap_p=3.0, fixed_ms=0.8, warmup_ms=150.0,
            gpu_activity=0.7, cpu_activity=0.8),
    },
)

# Seed 000's character-level transformer (its Table 3): 6 pre-LN layers, 6 heads, 256 embedding,
# sequence 64, vocabulary ~100 -> 6 x 12 x 256^2 + embeddings and head ~ 4.8 M parameters. Forward:
# 2 x 4.8 M x 64 tokens + causal attention (4 T^2 d per layer) ~ 0.64 GFLOP per sample; training
# ~ 3x that. All GEMMs, but small ones: a few hundred tokens per minibatch leave most of the GPU
# idle (batch_half 16), and ~45 kernels per layer (fwd + bwd) plus AdamW make the step long in
# launches for its FLOPs. Text windows are sliced from a tensor in memory: no data pipeline.
CHAR_TRANSFORMER = WorkloadProfile(
    "char-transformer",
    "character-level GPT (6 layers, 6 heads, 256 embedding, seq 64, ~4.8 M parameters), Ahmed et al.",
    {
        Role.TRAIN: RoleProfile(
            gflop_per_sample=1.92, gpu_eff=0.42, batch_half=16.0, gpu_mb_per_sample=6.0,
            gpu_mb_fixed=150.0, kernels=380, host_ms=2.0, data_ms_per_sample=0.02,
            data_mem_frac=0.3, workers=1, overlap_p=2.0, fixed_ms=1.0, warmup_ms=800.0,
            gpu_activity=0.97, cpu_activity=0.8),
        Role.INFER: RoleProfile(
            gflop_per_sample=0.64, gpu_eff=0.4, batch_half=16.0, gpu_mb_per_sample=2.0,
            gpu_mb_fixed=20.0, kernels=110, host_ms=0.5, data_ms_per_sample=0.01,
            data_mem_frac=0.3, workers=1, overlap_p=2.0, fixed_ms=0.8, warmup_ms=300.0,
            gpu_activity=0.95, cpu_activity=0.8),
    },
)

# A deliberately small, balanced workload for fast tests: every term matters a little.
TINY = WorkloadProfile(
    "tiny",
    "tiny synthetic CNN for tests (balanced CPU / GPU / memory)",
    {
        Role.TRAIN: RoleProfile(
            gflop_per_sample=0.5, gpu_eff=0.5, batch_half=4.0, gpu_mb_per_sample=2.0,
            gpu_mb_fixed=10.0, kernels=60, host_ms=0.5, data_ms_per_sample=0.6,
            data_mem_frac=0.2, workers=2, overlap_p=3.0, fixed_ms=0.5, warmup_ms=50.0,
            gpu_activity=0.9, cpu_activity=1.0),
        Role.INFER: RoleProfile(
            gflop_per_sample=0.17, gpu_eff=0.5, batch_half=4.0, gpu_mb_per_sample=0.6,
            gpu_mb_fixed=3.0, kernels=20, host_ms=0.2, data_ms_per_sample=0.1,
            data_mem_frac=0.2, workers=1, overlap_p=3.0, fixed_ms=0.3, warmup_ms=20.0,
            gpu_activity=0.85, cpu_activity=0.8),
    },
)

PROFILES: dict[str, WorkloadProfile] = {
    p.name: p for p in (RESNET18, MOBILENETV3, YOLOV8N, BERT_BASE, BERT_LARGE, LSTM, CHAR_TRANSFORMER, TINY)
}


# --------------------------------------------------------------------------- registered profiles

#: Profiles registered at run time (user workloads by id), oldest first; bounded so that a
#: long-lived agent serving many workloads keeps a fixed footprint.
MAX_REGISTERED = 256
_REGISTERED: OrderedDict[str, WorkloadProfile] = OrderedDict()
_REGISTERED_LOCK = threading.Lock()


def register_profile(profile: WorkloadProfile) -> WorkloadProfile:
    """Make ``profile`` known to :func:`get_profile` (and so to every simulated device) by its name.

    A zoo name cannot be replaced; registering a name again replaces its profile (a user
    workload's id carries its structure hash, so the same id describes the same network).
    Beyond :data:`MAX_REGISTERED` names the least recently registered one is forgotten.
    """
    if not isinstance(profile, WorkloadProfile):
        raise InvalidArgument("profile", f"{type(profile).__name__} is not a WorkloadProfile", "a WorkloadProfile")
    if profile.name in PROFILES:
        raise InvalidArgument("workload", f"{profile.name!r} is a built-in profile and cannot be replaced",
                              "a name outside " + ", ".join(PROFILES))
    if not profile.roles:
        raise InvalidArgument("roles", f"workload {profile.name!r} has no role profile", "train, infer")
    with _REGISTERED_LOCK:
        _REGISTERED[profile.name] = profile
        _REGISTERED.move_to_end(profile.name)
        while len(_REGISTERED) > MAX_REGISTERED:
            _REGISTERED.popitem(last=False)
    return profile


def profile_names() -> list[str]:
    """Built-in names, then registered ones (oldest first)."""
    with _REGISTERED_LOCK:
        return list(PROFILES) + list(_REGISTERED)


def get_profile(name: str) -> WorkloadProfile:
    """The profile called ``name`` (built-in or registered), or ``InvalidArgument("workload", ...)``."""
    prof = PROFILES.get(name) if isinstance(name, str) else None
    if prof is None and isinstance(name, str):
        with _REGISTERED_LOCK:
            prof = _REGISTERED.get(name)
    if prof is None:
        hint = " (a user workload's profile is registered when its MODULE:FUNCTION is loaded)" if isinstance(
            name, str) and "-" in name and "." in name else ""
        raise InvalidArgument("workload", f"unknown workload {name!r}{hint}", ", ".join(PROFILES))
    return prof


# --------------------------------------------------------------------------- any torch module

#: Batch sizes at which the layer costing is sampled to fit a profile's occupancy curve and its
#: per-sample / per-minibatch DRAM traffic (the simulator's model is linear in between).
FIT_BATCHES = (4, 64)
#: Device on whose layer costing a module's profile is fitted (where the built-in profiles are calibrated).
REFERENCE_DEVICE = "orin-agx"
#: Host work of preparing one sample, ms per MB of input (collate and copy of in-memory tensors).
DATA_MS_PER_MB = 0.5
DATA_MS_MIN = 0.005
#: Per-minibatch warm-up (cuDNN autotune, allocator) per layer call, ms.
WARMUP_MS_PER_CALL = 2.0


def _role_from_layers(records_at: dict, sample_inputs, role: Role) -> RoleProfile:
    """Fit one :class:`RoleProfile` to the layer costing of ``records_at[b]`` (the layer records at
    each of :data:`FIT_BATCHES`) on the reference device at MAXN."""
    # late: the layer costing loads torch and the simulator's hardware and rail models

    cm = LayerCostModel(REFERENCE_DEVICE)
    maxn = cm.spec.maxn()
    peak_gflops = cm.hw.gpu_gflops_per_mhz * maxn.gpu_mhz
    bw_gbs = cm.hw.bw_gbs_per_mhz * maxn.emc_mhz
    cpu_stretch = REF_CPU_MHZ / (maxn.cpu_mhz * cm.hw.cpu_perf)
    training = role is Role.TRAIN
    fits = []
    n_calls = 0
    for b in FIT_BATCHES:
        records = records_at[b]
        n_calls = len(records)
        cost = cm.cost_records(records, maxn, training=training)
        gflop = sum(c.flops for c in cost.layers) / 1e9
        t_c = sum(c.t_compute_ms for c in cost.layers)
        t_m = sum(c.t_memory_ms for c in cost.layers)
        main_ms = sum(c.t_launch_ms for c in cost.layers) / cpu_stretch
        fits.append((b, gflop, t_c, t_m * bw_gbs, main_ms))
    (b1, g1, tc1, mb1, main1), (b2, g2, tc2, mb2, _) = fits
    gflop_per_sample = g2 / b2
    if g1 > 0 and tc1 > 0 and tc2 > 0:
        # achieved share of peak e(b) = E * b / (b + h)  <=>  1/e = 1/E + (h/E) / b: a line in 1/b
        y1, y2 = peak_gflops * tc1 / (1000.0 * g1), peak_gflops * tc2 / (1000.0 * g2)
        slope = (y1 - y2) / (1.0 / b1 - 1.0 / b2)
        intercept = y1 - slope / b1
        gpu_eff = 1.0 / intercept if intercept > 0 else float("inf")
        batch_half = slope * gpu_eff
        if gpu_eff > GEMM_PEAK_EFF:
            # not saturated within FIT_BATCHES: cap at a perfect GEMM's share, keep the big batch exact
            gpu_eff = GEMM_PEAK_EFF
            batch_half = b2 * (gpu_eff * y2 - 1.0)
        batch_half = max(0.05, batch_half)
    else:  # no GEMM-like layer: nothing for compute efficiency to describe
        gpu_eff, batch_half = 0.5, 1.0
    mb_per_sample = max(0.0, (mb2 - mb1) / (b2 - b1))
    mb_fixed = max(0.0, mb1 - mb_per_sample * b1)
    kernels = n_calls * (3 if training else 1)
    launch_ms = kernels * cm.hw.launch_us / 1000.0
    host_ms = max(0.0, main1 - launch_ms)
    in_mb = sum(t.numel() * t.element_size() for t in sample_inputs) / 1e6
    warmup = WARMUP_MS_PER_CALL * n_calls * (2 if training else 1)
    return RoleProfile(
        gflop_per_sample=float(gflop_per_sample), gpu_eff=float(gpu_eff), batch_half=float(batch_half),
        gpu_mb_per_sample=float(mb_per_sample), gpu_mb_fixed=float(mb_fixed), kernels=kernels, host_ms=float(host_ms),
        data_ms_per_sample=DATA_MS_MIN + DATA_MS_PER_MB * in_mb, data_mem_frac=0.3, workers=1,
        overlap_p=2.0, fixed_ms=1.0 if training else 0.5, warmup_ms=warmup,
        gpu_activity=0.9, cpu_activity=0.9 if training else 0.8)


def _layer_records(model, sample_inputs, batch_size: int):
    """Layer records of ``model`` on a batch of ``batch_size`` copies of the sample's shape.

    Shapes only, on the meta device (no weights copied, no arithmetic); a model that cannot
    run on meta (data-dependent control flow, ``.item()``) runs for real on zeros.
    """
    import torch  # deferred: torch

    from edgetune.workloads.layers import extract_layers  # deferred: torch

    def batch(device: str) -> list:
        return [torch.zeros((batch_size, *t.shape[1:]), dtype=t.dtype, device=device) for t in sample_inputs]

    try:
        meta = copy.deepcopy(model).to("meta")
        return extract_layers(meta, *batch("meta"))
    except Exception:
        return extract_layers(model, *batch("cpu"))


def profile_from_module(model, make_batch, *, name: str, roles: Iterable[Role | str] = (Role.TRAIN, Role.INFER),
                        description: str = "") -> WorkloadProfile:
    """A :class:`WorkloadProfile` of any ``torch.nn.Module``, from the layer cost model.

    ``make_batch(1)`` gives the input shapes (``inputs`` a tensor or a tuple of tensors,
    batch first). Each role's GPU work, occupancy curve, DRAM traffic and main-thread work
    are fitted to :class:`~edgetune.physics.costing.LayerCostModel`'s costing of
    the module's layers on the reference device (:data:`REFERENCE_DEVICE`, MAXN) at
    :data:`FIT_BATCHES`: every layer's shape-dependent efficiency, its roofline traffic and its
    launch are counted, so a network with 10x the FLOPs runs slower and one made of
    memory-bound layers follows the EMC clock. The data pipeline is in-memory tensors
    (a small per-sample copy). Not registered: see :func:`register_profile`.
    """
    from edgetune.workloads.user import check_batch  # deferred: torch

    validation.identifier(name, "workload")
    try:
        batch = make_batch(1)
    except Exception as exc:
        raise InvalidArgument("workload", f"{name}: make_batch(1) raised {type(exc).__name__}: {exc}") from None
    inputs, _ = check_batch(name, batch, 1)
    sample = list(inputs) if isinstance(inputs, tuple) else [inputs]
    parsed = tuple(dict.fromkeys(Role.parse(r) for r in roles))
    if not parsed:
        raise InvalidArgument("roles", "no role given", "train, infer")
    try:
        records_at = {b: _layer_records(model, sample, b) for b in FIT_BATCHES}
        role_profiles = {r: _role_from_layers(records_at, sample, r) for r in parsed}
    except InvalidArgument:
        raise
    except Exception as exc:
        raise InvalidArgument("workload", f"{name}: costing the model's layers failed: {type(exc).__name__}: {exc}") \
            from None
    n_params = sum(p.numel() for p in model.parameters())
    return WorkloadProfile(name, description or f"{type(model).__name__} ({n_params} parameters), costed by layer",
                           role_profiles)


def profile_for_workload(workload) -> WorkloadProfile:
    """The registered profile of a loaded :class:`~edgetune.workloads.user.UserWorkload`, costed once."""
    with _REGISTERED_LOCK:
        known = _REGISTERED.get(workload.workload_id)
    if known is not None:
        return known
    prof = profile_from_module(workload.model, workload.make_batch, name=workload.workload_id,
                               roles=workload.roles(), description=f"user workload {workload.spec}")
    return register_profile(prof)
