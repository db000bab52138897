"""estimator."""
