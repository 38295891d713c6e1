"""Backfilling DCGM samples from a Prometheus server's HTTP API, resumable after any interruption.

For each time chunk, ONE ``/api/v1/query_range`` call asks for
``last_over_time({__name__=~"M1|M2|..."}[step - 1ms])`` (every catalogued DCGM metric the server
holds; ``last_over_time`` keeps ``__name__``, and a server that drops it is asked per metric instead)
on a grid aligned to ``step`` (epoch-aligned).
So each grid point t carries the last raw sample in (t - step, t]: exactly the sample when the
exporter's timestamps sit on the grid, one sample per step otherwise, and *nothing* where the scrape
had a gap (a plain ``METRIC`` query would repeat the previous value for 5 minutes of lookback and
invent samples). Chunks keep responses small and under Prometheus' 11,000 points per series.

Speed (benchmarks/ingest_bench.py, BENCHMARKS.md "Ingestion"): chunks are fetched and decoded on
``workers`` threads ahead of the writes; responses are decoded with orjson, uncompressed by default,
with the cyclic GC paused (millions of small acyclic lists); the points are flattened and parsed in
bulk (polars) and pivoted on integer keys (``series_long_to_wide``); one writer connection serves
several chunks (released every ``WRITER_HOLD_S`` so other writers get in).

Each chunk is written in its own writer transaction together with its ``ingest_checkpoints`` row
(source ``prometheus``, scope = URL + range + step, position = the chunk's end), so a SIGKILL leaves
either the whole chunk and its checkpoint or neither; a rerun continues after the last chunk.

Labels: Prometheus renames a series' labels that collide with target labels to ``exported_*``
(``exported_pod``, ``exported_namespace``...). When any series of a scrape target (``instance``,
``job``) carries an ``exported_*`` Kubernetes label, that target's plain ``pod`` / ``namespace`` /
``container`` labels name the exporter's own pod, not the GPU's workload, and are ignored for it.
"""

from __future__ import annotations

import contextlib
import gc
import math
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from itertools import chain
from operator import itemgetter

import numpy as np
import orjson
import polars as pl
import requests

import warehouse
from gpuledger import dcgm
from gpuledger.ingest.dcgm_writes import store_wide
from gpuledger.ingest.exposition_parser import (FIELD_CHECKS, normalize_labels, series_frame,
                                                 series_long_to_wide)

SOURCE = "prometheus"
MAX_POINTS_PER_SERIES = 11_000  # Prometheus refuses query_range beyond this resolution
DEFAULT_CHUNK_S = 3600
DEFAULT_CLUSTER = "default"
WRITER_HOLD_S = 20.0  # longest a backfill keeps the writer lock before letting other writers in
_K8S_EXPORTED = ("exported_namespace", "exported_pod", "exported_container", "exported_pod_name",
                 "exported_pod_namespace", "exported_container_name")

# Metrics worth asking for: those that feed a gpu_samples column (fb free/reserved feed fb_total).
BACKFILL_METRICS = tuple(f.metric for f in dcgm.FIELDS
                         if f.column is not None or f.meaning in dcgm.FB_PARTS)


class PrometheusError(RuntimeError):
    """The server refused or failed a query after retries; the message names the query."""


@dataclass
class BackfillStats:
    chunks_total: int = 0
    chunks_done: int = 0
    chunks_skipped: int = 0  # already done by an earlier, interrupted run
    points: int = 0
    samples_new: int = 0
    quarantined: int = 0
    metrics: list[str] = field(default_factory=list)


def _iso(epoch_s: float) -> str:
    return datetime.fromtimestamp(epoch_s, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _epoch_s(moment: datetime) -> float:
    return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).timestamp()


def checkpoint_scope(url: str, start: datetime, end: datetime, step_s: int) -> str:
    """The ingest_checkpoints scope of one backfill: the server and the exact range and step."""
    return f"{url.rstrip('/')} [{_iso(_epoch_s(start))}, {_iso(_epoch_s(end))}) step={step_s}s"


def chunk_bounds(start_s: int, end_s: int, step_s: int, chunk_s: int) -> list[tuple[int, int]]:
    """[a, b) chunks on the step grid covering [start_s, end_s): a grid point t is in one chunk
    only. ``chunk_s`` is rounded down to whole steps and capped at 11,000 points."""
    if step_s <= 0:
        raise ValueError(f"step must be positive, not {step_s} s")
    first = math.ceil(start_s / step_s) * step_s
    width = max(step_s, min(chunk_s - chunk_s % step_s, step_s * MAX_POINTS_PER_SERIES))
    return [(a, min(a + width, end_s)) for a in range(first, end_s, width)]


