"""The estimator's own Prometheus metrics (beside the gRPC ones every service has).

They live in prometheus_client's default registry, which the server's metrics endpoint serves.
Models are shared by every replica through the store, so these count what *this* replica did.
"""

from __future__ import annotations

from prometheus_client import Counter, Histogram

MODELS_STORED = Counter("edgetune_estimator_models_stored_total",
                        "Model versions written to the store, by RPC (Fit / Transfer) and method.", ["rpc", "method"])
TRAIN_SECONDS = Histogram("edgetune_estimator_train_seconds", "Wall time of a Fit or Transfer (all its tasks).",
                          ["rpc"], buckets=(0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800))
TASKS = Counter("edgetune_estimator_tasks_total", "Estimation tasks run, by how (ray / sequential).", ["how"])
MODELS_LOADED = Counter("edgetune_estimator_models_loaded_total", "Model versions read from the store and decoded.")
MODEL_CACHE = Counter("edgetune_estimator_model_cache_total", "Loaded-model cache lookups.", ["result"])
PREDICTION_CACHE = Counter("edgetune_estimator_prediction_cache_total", "Whole-grid prediction cache lookups.",
                           ["result"])
PREDICT_SECONDS = Histogram("edgetune_estimator_predict_seconds", "Model compute of one Predict (cache misses).",
                            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5))
PREDICTED_ROWS = Counter("edgetune_estimator_predicted_rows_total", "Rows streamed by Predict.")
