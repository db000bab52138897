"""The optimizer's entry point: ``python -m edgetune.services.optimizer.server`` or
``edgetune serve optimizer --port P --redis URL``.

Stateless RPCs (ParetoFront, Select, SelectJoint, SelectConcurrent) need nothing but the
request; search sessions live in the store, so any number of replicas can share them and a
restarted optimizer resumes every open session where it stopped (``--redis embedded`` keeps
them only as long as this process lives: give ``embedded:/dir`` or a Redis URL to keep them
across restarts). Shutdown (SIGTERM / SIGINT): health goes NOT_SERVING, in-flight RPCs get
``--grace-s`` (a Tell either lands whole or not at all), then the store closes.

Flags (each also read from ``EDGETUNE_<NAME>``): ``--redis``, ``--session-ttl-s``,
``--max-message-mb`` and the common server flags (``--host``, ``--port``, ``--metrics-port``,
``--max-workers``, ``--grace-s``, ``--log-level``).
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from typing import Any

from edgetune.clients.estimator import EstimatorClient
from edgetune.errors import InvalidArgument
from edgetune.identity import ClientSecurity, ServerSecurity, open_channel
from edgetune.optimization.sessions import DEFAULT_TTL_S, SessionStore
from edgetune.proto.v1 import optimizer_pb2_grpc
from edgetune.services.common import (
    add_option,
    add_server_options,
    build_server,
    server_kwargs,
)
from edgetune.services.common.config import client_security
from edgetune.services.common.entry import run_main
from edgetune.services.common.server import ServiceServer
from edgetune.services.common.stores import OwnedStore
from edgetune.services.optimizer.servicer import ModelPools, OptimizerServicer
from edgetune.store import Store

log = logging.getLogger("edgetune.optimizer")

DEFAULT_PORT = 50053
#: Candidate tables of a full grid x batch sizes (tens of thousands of rows) exceed gRPC's 4 MB default.
DEFAULT_MAX_MESSAGE_MB = 64


def create_server(port: int = DEFAULT_PORT, redis_url: str | None = "embedded", metrics_port: int | None = None, *,
                  host: str = "", grace_s: float = 10.0, max_workers: int = 16,
                  session_ttl_s: float = DEFAULT_TTL_S, max_message_mb: int = DEFAULT_MAX_MESSAGE_MB,
                  store: Store | None = None, ready_file: str | None = None,
                  security: ServerSecurity | None = None, health_port: int | None = None, estimator: str = "",
                  client: ClientSecurity | None = None) -> tuple[ServiceServer, OptimizerServicer]:
    """The optimizer's server, not yet started, and its servicer (see :func:`serve`). ``estimator``: the
    Estimator's address a Select by model reads predictions from (``client``: how it is called)."""
    if not max_message_mb > 0:
        raise InvalidArgument("max_message_mb", f"{max_message_mb} must be positive", ">= 1")
    owner = OwnedStore(store, redis_url)
    with owner as store:
        assert store is not None  # a required store (not optional=True): opened from redis_url if not given
        fetch = None
        if estimator:
            fetch = EstimatorClient(open_channel(estimator, client, options=[("grpc.max_receive_message_length",
                                                                             int(max_message_mb) << 20)])).predict
        servicer = OptimizerServicer(SessionStore(store, ttl_s=session_ttl_s), ModelPools(fetch))
        size = int(max_message_mb) * 1024 * 1024
        server = build_server("optimizer", [(servicer, optimizer_pb2_grpc.add_OptimizerServicer_to_server)],
                              host=host, port=port, metrics_port=metrics_port, grace_s=grace_s,
                              max_workers=max_workers, ready_file=ready_file,
                              options=[("grpc.max_receive_message_length", size),
                                       ("grpc.max_send_message_length", size)],
                              security=security, audit_store=store, health_port=health_port)
    owner.close_with(server)
    log.info("optimizer ready", extra={"port": server.port, "store": repr(store), "session_ttl_s": session_ttl_s})
    return server, servicer


def serve(port: int = DEFAULT_PORT, redis_url: str | None = "embedded", metrics_port: int | None = None, *,
          block: bool = True, **kwargs: Any) -> ServiceServer:
    """Start the optimizer; with ``block`` serve until SIGTERM / SIGINT.

    Keywords: ``host``, ``grace_s``, ``max_workers``, ``session_ttl_s``, ``max_message_mb``,
    ``store`` (a Store to use instead of ``redis_url``; the caller owns it). ``block=False``
    returns the started server (``server.port``, ``server.stop()``).
    """
    server, _ = create_server(port, redis_url, metrics_port, **kwargs)
    return server.run(block)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="edgetune serve optimizer",
                                     description="The edgetune optimizer: Pareto fronts, selection, search sessions.")
    add_server_options(parser, default_port=DEFAULT_PORT)
    add_option(parser, "redis", "embedded",
               "session store: redis://host:port/db, unix:///path, embedded[:/dir] (plain embedded: sessions "
               "last as long as this process)")
    add_option(parser, "session_ttl_s", DEFAULT_TTL_S, "a search session with no change for this long is removed")
    add_option(parser, "max_message_mb", DEFAULT_MAX_MESSAGE_MB, "largest request / response in MiB")
    add_option(parser, "estimator", "", "Estimator address a Select naming its candidates by model reads them from "
                                        "(empty: such a Select is FAILED_PRECONDITION)")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    return run_main("optimizer", argv, parse_args, lambda args: serve(
        redis_url=args.redis, session_ttl_s=args.session_ttl_s, max_message_mb=args.max_message_mb,
        estimator=args.estimator, client=client_security(args), **server_kwargs(args)))


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
