"""The profiler agent's entry point: ``python -m edgetune.services.profiler.server`` or
``edgetune serve profiler``.

Start-up order matters for safety: open the device, take the per-device lock, recover a mode
a crashed previous agent left applied (``--state-dir`` holds its record), open the store,
then serve. Shutdown (SIGTERM / SIGINT, or ``stop()``): health goes NOT_SERVING, in-flight
RPCs get ``--grace-s``, then the hooks run: cancel profiles and wait for their workers,
restore the power mode and release the device lock, close the store.

Flags (each also read from ``EDGETUNE_<NAME>``): ``--device`` (``sim:<model>``,
``sysfs[:ROOT]``, ``replay:FILE.csv``), ``--redis`` (``embedded`` by default; ``none`` stores
nothing), ``--state-dir``, ``--node-id``, ``--seed``, ``--coordinator`` (with it the agent
registers, heartbeats, runs profiling jobs and applies pushed configs: :mod:`.link`),
``--power-budget-w``, ``--advertise``, ``--telemetry-hz`` (the continuous telemetry sampler
behind the power / energy / temperature / throttling metrics; 1 Hz, 0 turns it off),
``--telemetry-source`` (``auto``: jetson-stats' jtop when its service runs, else the device),
``--workload-path`` (directories a job's ``MODULE:FUNCTION`` workload may be imported from, by
name; empty: zoo workloads only) and
the common server flags (``--host``, ``--port``,
``--metrics-port``, ``--max-workers``, ``--grace-s``, ``--log-level``).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from edgetune import validation
from edgetune.agent import metrics
from edgetune.agent.link import CoordinatorLink, advertised_address
from edgetune.agent.node import NodeAgent
from edgetune.agent.safety import default_state_dir, open_guarded_device, state_file_name
from edgetune.base.workload import split_workload_path
from edgetune.control.jobs import DEFAULT_IDLE_TIMEOUT_MS
from edgetune.devices.factory import open_device
from edgetune.identity import ClientSecurity, ServerSecurity
from edgetune.proto.v1 import profiler_pb2_grpc
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
from edgetune.services.profiler.servicer import ProfilerServicer
from edgetune.store import Store
from edgetune.telemetry.jtop import TELEMETRY_SOURCES, telemetry_reader

log = logging.getLogger("edgetune.profiler")

DEFAULT_PORT = 50051
#: Telemetry rate: one read of a few sysfs files per second costs well under 0.1 % of a core.
DEFAULT_TELEMETRY_HZ = 1.0


def create_server(device_spec: str, port: int = DEFAULT_PORT, redis_url: str | None = "embedded",
                  state_dir: str | os.PathLike | None = None, metrics_port: int | None = None, *,
                  host: str = "", node_id: str = "", seed: int = 0, grace_s: float = 10.0,
                  max_workers: int = 16, store: Store | None = None, ready_file: str | None = None,
                  telemetry_hz: float = DEFAULT_TELEMETRY_HZ, telemetry_source: str = "auto",
                  workload_path: str | Sequence[str | os.PathLike] = (),
                  security: ServerSecurity | None = None,
                  health_port: int | None = None) -> tuple[ServiceServer, NodeAgent]:
    """The agent's server, not yet started, and the node agent it serves (see :func:`serve` for the
    arguments).

    The device is open and locked and a crashed run's mode already recovered; the shutdown
    hooks are registered, so ``server.stop()`` restores the mode even if it never started.
    """
    state_dir = Path(state_dir) if state_dir else default_state_dir()
    state_path = state_dir / state_file_name(device_spec)
    keeper, recovered = open_guarded_device(lambda: open_device(device_spec, seed=seed), state_path,
                                            on_mode=metrics.set_mode)
    if recovered is not None:
        log.warning("restored the power mode a previous agent left applied",
                    extra={"mode": recovered.label(), "state_file": str(state_path)})
    try:
        # Reads only (never the device lock): telemetry runs beside profiles, idle or not. Chosen
        # before the server exists, so a bad source fails with nothing else to undo.
        read = telemetry_reader(keeper.device, telemetry_source) if telemetry_hz else None
        owner = OwnedStore(store, redis_url, optional=True)
        with owner as store:
            paths = split_workload_path(workload_path) if isinstance(workload_path, str) else \
                [Path(p) for p in workload_path]
            agent = NodeAgent(keeper, store=store, node_id=node_id, workload_path=paths)
            server = build_server("profiler", [(ProfilerServicer(agent), profiler_pb2_grpc.add_ProfilerServicer_to_server)],
                                  host=host, port=port, metrics_port=metrics_port, grace_s=grace_s,
                                  max_workers=max_workers, ready_file=ready_file, security=security,
                                  audit_store=store, health_port=health_port)
    except BaseException:
        keeper.close()
        raise
    # Hooks run last-registered first: telemetry and workers stop, then the mode comes back, then
    # the store closes.
    owner.close_with(server)
    server.on_shutdown.append(keeper.close)
    server.on_shutdown.append(agent.shutdown)
    if read is not None:
        server.on_shutdown.append(agent.start_telemetry(read, telemetry_hz).stop)
    log.info("profiler agent ready", extra={
        "device": device_spec, "model": keeper.device.spec.name, "backend": keeper.device.backend,
        "mode": keeper.device.current_mode().label(), "port": server.port, "state_file": str(state_path),
        "store": repr(store) if store is not None else "none",
        "workload_path": os.pathsep.join(str(p) for p in agent.workload_path)})
    return server, agent


def link_to_coordinator(server: ServiceServer, agent: NodeAgent, coordinator: str, address: str, *,
                        power_budget_w: float | None = None,
                        job_idle_timeout_ms: int = DEFAULT_IDLE_TIMEOUT_MS,
                        client: ClientSecurity | None = None) -> CoordinatorLink:
    """Start the agent's coordinator link for a started ``server`` reachable at ``address``; it stops
    first on shutdown (hooks run last-registered first), before profiles are cancelled and the mode
    restored."""
    link = CoordinatorLink(agent, coordinator, address, power_budget_w=power_budget_w,
                           job_idle_timeout_ms=job_idle_timeout_ms, security=client)
    server.on_shutdown.append(link.stop)
    return link.start()


def serve(device_spec: str, port: int = DEFAULT_PORT, redis_url: str | None = "embedded",
          state_dir: str | os.PathLike | None = None, metrics_port: int | None = None, *,
          block: bool = True, coordinator: str = "", power_budget_w: float | None = None, advertise: str = "",
          job_idle_timeout_ms: int = DEFAULT_IDLE_TIMEOUT_MS, client: ClientSecurity | None = None,
          **kwargs: Any) -> ServiceServer:
    """Start the agent for ``device_spec``; with ``block`` serve until SIGTERM / SIGINT.

    ``redis_url``: a store URL (``embedded`` by default, ``none``: measurements are streamed,
    not stored). ``state_dir``: where the mode-restore record lives (default
    :func:`default_state_dir`). ``coordinator``: host:port to register with (with
    ``power_budget_w`` and the ``advertise`` address, default the bind host or hostname and
    port); its profiling jobs come from the store. Keywords: ``host``, ``node_id``, ``seed``,
    ``grace_s``, ``max_workers``, ``store`` (a Store object to use instead of ``redis_url``;
    the caller owns it), ``security`` (TLS / authentication of this server). ``client``: how the
    link calls the coordinator (TLS, token). ``block=False`` returns the started server
    (``server.port``, ``server.stop()``).
    """
    server, agent = create_server(device_spec, port, redis_url, state_dir, metrics_port, **kwargs)
    server.start()  # before the link: the address it registers must already answer
    if coordinator:
        try:
            address = advertise or advertised_address(server.host, server.port)
            link_to_coordinator(server, agent, coordinator, address, power_budget_w=power_budget_w,
                                job_idle_timeout_ms=job_idle_timeout_ms, client=client)
        except BaseException:
            server.stop(0)
            raise
    if not block:
        return server
    server.serve()  # stops on SIGTERM / SIGINT or any exit, which restores the mode
    return server


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="edgetune serve profiler",
                                     description="The edgetune profiler agent: one per Jetson.")
    add_server_options(parser, default_port=DEFAULT_PORT)
    add_option(parser, "device", "sysfs", "device backend: sim:<model>, sysfs[:ROOT], replay:FILE.csv")
    add_option(parser, "redis", "embedded",
               "measurement store: redis://host:port/db, unix:///path, embedded[:/dir], or none")
    add_option(parser, "state_dir", "", f"directory of the mode-restore record (default {default_state_dir()})")
    add_option(parser, "node_id", "", "node id recorded in measurements (empty: unregistered)")
    add_option(parser, "seed", 0, "seed of a simulated device's noise")
    add_option(parser, "coordinator", "", "coordinator host:port: register, heartbeat, run its profiling jobs "
               "(from --redis) and apply pushed configs (empty: standalone)")
    add_option(parser, "power_budget_w", 0.0, "this node's power budget registered with the coordinator (0: none)")
    # the CLI's name for a budget everywhere; a node registers one value, so a sweep A:B[:STEP] is refused
    parser.add_argument("--power-budget", dest="power_budget_w", type=_one_budget_w, metavar="W",
                        default=argparse.SUPPRESS, help="the same as --power-budget-w")
    add_option(parser, "telemetry_hz", DEFAULT_TELEMETRY_HZ,
               "continuous telemetry rate in Hz (power, energy, temperatures, clocks, throttling); 0: off")
    add_option(parser, "telemetry_source", "auto",
               "where telemetry is read: device (sysfs / simulator), jtop (jetson-stats' service), or auto "
               "(jtop when its service runs on a sysfs device)", choices=TELEMETRY_SOURCES)
    add_option(parser, "workload_path", "", "directories (separated by ':') the agent may import a job's "
               "MODULE:FUNCTION workload from, by name; empty: zoo workloads only (code never comes from a request)")
    add_option(parser, "advertise", "", "address the coordinator's clients reach this agent at "
               "(default: --host, else $EDGETUNE_POD_IP or the hostname, with the port)")
    add_option(parser, "job_idle_timeout_ms", DEFAULT_IDLE_TIMEOUT_MS,
               "a profiling job another agent claimed and has not acknowledged for this long (it died) is "
               "taken over by this one")
    return parser.parse_args(argv)


def _one_budget_w(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r}: a node registers one power budget in W (a sweep A:B[:STEP] is for commands that try "
            "several)") from None


def _start(args: argparse.Namespace) -> None:
    if args.power_budget_w != 0:  # 0: the flag's "none"
        validation.power_budget_w(args.power_budget_w, "--power-budget-w")
    if args.telemetry_hz != 0:  # 0: off
        validation.sample_rate_hz(args.telemetry_hz, "--telemetry-hz")
    serve(args.device, redis_url=args.redis, state_dir=args.state_dir or None, node_id=args.node_id,
          seed=args.seed, coordinator=args.coordinator, power_budget_w=args.power_budget_w or None,
          advertise=args.advertise, telemetry_hz=args.telemetry_hz, telemetry_source=args.telemetry_source,
          workload_path=args.workload_path, job_idle_timeout_ms=args.job_idle_timeout_ms,
          client=client_security(args), **server_kwargs(args))


def main(argv: Sequence[str] | None = None) -> int:
    return run_main("profiler", argv, parse_args, _start)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
