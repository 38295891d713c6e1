"""Budget burn as of a month's end, read and computed in one process (queries.budget_report), for
BENCHMARKS.md "Budget burn by the day" (issue 41): run it in the code before and after (a worktree
or `git stash`) and compare the printed seconds and the process's peak RSS (`/usr/bin/time -f %M`).

    /usr/bin/time -f "%M KiB %e s" .venv/bin/python benchmarks/budget_pieces_bench.py WAREHOUSE [--rounds N]

WAREHOUSE: a simulated month, e.g. `gpuledger simulate warehouse --gpus 4096 --days 30 --interval 300`.
Prints each round's seconds and the consumed sum (equal before and after)."""

from __future__ import annotations

import argparse
import time
from datetime import datetime

from gpuledger import warehouse
from gpuledger.analytics import queries
from gpuledger.config import load_config


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("warehouse")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--as-of", default="2026-11-30T23:00", help="UTC; default the simulated month's last hour")
    args = ap.parse_args()
    as_of = datetime.fromisoformat(args.as_of)
    with warehouse.open_reader(args.warehouse) as con:
        policy = load_config(None).policy
        for _ in range(args.rounds):
            t = time.perf_counter()
            burn = queries.budget_report(con, policy=policy, as_of=as_of)
            print(f"budget_report {time.perf_counter() - t:.2f} s, {burn.height} rows, "
                  f"consumed sum {float(burn['consumed_gpu_hours'].sum())!r}")


if __name__ == "__main__":
    main()
