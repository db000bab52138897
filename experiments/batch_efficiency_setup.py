"""What the Ahmed et al. reproduction runs: its models, data sets, budgets and the paper's tables as benches.

Shared by ``batch_efficiency.py`` (the runner) and ``batch_efficiency_report.py`` (its tables and plots).
"""

from __future__ import annotations

from dataclasses import dataclass

from edgetune.estimation.batch_efficiency import BASE_LR
from edgetune.estimation.proxy import EVAL_DRAWS, NOISY_PROXY
from edgetune.estimation.proxy_text import TEXT_PROXY, TEXT_TARGETS

IMAGE_TARGET = "digits-noisy"  # the device's image data set (the paper's SVHN / CINIC)


@dataclass(frozen=True)
class ModelSetup:
    """One model of the reproduction: its batch sizes, data sets and the simulator profile of its LUT."""

    batch_sizes: tuple[int, ...]
    sim_workload: str  # simulator profile of the device LUT (the paper's full-size model)
    paper_model: str  # its name in the paper's tables
    target: str  # the device's data set (the paper's SVHN / CINIC / Austen)
    target_accuracy: float  # the device's target, as the paper's Table 1
    proxy: str | None = None  # the server's data set; None: --proxy (the image models)
    base_lr: float = BASE_LR  # lr at b = 128, square-root scaled
    seeds: int = 5  # the paper's: 5 for images, 3 for text (--seeds overrides)


MODELS = {
    "resnet-slim": ModelSetup((4, 8, 16, 32, 64, 128), "resnet18", "ResNet18", IMAGE_TARGET, 0.94),
    # MobileNet-slim plateaus lower on the noisy digits
    "mobilenetv3-slim": ModelSetup((4, 8, 16, 32, 64), "mobilenetv3", "MobileNetV2", IMAGE_TARGET, 0.90),
    # the paper's MobileNetV2 block shape (ReLU6, no squeeze-excite), opt-in (--models): an ablation of the
    # MobileNet row; the simulator has one MobileNet profile, so its device LUT is the same. Its target is
    # ResNet's 94 %, set before any run: its checkpoint starts at 91.8 % on the target
    "mobilenetv2-slim": ModelSetup((4, 8, 16, 32, 64), "mobilenetv3", "MobileNetV2", IMAGE_TARGET, 0.94),
    # next-character prediction (the paper's transformer, AdamW, 1e-3 at b = 128, 3 seeds); the slim model
    # cannot reach the paper's 62 %: its checkpoint has 34 % on text-target-a and its runs reach 41–44 %
    # within the target's budget, so the target is 39 %, set from one seed's curves before any joint score
    "chartransformer-slim": ModelSetup((4, 8, 16, 32, 64, 128), "char-transformer", "Transformer",
                                       TEXT_TARGETS[0], 0.39, proxy=TEXT_PROXY, base_lr=1e-3, seeds=3),
}
# what a plain run reproduces (one model per paper row); the others are ablations named with --models
DEFAULT_MODELS = ("resnet-slim", "mobilenetv3-slim", "chartransformer-slim")
# the proxy's fixed targets (--proxy-target fixed): MobileNet-slim plateaus near 93 % on digits within a
# few passes (b >= 16 never reach 94 % in 40 passes), so its target sits lower
PROXY_TARGET_FIXED = {("resnet-slim", "digits"): 0.95, ("mobilenetv3-slim", "digits"): 0.93}
PROXIES = ("digits", NOISY_PROXY)  # NOISY_PROXY: the proxy's own digits at the target's noise level
# the proxy with headroom (its checkpoint far below its plateau, measured on 1,120 images) is the
# default; clean digits leave MobileNet 4 images of 140 above the checkpoint (see README)
DEFAULT_PROXY = NOISY_PROXY
# the target's held-out digits are scored under this many pixel-noise draws (its own first): the
# oracle's and every score's "target reached" then measures training, not one draw's test noise
TARGET_EVAL_DRAWS = EVAL_DRAWS
PROXY_TARGETS = ("plateau", "fixed", "matched")
PLATEAU_FRACTION = 0.8
# budgets in samples (the earlier 40 passes of 256); passes of s = b_max: 80 (ResNet) / 160 (MobileNet).
# The target's budget is larger so that the oracle's true passes are never censored (ResNet b=128
# needed up to 40 passes of 256 for 94 %); its runs stop at the target, so it costs little.
PROXY_SAMPLES = 10240
TARGET_SAMPLES = 20480
METHODS = ("Baseline 1", "Baseline 2", "Ours", "Oracle")


@dataclass(frozen=True)
class Bench:
    """One of the paper's tables on a simulated device: its models, caps and the baselines' frequencies."""

    table: str
    device: str
    models: tuple[str, ...]
    caps_w: tuple[float | None, ...]  # the paper's P_max^1, P_max^2, none
    # Baseline 1's GPU MHz per cap; None: by the paper's rule (``baseline_mode``) over RULE_WORKLOADS
    b1_gpu_mhz: dict[float | None, float] | None = None


BENCHES = (
    # the paper's Nano limits and its fixed Baseline 1 frequencies
    Bench("Table 2", "nano", ("resnet-slim", "mobilenetv3-slim", "mobilenetv2-slim"), (4.5, 7.0, None),
          {4.5: 307.2, 7.0: 614.4, None: 921.6}),
    Bench("Table 3", "nano", ("chartransformer-slim",), (4.5, 7.0, None), {4.5: 307.2, 7.0: 614.4, None: 921.6}),
    # the paper gives no TX2 NX limits in its text: 7.5 W and 11 W sit in the TX2 NX's simulated ResNet18
    # training power range (5.5–15.7 W) where 4.5 W and 7 W sit in the Nano's (3.1–9.8 W)
    Bench("Table 4", "tx2-nx", ("resnet-slim",), (7.5, 11.0, None)),
)
# the models the paper's rule profiles to fix Baseline 1's frequency ("irrespective of what model or b")
RULE_WORKLOADS = {"resnet18": MODELS["resnet-slim"].batch_sizes,
                  "mobilenetv3": MODELS["mobilenetv3-slim"].batch_sizes}


def paper_model(model: str) -> str:
    """The paper's name for one of our models (its table rows)."""
    return MODELS[model].paper_model


def bench_of(table: str) -> Bench:
    return next(b for b in BENCHES if b.table == table)


def cap_index(table: str, cap) -> int:
    """The paper's column (0: P_max^1, 1: P_max^2, 2: none) of ``cap`` (W, or "none") in ``table``."""
    return [("none" if c is None else c) for c in bench_of(table).caps_w].index(cap)
