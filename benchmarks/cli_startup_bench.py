"""How long `gpuledger ... --help` takes, as a ratio to `python -c "import typer"` measured in the
same run (issue 7 §4: under 0.3 s on a 2-core machine). Runs are alternated so machine load hits
all commands alike; the median of N runs is reported.

    .venv/bin/python benchmarks/cli_startup_bench.py [--runs 15] [--tree DIR]

``--tree DIR`` times a checkout at DIR instead (run as ``python -m gpuledger.cli`` with DIR first on
PYTHONPATH): used to measure the layout before lazy imports, e.g. a `git worktree` of beb9dbb.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

COMMANDS = ["", "report chargeback", "report fairshare", "report squatters", "ingest prometheus",
            "ingest kubernetes", "ingest jobs-csv", "simulate warehouse", "ingest agent nvml"]


def _time(cmd: list[str], env: dict, cwd: str | None) -> float:
    began = time.perf_counter()
    subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, cwd=cwd, check=True)
    return time.perf_counter() - began


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--tree", default=None)
    args = parser.parse_args()
    env = dict(os.environ)
    if args.tree:
        env["PYTHONPATH"] = args.tree
    base = [sys.executable, "-c", "import typer"]
    cases = {"python -c 'import typer'": base}
    for c in COMMANDS:
        cases[f"gpuledger {c} --help".replace("  ", " ")] = [sys.executable, "-m", "gpuledger.cli",
                                                            *c.split(), "--help"]
    samples: dict[str, list[float]] = {k: [] for k in cases}
    for _ in range(args.runs):
        for name, cmd in cases.items():
            samples[name].append(_time(cmd, env, args.tree))
    floor = statistics.median(samples["python -c 'import typer'"])
    print(f"{'command':40} {'median s':>9} {'ratio':>7}")
    for name, values in samples.items():
        med = statistics.median(values)
        print(f"{name:40} {med:9.3f} {med / floor:7.1f}")


if __name__ == "__main__":
    main()
