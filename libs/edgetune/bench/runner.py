"""Benchmark registry and timing helpers."""

from __future__ import annotations

import json
import os
import platform
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass
class Benchmark:
    name: str
    fn: Callable[[], dict[str, Any]]
    #: Human statement of the target, e.g. "< 5 ms".
    target: str
    #: Key of the measured value compared with ``limit`` (smaller is better).
    metric: str
    limit: float | None


REGISTRY: list[Benchmark] = []


def benchmark(name: str, target: str, metric: str, limit: float | None = None):
    def register(fn: Callable[[], dict[str, Any]]):
        REGISTRY.append(Benchmark(name, fn, target, metric, limit))
        return fn

    return register


def best_of_s(fn: Callable[[], Any], repeats: int = 5) -> float:
    """Least wall time of ``repeats`` calls (the least is the least disturbed by other work)."""
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def reference_loop_ms() -> float:
    """Milliseconds one core takes for a fixed pure-Python loop (least of 5): how fast this machine's cores ran
    as a benchmark started. On the shared development machine it took 30 ms or 72 ms within one hour; it is short,
    so a slowdown that sets in later is not in it (one 1,000-node run took ~25 % more CPU at 30 ms): a hint
    beside the load, not a correction."""
    def loop() -> int:
        total = 0
        for i in range(300_000):
            total += i * i % 7
        return total

    return round(best_of_s(loop, repeats=5) * 1e3, 1)


def run(names: list[str] | None, out: Path, log: Callable[[str], None] = print) -> list[dict[str, Any]]:
    results = []
    for b in REGISTRY:
        if names and b.name not in names:
            continue
        log(f"- {b.name} (target {b.target}) ...")
        # how busy the machine was as it started: timings on a shared machine are only read beside this
        load_1m, ran_at = round(os.getloadavg()[0], 2), time.strftime("%Y-%m-%dT%H:%M:%S%z")
        loop_ms = reference_loop_ms()
        t0 = time.perf_counter()
        try:
            measured = b.fn()
            value = measured.get(b.metric)
            ok = None if b.limit is None or value is None else bool(value < b.limit)
            row = {"name": b.name, "target": b.target, "metric": b.metric, "value": value, "met": ok,
                   "details": measured}
        except Exception as exc:  # noqa: BLE001 - one failing benchmark must not hide the others
            row = {"name": b.name, "target": b.target, "metric": b.metric, "value": None, "met": False,
                   "error": f"{type(exc).__name__}: {exc}", "trace": traceback.format_exc(limit=3)}
        row["wall_s"] = round(time.perf_counter() - t0, 3)
        row["load_1m_before"], row["reference_loop_ms"], row["ran_at"] = load_1m, loop_ms, ran_at
        log(f"  {b.metric} = {row['value']!r}  ({'met' if row['met'] else 'NOT met' if row['met'] is False else 'no limit'})")
        results.append(row)
    out.parent.mkdir(parents=True, exist_ok=True)
    if names and out.exists():  # a partial run updates its rows and keeps the others
        ran = {r["name"] for r in results}
        kept = [r for r in json.loads(out.read_text()).get("results", []) if r.get("name") not in ran]
        results = kept + results
        order = {b.name: i for i, b in enumerate(REGISTRY)}
        results.sort(key=lambda r: order.get(str(r["name"]), len(order)))
    meta = {"python": platform.python_version(), "machine": platform.machine(), "cores": str(os.cpu_count()),
            "processor": platform.processor(), "time": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    out.write_text(json.dumps({"meta": meta, "results": results}, indent=2, default=float))
    out.with_suffix(".md").write_text(_markdown(results, meta))
    return results


def _markdown(results: list[dict[str, Any]], meta: dict[str, str]) -> str:
    lines = [f"# edgetune benchmarks ({meta['time']}, Python {meta['python']}, {meta['machine']}, "
             f"{meta.get('cores', '?')} cores)", "",
             "How busy the machine was: each row's 1-minute load average as it started, how many milliseconds a "
             "fixed loop took on one core then (`reference_loop_ms`: the machine's speed, which varies on a shared "
             "machine at the same load), and when it ran (a row kept from an earlier partial run keeps its own).", "",
             "| benchmark | target | measured | met | load before | loop ms | ran at |",
             "|---|---|---|---|---|---|---|"]
    for r in results:
        v = r["value"]
        shown = f"{v:.4g}" if isinstance(v, float) else str(v)
        met = {True: "yes", False: "**no**", None: "–"}[r["met"]]
        note = r.get("details", {}).get("note")  # a benchmark's one-line account of where a target is missed
        shown += f" ({note})" if note else ""
        lines.append(f"| {r['name']} | {r['target']} | {r['metric']} = {shown} | {met} | "
                     f"{r.get('load_1m_before', '–')} | {r.get('reference_loop_ms', '–')} | {r.get('ran_at', '–')} |")
    return "\n".join(lines) + "\n"
