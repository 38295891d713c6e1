"""The bulk exposition parser (``exposition.bulk``, what ``parse_exposition`` runs) gives exactly the
page the per-line reference (``parse_exposition_lines``) gives: same samples (values, series labels,
line numbers, order), same refused lines with the same reasons, same counts. Held on the bad-input
corpus, on simulator pages (MIG, hpc_job copies, host spellings, explicit timestamps) and on lines
mutated in the ways that push a line off the bulk path (escapes, blanks, reordered or repeated
labels, CRLF, odd numbers, non-ASCII)."""

from __future__ import annotations

import random
from datetime import datetime
from pathlib import Path

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from gpuledger.ingest.metrics.exposition import parse_exposition, parse_exposition_lines
from gpuledger.ingest.metrics.exposition.bulk import canonical_key, parse_exposition_bulk
from gpuledger.simulator import build_cluster, metrics_page

CORPUS = Path(__file__).resolve().parents[1] / "fixtures" / "exposition" / "bad_corpus.prom"
SCRAPE_MS = 1796040000000  # 2026-11-30T12:00:00Z


def assert_same_page(text: str, scrape_ms: int = SCRAPE_MS, max_future_s: float = 300.0):
    ref = parse_exposition_lines(text, scrape_ms=scrape_ms, max_future_s=max_future_s)
    bulk = parse_exposition_bulk(text, scrape_ms=scrape_ms, max_future_s=max_future_s)
    assert_frame_equal(bulk.samples, ref.samples)
    assert bulk.rejects == ref.rejects
    assert bulk.unknown_dcgm == ref.unknown_dcgm
    assert (bulk.lines, bulk.skipped_other) == (ref.lines, ref.skipped_other)
    return ref, bulk


def test_corpus_same_as_reference():
    ref, _ = assert_same_page(CORPUS.read_text())
    assert len(ref.rejects) == 14 and ref.samples.height > 0  # the corpus' 14 bad lines (test_ingest_scrape)


def test_corpus_with_crlf_and_no_final_newline():
    assert_same_page(CORPUS.read_text().replace("\n", "\r\n"))
    assert_same_page(CORPUS.read_text().rstrip("\n"))


@pytest.mark.parametrize("text", ["", "\n", "\n\n", "# only a comment", "\r", "   \n\t", "{", "}", "} 1",
                                  "DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_GPU_TEMP{} 1", "x{y} 1", "{a=\"b\"} 1"])
def test_degenerate_pages(text):
    assert_same_page(text)


@pytest.fixture(scope="module")
def sim_pages():
    sim = build_cluster(seed=3, gpus=64, start=datetime(2026, 11, 1), days=0.05)
    t = sim.start_s + 1800
    return [metrics_page(sim, node, t) for node in range(len(sim.hardware.node_host))], t


def test_simulator_pages_same_as_reference(sim_pages):
    pages, t = sim_pages
    text = "".join(pages)
    ref, bulk = assert_same_page(text, scrape_ms=t * 1000)
    assert ref.samples.height > 500 and not ref.rejects
    # nothing went the slow way: every label set was read in bulk (the series numbers are dense)
    assert bulk.series.height == ref.samples.select(pl.exclude("line_no", "metric", "value", "ts")).unique().height


def test_simulator_pages_with_timestamps(sim_pages):
    sim = build_cluster(seed=3, gpus=64, start=datetime(2026, 11, 1), days=0.05)
    t = sim.start_s + 1800
    text = metrics_page(sim, 0, t, timestamps=True) + metrics_page(sim, 1, t, timestamps=True)
    assert_same_page(text, scrape_ms=t * 1000)
    assert_same_page(text, scrape_ms=t * 1000 - 3_600_000)  # all an hour in the future: refused
    assert parse_exposition_bulk(text, scrape_ms=t * 1000 - 3_600_000).samples.is_empty()


