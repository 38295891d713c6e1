"""`ingest prometheus --aggregate` (issue 20, part 4) against a real Prometheus and a real
VictoriaMetrics, both fed the same simulated week through their own ingestion paths (promtool's
OpenMetrics blocks; VictoriaMetrics' Prometheus-text import): 5-minute window aggregates give the
same GPU-hours and, within 1 %, the same active GPU-hours as the raw 30-s samples. Partial answers
(Thanos / Mimir warnings) are errors naming the store; the Mimir tenant header and the path
layouts of Mimir and the VictoriaMetrics cluster reach the server."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
import threading
from datetime import datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import ClassVar

import numpy as np
import polars as pl
import pytest
import requests
from polars.testing import assert_frame_equal

from gpuledger import warehouse
from gpuledger.analytics import queries
from gpuledger.ingest.metrics.prometheus.aggregate import aggregate, chunk_windows
from gpuledger.ingest.metrics.prometheus.backfill import backfill
from gpuledger.ingest.metrics.prometheus.client import PrometheusError
from gpuledger.simulator import build_cluster, write_openmetrics
from gpuledger.simulator.dirt import gap_mask
from tests.helpers.prometheus_rig import PrometheusRig, have_prometheus
from tests.helpers.victoria_rig import VictoriaRig, have_victoria_metrics

# A simulated week (issue 20 §2) of 4 GPUs at a 60 s scrape, ending two days ago: 4 x 10,080 =
# 40,320 samples per metric, 1.75x the day of 8 GPUs at 30 s (23,040) it replaced; fewer GPUs and
# a slower scrape keep the servers' ingestion, which dominates the test's time, small.
DAYS, GPUS, INTERVAL_S = 7, 4, 60
START = (datetime.utcnow() - timedelta(days=DAYS + 2)).replace(hour=0, minute=0, second=0, microsecond=0)  # noqa: DTZ003
END = START + timedelta(days=DAYS)


# One TSDB holding two clusters, as a fleet's Thanos / Mimir / VictoriaMetrics does: GPUs 0-3 carry
# cluster="east", GPUs 4-7 cluster="west" (the label a fleet's external_labels or remote write adds).


def cluster_of_gpu(index: str) -> str:
    return "east" if int(index) < 4 else "west"


def with_cluster_label(text: str) -> str:
    return re.sub(r'\{gpu="(\d+)"', lambda m: f'{{cluster="{cluster_of_gpu(m[1])}",gpu="{m[1]}"', text)


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    if not (have_prometheus() and have_victoria_metrics()):
        pytest.skip("needs Debian's prometheus and victoria-metrics (scripts/install-test-deps.sh)")
    work = tmp_path_factory.mktemp("tsdb")
    sim = build_cluster(seed=31, gpus=GPUS, start=START, days=DAYS, interval_s=INTERVAL_S)
    text = io.StringIO()
    write_openmetrics(sim, text, sim.start_s, sim.end_s, blanks=False)
    labelled = with_cluster_label(text.getvalue())
    (work / "day.om").write_text(labelled)
    prom = PrometheusRig(work, [], history_file=work / "day.om")
    vm = VictoriaRig(work)
    try:
        # the same samples, through VictoriaMetrics' own import: Prometheus text, timestamps in ms
        lines = (f"{line.rsplit(' ', 1)[0]} {line.rsplit(' ', 1)[1]}000\n"
                 for line in labelled.splitlines() if line and not line.startswith("#"))
        vm.import_prometheus_text(lines)
        vm.flush()
        yield prom, vm
    finally:
        prom.stop()
        vm.stop()


def _figures(path) -> dict:
    """Everything held by one job over the week: allocated and active GPU-hours, energy, rows."""
    with warehouse.open_writer(path) as con:
        ids = [r[0] for r in con.execute("SELECT gpu_id FROM gpus").fetchall()]
        warehouse.upsert(con, "jobs", pl.DataFrame([{
            "cluster": "sim", "job_id": "all", "project": "p", "gpus": float(len(ids)), "start_time": START,
            "end_time": END, "state": "COMPLETED", "source": "test", "updated_at": END}]))
        warehouse.upsert(con, "job_allocations", pl.DataFrame({
            "cluster": ["sim"] * len(ids), "job_id": ["all"] * len(ids), "gpu_id": ids,
            "start_time": [START] * len(ids), "end_time": [END] * len(ids), "gpu_fraction": [1.0] * len(ids),
            "source": ["test"] * len(ids)}))
    with warehouse.open_reader(path) as con:
        usage = queries.usage_report(con, start=START, end=END, by="job", now=END).row(0, named=True)
        rows, weight = con.execute("SELECT count(*), sum(coalesce(sample_n, 1)) FROM gpu_samples").fetchall()[0]
    return {**usage, "rows": rows, "weight": weight, "devices": len(ids)}


# slow: a week through both servers' own ingestion, the raw backfill and two aggregates: ~25
# CPU-seconds (`/usr/bin/time -v`, load 9; the day it replaced: ~10), 80 s wall here
@pytest.mark.slow
@pytest.mark.prometheus
def test_five_minute_aggregates_agree_with_the_raw_samples_on_both_servers(servers, tmp_path):
    prom, vm = servers
    backfill(prom.url, START, END, step_s=INTERVAL_S, chunk_s=24 * 3600, warehouse_path=tmp_path / "raw.duckdb",
             cluster="sim", workers=1, processes=False)
    raw = _figures(tmp_path / "raw.duckdb")
    for name, url in (("prometheus", prom.url), ("victoria-metrics", vm.url)):
        path = tmp_path / f"{name}.duckdb"
        stats = aggregate(url, START, END, step_s=300, warehouse_path=path, cluster="sim", concurrency=3)
        assert stats.chunks_done == DAYS  # chunks of at most a day
        agg = _figures(path)
        # the devices x 168 h allocated whatever the resolution; 2,016 windows a device instead of
        # 10,080 samples (5 a window); the windows stand for the raw samples (their counts), and the
        # time-weighted activity agrees within 1 %.
        assert agg["devices"] == raw["devices"]
        assert agg["gpu_hours_allocated"] == pytest.approx(raw["gpu_hours_allocated"], rel=1e-9), name
        assert agg["rows"] <= raw["rows"] / 4.5, name
        assert agg["weight"] == pytest.approx(raw["weight"], rel=0.01), name
        assert agg["gpu_hours_active"] == pytest.approx(raw["gpu_hours_active"], rel=0.01), name
        assert agg["gpu_hours_unknown"] == pytest.approx(raw["gpu_hours_unknown"], abs=0.01 * raw["gpu_hours_allocated"]), name
        assert agg["energy_kwh"] == pytest.approx(raw["energy_kwh"], rel=0.01), name


class _TSDB(BaseHTTPRequestHandler):
    """A stand-in querier behind a path prefix: answers the label list, the series index (``series``
    entries) and every query_range with a one-series matrix, plus the warnings the test
    sets (what Thanos / Mimir add when a store did not answer). Records the paths and tenant headers it was asked with; with ``required`` set, a
    request without exactly those headers is refused 401, as Mimir's and a token proxy's are."""

    prefix = ""
    series = 1  # how many series the index (the chunk-size probe) answers
    warnings: list[str] = []
    seen: list[tuple[str, str | None]] = []
    tokens: list[str | None] = []
    required: dict[str, str] = {}

    def do_GET(self):  # noqa: N802
        path = self.path.split("?", 1)[0]
        self.seen.append((path, self.headers.get("X-Scope-OrgID")))
        self.tokens.append(self.headers.get("Authorization"))
        if any(self.headers.get(k) != v for k, v in self.required.items()):
            self.send_error(401, "no org id / bad token")
            return
        if path == f"{self.prefix}/api/v1/label/__name__/values":
            body = {"status": "success", "data": ["DCGM_FI_DEV_GPU_UTIL"]}
        elif path == f"{self.prefix}/api/v1/series":  # the aggregate's probe: how many series
            body = {"status": "success", "data": [{"__name__": "DCGM_FI_DEV_GPU_UTIL", "UUID": f"GPU-{i}"}
                                                  for i in range(self.series)]}
        elif path == f"{self.prefix}/api/v1/query_range":
            t = int(START.timestamp()) + 300
            body = {"status": "success", "data": {"resultType": "matrix", "result": [{
                "metric": {"gpu": "0", "UUID": "GPU-t0", "Hostname": "n1", "modelName": "NVIDIA H100 80GB HBM3"},
                "values": [[t, "50"]]}]}}
            if self.warnings:
                body["warnings"] = self.warnings
        else:
            self.send_error(404)
            return
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


@pytest.fixture
def stand_in():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _TSDB)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    _TSDB.seen, _TSDB.warnings, _TSDB.tokens, _TSDB.required, _TSDB.series = [], [], [], {}, 1
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


@pytest.mark.parametrize("prefix", ["/prometheus", "/select/0/prometheus"], ids=["mimir", "vm-cluster"])
def test_url_layouts_and_the_tenant_header_reach_the_server(stand_in, prefix, tmp_path):
    _TSDB.prefix = prefix
    stats = aggregate(stand_in + prefix, START, START + timedelta(hours=1), step_s=300,
                      warehouse_path=tmp_path / "w.duckdb", tenant="team-a", backoff_s=0.01)
    assert stats.chunks_done == 1 and stats.rows_new == 1
    assert {p for p, _ in _TSDB.seen} == {f"{prefix}/api/v1/label/__name__/values", f"{prefix}/api/v1/series",
                                          f"{prefix}/api/v1/query_range"}
    assert {t for _, t in _TSDB.seen} == {"team-a"}
    with warehouse.open_reader(tmp_path / "w.duckdb") as con:
        # GPU util 50 % averaged over the window starting at START
        assert con.execute("SELECT ts, gpu_util_ratio FROM gpu_samples").fetchall() == [(START, 0.5)]


def test_chunks_are_sized_from_the_series_the_tsdb_holds(stand_in, tmp_path):
    # The index holds 20,000 series for the hour asked (an 8,192-GPU fleet with job copies): over
    # 4 x 4,000 (SERIES_PER_SHARD), so 8 shards of 2,500; 40,000 series-windows a shard is 16
    # windows, so the hour is one chunk (each shard asked once; the stand-in answers every shard
    # with its one series, stored once: first value wins).
    _TSDB.prefix, _TSDB.series = "", 20_000
    assert chunk_windows(20_000, 288) == 2 and chunk_windows(16_384, 288) == 2 and chunk_windows(10**6, 288) == 1
    assert chunk_windows(8, 288) == 288 and chunk_windows(150, 288) == 266 and chunk_windows(150, 12) == 12
    ends = []
    stats = aggregate(stand_in, START, START + timedelta(hours=1), step_s=300, warehouse_path=tmp_path / "w.duckdb",
                      backoff_s=0.01, on_chunk=lambda b, total, s: ends.append((b - int(START.timestamp()), total)))
    assert ends == [(3600, 1)]
    assert (stats.chunks_done, stats.chunk_windows, stats.series, stats.shards) == (1, 16, 20_000, 8)
    asked = sum(path.endswith("/query_range") for path, _ in _TSDB.seen)
    assert asked >= 8 and asked % 8 == 0  # each shard asked the same queries once


def test_a_partial_answer_names_the_store_and_stores_nothing(stand_in, tmp_path):
    _TSDB.prefix = ""
    _TSDB.warnings = ["No StoreAPIs matched for this query", "store 10.0.0.7:10901 (sidecar eu-1): deadline exceeded"]
    with pytest.raises(PrometheusError, match=r"partial answer .*10\.0\.0\.7:10901 \(sidecar eu-1\)"):
        aggregate(stand_in, START, START + timedelta(hours=1), step_s=300, warehouse_path=tmp_path / "w.duckdb",
                  backoff_s=0.01)
    with warehouse.open_reader(tmp_path / "w.duckdb") as con:
        assert con.execute("SELECT count(*) FROM gpu_samples").fetchall() == [(0,)]
        assert con.execute("SELECT count(*) FROM ingest_checkpoints").fetchall() == [(0,)]


def _hold(path, jobs: list[tuple[str, str, list[int], datetime, datetime | None]]) -> None:
    """Jobs (job_id, project, device indices in UUID order, start, end or None: still running) on
    the warehouse's devices; the same indices name the same GPUs in every warehouse."""
    with warehouse.open_writer(path) as con:
        ids = [r[0] for r in con.execute("SELECT gpu_id FROM gpus ORDER BY gpu_uuid").fetchall()]
        for job_id, project, devices, start, end in jobs:
            warehouse.upsert(con, "jobs", pl.DataFrame([{
                "cluster": "sim", "job_id": job_id, "project": project, "gpus": float(len(devices)),
                "start_time": start, "end_time": end, "state": "RUNNING" if end is None else "COMPLETED",
                "source": "test", "updated_at": end or START}]))
            warehouse.upsert(con, "job_allocations", pl.DataFrame({
                "cluster": ["sim"] * len(devices), "job_id": [job_id] * len(devices),
                "gpu_id": [ids[i] for i in devices], "start_time": [start] * len(devices),
                "end_time": [end] * len(devices), "gpu_fraction": [1.0] * len(devices),
                "source": ["test"] * len(devices)}, schema_overrides={"end_time": pl.Datetime("us")}))


