"""The kept reader (warehouse/kept.py): a warm process reuses one read-only connection, and
gives it up as soon as a writer (another process, or its own thread) wants the file, so writers
never fail or wait for an idle reader, and every read after a write sees it."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

import pytest
from gpuledger.warehouse.kept import KeptReader

from gpuledger import warehouse
from tests.helpers.warehouse_actor import batch

ROOT = Path(__file__).resolve().parents[2]
ACTOR = [sys.executable, "-m", "tests.helpers.warehouse_actor"]


def _count(con) -> int:
    return con.execute("SELECT count(*) FROM gpu_samples").fetchall()[0][0]


@pytest.fixture
def kept(warehouse_file):
    with warehouse.open_writer(warehouse_file) as con:
        warehouse.write_samples(con, batch(1, 0, 10), "kept-test")
    reader = KeptReader(warehouse_file)
    yield reader
    reader.release()


def test_calls_reuse_one_open_file_and_see_the_same_data(kept):
    counts = []
    for _ in range(5):
        with kept.reader() as con:
            counts.append(_count(con))
    assert counts == [10] * 5
    assert kept.opened == 1  # one open for five calls: the point of keeping it


def test_a_writer_in_another_process_gets_the_file_and_the_next_read_sees_its_rows(kept, warehouse_file):
    with kept.reader() as con:
        assert _count(con) == 10
    # The kept reader now holds the file, idle. A writer process (8 sessions of 20 rows) must get
    # it each time without error; it would hang until the timeout if the reader never let go.
    writer = subprocess.run([*ACTOR, "sessions", str(warehouse_file), "8", "20", "7"], check=False,
                            cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert writer.returncode == 0, writer.stderr
    assert "Could not set lock" not in writer.stderr
    with kept.reader() as con:
        assert _count(con) == 10 + 8 * 20  # every committed row, none twice
    assert kept.opened == 2  # let go for the writer, opened again for this read


def test_open_writer_in_the_callers_own_thread_is_not_refused_as_nested(kept, warehouse_file):
    """The holder thread opened the reader, so this thread holds no reader of the file: its
    writer waits until the holder notices (one poll) and then writes."""
    with kept.reader() as con:
        assert _count(con) == 10
    with warehouse.open_writer(warehouse_file) as con:
        warehouse.write_samples(con, batch(2, 0, 5), "kept-test")
    with kept.reader() as con:
        assert _count(con) == 15


def test_threads_share_the_kept_file_with_one_cursor_each(kept):
    seen: list[int] = []
    errors: list[BaseException] = []

    def ask():
        try:
            for _ in range(20):
                with kept.reader() as con:
                    seen.append(_count(con))
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=ask) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors
    assert seen == [10] * 80


def test_a_missing_warehouse_is_the_same_one_line_error_as_open_reader(tmp_path):
    missing = tmp_path / "nowhere.duckdb"
    with pytest.raises(warehouse.WarehouseError, match="no warehouse at"), warehouse.kept_reader(missing):
        pass


def test_a_thread_reuses_its_cursor_and_a_nested_call_gets_its_own(kept):
    for _ in range(3):
        with kept.reader() as con:
            assert _count(con) == 10
    assert kept.cursors_made == 1  # three calls, one cursor: the saving the reuse is for
    with kept.reader() as outer:
        pending = outer.execute("SELECT gpu_id FROM gpu_samples ORDER BY ts")
        with kept.reader() as inner:
            assert inner is not outer  # a shared cursor would lose the outer result below
            assert _count(inner) == 10
        assert len(pending.fetchall()) == 10
    assert kept.cursors_made == 2


def test_cursors_are_dropped_with_the_file_and_made_again_after(kept, warehouse_file):
    with kept.reader() as con:
        assert _count(con) == 10
    with warehouse.open_writer(warehouse_file) as con:  # the holder lets go (and closes its cursors)
        warehouse.write_samples(con, batch(3, 0, 4), "kept-test")
    with kept.reader() as con:
        assert _count(con) == 14  # a cursor of the new connection sees the write
    assert kept.opened == 2 and kept.cursors_made == 2
