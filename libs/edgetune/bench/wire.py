"""Benchmarks of prediction tables on the wire: real estimator and optimizer servers on
loopback gRPC, columnar ``PredictionTable`` messages. The servers run as processes, as deployed
(``python -m edgetune.services.<name>.server`` over one redis-server, started through
:class:`~edgetune.localrun.localcluster.LocalCluster`); the bench's process is only their client.

- ``predict_select_18096_e2e``: ``Optimizer.Select`` over all 18,096 Orin AGX modes named by model
  (``candidates.model``, ``id@version``): the optimizer reads the predictions from the estimator
  (``--estimator``) once and keeps them per version, timed end to end in the client; beside it the
  two-hop form (``via_client``: ``Estimator.Predict`` streamed to the client, its rows sent on to Select). The estimator
  runs its jobs in its own process (``--no-ray``; Ray only runs Fit / Transfer, which are set-up
  here, not timed). Its grid predictions are cached per model version, so the repeated calls time
  what a budget re-select costs; the first (uncached) call is reported as ``cold_ms``.
- ``optimizer_select_throughput``: ``Optimizer.Select`` requests per second with 8 client threads
  at 441 / 4,368 / 18,096 inline rows, next to the same measurement of the per-row ``Prediction``
  form on main's code before the change (:data:`BEFORE_PER_ROW`, measured on this machine).
"""

from __future__ import annotations

import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import grpc
import numpy as np

from edgetune.base.mode import PowerMode
from edgetune.base.objective import Objective
from edgetune.base.records import Predictions
from edgetune.bench.runner import benchmark
from edgetune.clients.estimator import EstimatorClient
from edgetune.clients.optimizer import OptimizerClient
from edgetune.devices.simulated.device import SimulatedJetson
from edgetune.devices.simulated.tables import truth_table
from edgetune.estimation.records import FitSpec, MeasuredRow, PredictSpec
from edgetune.localrun.localcluster import LocalCluster
from edgetune.optimization.records import SelectQuery, Verdict
from edgetune.powermodes.grids import modes_array, named_grid
from edgetune.powermodes.specs import get_spec
from edgetune.proto.serde.optimizer import select_to_proto

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
def _servers() -> Iterator[tuple[EstimatorClient, OptimizerClient, str]]:
    """An estimator (``--no-ray``: its jobs one after another in its process) and an optimizer on
    loopback, as processes sharing one redis-server; yields their typed clients and the optimizer's
    address."""

    with tempfile.TemporaryDirectory(prefix="edgetune-wire-") as tmp:
        cluster = LocalCluster(Path(tmp), log_level="WARNING", grace_s=1.0)
        channels: list[grpc.Channel] = []
        try:
            cluster.start(coordinator=False)  # Redis only: no coordinator takes part
            est = cluster.start_service("estimator", "edgetune.v1.Estimator", ["--no-ray", "--max-workers", "4"])
            # the optimizer reads a Select's candidates named by model from the estimator (kept per version)
            opt = cluster.start_service("optimizer", "edgetune.v1.Optimizer",
                                        ["--max-workers", "8", "--estimator", est.address])
            channels = [grpc.insecure_channel(est.address, options=CHANNEL_OPTIONS),
                        grpc.insecure_channel(opt.address, options=CHANNEL_OPTIONS)]
            yield EstimatorClient(channels[0]), OptimizerClient(channels[1]), opt.address
        finally:
            for c in channels:
                c.close()
            cluster.close()


def _percentiles_ms(samples_s: list[float]) -> dict[str, float]:
    ms = np.asarray(samples_s) * 1e3
    return {"p50_ms": round(float(np.percentile(ms, 50)), 2), "p95_ms": round(float(np.percentile(ms, 95)), 2),
            "min_ms": round(float(ms.min()), 2), "calls": int(ms.size)}


@benchmark("predict_select_18096_e2e", "Estimator.Predict -> Optimizer.Select over all 18,096 Orin modes, "
           "end to end on loopback (the servers as processes, the estimator without Ray; the Select names the "
           "model, the optimizer reads its predictions) p50 <= 10 ms", "p50_s", 0.010)
