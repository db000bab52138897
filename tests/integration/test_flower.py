"""Flower federated learning planned by the coordinator, on three simulated Jetsons.

A coordinator (with the estimator and optimizer its reconcile loop runs TuningJobs on) and three
profiler agents (Orin AGX 30 W, Xavier AGX 20 W, Orin Nano 10 W) on loopback, the agents registered
through their coordinator link, a reference model per device fitted: what the example's
``start_cluster`` starts as processes, here the services' own servers in this process over the
in-memory store (``harness.InProcessCluster``), since these tests are about the strategy and the
clients, not process life. The strategy has the coordinator tune the stand-in workload on the
nodes (a TuningJob at a 5 % risk); then the example's FL job (examples/flower/digits_fl.py: an MLP
on digits, FedAvg, 3 clients, 2 rounds) runs in Flower's simulation engine (Ray backend, one CPU,
one client actor: the lightest set-up Flower 1.41 has) with PowerAwareStrategy and PowerAwareClient.

Checked: the job ran at the strategy's risk and verified each node's choice within its budget on
the node; every round planned exactly those verified choices; every client got a batch size and
a mode from the coordinator's plan each round and its agent applied exactly that mode; every mode is valid for the client's device and its
planned power is within the node's budget; revisions go up per round; the central test loss
falls every round; afterwards every agent is back in the mode it started in.

The example's own ``main`` runs the rounds test, against this cluster (its ``--coordinator`` form);
starting its own cluster is ``LocalCluster`` + ``fit_references``, which the process tests cover
(``test_tuning_jobs_e2e.py`` at log level WARNING, where readiness must not need the INFO log line).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import grpc
import pytest
from harness import InProcessCluster, references

pytest.importorskip("flwr", reason="the flower extra (flwr[simulation]) is not installed")

from flwr.common import Code, GetPropertiesRes, Parameters, Status  # noqa: E402
from flwr.server.client_manager import SimpleClientManager  # noqa: E402
from flwr.server.client_proxy import ClientProxy  # noqa: E402
from flwr.server.strategy import FedAvg  # noqa: E402

from edgetune.base.mode import MODE_FIELDS, PowerMode  # noqa: E402
from edgetune.integrations.flower import (  # noqa: E402
    APPLIED_PREFIX,
    BATCH_SIZE,
    NODE_ID,
    REVISION,
    SAMPLES,
    PowerAwareStrategy,
    Tuning,
)
from edgetune.powermodes.specs import get_spec  # noqa: E402
from edgetune.proto.serde.common import mode_from_proto  # noqa: E402
from edgetune.proto.v1 import profiler_pb2, profiler_pb2_grpc  # noqa: E402
from edgetune.tuning.jobs import JobPhase, NodePhase  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.slow]

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples" / "flower"))
import digits_fl  # noqa: E402

NODES = digits_fl.NODES  # node id -> (device model, budget W)
_example_run = digits_fl.run


def _current_mode(address: str) -> PowerMode:
    with grpc.insecure_channel(address) as channel:
        reply = profiler_pb2_grpc.ProfilerStub(channel).GetDevice(profiler_pb2.GetDeviceRequest(), timeout=10)
        return mode_from_proto(reply.current_mode)


def _tuning_cluster(workdir: Path, nodes: dict[str, tuple[str, float]], run_dir: Path) -> InProcessCluster:
    """The example's ``start_cluster`` in this process: the control plane, an agent per node (with its
    budget) and a reference model per device model on the estimator (``fit_references``'s, fitted
    once per run: ``harness.references``)."""
    cluster = InProcessCluster(workdir, tuning=True).start()
    try:
        cluster.start_agents(nodes)
        assert cluster.estimator is not None
        references(cluster.store, cluster.estimator.address, [model for model, _ in nodes.values()], run_dir)
    except BaseException:
        cluster.close()
        raise
    return cluster


def test_flower_rounds_run_in_the_planned_modes(tmp_path, run_dir, monkeypatch, capsys):
    cluster = _tuning_cluster(tmp_path, NODES, run_dir)
    agents = cluster.agents
    try:
        assert cluster.coordinator is not None
        initial = {n: _current_mode(a.address) for n, a in agents.items()}

        # The example's own entry point, pointed at this cluster (what `--coordinator HOST:PORT --nodes ...`
        # does for a user); its printed report is checked below with what ran.
        ran: list[tuple[PowerAwareStrategy, list[float]]] = []

        def recording_run(*args, **kwargs):
            ran.append(_example_run(*args, **kwargs))
            return ran[-1]

        monkeypatch.setattr(digits_fl, "run", recording_run)
        assert digits_fl.main(["--coordinator", cluster.coordinator.address, "--nodes", ",".join(NODES),
                               "--rounds", "2"]) == 0
        printed = capsys.readouterr().out
        strategy, losses = ran[0]
        assert "round 2 (" in printed and "test loss per round:" in printed, printed[-2000:]

        job = strategy.tuning_job
        assert job is not None and job.phase == JobPhase.SUCCEEDED, job
        assert job.spec.risk == digits_fl.TUNING.risk == 0.05 and sorted(job.spec.nodes) == sorted(NODES)
        verified = {n.node_id: n for n in job.nodes}
        for node_id, n in verified.items():  # the shared workflow verified each choice on the node
            assert n.phase == NodePhase.APPLIED and n.measured_power_w <= NODES[node_id][1], n
        assert sorted(strategy.rounds) == [1, 2]
        for server_round, record in strategy.rounds.items():
            assert record.plan.feasible and not record.sat_out
            planned = {p.id: p for p in record.plan.nodes}
            assert {a.node_id for a in record.assignments} == set(NODES) == set(record.fit_metrics)
            for a in record.assignments:
                model, budget_w = NODES[a.node_id]
                # What the strategy sent is the coordinator's plan for this node ...
                plan = planned[a.node_id]
                assert a.mode == plan.mode and a.batch_size == plan.batch_size > 0
                # ... which is the job's verified choice, planned at its measured power or bound ...
                assert a.mode is not None and a.mode.as_tuple() == verified[a.node_id].mode
                assert a.batch_size == verified[a.node_id].batch_size
                assert a.planned_power_w == pytest.approx(max(verified[a.node_id].measured_power_w,
                                                              verified[a.node_id].predicted_power_upper_w))
                # one new config per round, after the job's
                assert a.config_revision == verified[a.node_id].config_revision + server_round
                # ... a valid mode of the node's device, within its registered budget ...
                assert get_spec(model).validate(a.mode) == a.mode
                assert a.power_budget_w == budget_w and a.planned_power_w <= budget_w
                # ... and what the client received and its agent applied.
                reported = record.fit_metrics[a.node_id]
                assert reported[NODE_ID] == a.node_id
                assert reported[BATCH_SIZE] == a.batch_size and reported[REVISION] == a.config_revision
                applied = PowerMode.from_mapping({k: reported[APPLIED_PREFIX + k] for k in MODE_FIELDS})
                assert applied == a.mode

        assert len(losses) == 3, losses  # before round 1, after rounds 1 and 2
        assert losses[0] > losses[1] > losses[2], losses

        # Each client restored its node's mode after training.
        deadline = time.monotonic() + 10
        while (now := {n: _current_mode(a.address) for n, a in agents.items()}) != initial:
            assert time.monotonic() < deadline, (now, initial)
            time.sleep(0.1)

    finally:
        cluster.close()

class _Node(ClientProxy):
    """A Flower client as the server side sees it, for driving the strategy without the simulation
    engine: it answers only the properties the strategy asks (node id, samples)."""

    def __init__(self, cid: str, node_id: str, samples: int) -> None:
        super().__init__(cid)
        self.node_id, self.samples = node_id, samples

    def get_properties(self, ins, timeout, group_id):
        return GetPropertiesRes(Status(Code.OK, ""), {NODE_ID: self.node_id, SAMPLES: self.samples})

    def get_parameters(self, ins, timeout, group_id):
        raise NotImplementedError

    def fit(self, ins, timeout, group_id):
        raise NotImplementedError

    def evaluate(self, ins, timeout, group_id):
        raise NotImplementedError

    def reconnect(self, ins, timeout, group_id):
        raise NotImplementedError


def test_the_strategy_plans_rounds_from_the_tuning_jobs_verified_choices(tmp_path, run_dir):
    """The strategy's safety policy without Flower's engine: configure_fit submits a TuningJob at the
    strategy's risk, the coordinator's shared workflow verifies each node's choice on its agent, and
    the round is planned from exactly those choices (a later round reads the same job again)."""
    nodes = {"orin-agx-1": ("orin-agx", 25.0), "orin-nano-1": ("orin-nano", 10.0)}
    cluster = _tuning_cluster(tmp_path, nodes, run_dir)
    try:
        assert cluster.coordinator is not None
        manager = SimpleClientManager()
        for i, node_id in enumerate(nodes):
            manager.register(_Node(str(i), node_id, 1000))
        fedavg = FedAvg(fraction_fit=1.0, min_fit_clients=2, min_available_clients=2)
        strategy = PowerAwareStrategy(fedavg, cluster.coordinator.address, "tiny",
                                      tuning=Tuning(risk=0.05, profiles=12, batch_sizes=(32,)), round_prefix="t")
        try:
            for server_round in (1, 2):
                sent = strategy.configure_fit(server_round, Parameters([], ""), manager)
                assert len(sent) == 2
        finally:
            strategy.close()
        job = strategy.tuning_job
        assert job is not None and job.phase == JobPhase.SUCCEEDED, job
        assert job.spec.risk == 0.05 and sorted(job.spec.nodes) == sorted(nodes) and job.spec.name == "t-tuning-1"
        verified = {n.node_id: n for n in job.nodes}
        for server_round, record in strategy.rounds.items():
            for a in record.assignments:
                n = verified[a.node_id]
                assert n.phase == NodePhase.APPLIED and n.measured_power_w <= nodes[a.node_id][1]
                assert a.mode is not None and a.mode.as_tuple() == n.mode and a.batch_size == n.batch_size == 32
                assert a.planned_power_w == pytest.approx(max(n.measured_power_w, n.predicted_power_upper_w))
                assert a.planned_power_w <= nodes[a.node_id][1]
                assert a.config_revision == n.config_revision + server_round
    finally:
        cluster.close()
