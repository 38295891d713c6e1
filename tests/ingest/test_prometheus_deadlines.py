"""The Prometheus client never hangs: a server that accepts and never answers, one that stalls in
the middle of a body, one that trickles a byte every 50 ms (never tripping a read timeout) all end
the call within its deadline with one line naming the endpoint; the backfill then exits 1 with the
chunks before it stored and the rest not checkpointed. Real loopback sockets (tests/helpers/
hostile_servers.py), the real CLI as a subprocess."""

from __future__ import annotations

import subprocess
import sys
import time
from datetime import datetime
from urllib.parse import parse_qs, urlsplit

import duckdb
import orjson
import pytest
import requests

from gpuledger.deadlines import CallDeadline
from gpuledger.ingest.metrics.prometheus.client import PrometheusError, get_body
from gpuledger.ingest.metrics.prometheus.decode import points_from_results
from tests.helpers.hostile_servers import (
    SERIES,
    SILENT,
    STALL,
    T0,
    TRICKLE,
    HostileServer,
    http_answer,
    matrix,
    prometheus_until,
)
from tests.helpers.timing import LOAD_SLACK_S

# real servers and receivers held to wall-clock deadlines (seconds each): the full suite, not test-fast
pytestmark = pytest.mark.slow

QUICK = CallDeadline(connect_s=1.0, read_s=0.4, total_s=1.2)


@pytest.mark.parametrize("misbehaviour,says", [
    (SILENT, "no answer within 0.4 s"),
    (STALL, "stalled after 28 bytes of body"),
    (TRICKLE, "still arriving when the 1.2 s deadline passed"),
])
def test_a_call_that_never_completes_ends_within_its_deadline(misbehaviour, says):
    with HostileServer(misbehaviour) as server:
        began = time.monotonic()
        with pytest.raises(PrometheusError) as raised:
            get_body(requests.Session(), f"{server.url}/api/v1/query_range", {"query": "up"},
                      deadline=QUICK, retries=3, backoff_s=0.1)
        took = time.monotonic() - began
    message = str(raised.value)
    assert message.startswith(f"{server.url}/api/v1/query_range: "), message
    assert says in message and "deadline 1.2 s)" in message, message
    assert "\n" not in message
    # every attempt and backoff wait fit inside total_s (1.2 s); without a deadline this never returns
    assert took < QUICK.total_s + LOAD_SLACK_S, took
    if misbehaviour == SILENT:  # 0.4 s, wait 0.1, 0.4 s, wait 0.2 -> the 3rd attempt is cut at 1.2 s
        assert 2 <= len(server.requests) <= 3, server.requests


def test_a_good_answer_read_piece_by_piece_is_whole():
    body = matrix(T0, T0 + 30 * 50_000)  # ~1.5 MB: more than one piece
    with HostileServer(lambda _l, _r: http_answer(body)) as server:
        status, content = get_body(requests.Session(), f"{server.url}/api/v1/query_range", {},
                                    deadline=QUICK, retries=0, backoff_s=0)
    assert (status, content) == (200, body)


def _backfill(url: str, warehouse_file, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "gpuledger.cli", "ingest", "prometheus", "--url", url,
         "--start", str(T0), "--end", str(T0 + 120), "--step", "30s", "--chunk", "60s",
         "--workers", "1", "--progress", "none", "--read-timeout", "0.4", "--deadline", "1.2",
         "-w", str(warehouse_file), *extra],
        capture_output=True, text=True, timeout=60, check=False, env={"COLUMNS": "200", "PATH": "/usr/bin:/bin"})


def _counts(warehouse_file) -> tuple:
    with duckdb.connect(str(warehouse_file), read_only=True) as con:
        return (con.execute("SELECT count(*) FROM gpu_samples").fetchone()[0],
                con.execute("SELECT list(position) FROM ingest_checkpoints").fetchone()[0])


@pytest.mark.slow
def test_backfill_stalled_mid_body_keeps_the_chunks_before_and_leaves_the_rest_undone(tmp_path):
    warehouse_file = tmp_path / "w.duckdb"
    with HostileServer(prometheus_until(STALL, from_s=T0 + 60)) as server:
        ran = _backfill(server.url, warehouse_file)
    assert ran.returncode == 1, ran.stderr
    lines = ran.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in ran.stderr, ran.stderr
    assert f"{server.url}/api/v1/query_range: the answer stalled" in lines[0], lines[0]
    assert "nothing from 2025-12-01T00:01:00Z on was stored" in lines[0], lines[0]
    assert "rerun the same command to continue" in lines[0], lines[0]
    # the first chunk [T0, T0+60): 2 grid points of one GPU; its checkpoint, nothing after
    assert _counts(warehouse_file) == (2, ["2025-12-01T00:01:00Z"])


