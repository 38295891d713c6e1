"""Cadence (issue 24 §4): does ingest keep its 1-minute cadence and analytics stay at most 5 minutes
behind, at N simulated GPUs on this machine, with the loop in Dagster or in the scrape service?

    .venv/bin/python benchmarks/cadence_bench.py --mode dagster --gpus 256 --minutes 10
    .venv/bin/python benchmarks/cadence_bench.py --mode service --gpus 256 --minutes 10

Both modes run `make dev`'s parts (scripts/dev_setup.py's config and job CSV, `gpuledger simulate
serve` at real time, a Dagster webserver + daemon on a temporary SQLite home with the production
schedules): ``dagster`` scrapes in ``ingest_job`` every minute (``dcgm_samples``); ``service``
scrapes in ``gpuledger ingest scrape --every 60s`` and Dagster's ingest job runs the other sources.
Measured over the window, from the warehouse and Dagster's GraphQL API:

* scrape minutes missed: UTC minutes of the window with no scrape round stored (gpu_samples);
* ingest ticks skipped ("the previous ingest run is still going") and run start-up (tick → run
  start) and duration;
* analytics lag: for each analytics run, its end minus its tick, plus the age of the newest sample
  when the tick fired (≤ 1 min when every scrape lands) — the most behind analytics falls.

Prints one JSON object; BENCHMARKS.md records it with the load average (the machine is shared).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.helpers import dagster_rig as rig

BIN = Path(sys.executable).parent
TICK_RUNS = """
query Runs($filter: RunsFilter!) {
  runsOrError(filter: $filter) { ... on Runs { results { runId status startTime endTime
    tags { key value } } } }
}"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", choices=("dagster", "service"), required=True)
    parser.add_argument("--gpus", type=int, default=256)
    parser.add_argument("--minutes", type=float, default=10.0)
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="gpuledger-cadence-"))
    home = work / "dagster"
    home.mkdir()
    (home / "dagster.yaml").write_text((ROOT / "dagster.yaml").read_text().replace(".dagster/", f"{home}/"))
    port = rig.free_port()
    exporter_port = 20000 + os.getpid() % 20000
    wh = work / "gpuledger.duckdb"
    subprocess.run([str(BIN / "python"), str(ROOT / "scripts/dev_setup.py"), "--out", str(work), "--gpus",
                    str(args.gpus), "--port", str(exporter_port), "--sim-start",
                    datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S")], check=True, capture_output=True)
    config = work / "gpuledger.yaml"
    targets = [f"http://127.0.0.1:{exporter_port + i}/metrics" for i in range((args.gpus + 7) // 8)]
    if args.mode == "service":  # Dagster keeps the other sources; the service scrapes
        text = config.read_text()
        config.write_text("\n".join(line for line in text.splitlines() if not line.startswith("  scrape:")) + "\n")
    env = {**os.environ, "DAGSTER_HOME": str(home), "GPULEDGER_WAREHOUSE": str(wh),
           "GPULEDGER_CONFIG": str(config), "DAGSTER_DISABLE_TELEMETRY": "1"}
    log = work / "servers.log"
    procs = [rig.start([str(BIN / "gpuledger"), "simulate", "serve", "--gpus", str(args.gpus), "--port",
                        str(exporter_port), "--config", str(config)], env, log)]
    if args.mode == "service":
        procs.append(rig.start([str(BIN / "gpuledger"), "ingest", "scrape", "--every", "60s", *targets],
                               env, log))
    procs += [rig.webserver(env, port, log), rig.daemon(env, log)]
    gql = rig.GraphQL(port)
    load_before = os.getloadavg()
    try:
        location, repository = gql.location(time.monotonic() + 600)
        started = time.time()
        time.sleep(args.minutes * 60)
        ended = time.time()
        ticks = _ticks(gql, location, repository, "ingest_schedule", started, ended)
        runs = {name: _runs(gql, name, started, ended) for name in ("ingest_job", "analytics_job")}
    finally:
        for proc in reversed(procs):
            rig.stop(proc)
    load_after = os.getloadavg()
    result = {"mode": args.mode, "gpus": args.gpus, "minutes": args.minutes,
              "window_utc": [datetime.fromtimestamp(t, UTC).isoformat(timespec="seconds") for t in (started, ended)],
              "loadavg_before": [round(x, 2) for x in load_before], "loadavg_after": [round(x, 2) for x in load_after],
              **_scrape_minutes(wh, started, ended), **ticks, **_run_figures(runs)}
    print(json.dumps(result, indent=2))
    shutil.rmtree(work, ignore_errors=True)


def _ticks(gql, location, repository, schedule, t0, t1) -> dict:
    state = gql(rig.TICKS.replace("ticks(limit: 10)", "ticks(limit: 200)"), selector={
        "repositoryLocationName": location, "repositoryName": repository, "scheduleName": schedule,
    })["scheduleOrError"]["scheduleState"]
    inside = [t for t in state["ticks"] if t0 <= t["timestamp"] <= t1]
    return {"ingest_ticks": len(inside),
            "ingest_ticks_skipped": sum(t["status"] == "SKIPPED" for t in inside),
            "ingest_ticks_failed": sum(t["status"] == "FAILURE" for t in inside)}


def _runs(gql, job, t0, t1) -> list[dict]:
    found = gql(TICK_RUNS, filter={"pipelineName": job})["runsOrError"]["results"]
    out = []
    for run in found:
        tags = {t["key"]: t["value"] for t in run["tags"]}
        tick = tags.get(".dagster/scheduled_execution_time")
        if not tick or run["startTime"] is None:
            continue
        tick_s = datetime.fromisoformat(tick).timestamp()
        if t0 <= tick_s <= t1:
            out.append({"tick": tick_s, "start": run["startTime"], "end": run["endTime"], "status": run["status"]})
    return out


def _run_figures(runs: dict[str, list[dict]]) -> dict:
    out = {}
    for job, items in runs.items():
        done = [r for r in items if r["end"]]
        if not done:
            out[f"{job}_runs"] = 0
            continue
        startup = [r["start"] - r["tick"] for r in done]
        duration = [r["end"] - r["start"] for r in done]
        behind = [r["end"] - r["tick"] for r in done]
        out.update({f"{job}_runs": len(done), f"{job}_failed": sum(r["status"] != "SUCCESS" for r in done),
                    f"{job}_tick_to_start_s_median": round(statistics.median(startup), 1),
                    f"{job}_tick_to_start_s_max": round(max(startup), 1),
                    f"{job}_duration_s_median": round(statistics.median(duration), 1),
                    f"{job}_tick_to_end_s_max": round(max(behind), 1)})
    return out


def _scrape_minutes(wh: Path, t0: float, t1: float) -> dict:
    from gpuledger import warehouse

    first = datetime.fromtimestamp(t0 + 60 - t0 % 60, UTC).replace(tzinfo=None)
    last = datetime.fromtimestamp(t1 - t1 % 60, UTC).replace(tzinfo=None)
    with warehouse.open_reader(wh) as con:
        minutes = {m for (m,) in con.execute(
            "SELECT DISTINCT date_trunc('minute', ts) FROM gpu_samples WHERE ts >= ? AND ts < ?",
            [first, last]).fetchall()}
    expected = int((last - first).total_seconds() // 60)
    return {"scrape_minutes_expected": expected, "scrape_minutes_missed": expected - len(minutes)}


if __name__ == "__main__":
    main()
