"""Benchmarks of prediction tables on the wire: real estimator and optimizer servers on
loopback gRPC, columnar ``PredictionTable`` messages.

- ``predict_select_18096_e2e``: ``Estimator.Predict`` of all 18,096 Orin AGX modes (streamed
  chunks) -> one table (``merge_tables``) -> ``Optimizer.Select``, timed end to end in the client. The estimator
  runs its jobs in-process (``use_ray=False``; Ray only runs Fit / Transfer, which are set-up
  here, not timed). Its grid predictions are cached per model version, so the repeated calls time
  what a budget re-select costs; the first (uncached) call is reported as ``cold_ms``.
- ``optimizer_select_throughput``: ``Optimizer.Select`` requests per second with 8 client threads
  at 441 / 4,368 / 18,096 inline rows, next to the same measurement of the per-row ``Prediction``
  form on main's code before the change (:data:`BEFORE_PER_ROW`, measured on this machine).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

from edgetune.bench.runner import benchmark

#: Optimizer.Select with per-row Prediction messages (main at b3fb878, before the columnar tables),
#: 8 client threads for 4 s each, this 2-core machine, 2026-11-25: requests/s, one client's p50 in
#: ms, and the request's size in bytes. Predict -> Select over 18,096 modes took p50 724 ms,
#: p95 1,925 ms (15 calls).
BEFORE_PER_ROW: dict[str, Any] = {
    "select_8_clients": {
        "441": {"rps_8_clients": 315.8, "p50_ms_1_client": 2.43, "bytes": 23394},
        "4368": {"rps_8_clients": 35.4, "p50_ms_1_client": 44.38, "bytes": 231525},
        "18096": {"rps_8_clients": 5.1, "p50_ms_1_client": 116.6, "bytes": 959109},
    },
    "predict_select_18096": {"p50_ms": 724.4, "p95_ms": 1924.9, "calls": 15},
}
CLIENTS = 8
THROUGHPUT_S = 4.0
#: Large requests: a client may send more than gRPC's default 4 MiB (not needed by tables of 18k rows).
CHANNEL_OPTIONS = [("grpc.max_send_message_length", 64 << 20), ("grpc.max_receive_message_length", 64 << 20)]


@contextmanager
def _servers() -> Iterator[tuple[Any, Any, str]]:
    """An estimator (in-process runner) and an optimizer on loopback, sharing an embedded store;
    yields their stubs."""
    import grpc

    from edgetune.proto.v1 import estimator_pb2_grpc, optimizer_pb2_grpc
    from edgetune.services.estimator.server import create_server as estimator_server
    from edgetune.services.optimizer.server import create_server as optimizer_server
    from edgetune.store import open_store

    store = open_store("embedded")
    est, _ = estimator_server(port=0, host="127.0.0.1", metrics_port=None, store=store, grace_s=1.0, max_workers=4,
                              use_ray=False)
    opt, _ = optimizer_server(port=0, host="127.0.0.1", metrics_port=None, store=store, grace_s=1.0, max_workers=8)
    est.start()
    opt.start()
    channels = [grpc.insecure_channel(est.address, options=CHANNEL_OPTIONS),
                grpc.insecure_channel(opt.address, options=CHANNEL_OPTIONS)]
    try:
        yield (estimator_pb2_grpc.EstimatorStub(channels[0]), optimizer_pb2_grpc.OptimizerStub(channels[1]),
               opt.address)
    finally:
        for c in channels:
            c.close()
        est.stop(0)
        opt.stop(0)
        store.close()


def _percentiles_ms(samples_s: list[float]) -> dict[str, float]:
    ms = np.asarray(samples_s) * 1e3
    return {"p50_ms": round(float(np.percentile(ms, 50)), 2), "p95_ms": round(float(np.percentile(ms, 95)), 2),
            "min_ms": round(float(ms.min()), 2), "calls": int(ms.size)}


@benchmark("predict_select_18096_e2e", "Estimator.Predict -> Optimizer.Select over all 18,096 Orin modes, "
           "end to end on loopback (real servers, estimator in-process runner) p50 < 50 ms", "p50_s", 0.050)
def predict_select() -> dict[str, Any]:
    from edgetune.devices.simulated.tables import truth_table
    from edgetune.powermodes.grids import named_grid
    from edgetune.powermodes.specs import get_spec
    from edgetune.proto.serde.tables import merge_tables
    from edgetune.proto.v1 import common_pb2, estimator_pb2, optimizer_pb2

    spec = get_spec("orin-agx")
    rows = truth_table(spec, "resnet18", "train", named_grid(spec, "fulcrum").modes(), [16])
    measurements = [common_pb2.Measurement(
        mode=common_pb2.PowerMode(cores=r["cores"], cpu_mhz=r["cpu_mhz"], gpu_mhz=r["gpu_mhz"], emc_mhz=r["emc_mhz"]),
        batch_size=r["batch_size"], time_ms=r["time_ms"], power_w=r["power_w"]) for r in rows]
    with _servers() as (estimator, optimizer, _):
        model = estimator.Fit(estimator_pb2.FitRequest(device="orin-agx", workload="resnet18",
                                                       role=common_pb2.ROLE_TRAIN, measurements=measurements,
                                                       epochs=20, seed=0)).model
        budgets = common_pb2.Budgets(power_budget_w=30.0)

        def once() -> tuple[Any, int]:
            # The client forwards the streamed chunks as one table (merged in protobuf's C code, not
            # decoded): the optimizer checks it, as it checks every inline table.
            table = merge_tables(c.table for c in estimator.Predict(
                estimator_pb2.PredictRequest(model_id=model.model_id, grid=common_pb2.GRID_FULL)))
            reply = optimizer.Select(optimizer_pb2.SelectRequest(
                candidates=optimizer_pb2.Candidates(table=table), objective=optimizer_pb2.OBJECTIVE_MIN_TIME,
                budgets=budgets))
            return reply.decisions[0], len(table.time_ms)

        t0 = time.perf_counter()
        decision, n = once()
        cold_s = time.perf_counter() - t0
        samples = []
        for _ in range(30):
            t0 = time.perf_counter()
            once()
            samples.append(time.perf_counter() - t0)
    stats = _percentiles_ms(samples)
    return {"p50_s": stats["p50_ms"] / 1e3, **stats, "cold_ms": round(cold_s * 1e3, 2), "rows": n,
            "feasible": bool(decision.feasible), "runner": "in-process (use_ray=False)",
            "before_per_row": BEFORE_PER_ROW["predict_select_18096"],
            "speedup_p50": round(BEFORE_PER_ROW["predict_select_18096"]["p50_ms"] / stats["p50_ms"], 1)}


def _throughput(address: str, request: Any, clients: int, seconds: float) -> float:
    """Requests per second of ``clients`` threads (one channel each) calling Select for ``seconds``."""
    import grpc

    from edgetune.proto.v1 import optimizer_pb2_grpc

    done: list[int] = []
    lock = threading.Lock()
    stop = time.perf_counter() + seconds

    def work() -> None:
        with grpc.insecure_channel(address, options=CHANNEL_OPTIONS) as channel:
            stub = optimizer_pb2_grpc.OptimizerStub(channel)
            n = 0
            while time.perf_counter() < stop:
                stub.Select(request)
                n += 1
        with lock:
            done.append(n)

    t0 = time.perf_counter()
    threads = [threading.Thread(target=work) for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sum(done) / (time.perf_counter() - t0)


@benchmark("optimizer_select_throughput", "Optimizer.Select requests/s, 8 client threads, at 441 / 4,368 / 18,096 "
           "inline rows (columnar) next to the per-row form before; reported", "rps_4368")
def select_throughput() -> dict[str, Any]:
    from edgetune.base.records import Predictions
    from edgetune.devices.simulated.device import SimulatedJetson
    from edgetune.powermodes.grids import modes_array
    from edgetune.proto.serde.tables import table_to_proto
    from edgetune.proto.v1 import common_pb2, optimizer_pb2

    dev = SimulatedJetson("orin-agx")
    out: dict[str, Any] = {}
    with _servers() as (_, optimizer, address):
        for grid in ("fulcrum", "powertrain", "full"):
            modes = modes_array(dev.spec, grid)
            n = len(modes)
            rows = Predictions(modes, np.full(n, 16), dev.true_time_ms(modes, "resnet18", "train", 16),
                               dev.true_power_w(modes, "resnet18", "train", 16))
            request = optimizer_pb2.SelectRequest(
                candidates=optimizer_pb2.Candidates(table=table_to_proto(rows)),
                objective=optimizer_pb2.OBJECTIVE_MIN_TIME, budgets=common_pb2.Budgets(power_budget_w=30.0))
            optimizer.Select(request)
            latency = []
            for _ in range(20):
                t0 = time.perf_counter()
                optimizer.Select(request)
                latency.append(time.perf_counter() - t0)
            rps = _throughput(address, request, CLIENTS, THROUGHPUT_S)
            before = BEFORE_PER_ROW["select_8_clients"][str(n)]
            out[str(n)] = {"rps_8_clients": round(rps, 1), "p50_ms_1_client": _percentiles_ms(latency)["p50_ms"],
                           "bytes": request.ByteSize(), "before_per_row": before,
                           "speedup": round(rps / before["rps_8_clients"], 1)}
    return {"rps_4368": out["4368"]["rps_8_clients"], "clients": CLIENTS, "seconds_per_size": THROUGHPUT_S,
            "by_rows": out}