# Two jobs still running when the data ends (their GPU-hours run to the data's "now") and one with
# edges off the 5-minute grid (:07 and :33), on the week above.
RUNNING = [("j1", "p1", [0, 1], START, None),
           ("j2", "p2", [2], START + timedelta(hours=26, minutes=7), START + timedelta(hours=80, minutes=33)),
           ("j3", "p3", [3], START + timedelta(days=5, minutes=2), None)]


@pytest.mark.slow
@pytest.mark.prometheus
def test_aggregates_charge_running_jobs_the_raw_samples_gpu_hours_per_project(servers, tmp_path):
    prom, vm = servers
    raw_path = tmp_path / "raw.duckdb"
    backfill(prom.url, START, END, step_s=INTERVAL_S, chunk_s=24 * 3600, warehouse_path=raw_path,
             cluster="sim", workers=1, processes=False)
    # The newest raw sample is END - 60 s (the week is [START, END) at a 60-s scrape): "now" for
    # the data, to which the running jobs are charged. By hand, allocated GPU-hours:
    #   p1: 2 GPUs x (168 h - 1 min)            = 335.966667
    #   p2: 1 GPU x (80 h 33 min - 26 h 07 min) =  54.433333
    #   p3: 1 GPU x (168 h - 1 min - 120 h 2 min) = 47.95
    golden = {"p1": 2 * (168 - 1 / 60), "p2": 54 + 26 / 60, "p3": 47.95}
    figures = {}
    for name, url, path in (("raw", None, raw_path), ("prometheus", prom.url, tmp_path / "p.duckdb"),
                            ("victoria-metrics", vm.url, tmp_path / "vm.duckdb")):
        if url:
            aggregate(url, START, END, step_s=300, warehouse_path=path, cluster="sim", concurrency=3)
        _hold(path, RUNNING)
        with warehouse.open_reader(path) as con:
            now = queries.data_now(con)
            usage = queries.usage_report(con, start=START, end=END + timedelta(days=1), by="project")
        assert now == END - timedelta(seconds=60), name  # not the last window's start (END - 5 min)
        figures[name] = {r["project"]: r for r in usage.iter_rows(named=True)}
        for project, hours in golden.items():
            assert figures[name][project]["gpu_hours_allocated"] == pytest.approx(hours, abs=1e-8), (name, project)  # the report rounds to 1e-9
    for name in ("prometheus", "victoria-metrics"):
        for project, (_, _, devices, _, _) in zip(golden, RUNNING, strict=True):
            # Active GPU-hours: every whole hour exact (5-minute windows nest in hours and stand for
            # the same raw samples); each allocation edge off the window grid (j2's :07 and :33,
            # j3's :02, the running jobs' "now") moves at most one window, 5 min, of one GPU.
            raw_active, agg_active = (figures[k][project]["gpu_hours_active"] for k in ("raw", name))
            assert abs(agg_active - raw_active) <= 2 * len(devices) * 5 / 60, (name, project)
        # ...because every (GPU, hour) of the rollup holds exactly the raw samples' count and sum of
        # the signal the figures use (SM active, the best), the windows where a pod's series ends
        # and the next begins included (window_copies). (The worse signals and the row count differ
        # in the 7 GPU-hours where an SM reading is blank: a window weighs them by the SM count.)
        hourly = {k: _hourly(figures_path) for k, figures_path in (("raw", raw_path), (name, tmp_path / (
            "p.duckdb" if name == "prometheus" else "vm.duckdb")))}
        assert hourly[name].height == hourly["raw"].height > 0
        assert_frame_equal(hourly[name], hourly["raw"], check_exact=False, abs_tol=1e-9)


