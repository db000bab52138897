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

from dataclasses import dataclass

from edgetune.devices.base import Role
from edgetune.errors import InvalidArgument


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


def get_profile(name: str) -> WorkloadProfile:
    """The profile called ``name``, or ``InvalidArgument("workload", ...)`` listing the names."""
    try:
        return PROFILES[name]
    except KeyError:
        raise InvalidArgument("workload", f"unknown workload {name!r}", ", ".join(PROFILES)) from None
