"""`ingest scrape` against exporters that misbehave (real loopback sockets): one that stalls mid-page
or trickles never holds a round past --timeout; an empty page and a mix of failed targets are exit 1;
a URL that is no http(s) URL is a usage error (exit 2) before anything is written; SIGINT / SIGTERM
stop a long run between rounds within a second (130 / 0) with every finished round stored."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import duckdb
import pytest

from gpuledger.ingest.metrics.scrape import fetch_target
from tests.helpers.hostile_servers import STALL, TRICKLE, HostileServer, http_answer
from tests.helpers.timing import LOAD_SLACK_S

PAGE = ('DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-1",Hostname="n1"} 50\n')
ENV = {"COLUMNS": "200", "PATH": "/usr/bin:/bin"}


def _exporter(page: str):
    return HostileServer(lambda _l, _r: http_answer(page, content_type="text/plain; version=0.0.4"))


@pytest.mark.parametrize("misbehaviour,says", [(STALL, "still arriving when the 0.5 s deadline passed (28 bytes"),
                                              (TRICKLE, "still arriving when the 0.5 s deadline passed")])
def test_a_page_that_never_completes_ends_within_the_timeout(misbehaviour, says):
    with HostileServer(misbehaviour) as server:
        began = time.monotonic()
        result = fetch_target(f"{server.url}/metrics", timeout_s=0.5, retries=1, backoff_s=0.05)
        took = time.monotonic() - began
    assert not result.ok and says in result.error and "gave up after 2 attempts" in result.error, result.error
    # two attempts of at most 0.5 s each and one wait (+ load slack); without the deadline a stalled page never ends
    assert took < 2 * 0.5 + 0.05 + LOAD_SLACK_S, took


def test_a_page_past_the_cap_is_a_failed_target_read_no_further(monkeypatch):
    # the cap (128 MiB) lowered to 64 KiB for the test: a 1 MiB page is refused, not retried, and
    # the reader stops within a piece of the cap instead of holding the answer
    from gpuledger.ingest.metrics import scrape

    monkeypatch.setattr(scrape, "MAX_PAGE_BYTES", 64 << 10)
    with _exporter(PAGE * ((1 << 20) // len(PAGE))) as server:
        result = fetch_target(f"{server.url}/metrics", timeout_s=5, retries=2, backoff_s=0.05)
    assert not result.ok and result.attempts == 1
    assert result.error == f"{server.url}/metrics: the answer is larger than 64 KiB (not retried)"


def _scrape(*args: str, cwd) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gpuledger.cli", "ingest", "scrape", *args],
                          capture_output=True, text=True, timeout=60, check=False, env=ENV, cwd=cwd)


def test_empty_pages_and_failed_targets_are_not_success(tmp_path):
    warehouse_file = tmp_path / "w.duckdb"
    with _exporter(PAGE) as good, _exporter("") as empty:
        ran = _scrape(f"{good.url}/metrics", f"{empty.url}/metrics", "--timeout", "2", "--retries", "0",
                      "-w", str(warehouse_file), cwd=tmp_path)
    assert ran.returncode == 1, ran.stderr
    assert "answered an empty page (no samples)" in ran.stderr and "1 pages, 1 new samples" in ran.stderr
    with duckdb.connect(str(warehouse_file), read_only=True) as con:
        assert con.execute("SELECT count(*) FROM gpu_samples").fetchone() == (1,)  # the good page landed
    # (URLs that are no http(s) URL: tests/cli/test_hostile_corpus.py)


@pytest.mark.parametrize("signum,code", [(signal.SIGINT, 130), (signal.SIGTERM, 0)])
def test_a_long_scrape_stops_on_a_signal_within_a_second(tmp_path, signum, code):
    warehouse_file = tmp_path / "w.duckdb"
    with _exporter(PAGE) as good:
        proc = subprocess.Popen([sys.executable, "-m", "gpuledger.cli", "ingest", "scrape", f"{good.url}/metrics",
                                 "--count", "1000", "--interval", "120", "-w", str(warehouse_file)],
                                stderr=subprocess.PIPE, text=True, env=ENV, cwd=tmp_path)
        try:
            assert "round 1/1000" in proc.stderr.readline()  # the first round is written
            began = time.monotonic()
            proc.send_signal(signum)
            proc.wait(timeout=LOAD_SLACK_S)
            took = time.monotonic() - began
        finally:
            proc.kill()
            proc.wait()
    rest = proc.stderr.read()
    assert proc.returncode == code, rest
    # the stop itself is immediate; interpreter exit on this shared 2-core machine took up to 1.6 s.
    # Without the stop event the run would sleep out its 120 s interval.
    assert took < LOAD_SLACK_S, took  # (at load 24 on this shared machine exits took seconds)
    assert "Traceback" not in rest and "stopped (" in rest, rest
    with duckdb.connect(str(warehouse_file), read_only=True) as con:
        assert con.execute("SELECT count(*) FROM gpu_samples").fetchone() == (1,)


def test_one_uuid_under_two_hosts_in_one_page_keeps_the_first_and_quarantines_the_other(tmp_path):
    # issue 36: the page's wide pivot kept n1's row and dropped n2's without a word
    page = ('DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-1",Hostname="n1"} 50\n'
            'DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-1",Hostname="n2"} 60\n')
    warehouse_file = tmp_path / "w.duckdb"
    with _exporter(page) as exporter:
        ran = _scrape(f"{exporter.url}/metrics", "--timeout", "5", "-w", str(warehouse_file), cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr
    assert "1 pages, 1 new samples, 1 lines quarantined" in ran.stderr
    with duckdb.connect(str(warehouse_file), read_only=True) as con:
        assert con.execute("SELECT g.host, s.gpu_util_ratio FROM gpu_samples s JOIN gpus g USING (gpu_id)"
                           ).fetchall() == [("n1", 0.5)]
        (reason,), = con.execute("SELECT reason FROM quarantine").fetchall()
    assert reason.startswith("GPU GPU-1 is reported by 2 hosts (n1, n2)") and "n2's 1 samples are refused" in reason
