"""The least a process answering from DuckDB can take, against the process-start floor (a bare
``python -c "import typer"``), each alternated with the floor run by run
(benchmarks/cli_timing.against_floor). Issue 41's "PromQL >= 5x the CLI" at 256 GPUs needs a CLI
within 1.07-1.13x of the floor (BENCHMARKS "Answers as the user waits").

    .venv/bin/python benchmarks/duckdb_floor_bench.py WAREHOUSE.duckdb [--repeats 15]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from cli_timing import against_floor  # a sibling script


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("warehouse", type=Path)
    ap.add_argument("--repeats", type=int, default=15)
    args = ap.parse_args()
    py, path = sys.executable, str(args.warehouse)
    cases = {
        "a bare interpreter (python -c pass)": [py, "-c", "pass"],
        "DuckDB's engine imported, the warehouse opened read-only, one query; no typer": [
            py, "-c", (f"import _duckdb; c = _duckdb.connect({path!r}, read_only=True); "
                       "c.execute('SELECT count(*) FROM gpus').fetchall()")],
    }
    for name, argv in cases.items():
        r = against_floor(argv, repeats=args.repeats)
        print(f"{name}: {r['cli_s']:.3f} s against the floor's {r['floor_s']:.3f} s = {r['cli_s'] / r['floor_s']:.2f}x "
              f"wall; CPU {r['cli_cpu_s']:.3f} / {r['floor_cpu_s']:.3f} s = {r['cli_cpu_s'] / r['floor_cpu_s']:.2f}x",
              flush=True)


if __name__ == "__main__":
    main()
