"""The Jetsons' physics, shared by the simulator and the estimators that cost networks by it.

- ``hardware``  per-device constants: compute per MHz, bandwidth per MHz, DVFS rails
- ``model``     vectorised minibatch time (roofline + pipeline overlap) and rail power

Neither imports a device backend: the estimator's energy RPC (the layer costing,
:mod:`edgetune.physics.costing`) uses them without loading the simulated device
(:mod:`edgetune.devices.simulated` builds on them).
"""