def _mutate(line: str, rng: random.Random) -> str:
    """One of the changes that push a line off the bulk path (or keep it on it, other spelling)."""
    if not line.startswith("DCGM_FI_"):
        return line
    head, _, tail = line.partition("{")
    labels, _, rest = tail.rpartition("}")
    pairs = labels.split('",')
    kind = rng.randrange(16)
    if kind == 0:
        rng.shuffle(pairs)  # same series, other order: must be the same series number
        pairs = [p if p.endswith('"') else p + '"' for p in pairs]
        labels = ",".join(p.rstrip('"') + '"' for p in pairs)
    elif kind == 1:
        labels = labels.replace('="', ' = "', 1)
    elif kind == 2:
        labels = labels.replace('pod="', 'pod="a\\"b', 1).replace('modelName="', 'modelName="x\\\\y', 1)
    elif kind == 3:
        labels = labels + "," + labels.split(",")[0]  # a repeated label
    elif kind == 4:
        rest = rest.replace(" ", "\t ", 1)
    elif kind == 5:
        rest = rng.choice([" NaN", " +Inf", " 1e999", " 1_0", " 0x10", " 1.5.", " -0", " +.5", " 5.",
                           " 9223372036854775807", " 2147483647", " 140737488355330"])
    elif kind == 6:
        rest = rest + rng.choice([" 1796040000000", " 1796049999999", " 17960400000001", " x", " 1 2"])
    elif kind == 7:
        labels = labels.replace('Hostname="', 'Hostname="Ünïcode-', 1)
    elif kind == 8:
        labels = labels.replace('UUID="', 'uuid="', 1)
    elif kind == 9:
        labels = labels.replace('gpu="', 'gpu="x', 1)
    elif kind == 10:
        labels = labels + ',pod="p=1"'
    elif kind == 11:
        labels = labels + ","
    elif kind == 12:
        head = head.replace("DCGM_FI_DEV_", "DCGM_FI_DEV_UNSTORED_", 1)
    elif kind == 13:
        labels = labels.replace('Hostname="', 'Hostname=".', 1)
    elif kind == 14:
        return line + "\r"
    else:
        labels = labels.replace('"', "", 1)  # unbalanced quote
    return f"{head}{{{labels}}}{rest}"


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_mutated_lines_same_as_reference(sim_pages, seed):
    pages, t = sim_pages
    rng = random.Random(seed)
    lines = "".join(pages[:3]).split("\n")
    mutated = [(_mutate(line, rng) if rng.random() < 0.3 else line) for line in lines]
    mutated += rng.sample(mutated, 40)  # repeated lines: duplicate series, first copy kept
    mutated.insert(5, "go_goroutines 12")
    mutated.insert(9, 'process_cpu{x="1"} 3')
    mutated.insert(11, "  DCGM_FI_DEV_GPU_TEMP{} 1")
    ref, _ = assert_same_page("\n".join(mutated), scrape_ms=t * 1000)
    assert ref.rejects and ref.samples.height > 100  # the mutations bit, the rest landed


def test_canonical_key_is_order_free_and_matches_the_bulk_key():
    a = canonical_key({"gpu": "0", "UUID": "GPU-1", "Hostname": "n"})
    assert a == canonical_key({"Hostname": "n", "UUID": "GPU-1", "gpu": "0"})
    assert a != canonical_key({"gpu": "0", "UUID": "GPU-1", "Hostname": "m"})
    assert canonical_key({"a": 'x"'}).startswith("\x00")  # cannot collide with a simple text's key


def test_parse_exposition_same_as_reference_small_and_large(sim_pages):
    from gpuledger.ingest.metrics.exposition import BULK_FROM_CHARS
    pages, t = sim_pages
    for text in (CORPUS.read_text(), "".join(pages)):  # a small text goes line by line, a large one in bulk
        got = parse_exposition(text, scrape_ms=t * 1000)
        assert_frame_equal(got.samples, parse_exposition_lines(text, scrape_ms=t * 1000).samples)
        assert (got.points is not None) and (got.series is not None)
    assert len(CORPUS.read_text()) < BULK_FROM_CHARS < len("".join(pages))


def _wide_same(parsed):
    from gpuledger.ingest.metrics.exposition import long_to_wide, series_long_to_wide
    slow = long_to_wide(parsed.samples)
    fast = series_long_to_wide(parsed.points, parsed.series)
    assert_frame_equal(fast.select(sorted(fast.columns)), slow.select(sorted(slow.columns)))
    return fast


def test_wide_rows_from_the_series_numbers_equal_long_to_wide(sim_pages):
    pages, t = sim_pages
    wide = _wide_same(parse_exposition_bulk("".join(pages), scrape_ms=t * 1000))
    assert wide["mig_instance_id"].max() >= 0 and wide["hpc_job"].drop_nulls().len() > 0  # MIG and Slurm rows
    _wide_same(parse_exposition_bulk(CORPUS.read_text(), scrape_ms=SCRAPE_MS))


