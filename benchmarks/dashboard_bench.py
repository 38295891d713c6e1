"""Dashboard page render times (issue 12: each page under 2 s after the first load with a week of
1,024 simulated GPUs). Builds the warehouse the way a user does (simulate, `gpuledger pipelines
run-once`, `gpuledger enforce plan`), or reuses one (--warehouse with --reuse), then runs every page
in streamlit.testing.v1.AppTest: the first load with empty caches (every query reads the file) and
the median of the loads after it (what a user clicking around sees within the cache TTL).

    .venv/bin/python benchmarks/dashboard_bench.py --gpus 1024 --days 7
    .venv/bin/python benchmarks/dashboard_bench.py --warehouse /tmp/w/gpuledger.duckdb --reuse
    .venv/bin/python benchmarks/dashboard_bench.py --warehouse W --reuse --json OUT   (make bench)

--json OUT also writes the figures as {"gpus", "warehouse", "devices", "jobs", "hours", "repeats",
"build_s": {step: s}, "pages": {page: {"first_load_s", "warm_s", "warm_runs_s"}}} (seconds).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
PAGES = ["utilization", "fair_share", "budgets", "chargeback", "squatters", "my_team", "enforcement"]


def _cli(env: dict, *args: str) -> float:
    started = time.monotonic()
    subprocess.run([str(BIN / "gpuledger"), *args], env=env, check=True, stdout=subprocess.DEVNULL)
    return time.monotonic() - started


def build(folder: Path, gpus: int, days: float, env: dict) -> dict[str, float]:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "dagster").mkdir(exist_ok=True)
    return {"simulate": _cli(env, "simulate", "warehouse", "--gpus", str(gpus), "--days", str(days), "--seed", "42"),
            "pipelines run-once": _cli(env, "pipelines", "run-once"),
            "enforce plan": _cli(env, "enforce", "plan")}


def time_pages(repeats: int, pages: list[str]) -> list[tuple[str, float, list[float]]]:
    os.environ.setdefault("STREAMLIT_LOGGER_LEVEL", "error")  # AppTest's bare-mode warnings, once per run
    import streamlit as st
    from streamlit.testing.v1 import AppTest

    out = []
    for name in pages:
        st.cache_data.clear()
        at = AppTest.from_file(str(ROOT / "dashboards" / "app.py"), default_timeout=600)
        at.run()  # the entry script and the default page, so the page's own first load is what is timed
        st.cache_data.clear()
        started = time.monotonic()
        at.switch_page(f"app_pages/{name}.py").run()
        first = time.monotonic() - started
        assert not at.exception, [e.value for e in at.exception]
        warm = []
        for _ in range(repeats):
            started = time.monotonic()
            at.run()
            warm.append(time.monotonic() - started)
            assert not at.exception, [e.value for e in at.exception]
        out.append((name, first, warm))
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, default=int(os.environ.get("BENCH_DASHBOARD_GPUS", "1024")))
    parser.add_argument("--days", type=float, default=float(os.environ.get("BENCH_DASHBOARD_DAYS", "7")))
    parser.add_argument("--warehouse", type=Path, default=Path("/tmp/gpuledger-dashboard-bench/gpuledger.duckdb"))
    parser.add_argument("--reuse", action="store_true", help="time pages on an existing, analysed warehouse")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", type=Path, default=None, help="also write the figures as JSON to this file")
    parser.add_argument("--whatif-dir", type=Path, default=None,
                        help="a folder with a `gpuledger whatif schedule --format json --out` result: the what-if page is timed too")
    args = parser.parse_args(argv if argv is not None else [] if __name__ != "__main__" else None)

    folder = args.warehouse.parent
    env = {**os.environ, "GPULEDGER_WAREHOUSE": str(args.warehouse), "DAGSTER_HOME": str(folder / "dagster"),
           "NO_COLOR": "1"}
    env.pop("GPULEDGER_CONFIG", None)
    os.environ.update(GPULEDGER_WAREHOUSE=str(args.warehouse))
    os.environ.pop("GPULEDGER_CONFIG", None)
    steps: dict[str, float] = {}
    if not args.reuse:
        if args.warehouse.exists():
            args.warehouse.unlink()
        steps = build(folder, args.gpus, args.days, env)
        print("| build step | seconds |\n|---|---|")
        for step, seconds in steps.items():
            print(f"| `gpuledger {step}` | {seconds:.1f} |")
        print()
    import duckdb

    con = duckdb.connect(str(args.warehouse), read_only=True)
    devices, jobs, hours = con.execute("SELECT (SELECT count(*) FROM gpus), (SELECT count(*) FROM jobs), "
                                       "(SELECT count(DISTINCT hour) FROM utilization_hourly)").fetchall()[0]
    con.close()
    print(f"warehouse {args.warehouse}: {devices:,} devices, {jobs:,} jobs, {hours} hours of analytics\n")
    print("| page | first load, caches empty (s) | later loads, median of "
          f"{args.repeats} (s) |\n|---|---|---|")
    names = list(PAGES)
    if args.whatif_dir is not None and any(args.whatif_dir.glob("*.json")):
        os.environ["GPULEDGER_WHATIF_DIR"] = str(args.whatif_dir)  # the page reads the newest file there
        names.append("what_if")
    pages = {}
    for name, first, warm in time_pages(args.repeats, names):
        pages[name] = {"first_load_s": round(first, 4), "warm_s": round(statistics.median(warm), 4),
                       "warm_runs_s": [round(w, 4) for w in warm]}
        print(f"| {name} | {first:.2f} | {statistics.median(warm):.2f} |", flush=True)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({
            "gpus": args.gpus, "warehouse": str(args.warehouse), "devices": devices, "jobs": jobs, "hours": hours,
            "repeats": args.repeats, "build_s": {k: round(v, 2) for k, v in steps.items()}, "pages": pages},
            indent=2) + "\n")


if __name__ == "__main__":
    main()
