"""Window aggregates from the fleet's TSDB (issue 20): ``ingest prometheus --aggregate 5m``.

At fleet scale the raw DCGM series stay in the TSDB the site runs (Prometheus, Thanos Query,
Mimir / Cortex, VictoriaMetrics) and gpuledger pulls one row per GPU and window instead, as
OpenCost does: per window of ``step`` (1-5 minutes) ending at each grid point t, over (t - step, t]:

* ``avg_over_time`` of the activity fields (SM, graphics engine, tensor, DRAM, GPU util) and power;
* ``max_over_time`` of framebuffer used (the window's peak: what a job held);
* ``last_over_time`` of framebuffer free / reserved and of the energy counter: the warehouse keeps
  energy as a counter and takes reset-aware increments between rows, which is ``increase`` without
  its extrapolation to the window's edges (exact where increase would estimate);
* ``count_over_time`` of the activity field present: the raw samples the row stands for
  (``gpu_samples.sample_n``), so every figure weights it by the time it covers.

The row is stored at the window's start (t - step). Queries run per chunk of at most a day, the
chunk's queries ``concurrency`` at a time; each chunk is written with its checkpoint (resumable).
Any answer with ``warnings`` (a Thanos store or a Mimir querier that did not answer, a partial
response) is an error naming them, and the chunk stays undone: never a silent hole.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime

import polars as pl

from gpuledger import warehouse
from gpuledger.deadlines import PROMETHEUS, CallDeadline
from gpuledger.errors import UsageError
from gpuledger.ingest import DEFAULT_CLUSTER
from gpuledger.ingest.metrics import dcgm_fields as dcgm
from gpuledger.ingest.metrics.exposition import series_long_to_wide
from gpuledger.ingest.metrics.prometheus.client import (
    get_body,
    parse_json,
    check_base_url,
    discover_metrics,
    matrix_result,
)
from gpuledger.ingest.metrics.prometheus.decode import SOURCE, points_from_results
from gpuledger.ingest.metrics.writes import store_wide

MAX_CHUNK_S = 86_400  # at most a day per query, as OpenCost asks
MIN_STEP_S, MAX_STEP_S = 60, 300
_AVG = {"sm_active", "gr_engine_active", "tensor_active", "dram_active", "gpu_util", "power"}
_MAX = {"fb_used"}
_LAST = {"fb_free", "fb_reserved", "energy"}
_COVERAGE_ORDER = ("gpu_util", "gr_engine_active", "sm_active")  # whichever the exporter has


def _function(metric: str) -> str | None:
    meaning = dcgm.FIELDS_BY_METRIC[metric].meaning
    return ("avg_over_time" if meaning in _AVG else "max_over_time" if meaning in _MAX
            else "last_over_time" if meaning in _LAST else None)


def coverage_metric(metrics: Sequence[str]) -> str | None:
    """The activity metric whose sample count says how many raw samples a window holds."""
    for meaning in _COVERAGE_ORDER:
        for m in metrics:
            if dcgm.FIELDS_BY_METRIC[m].meaning == meaning:
                return m
    return None


@dataclass
class AggregateStats:
    chunks_total: int = 0
    chunks_done: int = 0
    chunks_skipped: int = 0
    rows_new: int = 0
    metrics: list[str] = field(default_factory=list)


def _query(session, url: str, query: str, a: int, b: int, step_s: int, kw: dict) -> list[dict]:
    """query_range over the grid points a + step, ..., <= b. An answer with warnings (a partial
    response) raises PrometheusError naming them (client.parse_json)."""
    endpoint = f"{url.rstrip('/')}/api/v1/query_range"
    # partial_response=false: Thanos Query fails instead of answering without a store
    params = {"query": query, "start": a + step_s, "end": b, "step": step_s, "partial_response": "false"}
    status, content = get_body(session, endpoint, params, **kw)
    return matrix_result(parse_json(endpoint, params, status, content), endpoint)


def _iso(epoch_s: float) -> str:
    return datetime.fromtimestamp(epoch_s, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def aggregate_chunk(session, url: str, metrics: Sequence[str], a: int, b: int, step_s: int, *,
                    kw: dict, pool: ThreadPoolExecutor) -> pl.DataFrame:
    """One chunk's wide frame: a row per (device, window start) with the gpu_samples columns and
    ``sample_n``."""
    # (t - step, t]: Prometheus 2 closes a range at both ends, so a whole step would count the
    # sample on the boundary in two windows; a millisecond less is the same window on every server
    window = f"[{step_s * 1000 - 1}ms]"
    asked = {m: f"{_function(m)}({m}{window})" for m in metrics if _function(m)}
    cover = coverage_metric(list(asked))
    jobs = {m: pool.submit(_query, session, url, q, a, b, step_s, kw) for m, q in asked.items()}
    counted = pool.submit(_query, session, url, f"count_over_time({cover}{window})", a, b, step_s, kw) if cover else None
    results = {m: job.result() for m, job in jobs.items()}
    points, series, _rejects = points_from_results(results, url=url)
    back = pl.duration(seconds=step_s)
    points = points.with_columns(pl.col("ts") - back)  # the window's start
    wide = series_long_to_wide(points, series)
    if counted is None or wide.is_empty():
        return wide.with_columns(pl.lit(None, pl.Int32).alias("sample_n"))
    c_points, c_series, _ = points_from_results({cover: counted.result()}, url=url)
    counts = (c_points.join(c_series.select("series", "gpu_uuid", "mig_instance_id"), on="series")
              .select("gpu_uuid", "mig_instance_id",
                      (pl.col("ts") - back).cast(pl.Datetime("us")).alias("ts"),
                      pl.col("value").round(0).cast(pl.Int32).alias("sample_n"))
              .group_by("gpu_uuid", "mig_instance_id", "ts").agg(pl.col("sample_n").max()))
    return wide.join(counts, on=["gpu_uuid", "mig_instance_id", "ts"], how="left")


def aggregate(
    url: str, start: datetime, end: datetime, *, step_s: int = 300, chunk_s: int = MAX_CHUNK_S,
    warehouse_path=None, cluster: str = DEFAULT_CLUSTER, concurrency: int = 4,
    tenant: str | None = None, deadline: CallDeadline = PROMETHEUS, retries: int = 3,
    backoff_s: float = 1.0, on_chunk: Callable[[int, int, AggregateStats], None] | None = None,
    headers: dict[str, str] | None = None,
) -> AggregateStats:
    """Pull ``step``-window aggregates of [start, end) (naive UTC) into the warehouse; resumes
    after the last chunk done. ``headers``: tenant / bearer token (auth.auth_headers); ``tenant``
    alone: Mimir / Cortex ``X-Scope-OrgID``."""
    from gpuledger.ingest.metrics.prometheus.backfill import epoch_seconds, checkpoint_scope, read_checkpoint
    from gpuledger.ingest.metrics.prometheus.client import new_session

    url = check_base_url(url)
    if not MIN_STEP_S <= step_s <= MAX_STEP_S:
        raise UsageError(f"--aggregate {step_s}s: choose 1m to 5m (windows the dashboards and "
                         "squatting still resolve)")
    start_s, end_s = int(epoch_seconds(start)), int(epoch_seconds(end))
    if end_s <= start_s:
        raise UsageError(f"--end {_iso(end_s)} must be after --start {_iso(start_s)}")
    chunk_s = max(step_s, min(chunk_s, MAX_CHUNK_S) // step_s * step_s)
    first = -(-start_s // step_s) * step_s
    chunks = [(a, min(a + chunk_s, end_s)) for a in range(first, end_s, chunk_s)]
    scope = checkpoint_scope(url, start, end, step_s) + " aggregate"
    with warehouse.open_writer(warehouse_path) as con:
        position = read_checkpoint(con, scope)
    done_s = int(epoch_seconds(datetime.fromisoformat(position.replace("Z", "+00:00")))) if position else None
    session = new_session(False, headers)
    if tenant:
        session.headers["X-Scope-OrgID"] = tenant
    kw = {"deadline": deadline, "retries": retries, "backoff_s": backoff_s}
    metrics = [m for m in discover_metrics(session, url, **kw) if _function(m)]
    stats = AggregateStats(chunks_total=len(chunks), metrics=metrics)
    if not metrics:
        from gpuledger.ingest.metrics.prometheus.client import NotPrometheusAnswer

        raise NotPrometheusAnswer(f"{url} holds no DCGM series to aggregate; nothing was recorded")
    with ThreadPoolExecutor(max_workers=max(1, concurrency)) as pool:
        for a, b in chunks:
            if done_s is not None and b <= done_s:
                stats.chunks_skipped += 1
                continue
            try:
                wide = aggregate_chunk(session, url, metrics, a, b, step_s, kw=kw, pool=pool)
            except Exception as exc:
                if hasattr(exc, "undone_from"):
                    exc.undone_from = _iso(a)
                raise
            # windows that begin inside [a, b) only (the last grid point's window may start at b - step)
            wide = wide.filter(pl.col("ts") < datetime.fromtimestamp(b, UTC).replace(tzinfo=None))
            with warehouse.open_writer(warehouse_path) as con, warehouse.transaction(con):
                stats.rows_new += store_wide(con, wide, cluster=cluster, source=SOURCE)
                warehouse.upsert(con, "ingest_checkpoints", pl.DataFrame({
                    "source": [SOURCE], "scope": [scope], "position": [_iso(b)],
                    "updated_at": [datetime.now(UTC).replace(tzinfo=None)]}))
            stats.chunks_done += 1
            if on_chunk:
                on_chunk(b, len(chunks), stats)
    return stats
