"""`report weekly`'s squatting episodes (issue 21): the week judged from one read of its tables and
only where a held GPU could be idle, against the plain replay (queries.squatters_report at every
30-min moment, the tables read each time), in one process, same warehouse, interleaved rounds.

    .venv/bin/gpuledger simulate warehouse --gpus 64 --days 7 --start 2026-11-02T00:00:00 --seed 42 -w W
    .venv/bin/python benchmarks/weekly_bench.py --warehouse W --week 2026-W45 --rounds 3

Prints CPU-seconds (this process, all threads: resource.getrusage) and wall seconds per round,
the load average beside them, and checks the two give the same episodes.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import time


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--warehouse", required=True)
    ap.add_argument("--week", default="2026-W45")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    from gpuledger import warehouse
    from gpuledger.config_store import policy_in_force
    from gpuledger.reports.weekly import week_episodes
    from gpuledger.rules.periods import week_bounds

    start, end = week_bounds(args.week)
    cpu: dict[str, list[float]] = {"plain": [], "one-read": []}
    wall: dict[str, list[float]] = {"plain": [], "one-read": []}
    with warehouse.open_reader(args.warehouse) as con:
        policy = policy_in_force(con, None)
        out = {}
        for _ in range(args.rounds):
            for name in ("plain", "one-read"):
                c0, w0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
                out[name] = week_episodes(con, policy, start=start, end=end, plain=name == "plain")
                c1 = resource.getrusage(resource.RUSAGE_SELF)
                wall[name].append(time.perf_counter() - w0)
                cpu[name].append(c1.ru_utime + c1.ru_stime - c0.ru_utime - c0.ru_stime)
        assert out["plain"].equals(out["one-read"]), "the fast path's episodes differ from the plain replay's"
    for name in cpu:
        print(f"{name:9s} CPU {statistics.median(cpu[name]):6.2f} s  wall {statistics.median(wall[name]):6.2f} s "
              f"(median of {args.rounds})")
    print(f"ratio one-read / plain: CPU {statistics.median(cpu['one-read']) / statistics.median(cpu['plain']):.2f}, "
          f"episodes {out['plain'].height}, load average {' '.join(f'{x:.1f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
