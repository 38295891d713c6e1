"""Exposition text read in pieces (issue 36: ``exposition.pieces``): pages are cut before a newline
into pieces the bulk parser reads one at a time, and the rules that span a page still span it. A
series repeated in another piece, or one UUID under two hosts in two pieces, is the same quarantine
row as when both copies fall in one piece; every parse equals the per-line reference whatever the
piece size; the warehouse holds the same rows."""

from __future__ import annotations

import random
from datetime import datetime
from pathlib import Path

import duckdb
import polars as pl
import pytest
from polars.testing import assert_frame_equal

from gpuledger import warehouse
from gpuledger.ingest.metrics.exposition import parse_exposition_lines, pieces
from gpuledger.ingest.metrics.exposition.bulk import parse_exposition_bulk, parse_pages_bulk
from gpuledger.ingest.metrics.exposition.pieces import Segment, plan_pieces
from gpuledger.ingest.metrics.scrape import ingest_page
from gpuledger.simulator import build_cluster, metrics_page

CORPUS = Path(__file__).resolve().parents[1] / "fixtures" / "exposition" / "bad_corpus.prom"
REPEAT = "duplicate series in one scrape (the first copy is kept)"


@pytest.fixture(scope="module")
def sim():
    sim = build_cluster(seed=3, gpus=64, start=datetime(2026, 11, 1), days=0.05)
    t = sim.start_s + 1800
    return [metrics_page(sim, node, t) for node in range(len(sim.hardware.node_host))], t * 1000


def test_plan_pieces_packs_small_pages_and_cuts_a_large_one_before_a_family():
    # pages of 3, 4 and 2 characters; pieces of 8: "aaa" + "bbbb" fit (3 + 1 + 4), "cc" starts the next
    assert plan_pieces(["aaa", "bbbb", "cc"], 8) == [[Segment(0, 0, 3), Segment(1, 0, 4)], [Segment(2, 0, 2)]]
    # a 20-character page in pieces of 6: the cut is the newline before the next '#' line within 6
    # characters of the 6th (at 9, not the newline at 6), then the next newline after 10 + 6 (none
    # within reach of a '#': the plain newline at 17); a line is never cut, the newlines belong to no piece
    page = "x 1\nx 2\nx#\n# H\nx 3\nx 4"
    assert [page[i] for i in (3, 7, 10, 14)] == ["\n"] * 4
    got = plan_pieces(["ab", page, "z"], 6)
    assert got == [[Segment(0, 0, 2)], [Segment(1, 0, 10)], [Segment(1, 11, 18)], [Segment(1, 19, 22)],
                   [Segment(2, 0, 1)]]
    assert [page[s.start:s.end] for (s,) in got[1:4]] == ["x 1\nx 2\nx#", "# H\nx 3", "x 4"]
    # a page cut exactly before its final newline keeps its last, empty line as a piece of its own
    assert plan_pieces(["abcdef\n"], 3) == [[Segment(0, 0, 6)], [Segment(0, 7, 7)]]
    assert plan_pieces([], 3) == [] and plan_pieces([""], 3) == [[Segment(0, 0, 0)]]


@pytest.mark.slow
@pytest.mark.parametrize("piece", [1, 97, 3000])
def test_any_piece_size_parses_as_the_reference(sim, monkeypatch, piece):
    monkeypatch.setattr(pieces, "PIECE_CHARS", piece)
    pages, ms = sim
    rng = random.Random(piece)
    lines = "".join(pages[:2]).split("\n")
    swapped = "\n".join(ln.replace('gpu="', 'modelName="x",gpu="') if rng.random() < 0.2 else ln for ln in lines)
    for text in (CORPUS.read_text(), CORPUS.read_text().replace("\n", "\r\n"), "".join(pages), swapped,
                 "".join(pages).replace('Hostname="', 'Hostname="Ünï-', 5), "", "\n", "x{y} 1"):
        ref = parse_exposition_lines(text, scrape_ms=ms)
        got = parse_exposition_bulk(text, scrape_ms=ms)
        assert_frame_equal(got.samples, ref.samples)
        assert (got.rejects, got.unknown_dcgm, got.lines, got.skipped_other) == (
            ref.rejects, ref.unknown_dcgm, ref.lines, ref.skipped_other)


def test_pages_in_pieces_keep_their_own_numbers_and_rules(sim, monkeypatch):
    """Several pages, small ones sharing a piece and large ones cut: each page's line numbers,
    scrape time, rejects and line count are its own (as test_exposition_bulk's one-pass test)."""
    monkeypatch.setattr(pieces, "PIECE_CHARS", 5000)
    pages, ms = sim
    batch = [(pages[0] + pages[1], ms), ("", ms), (CORPUS.read_text(), 1796040000000), (pages[2][:300], ms),
             (pages[3] + pages[3].split("\n", 3)[2], ms + 30_000)]  # a repeated line at the very end
    assert len(plan_pieces([t for t, _ in batch], 5000)) > len(batch)  # cut and packed
    got = parse_pages_bulk(batch)
    for k, (text, scrape_ms) in enumerate(batch):
        ref = parse_exposition_lines(text, scrape_ms=scrape_ms)
        mine = (got.points.filter(pl.col("page") == k).drop("page")
                .join(got.series, on="series", how="left", maintain_order="left").drop("series"))
        assert_frame_equal(mine, ref.samples)
        assert [r for pg, r in got.rejects if pg == k] == ref.rejects
        assert got.lines[k] == ref.lines
    assert [pg for pg, r in got.rejects if r.reason == REPEAT] == [2, 4]  # the corpus' own and the last page's
    assert got.series.height == got.series.unique(subset=got.series.columns[1:]).height  # one number a series