def predict_select() -> dict[str, Any]:
    spec = get_spec("orin-agx")
    rows = truth_table(spec, "resnet18", "train", named_grid(spec, "fulcrum").modes(), [16])
    measurements = tuple(MeasuredRow(PowerMode.from_mapping(r), r["batch_size"], r["time_ms"], r["power_w"])
                         for r in rows)
    with _servers() as (estimator, optimizer, _):
        model = estimator.fit(FitSpec("orin-agx", "resnet18", measurements=measurements, epochs=20, seed=0))

        grid = PredictSpec(model.model_id, grid="full")

        def via_client() -> tuple[Verdict, int]:
            # The client reads the streamed chunks into one table of rows and sends them on: the
            # optimizer checks them, as it checks every inline table.
            pool = estimator.predict(grid)
            return optimizer.select(SelectQuery(pool, Objective.MIN_TIME, power_budget_w=30.0))[0], len(pool)

        def by_model() -> Verdict:
            # The Select names the model (id@version): the optimizer reads its grid predictions from the
            # estimator once and keeps them, so a re-select sends no table over the wire
            return optimizer.select(SelectQuery(grid, Objective.MIN_TIME, power_budget_w=30.0))[0]

        def timed(fn, n: int = 30) -> list[float]:
            out = []
            for _ in range(n):
                t0 = time.perf_counter()
                fn()
                out.append(time.perf_counter() - t0)
            return out

        t0 = time.perf_counter()
        decision = by_model()
        cold_s = time.perf_counter() - t0
        samples = timed(by_model)
        _, n = via_client()
        client_samples = timed(via_client)
        agree = via_client()[0].mode == decision.mode
    stats = _percentiles_ms(samples)
    return {"p50_s": stats["p50_ms"] / 1e3, **stats, "cold_ms": round(cold_s * 1e3, 2), "rows": n,
            "feasible": bool(decision.feasible), "same_choice_both_ways": bool(agree),
            "via_client": _percentiles_ms(client_samples),
            "how": "Select naming the model (candidates.model, id@version): the optimizer reads the 18,096 "
                   "predictions from the estimator once (cold_ms) and keeps them per version; via_client: Predict "
                   "streamed to the client, then its rows sent to Select (the table crosses the wire twice)",
            "runner": "the estimator's process (--no-ray)",
            "before_per_row": BEFORE_PER_ROW["predict_select_18096"],
            "speedup_p50": round(BEFORE_PER_ROW["predict_select_18096"]["p50_ms"] / stats["p50_ms"], 1)}


def _throughput(address: str, query: SelectQuery, clients: int, seconds: float) -> float:
    """Requests per second of ``clients`` threads (one channel each) calling Select for ``seconds``."""
    done: list[int] = []
    lock = threading.Lock()
    stop = time.perf_counter() + seconds

    def work() -> None:
        with grpc.insecure_channel(address, options=CHANNEL_OPTIONS) as channel:
            client = OptimizerClient(channel)
            n = 0
            while time.perf_counter() < stop:
                client.select(query)
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
    dev = SimulatedJetson("orin-agx")
    out: dict[str, Any] = {}
    with _servers() as (_, optimizer, address):
        for grid in ("fulcrum", "powertrain", "full"):
            modes = modes_array(dev.spec, grid)
            n = len(modes)
            rows = Predictions(modes, np.full(n, 16), dev.true_time_ms(modes, "resnet18", "train", 16),
                               dev.true_power_w(modes, "resnet18", "train", 16))
            query = SelectQuery(rows, Objective.MIN_TIME, power_budget_w=30.0)
            optimizer.select(query)
            latency = []
            for _ in range(20):
                t0 = time.perf_counter()
                optimizer.select(query)
                latency.append(time.perf_counter() - t0)
            rps = _throughput(address, query, CLIENTS, THROUGHPUT_S)
            before = BEFORE_PER_ROW["select_8_clients"][str(n)]
            out[str(n)] = {"rps_8_clients": round(rps, 1), "p50_ms_1_client": _percentiles_ms(latency)["p50_ms"],
                           "bytes": select_to_proto(query).ByteSize(), "before_per_row": before,
                           "speedup": round(rps / before["rps_8_clients"], 1)}
    return {"rps_4368": out["4368"]["rps_8_clients"], "clients": CLIENTS, "seconds_per_size": THROUGHPUT_S,
            "by_rows": out}
