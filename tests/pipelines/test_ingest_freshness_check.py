"""The fleet path's freshness check reads how far the samples reach, not the newest window's start:
the window still filling is stored with its coverage (prometheus/aggregate.py), and a window's
row is stamped at its start."""

from __future__ import annotations

from datetime import datetime

from gpuledger import warehouse
from gpuledger.facts.materialize import sql

PACKAGE = "gpuledger.pipelines.defs.ingest"


def test_the_newest_sample_is_where_the_windows_coverage_ends(tmp_path):
    path = tmp_path / "wh.duckdb"
    with warehouse.open_writer(path) as con:
        con.execute("INSERT INTO gpus (gpu_id, cluster, gpu_uuid, host, model) VALUES "
                    "(1, 'east', 'GPU-a', 'n1', 'H100'), (2, 'east', 'GPU-b', 'n1', 'H100')")
        # By hand: GPU-a's 09:55 window is whole (newest sample +299 s: 09:59:59); the window still
        # filling at 10:00 reaches +160 s on GPU-a (10:02:40) and +220 s on GPU-b (10:03:40): the
        # newest moment is 10:03:40, not the newest start, 10:00. A raw (scrape) sample at 10:01:30
        # is its own time, and another source's rows are not this one's.
        con.execute("INSERT INTO gpu_samples (gpu_id, ts, sample_n, covered_ms, source) VALUES "
                    "(1, '2026-12-01 09:55:00', 10, 299000, 'prometheus'), "
                    "(1, '2026-12-01 10:00:00', 6, 160000, 'prometheus'), "
                    "(2, '2026-12-01 10:00:00', 8, 220000, 'prometheus'), "
                    "(2, '2026-12-01 10:01:30', NULL, NULL, 'scrape')")
    with warehouse.open_reader(path) as con:
        newest = {s: con.execute(sql(PACKAGE, "newest_sample"), {"source": s}).fetchall()[0][0]
                  for s in ("prometheus", "scrape", "nvml")}
    assert newest == {"prometheus": datetime(2026, 12, 1, 10, 3, 40), "scrape": datetime(2026, 12, 1, 10, 1, 30),
                      "nvml": None}
