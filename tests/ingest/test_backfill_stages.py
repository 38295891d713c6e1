"""The stages of the Prometheus backfill (gpuledger.ingest.metrics.prometheus.backfill), each on
hand-made input; the whole backfill stays covered against a real Prometheus by
tests/ingest/test_prometheus*.py. Expected values derived by hand in the comments."""

from __future__ import annotations

import contextlib
import gc
from datetime import datetime

import polars as pl
import pytest

from gpuledger import warehouse
from gpuledger.errors import UsageError
from gpuledger.ingest.metrics.prometheus import backfill as bf
from gpuledger.ingest.metrics.prometheus.backfill import (
    BackfillStats,
    ChunksAhead,
    ChunkSink,
    NotPrometheusAnswer,
    PrometheusError,
    _decode_gc_off,
    backfill_range,
    checkpoint_epoch,
    chosen_metrics,
    chunks_to_do,
    read_checkpoint,
    store_chunk,
    write_in_order,
)


def test_backfill_range_in_epoch_seconds():
    # 2026-11-29T00:00Z = 1795910400 (20421 days × 86400); one hour later + 3600
    assert backfill_range(datetime(2026, 11, 29), datetime(2026, 11, 29, 1), 30, 3600) == (
        1795910400,
        1795914000,
    )


def test_backfill_range_refuses_empty_range_and_zero_widths():
    with pytest.raises(
        UsageError, match=r"^--end 2026-11-29T00:00:00Z must be after --start 2026-11-29T00:00:00Z$"
    ):
        backfill_range(datetime(2026, 11, 29), datetime(2026, 11, 29), 30, 3600)
    with pytest.raises(UsageError, match=r"not 0 s and 3600 s$"):
        backfill_range(datetime(2026, 11, 29), datetime(2026, 11, 30), 0, 3600)
    with pytest.raises(UsageError, match=r"not 30 s and -1 s$"):
        backfill_range(datetime(2026, 11, 29), datetime(2026, 11, 30), 30, -1)


def test_checkpoint_epoch():
    # the same instant as above, written the way checkpoints are ("...Z")
    assert checkpoint_epoch("2026-11-29T00:00:00Z") == 1795910400
    assert checkpoint_epoch(None) is None and checkpoint_epoch("") is None


def test_chunks_to_do_skips_chunks_up_to_the_checkpoint():
    chunks = [(0, 10), (10, 20), (20, 25)]
    assert chunks_to_do(chunks, None) == chunks
    assert chunks_to_do(chunks, 10) == [(10, 20), (20, 25)]  # chunk ending at 10 is stored
    assert chunks_to_do(chunks, 25) == []


def test_chosen_metrics_given_list_needs_no_server(monkeypatch):
    monkeypatch.setattr(bf, "discover_metrics", lambda *a, **k: pytest.fail("asked the server"))
    assert chosen_metrics(None, "http://p", ("DCGM_FI_DEV_GPU_UTIL",), {}) == ["DCGM_FI_DEV_GPU_UTIL"]


def test_chosen_metrics_discovers_and_refuses_a_server_without_dcgm(monkeypatch):
    asked = []
    monkeypatch.setattr(bf, "discover_metrics", lambda session, url, **kw: asked.append((url, kw)) or ["M"])
    assert chosen_metrics("s", "http://p", None, {"retries": 1}) == ["M"]
    assert asked == [("http://p", {"retries": 1})]
    monkeypatch.setattr(bf, "discover_metrics", lambda session, url, **kw: [])
    with pytest.raises(NotPrometheusAnswer, match=r"^http://p holds no DCGM series .*nothing was recorded"):
        chosen_metrics("s", "http://p", [], {})


def test_decode_gc_off_restores_the_collector():
    assert gc.isenabled()
    with _decode_gc_off(True):
        assert not gc.isenabled()
    assert gc.isenabled()
    with _decode_gc_off(False):
        assert gc.isenabled()
    with pytest.raises(RuntimeError), _decode_gc_off(True):
        raise RuntimeError
    assert gc.isenabled()


class _Future:
    def __init__(self, value=None, error=None):
        self.value, self.error, self.cancelled = value, error, False

    def result(self):
        if self.error:
            raise self.error
        return self.value

    def cancel(self):
        self.cancelled = True


