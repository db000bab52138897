"""SimulatedJetson: a physical time / power model of the Jetsons, on a virtual clock.

- ``profiles``  per-workload work: GPU FLOPs and DRAM traffic, launches, CPU data pipeline
- ``device``    the Device backend: noise, warm-up, power settling, virtual-time sampler
- ``tables``    noise-free ground-truth profile tables (``truth_table``)

The per-device constants and the physical model that prices a profile live in
:mod:`edgetune.physics` (``hardware``, ``model``), shared with the layer costing of the
estimator's energy RPC, which never loads this package.
"""

