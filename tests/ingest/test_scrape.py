"""DCGM /metrics scrape ingest: the bad-input corpus (every bad line quarantined with a reason while
the good lines of the same page land), label spellings, 4.9+ fields, hpc_job copies, MIG
device-level values, idempotent re-ingest, late samples, energy resets, and retries with backoff
against targets that time out, refuse or answer 500."""

from __future__ import annotations

import socket
import threading
import time
from datetime import datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import polars as pl
import pytest
from prometheus_client.parser import text_string_to_metric_families
from typer.testing import CliRunner

from gpuledger import warehouse
from gpuledger.analytics.energy import energy_per_interval_j
from gpuledger.ingest.metrics.exposition import long_to_wide, parse_exposition
from gpuledger.ingest.metrics.scrape import fetch_target, ingest_page, scrape
from gpuledger.cli.ingest.metrics import app
from gpuledger.simulator import build_cluster, fixed_clock, metrics_page, start_exporters

CORPUS = Path(__file__).resolve().parents[1] / "fixtures" / "exposition" / "bad_corpus.prom"
SCRAPE_MS = 1796040000000  # 2026-11-30T12:00:00Z
SCRAPE_TS = datetime(2026, 11, 30, 12)
URL = "http://node-001:9400/metrics"

# Every bad line of the corpus (by what it contains) and the reason it must be refused for.
BAD_LINES = {
    'UUID="GPU-eeeeeeee-0000-0000-00': "truncated line: label set never closed",
    "GPU-ffffffff": "truncated line: expected 'value [timestamp]'",
    'gpu="5,UUID=': "unbalanced quote",
    "DCGM_FI_PROF_DRAM_ACTIVE": "non-finite value nan",
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": "non-finite value inf",
    "DCGM_FI_DEV_GPU_TEMP": "non-finite value -inf",
    "} -0.2": "below the plausible range of sm_active",
    "} 250": "above the plausible range of gpu_util",
    "GPU-77777777": "above the plausible range of power",
    "GPU-10101010": "is 10240 characters",
    'hpc_job="2002"} 13': "duplicate series in one scrape",
    "GPU-20202020": "48.0 h after the scrape time",
    "} lots": "is not a number",
    'gpu="6"': "series names no device",
}


@pytest.fixture
def corpus_warehouse(warehouse_file):
    with warehouse.open_writer(warehouse_file) as con:
        stats = ingest_page(con, CORPUS.read_text(), location=URL, scrape_ms=SCRAPE_MS, cluster="c1")
    return warehouse_file, stats


def test_every_bad_line_is_quarantined_with_its_reason(corpus_warehouse):
    path, stats = corpus_warehouse
    with warehouse.open_reader(path) as con:
        rows = con.execute("SELECT location, raw_text, reason FROM quarantine WHERE source = 'scrape'").fetchall()
    assert len(rows) == len(BAD_LINES) == stats.quarantined
    lines = CORPUS.read_text().split("\n")
    for needle, reason in BAD_LINES.items():
        hits = [r for r in rows if needle in r[1]]
        assert len(hits) == 1, f"{needle!r}: {len(hits)} quarantine rows"
        location, raw, why = hits[0]
        assert reason in why, f"{needle!r}: reason {why!r}"
        line_no = int(location.rsplit(":", 1)[1])
        assert location.startswith(URL + ":") and lines[line_no - 1] == raw


def test_good_lines_of_the_same_page_land(corpus_warehouse):
    path, stats = corpus_warehouse
    with warehouse.open_reader(path) as con:
        samples = con.sql("SELECT g.gpu_uuid, g.mig_instance_id, g.host, g.model, g.gpu_fraction, s.* "
                          "FROM gpu_samples s JOIN gpus g USING (gpu_id) ORDER BY gpu_uuid, mig_instance_id").pl()
    assert samples.height == 5 == stats.samples_new
    assert set(samples["ts"]) == {SCRAPE_TS}
    assert set(samples["source"]) == {"scrape"}
    by = {(r["gpu_uuid"][4:12], r["mig_instance_id"]): r for r in samples.to_dicts()}
    gpu0 = by[("aaaaaaaa", -1)]  # two hpc_job copies -> one row, smallest job id
    assert gpu0["hpc_job"] == "1001" and gpu0["gpu_util_ratio"] == pytest.approx(0.87)
    assert gpu0["power_w"] == 612.5 and gpu0["energy_total_j"] == pytest.approx(123456.789)
    assert gpu0["fb_used_bytes"] == 40960 * 2**20 and gpu0["fb_total_bytes"] == 81920 * 2**20
    assert gpu0["dram_active_ratio"] is None  # its NaN line was refused
    gpu1 = by[("bbbbbbbb", -1)]  # 4.9+ field names and units, hostname FQDN, pod_name spellings
    assert gpu1["host"] == "node-001" and gpu1["model"] == "B200"
    assert gpu1["gpu_util_ratio"] == 0.5 and gpu1["fb_used_bytes"] == 2**30
    assert gpu1["energy_total_j"] == 5000.5
    assert gpu1["power_w"] is None  # DCGM blank -> NULL, not quarantined
    assert (gpu1["namespace"], gpu1["pod"], gpu1["container"]) == ("team-a", "trainer-0", "main")
    sql = by[("dddddddd", -1)]  # quotes and SQL metacharacters land verbatim as data
    assert sql["namespace"] == "x'; DROP TABLE gpu_samples; --"
    assert sql["pod"] == 'say "hi" \\ {}' and sql["container"] == "c,1=2"