def _far_apart(text: str, line: str) -> str:
    """``text`` with ``line`` written again as its last line, far from the first copy."""
    return text + line + "\n"


def _piece_of(cuts: list[list[Segment]], at: int) -> int:
    """The piece of one page's ``cuts`` holding character ``at``."""
    return next(k for k, ((_, start, end),) in enumerate(cuts) if start <= at <= end)


def _stored(path):
    with duckdb.connect(str(path), read_only=True) as con:
        samples = con.sql("SELECT g.gpu_uuid, g.host, s.* EXCLUDE (gpu_id) FROM gpu_samples s "
                          "JOIN gpus g USING (gpu_id) ORDER BY ALL").pl()
        quarantine = con.sql("SELECT source, location, raw_text, reason FROM quarantine ORDER BY ALL").pl()
    return samples, quarantine


def _ingest_in_pieces(tmp_path, monkeypatch, text: str, ms: int, piece: int):
    monkeypatch.setattr(pieces, "PIECE_CHARS", piece)
    path = tmp_path / f"w{piece}.duckdb"
    with warehouse.open_writer(path) as con:
        stats = ingest_page(con, text, location="http://n0:9400/metrics", scrape_ms=ms, cluster="c")
    return stats, _stored(path)


def test_a_series_repeated_in_another_piece_is_quarantined_as_in_one_piece(sim, tmp_path, monkeypatch):
    pages, ms = sim
    text = "".join(pages)  # ~100 kB: over BULK_FROM_CHARS, the bulk path
    first = next(ln for ln in text.split("\n") if ln.startswith("DCGM_FI_DEV_GPU_UTIL{"))
    again = first.rsplit(" ", 1)[0] + " 0.99"  # the same series, another value
    page = _far_apart(text, again)
    repeat_at = page.count("\n")  # the repeat's line number
    # in pieces of 4,000 characters the two copies lie in different pieces; in 10 MiB, in one
    cuts = plan_pieces([page], 4000)
    assert len(cuts) > 10 and _piece_of(cuts, page.index(first)) < _piece_of(cuts, page.rindex(again))
    whole_stats, whole = _ingest_in_pieces(tmp_path, monkeypatch, page, ms, 10 * 2**20)
    cut_stats, cut = _ingest_in_pieces(tmp_path, monkeypatch, page, ms, 4000)
    for got, want in zip(cut, whole, strict=True):
        assert_frame_equal(got, want)
    assert (cut_stats.samples_new, cut_stats.quarantined) == (whole_stats.samples_new, whole_stats.quarantined)
    quarantine = cut[1]
    assert quarantine.rows() == [("scrape", f"http://n0:9400/metrics:{repeat_at}", again, REPEAT)]
    # the first copy's value is what was stored
    uuid = first.split('UUID="', 1)[1].split('"', 1)[0]
    kept = cut[0].filter(pl.col("gpu_uuid") == uuid)["gpu_util_ratio"].to_list()
    assert kept and 0.99 not in kept


def test_one_uuid_under_two_hosts_in_two_pieces_is_quarantined_as_in_one_piece(sim, tmp_path, monkeypatch):
    pages, ms = sim
    text = "".join(pages)
    first = next(ln for ln in text.split("\n") if ln.startswith("DCGM_FI_DEV_GPU_UTIL{"))
    host = first.split('Hostname="', 1)[1].split('"', 1)[0]
    stray = first.replace(f'Hostname="{host}"', 'Hostname="zz-copied-config"')
    page = _far_apart(text, stray)
    cuts = plan_pieces([page], 4000)
    assert _piece_of(cuts, page.index(first)) < _piece_of(cuts, page.rindex(stray))
    whole_stats, whole = _ingest_in_pieces(tmp_path, monkeypatch, page, ms, 10 * 2**20)
    cut_stats, cut = _ingest_in_pieces(tmp_path, monkeypatch, page, ms, 4000)
    for got, want in zip(cut, whole, strict=True):
        assert_frame_equal(got, want)
    assert (cut_stats.samples_new, cut_stats.quarantined) == (whole_stats.samples_new, whole_stats.quarantined)
    ((reason,),) = cut[1].select("reason").rows()
    uuid = first.split('UUID="', 1)[1].split('"', 1)[0]
    assert reason.startswith(f"GPU {uuid} is reported by 2 hosts ({host}, zz-copied-config)")
    assert "zz-copied-config's 1 samples are refused" in reason
    assert set(cut[0].filter(pl.col("gpu_uuid") == uuid)["host"]) == {host}
