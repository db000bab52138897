"""A Flower client that tunes its node's power mode while it trains (:mod:`edgetune.online`).

:class:`OnlineTuningClient` wraps a ``NumPyClient`` and keeps one :class:`~edgetune.online.OnlineTuner`
open across rounds. The wrapped client brackets each local training step with
``self.edgetune_step(batch_size)`` (the wrapper sets it; a client used without the wrapper can
set it to :func:`no_tuning`). The first rounds' steps are the tuner's measurement windows — the
round's training is real work, not thrown away — and once the tuner has selected and verified a
mode, later rounds train in it. Every window is written to the tuner's store as a measurement of
the workload's id for this node, which is where the coordinator's round planner reads a node's
options (``PlanRound`` with ``workload.name`` = that id and no inline options), so the planner uses
what the clients measured. Each round's fit metrics say where the tuner is (``edgetune_state``,
``edgetune_windows``, ``edgetune_workload``) and, once chosen, the mode and its measured time and power.

Needs the ``flower`` extra (``flwr``), as :mod:`edgetune.integrations.flower`.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from flwr.client import NumPyClient
from flwr.common import Config, NDArrays, Scalar

from edgetune.errors import InvalidArgument
from edgetune.integrations.flower import NODE_ID, SAMPLES
from edgetune.online import OnlineTuner

STATE = "edgetune_state"
WINDOWS = "edgetune_windows"
WORKLOAD = "edgetune_workload"
MODE_PREFIX = "edgetune_mode_"
MEASURED_TIME = "edgetune_measured_time_ms"
MEASURED_POWER = "edgetune_measured_power_w"


@contextmanager
def no_tuning(batch_size: int) -> Iterator[None]:
    """The step bracket of a client run without the tuner."""
    yield


class OnlineTuningClient(NumPyClient):
    """``client`` with its local training tuned online by ``tuner`` (module docstring).

    ``node_id``: this client's edgetune node (also the tuner's ``node_id`` for the store);
    ``samples``: its training set size (the strategy's round plan is sized by it).
    """

    def __init__(self, client: NumPyClient, tuner: OnlineTuner, node_id: str, samples: int) -> None:
        if not node_id:
            raise InvalidArgument("node_id", "is empty", "the node id the agent registered")
        if isinstance(samples, bool) or not isinstance(samples, int) or samples <= 0:
            raise InvalidArgument("samples", f"{samples!r}", "> 0")
        if tuner.node_id not in (None, node_id):
            raise InvalidArgument("node_id", f"the tuner writes for node {tuner.node_id!r}, the client is {node_id!r}")
        tuner.node_id = node_id
        self.client, self.tuner, self.node_id, self.samples = client, tuner, node_id, samples
        self._open = False
        client.edgetune_step = self._step

    def _step(self, batch_size: int) -> Any:
        if not self._open:  # a step outside fit (evaluation): not the training being tuned
            return no_tuning(batch_size)
        return self.tuner.step(batch_size)

    def get_properties(self, config: Config) -> dict[str, Scalar]:
        return {**self.client.get_properties(config), NODE_ID: self.node_id, SAMPLES: self.samples}

    def get_parameters(self, config: dict[str, Scalar]) -> NDArrays:
        return self.client.get_parameters(config)

    def fit(self, parameters: NDArrays, config: dict[str, Scalar]) -> tuple[NDArrays, int, dict[str, Scalar]]:
        if not self._open:
            self.tuner.__enter__()
            self._open = True
        new_parameters, n, metrics = self.client.fit(parameters, config)
        return new_parameters, n, {**metrics, **self.tuning_metrics()}

    def tuning_metrics(self) -> dict[str, Scalar]:
        d = self.tuner.result()
        out: dict[str, Scalar] = {NODE_ID: self.node_id, STATE: d.state, WINDOWS: d.windows, WORKLOAD: d.workload}
        if d.mode is not None:
            out.update({f"{MODE_PREFIX}{k}": v for k, v in d.mode.as_dict().items()})
            if d.measured_time_ms is not None and d.measured_power_w is not None:
                out.update({MEASURED_TIME: d.measured_time_ms, MEASURED_POWER: d.measured_power_w})
        return out

    def evaluate(self, parameters: NDArrays, config: dict[str, Scalar]) -> tuple[float, int, dict[str, Scalar]]:
        return self.client.evaluate(parameters, config)

    def close(self) -> None:
        """End tuning: the node's original mode comes back."""
        if self._open:
            self._open = False
            self.tuner.close()

    def __enter__(self) -> OnlineTuningClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