def test_pages_parsed_together_same_as_each_alone(sim_pages):
    """parse_pages_bulk: each page keeps its own line numbers, scrape time (one page's explicit
    timestamps are in the future of its own scrape time only), duplicates and refusals."""
    from gpuledger.ingest.metrics.exposition.bulk import parse_pages_bulk
    pages, t = sim_pages
    sim = build_cluster(seed=3, gpus=64, start=datetime(2026, 11, 1), days=0.05)
    stamped = metrics_page(sim, 1, t, timestamps=True)
    batch = [(pages[0], t * 1000), (CORPUS.read_text(), SCRAPE_MS), (stamped, t * 1000 - 3_600_000),
             (pages[0] + pages[0].split("\n", 3)[2], t * 1000),  # no final newline, one duplicate line
             ("", t * 1000), ("\n", t * 1000), (pages[1], t * 1000)]
    got = parse_pages_bulk(batch)
    for k, (text, ms) in enumerate(batch):
        ref = parse_exposition_lines(text, scrape_ms=ms)
        mine = got.points.filter(pl.col("page") == k).drop("page").join(got.series, on="series", how="left", maintain_order="left").drop("series")
        assert_frame_equal(mine, ref.samples)
        assert [r for pg, r in got.rejects if pg == k] == ref.rejects
        assert got.lines[k] == ref.lines
    assert [pg for pg, _ in got.rejects].count(3) == 1  # the repeated line of the last page
    assert got.points.filter(pl.col("page") == 2).is_empty()  # an hour ahead of its scrape: refused


def test_label_cache_gives_what_a_fresh_parse_gives(sim_pages, monkeypatch):
    """Round 2 reads its label sets from the cache round 1 filled (plus one new device's, a miss);
    the page is the same as the reference's either way, and a full cache starts again."""
    from gpuledger.ingest.metrics.exposition import bulk
    pages, t = sim_pages
    monkeypatch.setattr(bulk, "_cache", None)
    monkeypatch.setattr(bulk, "_recent", ())  # (else a recent numbering of this text would serve)
    text = "".join(pages)
    assert_same_page(text, scrape_ms=t * 1000)
    filled = bulk._cache.height
    assert filled > 0
    first = text.split('UUID="', 1)[1].split('"', 1)[0]
    extra = "\n".join(ln.replace(first, "GPU-not-seen-before") for ln in text.split("\n") if first in ln)
    assert_same_page(text + extra + "\n", scrape_ms=t * 1000 + 30_000)
    assert bulk._cache.height > filled  # the new label texts were added
    monkeypatch.setattr(bulk, "_CACHE_ROWS", 1)
    monkeypatch.setattr(bulk, "_recent", ())
    assert_same_page(text, scrape_ms=t * 1000)
    assert bulk._cache.height <= filled + 100


@pytest.mark.parametrize("step", [1, 7, 64, 300])
def test_scan_steps_cut_anywhere_same_as_reference(sim_pages, monkeypatch, step):
    """The scan reads the text in steps cut after a newline (lines longer than a step included):
    any step size gives the reference's page, on clean, CRLF and mutated text."""
    from gpuledger.ingest.metrics.exposition import bulk, scan
    monkeypatch.setattr(scan, "_STEP", step)
    monkeypatch.setattr(bulk, "_recent", ())
    pages, t = sim_pages
    rng = random.Random(step)
    lines = "".join(pages[:2]).split("\n")
    mutated = "\n".join(_mutate(line, rng) if rng.random() < 0.3 else line for line in lines)
    for text in (CORPUS.read_text(), CORPUS.read_text().replace("\n", "\r\n"), "".join(pages[:2]), mutated,
                 "x{y} 1", "\n\n#", 'DCGM_FI_DEV_GPU_TEMP{UUID="u",Hostname="h"} 1'):
        assert_same_page(text, scrape_ms=t * 1000)


