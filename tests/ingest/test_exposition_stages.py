"""The bulk parser's stages (gpuledger.ingest.metrics.exposition.bulk), each on hand-made input;
the whole parser is held equal to the per-line reference by tests/ingest/test_exposition_bulk.py.
Expected values derived by hand in the comments."""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import polars as pl

from gpuledger.ingest.metrics.exposition.bulk import (
    METRICS,
    _metric_codes,
    fast_lines,
    first_copies,
    merge_slow,
    other_families,
    page_layout,
    parse_pages_bulk,
    repeat_rejects,
    slow_verdicts,
    tail_values,
)
from gpuledger.ingest.metrics.exposition.lines import Reject


def test_page_layout_places_each_line_in_its_page():
    # pages start at bytes 0 and 10; lines at 0, 4 (page 0) and 10, 15, 20 (page 1):
    # page 0's line 1 is line 0, page 1's is line 2; 2 and 3 lines
    got = page_layout(np.array([0, 10]), np.array([0, 4, 10, 15, 20]))
    assert got.page_of_line.tolist() == [0, 0, 1, 1, 1]
    assert got.page_first.tolist() == [0, 2] and got.page_lines.tolist() == [2, 3]
    one = page_layout(np.array([0]), np.array([0, 4, 9]))
    assert one.page_of_line.tolist() == [0, 0, 0] and one.page_first.tolist() == [0]
    assert one.page_lines.tolist() == [3]


def test_tail_values_reads_value_and_timestamp():
    tails = pl.Series(["1", "2.5 1700000000000", "x", "3 12"])
    ok, value, ts, has_ts = tail_values(tails, np.array([100, 100, 100, 200]))
    assert ok.tolist() == [True, True, False, True]  # "x" is no number
    assert value[[0, 1, 3]].tolist() == [1.0, 2.5, 3.0] and math.isnan(value[2])
    # no timestamp: the page's scrape time (100); else the line's own
    assert ts.tolist() == [100, 1700000000000, 100, 12]
    assert has_ts.tolist() == [False, True, False, True]


def test_other_families_settles_runs_by_their_name():
    names = pl.Series(["go_x", "go_x", "DCGM_FI_DEV_XID_ERRORS", "DCGM_FI_DEV_GPU_TEMP", "bad name!"])
    head = np.array([True, False, True, True, True])  # go_x's run is two lines long
    code, run = _metric_codes(names, head)
    assert code.tolist() == [-1, -1, -1, METRICS.index("DCGM_FI_DEV_GPU_TEMP"), -1] and run.tolist() == [0, 0, 1, 2, 3]
    unknown, skipped, settled = other_families(names, code, run, head)
    # XID_ERRORS: a DCGM field not stored, counted (1 line); go_x: another family, skipped (2 lines);
    # GPU_TEMP is stored (not settled here); "bad name!" is left to the per-line rules to word
    assert unknown == Counter({"DCGM_FI_DEV_XID_ERRORS": 1}) and skipped == 2
    assert settled.tolist() == [True, True, True, False, False]


def test_fast_lines_keeps_only_plainly_good_samples():
    temp, util = METRICS.index("DCGM_FI_DEV_GPU_TEMP"), METRICS.index("DCGM_FI_DEV_GPU_UTIL")
    good = np.array([True, True, True, True, False])
    series = np.array([0, -1, 0, 0, 0])  # line 1: its label set goes the per-line way
    codes = np.array([temp, temp, util, temp, temp])
    value = np.array([40.0, 40.0, 250.0, 40.0, 40.0])  # line 2: 250 % utilisation is out of range
    has_ts = np.array([False, False, False, True, False])
    ts = np.array([0, 0, 0, 5_000, 0])  # line 3: 5 s past the scrape, limit 1 s
    assert fast_lines(good, series, codes, value, has_ts, ts, np.full(5, 1_000)).tolist() == [
        True, False, False, False, False]


