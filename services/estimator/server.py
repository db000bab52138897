"""The estimator's entry point: ``python -m edgetune.services.estimator.server`` or
``edgetune serve estimator --port P --redis URL [--ray-address ADDR] [--no-ray [--processes N]]``.

Models live in the store (versioned blobs), so a restarted estimator, or any replica, serves
every model fitted before (``--redis embedded`` keeps them only as long as this process: give
``embedded:/dir`` or a Redis URL to keep them). Fit / Transfer / EstimateBatchEfficiency run
their tasks on a local Ray started at first use (``--ray-num-cpus``, default every core; started before the server listens), on a
Ray cluster (``--ray-address`` or ``EDGETUNE_RAY_ADDRESS``), or in order in this process
(``--no-ray``), or on a pool of local worker processes (``--no-ray --processes N``). Transfers that arrive
within ``--transfer-batch-ms`` of each other run as one batch, split over the workers. Shutdown (SIGTERM / SIGINT): health goes NOT_SERVING, in-flight RPCs get
``--grace-s``, then the local Ray this process started stops and the store closes.

Flags (each also read from ``EDGETUNE_<NAME>``): ``--redis``, ``--ray-address``, ``--no-ray``,
``--ray-num-cpus``, ``--processes``, ``--transfer-batch-ms``, ``--model-cache-size``, ``--max-message-mb`` and the common server flags
(``--host``, ``--port``, ``--metrics-port``, ``--max-workers``, ``--grace-s``, ``--log-level``).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence
from typing import Any

import grpc

from edgetune.errors import InvalidArgument
from edgetune.estimation import parallel
from edgetune.estimation.jobs import Runner
from edgetune.estimation.layerwise.energy import Unimplemented
from edgetune.estimation.repository import ModelRepository
from edgetune.identity import ServerSecurity
from edgetune.proto.v1 import estimator_pb2_grpc
from edgetune.services.common import (
    add_option,
    add_server_options,
    build_server,
    server_kwargs,
)
from edgetune.services.common.entry import run_main
from edgetune.services.common.errors import register_status, status_for
from edgetune.services.common.limits import MAX_HEAVY_ENV
from edgetune.services.common.server import ServiceServer
from edgetune.services.common.stores import OwnedStore
from edgetune.services.estimator.servicer import EstimatorServicer
from edgetune.store import Store

log = logging.getLogger("edgetune.estimator")

DEFAULT_PORT = 50052
#: A full grid × batch sizes streams in chunks, but a Fit with tens of thousands of inline rows is one message.
DEFAULT_MAX_MESSAGE_MB = 64
#: Loaded models kept: a fleet's transfers come back in batches of up to a few hundred nodes, each node's model
#: asked to predict right after; with 16 kept, most were read back from the store and rebuilt (7 ms and 0.35 MB
#: of blob each: a fifth of the 1,000-node bench's estimator CPU). A node's model takes ~0.5 MB loaded.
DEFAULT_MODEL_CACHE = 256
#: Heavy calls admitted at once (unless EDGETUNE_MAX_HEAVY_RPCS says otherwise): a fleet's transfers wait
#: together in the transfer batcher and run on the workers, so the slots bound calls waiting, not the work
#: (the coordinator sends up to 64 at once: edgetune.control.reconcile.ESTIMATOR_SLOTS).
ESTIMATOR_MAX_HEAVY = 72

if status_for(Unimplemented("")) is not grpc.StatusCode.UNIMPLEMENTED:
    register_status(Unimplemented, grpc.StatusCode.UNIMPLEMENTED)


def create_server(port: int = DEFAULT_PORT, redis_url: str | None = "embedded", metrics_port: int | None = None, *,
                  host: str = "", grace_s: float = 10.0, max_workers: int = 16, use_ray: bool = True,
                  ray_address: str | None = None, ray_num_cpus: int | None = None, processes: int = 0,
                  transfer_batch_ms: float = 50.0, model_cache_size: int = DEFAULT_MODEL_CACHE, max_message_mb: int = DEFAULT_MAX_MESSAGE_MB,
                  store: Store | None = None, ready_file: str | None = None,
                  security: ServerSecurity | None = None, health_port: int | None = None) -> tuple[ServiceServer, EstimatorServicer]:
    """The estimator's server, not yet started, and its servicer (see :func:`serve`)."""
    if not max_message_mb > 0:
        raise InvalidArgument("max_message_mb", f"{max_message_mb} must be positive", ">= 1")
    if ray_num_cpus is not None and ray_num_cpus < 0:
        raise InvalidArgument("ray_num_cpus", f"{ray_num_cpus} is negative", "0 (every core) or more")
    if model_cache_size < 0:
        raise InvalidArgument("model_cache_size", f"{model_cache_size} is negative", ">= 0")
    if processes < 0 or (processes and use_ray):
        raise InvalidArgument("processes", f"{processes}: a pool of processes runs the tasks without Ray",
                              "0, or >= 1 with --no-ray")
    if not 0 <= transfer_batch_ms <= 10_000:
        raise InvalidArgument("transfer_batch_ms", f"{transfer_batch_ms!r}", "0 to 10000 ms")
    owner = OwnedStore(store, redis_url)
    with owner as store:
        assert store is not None  # a required store (not optional=True): opened from redis_url if not given
        runner = Runner(parallel=use_ray, address=parallel.resolve_address(ray_address) if use_ray else None,
                        num_cpus=ray_num_cpus or None, processes=processes)
        # Ray first, from this thread: Ray forks its daemons, and a fork from a gRPC handler thread
        # while gRPC polls can crash the child (seen with ray 2.55 + grpcio here).
        runner.start()
        servicer = EstimatorServicer(ModelRepository(store, cache_size=model_cache_size), runner,
                                     transfer_batch_s=transfer_batch_ms / 1000.0)
        size = int(max_message_mb) * 1024 * 1024
        server = build_server("estimator", [(servicer, estimator_pb2_grpc.add_EstimatorServicer_to_server)],
                              host=host, port=port, metrics_port=metrics_port, grace_s=grace_s,
                              max_workers=max_workers, ready_file=ready_file,
                              options=[("grpc.max_receive_message_length", size),
                                       ("grpc.max_send_message_length", size)],
                              security=security, audit_store=store, health_port=health_port,
                              max_heavy=None if MAX_HEAVY_ENV in os.environ else ESTIMATOR_MAX_HEAVY)
    owner.close_with(server)
    if use_ray:
        server.on_shutdown.append(parallel.shutdown)  # stops only a Ray this process started
    if processes:
        server.on_shutdown.append(parallel.shutdown_pool)
    log.info("estimator ready", extra={"port": server.port, "store": repr(store),
                                       "tasks": (f"{processes} processes" if processes else "sequential") if not use_ray
                                       else (runner.address or "local ray")})
    return server, servicer


