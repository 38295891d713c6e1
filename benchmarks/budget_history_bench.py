"""Budget burn as history grows (issue 41: flat per pass however long the history): `report budget`'s
read of the budget periods containing now (queries.budget_tables) against the whole history's, on one
warehouse, alternating, in one process; both must give the same burn.

    .venv/bin/python benchmarks/budget_history_bench.py WAREHOUSE [--rounds 3]

WAREHOUSE: e.g. `gpuledger simulate warehouse --gpus 256 --days 61 --start 2026-10-01T00:00:00
--interval 300` (the example config budgets November 2026 only: the period is the last 30 of 61 days).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from datetime import timedelta

from gpuledger.warehouse.clock import data_now
from polars.testing import assert_frame_equal

from gpuledger import warehouse
from gpuledger.analytics import queries
from gpuledger.analytics.budget import budget_burn
from gpuledger.analytics.collect import collect
from gpuledger.analytics.load import load_tables


def whole_history(con, as_of):
    """The read before: every job and allocation up to as_of + 1 day."""
    t = load_tables(con, end=as_of + timedelta(days=1), samples=False)
    burn = budget_burn(t.job_allocations, t.gpus, t.jobs, t.org_nodes, t.budgets, t.rate_card, as_of=as_of)
    return collect(burn).sort("node")


def periods_only(con, as_of):
    return queries.budget_report(con, as_of=as_of).sort("node")


def allocations_read(con, as_of) -> dict[str, int]:
    """Allocation rows each read loads (counted apart from the timings)."""
    every = load_tables(con, end=as_of + timedelta(days=1), samples=False)
    return {"whole history": collect(every.job_allocations).height,
            "budget periods": collect(queries.budget_tables(con, as_of=as_of).job_allocations).height}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("warehouse")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with warehouse.open_reader(args.warehouse) as con:
        as_of = data_now(con)
        times: dict[str, list[float]] = {"whole history": [], "budget periods": []}
        frames = {}
        for _ in range(args.rounds):
            for name, read in (("whole history", whole_history), ("budget periods", periods_only)):
                began = time.perf_counter()
                frames[name] = read(con, as_of)
                times[name].append(time.perf_counter() - began)
        rows = allocations_read(con, as_of)
        expected = frames["whole history"]
        assert_frame_equal(frames["budget periods"].select(expected.columns), expected)
    for name, seconds in times.items():
        print(json.dumps({"read": name, "as_of": as_of.isoformat(), "allocations_read": rows[name],
                          "median_s": round(statistics.median(seconds), 3), "rounds_s": [round(s, 3) for s in seconds]}))
    print(json.dumps({"same_burn": True, "ratio": round(statistics.median(times["whole history"])
                                                        / statistics.median(times["budget periods"]), 2)}))


if __name__ == "__main__":
    main()
