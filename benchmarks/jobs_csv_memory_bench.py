"""Peak memory of `gpuledger ingest jobs-csv` as the file grows (not a test; issue 36): a generic job
CSV of each ``--rows`` size (about 65 bytes a row), imported into a fresh warehouse holding only a
config, peak RSS by ``/usr/bin/time -v``. The file is read and written a chunk at a time
(``CHUNK_ROWS`` rows, each chunk its own transaction), so the text is never held whole.

    nice -n 10 .venv/bin/python benchmarks/jobs_csv_memory_bench.py --rows 300000 1200000

BENCHMARKS.md "Job CSV import: peak memory" has the figures measured here.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CONFIG = """currency: USD
org:
  name: acme
  children:
    - {name: p, shares: 1}
rate_card:
  - {gpu_model: H100, price_per_gpu_hour: "2.00", effective_from: 2026-01-01}
"""


def _csv(path: Path, rows: int) -> int:
    with open(path, "w") as out:
        out.write("job_id,cluster,project,user,gpu_model,gpus,start_time,end_time\n")
        for i in range(rows):
            out.write(f"j{i},c1,p,u{i % 50},H100,1,2026-03-01T00:00:00Z,2026-03-01T{i % 23 + 1:02d}:00:00Z\n")
    return path.stat().st_size


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, nargs="+", default=[300_000, 1_200_000])
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        config = Path(folder) / "gpuledger.yaml"
        config.write_text(CONFIG)
        for rows in args.rows:
            csv_file, warehouse = Path(folder) / f"jobs-{rows}.csv", Path(folder) / f"w-{rows}.duckdb"
            size = _csv(csv_file, rows)
            subprocess.run([sys.executable, "-m", "gpuledger.cli", "config", "load", "-c", str(config), "-w",
                            str(warehouse)], check=True, capture_output=True, cwd=ROOT)
            done = subprocess.run(["/usr/bin/time", "-v", sys.executable, "-m", "gpuledger.cli", "ingest", "jobs-csv",
                                   str(csv_file), "-w", str(warehouse)], capture_output=True, text=True, cwd=ROOT)
            peak = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", done.stderr)[1]) / 1024
            said = next((line for line in done.stderr.splitlines() if "rows read" in line), done.stderr[-300:])
            print(f"{rows:,} rows ({size / 2**20:,.0f} MiB): peak RSS {peak:,.0f} MiB; {said.strip()}", flush=True)
            csv_file.unlink()


if __name__ == "__main__":
    main()