def test_recent_numbering_reused_only_for_the_same_label_texts(sim_pages, monkeypatch):
    """A page whose every label text is a recent parse's takes its numbering whole (also when
    another text came between: a round written in batches); one changed label (same length, so
    every offset stays) or one line less is numbered afresh. Each time the page equals the
    reference's."""
    from gpuledger.ingest.metrics.exposition import bulk
    monkeypatch.setattr(bulk, "_recent", ())
    pages, t = sim_pages
    text = "".join(pages)
    assert_same_page(text, scrape_ms=t * 1000)
    (first,) = bulk._recent
    assert_same_page(text.replace("} 1", "} 2"), scrape_ms=t * 1000 + 30_000)  # other values only
    assert bulk._recent == (first,)  # reused, not rebuilt
    uuid = text.split('UUID="', 1)[1].split('"', 1)[0]
    changed = text.replace(uuid, uuid[:-1] + ("0" if uuid[-1] != "0" else "1"), 1)  # one line's GPU
    _, bulk_page = assert_same_page(changed, scrape_ms=t * 1000)
    assert len(bulk._recent) == 2 and bulk._recent[1] is first
    assert_same_page(text, scrape_ms=t * 1000)  # the first text again, after another
    assert len(bulk._recent) == 2
    assert bulk_page.series.height == parse_exposition_bulk(text, scrape_ms=t * 1000).series.height + 1
    dropped = text.split("\n")
    sample_at = next(i for i, line in enumerate(dropped) if line.startswith("DCGM_FI_"))
    assert_same_page("\n".join(dropped[:sample_at] + dropped[sample_at + 1:]), scrape_ms=t * 1000)


def test_parse_keeps_no_reference_to_the_page(sim_pages):
    """An ASCII page is read in place (no copy); nothing the parse returns or caches may hold on to
    it (a cache holding each round's 40 MB page would grow without bound)."""
    import sys

    from gpuledger.ingest.metrics.exposition import bulk
    pages, t = sim_pages
    text = "".join(pages)
    assert text.isascii()  # read in place
    before = sys.getrefcount(text)
    bulk.clear_label_cache()
    parsed = parse_exposition_bulk(text, scrape_ms=t * 1000)  # fills both caches
    again = parse_exposition_bulk(text, scrape_ms=t * 1000 + 30_000)  # reads them
    assert parsed.sample_count == again.sample_count > 0
    assert sys.getrefcount(text) == before


def test_non_ascii_page_same_as_reference(sim_pages):
    """A page with a non-ASCII label is encoded (not read in place); its lines go the per-line way."""
    pages, t = sim_pages
    text = "".join(pages).replace('Hostname="', 'Hostname="Ünïcode-', 3)
    ref, _ = assert_same_page(text, scrape_ms=t * 1000)
    assert ref.samples.filter(pl.col("host").str.starts_with("ünïcode")).height > 0


def test_wide_rows_equal_long_to_wide_without_copies_and_over_several_scrape_times(sim_pages):
    """series_long_to_wide's two dedup paths: no (device, ts, metric) twice (no job copies: the
    count shortcut) and pages scraped at different times with a second job's copy of every sample
    (several ts, two samples a cell: the sort)."""
    from gpuledger.ingest.metrics.exposition.bulk import parse_pages_bulk
    pages, t = sim_pages
    no_copies = "\n".join(line for line in "".join(pages).split("\n") if "hpc_job" not in line)
    wide = _wide_same(parse_exposition_bulk(no_copies, scrape_ms=t * 1000))
    assert wide["mig_instance_id"].max() >= 0  # MIG rows: power and energy held by one instance
    copied = [p + "".join(line.replace("}", ',hpc_job="0000001"}') + "\n" for line in p.split("\n")
                          if line.startswith("DCGM_FI_") and "hpc_job" not in line) for p in pages]
    both = parse_pages_bulk([(p, t * 1000 + 7_000 * k) for k, p in enumerate(copied)])
    assert not both.rejects
    from gpuledger.ingest.metrics.exposition import ParsedPage
    page = ParsedPage.from_points(both.points.drop("page"), both.series, [], both.unknown_dcgm, 0, 0)
    assert _wide_same(page)["ts"].n_unique() == len(pages)


