"""The optimizer's own Prometheus metric (beside the gRPC ones every service has): the decisions it answered.

It lives in prometheus_client's default registry, which the server's metrics endpoint serves, and
counts what *this* replica answered; the session store counts its own work (sessions started,
points told, ended, reloaded, revision conflicts: :mod:`edgetune.optimization.sessions`).
"""

from __future__ import annotations

from prometheus_client import Counter

DECISIONS = Counter("edgetune_optimizer_decisions_total",
                    "Decisions answered, by RPC and whether they were feasible.", ["rpc", "feasible"])


def decided(rpc: str, feasible: bool) -> None:
    DECISIONS.labels(rpc, "true" if feasible else "false").inc()
