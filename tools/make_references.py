"""Regenerate the shipped reference models (libs/edgetune/estimation/references/).

Each reference is the simulator's noise-free table of its workload on its device's grid
(``Reference.grid``), fitted with ``Reference.method`` on one torch thread (threads only contend
on a shared machine); 10 % of the grid's modes (seeded) are held out and the fit's MAPE on them is
printed and written into the model file. ``--fit-rows N`` fits on a seeded N-mode subsample instead
and scores the rest of the grid. The files are a few hundred kB.

    python tools/make_references.py [--epochs N] [--device orin-agx] [--fit-rows N]
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import torch

from edgetune.devices.simulated.tables import truth_table
from edgetune.estimation.bundle import TimePowerModel
from edgetune.estimation.references import REFERENCES
from edgetune.powermodes.grids import named_grid
from edgetune.powermodes.specs import get_spec
from edgetune.tables import Table

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "libs", "edgetune", "estimation", "references")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--epochs", type=int, default=100)
    ap.add_argument("--device", default=None, help="only this device's reference")
    ap.add_argument("--fit-rows", type=int, default=0,
                    help="fit on this many seeded modes of the grid and score the rest (default: hold out 10 %%)")
    ap.add_argument("--cv-folds", type=int, default=0, help="also cross-validate (K more fits)")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    for ref in REFERENCES:
        if args.device and ref.device != args.device:
            continue
        t0 = time.time()
        grid = named_grid(get_spec(ref.device), ref.grid).array()
        rows = [{"device": ref.device, **r} for r in truth_table(ref.device, ref.workload, ref.role, grid,
                                                                  [ref.batch_size])]
        held = 0.1 if not args.fit_rows else 1.0 - min(args.fit_rows, len(rows) - 1) / len(rows)
        table = Table(list(rows[0].keys()), rows, f"simulator:{ref.device}:{ref.grid}")
        model = TimePowerModel.fit_table(table, method=ref.method, seed=0, validation_fraction=held,
                                         source=f"simulator {ref.grid} grid", cv_folds=args.cv_folds,
                                         epochs=args.epochs)
        path = os.path.join(OUT, ref.filename)
        model.save(path)
        event = model.last_event
        m = event.get("metrics", {})
        print(f"{ref.name}: fitted on {event.get('n_train')} of {len(rows)} modes ({args.epochs} epochs); "
              f"MAPE on the {event.get('held_out_rows')} held-out modes: time {m.get('time_mape', float('nan')):.2f} %, "
              f"power {m.get('power_mape', float('nan')):.2f} %; {os.path.getsize(path) / 1e3:.0f} kB, "
              f"{time.time() - t0:.0f} s -> {path}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