def test_slow_verdicts_and_merge_slow():
    page = ("# HELP x\n"  # a comment: no verdict
            "go_x 1\n"  # another family: skipped
            "DCGM_FI_DEV_XID_ERRORS{UUID=\"GPU-1\",Hostname=\"n\"} 3\n"  # unknown DCGM field
            "DCGM_FI_DEV_GPU_TEMP{UUID=\"GPU-1\",Hostname=\"n\"} abc\n"  # refused: not a number
            "DCGM_FI_DEV_GPU_TEMP{ UUID=\"GPU-1\", Hostname=\"n\" } 41")  # spaces: per line, kept
    lines = page.split("\n")
    layout = page_layout(np.array([0]), np.arange(len(lines)))
    keys = {}
    rejects, samples, skipped, unknown = slow_verdicts(
        np.arange(5), lambda i: lines[i], layout, np.array([7_000]), 300_000, 300.0,
        lambda text: keys.setdefault(text, len(keys)))
    assert [(pg, r.line_no, r.reason) for pg, r in rejects] == [(0, 4, "value 'abc' is not a number")]
    # line 5 (1-based), GPU_TEMP, series 1 (the second label text asked for), 41, the scrape time
    assert samples == [(5, METRICS.index("DCGM_FI_DEV_GPU_TEMP"), 1, 41.0, 7_000)]
    assert skipped == 1 and unknown == Counter({"DCGM_FI_DEV_XID_ERRORS": 1})
    # merged between the bulk path's lines 1 and 3: line order
    got = merge_slow(np.array([1, 3]), np.array([0, 0]), np.array([0, 1]), np.array([1.0, 2.0]),
                     np.array([10, 10]), [(2, 5, 7, 9.0, 11)])
    assert [a.tolist() for a in got] == [[1, 2, 3], [0, 5, 0], [0, 7, 1], [1.0, 9.0, 2.0], [10, 11, 10]]


def test_first_copies_within_a_page_only():
    # series 0, metric 1 three times: twice on page 0 (the second is a copy), once on page 1 (its own)
    assert first_copies(np.array([0, 0, 1]), np.array([0, 0, 0]), np.array([1, 1, 1]), 1).tolist() == [
        True, False, True]
    assert first_copies(np.array([0, 0]), np.array([0, 1]), np.array([1, 1]), 2) is None  # nothing repeats
    # page 1's line 2 read back from the page's text, without its '\r'; page 0's last line (no newline)
    assert repeat_rejects(np.array([1, 0]), np.array([2, 2]), ["a\nb", "c\r\nd\r\n"]) == [
        (0, Reject(2, "b", "duplicate series in one scrape (the first copy is kept)")),
        (1, Reject(2, "d", "duplicate series in one scrape (the first copy is kept)"))]


def test_no_pages_is_an_empty_parse():
    got = parse_pages_bulk([])
    assert got.points.height == 0 and got.points.columns == ["page", "line_no", "metric", "series", "value", "ts"]
    assert (got.rejects, got.lines, got.skipped_other) == ([], [], 0)


def test_label_set_numbers_one_series_per_distinct_label_set():
    from gpuledger.ingest.metrics.exposition.lines import LabelSetNumbers

    n = LabelSetNumbers()
    assert n.key('UUID="GPU-1",Hostname="a"') == 0
    assert n.key('Hostname="a",UUID="GPU-1"') == 0  # the same labels in another order: the same series
    assert n.key(' UUID="GPU-1", Hostname="a" ') == 0  # and with blanks around them
    assert n.key('UUID="GPU-2",Hostname="a"') == 1
    assert n.key('gpu="0"') == "series names no device: needs a UUID and a Hostname/hostname label"
    # two series (GPU-1, GPU-2), whole GPUs (GPU_I_ID -1), host a; all five texts remembered (one refused)
    assert [r[:3] for r in n.rows] == [("GPU-1", -1, "a"), ("GPU-2", -1, "a")]
    assert len(n.by_text) == 5
