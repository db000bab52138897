"""The optimizer's own Prometheus metrics (beside the gRPC ones every service has).

They live in prometheus_client's default registry, which the server's metrics endpoint serves.
Sessions are shared by every replica through the store, so these count what *this* replica did; the
session store counts its own (:mod:`edgetune.optimization.sessions`).
"""

from __future__ import annotations

from prometheus_client import Counter

DECISIONS = Counter("edgetune_optimizer_decisions_total",
                    "Decisions answered, by RPC and whether they were feasible.", ["rpc", "feasible"])
SESSIONS_STARTED = Counter("edgetune_optimizer_sessions_started_total",
                           "Search sessions started, by strategy and problem.", ["strategy", "problem"])
POINTS_TOLD = Counter("edgetune_optimizer_points_told_total", "Measured points recorded by Tell.")


def decided(rpc: str, feasible: bool) -> None:
    DECISIONS.labels(rpc, "true" if feasible else "false").inc()
