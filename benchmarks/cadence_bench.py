"""Cadence (issue 24 §4): does ingest keep its 1-minute cadence and analytics stay at most 5 minutes
behind, at N simulated GPUs on this machine, with the loop in Dagster or in the scrape service?

    .venv/bin/python benchmarks/cadence_bench.py --mode dagster --gpus 256 --minutes 10
    .venv/bin/python benchmarks/cadence_bench.py --mode service --gpus 256 --minutes 10

While it runs the dashboards are read as a person reads them (unless --no-dashboards): a
`streamlit run` server on the same warehouse and headless Chromium loading one page after another
(every page of dashboard_browser_bench.PAGES, each until fully drawn, then --read-pause seconds
of reading), so the readers' lock and CPU compete with ingest and analytics as in production.

Both modes run `make dev`'s parts (scripts/dev_setup.py's config and job CSV, `gpuledger simulate
serve` at real time, a Dagster webserver + daemon on a temporary SQLite home with the production
schedules): ``dagster`` scrapes in ``ingest_job`` every minute (``dcgm_samples``); ``service``
scrapes in ``gpuledger ingest scrape --every 60s`` and Dagster's ingest job runs the other sources
(``GPULEDGER_SCRAPE_SERVICE=1``, as make dev and the manifests set it: one scraper per target).
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
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.helpers import dagster_rig as rig

BIN = Path(sys.executable).parent
# GraphQL leaves out the hidden tags (.dagster/scheduled_execution_time among them): a run's tick
# comes from the schedule's ticks (their runIds and timestamp) instead.
TICK_RUNS = """
query Runs($filter: RunsFilter!) {
  runsOrError(filter: $filter) { ... on Runs { results { runId status startTime endTime } } }
}"""
SCHEDULES = {"ingest_job": "ingest_schedule", "analytics_job": "analytics_schedule"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", choices=("dagster", "service"), required=True)
    parser.add_argument("--gpus", type=int, default=256)
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--no-dashboards", dest="dashboards", action="store_false",
                        help="do not read the dashboards during the run")
    parser.add_argument("--read-pause", type=float, default=5.0, help="seconds between two page loads")
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
    env = {**os.environ, "DAGSTER_HOME": str(home), "GPULEDGER_WAREHOUSE": str(wh),
           "GPULEDGER_CONFIG": str(config), "DAGSTER_DISABLE_TELEMETRY": "1"}
    if args.mode == "service":  # Dagster keeps the other sources; the service scrapes
        env["GPULEDGER_SCRAPE_SERVICE"] = "1"
    log = work / "servers.log"
    procs = [rig.start([str(BIN / "gpuledger"), "simulate", "serve", "--gpus", str(args.gpus), "--port",
                        str(exporter_port), "--config", str(config)], env, log)]
    if args.mode == "service":
        procs.append(rig.start([str(BIN / "gpuledger"), "ingest", "scrape", "--every", "60s", *targets],
                               env, log))
    procs += [rig.webserver(env, port, log), rig.daemon(env, log)]
    gql = rig.GraphQL(port)
    reader = None
    load_before = os.getloadavg()
    try:
        location, repository = gql.location(time.monotonic() + 600)
        if args.dashboards:
            reader = Reader(work, args.read_pause)
            procs.append(reader.server)
        loads = []
        started = time.time()
        while time.time() < started + args.minutes * 60:
            time.sleep(30)
            loads.append(os.getloadavg()[0])
        ended = time.time()
        ticks = _ticks(gql, location, repository, "ingest_schedule", started, ended)
        runs = {job: _runs(gql, location, repository, schedule, started, ended)
                for job, schedule in SCHEDULES.items()}
        for items in runs.values():  # not over when the window closed: behind by at least this much
            for r in items:
                r["window_end"] = ended
    finally:
        if reader is not None:
            reader.stop()
        for proc in reversed(procs):
            rig.stop(proc)
    load_after = os.getloadavg()
    result = {"mode": args.mode, "gpus": args.gpus, "minutes": args.minutes,
              "window_utc": [datetime.fromtimestamp(t, UTC).isoformat(timespec="seconds") for t in (started, ended)],
              "loadavg_before": [round(x, 2) for x in load_before], "loadavg_after": [round(x, 2) for x in load_after],
              "loadavg_1min_during": [round(min(loads), 2), round(statistics.median(loads), 2), round(max(loads), 2)],
              **_scrape_minutes(wh, started, ended), **ticks, **_run_figures(runs),
              **(reader.figures() if reader is not None else {"dashboard_page_loads": 0})}
    print(json.dumps(result, indent=2))
    shutil.rmtree(work, ignore_errors=True)


class Reader:
    """A dashboards server on the bench's warehouse and a thread of headless Chromium reading its
    pages one after another until stopped (dashboard_browser_bench's server and "fully drawn")."""

    def __init__(self, folder: Path, pause_s: float):
        from benchmarks.dashboard_browser_bench import serve

        self.server, self.url, _ = serve(ROOT / "dashboards" / "app.py", folder, None)
        self.pause_s, self.times, self.failures = pause_s, [], []
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        from playwright.sync_api import sync_playwright

        from benchmarks.dashboard_browser_bench import PAGES, RENDERED

        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path="/usr/bin/chromium", headless=True,
                                        args=["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"])
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            n = 0
            while not self.done.is_set():
                name = PAGES[n % len(PAGES)]
                n += 1
                began = time.monotonic()
                try:
                    page.goto(f"{self.url}/{name}", wait_until="commit")
                    page.wait_for_function(RENDERED, timeout=120_000, polling=100)
                    self.times.append(time.monotonic() - began)
                except Exception as exc:  # noqa: BLE001 - counted and shown, the reading goes on
                    self.failures.append(f"{name}: {type(exc).__name__}")
                self.done.wait(self.pause_s)
            browser.close()

    def stop(self) -> None:
        self.done.set()
        self.thread.join(timeout=180)

    def figures(self) -> dict:
        return {"dashboard_page_loads": len(self.times), "dashboard_load_failures": len(self.failures),
                "dashboard_load_s_median": round(statistics.median(self.times), 2) if self.times else None,
                "dashboard_load_s_max": round(max(self.times), 2) if self.times else None,
                "dashboard_failures": self.failures[:5]}


