"""How the analytics entry points (reports.py, the benchmarks) collect their LazyFrames.

The in-memory engine: the analytics' frames are at most a few hundred thousand rows (the rollup,
allocation pieces, the samples of partial hours), where polars 2.1's default streaming engine
costs about twice as much per plan (benchmarks/analytics_bench.py, BENCHMARKS.md "Analytics")
and can sum in a different order on every run (see queries.usage_report).
"""

from __future__ import annotations

import polars as pl

ENGINE = "in-memory"


def collect(frame: pl.LazyFrame | pl.DataFrame) -> pl.DataFrame:
    """``frame`` collected with :data:`ENGINE` (a DataFrame is returned as it is)."""
    return frame if isinstance(frame, pl.DataFrame) else frame.collect(engine=ENGINE)
