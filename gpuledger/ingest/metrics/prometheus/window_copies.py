"""One row per device and window from the several series a TSDB may hold for a device in a window.

A TSDB answers ``avg_over_time`` and its kin per series, and one device can have several series in
one window:

* one after another: dcgm-exporter's Kubernetes mapping gives a GPU a new series when the pod on it
  changes (``pod``, ``namespace``, ``container``), so the window where a job starts or ends holds the
  old series' last samples and the new one's first;
* side by side: with the Slurm mapping every series is copied once per job on the GPU (``hpc_job``),
  and a time-sliced GPU is reported once per pod; the copies carry the same readings.

The raw path keeps one reading per device and moment (the best copy); here, per device and window:
copies whose newest samples differ and whose counts together fit in one full window (the most
samples one series of the device's host has in any window of the chunk or the hour before it) are
taken for runs one after another and added
up — their sums and counts, so the window stands for every raw sample of each; otherwise they are
copies side by side and the one with the most samples stands for the window (ties: the newest, then
the best copy as the raw path ranks them). A run that overlaps another in part (a Slurm job that
ends as the next starts within one window) counts as side by side: the window then stands for the
longer run only, never for a sample twice.

The row's labels (pod, hpc_job...) are those of its newest run: who held the device at the
window's end.
"""

from __future__ import annotations

import polars as pl

from gpuledger.ingest.metrics.exposition.lines import JOB_ORDER

COUNT, NEWEST = "_count", "_newest"  # the helper answers' pseudo-metric names (windows.py)
_DEV = ["gpu_uuid", "mig_instance_id"]
_CELL = [*_DEV, "ts"]


def merge_copies(points: pl.DataFrame, series: pl.DataFrame, kinds: dict[str, str],
                 step_s: int, whole: pl.DataFrame | None = None) -> tuple[pl.DataFrame, pl.DataFrame]:
    """``points`` (metric, series, ts = window start, value; the COUNT and NEWEST answers among
    them, NEWEST in epoch seconds) and their ``series`` frame → (points with one series per
    device and window, the families' values merged; per device and window ``sample_n`` and
    ``covered_ms``: milliseconds from the window's start to its newest sample, NULL when unknown
    or outside the window). ``kinds``: family → ``avg``, ``max`` or ``last``. ``whole``: per device
    (gpu_uuid, mig_instance_id, ``full``) the most samples one of its series had in a window before
    the chunk, so a chunk of few windows still knows a full window."""
    prio = (series.sort([*_DEV, *JOB_ORDER], nulls_last=True, maintain_order=True)
            .with_row_index("_prio").select("series", pl.col("_prio").cast(pl.Int64), *_DEV, "host"))
    start_ms = pl.col("ts").dt.epoch("ms")
    runs = (points.filter(~pl.col("metric").is_in([COUNT, NEWEST])).select("series", "ts").unique()
            .join(points.filter(pl.col("metric") == COUNT).select("series", "ts", c=pl.col("value").round(0)),
                  on=["series", "ts"], how="left")
            .join(points.filter(pl.col("metric") == NEWEST)
                  .select("series", "ts", newest=(pl.col("value") * 1000).round(0).cast(pl.Int64)),
                  on=["series", "ts"], how="left")
            .join(prio, on="series")
            .with_columns(newest=pl.when((pl.col("newest") >= start_ms) & (pl.col("newest") < start_ms + step_s * 1000))
                          .then(pl.col("newest")))
            .with_columns(_full=pl.col("c").max().over(_DEV)))
    if whole is not None and not whole.is_empty():
        runs = (runs.join(whole.select(*_DEV, pl.col("full").cast(pl.Float64)), on=_DEV, how="left", nulls_equal=True)
                .with_columns(_full=pl.max_horizontal("_full", "full")).drop("full"))
    # one exporter scrapes a host's devices at one interval: a full window is the most any of them
    # had (a device whose pod changed in every window of the chunk and its context has none whole)
    runs = runs.with_columns(_full=pl.col("_full").max().over("host"))
    in_cell = pl.len().over(_CELL)
    one_after_another = ((in_cell > 1) & (pl.col("newest").n_unique().over(_CELL) == in_cell)
                         & pl.col("newest").is_not_null().all().over(_CELL)
                         & (pl.col("c").sum().over(_CELL) <= pl.col("_full")))
    best = pl.col("series") == pl.col("series").sort_by(
        [pl.col("c").fill_null(0), pl.col("newest").fill_null(-1), pl.col("_prio")],
        descending=[True, True, False]).first().over(_CELL)
    chosen = runs.filter(one_after_another | best).with_columns(_w=pl.col("c").fill_null(1))
    per_cell = chosen.group_by(_CELL).agg(
        sample_n=pl.when(pl.col("c").is_not_null().all()).then(pl.col("c").sum()).cast(pl.Int32),
        covered_ms=(pl.col("newest").max() - pl.col("ts").first().dt.epoch("ms")).cast(pl.Int32),
        _rep=pl.col("series").sort_by([pl.col("newest").fill_null(-1), -pl.col("_prio")]).last(),
    )
    values = points.filter(~pl.col("metric").is_in([COUNT, NEWEST])).join(
        chosen.select("series", "ts", *_DEV, "_w", "newest"), on=["series", "ts"])
    kind = pl.col("metric").replace_strict(kinds, default="avg")
    v = pl.col("value")
    merged = (values.group_by("metric", *_CELL).agg(
        _avg=(v * pl.col("_w")).sum() / pl.col("_w").sum(), _max=v.max(),
        _last=v.sort_by(pl.col("newest").fill_null(-1)).last())
        .with_columns(value=pl.when(kind == "max").then("_max").when(kind == "last").then("_last").otherwise("_avg"))
        .join(per_cell.select(*_CELL, "_rep"), on=_CELL)
        .select("metric", pl.col("_rep").alias("series"), "ts", "value"))
    return merged, per_cell.select(*_CELL, "sample_n", "covered_ms")
