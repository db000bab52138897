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
    missed = [r["name"] for r in results if r["met"] is False]
    print(f"\nwrote {out} and {out.with_suffix('.md')}; {len(results) - len(missed)}/{len(results)} targets met"
          + (f"; missed: {', '.join(missed)}" if missed else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
