"""Estimation across machines: one job's transfers spread over a two-node Ray cluster on loopback.

A head and a worker are started with ``ray start`` as separate processes, each with its own CPU
(``--num-cpus 1``); the estimator's runner joins the cluster by address (what ``--ray-address`` does)
and one batch of transfers (two per target) runs there. The tasks land on both nodes and the models
equal the ones the same transfers give in one process.
"""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from edgetune.devices.simulated.tables import truth_table
from edgetune.estimation import parallel
from edgetune.estimation.bundle import TimePowerModel
from edgetune.estimation.features import mode_features
from edgetune.estimation.jobs import Runner
from edgetune.localrun.processes import free_port
from edgetune.powermodes.grids import named_grid
from edgetune.powermodes.specs import get_spec
from edgetune.tables import Table

pytest.importorskip("ray")

NN = {"transfer_epochs": 15}
GRID = named_grid(get_spec("orin-agx"), "fulcrum").array()


def _table(workload: str, seed: int, n: int) -> Table:
    rng = np.random.default_rng(seed)
    rows = truth_table("orin-agx", workload, "train", GRID[np.sort(rng.choice(len(GRID), n, replace=False))], [16])
    return Table(list(rows[0]), rows)


def _files(model: TimePowerModel) -> list[list[float]]:
    out = model.predict(mode_features(GRID, np.full(len(GRID), 16), model.columns))
    return [out[k].tolist() for k in sorted(out)]


RAY = [sys.executable, "-c", "import sys; from ray.scripts.scripts import main; sys.exit(main())"]


def _ray(*args: str, env: dict[str, str]) -> None:
    done = subprocess.run([*RAY, *args], env=env, timeout=240, capture_output=True, text=True)
    assert done.returncode == 0, f"ray {' '.join(args)} failed:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}"


def _stop(marker: str) -> None:
    """End the Ray processes of this test's nodes only (their command lines name its temp dir), and their
    children; never ``ray stop``, which ends every Ray on the machine."""
    import signal
    from pathlib import Path

    def ours() -> list[int]:
        found = []
        for d in Path("/proc").iterdir():
            try:
                if d.name.isdigit() and marker in (d / "cmdline").read_bytes().decode(errors="replace"):
                    found.append(int(d.name))
            except OSError:
                continue
        return found

    for sig in (signal.SIGTERM, signal.SIGKILL):
        pids = ours()
        children = []
        for p in pids:
            try:
                children += [int(c) for c in Path(f"/proc/{p}/task/{p}/children").read_text().split()]
            except OSError:  # gone already
                continue
        for pid in pids + children:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        if sig == signal.SIGTERM:
            import time

            time.sleep(3)


@pytest.fixture
def two_node_cluster():
    env = {**os.environ, "RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO": "0"}
    port = free_port()
    address = f"127.0.0.1:{port}"
    import shutil
    import tempfile

    temp = tempfile.mkdtemp(prefix="etray-", dir="/tmp")  # short: Ray's unix sockets live under it (107 bytes)
    try:
        _ray("start", "--head", "--node-ip-address", "127.0.0.1", "--port", str(port), "--num-cpus", "1",
             "--include-dashboard", "false", "--temp-dir", temp, "--disable-usage-stats", env=env)
        _ray("start", "--address", address, "--node-ip-address", "127.0.0.1", "--num-cpus", "1",
             "--temp-dir", temp, "--disable-usage-stats", env=env)
        yield address
    finally:
        parallel.shutdown()
        _stop(temp)
        shutil.rmtree(temp, ignore_errors=True)


def test_a_jobs_transfers_run_on_both_nodes_with_the_single_process_results(two_node_cluster):
    import ray  # noqa: PLC0415 - heavy; skipped above when missing

    reference = TimePowerModel.fit_table(_table("resnet18", 0, 60), "nn", epochs=5)
    tables = [_table("mobilenetv3", s, 12) for s in range(4)]
    runner = Runner(parallel=True, address=two_node_cluster)
    runner.start()
    try:
        nodes = {n["NodeID"] for n in ray.nodes() if n["Alive"]}
        assert len(nodes) == 2 and runner.workers == 2
        spread = reference.transfer_tables(tables, "nn+gp", runner=runner.run, nn_settings=NN, chunks=runner.workers)
        placed = list(runner.placements)
    finally:
        parallel.shutdown()
    assert len(placed) == 4 and set(placed) == nodes  # both nodes ran tasks of the one batch
    alone = reference.transfer_tables(tables, "nn+gp", nn_settings=NN)
    assert [_files(m) for m in spread] == [_files(m) for m in alone]
    assert np.isfinite(_files(spread[0])[0]).all()
