"""Estimation: time and power over power modes, batch efficiency, and layer-wise energy.

* :mod:`.base` — the :class:`Predictor` interface and its file format;
* :mod:`.nn` — PowerTrain's MLP and its transfer; :mod:`.asymmetric` — Fulcrum's loss;
* :mod:`.gp` — Gaussian process, and GP on transfer-NN residuals;
* :mod:`.baselines` — linear regression, random forest, NN from scratch;
* :mod:`.methods` — the methods' names (no torch); :mod:`.registry` — methods by name (:func:`make_predictor`,
  :func:`adapt`);
* :mod:`.bundle` — :class:`TimePowerModel`, the time + power pair in one file;
* :mod:`.features`, :mod:`.validation` — feature / target handling and input checks;
* :mod:`.metrics` — MAPE and friends;
* :mod:`.parallel` — Ray tasks (local, a cluster address, or sequential with the same results);
* :mod:`.records` — the estimator's questions and answers as records (fit, transfer, predict, ...);
* :mod:`.ids`, :mod:`.params` — model ids (:class:`~.ids.ModelId`) and a fit's settings, their rules;
* :mod:`.jobs`, :mod:`.repository` — fits and transfers run and stored as versioned models, predictions;
* :mod:`.batch_efficiency`, :mod:`.proxy` — Ahmed et al.'s batch efficiency r on a proxy data set;
* :mod:`.layerwise` — NeuralPower per-layer models and THOR layer-wise GP energy (:mod:`.layerwise.energy`), pruning.

Import the submodules you need; this package imports nothing heavy (torch) by itself.
"""
