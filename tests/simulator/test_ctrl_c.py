"""Ctrl-C during `simulate warehouse` (DuckDB turns SIGINT into "Query interrupted", click into
Abort) ends with exit 130, no traceback, no "internal error" and no half-drawn progress bar."""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest


@pytest.mark.slow
def test_ctrl_c_during_simulate_is_exit_130_with_no_bar_left(tmp_path):
    proc = subprocess.Popen([sys.executable, "-m", "gpuledger.cli", "simulate", "warehouse", "--gpus", "256",
                             "--days", "2", "-w", str(tmp_path / "w.duckdb")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path,
                            env={"COLUMNS": "80", "PATH": "/usr/bin:/bin"})
    try:
        assert "the warehouse had no config" in proc.stderr.readline()  # at work: config stored, cluster next
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=60)
    finally:
        proc.kill()
        proc.wait()
    rest = proc.stderr.read()
    assert proc.returncode in (130, -signal.SIGINT), rest  # -2: killed inside DuckDB's own handler
    assert "Traceback" not in rest and "internal error" not in rest and "━" not in rest, rest