def serve(port: int = DEFAULT_PORT, redis_url: str | None = "embedded", metrics_port: int | None = None, *,
          block: bool = True, **kwargs: Any) -> ServiceServer:
    """Start the estimator; with ``block`` serve until SIGTERM / SIGINT (keywords: :func:`create_server`'s)."""
    server, _ = create_server(port, redis_url, metrics_port, **kwargs)
    return server.run(block)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="edgetune serve estimator",
                                     description="The edgetune estimator: fit, transfer and serve time / power "
                                                 "predictors; batch efficiency; layer-wise energy.")
    add_server_options(parser, default_port=DEFAULT_PORT)
    add_option(parser, "redis", "embedded",
               "model store: redis://host:port/db, unix:///path, embedded[:/dir] (plain embedded: models last as "
               "long as this process)")
    add_option(parser, "ray_address", "", f"Ray cluster for the tasks (also {parallel.ADDRESS_ENV}); empty: a local "
                                          "Ray started at first use")
    add_option(parser, "no_ray", False, "run the tasks one after another in this process, without Ray")
    add_option(parser, "ray_num_cpus", 0, "CPUs of the local Ray (0: every core)")
    add_option(parser, "processes", 0, "with --no-ray: run the tasks on a pool of this many local worker processes "
                                       "(0: in this process)")
    add_option(parser, "transfer_batch_ms", 50.0, "transfers arriving within this many ms run as one batch")
    add_option(parser, "model_cache_size", DEFAULT_MODEL_CACHE, "loaded models kept in memory")
    add_option(parser, "max_message_mb", DEFAULT_MAX_MESSAGE_MB, "largest request / response in MiB")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    return run_main("estimator", argv, parse_args, lambda args: serve(
        redis_url=args.redis, use_ray=not args.no_ray, ray_address=args.ray_address or None,
        ray_num_cpus=args.ray_num_cpus or None, processes=args.processes,
        transfer_batch_ms=args.transfer_batch_ms, model_cache_size=args.model_cache_size,
        max_message_mb=args.max_message_mb, **server_kwargs(args)))


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
