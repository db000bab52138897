"""Managed interleaving of concurrent training and inference (Fulcrum's runtime).

- ``arrivals``  request arrival processes: deterministic, Poisson, dynamic-rate (piecewise),
                bursty (two-state MMPP / on-off), trace replay
- ``requests``  the request queue: a real-time feeder thread, or a virtual-clock queue
- ``backends``  what runs minibatches: real zoo models (``TorchBackend``) or given times on a
                virtual clock (``TimedBackend``, e.g. from the simulator)
- ``plan``      τ_tr and β from measured t_tr / t_in(β) and the budgets (ConcurrentProblem's rule)
- ``runtime``   ``FulcrumScheduler``: τ_tr training minibatches, then one inference minibatch of ≤ β
- ``naive``     the uncoordinated baseline: a training thread and an inference server thread
- ``serving``   pieces both share; ``metrics``: ``RunResult`` (latencies, batches, throughput,
                queue length, device timeline)
"""

from edgetune.optimization.interleaving.arrivals import (
    MMPP,
    ArrivalProcess,
    Deterministic,
    PiecewisePoisson,
    Poisson,
    Replay,
    counts_per_window,
    index_of_dispersion,
    write_trace,
)
from edgetune.optimization.interleaving.backends import (
    Backend,
    TimedBackend,
    TorchBackend,
    measure_step_times,
)
from edgetune.optimization.interleaving.metrics import RunResult, Segment
from edgetune.optimization.interleaving.naive import run_naive
from edgetune.optimization.interleaving.plan import (
    Formulas,
    InterleavingPlan,
    interleaving_formulas,
    plan_interleaving,
)
from edgetune.optimization.interleaving.runtime import POLICIES, FulcrumScheduler, run_interleaved

__all__ = [
    "MMPP",
    "POLICIES",
    "ArrivalProcess",
    "Backend",
    "Deterministic",
    "Formulas",
    "FulcrumScheduler",
    "InterleavingPlan",
    "PiecewisePoisson",
    "Poisson",
    "Replay",
    "RunResult",
    "Segment",
    "TimedBackend",
    "TorchBackend",
    "counts_per_window",
    "index_of_dispersion",
    "interleaving_formulas",
    "measure_step_times",
    "plan_interleaving",
    "run_interleaved",
    "run_naive",
    "write_trace",
]
