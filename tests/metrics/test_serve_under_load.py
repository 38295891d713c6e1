"""`metrics serve` as a fleet's Prometheus meets it (issue 36): many scrapes at once are answered
from ONE computation (a threaded server, one refresh in flight, a listen backlog that does not drop
connections); a warehouse removed under it answers 503 with the reason and logs it once, never a
500 and a traceback. Real HTTP on loopback; the 1,024-GPU load run is
benchmarks/exporter_load_bench.py (BENCHMARKS.md "The exporter under 200 concurrent scrapes")."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests

from gpuledger.metrics.exporter import CachedExposition, serve
from tests.helpers.prometheus_rig import free_port
from tests.helpers.statement_fixtures import october


def test_concurrent_scrapes_are_answered_from_one_computation(warehouse_file):
    october(warehouse_file)
    server, thread = serve(warehouse_file, port=free_port(), cache_s=3600)
    url = f"http://127.0.0.1:{server.server_address[1]}/metrics"
    try:
        with ThreadPoolExecutor(max_workers=64) as pool:
            answers = list(pool.map(lambda _: requests.get(url, timeout=120), range(64)))
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
    assert [a.status_code for a in answers] == [200] * 64
    assert len({a.content for a in answers}) == 1  # one page for all
    assert 'gpuledger_budget_remaining_gpu_seconds{node="beta"} 273600.0' in answers[0].text  # 76 h x 3600
    assert server.page.refreshes == 1  # 64 scrapes, one computation


def test_a_scrape_during_a_refresh_gets_the_previous_page_and_only_one_refresh_runs():
    started, release = threading.Event(), threading.Event()
    pages = iter([b"one\n", b"two\n"])

    def render():
        page = next(pages)
        if page == b"two\n":  # the second computation blocks until released
            started.set()
            release.wait(30)
        return page

    page = CachedExposition(render, cache_s=0)
    assert page.page() == (b"one\n", None)
    refresher = threading.Thread(target=page.page)
    refresher.start()
    assert started.wait(30)
    # the refresh is in flight: these get the previous page at once instead of queueing or computing
    assert [page.page() for _ in range(5)] == [(b"one\n", None)] * 5
    release.set()
    refresher.join(30)
    assert page.refreshes == 2


@pytest.mark.slow
def test_a_warehouse_removed_under_the_exporter_answers_503_with_the_reason_and_logs_it_once(warehouse_file):
    october(warehouse_file)
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "gpuledger.cli", "metrics", "serve", "--port", str(port),
                             "--cache-seconds", "0", "-w", str(warehouse_file)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, "COLUMNS": "200"})
    url = f"http://127.0.0.1:{port}/metrics"
    try:
        assert "serving gpuledger metrics" in proc.stderr.readline()
        assert requests.get(url, timeout=60).status_code == 200
        warehouse_file.unlink()
        answers = [requests.get(url, timeout=60) for _ in range(4)]
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    assert [a.status_code for a in answers] == [503] * 4
    assert f"no warehouse at {warehouse_file}" in answers[0].text
    lines = err.strip().splitlines()
    assert "Traceback" not in err and "500" not in err, err
    # the one line for the four failed refreshes, then the stop
    assert lines == [f"gpuledger metrics: /metrics answers 503: {answers[0].text.split(': ', 1)[1].strip()}",
                     "gpuledger metrics: stopped"], err
