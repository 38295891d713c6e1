"""Prometheus backfill against a real Prometheus: it agrees sample for sample with the direct scrape
ingest of the same simulated exporters, resumes after SIGKILL without duplicates or gaps, and maps
Prometheus' exported_* label renames."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from datetime import datetime, timedelta

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from gpuledger import warehouse
from gpuledger.ingest.metrics.exposition import SERIES_COLUMNS
from gpuledger.ingest.metrics.prometheus.backfill import backfill, chunk_bounds
from gpuledger.ingest.metrics.prometheus.decode import long_from_results
from gpuledger.ingest.metrics.scrape import ingest_page, scrape
from gpuledger.simulator import SimClock, build_cluster, metrics_page, start_exporters, write_openmetrics
from gpuledger.simulator.scenario import from_epoch_s
from tests.helpers.prometheus_rig import PrometheusRig, have_prometheus

pytestmark = [pytest.mark.slow, pytest.mark.prometheus,
              pytest.mark.skipif(not have_prometheus(), reason="needs the Debian prometheus package "
                                 "(scripts/install-test-deps.sh)")]

NOW = datetime.utcnow().replace(microsecond=0)  # noqa: DTZ003 (naive UTC is the warehouse's)
HIST_START = (NOW - timedelta(days=1)).replace(minute=0, second=0)
HIST_HOURS = 3
COMPARED = ("gpu_uuid", "mig_instance_id", "ts", "host", "namespace", "pod", "container", "hpc_job",
            *warehouse.writes.SAMPLE_METRIC_COLUMNS)


@pytest.fixture(scope="module")
def rig(tmp_path_factory):
    work = tmp_path_factory.mktemp("prom")
    history = build_cluster(seed=21, gpus=32, start=HIST_START, days=HIST_HOURS / 24)  # MIG node incl.
    om = work / "history.om"
    with open(om, "w") as fh:
        write_openmetrics(history, fh, history.start_s, history.end_s)
    live = build_cluster(seed=22, gpus=16, start=NOW - timedelta(hours=1), days=0.2, interval_s=1)
    exporters = start_exporters(live, port=0, clock=SimClock(), timestamps=True)
    prom = PrometheusRig(work, exporters.urls, history_file=om)
    try:
        # several scrapes of every target stored
        prom.wait_for(lambda: (prom.scalar("min(count_over_time(DCGM_FI_DEV_GPU_UTIL[1m]))") or 0) >= 3,
                      60, "three scrapes of every series")
        yield prom, exporters, live, history
    finally:
        prom.stop()
        exporters.stop()


def _rows(path) -> pl.DataFrame:
    with warehouse.open_reader(path) as con:
        return con.sql(f"SELECT {', '.join(COMPARED)} FROM gpu_samples JOIN gpus USING (gpu_id) "
                       "ORDER BY gpu_uuid, mig_instance_id, ts").pl()


def test_backfill_agrees_with_direct_scrape_sample_for_sample(rig, tmp_path):
    prom, exporters, live, _ = rig
    direct = tmp_path / "direct.duckdb"
    stats = scrape(exporters.urls, warehouse_path=direct, count=3, interval_s=1.0)
    assert stats.failed_targets == 0 and stats.quarantined == 0
    scraped = _rows(direct)
    t0, t1 = scraped["ts"].min(), scraped["ts"].max()
    last_ms = int((t1 - datetime(1970, 1, 1)).total_seconds() * 1000)
    prom.wait_for(lambda: (prom.scalar("min(timestamp(DCGM_FI_DEV_GPU_UTIL))") or 0) * 1000 > last_ms,
                  120, "Prometheus to scrape past the direct scrapes")  # a deadline: a busy box scrapes late
    via_prom = tmp_path / "prom.duckdb"
    backfill(prom.url, t0 - timedelta(seconds=2), t1 + timedelta(seconds=1), step_s=1, chunk_s=60,
             warehouse_path=via_prom)
    backfilled = _rows(via_prom)
    assert backfilled.height >= scraped.height
    # 1. everything the direct scrapes stored, Prometheus returns identically
    common = scraped.join(backfilled.select("gpu_uuid", "mig_instance_id", "ts"),
                          on=["gpu_uuid", "mig_instance_id", "ts"], how="semi")
    assert common.height >= scraped.height // 2, "Prometheus should hold most scraped seconds"
    assert_frame_equal(common, backfilled.join(common.select("gpu_uuid", "mig_instance_id", "ts"),
                                               on=["gpu_uuid", "mig_instance_id", "ts"], how="semi"))
    # 2. every backfilled second equals the page the exporter served for it, read by the scrape path:
    # the pages of exactly the (node, second) pairs Prometheus holds. Each exporter is scraped on its
    # own; a busy box misses one node's scrape of a second now and then, and regenerating every node
    # for every second then made 8 rows (one node's GPUs) more than the backfill (112 against 104)
    node_of = {live.hardware.node_host[n].lower(): n for n in exporters.nodes}
    pairs = {(host.lower(), int((t - datetime(1970, 1, 1)).total_seconds()))
             for host, t in zip(backfilled["host"], backfilled["ts"], strict=True)}
    assert {h for h, _ in pairs} <= set(node_of), (pairs, node_of)
    regenerated = tmp_path / "regen.duckdb"
    with warehouse.open_writer(regenerated) as con:
        for host, second in sorted(pairs, key=lambda p: (p[1], p[0])):
            ingest_page(con, metrics_page(live, node_of[host], second, timestamps=True), location="regen",
                        scrape_ms=second * 1000)
    assert_frame_equal(_rows(regenerated), backfilled)


def _backfill_cmd(prom_url: str, path, start: datetime, end: datetime) -> list[str]:
    return [sys.executable, "-c", "from gpuledger.cli.ingest.metrics import app; app()", "prometheus",
            "--url", prom_url, "--start", start.isoformat() + "Z", "--end", end.isoformat() + "Z",
            "--step", "30s", "--chunk", "5m", "--progress", "lines", "--warehouse", str(path)]


def test_sigkill_mid_backfill_then_rerun_has_no_duplicates_and_no_gap(rig, tmp_path):
    prom, _, _, history = rig
    start, end = history.start, history.end
    chunks = len(chunk_bounds(history.start_s, history.end_s, 30, 300))
    clean = tmp_path / "clean.duckdb"
    done = subprocess.run(_backfill_cmd(prom.url, clean, start, end), capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    killed = tmp_path / "killed.duckdb"
    proc = subprocess.Popen(_backfill_cmd(prom.url, killed, start, end), stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True)
    seen = 0
    for line in proc.stdout:  # poll the committed-chunk lines, kill once a few are done
        seen += line.startswith("chunk ")
        if seen >= 5:
            os.kill(proc.pid, signal.SIGKILL)
            break
    proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL and seen < chunks
    rerun = subprocess.run(_backfill_cmd(prom.url, killed, start, end), capture_output=True, text=True,
                           timeout=300)
    assert rerun.returncode == 0, rerun.stderr
    assert f"{seen} already done" in rerun.stderr or "already done" in rerun.stderr
    with warehouse.open_reader(clean) as con:
        expected = con.execute("SELECT count(*), count(DISTINCT ts) FROM gpu_samples").fetchone()
        scope_pos = con.execute("SELECT position FROM ingest_checkpoints WHERE source = 'prometheus'").fetchone()
    got = _rows(killed)
    assert (got.height, got["ts"].n_unique()) == expected
    assert got.select("gpu_uuid", "mig_instance_id", "ts").is_duplicated().sum() == 0
    assert_frame_equal(got, _rows(clean))
    assert scope_pos[0] == end.isoformat() + "Z"
    # dirt in the history came through cleaned: both host spellings map to one host, MIG instances
    assert all("." not in h for h in got["host"].unique())
    assert (got["mig_instance_id"] >= 0).any()


def test_exported_labels_win_for_a_renaming_target():
    base = {"UUID": "GPU-1", "Hostname": "n1", "gpu": "0", "instance": "n1:9400", "job": "dcgm"}
    results = {"DCGM_FI_PROF_SM_ACTIVE": [
        {"metric": base | {"exported_pod": "train-0", "exported_namespace": "ml",
                           "pod": "dcgm-exporter-abc", "namespace": "gpu-operator"},
         "values": [[1796040000, "0.5"]]},
        # same target, a GPU with no workload: the plain pod is the exporter's own, not a workload
        {"metric": base | {"UUID": "GPU-2", "gpu": "1", "pod": "dcgm-exporter-abc", "namespace": "gpu-operator"},
         "values": [[1796040000, "0.0"], [1796040030, "NaN"]]},
    ]}
    long, rejects = long_from_results(results, url="http://p")
    rows = {r["gpu_uuid"]: r for r in long.to_dicts()}
    assert (rows["GPU-1"]["pod"], rows["GPU-1"]["namespace"]) == ("train-0", "ml")
    assert rows["GPU-2"]["pod"] is None and rows["GPU-2"]["namespace"] is None
    assert set(SERIES_COLUMNS) <= set(long.columns)
    assert len(rejects) == 1 and rejects[0].reason == "non-finite value"


def test_chunks_respect_the_point_limit():
    chunks = chunk_bounds(0, 86400 * 7, 30, 86400 * 7)
    assert all((b - a) // 30 <= 11_000 for a, b in chunks) and chunks[0][0] == 0 and chunks[-1][1] == 86400 * 7
    assert all(chunks[i][1] == chunks[i + 1][0] for i in range(len(chunks) - 1))
    assert from_epoch_s(chunks[1][0]) == datetime(1970, 1, 1) + timedelta(seconds=330_000)
