"""Layer-wise time / power / energy estimation.

Per-layer records of any torch model come from :mod:`edgetune.workloads.layers` (forward hooks;
the record is :class:`edgetune.physics.layers.LayerRecord`).

* :mod:`.neuralpower` — NeuralPower / NeuralPower: one Lasso polynomial model per layer type
  and target (time, power), grid over degree and alpha with 5-fold CV; real CPU layer timing;
* :mod:`.blocks` — THOR's parsing of a sequential model into input / hidden / output blocks,
  block kinds, and rebuilding a model with other channel counts;
* :mod:`.zoo` — the channel-parametric models THOR is evaluated on (5-layer CNN, VGG-ish,
  ResNet-ish, MobileNet-ish) and random-channel variants;
* :mod:`.thor` — THOR / THOR: variant-network profiling with subtraction, one GP per layer
  kind with variance-guided active learning, additive estimates, and the FLOPs + linear
  regression baseline;
* :mod:`.pruning` — energy-aware random channel pruning guided by an estimator;
* :mod:`.energy` — the estimator service's EstimateEnergy over these models.

The ground truth these are profiled against, per-layer cost of any network on a Jetson model,
is :mod:`edgetune.physics.costing` (the simulator's hardware constants and rails).

Submodules import torch / scikit-learn; import
the ones you need.
"""
