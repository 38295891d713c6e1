"""Peak memory of `gpuledger ingest prometheus --aggregate 5m` (not a test; issue 41): a real
VictoriaMetrics loaded with a simulated day of ``--gpus`` GPUs at a 60-s scrape, then the CLI's peak
RSS (``/usr/bin/time -v``) with its chunks sized from the series count (the default) and with the
whole day in one chunk (the sizing switched off, what it did before).

    .venv/bin/python benchmarks/aggregate_memory_bench.py --gpus 128 512

Measured here (2 shared cores, December 2026; BENCHMARKS.md "Aggregate ingest memory"):
128 GPUs (150 devices) 465 MiB sized / 532 MiB one chunk; 512 GPUs 557 / 986 MiB.
"""

from __future__ import annotations

import argparse
import io
import re
import subprocess
import sys
import tempfile
from datetime import datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gpuledger.simulator import build_cluster, write_openmetrics
from tests.helpers.victoria_rig import VictoriaRig

START = datetime(2026, 11, 20)
_ONE_CHUNK = ("import sys; import gpuledger.ingest.metrics.prometheus.aggregate as a; "
              "a.SERIES_WINDOWS_PER_CHUNK = 10**9; sys.argv = ['gpuledger'] + sys.argv[1:]; "
              "from gpuledger.cli import main; main()")
_UNSHARDED = _ONE_CHUNK.replace("SERIES_WINDOWS_PER_CHUNK", "SERIES_PER_SHARD")  # every series in one query


def _load(vm: VictoriaRig, gpus: int, hours: int) -> None:
    sim = build_cluster(seed=31, gpus=gpus, start=START, days=hours / 24, interval_s=60)
    # a few hours at a time (the text of a day of 512 GPUs is GBs); ten minutes at fleet sizes
    step = 6 * 3600 if gpus <= 1024 else 600
    for at in range(0, hours * 3600, step):
        text = io.StringIO()
        write_openmetrics(sim, text, sim.start_s + at, sim.start_s + min(at + step, hours * 3600), blanks=False)
        vm.import_prometheus_text(f"{line.rsplit(' ', 1)[0]} {line.rsplit(' ', 1)[1]}000\n"
                                  for line in text.getvalue().splitlines() if line and not line.startswith("#"))
        del text
    vm.flush()


def _peak(vm: VictoriaRig, warehouse: Path, *, sized: bool, hours: int, sharded: bool = True) -> tuple[float, float, str]:
    """(peak RSS MiB, CPU-s, the CLI's summary line) of one aggregate run of the loaded hours."""
    run = (["-m", "gpuledger.cli"] if sharded else ["-c", _UNSHARDED]) if sized else ["-c", _ONE_CHUNK]
    done = subprocess.run(["/usr/bin/time", "-v", sys.executable, *run, "ingest", "prometheus", "--url", vm.url,
                           "--start", START.isoformat(), "--end", (START + timedelta(hours=hours)).isoformat(),
                           "--aggregate", "5m", "-w", str(warehouse)], capture_output=True, text=True, cwd=ROOT,
                          check=False)
    if done.returncode != 0:
        raise SystemExit(f"the aggregate ingest exited {done.returncode}: {done.stderr[-3000:]}")
    kib = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", done.stderr)[1])
    cpu = sum(float(re.search(rf"{kind} time \(seconds\): ([\d.]+)", done.stderr)[1]) for kind in ("User", "System"))
    summary = next(line for line in done.stderr.splitlines() if line.startswith("aggregate"))
    return kib / 1024, cpu, summary


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--gpus", type=int, nargs="+", default=[128, 512])
    ap.add_argument("--hours", type=int, default=24, help="hours of samples loaded and ingested (default a day)")
    ap.add_argument("--sized-only", action="store_true", help="skip the one-chunk run (at fleet sizes it is "
                    "the memory the sizing exists to avoid)")
    ap.add_argument("--unsharded", action="store_true", help="also run with every series in one query "
                    "(SERIES_PER_SHARD off: what a one-window chunk of a large fleet did before)")
    args = ap.parse_args()
    runs = [("sized", True, True)] + ([("sized, unsharded", True, False)] if args.unsharded else []) + \
        ([] if args.sized_only else [("one chunk", False, True)])
    for gpus in args.gpus:
        with tempfile.TemporaryDirectory() as work:
            vm = VictoriaRig(Path(work))
            try:
                _load(vm, gpus, args.hours)
                for name, sized, sharded in runs:
                    mib, cpu, summary = _peak(vm, Path(work) / f"{name}.duckdb", sized=sized, hours=args.hours,
                                              sharded=sharded)
                    chunking = re.search(r"\((.*?)\):", summary)[1]
                    print(f"{gpus} GPUs x {args.hours} h, {name}: peak {mib:.0f} MiB, "
                          f"{cpu:.1f} CPU-s ({chunking}) | {summary}", flush=True)
            finally:
                vm.stop()


if __name__ == "__main__":
    main()
