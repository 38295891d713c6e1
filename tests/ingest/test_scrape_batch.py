"""A scrape round written in batches (``ingest_pages``: one transaction for many pages) stores exactly
what ingesting the same pages one by one stores: samples (a (device, ts) in two pages keeps the first
page's values), devices, and quarantine rows with each page's own location and line numbers."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import pytest
from polars.testing import assert_frame_equal

from gpuledger import warehouse
from gpuledger.ingest.metrics.scrape import FetchResult, ingest_page, ingest_pages, ingest_results
from gpuledger.simulator import build_cluster, metrics_page

CORPUS = Path(__file__).resolve().parents[1] / "fixtures" / "exposition" / "bad_corpus.prom"


def _pages():
    sim = build_cluster(seed=4, gpus=32, start=datetime(2026, 11, 30, 11), days=0.05)
    t = sim.start_s + 600
    a, b = metrics_page(sim, 0, t), metrics_page(sim, 1, t)
    # node 0's page again, same time, other values: its rows must not replace the first copy's
    a_again = a.replace("} 0.", "} 0.01").replace('DCGM_FI_DEV_GPU_UTIL{', 'DCGM_FI_DEV_GPU_UTIL{', 1)
    ms = t * 1000
    return [(a, "http://n0/metrics", ms), (CORPUS.read_text(), "http://bad/metrics", 1796040000000),
            (b, "http://n1/metrics", ms), (a_again, "http://n0b/metrics", ms)]


def _contents(path):
    with warehouse.open_reader(path) as con:
        samples = con.sql("SELECT g.gpu_uuid, g.mig_instance_id, s.* EXCLUDE (gpu_id) FROM gpu_samples s "
                          "JOIN gpus g USING (gpu_id) ORDER BY ALL").pl()
        gpus = con.sql("SELECT * EXCLUDE (gpu_id) FROM gpus ORDER BY cluster, gpu_uuid, mig_instance_id").pl()
        quarantine = con.sql("SELECT source, location, raw_text, reason FROM quarantine ORDER BY ALL").pl()
    return samples, gpus, quarantine


@pytest.mark.parametrize("bulk_from", [0, 10**9])  # all pages in one bulk parse / each page line by line
def test_batched_pages_store_what_page_by_page_stores(tmp_path, monkeypatch, bulk_from):
    from gpuledger.ingest.metrics import scrape
    monkeypatch.setattr(scrape, "BULK_FROM_CHARS", bulk_from)
    pages = _pages()
    one, many = tmp_path / "one.duckdb", tmp_path / "many.duckdb"
    with warehouse.open_writer(one) as con:
        single = [ingest_page(con, text, location=loc, scrape_ms=ms, cluster="c") for text, loc, ms in pages]
    with warehouse.open_writer(many) as con:
        batched = ingest_pages(con, pages, cluster="c")
    for got, want in zip(_contents(many), _contents(one), strict=True):
        assert_frame_equal(got, want)
    assert batched.samples_new == sum(s.samples_new for s in single) > 0
    assert batched.quarantined == sum(s.quarantined for s in single) == 14  # the corpus' bad lines
    assert batched.pages == 4 and batched.samples_parsed == sum(s.samples_parsed for s in single)
    # the repeated page's samples were parsed but none was new (first copy kept)
    assert single[3].samples_new == 0 < single[3].samples_parsed


@pytest.mark.parametrize(("batch_chars", "batches"), [(10**9, [4]), (1, [1, 1, 1, 1])])
def test_a_round_is_written_in_batches_and_failed_targets_still_recorded(tmp_path, monkeypatch, batch_chars,
                                                                         batches):
    from gpuledger.ingest.metrics import scrape
    pages = _pages()
    calls = []
    real = scrape.ingest_pages
    monkeypatch.setattr(scrape, "ingest_pages", lambda con, batch, **kw: calls.append(len(batch)) or real(con, batch, **kw))
    monkeypatch.setattr(scrape, "BATCH_CHARS", batch_chars)
    results = [FetchResult(loc, text, ms, 1) for text, loc, ms in pages]
    results.insert(2, FetchResult("http://down/metrics", None, 1796040000000, 4, "connection refused"))
    with warehouse.open_writer(tmp_path / "w.duckdb") as con:
        stats = ingest_results(con, results, cluster="c")
    assert calls == batches
    assert stats.failed_targets == 1 and stats.pages == 4 and stats.quarantined == 14
    with warehouse.open_reader(tmp_path / "w.duckdb") as con:
        assert con.execute("SELECT count(*) FROM quarantine WHERE location = 'http://down/metrics'").fetchone()[0] == 1
    assert _contents(tmp_path / "w.duckdb")[0].height == stats.samples_new


def test_later_rounds_update_changed_devices_only(tmp_path):
    """Round 2 changes one GPU's PCI bus id: that device's rows change (same gpu_id), every other
    device is left as it was (last_seen aside); a new GPU gets a new id."""
    text, loc, ms = _pages()[0]
    first_uuid = text.split('UUID="', 1)[1].split('"', 1)[0]
    changed = text.replace(f'UUID="{first_uuid}",pci_bus_id="', f'UUID="{first_uuid}",pci_bus_id="1')
    added = changed + text.split("\n")[2].replace(first_uuid, "GPU-new-one") + "\n"
    path = tmp_path / "w.duckdb"
    with warehouse.open_writer(path) as con:
        ingest_page(con, text, location=loc, scrape_ms=ms, cluster="c")
        before = con.sql("SELECT * FROM gpus ORDER BY gpu_id").pl()
        ingest_page(con, added, location=loc, scrape_ms=ms + 30_000, cluster="c")
        after = con.sql("SELECT * FROM gpus ORDER BY gpu_id").pl()
    assert after.height == before.height + 1 and after["gpu_uuid"][-1] == "GPU-new-one"
    kept = after.head(before.height)
    moved = kept.filter(kept["gpu_uuid"] == first_uuid)
    assert moved["pci_bus_id"].to_list() == ["1" + before.filter(before["gpu_uuid"] == first_uuid)["pci_bus_id"][0]] * moved.height
    others = ~kept["gpu_uuid"].is_in([first_uuid])
    assert_frame_equal(kept.filter(others).drop("last_seen"), before.filter(~before["gpu_uuid"].is_in([first_uuid])).drop("last_seen"))
    assert (kept["last_seen"] > before["last_seen"]).all()  # every device seen again 30 s later
