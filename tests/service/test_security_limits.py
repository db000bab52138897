"""Issue 25, fair limits: a flood of anonymous calls cannot push genuine records out of the audit
stream; viewers cannot take the heavy slots an operator's Fit needs; watch streams are capped per
caller and give their threads back when they end.

The flood runs ``EDGETUNE_TEST_FLOOD_S`` seconds: 5 by default (CI), 60 as in the issue's probe
(``EDGETUNE_TEST_FLOOD_S=60``). The property asserted is the same at any length: 8 anonymous
clients make many times more refused calls than reach the audit stream (at most the limiter's burst
plus its rate times the duration), and every genuine record written during the flood is still there
afterwards. The short run caps the stream at 1,000 records, fewer than the flood's calls (so
without the limiter the first genuine records would be pushed out); the 60 s run keeps the deployed
100,000 (the issue measured 1,971 refused records a second: full after ~51 s).
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import grpc
import harness
import pytest
import yaml

from edgetune.control.registry import NodeRecord
from edgetune.devices.simulated.tables import truth_table
from edgetune.identity import ClientSecurity, ServerSecurity, open_channel
from edgetune.powermodes.grids import named_grid
from edgetune.powermodes.specs import get_spec
from edgetune.proto.v1 import (
    common_pb2,
    coordinator_pb2,
    coordinator_pb2_grpc,
    estimator_pb2,
    estimator_pb2_grpc,
)
from edgetune.services.common import auth
from edgetune.store import MemoryStore

FLOOD_S = float(os.environ.get("EDGETUNE_TEST_FLOOD_S", "5"))
FLOOD_CLIENTS = 8
TOKENS = {"alice": ("alice-token-0123456789", "operator"), "vera": ("vera-token-0123456789ab", "viewer"),
          "val": ("val-token-0123456789abcd", "viewer"), "jetson-a": ("agent-a-token-0123456789", "agent")}


@pytest.fixture
def token_file(tmp_path: Path) -> Path:
    path = tmp_path / "tokens.yaml"
    path.write_text(yaml.safe_dump({"tokens": [{"token": t, "role": r, "name": n} for n, (t, r) in TOKENS.items()]}))
    path.chmod(0o600)
    return path


def stub(address: str, name: str | None, stub_class=coordinator_pb2_grpc.CoordinatorStub):
    # Each its own connection, as separate clients would have.
    channel = open_channel(address, ClientSecurity(token=TOKENS[name][0] if name else ""),
                           options=[("grpc.use_local_subchannel_pool", 1)])
    return stub_class(channel), channel


def test_an_anonymous_flood_does_not_push_genuine_audit_records_out(token_file, monkeypatch):
    cap = auth.AUDIT_MAX_LEN if FLOOD_S >= 60 else 1_000
    monkeypatch.setattr(auth, "AUDIT_MAX_LEN", cap)
    store = MemoryStore()
    with harness.coordinator(store, security=ServerSecurity(auth_tokens=str(token_file)), max_workers=64) as c:
        alice, _ = stub(c.server.address, "alice")
        agent, _ = stub(c.server.address, "jetson-a")
        agent.RegisterNode(coordinator_pb2.RegisterNodeRequest(node=coordinator_pb2.NodeInfo(
            node_id="jetson-a", hostname="a", address="127.0.0.1:1", power_budget_w=30.0)))
        stop = threading.Event()
        refused_calls = [0] * FLOOD_CLIENTS
        attack = coordinator_pb2.UpdateBudgetRequest(node_id="jetson-a", budgets=common_pb2.Budgets(power_budget_w=1.0))

        def flood(k: int) -> None:
            anonymous, channel = stub(c.server.address, None)
            while not stop.is_set():
                try:
                    anonymous.UpdateBudget(attack, timeout=5)
                except grpc.RpcError as exc:
                    assert exc.code() == grpc.StatusCode.UNAUTHENTICATED, exc
                    refused_calls[k] += 1
            channel.close()

        threads = [threading.Thread(target=flood, args=(k,), daemon=True) for k in range(FLOOD_CLIENTS)]
        for t in threads:
            t.start()
        genuine: list[float] = []
        t0 = time.monotonic()
        while time.monotonic() - t0 < FLOOD_S:  # an operator's budget changes during the flood: each is audited
            watts = 20.0 + len(genuine) % 10
            alice.UpdateBudget(coordinator_pb2.UpdateBudgetRequest(
                node_id="jetson-a", budgets=common_pb2.Budgets(power_budget_w=watts)), timeout=10)
            genuine.append(watts)
            time.sleep(0.05)
        stop.set()
        for t in threads:
            t.join(10)
        records = store.audit_records(cap)
        kept = [r for r in records if r.who == "alice" and r.method == "UpdateBudget" and r.outcome == "OK"]
        refused_written = [r for r in records if r.who == "unauthenticated"]
        made = sum(refused_calls)
        limiter = c.server.auth.refused
        print(f"flood {FLOOD_S:g} s: {made} refused calls ({made / FLOOD_S:.0f}/s) by {FLOOD_CLIENTS} clients; "
              f"{len(refused_written)} refused records written, {limiter.suppressed_total} held back; "
              f"{len(genuine)} genuine records, {len(kept)} kept; stream cap {cap}")
        assert made > 10 * len(refused_written) and (FLOOD_S >= 60 or made > cap), "the flood must have been a flood"
        assert len(kept) == len(genuine), "a genuine record was pushed out"
        # All 8 clients share one host: its bucket bounds what reaches the stream (+ the summaries).
        bound = auth.REFUSED_PER_PEER_BURST + auth.REFUSED_PER_PEER_PER_S * (time.monotonic() - t0 + 1)
        assert len(refused_written) <= bound
        summaries = [r for r in refused_written if r.outcome == "RESOURCE_EXHAUSTED"]
        assert summaries and all(r.target.endswith("refused calls not recorded") for r in summaries)
        assert sum(int(r.target.split()[0]) for r in summaries) <= limiter.suppressed_total


def _fit_request() -> estimator_pb2.FitRequest:
    spec = get_spec("orin-agx")
    modes = named_grid(spec, "fulcrum").modes()
    rows = truth_table(spec, "resnet18", "train", [modes[i] for i in range(0, len(modes), 9)], [16])
    return estimator_pb2.FitRequest(device="orin-agx", workload="resnet18", role=common_pb2.ROLE_TRAIN, epochs=3,
                                    seed=0, model_id="fair-share-fit", measurements=[
        common_pb2.Measurement(mode=common_pb2.PowerMode(cores=r["cores"], cpu_mhz=r["cpu_mhz"], gpu_mhz=r["gpu_mhz"],
                                                         emc_mhz=r["emc_mhz"]),
                               batch_size=r["batch_size"], time_ms=r["time_ms"], power_w=r["power_w"])
        for r in rows])


def _viewer_probe(viewer, request) -> str:
    """One more viewer call held for 3 s: "refused" (no slot for viewers), or "admitted" (it ran until its deadline)."""
    try:
        viewer.EstimateBatchEfficiency(request, timeout=3)
    except grpc.RpcError as err:
        if err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED:
            assert "kept for operators" in err.details(), err.details()
            return "refused"
        assert err.code() == grpc.StatusCode.DEADLINE_EXCEEDED, err
    return "admitted"


def test_viewers_cannot_take_the_heavy_slots_an_operators_fit_needs(token_file, tmp_path):
    # The estimator as its own process (the probe, a 4-slot server); what runs is read from its answers.
    endless = estimator_pb2.EstimateBatchEfficiencyRequest(  # trains until cancelled
        workload="resnet-slim", batch_sizes=[8], target_accuracy=1.0, max_passes=1000, samples_per_pass=560,
        seed=0)
    port = harness.free_port()
    cmd = [sys.executable, "-m", "edgetune.services.estimator.server", "--host", "127.0.0.1", "--port", str(port),
           "--metrics-port", "0", "--redis", "embedded", "--no-ray", "--grace-s", "0.5", "--auth-tokens",
           str(token_file)]
    # its own checkpoint (not the run's shared one, which another worker may hold locked while it trains)
    # and only the environment it needs
    env = {**{k: v for k, v in os.environ.items() if k in ("PATH", "LANG", "LC_ALL", "TMPDIR", "VIRTUAL_ENV")},
           "HOME": str(tmp_path), "EDGETUNE_MAX_HEAVY_RPCS": "4", "PYTHONUNBUFFERED": "1"}
    with open(tmp_path / "estimator.log", "w") as log:  # a file, not a pipe nobody drains (the server would block)
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=log, env=env, cwd=tmp_path)
    try:
        harness.wait_serving(f"127.0.0.1:{port}", proc, timeout_s=60).close()
        address = f"127.0.0.1:{port}"
        viewers = [stub(address, name, estimator_pb2_grpc.EstimatorStub)[0] for name in ("vera", "val")]
        running = [viewers[0].EstimateBatchEfficiency.future(endless, timeout=300),
                   viewers[1].EstimateBatchEfficiency.future(endless, timeout=300)]
        try:
            # the probe: 4 viewer calls took every slot; now the 3rd and 4th are refused once two run
            def third_refused() -> bool | None:
                for i, call in enumerate(running):
                    if call.done():
                        # On a busy machine a probe can reach the server before this call and hold the slot for
                        # its 3 s; the call was then refused as a third viewer call should be: ask again.
                        err = call.exception()
                        if isinstance(err, grpc.RpcError) and err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED:
                            running[i] = viewers[i].EstimateBatchEfficiency.future(endless, timeout=300)
                            continue
                        log = (tmp_path / "estimator.log").read_text()[-3000:]
                        raise AssertionError(f"a viewer's training ended: {err!r}\nestimator log tail:\n{log}")
                refused = _viewer_probe(viewers[0], endless) == "refused"
                return (refused and not any(call.done() for call in running)) or None

            harness.wait_for(third_refused, 120, "a third viewer call refused while two run", poll_s=0.5)
            assert _viewer_probe(viewers[1], endless) == "refused"
            assert not any(call.done() for call in running)  # both still training
            alice = stub(address, "alice", estimator_pb2_grpc.EstimatorStub)[0]
            assert alice.Fit(_fit_request(), timeout=300).model.model_id.startswith("fair-share-fit")
        finally:
            for call in running:
                call.cancel()
        # the cancelled trainings give their slots back: a viewer's call is admitted again
        harness.wait_for(lambda: _viewer_probe(viewers[0], endless) == "admitted" or None, 60,
                         "the cancelled trainings to stop", poll_s=0.5)
    finally:
        proc.terminate()
        proc.wait(30)


def _nodes(c, n: int) -> list[str]:
    ids = [f"node-{i:03d}" for i in range(n)]
    for node_id in ids:
        c.servicer.registry.register(NodeRecord(node_id=node_id))
    return ids


def test_watches_are_capped_per_caller_and_their_threads_end_with_them(token_file):
    # Without authentication the caller is its connection: 4 connections, 40 streams each.
    with harness.coordinator(MemoryStore(), max_workers=512) as c:
        c.server.pool.idle_s = 0.5
        ids = _nodes(c, 160)
        time.sleep(1.0)
        baseline = threading.active_count()
        stubs = [stub(c.server.address, None) for _ in range(4)]
        calls = [stubs[i % 4][0].WatchConfig(coordinator_pb2.WatchConfigRequest(node_id=n)) for i, n in enumerate(ids)]
        hub = c.servicer.configs.hub
        harness.wait_for(lambda: hub.watches == len(ids) or None, 60, "every stream open")
        during = threading.active_count()
        assert during >= baseline + len(ids)  # a thread per open stream (grpc's sync server)
        assert c.server.limits.open_watches == len(ids)
        for call in calls:
            call.cancel()
        for _stub, channel in stubs:
            channel.close()
        harness.wait_for(lambda: threading.active_count() <= baseline + 2 or None, 30,
                         f"the threads to end (baseline {baseline}, with the streams {during}, "
                         f"now {threading.active_count()})")
        assert c.server.limits.open_watches == 0 and hub.watches == 0

    with MemoryStore() as store, harness.coordinator(store, security=ServerSecurity(auth_tokens=str(token_file)),
                                                     max_workers=64) as c:
        c.server.limits.max_watches = 3
        _nodes(c, 1)
        vera, _ = stub(c.server.address, "vera")
        watch = coordinator_pb2.WatchConfigRequest(node_id="node-000")
        held = [vera.WatchConfig(watch) for _ in range(3)]
        harness.wait_for(lambda: c.server.limits.open_watches == 3 or None, 20, "three streams open")
        with pytest.raises(grpc.RpcError) as err:
            next(vera.WatchConfig(watch, timeout=10))
        assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED and "at most 3 per caller" in err.value.details()
        val, _ = stub(c.server.address, "val")  # another caller is not held back by vera's
        other = val.WatchConfig(watch)
        harness.wait_for(lambda: c.server.limits.open_watches == 4 or None, 20, "val's stream open")
        held[0].cancel()
        harness.wait_for(lambda: c.server.limits.open_watches == 3 or None, 20, "the closed stream released")
        again = vera.WatchConfig(watch)
        harness.wait_for(lambda: c.server.limits.open_watches == 4 or None, 20, "vera's new stream open")
        for call in (*held[1:], other, again):
            call.cancel()
        harness.wait_for(lambda: c.server.limits.open_watches == 0 or None, 20, "every stream released")


def test_the_watch_streams_benchmark_is_registered_and_runs_small():
    """``watch_streams_10000`` belongs in ``make bench``; here its code runs with 300 streams over two
    coordinator replicas (as ``config_push_1000_watchers`` runs)."""
    from edgetune.bench import runner, watch

    assert "watch_streams_10000" in {b.name for b in runner.REGISTRY}
    measured = watch.measure_watch_streams(streams=300, channels=6, heartbeats=50, published=20, after_close_s=30.0,
                                         replicas=2)
    assert measured["streams_open"] == 300 and measured["delivered"] == 20
    assert measured["coordinator_replicas"] == 2
    assert measured["threads_with_streams"] >= measured["threads_before"] + 300
    # the coordinator's handler threads go back once the streams close (its elastic pool shrinks)
    assert measured["threads_after_close"] <= measured["threads_before"] + 8
    assert measured["open_watches_after_close"] == 0
