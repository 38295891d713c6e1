"""Peak memory of the job imports on huge files (not a test; issue 36): a job CSV and a `sacct --json`
export of the given sizes, generated on the fly into a temporary folder, each imported by the real
CLI (`gpuledger ingest jobs-csv`, `gpuledger ingest slurm`) into a fresh warehouse holding only a
config; peak RSS of that process by ``/usr/bin/time -v``. Both are read and written a bounded chunk
at a time (jobs_csv.CHUNK_ROWS rows, slurm.CHUNK_JOBS job records, each chunk its own transaction).

    nice -n 10 .venv/bin/python benchmarks/job_import_memory_bench.py --csv-mb 2048 --sacct-mb 1024
    nice -n 10 .venv/bin/python benchmarks/job_import_memory_bench.py --csv-mb 0 --sacct-mb 0 --spool-files 100000

The CSV rows look like a real scheduler's export (~220 bytes: a job name, a user, a namespace,
submit / start / end times, a state); the sacct jobs are a job record as the real Slurm 22.05 rig
printed it (tests/fixtures/slurm/sacct-running.json, ~2 KB each), one JobID each. BENCHMARKS.md
"Job imports: peak memory" has the figures measured here.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CONFIG = """currency: USD
org:
  name: acme
  children:
    - {name: proj-a, shares: 1}
    - {name: proj-b, shares: 1}
    - {name: vision, shares: 1}
rate_card:
  - {gpu_model: H100, price_per_gpu_hour: "2.00", effective_from: 2026-01-01}
"""
GIB = 2**30


def write_csv(path: Path, megabytes: int) -> int:
    """A job CSV of about ``megabytes`` MiB; returns its rows."""
    target, rows = megabytes * 2**20, 0
    with open(path, "w") as out:
        out.write("job_id,cluster,project,user,gpu_model,gpus,submit_time,start_time,end_time,name,kind,priority,"
                  "state,namespace\n")
        while out.tell() < target:
            block = []
            for i in range(rows, rows + 10_000):
                day, hour = 1 + i % 28, i % 23
                block.append(f"slurm-{10_000_000 + i},gpu-cluster-east,vision,first{i % 500}.last{i % 97},H100,"
                             f"{1 + i % 8},2026-03-{day:02d}T{hour:02d}:00:00Z,2026-03-{day:02d}T{hour:02d}:05:00Z,"
                             f"2026-03-{day:02d}T{hour + 1:02d}:05:00Z,train-llama-7b-lr3e-4-seed{i % 100}-run{i % 1000:03d},"
                             f"batch,{1000 + i % 5000},COMPLETED,team-vision\n")
            out.write("".join(block))
            rows += 10_000
    return rows


def write_sacct_json(path: Path, megabytes: int) -> int:
    """A `sacct --json` document of about ``megabytes`` MiB of the rig's job record; returns its jobs."""
    fixture = json.loads((ROOT / "tests" / "fixtures" / "slurm" / "sacct-running.json").read_text())
    template = next(j for j in fixture["jobs"] if j["job_id"] == 2)  # 2 GPUs, RUNNING on the rig
    target, jobs = megabytes * 2**20, 0
    with open(path, "w") as out:
        out.write('{"meta": %s, "errors": [], "jobs": [' % json.dumps(fixture["meta"]))
        while out.tell() < target:
            block = []
            for i in range(jobs, jobs + 2_000):
                block.append(json.dumps({**template, "job_id": 1_000_000 + i}))
            out.write(("," if jobs else "") + ",".join(block))
            jobs += 2_000
        out.write("]}")
    return jobs


def write_spool(folder: Path, files: int) -> int:
    """A prolog/epilog spool (deploy/slurm/) of ``files`` files: each job's start and end on one of
    500 nodes, two GPUs each, all in the past (10 s apart: a million files span 58 days before
    2026-11-18), no two jobs on one GPU at once; returns the holdings it describes."""
    folder.mkdir()
    for job in range(files // 2):
        node, t0 = job % 500, 1_790_000_000 + job * 10
        head = f"format\tgpuledger-slurm-gpus/1\ncluster\tc1\nnode\tn{node}\njob_id\t{job}\n"
        gpus = "".join(f"gpu\t{i}\tGPU-{node:04d}-{i}\n" for i in (job % 4, job % 4 + 4))
        (folder / f"{job}.n{node}.{t0}.start").write_text(f"{head}event\tstart\ntime\t{t0}\n{gpus}")
        (folder / f"{job}.n{node}.{t0 + 40}.end").write_text(f"{head}event\tend\ntime\t{t0 + 40}\n")
    return files


def measure(command: list[str]) -> tuple[float, float, str]:
    """(peak RSS in MiB, wall seconds, the command's summary line) of one CLI run."""
    began = time.monotonic()
    done = subprocess.run(["/usr/bin/time", "-v", sys.executable, "-m", "gpuledger.cli", *command],
                          capture_output=True, text=True, cwd=ROOT)
    took = time.monotonic() - began
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} exited {done.returncode}: {done.stderr[-2000:]}")
    peak = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", done.stderr)[1]) / 1024
    said = next((line for line in (done.stdout + done.stderr).splitlines()
                 if "rows read" in line or "job records" in line or "holdings from" in line), "")
    return peak, took, said.strip()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--csv-mb", type=int, default=2048, help="job CSV size in MiB (0: skip)")
    parser.add_argument("--sacct-mb", type=int, default=1024, help="sacct --json size in MiB (0: skip)")
    parser.add_argument("--spool-files", type=int, default=0, help="prolog spool files (0: skip)")
    parser.add_argument("--folder", type=Path, default=None, help="where to generate (default: a temp folder)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.folder) as folder:
        config = Path(folder) / "gpuledger.yaml"
        config.write_text(CONFIG)
        runs = []
        if args.sacct_mb:
            runs.append(("sacct --json", Path(folder) / "sacct.json", write_sacct_json, args.sacct_mb,
                         lambda f, w: ["ingest", "slurm", "--file", str(f), "-w", str(w)]))
        if args.csv_mb:
            runs.append(("job CSV", Path(folder) / "jobs.csv", write_csv, args.csv_mb,
                         lambda f, w: ["ingest", "jobs-csv", str(f), "-w", str(w)]))
        if args.spool_files:
            spool, warehouse = Path(folder) / "spool", Path(folder) / "spool.duckdb"
            holdings = write_spool(spool, args.spool_files)
            peak, took, said = measure(["ingest", "slurm-gpus", "--spool", str(spool), "-w", str(warehouse)])
            print(f"prolog spool: {args.spool_files:,} files, {holdings:,} holdings: peak RSS {peak:,.0f} MiB, "
                  f"{took:.1f} s; {said}", flush=True)
        for label, path, write, megabytes, command in runs:
            count = write(path, megabytes)
            warehouse = Path(folder) / f"{path.stem}.duckdb"
            subprocess.run([sys.executable, "-m", "gpuledger.cli", "config", "load", "-c", str(config), "-w",
                            str(warehouse)], check=True, capture_output=True, cwd=ROOT)
            peak, took, said = measure(command(path, warehouse))
            verdict = "within" if peak <= 1024 else "OVER"
            print(f"{label}: {path.stat().st_size / GIB:.2f} GiB, {count:,} jobs: peak RSS {peak:,.0f} MiB "
                  f"({verdict} 1 GiB), {took / 60:.1f} min; {said}", flush=True)
            path.unlink()
            warehouse.unlink()


if __name__ == "__main__":
    main()
