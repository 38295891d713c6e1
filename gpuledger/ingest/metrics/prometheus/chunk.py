"""One backfill chunk, fetched and decoded: what a worker (process or thread) runs ahead of the
writes. The result is the wide frame the warehouse writer takes."""

from __future__ import annotations

import io
import threading
from collections.abc import Sequence

import polars as pl

from gpuledger.ingest.metrics.exposition import series_long_to_wide
from gpuledger.ingest.metrics.plausible import refuse_host_conflicts, split_implausible_times
from gpuledger.ingest.metrics.prometheus.client import (
    NotPrometheusAnswer,
    get_body,
    new_session,
    parse_json,
    range_params,
    matrix_result,
    query_chunk,
)
from gpuledger.ingest.metrics.prometheus.decode import (
    SOURCE,
    NotPlainMatrix,
    points_from_matrix_json,
    points_from_results,
    refuse_outside_range,
)


def query_chunk_all_raw(session, url: str, metrics: Sequence[str], a: int, b: int, step_s: int,
                        **kw) -> tuple[pl.DataFrame, pl.DataFrame, list] | None:
    """``points_from_results(query_chunk_all(...))`` without building the JSON's millions of small
    Python lists: Prometheus' matrix JSON is parsed in bulk (``points_from_matrix_json``). None when
    this server drops ``__name__`` (then ask per metric)."""
    if b <= a or not metrics:
        return points_from_results({m: [] for m in metrics}, url=url)
    query = f"{url.rstrip('/')}/api/v1/query_range"
    params = range_params(f'{{__name__=~"{"|".join(metrics)}"}}', a, b, step_s)
    status, content = get_body(session, query, params, **kw)
    try:
        return points_from_matrix_json(content, metrics, url=url)
    except NotPlainMatrix:  # an error, or JSON we do not read in bulk: the generic path decides
        data = parse_json(query, params, status, content)
    out: dict[str, list[dict]] = {m: [] for m in metrics}
    for series in matrix_result(data, query):
        name = series["metric"].get("__name__")
        if name not in out:
            return None
        out[name].append(series)
    return _decoded(out, url=url)


def _decoded(results: dict[str, list[dict]], *, url: str):
    """``points_from_results``, with points that are not [time, "value"] pairs reported as the bad
    answer they are (and the chunk left undone), not as a crash of the decoder."""
    try:
        return points_from_results(results, url=url)
    except (TypeError, IndexError, KeyError, ValueError, pl.exceptions.PolarsError) as exc:
        raise NotPrometheusAnswer(
            f"{url.rstrip('/')}/api/v1/query_range: a series' values are not [time, \"value\"] pairs "
            f"({type(exc).__name__}); nothing was recorded for this range") from None


_SESSIONS = threading.local()


def decode_chunk(*, url: str, metrics: Sequence[str], a: int, b: int, step_s: int, kw: dict,
                  compress: bool, per_metric: bool, headers: dict | None = None) -> tuple[pl.DataFrame, list, int, bool]:
    """Query, decode and reshape one chunk: (wide frame, quarantine rows, points, whether the server
    drops ``__name__`` so the chunk was asked per metric). Runs ahead of the writes, on a worker.
    ``headers``: tenant / bearer token (auth.py), handed to the worker with the job (its stdin pipe)."""
    wanted = (compress, tuple(sorted((headers or {}).items())))
    session = getattr(_SESSIONS, "session", None)
    if session is None or _SESSIONS.wanted != wanted:  # one session per worker thread / process
        session = _SESSIONS.session = new_session(compress, headers)
        _SESSIONS.wanted = wanted
    decoded = None if per_metric else query_chunk_all_raw(session, url, metrics, a, b, step_s, **kw)
    if decoded is None:
        per_metric = True
        fetched = {m: query_chunk(session, url, m, a, b, step_s, **kw) for m in metrics}
        decoded = _decoded(fetched, url=url)
        del fetched
    points, series, rejects = decoded
    points, outside = refuse_outside_range(points, series, a, b, url=url)
    points, conflicts = refuse_host_conflicts(points, series, source=SOURCE, location=url)
    outside += conflicts
    wide, implausible = split_implausible_times(series_long_to_wide(points, series), source=SOURCE,
                                                location=url)
    return wide, [*rejects, *outside, *implausible], points.height, per_metric


def chunk_in_worker(**job) -> tuple[bytes, list, int, bool]:
    """``decode_chunk`` in a worker process; the wide frame travels back as Arrow IPC bytes."""
    wide, rejects, points, per_metric = decode_chunk(**job)
    buffer = io.BytesIO()
    wide.write_ipc(buffer)
    return buffer.getvalue(), rejects, points, per_metric
