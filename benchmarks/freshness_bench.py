"""Freshness: from a sample scraped to it showing in each report's figures (issue 41: "freshness
from scrape to every report <= 5 min, measured"), with the pipelines' default schedules.

Two parts in one run:

1. **Measured at --gpus GPUs on this machine** (median of --rounds, each round after a fresh scrape
   round so the data's "now" moves): one round of the scrape service (`gpuledger ingest scrape`'s
   ``scrape()`` over `gpuledger simulate serve`'s exporters, fetch to commit); the bodies of the runs
   the schedules start — the ingest run (every cluster's partitions: reference tables, the holdings
   pass, the per-cluster sources), the squatting evaluation, today's analytics partition, the
   enforcement plan — materialized in this process as a run's steps execute them (Dagster's
   in-process ``materialize``, the assets of the code location); each report end to end through the
   CLI (`gpuledger report fairshare | budget | usage | squatters`, process start included); a fresh
   interpreter loading the code location (what every run's process does before its first step).
   With ``--tsdb`` also the fleet path: one `prometheus_aggregates` pass of a settled window of
   --gpus GPUs from a real VictoriaMetrics (Debian's `victoria-metrics`).

2. **The default schedules on a simulated clock**: every schedule that runs by default ticks at its
   cron times (the code location's own cron strings; the sensor that follows squatting and analytics
   with the alerts run), each asking for its run unless one is in flight, as the schedules do; runs
   that write the warehouse go one at a time (the run queue's tag limit), in the order asked, and
   runs asked at the same tick are put in the worst order for the report asked (its run last); a run
   takes its start-up plus its measured body. The scrape service writes every 60 s, its phase against
   the cron swept in 5-s steps. A sample counts as showing in a report once the report's figures are
   computed from data that holds it: fair share, budget and usage are computed at the data's "now"
   whenever no snapshot is materialized at exactly that moment (gpuledger/facts/__init__.py), so
   they hold a sample once it is committed, plus the report's own time; squatters reads the squatting
   pipeline's latest evaluation while it is recent, so a sample shows once an evaluation that started
   after its commit has finished. The fleet path: a sample in the TSDB waits to settle (settle_s),
   then for the next ingest run to store it — its window's row stored while the window is still
   filling (issue 41); with ``--whole-windows``, as before that change, for its window to end
   (aggregate_s) and settle first.

Printed: per report and path, the worst and the median latency over every sample time of an hour,
and the measured figures the model used.

    .venv/bin/python benchmarks/freshness_bench.py --gpus 1024 --days 7 --folder /tmp/fresh --tsdb
    # an earlier run's figures, the fleet path's pass measured anew:
    .venv/bin/python benchmarks/freshness_bench.py --gpus 1024 --measured OLD.json --tsdb --json NEW.json
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
sys.path.insert(0, str(ROOT / "benchmarks"))

REPORTS = ("fairshare", "budget", "usage", "squatters")
SCRAPE_EVERY_S = 60  # the scrape service's period in production (README "Pipelines")
# Dagster's own share of a run's start, measured with a real daemon on this machine kind
# (BENCHMARKS.md "Cadence", the quiet rerun of 2026-12-02): schedule tick -> run started, ingest runs,
# median 6.4 s, worst 13.6 s. The model takes the worst, plus the code location's load measured here.
TICK_TO_START_S = 13.6


def free_port_block(n: int) -> int:
    """A first port with n free ports after it."""
    for base in range(20000, 60000, n + 7):
        ok = True
        for port in range(base, base + n):
            with socket.socket() as s:
                try:
                    s.bind(("127.0.0.1", port))
                except OSError:
                    ok = False
                    break
        if ok:
            return base
    raise RuntimeError("no free port block")


def build(folder: Path, gpus: int, days: float) -> Path:
    """A simulated warehouse of ``gpus`` x ``days`` at a 60-s scrape, with one device holding per
    allocation (holdings_bench.HOLDINGS: the agents' reports), reused when present."""
    path = folder / f"fresh-g{gpus}-d{days:g}.duckdb"
    if path.exists():
        return path
    env = {**os.environ, "GPULEDGER_WAREHOUSE": str(path)}
    subprocess.run([str(BIN / "gpuledger"), "simulate", "warehouse", "--gpus", str(gpus), "--days", f"{days:g}",
                    "--interval", "60", "--seed", "1"], env=env, check=True, capture_output=True, text=True)
    import duckdb
    from gpuledger.warehouse.clock import data_now
    from holdings_bench import HOLDINGS

    with duckdb.connect(str(path)) as con:
        con.execute(HOLDINGS, {"now": data_now(con)})
    return path


def timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def cli(path: Path, *args: str) -> float:
    env = {**os.environ, "GPULEDGER_WAREHOUSE": str(path), "COLUMNS": "200"}
    env.pop("GPULEDGER_CONFIG", None)
    t0 = time.perf_counter()
    subprocess.run([str(BIN / "gpuledger"), *args], env=env, check=True, capture_output=True, text=True, timeout=600)
    return time.perf_counter() - t0


def code_load_s() -> float:
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", "from gpuledger.pipelines.definitions import defs; defs()"], check=True,
                   capture_output=True, timeout=300)
    return time.perf_counter() - t0


