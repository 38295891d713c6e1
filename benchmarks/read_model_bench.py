"""CLI read latency end to end (process start included) against a materialized warehouse, and
`--help` against a bare `python -c "import typer"` (issue 22 §3 and §4).

Each case runs as its own process, the cases interleaved round by round (so the machine's load
touches them alike); the figure is the median of the rounds and its ratio to the baseline measured
in the same run. For every read command the read model's source (materialized / computed) is
printed beside it, so a figure is never credited to the wrong path.

    .venv/bin/gpuledger simulate warehouse --gpus 1024 --days 7 --interval 300 --seed 42 -w W
    .venv/bin/gpuledger pipelines run-once -w W
    .venv/bin/python benchmarks/read_model_bench.py --warehouse W [--rounds 9] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

BIN = Path(sys.executable).parent


def _cases(warehouse: Path) -> tuple[dict[str, list[str]], dict[str, str]]:
    from gpuledger import facts
    from gpuledger import warehouse as wh
    from gpuledger.ledger.config_versions import stored_config

    with wh.open_reader(warehouse) as con:
        now = facts.data_now(con)
        policy = stored_config(con).config.policy
        day = now.replace(hour=0, minute=0, second=0, microsecond=0)
        start, end = day - timedelta(days=6), day  # the whole days before the running one
        sources = {
            "report fairshare": facts.fairshare(con, policy=policy).source,
            "report budget": facts.budget(con, policy=policy).source,
            "report usage (6 whole days)": facts.usage(con, start=start, end=end, policy=policy).source,
            "report usage --by user": facts.usage(con, start=start, end=end, by="user", policy=policy).source,
            "report usage --by job": facts.usage(con, start=start, end=end, by="job", policy=policy).source,
            "report utilization (6 whole days)": facts.utilization(con, start=start, end=end, policy=policy).source,
            "report squatters": facts.findings(con, policy=policy).source,
            # the same range off the hour by one second: the materialized hours cannot answer it
            "report usage (computed: +1 s)": facts.usage(con, start=start + timedelta(seconds=1), end=end,
                                                         policy=policy).source,
        }
    cli = [str(BIN / "gpuledger")]
    w = ["-w", str(warehouse)]
    cases = {
        "python -c 'import typer' (baseline)": [sys.executable, "-c", "import typer"],
        "gpuledger --help": [*cli, "--help"],
        "gpuledger report usage --help": [*cli, "report", "usage", "--help"],
        "report fairshare": [*cli, "report", "fairshare", *w],
        "report budget": [*cli, "report", "budget", *w],
        "report usage (6 whole days)": [*cli, "report", "usage", "--start", start.isoformat(), "--end",
                                        end.isoformat(), *w],
        "report usage --by user": [*cli, "report", "usage", "--by", "user", "--start", start.isoformat(), "--end",
                                   end.isoformat(), *w],
        "report usage --by job": [*cli, "report", "usage", "--by", "job", "--start", start.isoformat(), "--end",
                                  end.isoformat(), *w],
        "report utilization (6 whole days)": [*cli, "report", "utilization", "--start", start.isoformat(), "--end",
                                              end.isoformat(), *w],
        "report squatters": [*cli, "report", "squatters", *w],
        "report usage (computed: +1 s)": [*cli, "report", "usage", "--start",
                                          (start + timedelta(seconds=1)).isoformat(), "--end", end.isoformat(), *w],
    }
    return cases, sources


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--warehouse", type=Path, required=True, help="a warehouse `pipelines run-once` materialized")
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--json", type=Path, default=None, help="write the figures here")
    args = ap.parse_args(argv)
    if not args.warehouse.is_file():
        print(f"read_model_bench: no warehouse at {args.warehouse}; build it as the docstring says", file=sys.stderr)
        return 1
    cases, sources = _cases(args.warehouse)
    env = {**os.environ, "COLUMNS": "80"}
    times: dict[str, list[float]] = {name: [] for name in cases}
    cpu: dict[str, list[float]] = {name: [] for name in cases}  # user + system CPU-seconds of the process
    load_before = os.getloadavg()[0]
    for _ in range(args.rounds):
        for name, command in cases.items():
            used = resource.getrusage(resource.RUSAGE_CHILDREN)
            began = time.perf_counter()
            subprocess.run(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
            times[name].append(time.perf_counter() - began)
            now = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu[name].append(now.ru_utime + now.ru_stime - used.ru_utime - used.ru_stime)
    baseline = "python -c 'import typer' (baseline)"
    base, base_cpu = statistics.median(times[baseline]), statistics.median(cpu[baseline])
    load = os.getloadavg()[0]
    rows = []
    # wall time is what a user waits; on a loaded machine the CPU-seconds are the steadier figure
    print(f"median of {args.rounds} rounds, load average {load_before:.1f} before / {load:.1f} after "
          f"({os.cpu_count()} CPUs)")
    print(f"  {'case':38s} {'wall':>7s} {'(min)':>7s} {'ratio':>6s} {'CPU s':>7s} {'ratio':>6s}  source")
    for name, ts in times.items():
        med, med_cpu = statistics.median(ts), statistics.median(cpu[name])
        row = {"case": name, "median_s": round(med, 3), "min_s": round(min(ts), 3),
               "ratio_to_import_typer": round(med / base, 2), "cpu_s": round(med_cpu, 3),
               "cpu_ratio_to_import_typer": round(med_cpu / base_cpu, 2), "source": sources.get(name)}
        rows.append(row)
        print(f"  {name:38s} {med:6.3f}s {min(ts):6.3f}s {med / base:5.2f}x {med_cpu:6.3f}s {med_cpu / base_cpu:5.2f}x"
              f"  {sources.get(name) or ''}")
    if args.json:
        args.json.write_text(json.dumps({"load_average_before": load_before, "load_average": load,
                                         "rounds": args.rounds, "cases": rows}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
