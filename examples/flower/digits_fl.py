"""Federated learning with Flower on power-managed (simulated) Jetsons, planned by edgetune.

Three clients train a small MLP on scikit-learn's digits (8x8 images, 10 classes), one per
node: a simulated Orin AGX, Xavier AGX and Orin Nano, each with its power budget.
:class:`~edgetune.integrations.flower.PowerAwareStrategy` (around FedAvg) has the coordinator
tune the nodes with a TuningJob (profile, transfer, safe selection at a 5 % risk, the choice
measured on each node, a miss selected again), plans every round from the verified choices and
passes each client its batch size and power mode;
:class:`~edgetune.integrations.flower.PowerAwareClient` has the node's agent apply the mode for
local training and restore it afterwards.

    python examples/flower/digits_fl.py                 # starts a local cluster, profiles, trains
    python examples/flower/digits_fl.py --coordinator HOST:PORT --nodes a,b,c   # an existing one

The coordinator tunes for the workload ``tiny`` (the simulator's small CNN profile) as the
stand-in for this MLP's cost on the devices, transferring each device's reference model (what
``edgetune up`` fits; the local cluster here fits them first). The
simulation runs Flower's simulation engine (Ray backend) with one CPU and one client actor.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
from flwr.client import ClientApp, NumPyClient
from flwr.common import Context, NDArrays, Scalar, ndarrays_to_parameters
from flwr.server import ServerApp, ServerAppComponents, ServerConfig
from flwr.server.strategy import FedAvg
from flwr.simulation import run_simulation
from sklearn.datasets import load_digits
from torch import nn

from edgetune.integrations.flower import PowerAwareClient, PowerAwareStrategy, Tuning

#: node id -> (simulated device, power budget W)
NODES = {"orin-agx-1": ("orin-agx", 30.0), "xavier-agx-1": ("xavier-agx", 20.0), "orin-nano-1": ("orin-nano", 10.0)}
WORKLOAD = "tiny"
#: The lightest engine set-up on a small machine: one CPU for Ray, one client actor at a time,
#: no dashboard, a small object store (the model is a few KB).
RAY_INIT_ARGS = {"num_cpus": 1, "num_gpus": 0, "include_dashboard": False, "object_store_memory": 100 * 1024 * 1024,
                 "logging_level": logging.WARNING}
BACKEND_CONFIG = {"init_args": RAY_INIT_ARGS, "client_resources": {"num_cpus": 1, "num_gpus": 0.0}}
RAY_START_ATTEMPTS = 3
#: How long the strategy waits for a client's answer (its messages' TTL). In the simulation engine a round's
#: first call starts the client's Ray actor (an interpreter importing torch and Flower): tens of seconds on a
#: loaded two-core machine, where the strategy's default (30 s, for clients already connected) expired.
CLIENT_TIMEOUT_S = 120.0
LOCAL_EPOCHS = 2
LEARNING_RATE = 0.05
#: The TuningJob the strategy asks for: a 5 % risk of a choice over its budget, 12 points per node.
TUNING = Tuning(risk=0.05, profiles=12, batch_sizes=(32,))


# --- data and model ------------------------------------------------------------------------------
def digits_partitions(n_clients: int, seed: int = 0) -> tuple[list[tuple[np.ndarray, np.ndarray]],
                                                                tuple[np.ndarray, np.ndarray]]:
    """(per-client training sets, held-out test set): standardised features, labels as int64."""
    x, y = load_digits(return_X_y=True)
    x = ((x - x.mean(axis=0)) / (x.std(axis=0) + 1e-6)).astype(np.float32)
    order = np.random.default_rng(seed).permutation(len(y))
    test, train = order[:300], order[300:]
    parts = np.array_split(train, n_clients)
    return [(x[p], y[p].astype(np.int64)) for p in parts], (x[test], y[test].astype(np.int64))


def make_model(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 10))


def get_weights(model: nn.Module) -> NDArrays:
    return [v.detach().cpu().numpy().copy() for v in model.state_dict().values()]


def set_weights(model: nn.Module, weights: NDArrays) -> None:
    model.load_state_dict({k: torch.from_numpy(np.asarray(w)) for k, w in zip(model.state_dict(), weights,
                                                                             strict=True)})


def loss_and_accuracy(model: nn.Module, x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    with torch.no_grad():
        logits = model(torch.from_numpy(x))
        target = torch.from_numpy(y)
        return float(nn.functional.cross_entropy(logits, target)), float((logits.argmax(1) == target).float().mean())


class DigitsClient(NumPyClient):
    """Local training with the batch size the server's config gives (32 without one)."""

    def __init__(self, x: np.ndarray, y: np.ndarray) -> None:
        self.x, self.y = x, y
        self.model = make_model()

    def get_parameters(self, config: dict[str, Scalar]) -> NDArrays:
        return get_weights(self.model)

    def fit(self, parameters: NDArrays, config: dict[str, Scalar]) -> tuple[NDArrays, int, dict[str, Scalar]]:
        set_weights(self.model, parameters)
        batch_size = int(config.get("batch_size", 32))
        optimizer = torch.optim.SGD(self.model.parameters(), lr=LEARNING_RATE, momentum=0.9)
        generator = torch.Generator().manual_seed(int(config.get("config_revision", 0)))
        x, y = torch.from_numpy(self.x), torch.from_numpy(self.y)
        for _epoch in range(LOCAL_EPOCHS):
            for idx in torch.randperm(len(y), generator=generator).split(batch_size):
                optimizer.zero_grad()
                nn.functional.cross_entropy(self.model(x[idx]), y[idx]).backward()
                optimizer.step()
        loss, _ = loss_and_accuracy(self.model, self.x, self.y)
        return get_weights(self.model), len(self.y), {"train_loss": loss}

    def evaluate(self, parameters: NDArrays, config: dict[str, Scalar]) -> tuple[float, int, dict[str, Scalar]]:
        set_weights(self.model, parameters)
        loss, accuracy = loss_and_accuracy(self.model, self.x, self.y)
        return loss, len(self.y), {"accuracy": accuracy}


