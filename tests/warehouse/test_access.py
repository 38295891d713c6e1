"""The reader/writer lock on the live file (warehouse/access.py): processes queue instead of
failing, readers see only committed writes, long writers let readers in, a waiting writer is not
starved by readers, and a file being created or damaged ends in one line naming it."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import duckdb
import pytest

from gpuledger import warehouse
from gpuledger.warehouse.access import WarehouseLocks
from tests.helpers.warehouse_actor import batch

ROOT = Path(__file__).resolve().parents[2]
ACTOR = [sys.executable, "-m", "tests.helpers.warehouse_actor"]


def _actor(*args, stdin=None):
    return subprocess.Popen([*ACTOR, *map(str, args)], cwd=ROOT, stdin=stdin, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _expect_line(proc, wanted: str) -> None:
    line = proc.stdout.readline().strip()
    assert line == wanted, (line, proc.stderr.read() if proc.poll() is not None else "")


def _migrated(path: Path) -> Path:
    with warehouse.open_writer(path):
        pass
    return path


def _count(path) -> int:
    with warehouse.open_reader(path) as con:
        return con.execute("SELECT count(*) FROM gpu_samples").fetchall()[0][0]


@pytest.mark.slow
def test_a_writer_and_a_reader_in_two_processes_queue_and_every_row_lands_once(warehouse_file):
    """Two Dagster runs, the scrape service and a CLI command are separate processes: here a
    writer process (several writer sessions) and a reader process on one file, neither failing."""
    _migrated(warehouse_file)
    batches, rows = 8, 20_000
    writer = _actor("sessions", warehouse_file, batches, rows, 7)
    reader = _actor("read-until", warehouse_file, batches * rows)
    _, w_err = writer.communicate(timeout=300)
    r_out, r_err = reader.communicate(timeout=300)
    assert writer.returncode == 0, w_err
    assert reader.returncode == 0, r_err
    assert "Could not set lock" not in w_err + r_err
    seen = [int(line.split()[1]) for line in r_out.split("\n") if line.startswith("seen")]
    assert all(n % rows == 0 for n in seen) and seen == sorted(seen)  # whole sessions, in order
    with warehouse.open_reader(warehouse_file) as con:
        total, distinct = con.execute("SELECT count(*), count(DISTINCT (gpu_id, ts)) FROM gpu_samples").fetchall()[0]
    assert total == distinct == batches * rows


@pytest.mark.slow
def test_a_long_writer_lets_waiting_readers_in_between_chunks(warehouse_file):
    """One writer session of many chunks: readers that queue get in between chunks and see the
    chunks committed so far (without yields they could only see 0 or everything)."""
    _migrated(warehouse_file)
    chunks, rows = 40, 20_000
    writer = _actor("long-write", warehouse_file, chunks, rows)
    _expect_line(writer, "chunk 0")
    seen = []
    while writer.poll() is None:
        seen.append(_count(warehouse_file))
    out, err = writer.communicate()
    assert writer.returncode == 0, err
    assert out.strip().endswith("done")
    inside = sorted({n for n in seen if 0 < n < chunks * rows})
    assert len(inside) >= 2, seen  # readers got turns during the one long session
    assert all(n % rows == 0 for n in seen)  # only whole chunks: never a partial write
    assert _count(warehouse_file) == chunks * rows


@pytest.mark.slow
def test_a_steady_stream_of_readers_does_not_starve_a_writer(warehouse_file):
    """Four reader threads keep the file shared all the time (their holds overlap); a writer that
    asks still gets it, because a waiting writer stops new readers at the gate."""
    _migrated(warehouse_file)
    stop = threading.Event()
    reads = [0] * 4
    errors = []

    def read_forever(i):
        try:
            while not stop.is_set():
                with warehouse.open_reader(warehouse_file) as con:
                    con.execute("SELECT count(*), sum(sm_active_ratio) FROM gpu_samples").fetchall()
                    time.sleep(0.02)  # holds overlap: some reader is always in without the gate
                reads[i] += 1
        except Exception as exc:  # noqa: BLE001 - reported by the test
            errors.append(exc)

    threads = [threading.Thread(target=read_forever, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    try:
        while min(reads) < 3:  # all four are reading
            assert not errors, errors
            time.sleep(0.01)
        writer = _actor("sessions", warehouse_file, 5, 1_000, 3)
        _, err = writer.communicate(timeout=120)
        assert writer.returncode == 0, err
        before = list(reads)
        while min(r - b for r, b in zip(reads, before, strict=True)) < 1:  # readers still get in
            assert not errors, errors
            time.sleep(0.01)
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=60)
    assert not errors, errors
    assert _count(warehouse_file) == 5_000


def test_writers_in_two_threads_of_one_process_queue(warehouse_file):
    _migrated(warehouse_file)
    errors = []

    def write(gpu_id):
        try:
            for i in range(3):
                with warehouse.open_writer(warehouse_file) as con:
                    warehouse.write_samples(con, batch(gpu_id, i * 1000, 1000), "t")
        except Exception as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(g,)) for g in (1, 2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors, errors
    assert _count(warehouse_file) == 6_000


def test_a_reader_inside_a_writer_of_the_same_file_is_refused_at_once(warehouse_file):
    with warehouse.open_writer(warehouse_file):
        with pytest.raises(warehouse.WarehouseError, match="use the writer's connection"):
            with warehouse.open_reader(warehouse_file):
                pass
    with warehouse.open_reader(warehouse_file):  # and the other way round
        with pytest.raises(warehouse.WarehouseError, match="close the reader first"):
            with warehouse.open_writer(warehouse_file):
                pass
    with warehouse.open_writer(warehouse_file):  # nothing is left marked
        pass


def test_yield_to_readers_refuses_to_split_a_transaction(warehouse_file):
    with warehouse.open_writer(warehouse_file) as con:
        with warehouse.transaction(con):
            with pytest.raises(RuntimeError, match="inside a transaction"):
                con.yield_to_readers(after_s=0.0)
    assert warehouse.yield_to_readers(duckdb.connect()) is False  # a bare connection: nothing to do


def test_a_reader_waits_for_a_short_writer_then_sees_its_commit(warehouse_file):
    _migrated(warehouse_file)
    holder = _actor("hold", warehouse_file, stdin=subprocess.PIPE)
    _expect_line(holder, "held")
    result = {}
    reader = threading.Thread(target=lambda: result.setdefault("n", _count(warehouse_file)))
    reader.start()
    # The reader is queued behind the writer (it holds .readers while it waits).
    deadline = time.monotonic() + 30
    while not WarehouseLocks(warehouse_file).readers_waiting():
        assert time.monotonic() < deadline, "the reader never queued"
        time.sleep(0.01)
    holder.stdin.write("go\n")
    holder.stdin.flush()
    assert holder.wait(timeout=60) == 0
    reader.join(timeout=60)
    assert result == {"n": 0}


def _wait_until_a_reader_queues(path) -> None:
    locks = WarehouseLocks(path)
    try:
        deadline = time.monotonic() + 60
        while not locks.readers_waiting():  # the reader holds .readers while it waits
            assert time.monotonic() < deadline, "the reader never queued"
            time.sleep(0.01)
    finally:
        locks.close()


def test_a_writer_yields_when_one_more_chunk_would_overrun_its_turn_budget(warehouse_file):
    """The turn budget counts from when the writer shut new readers out: a writer that has held the
    file less than ``after_s`` still lets a queued reader in when one more chunk would take the
    turn past ``budget_s``, and not when it would not. The reader sees the chunks committed so far;
    the writer gets the file back and goes on (a chunk per turn: it is never starved)."""
    from gpuledger.warehouse.db import writer_phases

    _migrated(warehouse_file)
    with warehouse.open_writer(warehouse_file) as con:
        warehouse.write_samples(con, batch(1, 0, 1000), "t")
        reader = _actor("read-until", warehouse_file, 0)  # one read, queued behind this writer
        _wait_until_a_reader_queues(warehouse_file)
        assert con.turn_left_s(budget_s=0.0) == 0.0 and con.turn_left_s(budget_s=1e9) > 0
        assert con.yield_to_readers(after_s=1e9, budget_s=1e9) is False  # neither limit reached
        assert reader.poll() is None  # still queued: it cannot get in while the writer holds the file
        # max_wait_s: let_in waits until the reader holds the file however slow the machine is
        assert con.yield_to_readers(after_s=1e9, budget_s=0.0, max_wait_s=60) is True
        out, err = reader.communicate(timeout=120)
        assert reader.returncode == 0, err
        assert out.split() == ["seen", "1000"]  # the chunk committed before the yield, nothing later
        warehouse.write_samples(con, batch(1, 1000, 1000), "t")  # the writer has the file back
    assert _count(warehouse_file) == 2000
    # The phases of that yield and of the end, in order, each within its own start and end.
    tail = writer_phases()[-8:]
    assert [name for name, _, _ in tail] == ["work", "close", "let_in", "gate", "drain", "open", "work", "close"]
    assert all(a <= b for _, a, b in tail) and all(x[2] <= y[1] for x, y in itertools.pairwise(tail))


def test_a_process_told_to_trace_writes_its_writer_phases_when_it_exits(warehouse_file, tmp_path):
    """$GPULEDGER_LOCK_TRACE: a writer process (as a CLI command a benchmark runs) leaves its
    phases as JSON: per writer session gate, drain, open, work, close, in that order."""
    import json

    _migrated(warehouse_file)
    trace = tmp_path / "phases.json"
    writer = subprocess.run([*ACTOR, "sessions", str(warehouse_file), "2", "10", "1"], cwd=ROOT, check=False,
                            capture_output=True, text=True, timeout=120,
                            env={**os.environ, "GPULEDGER_LOCK_TRACE": str(trace)})
    assert writer.returncode == 0, writer.stderr
    names = [name for name, _, _ in json.loads(trace.read_text())]
    assert names == ["gate", "drain", "open", "work", "close"] * 2


def test_a_reader_behind_a_writer_is_told_its_wait_was_at_the_gate(warehouse_file):
    """last_reader_wait_span splits a reader's wait: behind writers (at the gate) and then for the
    file itself (0 but against a writer that ignores the gate); together the whole wait."""
    from gpuledger.warehouse.db import last_reader_wait_s, last_reader_wait_span

    _migrated(warehouse_file)
    holder = _actor("hold", warehouse_file, stdin=subprocess.PIPE)
    _expect_line(holder, "held")
    result = {}

    def read():
        _count(warehouse_file)
        result.update(span=last_reader_wait_span(), wait=last_reader_wait_s(), done=time.monotonic())

    reader = threading.Thread(target=read)
    asked_before = time.monotonic()
    reader.start()
    _wait_until_a_reader_queues(warehouse_file)
    holder.stdin.write("go\n")
    holder.stdin.flush()
    assert holder.wait(timeout=60) == 0
    reader.join(timeout=60)
    asked, at_gate, for_file = result["span"]
    assert asked_before <= asked <= result["done"]
    assert at_gate > 0  # it queued at the gate until the holder let go
    assert at_gate + for_file == pytest.approx(result["wait"])


# --- the warehouse error cases of issue 7 -----------------------------------------------------------

def _cli(*args, env=None):
    return subprocess.run([sys.executable, "-m", "gpuledger.cli", *map(str, args)], cwd=ROOT,
                          capture_output=True, text=True, timeout=120, env={**os.environ, **(env or {})})


def _one_line_no_traceback(result):
    assert "Traceback" not in result.stderr + result.stdout, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    return lines[0]


@pytest.mark.slow
def test_a_reader_of_a_warehouse_whose_first_write_is_running_says_so(warehouse_file):
    holder = _actor("hold", warehouse_file, stdin=subprocess.PIPE)
    try:
        _expect_line(holder, "held")
        with pytest.raises(warehouse.WarehouseBusyError,
                           match=rf"being created by PID {holder.pid}; try again in a moment"):
            with warehouse.open_reader(warehouse_file, creating_wait_s=0.2):
                pass
        summary = _cli("warehouse", "summary", "--warehouse", warehouse_file)
        assert summary.returncode == 1
        line = _one_line_no_traceback(summary)
        assert str(warehouse_file) in line and f"PID {holder.pid}" in line
    finally:
        holder.stdin.write("go\n")
        holder.stdin.flush()
        holder.wait(timeout=60)
    assert _count(warehouse_file) == 0  # once created, it reads


def _small_warehouse(path: Path) -> Path:
    with warehouse.open_writer(path) as con:
        warehouse.write_samples(con, batch(1, 0, 50_000), "t")
    return path


def test_a_ragged_tail_past_the_counted_blocks_is_a_stopped_write_not_damage(warehouse_file):
    # A checkpoint that found the disk full leaves part of a block past the ones the live header
    # counts (tests/warehouse/test_full_disk.py makes it for real); DuckDB treats those as free.
    _small_warehouse(warehouse_file)
    before = _count(warehouse_file)
    with open(warehouse_file, "ab") as fh:
        fh.write(b"\0" * 1000)  # not a whole 256 KiB block
    assert _count(warehouse_file) == before  # reads (not "damaged"), all rows there
    with warehouse.open_writer(warehouse_file) as con:  # and takes writes
        warehouse.write_samples(con, batch(2, 0, 10), "t")
    assert _count(warehouse_file) == before + 10


@pytest.mark.parametrize("damage", ["truncated", "overwritten header", "empty"])
def test_a_damaged_warehouse_ends_in_one_line_and_no_older_copy_is_served(warehouse_file, damage):
    _small_warehouse(warehouse_file)
    # A whole-file copy as older gpuledger published it: must not hide the damage.
    warehouse.snapshot_path(warehouse_file).write_bytes(warehouse_file.read_bytes())
    size = warehouse_file.stat().st_size
    with open(warehouse_file, "r+b") as fh:
        if damage == "truncated":
            fh.truncate(size // 3)
        elif damage == "overwritten header":
            fh.write(os.urandom(8192))
        else:
            fh.truncate(0)
    damaged = warehouse_file.read_bytes()
    with pytest.raises(warehouse.WarehouseCorruptError, match="restore it from a backup") as err:
        with warehouse.open_reader(warehouse_file) as con:
            con.execute("SELECT sum(sm_active_ratio) FROM gpu_samples").fetchall()
    assert str(warehouse_file) in str(err.value) and "\n" not in str(err.value)
    # A writer refuses it too, and leaves it as it is (no silent re-creation over the evidence).
    with pytest.raises(warehouse.WarehouseCorruptError, match="restore it from a backup"):
        with warehouse.open_writer(warehouse_file) as con:
            warehouse.write_samples(con, batch(2, 0, 10), "t")
    assert warehouse_file.read_bytes() == damaged
    summary = _cli("warehouse", "summary", "--warehouse", warehouse_file)
    assert summary.returncode == 1
    line = _one_line_no_traceback(summary)
    assert str(warehouse_file) in line and "re-ingest" in line
