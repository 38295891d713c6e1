"""`gpuledger warehouse shell`: SQL on the live warehouse that never stops its writers — an open
prompt holds no lock (a writer gets in at once), each statement reads through the reader lock,
writes are refused with one line and exit 1."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gpuledger import warehouse

GPULEDGER = Path(sys.executable).with_name("gpuledger")


def _shell(wh, *args, **kwargs):
    return subprocess.run([str(GPULEDGER), "warehouse", "shell", "-w", str(wh), *args], capture_output=True,
                          text=True, timeout=120, **kwargs)


@pytest.mark.slow
def test_command_mode_reads_and_refuses_writes(tmp_path):
    wh = tmp_path / "gpuledger.duckdb"
    with warehouse.open_writer(wh) as con:
        con.execute("CREATE TABLE notes (n INTEGER)")
        con.execute("INSERT INTO notes VALUES (1), (2), (3)")
    done = _shell(wh, "--command", "SELECT sum(n) AS total FROM notes; SELECT count(*) AS rows FROM notes")
    assert done.returncode == 0, done.stderr
    assert "total" in done.stdout and "6" in done.stdout and "rows" in done.stdout
    refused = _shell(wh, "--command", "DELETE FROM notes")
    assert refused.returncode == 1 and refused.stdout == ""
    assert refused.stderr.startswith("gpuledger warehouse shell:") and len(refused.stderr.strip().splitlines()) == 1
    with warehouse.open_reader(wh) as con:
        assert con.execute("SELECT count(*) FROM notes").fetchone()[0] == 3  # nothing lost


@pytest.mark.slow
def test_an_open_prompt_does_not_block_a_writer(tmp_path):
    wh = tmp_path / "gpuledger.duckdb"
    with warehouse.open_writer(wh) as con:
        con.execute("CREATE TABLE notes (n INTEGER)")
    shell = subprocess.Popen([str(GPULEDGER), "warehouse", "shell", "-w", str(wh)], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=os.environ.copy())
    try:
        shell.stdin.write("SELECT count(*) AS before FROM notes;\n")
        shell.stdin.flush()
        first = []
        while not any("before" in line for line in first):  # its first result printed: at the prompt
            line = shell.stdout.readline()
            assert line, shell.stderr.read()
            first.append(line)
        # a writer while the session stays open: it gets the file (a plain duckdb shell would
        # make it fail after ~31 s)
        started = time.monotonic()
        with warehouse.open_writer(wh) as con:
            con.execute("INSERT INTO notes VALUES (42)")
        waited = time.monotonic() - started
        shell.stdin.write("SELECT max(n) AS newest FROM notes;\n")
        out, err = shell.communicate(timeout=60)  # EOF quits
    finally:
        if shell.poll() is None:
            shell.kill()
    assert shell.returncode == 0, err
    assert waited < 10, f"the writer waited {waited:.1f} s for an idle shell"
    assert "newest" in out and "42" in out  # the next statement sees the write
