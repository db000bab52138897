"""Run edgetune's CUDA paths on a machine with an NVIDIA GPU and write down what they measured.

CI has no GPU, so these paths run only where one is lent (or on a Jetson). Each check
compares the CUDA path with an independent measurement taken in the same run:

1. ``runner``: :class:`~edgetune.workloads.MinibatchRunner` on CUDA (train and infer, each zoo
   workload, two batch sizes). Its per-minibatch time comes from a CUDA event pair; the check
   times the same minibatches with ``perf_counter`` around a ``synchronize`` on both sides. The
   event time must not exceed the wall time (plus timer slack), and the two should agree.
2. ``pipeline``: the same runners fed one batch already on the GPU: the model's own step time,
   and the share of the measured minibatch that is the input pipeline (made on the CPU).
3. ``layers``: :func:`~edgetune.workloads.time_module` on CUDA, each top-level child of ResNet18
   on its own input, summed, against the whole forward timed the same way.
4. ``profiler``: the profiling protocol (:class:`~edgetune.profiling.protocol.Profiler`) on a
   fake Orin AGX sysroot (``tests/fixtures/sysroots``) with the real zoo on CUDA, two modes;
   afterwards the sysroot must be byte-identical to the fixture (the device left as found).
5. ``interleaving``: the interleaving planner's ``TorchBackend`` on CUDA: t_tr and t_in(β).
6. ``power`` (needs ``pynvml``): ResNet18 training at several batch sizes with the board's own
   power read by NVML every 50 ms: time per minibatch, mean power, energy per sample. The
   clocks and power limit are left as they are (nothing is written to the GPU).

    python tools/cuda_check.py --out DIR [--quick]

Writes ``DIR/cuda_check.json`` and ``DIR/cuda_check.md``; exits 1 if a check failed.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "tests" / "fixtures" / "sysroots" / "orin-agx-jp5"
#: Event time may exceed the wall time by at most this (timer resolution, ms).
SLACK_MS = 0.05
WORKLOADS = ("resnet18", "mobilenetv3", "yolov8n", "lstm", "bert-base")


#: The torch device the checks run on (``--device cpu`` dry-runs the script without a GPU).
DEVICE = "cuda"


def _sync() -> None:
    if DEVICE == "cuda":
        torch.cuda.synchronize()


def check_runner(quick: bool) -> dict[str, Any]:
    from edgetune.workloads import MinibatchRunner

    rows, ok = [], True
    n = 5 if quick else 20
    for workload in WORKLOADS:
        for role in ("train", "infer"):
            for batch_size in (8, 64):
                runner = MinibatchRunner(workload, role, batch_size, device=DEVICE, seed=0)
                runner.run(3)  # warm-up: cuDNN autotuning, allocator growth
                runner.times_ms.clear()
                wall_ms = []
                for _ in range(n):
                    _sync()
                    t0 = time.perf_counter()
                    runner.run(1)
                    _sync()
                    wall_ms.append((time.perf_counter() - t0) * 1e3)
                event_ms = list(runner.times_ms)
                runner.close()
                over = [e - w for e, w in zip(event_ms, wall_ms, strict=True) if e > w + SLACK_MS]
                med_e, med_w = statistics.median(event_ms), statistics.median(wall_ms)
                row = {"workload": workload, "role": role, "batch_size": batch_size, "minibatches": n,
                       "event_median_ms": round(med_e, 3), "wall_median_ms": round(med_w, 3),
                       "event_over_wall": round(med_e / med_w, 3), "events_above_wall": len(over)}
                ok &= not over
                rows.append(row)
                print(f"runner {workload:12s} {role:5s} b={batch_size:3d} event {med_e:8.3f} ms "
                      f"wall {med_w:8.3f} ms ratio {med_e / med_w:.3f}", flush=True)
    return {"ok": ok, "rows": rows}


def check_pipeline(quick: bool) -> dict[str, Any]:
    """How much of a runner's minibatch is the input pipeline: the same runner, the same model and
    optimizer, once with its loader (synthetic items made per sample on the CPU, collated, pinned,
    copied) and once fed one batch already on the GPU (the model's own step)."""
    from edgetune.workloads import MinibatchRunner

    rows = []
    n = 5 if quick else 20
    for workload in WORKLOADS:
        for role in ("train", "infer"):
            for batch_size in (8, 64):
                runner = MinibatchRunner(workload, role, batch_size, device=DEVICE, seed=0)
                runner.run(3)
                full = statistics.median(runner.run(n))
                batch = runner._next_batch()  # noqa: SLF001 - the check feeds the runner's own batch back
                fixed = tuple(t.to(DEVICE) if isinstance(t, torch.Tensor) else t for t in batch)
                runner._next_batch = lambda fixed=fixed: fixed  # type: ignore[method-assign]
                runner.run(3)
                model = statistics.median(runner.run(n))
                runner.close()
                rows.append({"workload": workload, "role": role, "batch_size": batch_size,
                             "runner_ms": round(full, 3), "model_only_ms": round(model, 3),
                             "pipeline_share": round(1.0 - model / full, 3)})
                print(f"pipeline {workload:12s} {role:5s} b={batch_size:3d} runner {full:8.3f} ms "
                      f"model only {model:8.3f} ms pipeline {100 * (1 - model / full):5.1f} %", flush=True)
    return {"ok": all(r["model_only_ms"] > 0 for r in rows), "rows": rows}


def check_layers(quick: bool) -> dict[str, Any]:
    from edgetune.workloads import get_workload, time_module

    wl = get_workload("resnet18")
    model = wl.build(torch.device(DEVICE)).eval()
    x = wl.make_batch(32, seed=0, device=torch.device(DEVICE))[0]
    repeats = 10 if quick else 50
    whole = statistics.median(time_module(model, x, repeats=repeats, warmup=3))
    parts, h = [], x
    with torch.inference_mode():
        for name, child in model.named_children():
            if isinstance(child, torch.nn.Linear):
                h = torch.flatten(h, 1)
            ms = statistics.median(time_module(child, h, repeats=repeats, warmup=3))
            parts.append({"layer": name, "median_ms": round(ms, 4)})
            h = child(h)
    total = sum(p["median_ms"] for p in parts)
    print(f"layers: whole forward {whole:.3f} ms, sum of {len(parts)} children {total:.3f} ms", flush=True)
    # Each child timed alone pays its own launch and sync: the sum is at least the whole, within 3x.
    ok = 0.5 * whole <= total <= 3.0 * whole
    return {"ok": ok, "whole_median_ms": round(whole, 4), "children_sum_ms": round(total, 4), "children": parts}


def check_profiler(quick: bool) -> dict[str, Any]:
    from edgetune.devices.factory import open_device
    from edgetune.devices.sysfs_layout import tree_differences
    from edgetune.powermodes.grids import maxn, midpoint
    from edgetune.profiling.protocol import ProfileConfig, Profiler

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "root"
        shutil.copytree(FIXTURE, root)
        device = open_device(f"sysfs:{root}")
        # the fixture reports a throttled board: re-measuring after a cool-down would only wait
        config = ProfileConfig(n_minibatches=10 if quick else 40, sample_rate_hz=5.0, settle_timeout_s=3.0,
                               remeasure_throttled=False)
        rows = []
        try:
            profiler = Profiler(device, config)
            for mode in (midpoint(device.spec), maxn(device.spec)):
                m = profiler.measure(mode, "resnet18", "train", 32)
                rows.append({"mode": m.mode.as_dict(), "time_ms": round(m.time_ms, 3),
                             "time_std_ms": round(m.time_std_ms, 3), "power_w": round(m.power_w, 3),
                             "settled": m.settled, "n_minibatches": m.n_minibatches})
                print(f"profiler {m.mode} time {m.time_ms:.2f} ± {m.time_std_ms:.2f} ms "
                      f"(fake INA3221: {m.power_w:.2f} W)", flush=True)
            on_device = device.runner is not None and all(
                r.device.type == DEVICE for r in _runners(device.runner))
        finally:
            close = getattr(device, "close", None)
            if close is not None:
                close()
        diff = tree_differences(FIXTURE, root)
    print(f"profiler: ran on {DEVICE} {on_device}; files differing from the fixture afterwards: {diff}", flush=True)
    return {"ok": not diff and on_device and len(rows) == 2, "ran_on_device": on_device, "differing_files": diff,
            "rows": rows}


def _runners(pool: Any) -> list[Any]:
    return list(getattr(pool, "_runners", {}).values())


def check_interleaving(quick: bool) -> dict[str, Any]:
    from edgetune.optimization.interleaving.backends import TorchBackend, measure_step_times

    backend = TorchBackend("resnet18", "mobilenetv3", train_batch_size=32, max_infer_batch=64, device=DEVICE)
    try:
        backend.warmup(3)
        t_tr, t_in = measure_step_times(backend, (1, 8, 64), repeats=5 if quick else 20)
    finally:
        backend.close()
    print(f"interleaving: t_tr {t_tr:.3f} ms, t_in {t_in}", flush=True)
    ok = t_tr > 0 and all(v > 0 for v in t_in.values()) and t_in[64] >= t_in[1] * 0.8
    return {"ok": ok, "t_tr_ms": round(t_tr, 4), "t_in_ms": {str(k): round(v, 4) for k, v in t_in.items()}}


class _NvmlSampler:
    """NVML board power every ``period_s`` on a thread (mW → W), with timestamps."""

    def __init__(self, period_s: float = 0.05) -> None:
        import pynvml

        pynvml.nvmlInit()
        self._nvml = pynvml
        self._handle = pynvml.nvmlDeviceGetHandleByIndex(torch.cuda.current_device())
        self.period_s = period_s
        self.samples: list[tuple[float, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        while not self._stop.is_set():
            w = self._nvml.nvmlDeviceGetPowerUsage(self._handle) / 1000.0
            self.samples.append((time.perf_counter(), w))
            time.sleep(self.period_s)

    def __enter__(self) -> _NvmlSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def limits_w(self) -> dict[str, float]:
        h = self._handle
        return {"power_limit_w": self._nvml.nvmlDeviceGetPowerManagementLimit(h) / 1000.0,
                "sm_clock_mhz": float(self._nvml.nvmlDeviceGetClockInfo(h, self._nvml.NVML_CLOCK_SM))}


def check_power(quick: bool) -> dict[str, Any]:
    try:
        import pynvml  # noqa: F401
    except ImportError:
        return {"ok": True, "skipped": "pynvml is not installed"}
    if DEVICE != "cuda":
        return {"ok": True, "skipped": "NVML reads a GPU"}
    from edgetune.workloads import MinibatchRunner

    rows = []
    run_s = 2.0 if quick else 6.0
    for batch_size in (16, 32, 64, 128, 256):
        runner = MinibatchRunner("resnet18", "train", batch_size, device=DEVICE, seed=0)
        runner.run(5)
        runner.times_ms.clear()
        with _NvmlSampler() as sampler:
            time.sleep(0.3)  # power follows the load with a lag: skip the first samples
            t0 = time.perf_counter()
            while time.perf_counter() - t0 < run_s:
                runner.run(1)
            _sync()
            t1 = time.perf_counter()
        watts = [w for t, w in sampler.samples if t0 + 0.5 <= t <= t1]
        info = sampler.limits_w()
        runner.close()
        time_ms = statistics.median(runner.times_ms)
        power_w = statistics.fmean(watts) if watts else float("nan")
        rows.append({"batch_size": batch_size, "time_ms": round(time_ms, 3), "power_w": round(power_w, 1),
                     "energy_per_sample_mj": round(power_w * time_ms / batch_size, 2), "samples": len(watts),
                     **info})
        print(f"power resnet18 train b={batch_size:3d}: {time_ms:7.2f} ms/minibatch, {power_w:6.1f} W, "
              f"{power_w * time_ms / batch_size:6.2f} mJ/sample ({len(watts)} NVML samples)", flush=True)
    ok = all(r["samples"] > 3 and r["power_w"] > 0 for r in rows)
    return {"ok": ok, "rows": rows}


CHECKS = {"runner": check_runner, "pipeline": check_pipeline, "layers": check_layers, "profiler": check_profiler,
          "interleaving": check_interleaving, "power": check_power}


def write_markdown(report: dict[str, Any], path: Path) -> None:
    env = report["environment"]
    lines = ["# CUDA paths on a real GPU", "",
             f"`tools/cuda_check.py` on {env['gpu']} (torch {env['torch']}, CUDA {env['cuda']}, "
             f"Python {env['python']}), {env['date']}.", ""]
    for name, res in report["checks"].items():
        status = "passed" if res.get("ok") else "FAILED"
        lines.append(f"## {name}: {status}")
        if "error" in res:
            lines += ["", "```", res["error"].strip(), "```"]
        rows = res.get("rows")
        if rows:
            cols = [c for c in rows[0] if c != "mode"]
            lines += ["", "| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
            lines += ["| " + " | ".join(str(r[c]) for c in cols) + " |" for r in rows]
        extra = {k: v for k, v in res.items() if k not in ("ok", "rows", "error")}
        if extra:
            lines += ["", "```json", json.dumps(extra, indent=1), "```"]
        lines.append("")
    path.write_text("\n".join(lines), encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--quick", action="store_true", help="fewer minibatches and repeats")
    ap.add_argument("--only", default=",".join(CHECKS), help="comma-separated checks")
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda", help="cpu: a dry run of the script")
    args = ap.parse_args(argv)
    global DEVICE
    DEVICE = args.device
    if DEVICE == "cuda" and not torch.cuda.is_available():
        print("no CUDA device: nothing to check", file=sys.stderr)
        return 2
    torch.backends.cudnn.benchmark = False  # the runners' own setting; autotuning would move times
    report: dict[str, Any] = {"environment": {
        "gpu": torch.cuda.get_device_name() if DEVICE == "cuda" else platform.processor() or "cpu",
        "torch": torch.__version__, "cuda": torch.version.cuda, "python": platform.python_version(),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "cpus": os.cpu_count()}, "checks": {}}
    for name in args.only.split(","):
        t0 = time.perf_counter()
        try:
            res = CHECKS[name](args.quick)
        except Exception:  # noqa: BLE001 - a failed check is reported, the others still run
            res = {"ok": False, "error": traceback.format_exc()}
            print(res["error"], file=sys.stderr, flush=True)
        res["seconds"] = round(time.perf_counter() - t0, 1)
        report["checks"][name] = res
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "cuda_check.json").write_text(json.dumps(report, indent=1), encoding="utf-8")
    write_markdown(report, args.out / "cuda_check.md")
    failed = [n for n, r in report["checks"].items() if not r.get("ok")]
    print(f"checks failed: {failed}" if failed else "all checks passed", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