@pytest.mark.slow
@pytest.mark.parametrize("given,says", [([], "no answer within 0.3 s"),  # the config's read_timeout_s
                                         (["--read-timeout", "0.4"], "no answer within 0.4 s")])  # the option's
def test_the_config_gives_the_servers_timeouts_and_an_option_overrides_them(tmp_path, given, says):
    with HostileServer(SILENT) as server:
        config = tmp_path / "gpuledger.yaml"
        config.write_text("currency: USD\norg: {name: acme}\nsources:\n  prometheus:\n"
                          f"    url: {server.url}\n    read_timeout_s: 0.3\n    deadline_s: 1\n")
        ran = subprocess.run(
            [sys.executable, "-m", "gpuledger.cli", "ingest", "prometheus", "--url", server.url, "--start", str(T0),
             "--end", str(T0 + 120), "--workers", "1", "--progress", "none", "-c", str(config),
             "-w", str(tmp_path / "w.duckdb"), *given],
            capture_output=True, text=True, timeout=60, check=False, env={"COLUMNS": "200", "PATH": "/usr/bin:/bin"})
    assert ran.returncode == 1, ran.stderr
    assert f"{server.url}/api/v1/label/__name__/values: {says}" in ran.stderr, ran.stderr


# --- what a server answers beyond one clean series per GPU ------------------------------------------
COPY_A = {**SERIES, "instance": "a:9400", "job": "dcgm"}
COPY_B = {**SERIES, "instance": "b:9400", "job": "dcgm"}  # the same exporter scraped by a second job


def test_copies_of_a_series_are_kept_once_and_conflicting_points_not_at_all():
    # copy A: T0=50, T0+30=60; copy B: T0=50 (agrees), T0+30=70 (conflicts), T0+60=80 (its own)
    results = {"DCGM_FI_DEV_GPU_UTIL": [
        {"metric": COPY_A, "values": [[T0, "50"], [T0 + 30, "60"]]},
        {"metric": COPY_B, "values": [[T0, "50"], [T0 + 30, "70"], [T0 + 60, "80"]]}]}
    points, _, rejects = points_from_results(results, url="http://p")
    # T0: stored once (50); T0+30: two values, neither stored; T0+60: only B has it
    assert sorted(zip(points["ts"].dt.epoch("s").to_list(), points["value"].to_list())) == [
        (T0, 50.0), (T0 + 60, 80.0)]
    assert len(rejects) == 1  # one row for the extra copy, naming what differs and what was refused
    assert "instance='b:9400' vs 'a:9400'" in rejects[0].reason
    assert "1 points equal to the first copy's (stored once), 1 with another value" in rejects[0].reason
    assert "first at 2025-12-01T00:00:30Z" in rejects[0].reason


def _answer_beyond(line: str, _raw: bytes):
    target = urlsplit(line.split(" ")[1])
    if target.path.endswith("/label/__name__/values"):
        return http_answer(orjson.dumps({"status": "success", "data": ["DCGM_FI_DEV_GPU_UTIL"]}))
    start = int(parse_qs(target.query)["start"][0])
    # the asked grid point and its copy, plus one point an hour before the asked range
    result = [{"metric": COPY_A, "values": [[start - 3600, "10"], [start, "50"]]},
              {"metric": COPY_B, "values": [[start, "50"]]}]
    return http_answer(orjson.dumps({"status": "success", "data": {"resultType": "matrix", "result": result}}))


@pytest.mark.slow
def test_backfill_quarantines_copies_and_points_outside_the_asked_range(tmp_path):
    warehouse_file = tmp_path / "w.duckdb"
    with HostileServer(_answer_beyond) as server:
        ran = _backfill(server.url, warehouse_file)
    assert ran.returncode == 0, ran.stderr
    # 2 chunks of 60 s, each asked for [start, start + 30]: its point once -> 2 samples; per chunk
    # 1 row for the copy and 1 for the point an hour early -> 4 quarantined
    assert "2 chunks ingested, 0 already done, 2 new samples, 4 quarantined" in ran.stderr, ran.stderr
    with duckdb.connect(str(warehouse_file), read_only=True) as con:
        assert con.execute("SELECT min(ts), max(ts) FROM gpu_samples").fetchone() == (
            datetime(2025, 12, 1, 0, 0), datetime(2025, 12, 1, 0, 1))
        reasons = sorted(r[0] for r in con.execute("SELECT reason FROM quarantine").fetchall())
    assert [r.split(":")[0] for r in reasons] == ["1 points outside the asked range [2025-12-01T00",
                                                  "1 points outside the asked range [2025-12-01T00",
                                                  "duplicate series", "duplicate series"], reasons
