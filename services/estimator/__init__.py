"""The estimator (``edgetune.v1.Estimator``): fits reference time / power predictors and transfers
them to new workloads and devices (PowerTrain NN, GP, NN+GP, baselines) as parallel Ray tasks,
keeps them as versioned models in the store, streams predictions for every mode of a device,
estimates Ahmed et al.'s batch efficiency and THOR's layer-wise energy. Entry point:
``server.main`` / ``edgetune serve estimator``.
"""
