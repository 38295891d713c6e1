"""Migration 021 and "now" for the data (issue 41): a window aggregate covers up to its newest raw
sample (ts + covered_ms), and "now" is the end of that coverage, not the last window's start."""

from __future__ import annotations

from datetime import datetime, timedelta

import duckdb
from gpuledger.warehouse.clock import data_now, data_now_within
from gpuledger.warehouse.db import apply_migrations

from gpuledger import warehouse

T0 = datetime(2026, 11, 3, 0, 0)


def _at(minutes: float) -> datetime:
    return datetime(2026, 11, 3, 0, int(minutes), int(minutes % 1 * 60))


def test_migration_021_keeps_every_row_and_says_how_far_old_windows_reach(warehouse_file):
    warehouse_file.parent.mkdir(parents=True)
    con = duckdb.connect(str(warehouse_file))
    apply_migrations(con, target=20)
    con.execute("INSERT INTO gpus (gpu_id, cluster, gpu_uuid, host, model) VALUES "
                "(1, 'c', 'GPU-a', 'n1', 'H100'), (2, 'c', 'GPU-b', 'n1', 'H100'), (3, 'c', 'GPU-c', 'n1', 'H100')")
    # GPU 1: three 5-minute windows written before 021 (each held the samples of (ts, ts + 5 min]);
    # GPU 2: raw samples; GPU 3: a single window (no step to tell from)
    con.execute("INSERT INTO gpu_samples (gpu_id, ts, sm_active_ratio, sample_n, source) VALUES "
                "(1, $a, 0.5, 10, 'prometheus'), (1, $b, 0.5, 10, 'prometheus'), (1, $c, 0.5, 10, 'prometheus'),"
                "(2, $c, 0.1, NULL, 'scrape'), (2, $d, 0.1, NULL, 'scrape'), (3, $a, 0.2, 10, 'prometheus')",
                {"a": _at(0), "b": _at(5), "c": _at(10), "d": _at(12)})
    con.close()
    with warehouse.open_writer(warehouse_file) as con:
        rows = con.execute("SELECT gpu_id, ts, sm_active_ratio, sample_n, covered_ms FROM gpu_samples "
                           "ORDER BY gpu_id, ts").fetchall()
        assert rows == [(1, _at(0), 0.5, 10, 300_000), (1, _at(5), 0.5, 10, 300_000), (1, _at(10), 0.5, 10, 300_000),
                        (2, _at(10), 0.1, None, None), (2, _at(12), 0.1, None, None), (3, _at(0), 0.2, 10, None)]
        # the newest sample GPU 1's last window stands for is 00:15 (00:10 + 5 min), later than
        # GPU 2's raw 00:12: "now" is 00:15, not the newest ts (00:12)
        assert data_now(con, wall=datetime(2026, 11, 4)) == _at(15)
        # ...and never past the wall clock: a window that reaches beyond it counts up to it
        assert data_now(con, wall=_at(13.5)) == _at(13.5)
        # a row stamped after the wall clock is ignored, as before: GPU 1's 00:10 window is
        # after a wall of 00:09, so 00:05's window (reaching 00:10, clipped at 00:09) is the newest
        assert data_now(con, wall=_at(9)) == _at(9)
        assert data_now(con, wall=_at(4)) == _at(4)


def test_whether_the_data_now_lies_in_a_window_is_asked_of_the_newest_rows_with_the_same_answer(warehouse_file):
    # issue 41: `report squatters` asks whether the data's now is within half the sustained window
    # of the latest evaluation from the rows near it (data_now_within) instead of reading the data's
    # now. Every window of a grid, at several wall clocks, on: samples only (a 5-min window reaching
    # 00:15, raw ones to 00:12); then a job whose end (00:20) is newest; then a job starting at 00:40
    # (after some walls: ignored there); and an empty warehouse ("now" is the wall clock).
    grid = [_at(m) for m in (0, 4, 9, 10, 12, 13.5, 14.5, 15, 16, 20, 25, 40, 45)]
    walls = [_at(9), _at(13.5), _at(15), _at(30), datetime(2026, 11, 4)]

    def check(con):
        for wall in walls:
            now = data_now(con, wall=wall)
            for lo in grid:
                for hi in [lo, lo + timedelta(microseconds=1), lo + timedelta(minutes=5), lo + timedelta(minutes=30)]:
                    assert data_now_within(con, lo, hi, wall=wall) == (lo <= now <= hi), (wall, lo, hi, now)

    with warehouse.open_writer(warehouse_file) as con:
        check(con)  # empty
        con.execute("INSERT INTO gpus (gpu_id, cluster, gpu_uuid, host, model) VALUES "
                    "(1, 'c', 'GPU-a', 'n1', 'H100'), (2, 'c', 'GPU-b', 'n1', 'H100')")
        con.execute("INSERT INTO gpu_samples (gpu_id, ts, sm_active_ratio, sample_n, covered_ms, source) VALUES "
                    "(1, $a, 0.5, 10, 300000, 'prometheus'), (1, $b, 0.5, 10, 300000, 'prometheus'), "
                    "(2, $c, 0.1, NULL, NULL, 'scrape'), (2, $d, 0.1, NULL, NULL, 'scrape')",
                    {"a": _at(5), "b": _at(10), "c": _at(10), "d": _at(12)})
        assert data_now(con, wall=datetime(2026, 11, 4)) == _at(15)
        check(con)
        job = ("INSERT INTO jobs (cluster, job_id, project, gpus, submit_time, start_time, end_time, source, updated_at) "
               "VALUES ('c', $id, 'p', 1, $s, $s, $e, 'test', $s)")
        con.execute(job, {"id": "j1", "s": _at(1), "e": _at(20)})
        assert data_now(con, wall=datetime(2026, 11, 4)) == _at(20)
        check(con)
        con.execute(job, {"id": "j2", "s": _at(40), "e": None})
        check(con)