def _hourly(path) -> pl.DataFrame:
    """The gpu_hourly rollup by GPU UUID and hour: the best signal's sum and count."""
    with warehouse.open_reader(path) as con:
        return con.sql("SELECT g.gpu_uuid, h.hour, h.s_sm_active, h.s_n_sm_active "
                       "FROM gpu_hourly h JOIN gpus g USING (gpu_id) ORDER BY 1, 2").pl()


def _devices_by_cluster(path) -> dict[str, list[int]]:
    with warehouse.open_reader(path) as con:
        rows = con.execute("SELECT cluster, list(gpu_index ORDER BY gpu_index) FROM gpus GROUP BY 1").fetchall()
    return dict(rows)


def _rows_by_cluster(path) -> dict[str, tuple[int, int]]:
    """(rows, raw samples they stand for) per cluster."""
    with warehouse.open_reader(path) as con:
        rows = con.execute("SELECT g.cluster, count(*), sum(s.sample_n) FROM gpu_samples s JOIN gpus g USING (gpu_id) "
                           "GROUP BY 1").fetchall()
    return {c: (n, w) for c, n, w in rows}


@pytest.mark.slow
@pytest.mark.prometheus
def test_two_clusters_in_one_tsdb_land_as_two_clusters(servers, tmp_path):
    prom, vm = servers
    # Prometheus through the API, VictoriaMetrics through the CLI as an operator runs it
    stats = aggregate(prom.url, START, END, step_s=300, warehouse_path=tmp_path / "p.duckdb", cluster_label="cluster")
    cli = _cli("ingest", "prometheus", "--url", vm.url, "--start", START.isoformat(), "--end", END.isoformat(),
               "--aggregate", "5m", "--cluster-label", "cluster", "-w", str(tmp_path / "vm.duckdb"))
    assert cli.returncode == 0, cli.stderr
    # 8 GPUs, gpu labels 0-3 in cluster="east" and 4-7 in "west" (with_cluster_label): two clusters of
    # 4, each device once, none under the default cluster
    for path in (tmp_path / "p.duckdb", tmp_path / "vm.duckdb"):
        assert _devices_by_cluster(path) == {"east": [0, 1, 2, 3], "west": [4, 5, 6, 7]}
    assert stats.chunks_done == 2 * DAYS and stats.unlabelled_series == 0
    by_cluster = _rows_by_cluster(tmp_path / "p.duckdb")
    assert {c: n for c, (n, _) in by_cluster.items()} == stats.rows_by_cluster
    assert _rows_by_cluster(tmp_path / "vm.duckdb") == by_cluster  # both servers: the same rows and weights
    # a week of 5-minute windows is 7 x 288 = 2,016 per device, less those a scrape gap of the node
    # (2-15 min, the simulator's own mask) leaves without a sample: 4 devices a cluster
    windows = 4 * _windows_with_a_sample()
    assert {c: n for c, (n, _) in by_cluster.items()} == {"east": windows, "west": windows}
    assert f"by cluster: east {windows:,}, west {windows:,}" in cli.stderr, cli.stderr
    # the same command again: every chunk of each cluster already done, nothing new
    again = _cli("ingest", "prometheus", "--url", vm.url, "--start", START.isoformat(), "--end", END.isoformat(),
                 "--aggregate", "5m", "--cluster-label", "cluster", "-w", str(tmp_path / "vm.duckdb"))
    assert again.returncode == 0, again.stderr
    assert "0 chunks ingested (east: already done; west: already done), 0 new rows" in again.stderr, again.stderr
    assert _rows_by_cluster(tmp_path / "vm.duckdb") == by_cluster