def test_mig_device_level_values_counted_once(corpus_warehouse):
    path, _ = corpus_warehouse
    with warehouse.open_reader(path) as con:
        rows = con.execute(
            "SELECT g.mig_instance_id, g.mig_profile, g.gpu_fraction, s.power_w, s.gr_engine_active_ratio,"
            " s.namespace, s.pod FROM gpu_samples s JOIN gpus g USING (gpu_id)"
            " WHERE g.gpu_uuid LIKE 'GPU-cccccccc%' ORDER BY 1").fetchall()
    # the lowest GPU_I_ID holds the physical GPU's power; the other instance reads NULL
    assert rows[0][:5] == (1, "4g.40gb", pytest.approx(4 / 7), 300.0, 0.1)
    assert rows[1][:5] == (2, "3g.40gb", pytest.approx(3 / 7), None, 0.4)
    # exported_* (the workload's labels) win over the plain ones Prometheus gave the exporter pod
    assert rows[1][5:] == ("infer", "llm-0")


def test_reingesting_the_same_scrape_changes_no_row_counts(corpus_warehouse):
    path, _ = corpus_warehouse
    with warehouse.open_writer(path) as con:
        before = warehouse.table_counts(con)
        stats = ingest_page(con, CORPUS.read_text(), location=URL, scrape_ms=SCRAPE_MS, cluster="c1")
        assert warehouse.table_counts(con) == before
    assert stats.samples_new == 0


def test_unknown_dcgm_fields_are_counted_and_others_skipped():
    parsed = parse_exposition(CORPUS.read_text(), scrape_ms=SCRAPE_MS)
    assert dict(parsed.unknown_dcgm) == {"DCGM_FI_DEV_XID_ERRORS": 1, "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": 1}
    assert parsed.skipped_other == 2  # go_goroutines, process_cpu_seconds_total


def test_prometheus_client_parser_gives_up_on_the_corpus():
    with pytest.raises(ValueError):
        list(text_string_to_metric_families(CORPUS.read_text()))


@pytest.fixture(scope="module")
def sim():
    return build_cluster(seed=3, gpus=32, start=datetime(2026, 11, 1), days=1)


def test_parser_agrees_with_prometheus_client_on_a_real_page(sim):
    t = sim.start_s + 3 * 3600
    for node in range(4):  # includes the MIG node and the time-sliced one
        page = metrics_page(sim, node, t)
        ours = parse_exposition(page, scrape_ms=t * 1000).samples
        # prometheus_client names a counter's samples NAME_total; the exporter's line says NAME
        theirs = [(fam.name, s.labels["UUID"], int(s.labels.get("GPU_I_ID", -1)), s.labels.get("hpc_job"),
                   float(s.value)) for fam in text_string_to_metric_families(page) for s in fam.samples]
        mine = list(zip(ours["metric"], ours["gpu_uuid"], ours["mig_instance_id"], ours["hpc_job"],
                        ours["value"], strict=True))
        assert len(mine) > 50
        assert sorted(mine, key=str) == sorted(theirs, key=str)


def test_late_and_out_of_order_samples_land_in_place(sim, warehouse_file):
    t = sim.start_s + 3600
    pages = {k: metrics_page(sim, 0, t + 30 * k, timestamps=True) for k in range(4)}
    with warehouse.open_writer(warehouse_file) as con:
        for k in (3, 1, 0, 2, 1):  # out of order, one late duplicate
            ingest_page(con, pages[k], location="u", scrape_ms=(t + 200) * 1000)
        rows = con.execute("SELECT count(DISTINCT ts), count(*), count(DISTINCT gpu_id) FROM gpu_samples").fetchone()
        seen = con.execute("SELECT min(first_seen), max(last_seen) FROM gpus").fetchone()
    assert rows[0] == 4 and rows[1] == 4 * rows[2]
    assert seen == (datetime(1970, 1, 1) + timedelta(seconds=t),
                    datetime(1970, 1, 1) + timedelta(seconds=t + 90))


def test_energy_per_interval_handles_resets():
    t0 = datetime(2026, 11, 1)
    frame = pl.DataFrame({
        "gpu_id": [1] * 6 + [2] * 2,
        "ts": [t0 + timedelta(seconds=30 * i) for i in range(6)] + [t0, t0 + timedelta(seconds=30)],
        "energy_total_j": [100.0, 130.0, None, 190.0, 5.0, 20.0, 7.0, 9.0],
    })
    out = energy_per_interval_j(frame.lazy().reverse()).collect()
    assert out["energy_interval_j"].to_list() == [None, 30.0, None, 60.0, 5.0, 15.0, None, 2.0]


