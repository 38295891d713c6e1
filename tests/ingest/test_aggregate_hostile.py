"""Window aggregates (`ingest prometheus --aggregate`) from a TSDB whose answers hold what the raw
backfill quarantines (issue 36): a NaN window, a series without a UUID, a point outside the asked
range, one series listed twice, one UUID from two hosts. The real CLI against a real loopback HTTP
server answering the Prometheus API: exit 0, one line, the good device stored, and every bad record
a quarantine row (source prometheus) saying why — none dropped without a word, nothing stored past
the range the checkpoint covers."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from datetime import datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

import duckdb
import pytest

START = datetime(2026, 11, 2)
ENV = {"COLUMNS": "200", "PATH": "/usr/bin:/bin", "TZ": "UTC"}
MODEL = "NVIDIA H100 80GB HBM3"


def _series(gpu: str, uuid: str | None, host: str, values: list) -> dict:
    labels = {"gpu": gpu, "Hostname": host, "modelName": MODEL}
    if uuid:
        labels["UUID"] = uuid
    return {"metric": labels, "values": values}


def _answer(query: str, end: int) -> list[dict]:
    """The same devices for every family the aggregate asks (avg_over_time, count_over_time,
    timestamp): the window ending at ``end`` holds 10 samples, the newest 30 s before its end."""
    kind = "count" if query.startswith("count_over_time") else "newest" if query.startswith("timestamp") else "avg"
    value = {"count": "10", "newest": str(end - 30), "avg": "50"}[kind]
    good = [[end, value]]
    return [
        _series("0", "GPU-good", "n1", good),
        _series("1", "GPU-nan", "n1", [[end, "NaN" if kind == "avg" else value]]),
        _series("2", None, "n1", good),                                   # no UUID
        _series("3", "GPU-late", "n1", [[end + 30 * 86400, value]]),      # a month past the asked range
        _series("4", "GPU-dup", "n1", good), _series("4", "GPU-dup", "n1", good),  # listed twice
        _series("5", "GPU-two", "n1", good), _series("5", "GPU-two", "n2", good),  # one UUID, two hosts
    ]


class _Tsdb(BaseHTTPRequestHandler):
    def do_GET(self):
        parts = urlsplit(self.path)
        query = {k: v[0] for k, v in parse_qs(parts.query).items()}
        if parts.path == "/api/v1/label/__name__/values":
            body = {"status": "success", "data": ["DCGM_FI_DEV_GPU_UTIL"]}
        elif parts.path == "/api/v1/series":
            body = {"status": "success", "data": [{"__name__": "DCGM_FI_DEV_GPU_UTIL", "gpu": str(i)} for i in range(6)]}
        elif parts.path == "/api/v1/query_range":
            body = {"status": "success", "data": {"resultType": "matrix",
                                                  "result": _answer(query["query"], int(float(query["end"])))}}
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
def tsdb():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Tsdb)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


@pytest.mark.slow
def test_aggregates_quarantine_what_the_raw_backfill_does_and_nothing_past_the_range(tsdb, tmp_path):
    wh = tmp_path / "w.duckdb"
    # one 5-minute window: [START, START + 5 min), asked as the grid point START + 5 min
    ran = subprocess.run([sys.executable, "-m", "gpuledger.cli", "ingest", "prometheus", "--url", tsdb, "--start",
                          START.isoformat(), "--end", (START + timedelta(minutes=5)).isoformat(), "--aggregate", "5m",
                          "-w", str(wh)], capture_output=True, text=True, timeout=120, check=False, env=ENV,
                         cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr
    lines = ran.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in ran.stderr, ran.stderr
    with duckdb.connect(str(wh), read_only=True) as con:
        stored = con.execute("SELECT g.gpu_uuid, g.host, s.ts, s.gpu_util_ratio FROM gpu_samples s "
                             "JOIN gpus g USING (gpu_id) ORDER BY 1").fetchall()
        bad = con.execute("SELECT location, reason FROM quarantine WHERE source = 'prometheus'").fetchall()
    # stored, GPU util 50 % over the window: the good GPU, the listed-twice one once, the two-host
    # UUID on its first host (n1, by name). The NaN window has no reading of a stored family (its
    # count and newest time say how far it reaches, not what it read): no row
    assert stored == [("GPU-dup", "n1", START, 0.5), ("GPU-good", "n1", START, 0.5), ("GPU-two", "n1", START, 0.5)]
    reasons = " | ".join(r for _, r in bad)
    # three families asked (avg, count, newest): the no-UUID, late, duplicate and second-host
    # series are refused in each; the NaN only where it is NaN
    assert sum("series names no device: needs a UUID" in r for _, r in bad) == 3, reasons
    assert sum("outside the asked range" in r for _, r in bad) == 3, reasons
    assert sum("listed twice with identical labels" in r for _, r in bad) == 3, reasons
    assert sum("GPU GPU-two is reported by 2 hosts" in r for _, r in bad) == 1, reasons
    assert sum(r == "non-finite value" for _, r in bad) == 1, reasons
    assert len(bad) == 3 + 3 + 3 + 1 + 1
    assert f"{len(bad)} quarantined" in lines[0], lines[0]