def _get_json(session: requests.Session, url: str, params: dict, *, timeout_s: float, retries: int,
              backoff_s: float) -> dict:
    error = None
    for attempt in range(retries + 1):
        try:
            response = session.get(url, params=params, timeout=timeout_s)
            if response.status_code < 500:
                try:
                    body = orjson.loads(response.content)  # several times faster than json / requests
                except orjson.JSONDecodeError:
                    raise PrometheusError(f"{url} {params}: HTTP {response.status_code}, not JSON: "
                                          f"{response.text[:200]}") from None
                if body.get("status") != "success":
                    raise PrometheusError(f"{url} {params}: {body.get('errorType')}: {body.get('error')}")
                return body["data"]
            error = f"HTTP {response.status_code}: {response.text[:200]}"
        except (requests.Timeout, requests.ConnectionError) as exc:
            error = f"{type(exc).__name__}: {exc}"
        if attempt < retries:
            time.sleep(backoff_s * 2 ** attempt)
    raise PrometheusError(f"{url} {params}: {error} (after {retries + 1} attempts)")


def discover_metrics(session: requests.Session, url: str, **kw) -> list[str]:
    """The catalogued DCGM metrics the server has series for (both field generations)."""
    names = set(_get_json(session, f"{url.rstrip('/')}/api/v1/label/__name__/values", {}, **kw))
    return [m for m in BACKFILL_METRICS if m in names]


