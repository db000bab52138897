"""Transfers batched: many nodes' transfers in one pass end exactly as each alone, however they are split."""

from __future__ import annotations

import os
import threading
import time

import numpy as np
import pytest

from edgetune.devices.simulated.tables import truth_table
from edgetune.estimation.bundle import TimePowerModel, transfer_tables
from edgetune.estimation.jobs import Rows, Runner, TransferBatcher, TransferJob
from edgetune.powermodes.grids import named_grid
from edgetune.powermodes.specs import get_spec
from edgetune.tables import Table

NN = {"transfer_epochs": 15}


def _table(workload: str, seed: int, n: int) -> Table:
    spec = get_spec("orin-agx")
    modes = named_grid(spec, "fulcrum").modes()
    rng = np.random.default_rng(seed)
    rows = truth_table(spec, workload, "train", [modes[i] for i in sorted(rng.choice(len(modes), n, replace=False))],
                       [16])
    for r in rows:
        r["time_ms"] *= float(rng.normal(1.0, 0.03))
    return Table(list(rows[0]), rows)


@pytest.fixture(scope="module")
def reference() -> TimePowerModel:
    return TimePowerModel.fit_table(_table("resnet18", 0, 60), "nn", epochs=5)


GRID = named_grid(get_spec("orin-agx"), "fulcrum").array()


def _files(model: TimePowerModel) -> list[list[float]]:
    """What a model says on the whole grid (its files differ only in the seconds they record)."""
    from edgetune.estimation.features import mode_features

    out = model.predict(mode_features(GRID, np.full(len(GRID), 16), model.columns))
    return [out[k].tolist() for k in sorted(out)]


@pytest.mark.parametrize("method", ["nn+gp", "transfer"])
def test_a_batch_of_transfers_equals_each_alone_whatever_the_split(reference, method):
    tables = [_table("mobilenetv3", s, n) for s, n in ((1, 12), (2, 12), (3, 13), (4, 24))]
    alone = [reference.transfer_table(t, method, nn_settings=NN) for t in tables]
    for chunks in (1, 3):
        together = reference.transfer_tables(tables, method, nn_settings=NN, chunks=chunks)
        assert [_files(m) for m in together] == [_files(m) for m in alone]
    mu = alone[0].predict(np.asarray([[8, 2201.6, 1300.5, 3199.0]]))["time_ms"]
    assert np.all(np.isfinite(mu)) and mu[0] > 0


def test_transfers_from_different_references_batch_together_and_equal_each_alone(reference):
    # a fleet's refits: each node fine-tunes its own model again, in one batch with the others' (and with
    # transfers from the shared reference)
    own = reference.transfer_table(_table("mobilenetv3", 9, 12), "nn+gp", nn_settings=NN)
    tables = [_table("mobilenetv3", s, 13) for s in (1, 2, 3)]
    bases = [own, reference, own]
    alone = [b.transfer_table(t, "nn+gp", nn_settings=NN) for b, t in zip(bases, tables, strict=True)]
    for chunks in (1, 2):
        together = transfer_tables(bases, tables, "nn+gp", nn_settings=NN, chunks=chunks)
        assert [_files(m) for m in together] == [_files(m) for m in alone]
    assert _files(alone[0]) != _files(reference.transfer_table(tables[0], "nn+gp", nn_settings=NN))  # bases matter
    assert [len(m.history) for m in together] == [len(b.history) + 1 for b in bases]  # each its base's lineage


def _job(reference: TimePowerModel, seed: int) -> TransferJob:
    t = _table("mobilenetv3", seed, 12)
    rows = Rows(np.asarray([[r["cores"], r["cpu_mhz"], r["gpu_mhz"], r["emc_mhz"]] for r in t.rows], dtype=float),
                np.asarray([16] * len(t)), t.column("time_ms"), t.column("power_w"), "request")
    return TransferJob(reference, "ref@1", "orin-agx", "mobilenetv3", "train", "nn+gp", rows, {}, dict(NN))


def test_transfers_arriving_together_run_as_one_batch_with_the_same_results(reference, monkeypatch):
    from edgetune.estimation import jobs

    sizes: list[int] = []
    real = jobs.transfer_models
    monkeypatch.setattr(jobs, "transfer_models", lambda js, runner: sizes.append(len(js)) or real(js, runner))
    batcher = TransferBatcher(Runner(parallel=False), window_s=0.5)
    js = [_job(reference, s) for s in range(4)]
    got: dict[int, object] = {}
    threads = [threading.Thread(target=lambda i=i: got.__setitem__(i, batcher.run(js[i]))) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    assert sizes == [4]
    alone = [real([j], Runner(parallel=False))[0] for j in js]
    assert [_files(got[i].model) for i in range(4)] == [_files(a.model) for a in alone]  # type: ignore[attr-defined]


def test_a_failing_job_fails_only_its_own_caller(reference):
    batcher = TransferBatcher(Runner(parallel=False), window_s=0.3)
    good, bad = _job(reference, 1), _job(reference, 2)
    bad.rows.time_ms[:] = np.nan  # the pipeline refuses it
    out: dict[str, object] = {}

    def call(name: str, job: TransferJob) -> None:
        try:
            out[name] = batcher.run(job)
        except Exception as exc:  # noqa: BLE001
            out[name] = exc

    threads = [threading.Thread(target=call, args=a) for a in (("good", good), ("bad", bad))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    assert isinstance(out["bad"], Exception)
    assert not isinstance(out["good"], Exception)


def test_a_pool_of_processes_gives_the_same_models_and_uses_every_worker(reference):
    from edgetune.estimation import parallel

    tables = [_table("mobilenetv3", s, 12) for s in range(4)]
    runner = Runner(parallel=False, processes=2)
    try:
        # Both workers up before the work (the pool starts them without waiting): on a loaded machine the one
        # that imported first otherwise takes both chunks while the other still imports torch.
        pool, seen, deadline = parallel.ensure_pool(2), set(), time.monotonic() + 120
        while len(seen) < 2 and time.monotonic() < deadline:
            seen |= {f.result() for f in [pool.submit(os.getpid) for _ in range(2)]}
        pooled = reference.transfer_tables(tables, "nn+gp", runner=runner.run, nn_settings=NN, chunks=2)
        placed = set(runner.placements)
    finally:
        parallel.shutdown_pool()
    assert [_files(m) for m in pooled] == [_files(m) for m in reference.transfer_tables(tables, "nn+gp",
                                                                                       nn_settings=NN)]
    assert len(runner.placements) == 4 and len(placed) == 2
