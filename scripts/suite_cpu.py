"""Where the test suite's time goes: the per-test lines of GPULEDGER_TEST_CPU_LOG (tests/conftest.py)
summed per test file, largest CPU first.

    GPULEDGER_TEST_CPU_LOG=/tmp/cpu.jsonl make test
    .venv/bin/python scripts/suite_cpu.py /tmp/cpu.jsonl [--top 40]

CPU-s = the test process's own plus the child processes it reaped; wall-s is summed over the
file's tests (both workers' files together make the run's wall time times two). Where the log
names each test's worker and end (since session 23), it also says when each worker finished its
last test: the time after the first worker went idle is the run's tail, spent on one core."""

from __future__ import annotations

import argparse
import json
from collections import defaultdict


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("log")
    parser.add_argument("--top", type=int, default=40)
    args = parser.parse_args()
    files: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0, 0])
    workers: dict[str, list[float]] = {}  # worker -> [first start, last end, last file]
    try:
        with open(args.log, encoding="utf-8") as lines:
            for number, line in enumerate(lines, 1):
                row = json.loads(line)
                if "ended_at" in row:
                    span = workers.setdefault(row["worker"], [row["ended_at"] - row["wall_s"], 0.0, ""])
                    span[0] = min(span[0], row["ended_at"] - row["wall_s"])
                    if row["ended_at"] >= span[1]:
                        span[1], span[2] = row["ended_at"], row["test"].split("::", 1)[0]
                total = files[row["test"].split("::", 1)[0]]
                total[0] += row["own_cpu_s"]
                total[1] += row["children_cpu_s"]
                total[2] += row["wall_s"]
                total[3] += 1
    except OSError as exc:
        parser.error(f"{args.log}: {exc.strerror or exc}; give the file GPULEDGER_TEST_CPU_LOG named")
    except (ValueError, KeyError, TypeError, AttributeError):
        parser.error(f"{args.log}:{number}: not a line of GPULEDGER_TEST_CPU_LOG (tests/conftest.py)")
    own, children, wall = (sum(t[i] for t in files.values()) for i in range(3))
    print(f"{sum(int(t[3]) for t in files.values())} tests in {len(files)} files: CPU {own + children:,.0f} s "
          f"(own {own:,.0f}, children {children:,.0f}), wall {wall:,.0f} s summed")
    print(f"{'CPU-s':>8} {'own':>7} {'children':>8} {'wall-s':>7} {'tests':>5}  file")
    for name, (o, c, w, n) in sorted(files.items(), key=lambda kv: -(kv[1][0] + kv[1][1]))[:args.top]:
        print(f"{o + c:8.1f} {o:7.1f} {c:8.1f} {w:7.1f} {int(n):5d}  {name}")
    if workers:
        began = min(s[0] for s in workers.values())
        print("workers (s from the first test's start): " + "; ".join(
            f"{w} done at {s[1] - began:,.0f} (last: {s[2]})" for w, s in sorted(workers.items())))
        ends = sorted(s[1] for s in workers.values())
        if len(ends) > 1:
            print(f"tail: {ends[-1] - ends[0]:,.0f} s with fewer workers than the run started")


if __name__ == "__main__":
    main()