class _Pool:
    """Records submissions; each chunk's result is (empty frame, [], b - a points, dropped_name)."""

    def __init__(self, drop_name_at=None):
        self.calls, self.drop_name_at = [], drop_name_at

    def submit(self, run, **kw):
        self.calls.append((kw["a"], kw["per_metric"]))
        return _Future((pl.DataFrame(), [], kw["b"] - kw["a"], kw["a"] == self.drop_name_at))


def test_chunks_ahead_keeps_depth_in_flight_and_learns_per_metric():
    pool = _Pool(drop_name_at=0)
    ahead = ChunksAhead(pool, iter([(0, 10), (10, 20), (20, 30)]), 2, run=None, job={"url": "u"})
    ahead.refill()
    assert [a for a, _ in pool.calls] == [0, 10]  # depth 2
    a, _, future = ahead.pending.popleft()
    wide, rejects, points = ahead.outcome(a, future, 0)
    # chunk 0 dropped __name__: the next chunk submitted (20) asks per metric; 10 was already out
    assert (wide.is_empty(), rejects, points) == (True, [], 10)
    assert pool.calls == [(0, False), (10, False), (20, True)]


def test_chunks_ahead_depth_zero_still_runs_one_and_cancel_cancels_pending():
    pool = _Pool()
    ahead = ChunksAhead(pool, iter([(0, 10), (10, 20)]), 0, run=None, job={})
    ahead.refill()
    assert len(ahead.pending) == 1
    ahead.cancel()
    assert ahead.pending[0][2].cancelled


def test_chunks_ahead_error_says_where_the_stored_prefix_ends():
    ahead = ChunksAhead(_Pool(), iter([]), 1, run=None, job={})
    # the chunk starts at 1795910400 (2026-11-29T00:00Z); the range starts 30 s later: undone from the start
    with pytest.raises(PrometheusError) as caught:
        ahead.outcome(1795910400, _Future(error=PrometheusError("down")), 1795910430)
    assert caught.value.undone_from == "2026-11-29T00:00:30Z"


def test_store_chunk_writes_checkpoint_and_quarantine_together(warehouse_file):
    sink = ChunkSink(warehouse_path=warehouse_file, cluster="c", url="http://p", scope="scope-1")
    rejects = [warehouse.QuarantineRow("prometheus", "http://p", "x", "bad")]
    with warehouse.open_writer(warehouse_file) as con:
        # an empty frame stores no samples; the checkpoint is the chunk's end, 2026-11-29T01:00Z
        assert store_chunk(con, sink, pl.DataFrame(), rejects, 1795914000) == 0
        assert read_checkpoint(con, "scope-1") == "2026-11-29T01:00:00Z"
        assert con.execute("SELECT count(*) FROM quarantine").fetchone()[0] == 1


def test_write_in_order_counts_each_chunk_and_reports_it(warehouse_file):
    pool = _Pool()
    ahead = ChunksAhead(pool, iter([(0, 10), (10, 25)]), 1, run=None, job={})
    sink = ChunkSink(warehouse_path=warehouse_file, cluster="c", url="http://p", scope="s")
    stats, seen = BackfillStats(chunks_total=2), []
    with contextlib.ExitStack() as held:
        write_in_order(
            ahead, sink, held, stats, start_s=0, on_chunk=lambda b, n, st: seen.append((b, n)), total=2
        )
    # points 10 + 15 = 25; nothing new, nothing quarantined; checkpoint after the last chunk, 25 s
    assert (stats.chunks_done, stats.points, stats.samples_new, stats.quarantined) == (2, 25, 0, 0)
    assert seen == [(10, 2), (25, 2)]
    with warehouse.open_writer(warehouse_file) as con:
        assert read_checkpoint(con, "s") == "1970-01-01T00:00:25Z"


def test_backfill_stats_count_chunk():
    stats = BackfillStats()
    stats.count_chunk(100, 40, 2)
    stats.count_chunk(50, 0, 1)
    assert (stats.chunks_done, stats.points, stats.samples_new, stats.quarantined) == (2, 150, 40, 3)
