"""Readers never block or fail while another process writes; writers from two processes queue."""

import subprocess
import sys
import time
from pathlib import Path

import pytest

from gpuledger import warehouse

HELPER = [sys.executable, "-m", "tests.helpers.sample_writer"]
ROOT = Path(__file__).resolve().parents[2]


def _start_writer(path, marker, batches, rows, gpu_id, hold=0):
    return subprocess.Popen([*HELPER, str(path), str(marker), str(batches), str(rows), str(gpu_id), str(hold)],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _wait_for(predicate, what, timeout_s=120):
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


@pytest.mark.slow
def test_reader_queries_while_writer_process_ingests(tmp_path, warehouse_file):
    marker = tmp_path / "first-batch-published"
    batches, rows = 12, 100_000
    # the writer waits for our first two reads (after its batches 1 and 2): on a loaded machine one
    # reader open could otherwise span the whole ingest and see only its end
    writer = _start_writer(warehouse_file, marker, batches, rows, 1, hold=2)
    _wait_for(lambda: marker.exists() or writer.poll() is not None, "the writer's first batch")
    seen = []
    while writer.poll() is None:
        with warehouse.open_reader(warehouse_file) as con:
            seen.append(con.execute("SELECT count(*) FROM gpu_samples").fetchone()[0])
        Path(f"{marker}.read{len(seen) - 1}").touch()
    out, err = writer.communicate()
    assert writer.returncode == 0, err
    # The reader ran during the ingest, saw only whole batches, and never went backwards.
    assert len(seen) >= 2
    assert all(n % rows == 0 for n in seen)
    assert seen == sorted(seen)
    with warehouse.open_reader(warehouse_file) as con:
        assert con.execute("SELECT count(*) FROM gpu_samples").fetchone()[0] == batches * rows


@pytest.mark.slow
def test_two_writer_processes_are_serialized_and_both_land(tmp_path, warehouse_file):
    batches, rows = 4, 50_000
    a = _start_writer(warehouse_file, tmp_path / "a", batches, rows, 1)
    b = _start_writer(warehouse_file, tmp_path / "b", batches, rows, 2)
    for proc in (a, b):
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err
    with warehouse.open_reader(warehouse_file) as con:
        per_gpu = dict(con.execute("SELECT gpu_id, count(*) FROM gpu_samples GROUP BY 1").fetchall())
    assert per_gpu == {1: batches * rows, 2: batches * rows}