def test_energy_per_interval_on_ingested_mig_rows_counts_each_gpu_once(sim, warehouse_file):
    t = sim.start_s + 7200
    mig_node = sim.hardware.node_role.index("mig")
    with warehouse.open_writer(warehouse_file) as con:
        for k in range(3):
            ingest_page(con, metrics_page(sim, mig_node, t + 30 * k, timestamps=True), location="u",
                        scrape_ms=(t + 100) * 1000)
        samples = con.sql("SELECT s.gpu_id, s.ts, s.energy_total_j, g.gpu_uuid FROM gpu_samples s "
                          "JOIN gpus g USING (gpu_id)").pl()
    per = energy_per_interval_j(samples.lazy()).collect()
    physical = per.filter(pl.col("energy_total_j").is_not_null())
    assert physical["gpu_uuid"].n_unique() == physical["gpu_id"].n_unique() == 8  # one row per GPU
    assert per["gpu_id"].n_unique() > 8  # while the node has more MIG instances than GPUs
    assert (per["energy_interval_j"].drop_nulls() >= 0).all()


# --- fetching: retries, backoff, failures reported while good targets land ----------------------
class _StandIn:
    """A tiny HTTP server answering /metrics by ``mode``: 'slow' (sleeps past the client timeout)
    or 'error' (HTTP 500). Counts requests."""

    def __init__(self, mode: str):
        self.hits = 0
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802
                outer.hits += 1
                if mode == "slow":
                    time.sleep(1.0)
                    try:
                        self.send_response(200)
                        self.end_headers()
                    except OSError:
                        pass
                    return
                self.send_error(500, "exporter broke")

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/metrics"

    def stop(self):
        self.server.shutdown()
        self.server.server_close()


def _refusing_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/metrics"


def test_backoff_doubles_between_attempts():
    waits = []
    result = fetch_target(_refusing_url(), retries=3, backoff_s=0.5, timeout_s=0.5, sleep=waits.append)
    assert not result.ok and result.attempts == 4 and "connection refused" in result.error
    assert waits == [0.5, 1.0, 2.0]


@pytest.mark.slow
def test_failing_targets_are_retried_and_reported_while_good_ones_land(sim, warehouse_file):
    slow, broken = _StandIn("slow"), _StandIn("error")
    refused = _refusing_url()
    try:
        with start_exporters(sim, port=0, clock=fixed_clock(sim.start_s + 600), nodes=[0, 1]) as good:
            urls = [slow.url, refused, broken.url, *good.urls]
            result = CliRunner().invoke(app, ["scrape", *urls, "--count", "1", "--timeout", "0.3",
                                              "--retries", "2", "--backoff", "0.05",
                                              "--warehouse", str(warehouse_file)])
    finally:
        slow.stop()
        broken.stop()
    assert result.exit_code == 1, result.output  # the good pages land, but failed targets are no success
    assert slow.hits == 3 and broken.hits == 3  # 1 try + 2 retries each
    for text in ("timed out after 0.3 s", "connection refused", "HTTP 500"):
        assert text in result.output
    with warehouse.open_reader(warehouse_file) as con:
        failures = dict(con.execute("SELECT location, reason FROM quarantine WHERE source = 'scrape'").fetchall())
        hosts = {r[0] for r in con.execute("SELECT DISTINCT host FROM gpus").fetchall()}
        samples = con.execute("SELECT count(*) FROM gpu_samples").fetchone()[0]
    assert set(failures) == {slow.url, refused, broken.url}
    assert all("gave up after 3 attempts" in why for why in failures.values())
    n_devices = sim.hardware.devices.filter(pl.col("node").is_in([0, 1])).height
    assert hosts == {"node-000", "node-001"} and samples == n_devices


def test_scrape_rounds_against_live_exporters_are_idempotent(sim, warehouse_file):
    # explicit exposition timestamps: two rounds of the same page are the same samples
    with start_exporters(sim, port=0, clock=fixed_clock(sim.start_s + 900), nodes=[2, 3],
                         timestamps=True) as live:
        stats = scrape(live.urls, warehouse_path=warehouse_file, count=2, interval_s=0.0)
    n_devices = sim.hardware.devices.filter(pl.col("node").is_in([2, 3])).height
    assert stats.pages == 4 and stats.failed_targets == 0
    assert stats.samples_new == n_devices and stats.quarantined == 0
    with warehouse.open_reader(warehouse_file) as con:  # published after the last round
        assert con.execute("SELECT count(*) FROM gpu_samples").fetchone()[0] == n_devices


def test_long_to_wide_of_empty_page_is_empty():
    assert long_to_wide(parse_exposition("# nothing\n", scrape_ms=0).samples).is_empty()
