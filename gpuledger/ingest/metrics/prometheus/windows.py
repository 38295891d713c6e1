"""One chunk of window aggregates from a TSDB: the PromQL per DCGM family, and the rows it makes.

A row stands for the raw samples of one device in one window [s, s + step), stamped at the window's
start s, as a raw sample is stamped at its own moment and counted forward from it (attribution
counts a row in a piece when piece_start <= ts < piece_end). Windows of 1 to 5 minutes nest in
hours, so the hourly rollups and any allocation edge on the window grid see exactly the raw samples
the windows stand for. Each window is asked at t = s + step as ``f(M[step] offset 1ms)``: the range
(t - step - 1 ms, t - 1 ms] on Prometheus 3 and VictoriaMetrics, [t - step - 1 ms, t - 1 ms] on
Prometheus 2 — for samples on whole milliseconds of a whole second the same window, [s, t), on each.

Per window and device:

* ``avg_over_time`` of the activity fields (SM, graphics engine, tensor, DRAM, GPU util) and power;
* ``max_over_time`` of framebuffer used (the window's peak: what a job held);
* ``last_over_time`` of framebuffer free / reserved and of the energy counter (the warehouse takes
  reset-aware increments between rows: ``increase`` without its extrapolation to the edges);
* ``count_over_time`` of the best activity field present: the raw samples the row stands for
  (``gpu_samples.sample_n``), so every figure weights it by the time it covers;
* ``timestamp(M offset 1ms)`` of that field: its newest sample (within the server's 5-minute
  lookback, which holds any window of at most 5 minutes), so the row says how far it reaches
  (``gpu_samples.covered_ms``) and "now" is the newest raw sample, not the last window's start.

``selector`` (PromQL label matchers, e.g. ``cluster="east"``) narrows every query to one cluster's
series in a TSDB holding several.

The sample count is also asked for ``CONTEXT_WINDOWS`` windows before the chunk, not stored: how
many samples a device's window holds when whole is what tells a pod's series ending and the next
beginning inside a window (added up) from copies side by side (one counted; window_copies), and a
chunk of one or two windows — a pipelines' pass every minute — cannot say it by itself (measured:
one-window chunks of a simulated day left 29 of 192 GPU-hours a sample short).
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait

import polars as pl

from gpuledger.ingest.metrics import dcgm_fields as dcgm
from gpuledger.ingest.metrics.exposition import series_long_to_wide
from gpuledger.ingest.metrics.plausible import refuse_host_conflicts
from gpuledger.ingest.metrics.prometheus.client import (
    NotPrometheusAnswer,
    get_body,
    matrix_result,
    parse_json,
    series_in_range,
)
from gpuledger.ingest.metrics.prometheus.decode import SOURCE, points_from_results, refuse_outside_range
from gpuledger.ingest.metrics.prometheus.window_copies import COUNT, NEWEST, merge_copies
from gpuledger.rules.activity import SIGNAL_NAMES

_AVG = {"sm_active", "gr_engine_active", "tensor_active", "dram_active", "gpu_util", "power"}
_MAX = {"fb_used"}
_LAST = {"fb_free", "fb_reserved", "energy"}
_DEVICE = ["gpu_uuid", "mig_instance_id", "ts"]
CONTEXT_WINDOWS = 12  # an hour of 5-minute windows; fewer than 50 points with one window (VictoriaMetrics
# moves an unaligned range of 50 or more points for its cache, and a filling window's grid is unaligned)


def window_function(metric: str) -> str | None:
    """The ``*_over_time`` a family is aggregated with; None for families not stored."""
    meaning = dcgm.FIELDS_BY_METRIC[metric].meaning
    return ("avg_over_time" if meaning in _AVG else "max_over_time" if meaning in _MAX
            else "last_over_time" if meaning in _LAST else None)


def coverage_metric(metrics: Sequence[str]) -> str | None:
    """The activity metric whose sample count says how many raw samples a window holds: the best
    signal the exporter has (rules.activity: the one the figures use), so its sum and count, and
    so the activity the analytics take from it, are the raw samples' exactly; a window where a
    worse signal has blanks the best one has not weighs that signal's mean by the best one's count."""
    for meaning in SIGNAL_NAMES:
        for m in metrics:
            if dcgm.FIELDS_BY_METRIC[m].meaning == meaning:
                return m
    return None


def window_queries(metrics: Sequence[str], step_s: int, selector: str = "") -> dict[str, str]:
    """{family or its role: PromQL} for one window of ``step_s`` ending at each grid point."""
    sel = f"{{{selector}}}" if selector else ""
    window = f"[{step_s}s] offset 1ms"
    asked = {m: f"{window_function(m)}({m}{sel}{window})" for m in metrics if window_function(m)}
    cover = coverage_metric(list(asked))
    if cover:
        asked[COUNT] = f"count_over_time({cover}{sel}{window})"
        asked[NEWEST] = f"timestamp({cover}{sel} offset 1ms)"
    return asked


def _query(session, url: str, query: str, a: int, b: int, step_s: int, kw: dict) -> list[dict]:
    """query_range over the grid points a + step, ..., <= b. An answer with warnings (a partial
    response) raises PrometheusError naming them (client.parse_json)."""
    endpoint = f"{url.rstrip('/')}/api/v1/query_range"
    # partial_response=false: Thanos Query fails instead of answering without a store
    params = {"query": query, "start": a + step_s, "end": b, "step": step_s, "partial_response": "false"}
    status, content = get_body(session, endpoint, params, **kw)
    return matrix_result(parse_json(endpoint, params, status, content), endpoint)


def _fetch_decoded(session, url: str, asked: dict[str, str], a: int, b: int, step_s: int, *, kw: dict,
                   pool: ThreadPoolExecutor, concurrency: int,
                   starts: dict[str, int] | None = None) -> tuple[pl.DataFrame, pl.DataFrame, list]:
    """Every answer of ``asked`` decoded into one (points, series) pair. At most ``concurrency``
    answers are asked or held at once, each decoded into compact columns as it arrives and its
    JSON let go: a chunk's peak is its points, not every family's parsed JSON at once. ``starts``:
    an earlier first window for some of them (the count's context)."""
    todo, running, parts, rejects = list(asked.items()), {}, [], []
    while todo or running:
        while todo and len(running) < max(1, concurrency):
            name, query = todo.pop(0)
            first = (starts or {}).get(name, a)
            running[pool.submit(_query, session, url, query, first, b, step_s, kw)] = name
        done, _ = wait(running, return_when=FIRST_COMPLETED)
        for job in done:
            name = running.pop(job)
            points, series, refused = points_from_results({name: job.result()}, url=url)
            parts.append((points, series))
            rejects += refused  # NaN, no UUID, duplicate series: quarantined, as the raw backfill does
    # one number per series across the answers: the same labels are the same series
    labels = [c for c in parts[0][1].columns if c != "series"] if parts else []
    series = (pl.concat([s.drop("series") for _, s in parts]).unique(maintain_order=True)
              .with_row_index("series").with_columns(pl.col("series").cast(pl.Int64))) if parts else None
    points = []
    for part_points, part_series in parts:
        renumber = part_series.join(series, on=labels, how="left", nulls_equal=True, suffix="_all").select(
            "series", "series_all")
        points.append(part_points.join(renumber, on="series").drop("series").rename({"series_all": "series"})
                      .select("metric", "series", "ts", "value"))
    if not parts:
        return (*points_from_results({}, url=url)[:2], rejects)
    return pl.concat(points), series, rejects


def count_series(session, url: str, metrics: Sequence[str], a: int, b: int, kw: dict, selector: str = "") -> int:
    """How many series of the coverage family (one a device and job copy) [a, b) holds: the most
    any chunk inside it can hold, which its memory grows with."""
    cover = coverage_metric([m for m in metrics if window_function(m)]) or metrics[0]
    return series_in_range(session, url, f"{cover}{{{selector}}}" if selector else cover, a, b, kw)


def aggregate_chunk(session, url: str, metrics: Sequence[str], a: int, b: int, step_s: int, *,
                    kw: dict, pool: ThreadPoolExecutor, selector: str = "",
                    concurrency: int = 4) -> tuple[pl.DataFrame, list]:
    """(one chunk's wide frame, quarantine rows): a row per (device, window start) in [a, b) with
    the gpu_samples columns, ``sample_n`` and ``covered_ms`` (a device's several series in a window:
    window_copies). ``a`` and ``b`` on the window grid. Refused, as by the raw backfill: series
    without a UUID, NaN or out-of-range values, duplicate series (decode), points outside [a, b)
    and a UUID's second host (plausible.py)."""
    asked = window_queries(metrics, step_s, selector)
    # the helpers decoded under their roles, not the family's name: a count or an epoch time is no
    # reading of that family
    points, series, rejects = _fetch_decoded(session, url, asked, a, b, step_s, kw=kw, pool=pool,
                                             concurrency=concurrency, starts={COUNT: a - CONTEXT_WINDOWS * step_s})
    points = points.with_columns(pl.col("ts") - pl.duration(seconds=step_s))  # the window's start
    before = (pl.col("metric") == COUNT) & (pl.col("ts").cast(pl.Int64) < a * 1000)
    whole = (points.filter(before).join(series.select("series", "gpu_uuid", "mig_instance_id"), on="series")
             .group_by("gpu_uuid", "mig_instance_id").agg(full=pl.col("value").round(0).max()))
    points = points.filter(~before)
    points, outside = refuse_outside_range(points, series, a, b, url=url)
    points, conflicts = refuse_host_conflicts(points, series, source=SOURCE, location=url)
    rejects = [*rejects, *outside, *conflicts]
    kinds = {m: window_function(m).removesuffix("_over_time") for m in asked if m not in (COUNT, NEWEST)}
    if COUNT not in asked:
        wide = series_long_to_wide(points, series)
        return wide.with_columns(pl.lit(None, pl.Int32).alias("sample_n"),
                                 pl.lit(None, pl.Int32).alias("covered_ms")), rejects
    merged, per_cell = merge_copies(points, series, kinds, step_s, whole=whole)
    wide = series_long_to_wide(merged, series)
    if wide.is_empty():
        return wide.with_columns(pl.lit(None, pl.Int32).alias("sample_n"),
                                 pl.lit(None, pl.Int32).alias("covered_ms")), rejects
    return wide.join(per_cell.with_columns(pl.col("ts").cast(pl.Datetime("us"))), on=_DEVICE, how="left"), rejects