def _ticks(gql, location, repository, schedule, t0, t1) -> dict:
    state = gql(rig.TICKS.replace("ticks(limit: 10)", "ticks(limit: 200)"), selector={
        "repositoryLocationName": location, "repositoryName": repository, "scheduleName": schedule,
    })["scheduleOrError"]["scheduleState"]
    inside = [t for t in state["ticks"] if t0 <= t["timestamp"] <= t1]
    return {"ingest_ticks": len(inside),
            "ingest_ticks_skipped": sum(t["status"] == "SKIPPED" for t in inside),
            "ingest_ticks_failed": sum(t["status"] == "FAILURE" for t in inside)}


def _runs(gql, location, repository, schedule, t0, t1) -> list[dict]:
    """The runs the schedule's ticks inside [t0, t1] started: tick time, run start and end."""
    state = gql(rig.TICKS.replace("ticks(limit: 10)", "ticks(limit: 200)"), selector={
        "repositoryLocationName": location, "repositoryName": repository, "scheduleName": schedule,
    })["scheduleOrError"]["scheduleState"]
    tick_of = {run_id: t["timestamp"] for t in state["ticks"] if t0 <= t["timestamp"] <= t1
               for run_id in t["runIds"]}
    if not tick_of:
        return []
    found = gql(TICK_RUNS, filter={"runIds": list(tick_of)})["runsOrError"]["results"]
    return [{"tick": tick_of[r["runId"]], "start": r["startTime"], "end": r["endTime"], "status": r["status"]}
            for r in found]  # a queued run has no start yet: unfinished


def _run_figures(runs: dict[str, list[dict]]) -> dict:
    out = {}
    for job, items in runs.items():
        done = [r for r in items if r["end"]]
        open_ = [r for r in items if not r["end"]]
        out[f"{job}_unfinished"] = len(open_)
        if open_:
            out[f"{job}_unfinished_behind_s_min"] = round(max(r["window_end"] - r["tick"] for r in open_), 1)
        if not done:
            out[f"{job}_runs"] = 0
            continue
        startup = [r["start"] - r["tick"] for r in done]  # queued behind the one writing run + start-up
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
