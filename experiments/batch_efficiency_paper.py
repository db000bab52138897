"""Seed 000's Tables 2–4 (seconds to target accuracy, means over seeds), to set beside ours.

Only ratios between methods are comparable with a digit-scale reproduction (our absolute
seconds are far smaller), so reports print B2 / B1, ours / B1 and ours / fastest from these.
Keys: (table, model) → target data set → one (Baseline 1, Baseline 2, Ours, Fastest) per
power limit in the paper's order (P_max^1, P_max^2, none).
"""

from __future__ import annotations

PAPER_TABLES = {
    ("Table 2", "ResNet18"): {  # Jetson Nano, 4.5 W / 7 W / none, proxy CIFAR-10
        "SVHN": ((14347, 11345, 8477, 8477), (8204, 7055, 4607, 4607), (6187, 5817, 4170, 4170)),
        "CINIC": ((18154, 12436, 9292, 9030), (10381, 7733, 4454, 4454), (7829, 6377, 4032, 4032)),
    },
    ("Table 2", "MobileNetV2"): {
        "SVHN": ((8708, 8082, 5940, 5940), (5107, 4871, 3912, 3912), (3990, 3912, 3912, 3912)),
        "CINIC": ((8909, 8428, 6194, 6194), (5226, 5079, 4080, 4080), (4082, 4080, 4080, 4080)),
    },
    ("Table 3", "Transformer"): {  # Jetson Nano, next-character prediction, proxy Tiny Shakespeare
        "Austen": ((8136, 9425, 7232, 7232), (4607, 6081, 3982, 3982), (3556, 5193, 3556, 3556)),
        "Dickens": ((12347, 14278, 10956, 10956), (6991, 12941, 6043, 6043), (5397, 7867, 5397, 5397)),
    },
    ("Table 4", "ResNet18"): {  # Jetson TX2 NX, proxy CIFAR-10
        "SVHN": ((7343, 7337, 4283, 4283), (3944, 4771, 2648, 2648), (3021, 4086, 2431, 2431)),
        "CINIC": ((9292, 8042, 5463, 5046), (4991, 5230, 2560, 2510), (3823, 4479, 2350, 2294)),
    },
}


def paper_ratios(table: str, model: str, cap_index: int) -> dict[str, tuple[float, ...]]:
    """Per target data set: (B2 / B1, ours / B1, ours / fastest) of the paper at that power limit."""
    out = {}
    for data, rows in PAPER_TABLES[(table, model)].items():
        b1, b2, ours, fastest = rows[cap_index]
        out[data] = (b2 / b1, ours / b1, ours / fastest)
    return out