# --- the Flower apps ------------------------------------------------------------------------------
def client_app(node_ids: Sequence[str]) -> ClientApp:
    """Client ``partition-id`` i trains partition i on node ``node_ids[i]`` (its agent: from the plan)."""
    node_ids = list(node_ids)

    def client_fn(context: Context):
        torch.set_num_threads(1)  # one small MLP per actor: threads only contend
        pid = int(context.node_config["partition-id"])
        parts, _ = digits_partitions(len(node_ids))
        x, y = parts[pid]
        return PowerAwareClient(DigitsClient(x, y), node_id=node_ids[pid], samples=len(y)).to_client()

    return ClientApp(client_fn=client_fn)


def build_strategy(coordinator: str, n_clients: int, *, objective: str = "makespan",
                   losses: list[float] | None = None) -> PowerAwareStrategy:
    """FedAvg on every client with central evaluation (losses appended to ``losses``), planned by edgetune."""
    _, (x_test, y_test) = digits_partitions(n_clients)
    model = make_model()

    def evaluate(server_round: int, parameters: NDArrays, config: dict[str, Scalar]):
        set_weights(model, parameters)
        loss, accuracy = loss_and_accuracy(model, x_test, y_test)
        if losses is not None:
            losses.append(loss)
        return loss, {"accuracy": accuracy}

    fedavg = FedAvg(fraction_fit=1.0, fraction_evaluate=0.0, min_fit_clients=n_clients,
                    min_available_clients=n_clients, evaluate_fn=evaluate,
                    initial_parameters=ndarrays_to_parameters(get_weights(model)))
    return PowerAwareStrategy(fedavg, coordinator, WORKLOAD, objective=objective, tuning=TUNING,
                              round_prefix=f"digits-{time.time_ns()}", timeout_s=CLIENT_TIMEOUT_S)