def _range_params(selector: str, a: int, b: int, step_s: int) -> dict:
    last = a + ((b - 1 - a) // step_s) * step_s
    return {"query": f"last_over_time({selector}[{step_s * 1000 - 1}ms])", "start": a, "end": last,
            "step": step_s}


def query_chunk(session, url: str, metric: str, a: int, b: int, step_s: int, **kw) -> list[dict]:
    """Raw query_range result for one metric on the grid points a, a+step, ... < b."""
    if b <= a:
        return []
    params = _range_params(f'{{__name__="{metric}"}}', a, b, step_s)
    data = _get_json(session, f"{url.rstrip('/')}/api/v1/query_range", params, **kw)
    return data.get("result", [])


def query_chunk_all(session, url: str, metrics: Sequence[str], a: int, b: int, step_s: int,
                    **kw) -> dict[str, list[dict]] | None:
    """{metric: query_range result} for all ``metrics`` with ONE query (a ``__name__`` regex), on the
    grid points a, a+step, ... < b. ``last_over_time`` keeps ``__name__`` (Prometheus >= 2.26), so the
    series still say which metric they are; None when this server drops it (then ask per metric)."""
    out: dict[str, list[dict]] = {m: [] for m in metrics}
    if b <= a or not metrics:
        return out
    names = "|".join(m for m in metrics)  # catalogued names: [A-Z0-9_] only, nothing to escape
    params = _range_params(f'{{__name__=~"{names}"}}', a, b, step_s)
    data = _get_json(session, f"{url.rstrip('/')}/api/v1/query_range", params, **kw)
    for s in data.get("result", []):
        name = s["metric"].get("__name__")
        if name not in out:
            return None
        out[name].append(s)
    return out


def long_from_results(results: dict[str, list[dict]], *, url: str) -> tuple[pl.DataFrame, list]:
    """{metric: query_range result} -> (long samples like ``parse_exposition``'s, quarantine rows)."""
    points, series, rejects = points_from_results(results, url=url)
    return points.join(series, on="series", how="left").drop("series"), rejects


def points_from_results(results: dict[str, list[dict]], *,
                        url: str) -> tuple[pl.DataFrame, pl.DataFrame, list]:
    """{metric: query_range result} -> (good samples: metric, series, ts, value; the ``series_frame``
    they point into; quarantine rows). The points are flattened and parsed in bulk (polars), not one
    Python float at a time."""
    # targets whose plain k8s labels are the target's own (Prometheus renamed the exporter's)
    renamed_targets = {(s["metric"].get("instance"), s["metric"].get("job"))
                       for series in results.values() for s in series
                       if any(k in s["metric"] for k in _K8S_EXPORTED)}
    cache: dict[tuple, int | str] = {}
    rows: list[tuple] = []
    metric_names = list(results)
    # one entry per kept series; the points are flattened once, in C, below
    series_metric: list[int] = []
    series_key: list[int] = []
    lengths: list[int] = []
    point_lists: list[list] = []
    rejects: list[warehouse.QuarantineRow] = []
    for metric_no, (metric, series) in enumerate(results.items()):
        for s in series:
            labels = s["metric"]
            drop = (labels.get("instance"), labels.get("job")) in renamed_targets
            key_labels = (drop, tuple(sorted((k, v) for k, v in labels.items() if k != "__name__")))
            key = cache.get(key_labels)
            if key is None:
                try:
                    key = len(rows)
                    rows.append(normalize_labels(labels, drop_plain_k8s=drop))
                except ValueError as exc:
                    key = str(exc)
                cache[key_labels] = key
            values = s.get("values") or []
            if isinstance(key, str):
                rejects.append(warehouse.QuarantineRow(
                    SOURCE, f"{url} {metric}", f"{metric}{labels} ({len(values)} points)", key))
                continue
            if values:
                series_metric.append(metric_no)
                series_key.append(key)
                lengths.append(len(values))
                point_lists.append(values)
    if point_lists:
        points = list(chain.from_iterable(point_lists))  # [[t, "v"], ...]
        per_series = np.arange(len(lengths)).repeat(lengths)
        frame = pl.DataFrame({
            "metric": pl.Series(metric_names, dtype=pl.String).gather(
                np.asarray(series_metric, dtype=np.int64)[per_series]),
            "series": pl.Series(np.asarray(series_key, dtype=np.int64)[per_series]),
            # Prometheus timestamps are seconds (int or float), values strings ("NaN", "+Inf" too)
            "ts": _epoch_ms(list(map(itemgetter(0), points))),
            "value": pl.Series(list(map(itemgetter(1), points)), dtype=pl.String).cast(pl.Float64),
        })
    else:
        frame = pl.DataFrame(schema={"metric": pl.String, "series": pl.Int64, "ts": pl.Int64,
                                     "value": pl.Float64})
    frame = frame.with_columns(pl.col("ts").cast(pl.Datetime("ms")))
    series = series_frame(rows)
    good, bad = split_invalid(frame)
    if bad.height:
        bad = bad.join(series, on="series", how="left")
    for r in bad.iter_rows(named=True):
        where = f"{url} {r['metric']}{{UUID={r['gpu_uuid']},GPU_I_ID={r['mig_instance_id']}}}@{r['ts']:%Y-%m-%dT%H:%M:%S.%fZ}"
        rejects.append(warehouse.QuarantineRow(
            SOURCE, where, f"{r['metric']} {r['value']!r} {r['ts']:%Y-%m-%dT%H:%M:%S.%fZ}", r["reason"]))
    return good, series, rejects


def _epoch_ms(seconds: list) -> pl.Series:
    """Prometheus timestamps (whole seconds come as ints, others as floats) -> epoch ms."""
    try:
        return pl.Series(seconds, dtype=pl.Int64) * 1000
    except (TypeError, pl.exceptions.PolarsError):
        return (pl.Series(seconds, dtype=pl.Float64, strict=False) * 1000).round().cast(pl.Int64)


def split_invalid(long: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(good, bad + reason) by the same rules as the scrape parser: non-finite, negative or
    implausible values are bad; DCGM blanks are good (they become NULL)."""
    checks = pl.DataFrame(
        [(m, lo, hi, t) for m, (lo, hi, t, _, _) in FIELD_CHECKS.items()],
        schema={"metric": pl.String, "_lo": pl.Float64, "_hi": pl.Float64, "_type": pl.String},
        orient="row")
    v = pl.col("value")
    blank = ((v >= dcgm.SENTINEL_FLOOR)
             | ((pl.col("_type") == "fp64") & (v >= dcgm.DCGM_FP64_BLANK))
             | ((pl.col("_type") == "int32") & (v >= dcgm.DCGM_INT32_BLANK) & (v <= 0x7FFFFFFF)))
    reason = (pl.when(~v.is_finite()).then(pl.lit("non-finite value"))
              .when(blank).then(None)
              .when(v < pl.col("_lo")).then(pl.format("value {} below the plausible range", v))
              .when(v > pl.col("_hi")).then(pl.format("value {} above the plausible range", v))
              .otherwise(None))
    tagged = long.join(checks, on="metric", how="left").with_columns(reason.alias("reason"))
    good = tagged.filter(pl.col("reason").is_null()).drop("_lo", "_hi", "_type", "reason")
    bad = tagged.filter(pl.col("reason").is_not_null()).drop("_lo", "_hi", "_type")
    return good, bad


def read_checkpoint(con, scope: str) -> str | None:
    rows = con.execute("SELECT position FROM ingest_checkpoints WHERE source = ? AND scope = ?",
                       [SOURCE, scope]).fetchall()
    return rows[0][0] if rows else None


def backfill(
    url: str,
    start: datetime,
    end: datetime,
    *,
    step_s: int = 30,
    chunk_s: int = DEFAULT_CHUNK_S,
    warehouse_path=None,
    cluster: str = DEFAULT_CLUSTER,
    metrics: Sequence[str] | None = None,
    workers: int = 2,
    timeout_s: float = 60.0,
    retries: int = 3,
    backoff_s: float = 1.0,
    on_chunk: Callable[[int, int, BackfillStats], None] | None = None,
    compress: bool = False,
) -> BackfillStats:
    """Pull DCGM samples in [start, end) (naive UTC) from the Prometheus at ``url`` into the
    warehouse; resumes after the last chunk an earlier run finished. ``on_chunk(end_s, total, stats)``
    is called after each chunk commits. Raises PrometheusError when the server keeps failing (rerun
    to continue). ``workers``: chunks fetched and decoded ahead of the writes (each holds one chunk's
    response in memory, ~300 MB for 1,024 GPUs x 1 h). ``compress``: ask for gzip (worth it only
    over a slow link; on the same host it costs Prometheus and the decoder ~2x CPU)."""
    start_s, end_s = int(_epoch_s(start)), int(_epoch_s(end))
    if end_s <= start_s:
        raise ValueError(f"--end {_iso(end_s)} must be after --start {_iso(start_s)}")
    scope = checkpoint_scope(url, start, end, step_s)
    with warehouse.open_writer(warehouse_path, publish=False) as con:
        position = read_checkpoint(con, scope)
    done_s = int(_epoch_s(datetime.fromisoformat(position.replace("Z", "+00:00")))) if position else None
    chunks = chunk_bounds(start_s, end_s, step_s, chunk_s)
    kw = {"timeout_s": timeout_s, "retries": retries, "backoff_s": backoff_s}
    session = requests.Session()
    if not compress:
        # on the same host or a fast network, gzip costs Prometheus and us more CPU than it saves
        session.headers["Accept-Encoding"] = "identity"
    chosen = list(metrics) if metrics else discover_metrics(session, url, **kw)
    stats = BackfillStats(chunks_total=len(chunks), metrics=chosen)
    todo = [(a, b) for a, b in chunks if done_s is None or b > done_s]
    stats.chunks_skipped = len(chunks) - len(todo)
    per_metric = False  # set once the server turns out to drop __name__ from last_over_time

    def fetch(a: int, b: int) -> tuple[pl.DataFrame, list, int]:
        """Query, decode and clean one chunk (runs on a worker, ahead of the writes)."""
        nonlocal per_metric
        fetched = None if per_metric else query_chunk_all(session, url, chosen, a, b, step_s, **kw)
        if fetched is None:
            per_metric = True
            fetched = {m: query_chunk(session, url, m, a, b, step_s, **kw) for m in chosen}
        points, series, rejects = points_from_results(fetched, url=url)
        return series_long_to_wide(points, series), rejects, points.height

    # Decoding builds millions of small lists; the cyclic GC would rescan them over and over (it is
    # 3/4 of the decode time) and they hold no cycles, so it is paused for the run.
    gc_was_enabled = gc.isenabled()
    gc.disable()
    # Chunks are fetched up to ``workers`` ahead (Prometheus evaluates and our JSON decoding overlap
    # the DuckDB writes) but committed strictly in order, so the checkpoint is always a prefix.
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool, contextlib.ExitStack() as held:
        pending: deque = deque()
        queue = iter(todo)
        con, opened_at = None, 0.0
        try:
            while True:
                while len(pending) < max(1, workers) and (nxt := next(queue, None)) is not None:
                    pending.append((nxt[1], pool.submit(fetch, *nxt)))
                if not pending:
                    break
                b, future = pending.popleft()
                wide, rejects, points = future.result()
                if con is None:  # one writer connection for several chunks, each its own transaction
                    con, opened_at = held.enter_context(
                        warehouse.open_writer(warehouse_path, publish=False)), time.monotonic()
                with warehouse.transaction(con):  # the chunk and its checkpoint, or neither
                    new = store_wide(con, wide, cluster=cluster, source=SOURCE)
                    warehouse.quarantine(con, rejects)
                    warehouse.upsert(con, "ingest_checkpoints", pl.DataFrame({
                        "source": [SOURCE], "scope": [scope], "position": [_iso(b)],
                        "updated_at": [datetime.now(UTC).replace(tzinfo=None)]}))
                if time.monotonic() - opened_at > WRITER_HOLD_S:
                    held.close()  # let other writers (the live scrape) in between chunks
                    con = None
                stats.chunks_done += 1
                stats.points += points
                stats.samples_new += new
                stats.quarantined += len(rejects)
                if on_chunk:
                    on_chunk(b, len(chunks), stats)
        finally:
            for _, future in pending:
                future.cancel()
            if gc_was_enabled:
                gc.enable()
    with warehouse.open_writer(warehouse_path, publish=True):
        pass  # publish the reader snapshot once, at the end
    return stats


__all__ = ["BACKFILL_METRICS", "BackfillStats", "PrometheusError", "backfill", "checkpoint_scope",
           "chunk_bounds", "discover_metrics", "long_from_results", "points_from_results", "query_chunk",
           "query_chunk_all", "split_invalid"]
