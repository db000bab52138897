"""RedisStore: a :class:`Store` over an existing Redis server reached by URL (the cluster case)."""

from __future__ import annotations

import redis
from redis.backoff import ExponentialWithJitterBackoff
from redis.retry import Retry

from .base import DEFAULT_NAMESPACE, Store


class RedisStore(Store):
    """redis-py against ``redis://host:port/db`` (also ``rediss://`` and ``unix://``).

    Connection errors and timeouts are retried ``retries`` times with jittered exponential
    backoff (about 3 s in all with the defaults) so a Redis restart or a pod move does not
    fail callers; idle connections are PINGed every ``health_check_interval_s`` before reuse.
    Keep blocking reads (XREADGROUP BLOCK) shorter than ``socket_timeout_s``.
    """

    backend = "redis"

    def __init__(
        self,
        url: str,
        *,
        namespace: str = DEFAULT_NAMESPACE,
        retries: int = 5,
        health_check_interval_s: int = 15,
        socket_timeout_s: float = 30.0,
        connect_timeout_s: float = 5.0,
    ) -> None:
        # Keepalive is a TCP option; redis-py refuses it for unix-socket connections.
        tcp = {} if url.lower().startswith("unix://") else {"socket_keepalive": True}
        client = redis.Redis.from_url(
            url,
            **tcp,
            retry=Retry(ExponentialWithJitterBackoff(base=0.1, cap=2.0), retries),
            retry_on_error=[redis.ConnectionError, redis.TimeoutError],
            health_check_interval=health_check_interval_s,
            socket_timeout=socket_timeout_s,
            socket_connect_timeout=connect_timeout_s,
            client_name="edgetune",
        )
        super().__init__(client, namespace=namespace, url=url)
