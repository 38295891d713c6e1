"""The fleet path's pass (freshness_bench.measure_tsdb: 1,024 GPUs in a real VictoriaMetrics, a
window ended since the last pass stored anew and the window still filling) with and without the
sample count's context (windows.CONTEXT_WINDOWS), alternating, in one process (issue 41).

    .venv/bin/python benchmarks/aggregate_context_bench.py [--gpus 1024] [--rounds 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import freshness_bench  # a sibling script

from gpuledger.ingest.metrics.prometheus import windows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpus", type=int, default=1024)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    asked = windows.CONTEXT_WINDOWS
    passes: dict[int, list[float]] = {asked: [], 0: []}
    folder = Path(tempfile.mkdtemp(prefix="context-bench-"))
    for context in (asked, 0, asked, 0):
        windows.CONTEXT_WINDOWS = context
        passes[context] += freshness_bench.measure_tsdb(folder, args.gpus, args.rounds)
    for context, seconds in passes.items():
        print(f"count context {context} windows: passes {', '.join(f'{s:.2f}' for s in seconds)} s, "
              f"median {statistics.median(seconds):.2f} s")


if __name__ == "__main__":
    main()
