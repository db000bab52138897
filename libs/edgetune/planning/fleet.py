"""A federated round to plan: nodes, their options, budgets; and ``fleet.json`` reading.

Each node has a table of options (power mode × batch size, with ``time_ms`` per minibatch and
``power_w``), a number of ``samples`` to process this round and an optional power budget.
Option j of node i takes ``ceil(samples_i / batch_size_j) × time_ms_j`` (the node's round
time) and ``round time × power_w`` joules. :func:`flatten` lays every node's options out as
one flat, node-sorted set of arrays for the vectorised planners.

Batch size per node: ``batch_sizes`` (None: any in the table; one entry: fixed by the FL job)
restricts a node's options to those batch sizes. ``batch_efficiency`` (Ahmed et al.'s r_b, or
passes_to_target, per batch size) scales the work: at batch size b the node processes
``ceil(samples × r_b)`` samples, so a batch size that needs more passes to reach the target
accuracy costs proportionally more time and energy; a batch size absent from the vector (or
with r = inf, "never reaches the target") is not admissible.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from typing import Literal, overload

import numpy as np

from edgetune import validation
from edgetune.errors import InvalidArgument
from edgetune.schemas import check as check_schema
from edgetune.tables import read_profile_table

OBJECTIVES = ("makespan", "energy")


@dataclass
class NodeOptions:
    """One node: its id, round size, power budget (None = none) and option table as arrays."""

    id: str
    samples: int
    batch_size: np.ndarray
    time_ms: np.ndarray
    power_w: np.ndarray
    power_budget_w: float | None = None
    #: (n, 4) cores, cpu_mhz, gpu_mhz, emc_mhz per option, when the table has them
    modes: np.ndarray | None = None
    #: admissible batch sizes (None: every batch size of the table; one: fixed by the job)
    batch_sizes: tuple[int, ...] | None = None
    #: r_b (or passes_to_target) per batch size: the round's work at b is ceil(samples × r_b)
    batch_efficiency: dict[int, float] | None = None

    def __post_init__(self) -> None:
        self.batch_size = np.asarray(self.batch_size, dtype=np.int64).ravel()
        self.time_ms = np.asarray(self.time_ms, dtype=float).ravel()
        self.power_w = np.asarray(self.power_w, dtype=float).ravel()
        n = self.batch_size.size
        if self.time_ms.size != n or self.power_w.size != n:
            raise InvalidArgument(f"node {self.id}", "batch_size, time_ms and power_w differ in length")
        if self.modes is not None:
            self.modes = np.asarray(self.modes, dtype=float).reshape(n, 4)

    def __len__(self) -> int:
        return int(self.batch_size.size)

    def work_samples(self) -> np.ndarray:
        """Samples each option processes this round (float: inf where r_b is inf or missing)."""
        return _work_samples(np.full(len(self), int(self.samples), dtype=np.int64), self.batch_size,
                             self.batch_efficiency)

    def admissible(self) -> np.ndarray:
        """Options allowed by the batch-size list and the efficiency vector (not the power budget)."""
        ok = np.isfinite(self.work_samples())
        if self.batch_sizes is not None:
            ok &= np.isin(self.batch_size, np.asarray(self.batch_sizes, dtype=np.int64))
        return ok

    def round_time_s(self) -> np.ndarray:
        return _round_time_s(self.work_samples(), self.batch_size, self.time_ms)


def _work_samples(samples: np.ndarray, batch: np.ndarray, efficiency: dict[int, float] | None) -> np.ndarray:
    if efficiency is None:
        return samples.astype(float)
    r = np.asarray([efficiency.get(int(b), math.inf) for b in batch], dtype=float)
    with np.errstate(invalid="ignore"):
        # round away float noise (0.67 × 300 = 201.00000000000003 must stay 201 samples)
        return np.where(np.isfinite(r), np.ceil(np.round(samples * r, 6)), math.inf)


def _round_time_s(work: np.ndarray, batch: np.ndarray, time_ms: np.ndarray) -> np.ndarray:
    finite = np.isfinite(work)
    w = np.where(finite, work, 0).astype(np.int64)
    minibatches = -(-w // batch)  # exact integer ceil
    return np.where(finite, minibatches * time_ms / 1000.0, math.inf)


@dataclass
class Fleet:
    nodes: list[NodeOptions]
    objective: str = "makespan"
    deadline_s: float | None = None
    site_power_budget_w: float | None = None
    path: str | None = field(default=None, repr=False)


@dataclass(frozen=True)
class FlatOptions:
    """Every node's admissible options, flat and sorted by node.

    ``node`` is the node's position in the fleet, ``row`` the option's row in its table.
    """

    node: np.ndarray
    row: np.ndarray
    time_s: np.ndarray
    power_w: np.ndarray
    energy_j: np.ndarray
    n_nodes: int

    def subset(self, keep: np.ndarray) -> FlatOptions:
        return FlatOptions(self.node[keep], self.row[keep], self.time_s[keep], self.power_w[keep],
                           self.energy_j[keep], self.n_nodes)

    def nodes_without_options(self) -> np.ndarray:
        counts = np.bincount(self.node, minlength=self.n_nodes)
        return np.flatnonzero(counts == 0)


def flatten(fleet: Fleet) -> FlatOptions:
    """All options of all nodes within each node's own power budget."""
    nodes = fleet.nodes
    counts = np.asarray([len(n) for n in nodes], dtype=np.int64)
    node = np.repeat(np.arange(len(nodes)), counts)
    row = np.concatenate([np.arange(c) for c in counts]) if nodes else np.zeros(0, np.int64)
    batch = np.concatenate([n.batch_size for n in nodes]) if nodes else np.zeros(0, np.int64)
    time_ms = np.concatenate([n.time_ms for n in nodes]) if nodes else np.zeros(0)
    power_w = np.concatenate([n.power_w for n in nodes]) if nodes else np.zeros(0)
    samples = np.repeat(np.asarray([n.samples for n in nodes], dtype=np.int64), counts)
    budget = np.repeat(np.asarray([np.inf if n.power_budget_w is None else n.power_budget_w for n in nodes],
                                  dtype=float), counts)
    keep = power_w <= budget
    if any(n.batch_sizes is not None or n.batch_efficiency is not None for n in nodes):
        # per-node batch constraints: the work may differ per option (r_b), some options are out
        work = np.concatenate([n.work_samples() for n in nodes])
        keep &= np.concatenate([n.admissible() for n in nodes])
        time_s = _round_time_s(work, batch, time_ms)
    else:
        time_s = (-(-samples // batch)) * time_ms / 1000.0
    flat = FlatOptions(node, row, time_s, power_w, time_s * power_w, len(nodes))
    return flat.subset(keep)


# --------------------------------------------------------------------------- fleet.json


@overload
def _number(value: object, where: str, *, positive: bool = ..., integer: Literal[True]) -> int: ...
@overload
def _number(value: object, where: str, *, positive: bool = ..., integer: Literal[False] = ...) -> float: ...
def _number(value: object, where: str, *, positive: bool = False, integer: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise InvalidArgument(where, f"{json.dumps(value)} is not a number",
                              "a positive integer" if integer else ("> 0" if positive else ">= 0"))
    if integer and value != int(value):
        raise InvalidArgument(where, f"{value} is not an integer", "a positive integer")
    if positive and value <= 0:
        raise InvalidArgument(where, f"{value} must be positive", "> 0")
    if value < 0:
        raise InvalidArgument(where, f"{value} is negative", ">= 0")
    return int(value) if integer else float(value)


def _load_table(path: str, where: str, cache: dict):
    resolved = os.path.realpath(path)
    if resolved not in cache:
        if not os.path.isfile(resolved):
            raise InvalidArgument(where, f"no such table file {path!r}")
        table = read_profile_table(path)
        if not table.rows:
            raise InvalidArgument(where, f"table {path!r} has no options")
        cache[resolved] = (table.column("batch_size", np.int64), table.column("time_ms"),
                           table.column("power_w"), table.mode_array())
    return cache[resolved]


def parse_batch_sizes(value, where: str) -> tuple[int, ...] | None:
    """``batch_sizes``: a positive integer (fixed) or a non-empty list of them; None: any."""
    if value is None:
        return None
    items = value if isinstance(value, list) else [value]
    if not items:
        raise InvalidArgument(where, "is empty", "a batch size or a non-empty list of batch sizes")
    return tuple(sorted({_number(b, f"{where}[{k}]" if isinstance(value, list) else where, positive=True,
                                 integer=True) for k, b in enumerate(items)}))


def parse_batch_efficiency(value, where: str) -> dict[int, float] | None:
    """``batch_efficiency``: {"batch size": r_b or passes_to_target (> 0; null: never)}; None: none."""
    if value is None:
        return None
    if not isinstance(value, dict) or not value:
        raise InvalidArgument(where, f"{json.dumps(value)} is not an object of batch size to r_b",
                              '{"8": 0.67, "32": 1.0}')
    out: dict[int, float] = {}
    for key, r in value.items():
        try:
            b = int(str(key))
        except ValueError:
            b = 0
        if b <= 0 or str(b) != str(key).strip():
            raise InvalidArgument(f"{where}.{key}", f"{json.dumps(key)} is not a batch size", "a positive integer")
        if r is None:
            out[b] = math.inf
            continue
        out[b] = _number(r, f"{where}.{key}", positive=True)
    return out


def parse_fleet(doc, base_dir: str = ".", name: str = "fleet.json") -> Fleet:
    """A :class:`Fleet` from the decoded ``fleet.json`` (tables relative to ``base_dir``).

    The document is checked against ``fleet.schema.json`` first (:mod:`edgetune.schemas`): an
    unknown or misspelt key, a missing one or a wrong type is an error naming the key path
    (``fleet.json:nodes[2].power_budget_w``). Optional: ``batch_sizes`` and ``batch_efficiency``
    at fleet level (every node's default) or per node (replaces the fleet's).
    """
    check_schema(doc, "fleet", name)
    objective = doc.get("objective", "makespan")
    if objective not in OBJECTIVES:
        raise InvalidArgument(f"{name}:objective", f"unknown objective {json.dumps(objective)}", ", ".join(OBJECTIVES))
    deadline = doc.get("deadline_s")
    deadline = None if deadline is None else _number(deadline, f"{name}:deadline_s", positive=True)
    site = doc.get("site_power_budget_w")
    site = None if site is None else validation.power_budget_w(site, f"{name}:site_power_budget_w")
    fleet_batches = parse_batch_sizes(doc.get("batch_sizes"), f"{name}:batch_sizes")
    fleet_eff = parse_batch_efficiency(doc.get("batch_efficiency"), f"{name}:batch_efficiency")
    raw_nodes = doc.get("nodes")
    if not isinstance(raw_nodes, list) or not raw_nodes:
        raise InvalidArgument(f"{name}:nodes", "must be a non-empty list of nodes")
    cache: dict = {}
    nodes: list[NodeOptions] = []
    seen: dict[str, int] = {}
    for i, raw in enumerate(raw_nodes):
        at = f"{name}:nodes[{i}]"
        if not isinstance(raw, dict):
            raise InvalidArgument(at, "must be an object with id, power_budget_w, samples, table")
        node_id = raw.get("id")
        if isinstance(node_id, bool) or not isinstance(node_id, (str, int)) or str(node_id) == "":
            raise InvalidArgument(f"{at}.id", f"{json.dumps(node_id)} is not a node id", "a non-empty string")
        node_id = str(node_id)
        if node_id in seen:
            raise InvalidArgument(f"{at}.id", f"duplicate id {node_id!r} (also nodes[{seen[node_id]}])")
        seen[node_id] = i
        budget = raw.get("power_budget_w")
        budget = None if budget is None else validation.power_budget_w(budget, f"{at}.power_budget_w")
        if "samples" not in raw:
            raise InvalidArgument(f"{at}.samples", "is missing", "a positive integer")
        samples = _number(raw["samples"], f"{at}.samples", positive=True, integer=True)
        table_path = raw.get("table")
        if not isinstance(table_path, str) or not table_path:
            raise InvalidArgument(f"{at}.table", f"{json.dumps(table_path)} is not a path to a profile table")
        full = table_path if os.path.isabs(table_path) else os.path.join(base_dir, table_path)
        batch, time_ms, power_w, modes = _load_table(full, f"{at}.table", cache)
        batches = parse_batch_sizes(raw.get("batch_sizes"), f"{at}.batch_sizes") if "batch_sizes" in raw \
            else fleet_batches
        eff = parse_batch_efficiency(raw.get("batch_efficiency"), f"{at}.batch_efficiency") \
            if "batch_efficiency" in raw else fleet_eff
        nodes.append(NodeOptions(node_id, samples, batch, time_ms, power_w, budget, modes, batches, eff))
    return Fleet(nodes, objective, deadline, site)


def load_fleet(path: str | os.PathLike) -> Fleet:
    path = os.fspath(path)
    try:
        with open(path, encoding="utf-8") as fh:
            doc = json.load(fh)
    except FileNotFoundError:
        raise InvalidArgument(path, "no such file") from None
    except IsADirectoryError:
        raise InvalidArgument(path, "is a directory, not a fleet JSON file") from None
    except json.JSONDecodeError as exc:
        raise InvalidArgument(f"{path}:{exc.lineno}:{exc.colno}", f"malformed JSON: {exc.msg}") from None
    fleet = parse_fleet(doc, os.path.dirname(os.path.abspath(path)), path)
    fleet.path = path
    return fleet
