"""The online-tuning Flower client in-process: the first rounds' training is the tuner's profiling,
later rounds run the chosen mode, and the coordinator's round planner plans from what it measured."""

from __future__ import annotations

import pytest
import torch
from flwr.client import NumPyClient
from torch import nn

from edgetune.base.mode import MODE_FIELDS, PowerMode
from edgetune.control.configs import ConfigStore
from edgetune.control.leader import LeaderLease
from edgetune.control.registry import NodeRegistry
from edgetune.control.rounds import RoundCoordinator
from edgetune.devices.simulated.device import SimulatedJetson
from edgetune.errors import InvalidArgument
from edgetune.integrations.flower_client import MODE_PREFIX, STATE, WINDOWS, WORKLOAD, OnlineTuningClient
from edgetune.online import OnlineTuner, simulated_reference
from edgetune.planning.rounds import RoundNode, RoundRequest
from edgetune.powermodes.specs import get_spec
from edgetune.store import MemoryStore, NodeRecord, spec_to_dict
from tests.fixtures.workloads.sensor_cnn import SensorCNN, make_batches

BATCH = 16
STEPS_PER_ROUND = 1500
NODE = "orin-agx-1"
#: Under what the sensor CNN's training draws at MAXN (about 18.5 W on the simulated Orin): the choice is another mode.
BUDGET_W = 18.0


make_batch = make_batches()


class LocalTrainer(NumPyClient):
    """The user's own Flower client: plain local SGD, each step bracketed by ``edgetune_step``."""

    def __init__(self) -> None:
        torch.manual_seed(0)
        self.model = SensorCNN()
        self.steps = 0

    def get_parameters(self, config):
        return [p.detach().numpy().copy() for p in self.model.parameters()]

    def fit(self, parameters, config):
        with torch.no_grad():
            for p, v in zip(self.model.parameters(), parameters, strict=True):
                p.copy_(torch.from_numpy(v))
        opt = torch.optim.SGD(self.model.parameters(), lr=0.01)
        for step in range(STEPS_PER_ROUND):
            with self.edgetune_step(BATCH):
                if step % 300 == 0:  # real training; the simulator times every step
                    x, y = make_batch(BATCH)
                    opt.zero_grad()
                    nn.functional.cross_entropy(self.model(x), y).backward()
                    opt.step()
                self.steps += 1
        return self.get_parameters(config), STEPS_PER_ROUND * BATCH, {"loss": 0.0}


def test_rounds_profile_in_place_then_run_the_choice_and_feed_the_planner() -> None:
    store = MemoryStore()
    dev = SimulatedJetson("orin-agx", seed=0)
    start = dev.current_mode()
    trainer = LocalTrainer()
    tuner = OnlineTuner(dev, trainer.model, power_budget_w=BUDGET_W, profiles=10, seed=0, make_batch=make_batch,
                        reference=simulated_reference("orin-agx", "train", epochs=20), settle_s=0.5,
                        store=store, handle_signals=False)
    client = OnlineTuningClient(trainer, tuner, NODE, samples=4000)
    assert client.get_properties({})["edgetune_node_id"] == NODE
    params = trainer.get_parameters({})
    rounds = []
    with client:
        for _ in range(6):
            params, n, metrics = client.fit(params, {})
            rounds.append(metrics)
            if metrics[STATE] == "STEADY":
                break
        chosen = PowerMode(**{k: rounds[-1][f"{MODE_PREFIX}{k}"] for k in MODE_FIELDS})
        assert dev.current_mode() == chosen != start  # later rounds train in the chosen mode
    assert dev.current_mode() == start  # closing the client restores the node's mode
    assert trainer.steps == STEPS_PER_ROUND * len(rounds)  # every step was the client's own training
    assert rounds[0][STATE] != "STEADY" and rounds[0][WINDOWS] > 0  # round 1 profiled in place
    last = rounds[-1]
    assert last[STATE] == "STEADY", rounds
    assert last["edgetune_measured_power_w"] <= BUDGET_W
    wid = last[WORKLOAD]
    stored = store.get_measurements("orin-agx", wid, "train", NODE)
    assert len(stored) == last[WINDOWS] >= 10

    # the coordinator's planner reads this node's options from those measurements
    registry = NodeRegistry(store, heartbeat_ttl_s=60.0)
    lease = LeaderLease(store, holder_id="coordinator", lease_ms=10_000)
    lease.try_acquire()
    registry.register(NodeRecord(NODE, device=spec_to_dict(get_spec("orin-agx")), power_budget_w=BUDGET_W))
    out = RoundCoordinator(store, registry, ConfigStore(store), lease).plan(
        RoundRequest((RoundNode(NODE, 4000),), round_id="r1", workload={"name": wid}))
    assert out.plan.feasible
    planned = out.plan.nodes[0]
    assert planned.mode in {m.mode for m in stored}
    assert planned.power_w <= BUDGET_W


def test_client_needs_a_node_and_samples() -> None:
    dev = SimulatedJetson("orin-agx")
    tuner = OnlineTuner(dev, "mobilenetv3", power_budget_w=20.0, reference=object(), handle_signals=False)
    with pytest.raises(InvalidArgument):
        OnlineTuningClient(LocalTrainer(), tuner, "", samples=10)
    with pytest.raises(InvalidArgument):
        OnlineTuningClient(LocalTrainer(), tuner, NODE, samples=0)
