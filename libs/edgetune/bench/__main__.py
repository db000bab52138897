"""``python -m edgetune.bench``: run the benchmarks and write the results file."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from edgetune.bench import regret, runner, scale, suites, watch, wire  # noqa: F401 - importing the suites registers them


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m edgetune.bench")
    ap.add_argument("--out", default="bench-results/results.json")
    ap.add_argument("--only", nargs="*", help="benchmark names to run (default: all)")
    ap.add_argument("--list", action="store_true", help="list the benchmarks and exit")
    args = ap.parse_args(argv)
    if args.list:
        for b in runner.REGISTRY:
            print(f"{b.name:32s} {b.target}")
        return 0
    out = Path(args.out)
    results = runner.run(args.only, out)
    unfinished = [r["name"] for r in results if r["value"] is None]  # its run failed: nothing was measured
    missed = [r["name"] for r in results if r["met"] is False]
    met = [r["name"] for r in results if r["met"] is True]
    reported = len(results) - len(unfinished) - len(missed) - len(met)  # no target: a figure to read
    print(f"\nwrote {out} and {out.with_suffix('.md')}; {len(met)} targets met"
          + (f"; missed: {', '.join(missed)}" if missed else "")
          + (f"; not measured (the run failed, see its details): {', '.join(unfinished)}" if unfinished else "")
          + (f"; {reported} reported without a target" if reported else ""))
    return 1 if unfinished else 0


if __name__ == "__main__":
    sys.exit(main())