def _windows_with_a_sample() -> int:
    """5-minute windows of the week holding at least one scrape of the (one) node."""
    sim = build_cluster(seed=31, gpus=GPUS, start=START, days=DAYS, interval_s=INTERVAL_S)
    t = np.arange(sim.start_s, sim.end_s, INTERVAL_S)
    scraped = t[~gap_mask(sim, np.zeros_like(t), t)]
    assert 2016 - 20 < len(np.unique(scraped // 300)) < 2016  # a few gaps are whole windows
    return len(np.unique(scraped // 300))


def _cli(*args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPULEDGER_PROMETHEUS_")}
    return subprocess.run([sys.executable, "-m", "gpuledger.cli", *args], capture_output=True, text=True,
                          timeout=300, cwd=Path(__file__).resolve().parents[2], env=env, check=False)


class _TenantGateway(BaseHTTPRequestHandler):
    """Mimir's tenancy in front of the real VictoriaMetrics: the X-Scope-OrgID header picks the
    tenant and a tenant sees its own cluster's series only (VictoriaMetrics' ``extra_label``, as
    vmauth and vmgateway enforce tenancy); a request without a known tenant is refused 401.
    Records each request's tenant and path."""

    upstream = ""
    tenants: ClassVar[dict[str, str]] = {"team-east": "east", "team-west": "west"}
    seen: ClassVar[list[tuple[str | None, str]]] = []

    def do_GET(self):
        tenant = self.headers.get("X-Scope-OrgID")
        self.seen.append((tenant, self.path.split("?", 1)[0]))
        if tenant not in self.tenants:
            self.send_error(401, "no org id")
            return
        joiner = "&" if "?" in self.path else "?"
        answer = requests.get(f"{self.upstream}{self.path}{joiner}extra_label=cluster={self.tenants[tenant]}",
                              timeout=60)
        self.send_response(answer.status_code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(answer.content)))
        self.end_headers()
        self.wfile.write(answer.content)

    def log_message(self, *args):
        pass


@pytest.mark.slow
@pytest.mark.prometheus
def test_each_cluster_is_asked_with_its_own_tenant(servers, tmp_path):
    _, vm = servers
    gateway = ThreadingHTTPServer(("127.0.0.1", 0), _TenantGateway)
    threading.Thread(target=gateway.serve_forever, daemon=True).start()
    _TenantGateway.upstream, _TenantGateway.seen = vm.url, []
    url = f"http://127.0.0.1:{gateway.server_address[1]}"
    try:
        # one tenant per cluster and no selector: only the header keeps east's GPUs out of west
        config = tmp_path / "gpuledger.yaml"
        config.write_text("currency: USD\norg: {name: acme}\nsources:\n  prometheus:\n"
                          f"    url: {url}\n    clusters:\n      east: {{tenant: team-east}}\n"
                          "      west: {tenant: team-west}\n")
        day = (START + timedelta(days=1)).isoformat()
        done = _cli("ingest", "prometheus", "--url", url, "--start", START.isoformat(), "--end", day,
                    "--aggregate", "5m", "--config", str(config), "-w", str(tmp_path / "w.duckdb"))
        assert done.returncode == 0, done.stderr
        assert _devices_by_cluster(tmp_path / "w.duckdb") == {"east": [0, 1, 2, 3], "west": [4, 5, 6, 7]}
        tenants = {t for t, _ in _TenantGateway.seen}
        assert tenants == {"team-east", "team-west"}  # every request with a tenant, each cluster's own
        # --cluster picks one of the configured clusters: west's queries only, under its tenant
        _TenantGateway.seen = []
        one = _cli("ingest", "prometheus", "--url", url, "--start", START.isoformat(), "--end", day,
                   "--aggregate", "5m", "--config", str(config), "--cluster", "west", "-w", str(tmp_path / "west.duckdb"))
        assert one.returncode == 0, one.stderr
        assert _devices_by_cluster(tmp_path / "west.duckdb") == {"west": [4, 5, 6, 7]}
        assert {t for t, _ in _TenantGateway.seen} == {"team-west"}
        wrong = _cli("ingest", "prometheus", "--url", url, "--start", START.isoformat(), "--end", day,
                     "--aggregate", "5m", "--config", str(config), "--cluster", "north", "-w", str(tmp_path / "n.duckdb"))
        assert wrong.returncode == 2 and "'north' is not among sources.prometheus.clusters (east, west)" in wrong.stderr
    finally:
        gateway.shutdown()


@pytest.mark.slow
@pytest.mark.prometheus
def test_each_cluster_is_asked_with_its_own_selector(servers, tmp_path):
    # Clusters whose names are not label values: "prod" is east's GPUs 0 and 1 only (two matchers),
    # "lab" every west series; GPUs 2 and 3 of east belong to neither and land nowhere.
    _, vm = servers
    config = tmp_path / "gpuledger.yaml"
    config.write_text("currency: USD\norg: {name: acme}\nsources:\n  prometheus:\n"
                      f"    url: {vm.url}\n    clusters:\n"
                      "      prod: {selector: 'cluster=\"east\", gpu=~\"0|1\"'}\n"
                      "      lab: {selector: 'cluster=~\"w.*\"'}\n")
    day = (START + timedelta(days=1)).isoformat()
    done = _cli("ingest", "prometheus", "--url", vm.url, "--start", START.isoformat(), "--end", day,
                "--aggregate", "5m", "--config", str(config), "-w", str(tmp_path / "w.duckdb"))
    assert done.returncode == 0, done.stderr
    assert _devices_by_cluster(tmp_path / "w.duckdb") == {"lab": [4, 5, 6, 7], "prod": [0, 1]}


@pytest.mark.slow
@pytest.mark.prometheus
@pytest.mark.parametrize("flags", [(), ("-search.maxSeries=2",)], ids=["series-listed", "series-capped"])
def test_series_without_the_cluster_label_are_counted_and_named(tmp_path, flags):
    """``series-capped``: VictoriaMetrics refuses /api/v1/series beyond -search.maxSeries (30,000 by
    default: a fleet of ~16,000 GPUs; 2 here) with HTTP 422; the chunks are sized and the unlabelled
    series counted on the server instead, and the answer is the same."""
    if not have_victoria_metrics():
        pytest.skip("needs Debian's victoria-metrics (scripts/install-test-deps.sh)")
    # two hours of the 8 GPUs, GPUs 6 and 7 without any cluster label
    sim = build_cluster(seed=31, gpus=GPUS, start=START, days=1, interval_s=INTERVAL_S)
    text = io.StringIO()
    write_openmetrics(sim, text, sim.start_s, sim.start_s + 7200, blanks=False)
    lines = [line for line in with_cluster_label(text.getvalue()).splitlines() if line and not line.startswith("#")]
    lines = [re.sub(r'cluster="west",(gpu="[67]")', r"\1", line) for line in lines]
    # by hand from the input: the SM-active series (label sets) that carry no cluster label
    unlabelled = {line.rsplit(" ", 2)[0] for line in lines
                  if line.startswith("DCGM_FI_PROF_SM_ACTIVE{") and "cluster=" not in line}
    assert len(unlabelled) >= 2  # GPUs 6 and 7, once per job they held
    vm = VictoriaRig(tmp_path, flags=flags)
    try:
        vm.import_prometheus_text(f"{line.rsplit(' ', 1)[0]} {line.rsplit(' ', 1)[1]}000\n" for line in lines)
        vm.flush()
        if flags:  # the cap holds: the index refuses to list them
            start_s = int((START - datetime(1970, 1, 1)).total_seconds())  # START is naive UTC
            span = {"start": start_s, "end": start_s + 7200}
            assert requests.get(f"{vm.url}/api/v1/series", params={"match[]": "DCGM_FI_PROF_SM_ACTIVE", **span},
                                timeout=30).status_code == 422
        done = _cli("ingest", "prometheus", "--url", vm.url, "--start", START.isoformat(), "--end",
                    (START + timedelta(hours=2)).isoformat(), "--aggregate", "5m", "--cluster-label", "cluster",
                    "-w", str(tmp_path / "w.duckdb"))
    finally:
        vm.stop()
    assert done.returncode == 0, done.stderr
    assert _devices_by_cluster(tmp_path / "w.duckdb") == {"east": [0, 1, 2, 3], "west": [4, 5]}
    assert (f"{len(unlabelled)} DCGM_FI_PROF_SM_ACTIVE series (one a device and job) carry no 'cluster' label: "
            "their GPUs were not stored") in done.stderr, done.stderr


def test_shards_split_every_uuid_into_exactly_one_part():
    # PromQL matches a regex against the whole value, and a missing label reads as "": each UUID
    # (either case, any last character, none at all) falls in exactly one of the shards' parts.
    from gpuledger.ingest.metrics.prometheus.aggregate import shard_count, shard_matchers

    def matches(matcher: str, value: str) -> bool:
        label, op, pattern = re.fullmatch(r'(\w+)(=~|!~)"(.*)"', matcher).groups()
        assert label == "UUID"
        return (re.fullmatch(pattern, value) is not None) == (op == "=~")

    uuids = [f"GPU-{i:08x}-aaaa-bbbb-cccc-{i * 7919:012x}" for i in range(64)]
    uuids += [u.upper() for u in uuids[:16]] + ["", "GPU-without-hex-end-z", "MIG-1234-5678-ef"]
    for shards in (2, 4, 8, 16):
        parts = shard_matchers(shards)
        assert len(parts) == shards
        for u in uuids:
            assert sum(matches(m, u) for m in parts) == 1, (shards, u)
    assert shard_matchers(1) == [""]
    # SERIES_PER_SHARD = 4,000: 4,096 GPUs' 10,235 series in 4 shards (2,559 each on average),
    # 16,384 GPUs' 42,003 in 16 (2,625); up to 4,000 series: unsharded
    assert [shard_count(n) for n in (0, 4_000, 4_001, 8_001, 10_235, 42_003, 10**6)] == [1, 1, 2, 4, 4, 16, 16]


@pytest.mark.slow
@pytest.mark.prometheus
def test_a_chunk_asked_in_shards_stores_the_unsharded_rows(servers, tmp_path, monkeypatch):
    # A day of the 4 GPUs (each with its job copies): unsharded, then with every chunk asked in 16
    # shards (SERIES_PER_SHARD = 1); the same rows, values and quarantine, each shard asked once a chunk.
    import gpuledger.ingest.metrics.prometheus.aggregate as agg

    _, vm = servers
    day = (START + timedelta(days=2), START + timedelta(days=3))
    whole = aggregate(vm.url, *day, step_s=300, warehouse_path=tmp_path / "whole.duckdb", cluster="sim")
    asked: list[str] = []
    inner = agg.aggregate_chunk

    def spy(*args, selector="", **kw):
        asked.append(selector)
        return inner(*args, selector=selector, **kw)

    monkeypatch.setattr(agg, "SERIES_PER_SHARD", 1)
    monkeypatch.setattr(agg, "aggregate_chunk", spy)
    sharded = aggregate(vm.url, *day, step_s=300, warehouse_path=tmp_path / "sharded.duckdb", cluster="sim")
    assert whole.series > 16 and sharded.series == whole.series  # so 16 shards
    assert len(asked) == 16 * sharded.chunks_done and len(set(asked)) == 16
    assert (sharded.rows_new, sharded.quarantined) == (whole.rows_new, whole.quarantined)
    # 8 devices (4 GPUs make one whole 8-GPU node) x 288 windows = 2,304, fewer where a scrape gap
    # empties a window
    assert 2_000 < whole.rows_new <= 8 * 288

    def rows(path):
        with warehouse.open_reader(path) as con:
            return con.sql("SELECT g.gpu_uuid, g.mig_instance_id, s.* EXCLUDE (gpu_id) FROM gpu_samples s "
                           "JOIN gpus g USING (gpu_id)").pl().sort("gpu_uuid", "mig_instance_id", "ts")

    assert_frame_equal(rows(tmp_path / "sharded.duckdb"), rows(tmp_path / "whole.duckdb"))


def _samples(path) -> pl.DataFrame:
    """Every stored row by GPU UUID and moment, with what it stands for and how far it reaches."""
    with warehouse.open_reader(path) as con:
        return con.sql("SELECT g.gpu_uuid, s.ts, s.sm_active_ratio, s.energy_total_j, s.fb_used_bytes, s.sample_n, "
                       "s.covered_ms, s.pod FROM gpu_samples s JOIN gpus g USING (gpu_id) ORDER BY 1, 2").pl()


def _still_filling(path) -> list[tuple[str, str]]:
    with warehouse.open_reader(path) as con:
        return con.execute("SELECT scope, position FROM ingest_checkpoints WHERE scope LIKE 'window still filling%' "
                           "ORDER BY 1").fetchall()


@pytest.mark.slow
@pytest.mark.prometheus
def test_the_window_still_filling_is_stored_as_far_as_it_has_come_then_anew(servers, tmp_path):
    prom, vm = servers
    # One day of the week, asked three times as the pipelines ask it, by a wall clock set to:
    #   12:02:30 — the 12:00 window has the samples of 12:00, 12:01 and 12:02 (a 60-s scrape);
    #   12:04:10 — the same window, now with 12:03 and 12:04 too;
    #   the next day 00:10 — the whole day has ended.
    # With settle 0 the TSDB is asked up to the wall clock itself. The rows stored at each moment must
    # be what the raw samples up to that moment make (the raw backfill cut there), and after the last
    # run exactly what one run over the ended day stores: the 12:00 window replaced, not kept first.
    day = START + timedelta(days=1)
    clocks = [day + timedelta(hours=12, minutes=2, seconds=30), day + timedelta(hours=12, minutes=4, seconds=10)]
    for name, url in (("prometheus", prom.url), ("victoria-metrics", vm.url)):
        path = tmp_path / f"{name}.duckdb"
        for k, now in enumerate(clocks):
            stats = aggregate(url, day, day + timedelta(days=1), step_s=300, warehouse_path=path, cluster="sim",
                              now=now, concurrency=3)
            window = day + timedelta(hours=12)
            assert stats.filling == f"[{window.isoformat()}Z, {now.isoformat()}Z)", name
            assert _still_filling(path) == [("window still filling: cluster=sim", f"{window.isoformat()}Z")]
            raw = tmp_path / f"raw-{name}-{k}.duckdb"
            backfill(prom.url, day, now, step_s=INTERVAL_S, chunk_s=24 * 3600, warehouse_path=raw, cluster="sim",
                     workers=1, processes=False)
            # "now" for the data is the newest raw sample (12:02 / 12:04), not the window's start
            with warehouse.open_reader(path) as con, warehouse.open_reader(raw) as raw_con:
                assert queries.data_now(con) == queries.data_now(raw_con) == now.replace(second=0), name
            # one row per device at 12:00, standing for 3 then 5 samples (the 8 GPUs are on one node
            # scraped every 60 s; no scrape gap at that hour, checked by the raw rows themselves)
            filling = _samples(path).filter(pl.col("ts") == window)
            assert filling.height == 8 and filling["sample_n"].to_list() == [3 + 2 * k] * 8, (name, filling)
            assert filling["covered_ms"].to_list() == [(2 + 2 * k) * 60_000] * 8, name
            hourly = _hourly(path)
            assert_frame_equal(hourly, _hourly(raw), check_exact=False, abs_tol=1e-9)
            assert hourly["hour"].max() == window, name
        whole = aggregate(url, day, day + timedelta(days=1), step_s=300, warehouse_path=path, cluster="sim",
                          now=day + timedelta(days=1, minutes=10), concurrency=3)
        assert whole.filling == "" and whole.resumed == {"sim": f"{(day + timedelta(hours=12)).isoformat()}Z"}, name
        assert _still_filling(path) == [], name  # the window is whole: nothing left to store anew
        once = tmp_path / f"once-{name}.duckdb"
        aggregate(url, day, day + timedelta(days=1), step_s=300, warehouse_path=once, cluster="sim", concurrency=3)
        assert_frame_equal(_samples(path), _samples(once))
        assert_frame_equal(_hourly(path), _hourly(once), check_exact=False, abs_tol=1e-9)


@pytest.mark.slow
@pytest.mark.prometheus
def test_chunks_of_one_window_store_what_a_days_chunk_stores(servers, tmp_path):
    # The pipelines' pass asks a window or two (`aggregate_recent` every minute). Six hours of the
    # week in chunks of one window must store the same rows as the span in one chunk, and the hourly
    # rollup the raw samples' exactly: where a pod's series ends and the next begins inside a window,
    # the runs add up only if the chunk knows how many samples a whole window holds (windows.py asks
    # the count for the hour before the chunk; without it a whole day in one-window chunks left 29
    # of its 192 GPU-hours a sample short).
    prom, vm = servers
    start = START + timedelta(days=1, hours=6)
    end = start + timedelta(hours=6)
    raw = tmp_path / "raw.duckdb"
    backfill(prom.url, start, end, step_s=INTERVAL_S, chunk_s=24 * 3600, warehouse_path=raw, cluster="sim",
             workers=1, processes=False)
    with warehouse.open_reader(raw) as con:  # the case itself: windows where a device's series changes
        # (a pod ending and the next starting; an idle GPU's series, no pod label, counts as one)
        changes = con.execute("SELECT count(*) FROM (SELECT gpu_id, time_bucket(INTERVAL 5 MINUTE, ts) "
                              "FROM gpu_samples GROUP BY ALL HAVING count(DISTINCT coalesce(pod, '')) > 1)"
                              ).fetchall()[0][0]
    assert changes > 0
    for name, url in (("victoria-metrics", vm.url),):  # the context is the same query on either (one kept: time)
        by_window, by_span = tmp_path / f"{name}-1.duckdb", tmp_path / f"{name}-72.duckdb"
        stats = aggregate(url, start, end, step_s=300, chunk_s=300, warehouse_path=by_window, cluster="sim",
                          concurrency=3)
        assert stats.chunks_done == 72, name
        aggregate(url, start, end, step_s=300, warehouse_path=by_span, cluster="sim", concurrency=3)
        assert_frame_equal(_samples(by_window), _samples(by_span))
        assert _hourly(by_window).height == 8 * 6
        assert_frame_equal(_hourly(by_window), _hourly(raw), check_exact=False, abs_tol=1e-9)


@pytest.mark.slow
@pytest.mark.prometheus
def test_the_cli_names_the_window_still_filling_at_the_wall_clock(tmp_path):
    # Samples up to the wall clock (and past it, as a clock-skewed exporter's), in a real
    # VictoriaMetrics; the command as an operator runs it (its default --settle 60s: the TSDB is
    # asked up to a minute ago), twice: each run stores the window then filling as far as it has
    # settled and says so, and the second stores it anew (one row a device).
    if not have_victoria_metrics():
        pytest.skip("needs Debian's victoria-metrics (scripts/install-test-deps.sh)")
    now = datetime.utcnow()  # noqa: DTZ003
    start = (now - timedelta(minutes=20)).replace(second=0, microsecond=0)
    sim = build_cluster(seed=5, gpus=GPUS, start=start, days=30 / 1440, interval_s=15)
    text = io.StringIO()
    write_openmetrics(sim, text, sim.start_s, sim.end_s, blanks=False)
    vm = VictoriaRig(tmp_path)
    try:
        vm.import_prometheus_text(f"{line.rsplit(' ', 1)[0]} {line.rsplit(' ', 1)[1]}000\n"
                                  for line in text.getvalue().splitlines() if line and not line.startswith("#"))
        vm.flush()
        path = tmp_path / "w.duckdb"
        args = ("ingest", "prometheus", "--url", vm.url, "--start", start.isoformat(), "--end",
                (start + timedelta(days=1)).isoformat(), "--aggregate", "5m", "--cluster", "sim", "-w", str(path))
        for run in range(2):
            done, settled = _run_off_the_window_grid(args)
            said = re.search(r"(\d+) of the rows are the window still filling, \[(\S+)Z, (\S+)Z\), stored as far as "
                             r"it has come: the next run stores it anew", done.stderr)
            assert said, done.stderr
            rows, window, reach = int(said[1]), datetime.fromisoformat(said[2]), datetime.fromisoformat(said[3])
            assert window == settled.replace(minute=settled.minute // 5 * 5, second=0, microsecond=0) < reach <= settled
            with warehouse.open_reader(path) as con:
                devices = con.execute("SELECT count(*) FROM gpus").fetchall()[0][0]
                at = con.execute("SELECT count(*), count(DISTINCT gpu_id), max(covered_ms) FROM gpu_samples "
                                 "WHERE ts = ?", [window]).fetchall()[0]
                assert rows == at[0] == at[1] == devices == 8 and at[2] is not None  # the simulated node's 8 GPUs
                assert window <= queries.data_now(con) <= reach
            if run:
                assert ("sim: whole windows already done" in done.stderr
                        or f"sim: continued from {window - timedelta(minutes=5):%Y-%m-%dT%H:%M:%S}Z" in done.stderr
                        ), done.stderr
    finally:
        vm.stop()


def _run_off_the_window_grid(args) -> tuple[subprocess.CompletedProcess, datetime]:
    """The command run where the moment it asks up to (the wall clock less its 60-s settle) stays
    inside one 5-minute window, a second clear of its start, for the whole run (a run at a window's
    first second has no window filling); at most three tries. Returns the run and the latest
    moment it could have asked up to."""
    for _ in range(3):
        before = datetime.utcnow() - timedelta(seconds=60)  # noqa: DTZ003
        done = _cli(*args)
        after = datetime.utcnow() - timedelta(seconds=60)  # noqa: DTZ003
        assert done.returncode == 0, done.stderr
        if before.minute // 5 == after.minute // 5 and before.hour == after.hour and (before.minute % 5, before.second) > (0, 0):
            return done, after
    raise AssertionError("three runs straddled a window's start")
