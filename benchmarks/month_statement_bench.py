"""The month's statement as finance meets it (issue 41's "the month's statement read"), each step one
process under ``/usr/bin/time -v`` (wall, user + system CPU-s, peak RSS), in the order a month
lives through them:

1. ``report statement`` of the month while it is open (computed from the data: lines, usage,
   capacity x price, the files);
2. the chargeback page's statement (``dashboards.queries.statement``, a fresh process: the page's
   first load on a cold server, imports included);
3. ``period close`` (with ``--close``: it writes: the lines and the statement are frozen);
4. ``report statement`` of the closed month (read back as frozen, never recomputed);
5. the chargeback page's statement of the closed month.

    .venv/bin/python benchmarks/month_statement_bench.py --warehouse W --period 2026-11 --close \\
        --json bench/OUT.json

Without ``--close`` the warehouse is only read (steps 1-2). The machine is shared: the load
average is recorded before and after each step, so CPU-s stand beside wall seconds.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_PAGE = ("import sys, time; t = time.perf_counter(); from gpuledger.dashboards import queries; "
         "v = queries.statement(sys.argv[1], sys.argv[2], None); n = getattr(v.lines, 'height', v.lines); "
         "print(f'page: {v.source} {v.status}, {n} lines, reconciles {v.reconciles}, "
         "{time.perf_counter() - t:.2f} s in process', flush=True)")


def timed(argv: list[str], *, env: dict | None = None) -> dict:
    """One process under /usr/bin/time -v: wall s, CPU s (user + system), peak RSS MiB, its output tail."""
    load_before = os.getloadavg()[0]
    t0 = time.perf_counter()
    done = subprocess.run(["/usr/bin/time", "-v", *argv], capture_output=True, text=True, cwd=ROOT, env=env,
                          check=False)
    wall = time.perf_counter() - t0
    if done.returncode != 0:
        why = done.stderr.split("\tCommand being timed")[0]
        raise SystemExit(f"{' '.join(argv)} exited {done.returncode}:\n{done.stdout[-2000:]}\n{why[-3000:]}")
    err = done.stderr

    def field(name: str) -> float:
        return float(re.search(rf"{re.escape(name)}: ([\d.]+)", err)[1])

    return {"wall_s": round(wall, 2), "cpu_s": round(field("User time (seconds)") + field("System time (seconds)"), 2),
            "peak_rss_mib": round(field("Maximum resident set size (kbytes)") / 1024, 1),
            "load_before": round(load_before, 2), "load_after": round(os.getloadavg()[0], 2),
            "output": (done.stdout.strip().splitlines() or [""])[-1][:300]}


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--warehouse", type=Path, required=True)
    ap.add_argument("--period", default="2026-11", help="the month, YYYY-MM")
    ap.add_argument("--close", action="store_true", help="close the month (writes) and read it closed")
    ap.add_argument("--provisional", action="store_true",
                    help="close it although the data ends before the month does (a simulated month's last "
                         "5-minute row starts at 23:55: its data ends there)")
    ap.add_argument("--json", type=Path, metavar="OUT")
    args = ap.parse_args(argv)
    path = args.warehouse.resolve()
    if not path.is_file():
        ap.error(f"--warehouse {path}: no such file")
    if not re.fullmatch(r"\d{4}-(0[1-9]|1[0-2])", args.period):
        ap.error(f"--period {args.period!r}: a month, YYYY-MM (e.g. 2026-11)")
    cli = [sys.executable, "-m", "gpuledger.cli"]
    out = Path(tempfile.mkdtemp(prefix="month_statement_"))
    steps: dict[str, dict] = {}
    try:
        def statement(name: str) -> None:
            folder = out / name
            steps[f"report statement ({name})"] = timed(
                [*cli, "report", "statement", "--period", args.period, "-o", str(folder), "--no-pdf", "-w", str(path)])
            steps[f"report statement ({name})"]["files"] = len(list(folder.iterdir()))

        def page(name: str) -> None:
            steps[f"chargeback page statement ({name})"] = timed([sys.executable, "-c", _PAGE, str(path), args.period])

        statement("open")
        page("open")
        if args.close:
            steps["period close"] = timed([*cli, "period", "close", args.period, "--by", "month_statement_bench",
                                           *(["--provisional"] if args.provisional else []), "-w", str(path)])
            statement("closed")
            page("closed")
    finally:
        shutil.rmtree(out, ignore_errors=True)
    res = {"warehouse": str(path), "period": args.period, "steps": steps, "cpus": os.cpu_count(),
           "command": " ".join([".venv/bin/python", "benchmarks/month_statement_bench.py", *(argv or sys.argv[1:])])}
    if args.close:
        # the closed month's total is the open month's: the same lines, frozen
        res["closed_total_equals_open"] = steps["report statement (open)"]["output"] == \
            steps["report statement (closed)"]["output"]
    print("| step | wall s | CPU s | peak RSS MiB | load before / after |\n|---|---:|---:|---:|---|")
    for name, s in steps.items():
        print(f"| {name} | {s['wall_s']:.2f} | {s['cpu_s']:.2f} | {s['peak_rss_mib']:,.0f} | "
              f"{s['load_before']:.1f} / {s['load_after']:.1f} |")
    for name, s in steps.items():
        print(f"{name}: {s['output']}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(res, indent=2) + "\n")
    return res


if __name__ == "__main__":
    main()
