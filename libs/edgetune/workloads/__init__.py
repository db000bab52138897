"""The model zoo and real PyTorch train / infer minibatch runners.

- ``registry``  ``get_workload(name, **config_overrides) -> WorkloadDef``: build, batches, loss, FLOPs, params
- ``resnet``, ``mobilenet``, ``yolo``, ``lstm``, ``bert``  the models, plain torch, one module each
- ``flops``     the forward-hook FLOP counter (conv, linear, recurrent, attention matmuls)
- ``data``      in-process datasets (seeded synthetic, scikit-learn digits) and ``make_loader``
- ``runner``    ``MinibatchRunner`` (per-minibatch times in ms, CUDA events or perf_counter)
                and ``time_module`` for layer-level timing
"""

from edgetune.workloads.data import make_loader
from edgetune.workloads.flops import FlopReport, count_flops
from edgetune.workloads.registry import WorkloadDef, get_workload, workload_names
from edgetune.workloads.runner import MinibatchRunner, pick_device, time_module

__all__ = [
    "FlopReport",
    "MinibatchRunner",
    "WorkloadDef",
    "count_flops",
    "get_workload",
    "make_loader",
    "pick_device",
    "time_module",
    "workload_names",
]
