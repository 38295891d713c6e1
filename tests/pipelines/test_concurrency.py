"""Two Dagster runs (`dg launch`, two processes) rewriting the same day partition at once, a CLI
import and several readers, all against one warehouse: no lock error anywhere, each run succeeds,
and every row written is there once. Each run's steps (5 assets, 3 checks) run in the run's own
process (pipelines/definitions.py), not a fresh interpreter each."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from gpuledger import warehouse
from gpuledger.analytics import queries
from gpuledger.config import read_config_file
from gpuledger.simulator import build_cluster
from gpuledger.simulator.to_warehouse import write_simulation

REPO = Path(__file__).resolve().parents[2]
START = datetime(2026, 11, 1)


@pytest.mark.slow
def test_two_runs_a_cli_import_and_readers_share_one_warehouse(tmp_path):
    from gpuledger.ledger.config_versions import load_version

    wh = tmp_path / "gpuledger.duckdb"
    cfg, text, source = read_config_file(None)
    sim = build_cluster(seed=5, gpus=16, start=START, days=0.25, config=cfg)
    with warehouse.open_writer(wh) as con:
        load_version(con, cfg, text=text, source=source)
        write_simulation(con, sim)
    csv = tmp_path / "more-jobs.csv"
    csv.write_text("job_id,cluster,project,user,gpu_model,gpus,start_time,end_time\n" + "".join(
        f"extra-{i},other,llm-pretrain,ann,H100,1,2026-11-01T0{i}:00:00Z,2026-11-01T0{i}:30:00Z\n" for i in range(5)))

    home = tmp_path / "dagster_home"
    home.mkdir()
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    env = {**os.environ, "DAGSTER_HOME": str(home), "GPULEDGER_WAREHOUSE": str(wh)}
    env.pop("GPULEDGER_CONFIG", None)
    bin_dir = Path(sys.executable).parent
    # Dagster's own run storage (SQLite) is created once first: two processes creating it at the
    # same moment race in its schema migration, which is Dagster's business, not the warehouse's.
    subprocess.run([str(bin_dir / "dagster"), "instance", "migrate"], env=env, check=True, capture_output=True,
                   timeout=300)

    stop = threading.Event()
    reader_errors: list[str] = []
    seen_counts: set[int] = set()
    reads = [0]

    def read_loop():
        while not stop.is_set():
            try:
                with warehouse.open_reader(wh) as con:
                    seen_counts.add(con.execute(
                        "SELECT count(*) FROM usage_hourly_jobs WHERE day = DATE '2026-11-01'").fetchone()[0])
                    con.execute("SELECT count(*) FROM jobs").fetchall()
                reads[0] += 1
            except Exception as exc:  # noqa: BLE001 - any lock error or partial read is a failure
                reader_errors.append(f"{type(exc).__name__}: {exc}")
            time.sleep(0.05)

    readers = [threading.Thread(target=read_loop, daemon=True) for _ in range(3)]
    for thread in readers:
        thread.start()
    launch = [str(bin_dir / "dg"), "launch", "--job", "analytics_job", "--partition", "2026-11-01"]
    runs = [subprocess.Popen(launch, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            for _ in range(2)]
    time.sleep(1.0)  # the CLI import lands while the runs are going
    cli = subprocess.run([str(bin_dir / "gpuledger"), "ingest", "jobs-csv", str(csv), "--warehouse", str(wh)],
                         env=env, capture_output=True, text=True, timeout=300, check=False)
    outputs = [run.communicate(timeout=540)[0] for run in runs]
    stop.set()
    for thread in readers:
        thread.join(timeout=30)

    assert cli.returncode == 0, cli.stdout + cli.stderr
    for run, output in zip(runs, outputs, strict=True):
        assert run.returncode == 0, output[-4000:]
        assert "RUN_SUCCESS" in output and "Could not set lock" not in output, output[-4000:]
        # the event lines read "... - <run id> - <pid> - <step> - STEP_START - ...": one pid per run
        starts = [line.split(" - ") for line in output.splitlines() if " - STEP_START - " in line]
        assert len(starts) == 8 and len({parts[5] for parts in starts}) == 1, starts
    assert not reader_errors, reader_errors[:5]
    assert reads[0] > 0

    with warehouse.open_reader(wh) as con:
        expected = queries.usage_report(con, start=START, end=START + timedelta(days=1), by="job", per_hour=True)
        stored, distinct = con.execute(
            "SELECT count(*), count(DISTINCT (hour, cluster, job_id)) FROM usage_hourly_jobs").fetchone()
        extra = con.execute("SELECT job_id, count(*) FROM jobs WHERE cluster = 'other' GROUP BY job_id").fetchall()
        snapshots = con.execute("SELECT count(*), count(DISTINCT node) FROM fairshare_snapshots").fetchone()
    assert stored == distinct == expected.height  # both runs rewrote the day; its rows are there once
    assert snapshots[0] == snapshots[1]
    assert sorted(extra) == [(f"extra-{i}", 1) for i in range(5)]
    assert seen_counts <= {0, expected.height}, seen_counts  # readers never saw half a partition
