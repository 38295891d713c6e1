"""`ingest kubernetes` against an API server that accepts and never answers, one that is gone, and
a kubeconfig that is not YAML: one line naming the server or the file, exit 1 (2 for the file), no
urllib3 retry warnings, nothing written. The official client speaks real HTTP to loopback sockets."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time

import pytest

from tests.helpers.hostile_servers import SILENT, HostileServer


def _kubeconfig(path, server: str):
    path.write_text(
        "apiVersion: v1\nkind: Config\n"
        f"clusters:\n- name: c\n  cluster:\n    server: {server}\n"
        "users:\n- name: u\n  user: {}\n"
        "contexts:\n- name: c\n  context:\n    cluster: c\n    user: u\n"
        "current-context: c\n")
    return path


def _ingest(kubeconfig, warehouse_file, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "gpuledger.cli", "ingest", "kubernetes", "--kubeconfig", str(kubeconfig),
         "--read-timeout", "0.5", "--connect-timeout", "0.5", "-w", str(warehouse_file), *extra],
        capture_output=True, text=True, timeout=60, check=False, env={"COLUMNS": "200", "PATH": "/usr/bin:/bin"})


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed again when this returns: nobody listens there


@pytest.mark.parametrize("server,says", [("silent", "no answer within 0.5 s"), ("gone", "connection refused")])
def test_an_api_server_that_never_answers_or_is_gone_ends_in_one_line(tmp_path, server, says):
    hostile = HostileServer(SILENT)
    url = hostile.url if server == "silent" else f"http://127.0.0.1:{_closed_port()}"
    try:
        ran = _ingest(_kubeconfig(tmp_path / "kubeconfig", url), tmp_path / "w.duckdb")
    finally:
        hostile.stop()
    assert ran.returncode == 1, ran.stderr
    lines = ran.stderr.strip().splitlines()
    assert lines == [(f"gpuledger ingest kubernetes: cannot reach {url}: {says}; nothing was written by this "
                      "request (check the server, or raise --read-timeout / --connect-timeout)")], ran.stderr
    assert "Retrying" not in ran.stderr and "MaxRetryError" not in ran.stderr
    assert not (tmp_path / "w.duckdb").exists() or _jobs(tmp_path / "w.duckdb") == 0


def _jobs(warehouse_file) -> int:
    import duckdb

    with duckdb.connect(str(warehouse_file), read_only=True) as con:
        return con.execute("SELECT count(*) FROM jobs").fetchone()[0]


def test_a_kubeconfig_that_is_not_yaml_is_one_line_with_its_line_and_column(tmp_path):
    broken = tmp_path / "kubeconfig"
    broken.write_text("apiVersion: v1\nclusters: [\n  - name: c\n    cluster: {server: x\n")
    ran = _ingest(broken, tmp_path / "w.duckdb")
    assert ran.returncode == 2, ran.stderr
    lines = ran.stderr.strip().splitlines()
    assert len(lines) == 1 and f"{broken}:" in lines[0] and "not valid YAML" in lines[0], ran.stderr


def test_timeouts_out_of_range_are_usage_errors(tmp_path):
    ran = _ingest(_kubeconfig(tmp_path / "kubeconfig", "http://127.0.0.1:9"), tmp_path / "w.duckdb",
                  "--read-timeout", "inf")
    assert ran.returncode == 2 and "--read-timeout" in ran.stderr, ran.stderr


@pytest.mark.parametrize("signum,code", [(signal.SIGINT, 130), (signal.SIGTERM, 0)])
def test_a_watch_stops_on_a_signal_within_a_second_inside_a_silent_stream(tmp_path, signum, code):
    """The watch request waits up to --watch-timeout (300 s) for an event that never comes: only the
    signal can end it, between writes. The first list is written before the signal is sent."""
    from tests.helpers.k8s_standin import KubeStandIn

    standin = KubeStandIn().start()
    warehouse_file = tmp_path / "w.duckdb"
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "gpuledger.cli", "ingest", "kubernetes", "--watch", "--kubeconfig",
             str(standin.write_kubeconfig(tmp_path / "kubeconfig")), "--cluster", "c", "-w", str(warehouse_file)],
            stderr=subprocess.PIPE, text=True, env={"COLUMNS": "200", "PATH": "/usr/bin:/bin"})
        try:
            assert "0 pods and 0 workloads listed" in proc.stderr.readline()  # the first sync is written
            while True:  # the watch request is open: the command now blocks in its read
                _, query = standin.requests.get(timeout=30)
                if query.get("watch") == "true":
                    break
            began = time.monotonic()
            proc.send_signal(signum)
            proc.wait(timeout=10)
            took = time.monotonic() - began
        finally:
            proc.kill()
            proc.wait()
    finally:
        standin.close()
    rest = proc.stderr.read()
    assert proc.returncode == code, rest
    # the stop itself is immediate; the bound is loose for interpreter exit on a loaded machine
    # (without the signal handling the read would wait out the 300 s watch)
    assert took < 5, took
    assert "Traceback" not in rest and f"stopped ({signum.name})" in rest, rest
    import duckdb

    with duckdb.connect(str(warehouse_file), read_only=True) as con:  # the warehouse is whole
        assert con.execute("SELECT count(*) FROM jobs").fetchone() == (0,)