def test_ranked_series_reused_only_for_an_equal_series_frame(sim_pages, monkeypatch):
    """series_long_to_wide keeps the recent series frames' rankings: an equal frame (another object)
    takes one, a frame differing in one host takes its own; both match long_to_wide."""
    from gpuledger.ingest.metrics.exposition import long_to_wide, series_long_to_wide, wide
    monkeypatch.setattr(wide, "_recent_ranked", ())
    pages, t = sim_pages
    parsed = parse_exposition_bulk("".join(pages), scrape_ms=t * 1000)
    first = series_long_to_wide(parsed.points, parsed.series)
    again = series_long_to_wide(parsed.points, parsed.series.clone())
    assert_frame_equal(first, again)
    other = parsed.series.with_columns(host=pl.when(pl.col("series") == 0).then(pl.lit("Elsewhere.example"))
                                       .otherwise(pl.col("host")))
    moved = series_long_to_wide(parsed.points, other)
    slow = long_to_wide(parsed.points.join(other, on="series", how="left", maintain_order="left").drop("series"))
    assert_frame_equal(moved.select(sorted(moved.columns)), slow.select(sorted(slow.columns)))
    assert "elsewhere" in moved["host"].to_list() and "elsewhere" not in first["host"].to_list()
    kept = wide._recent_ranked
    assert_frame_equal(series_long_to_wide(parsed.points, parsed.series), first)  # the first, again
    now = wide._recent_ranked  # recalled, not ranked afresh:
    assert len(now) == len(kept) == 2 and all(a is b for a, b in zip(now, kept))


@pytest.mark.parametrize("size", [0, 1, 7, 8, 9, 1000, 4099])
def test_set_bytes_is_flatnonzero(size):
    import numpy as np

    from gpuledger.ingest.metrics.exposition.scan import set_bytes
    rng = np.random.default_rng(size)
    for density in (0.0, 0.01, 0.5, 1.0):
        hit = rng.random(size) < density
        assert np.array_equal(set_bytes(hit, np.empty(size // 8, dtype=bool)), np.flatnonzero(hit))


def test_runs_of_unstored_and_foreign_families_same_as_reference(sim_pages):
    """A default exporter's page holds runs of DCGM families the warehouse does not store (counted
    per name), of non-DCGM families (skipped) and here one run of bad names (refused line by line):
    each run is judged once in bulk, the counts and refusals equal the reference's."""
    pages, t = sim_pages
    page = pages[0]
    temp = [line for line in page.split("\n") if line.startswith("DCGM_FI_DEV_GPU_TEMP{")]
    extra = [line.replace("DCGM_FI_DEV_GPU_TEMP", family, 1) for family in
             ("DCGM_FI_DEV_XID_ERRORS", "DCGM_FI_DEV_MEM_CLOCK", "go_gc_count", "DCGM_FI_DEV-BAD")
             for line in temp]
    ref, _ = assert_same_page(page + "\n".join(extra) + "\n" + page.replace("DCGM_FI_DEV_SM_CLOCK{", "x_y{"),
                              scrape_ms=t * 1000)
    assert ref.unknown_dcgm["DCGM_FI_DEV_XID_ERRORS"] == len(temp) == ref.unknown_dcgm["DCGM_FI_DEV_MEM_CLOCK"]
    assert ref.skipped_other >= 2 * len(temp)
    assert sum("bad metric name" in r.reason for r in ref.rejects) == len(temp)


def test_label_cache_looked_up_by_hash_takes_only_the_same_text(sim_pages, monkeypatch):
    """The per-text cache is joined on the texts' hashes and a row counts only when its text is the
    same: a cached row with the right hash and another text is a miss; two cached rows with one
    hash send the lookup by text. Each time the page equals the reference's."""
    from gpuledger.ingest.metrics.exposition import bulk
    pages, t = sim_pages
    text = "".join(pages)
    monkeypatch.setattr(bulk, "_cache", None)
    monkeypatch.setattr(bulk, "_recent", ())
    assert_same_page(text, scrape_ms=t * 1000)
    filled = bulk._cache
    wrong = filled.with_columns(labels=pl.lit('UUID="GPU-other",Hostname="elsewhere"'),
                                gpu_uuid=pl.lit("GPU-other"))
    # every text a miss; then three hashes twice (a lookup by text) and five texts not cached
    for cache in (wrong, pl.concat([filled.slice(5), wrong.slice(5, 3)])):
        monkeypatch.setattr(bulk, "_cache", cache)
        monkeypatch.setattr(bulk, "_recent", ())
        assert_same_page(text, scrape_ms=t * 1000)