def measure(path: Path, gpus: int, rounds: int) -> dict[str, list[float]]:
    """Seconds of each stage at ``gpus`` GPUs, one list per stage (a value per round)."""
    import dagster as dg
    from gpuledger.pipelines.defs.automation import DAILY_ANALYTICS
    from gpuledger.pipelines.defs.enforcement.assets import enforcement_plan
    from gpuledger.pipelines.defs.ingest.assets import INGEST_ASSETS
    from gpuledger.pipelines.defs.ingest.schedules import ingest_request
    from gpuledger.pipelines.defs.resources import GpuledgerConfig, Warehouse
    from gpuledger.pipelines.defs.squatting.assets import squatting_findings
    from gpuledger.warehouse.clock import data_now

    from gpuledger import warehouse
    from gpuledger.ingest.metrics.scrape import scrape

    os.environ["GPULEDGER_SCRAPE_SERVICE"] = "1"  # as in production: the service scrapes, Dagster not
    with warehouse.open_reader(path) as con:
        end = data_now(con)
    nodes = -(-gpus // 8)
    port = free_port_block(nodes)
    # the exporters of the same simulated cluster (its inventory depends on seed and size only),
    # their clock a minute past the warehouse's data and running 60x: every round a new minute
    serve = subprocess.Popen([str(BIN / "gpuledger"), "simulate", "serve", "--gpus", str(gpus), "--seed", "1",
                              "--interval", "60", "--port", str(port), "--timestamps", "--speed", "60", "--days", "0.2",
                              "--sim-start", (end + timedelta(minutes=1)).isoformat()],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    urls = [f"http://127.0.0.1:{port + i}/metrics" for i in range(nodes)]
    out: dict[str, list[float]] = {k: [] for k in ("scrape_round", "ingest_run", "squatting_run", "analytics_run",
                                                    "enforcement_plan_run", "code_load",
                                                    *(f"report_{r}" for r in REPORTS))}
    instance = dg.DagsterInstance.ephemeral()
    config = GpuledgerConfig(path=None, warehouse_path=str(path))
    resources = {"warehouse": Warehouse(path=str(path)), "gpuledger_config": config}
    quiet = {"loggers": {"console": {"config": {"log_level": "CRITICAL"}}}}

    def run(assets, **kwargs) -> float:
        t0 = time.perf_counter()
        result = dg.materialize(assets, resources=resources, instance=instance, run_config=quiet, **kwargs)
        assert result.success
        return time.perf_counter() - t0

    try:
        deadline = time.monotonic() + 120
        while True:  # the exporters answer
            try:
                import requests

                requests.get(urls[-1], timeout=2).raise_for_status()
                break
            except Exception:
                if time.monotonic() > deadline:
                    raise
                time.sleep(1)
        request = ingest_request(instance, config, None)
        ingest = [a for a in INGEST_ASSETS if request.asset_selection is None or a.key in request.asset_selection]
        run(ingest, tags=request.tags or None)  # the holdings pass's first (look-back) pass: not timed
        run([squatting_findings])
        for k in range(rounds):
            out["scrape_round"].append(timed(lambda: scrape(urls, warehouse_path=path, cluster="sim", count=1,
                                                            timeout_s=30, retries=1)))
            with warehouse.open_reader(path) as con:
                now = data_now(con)
            day = now.strftime("%Y-%m-%d")
            # the analytics' heaviest partition: a whole day's (the day before the new data)
            full_day = (now - timedelta(days=1)).strftime("%Y-%m-%d")
            hour_end = (now + timedelta(hours=1)).replace(minute=0, second=0, microsecond=0)
            out["ingest_run"].append(run(ingest, tags=request.tags or None))
            for report in ("fairshare", "budget"):
                out[f"report_{report}"].append(cli(path, "report", report))
            out["report_usage"].append(cli(path, "report", "usage", "--start", f"{day}T00:00:00",
                                           "--end", hour_end.isoformat()))
            out["squatting_run"].append(run([squatting_findings]))
            out["report_squatters"].append(cli(path, "report", "squatters"))  # the new evaluation, materialized
            out["enforcement_plan_run"].append(run([enforcement_plan]))
            if k < 2:  # the longest: two rounds
                out["analytics_run"].append(run(DAILY_ANALYTICS, partition_key=full_day))
            out["code_load"].append(code_load_s())
            print(f"round {k + 1}: " + ", ".join(f"{n} {v[-1]:.2f}" for n, v in out.items() if v), flush=True)
    finally:
        serve.terminate()
        serve.wait(30)
    return out


def measure_tsdb(folder: Path, gpus: int, rounds: int) -> list[float]:
    """Seconds of one `prometheus_aggregates` pass of ``gpus`` GPUs from a real VictoriaMetrics (the
    run's body on the fleet path), as a pass of the pipelines' minute finds it: the 5-minute
    window stored while filling at the previous pass, now ended, stored anew, and the window now
    filling stored as far as it has come (samples reach 10 minutes past the wall clock)."""
    import io

    from gpuledger.config import PrometheusSource
    from gpuledger.ingest.metrics.prometheus.aggregate import aggregate_recent
    from gpuledger.simulator import build_cluster, write_openmetrics

    sys.path.insert(0, str(ROOT))
    from tests.helpers.victoria_rig import VictoriaRig

    now = datetime.now(UTC).replace(tzinfo=None)
    start = (now - timedelta(minutes=40)).replace(second=0, microsecond=0)
    sim = build_cluster(seed=1, gpus=gpus, start=start, days=50 / 1440, interval_s=30)
    text = io.StringIO()
    write_openmetrics(sim, text, sim.start_s, sim.end_s, blanks=False)
    work = Path(tempfile.mkdtemp(prefix="fresh-vm-", dir=folder))
    vm = VictoriaRig(work)
    out = []
    try:
        lines = [f"{line.rsplit(' ', 1)[0]} {line.rsplit(' ', 1)[1]}000\n" for line in text.getvalue().splitlines()
                 if line and not line.startswith("#")]
        for k in range(0, len(lines), 200_000):
            vm.import_prometheus_text(lines[k:k + 200_000])
        vm.flush()
        source = PrometheusSource(url=vm.url, cluster="sim", aggregate_s=300, settle_s=0)
        path, base = work / "agg.duckdb", work / "base.duckdb"
        for _ in range(rounds):
            # the warehouse as the previous pass left it, 5 minutes ago: every window up to the one
            # then filling (now ended), that one stored as far as it had come
            path.unlink(missing_ok=True)
            if base.exists():
                shutil.copy(base, path)
            else:
                aggregate_recent(source, "sim", warehouse_path=path, days=1, until=None,
                                 now=datetime.now(UTC).replace(tzinfo=None) - timedelta(minutes=5))
                shutil.copy(path, base)
            t0 = time.perf_counter()
            stats = aggregate_recent(source, "sim", warehouse_path=path, days=1)
            out.append(time.perf_counter() - t0)
            print(f"aggregate pass: {out[-1]:.2f} s, {stats.rows_new} rows, the window still filling "
                  f"{stats.filling}", flush=True)
    finally:
        vm.stop()
        shutil.rmtree(work, ignore_errors=True)
    return out


# --- the default schedules on a simulated clock ---------------------------------------------------

@dataclass
class Job:
    name: str
    body_s: float
    priority: int = 0       # dagster/priority: the run queue starts the higher first
    squatting_s: float = 0  # the squatting evaluation closing the run (its last step), if it has one


def job_facts() -> tuple[dict[str, int], set[str]]:
    """(dagster/priority of each job, the jobs whose runs evaluate squatting) from the code location."""
    from gpuledger.pipelines.definitions import defs

    d = defs()
    priority, squatting = {}, set()
    for job in d.resolve_all_job_defs():
        priority[job.name] = int(job.tags.get("dagster/priority", 0))
        if "squatting_findings" in {k.to_user_string() for k in job.asset_layer.selected_asset_keys}:
            squatting.add(job.name)
    return priority, squatting


def default_ticks(hour: datetime, minutes: int = 80, also: tuple[str, ...] = ()) -> list[tuple[datetime, str]]:
    """(time, job) of every tick of every schedule that runs by default (and of the schedules named
    in ``also``) in [hour - 10 min, hour + minutes), from the code location's own schedules (cron
    strings) and run requests."""
    import dagster as dg
    from dagster._utils.schedules import cron_string_iterator
    from gpuledger.pipelines.definitions import defs

    repo = defs().get_repository_def()
    start = hour - timedelta(minutes=10)
    out = []
    for schedule in repo.schedule_defs:
        if schedule.default_status != dg.DefaultScheduleStatus.RUNNING and schedule.name not in also:
            continue
        for at in cron_string_iterator(start.replace(tzinfo=UTC).timestamp(), schedule.cron_schedule,
                                       schedule.execution_timezone or "UTC"):
            at = at.astimezone(UTC).replace(tzinfo=None)
            if at >= hour + timedelta(minutes=minutes):
                break
            out.append((at, schedule.job_name))
    return sorted(out)


def play(ticks: list[tuple[datetime, str]], jobs: dict[str, Job], startup_s: float, *, last: str,
         follow: dict[str, str]) -> list[tuple[float, float, str]]:
    """The runs the ticks start, one writing run at a time, the queued run of the highest priority
    first, then in the order asked (ties: ``last``'s run last); a run of a job not asked again while
    one is in flight; ``follow``: a job whose success asks for another (the alerts sensor, within its
    30-s interval). Returns (body start, end, job) in epoch seconds of the simulated clock."""
    t0 = ticks[0][0]
    pending = [((at - t0).total_seconds(), 1 if name == last else 0, name) for at, name in ticks]
    pending.sort()
    queue: list[tuple[int, float, int, str]] = []
    runs: list[tuple[float, float, str]] = []
    free_at = 0.0
    in_flight: dict[str, float] = {}  # job -> end of its run
    while pending or queue:
        if pending and (not queue or pending[0][0] <= max(free_at, min(q[1] for q in queue))):
            asked, order, name = pending.pop(0)
            if in_flight.get(name, -1) > asked:
                continue  # the schedule's in_flight(): skipped
            queue.append((-jobs[name].priority, asked, order, name))
            queue.sort()
            in_flight[name] = float("inf")
            continue
        _, asked, order, name = queue.pop(0)
        begin = max(asked, free_at) + startup_s
        end = begin + jobs[name].body_s
        runs.append((begin, end, name))
        in_flight[name] = end
        free_at = end
        if name in follow:
            pending.append((end + 30.0, 0, follow[name]))
            pending.sort()
    return [(b + t0.timestamp(), e + t0.timestamp(), n) for b, e, n in runs]


def latencies(ticks, jobs: dict[str, Job], startup_s: float, hour: datetime, measured: dict,
              window_s: int | None, settle_s: int, *, filling: bool = True) -> dict[str, list[float]]:
    """Per report and path: the latency of every sample time of the hour starting at ``hour``.
    ``window_s``: the fleet path (the ingest run then also pulls the TSDB's windows), else the
    scrape service's. ``filling``: the window still filling is stored as far as it has come (else
    a sample waits for its window to end)."""
    follow = {"squatting_job": "alerts_job", "analytics_job": "alerts_job"}
    h0 = hour.replace(tzinfo=UTC).timestamp()
    out: dict[str, list[float]] = {}
    scrape_s, agg_s = measured["scrape_round"], measured.get("aggregate_pass", 0.0)
    if window_s:
        ingest = jobs["ingest_job"]
        jobs = {**jobs, "ingest_job": Job("ingest_job", ingest.body_s + agg_s, ingest.priority, ingest.squatting_s)}
    for worst_last in ("squatting_job", "ingest_job"):
        runs = play(ticks, jobs, startup_s, last=worst_last, follow=follow)
        # a run evaluating squatting reads the data's "now" when its squatting step starts (its last)
        squat = sorted((e - jobs[n].squatting_s, e) for b, e, n in runs if jobs[n].squatting_s)
        ingest = sorted((b, e) for b, e, n in runs if n == "ingest_job")

        def evaluated_after(committed: float) -> float:
            return next(e for b, e in squat if b >= committed)

        for phase in range(0, SCRAPE_EVERY_S, 5) if not window_s else ():  # the scrape service's rounds
            for k in range(60):
                r = h0 + phase + SCRAPE_EVERY_S * k
                committed = r + scrape_s
                for report in ("fairshare", "budget", "usage"):
                    out.setdefault(f"raw/{report}", []).append(committed + measured[f"report_{report}"] - r)
                out.setdefault("raw/squatters", []).append(
                    evaluated_after(committed) + measured["report_squatters"] - r)
        if window_s:  # the fleet path: every second of the hour, a sample in the TSDB
            for s in range(3600):
                t = h0 + s
                settled = (t if filling else (t // window_s + 1) * window_s) + settle_s
                # the ingest run's aggregate pass (before the holdings pass, which follows it)
                committed = next(b + agg_s for b, e in ingest if b >= settled)
                for report in ("fairshare", "budget", "usage"):
                    out.setdefault(f"fleet/{report}", []).append(committed + measured[f"report_{report}"] - t)
                out.setdefault("fleet/squatters", []).append(
                    evaluated_after(committed) + measured["report_squatters"] - t)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpus", type=int, default=1024)
    ap.add_argument("--days", type=float, default=7.0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--folder", type=Path, default=Path(tempfile.gettempdir()) / "freshness-bench")
    ap.add_argument("--tsdb", action="store_true", help="also the fleet path from a real VictoriaMetrics")
    ap.add_argument("--window", type=int, nargs="+", default=[60, 120, 180, 300],
                    help="aggregate_s values to play the fleet path with")
    ap.add_argument("--measured", type=Path, help="a JSON of an earlier run's figures: play only (with --tsdb, "
                                                  "the fleet path's pass measured anew)")
    ap.add_argument("--whole-windows", action="store_true",
                    help="play the fleet path as before issue 41's change: a window stored once it has ended")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--earlier-defaults", action="store_true",
                    help="play the defaults before issue 41's change instead: squatting on its own 5-minute "
                         "schedule, no run priority")
    args = ap.parse_args()
    args.folder.mkdir(parents=True, exist_ok=True)
    if args.measured:
        raw = json.loads(args.measured.read_text())["measured_runs"]
        if args.tsdb:
            raw["aggregate_pass"] = measure_tsdb(args.folder, args.gpus, args.rounds)
    else:
        path = build(args.folder, args.gpus, args.days)
        raw = measure(path, args.gpus, args.rounds)
        if args.tsdb:
            raw["aggregate_pass"] = measure_tsdb(args.folder, args.gpus, args.rounds)
    median = {k: statistics.median(v) for k, v in raw.items() if v}
    worst = {k: max(v) for k, v in raw.items() if v}
    # the model takes each stage's worst round (a conservative bound), Dagster's start-up beside it
    startup_s = TICK_TO_START_S + worst["code_load"]
    bodies = {"ingest_job": worst["ingest_run"], "squatting_job": 0.0,  # + its evaluation, below
              "analytics_job": worst["analytics_run"],
              "enforcement_plan_job": worst["enforcement_plan_run"],
              # the apply and the alerts runs: a no-op apply by default, the outbox's plan: start-up only
              "enforcement_apply_job": 0.0, "alerts_job": 0.0}
    priority, evaluating = job_facts()
    if args.earlier_defaults:
        priority, evaluating = {}, {"squatting_job"}
    jobs = {}
    for name, body in bodies.items():
        squat = worst["squatting_run"] if name in evaluating else 0.0
        jobs[name] = Job(name, body + squat, priority.get(name, 0), squat)
    hour = datetime(2026, 12, 7, 10, 0)  # a Monday, 10:00 UTC: no daily, weekly or monthly schedule ticks
    ticks = default_ticks(hour, also=("squatting_schedule",) if args.earlier_defaults else ())
    unknown = sorted({n for _, n in ticks} - set(jobs))
    assert not unknown, f"schedules of jobs this model has no figure for tick in the hour: {unknown}"
    print("jobs in the model: " + "; ".join(f"{j.name} {j.body_s:.1f} s, priority {j.priority}"
                                            + (", evaluates squatting" if j.squatting_s else "")
                                            for j in jobs.values()))
    result = {"gpus": args.gpus, "startup_s": startup_s, "measured_runs": raw,
              "median": median, "worst": worst, "paths": {}}
    print(f"\nmeasured at {args.gpus:,} GPUs (median / worst of {len(raw['scrape_round'])} rounds, s):")
    for k in median:
        print(f"  {k:28s} {median[k]:8.2f} {worst[k]:8.2f}")
    print(f"  run start-up in the model: {startup_s:.1f} s (tick -> start {TICK_TO_START_S} s + code load)")
    windows = [None, *(args.window if "aggregate_pass" in worst else [])]
    print("\n| path | report | worst (min) | median (min) | <= 5 min |\n|---|---|---:|---:|---|")
    for window in windows:
        figures = latencies(ticks, jobs, startup_s, hour, worst, window, 60, filling=not args.whole_windows)
        for key, values in figures.items():
            path, report = key.split("/")
            label = "scrape service (60 s)" if path == "raw" else (
                f"TSDB aggregates ({window} s windows{', whole only' if args.whole_windows else ''}, settle 60 s)")
            w, m = max(values) / 60, statistics.median(values) / 60
            result["paths"][f"{label}/{report}"] = {"worst_min": round(w, 2), "median_min": round(m, 2)}
            print(f"| {label} | {report} | {w:.2f} | {m:.2f} | {'yes' if w <= 5 else 'NO'} |")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2, default=str))


if __name__ == "__main__":
    main()