def start_ray(attempts: int = RAY_START_ATTEMPTS) -> None:
    """Start the local Ray instance the simulation engine then reuses (retried: see ``init_local_ray``).

    Actors get this process's ``sys.path`` (as Flower's own start does), so they import what it imports.
    """
    from edgetune.estimation.parallel import init_local_ray

    init_local_ray(attempts, runtime_env={"env_vars": {"PYTHONPATH": os.pathsep.join(sys.path)}}, **RAY_INIT_ARGS)


def run(coordinator: str, node_ids: Sequence[str], rounds: int = 2, *,
        objective: str = "makespan") -> tuple[PowerAwareStrategy, list[float]]:
    """Run the federated job; returns the strategy (its ``rounds`` hold plans and client reports)
    and the central test loss before round 1 and after each round."""
    import ray

    losses: list[float] = []
    strategy = build_strategy(coordinator, len(node_ids), objective=objective, losses=losses)

    def server_fn(context: Context) -> ServerAppComponents:
        return ServerAppComponents(strategy=strategy, config=ServerConfig(num_rounds=rounds))

    start_ray()
    try:
        run_simulation(ServerApp(server_fn=server_fn), client_app(node_ids), num_supernodes=len(node_ids),
                       backend_config=BACKEND_CONFIG)
    finally:
        strategy.close()
        ray.shutdown()  # the engine shuts Ray down when it ends normally; this covers a failed run
    return strategy, losses


# --- a local cluster that can tune ---------------------------------------------------------------
def start_cluster(workdir: Path, log_level: str = "INFO"):
    """Redis, the estimator and optimizer, the coordinator (its reconcile loop runs TuningJobs) and an
    agent per node; a reference model per device model fitted on the estimator (as ``edgetune up`` does)."""
    from edgetune.localrun.controlplane import fit_references
    from edgetune.localrun.localcluster import LocalCluster

    cluster = LocalCluster(workdir, log_level=log_level, tuning=True).start()
    try:
        agents = cluster.start_agents(NODES)
        assert cluster.estimator is not None
        fit_references(cluster.estimator.address, [model for model, _ in NODES.values()])
    except BaseException:
        cluster.close()
        raise
    return cluster, agents


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--coordinator", default="", help="an existing coordinator (default: start a local cluster)")
    parser.add_argument("--nodes", default="", help="comma-separated node ids (registered, with budgets)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--objective", choices=("makespan", "energy"), default="makespan")
    args = parser.parse_args(argv)
    if args.coordinator:
        strategy, losses = run(args.coordinator, args.nodes.split(","), args.rounds, objective=args.objective)
    else:
        with tempfile.TemporaryDirectory(prefix="edgetune-flower-") as workdir:
            cluster, _ = start_cluster(Path(workdir), log_level="WARNING")
            try:
                strategy, losses = run(cluster.coordinator.address, list(NODES), args.rounds,
                                       objective=args.objective)
            finally:
                cluster.close()
    job = strategy.tuning_job
    if job is not None:
        print(f"tuning job {job.spec.name} (risk {job.spec.risk:g}):")
        for n in job.nodes:
            print(f"  {n.node_id:14} measured {n.measured_power_w:5.1f} W of {n.power_budget_w:4.1f} W, "
                  f"{n.measured_time_ms:6.1f} ms per minibatch, {n.profiled} points profiled")
    for server_round, record in sorted(strategy.rounds.items()):
        print(f"round {server_round} ({record.round_id}): makespan {record.plan.makespan_s:.2f} s, "
              f"energy {record.plan.energy_j:.1f} J")
        for a in record.assignments:
            print(f"  {a.node_id:14} batch {a.batch_size:3}  mode {a.mode.label() if a.mode else '-':24} "
                  f"{a.planned_power_w:5.1f} W of {a.power_budget_w or float('nan'):4.1f} W  rev {a.config_revision}")
    print("test loss per round:", " -> ".join(f"{v:.3f}" for v in losses))
    return 0


if __name__ == "__main__":
    sys.exit(main())
