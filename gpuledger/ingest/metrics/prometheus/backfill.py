"""Backfilling DCGM samples from a Prometheus server's HTTP API, resumable after any interruption.

For each time chunk, ONE ``/api/v1/query_range`` call asks for
``last_over_time({__name__=~"M1|M2|..."}[step - 1ms])`` (every catalogued DCGM metric the server
holds; ``last_over_time`` keeps ``__name__``, and a server that drops it is asked per metric instead)
on a grid aligned to ``step`` (epoch-aligned).
So each grid point t carries the last raw sample in (t - step, t]: exactly the sample when the
exporter's timestamps sit on the grid, one sample per step otherwise, and *nothing* where the scrape
had a gap (a plain ``METRIC`` query would repeat the previous value for 5 minutes of lookback and
invent samples). Chunks keep responses small and under Prometheus' 11,000 points per series.

Speed (benchmarks/ingest_bench.py, BENCHMARKS.md "Ingestion"): each chunk is fetched, decoded and
reshaped in one of ``workers`` worker processes (``gpuledger.ingest.metrics.prometheus.worker``: fresh
interpreters, own GIL, cyclic GC off) ahead of the writes, and comes back as Arrow IPC bytes; this
process only writes, in order. Responses are asked uncompressed by default and read in bulk
(``points_from_matrix_json``: label sets once each with orjson, all points as one CSV text for
polars' reader; any body not in Prometheus' plain matrix layout goes through orjson), and pivoted
on integer keys (``series_long_to_wide``); the writer holds the warehouse only while it writes a
chunk (it lets go while it waits for the next one), so readers and other writers get in between.

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
import io
import math
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

import polars as pl

from gpuledger import warehouse
from gpuledger.deadlines import PROMETHEUS, CallDeadline
from gpuledger.errors import UsageError
from gpuledger.ingest import DEFAULT_CLUSTER
from gpuledger.ingest.metrics.prometheus.chunk import chunk_in_worker, decode_chunk
from gpuledger.ingest.metrics.prometheus.client import (
    BACKFILL_METRICS,
    NotPrometheusAnswer,
    PrometheusError,
    new_session,
    check_base_url,
    discover_metrics,
)
from gpuledger.ingest.metrics.prometheus.decode import SOURCE
from gpuledger.ingest.metrics.prometheus.pool import chunk_pool, ChunkPool
from gpuledger.ingest.metrics.writes import store_wide

MAX_POINTS_PER_SERIES = 11_000  # Prometheus refuses query_range beyond this resolution
DEFAULT_CHUNK_S = 3600


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


def epoch_seconds(moment: datetime) -> float:
    return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).timestamp()


def checkpoint_scope(url: str, start: datetime, end: datetime, step_s: int) -> str:
    """The ingest_checkpoints scope of one backfill: the server and the exact range and step."""
    return f"{url.rstrip('/')} [{_iso(epoch_seconds(start))}, {_iso(epoch_seconds(end))}) step={step_s}s"


def chunk_bounds(start_s: int, end_s: int, step_s: int, chunk_s: int) -> list[tuple[int, int]]:
    """[a, b) chunks on the step grid covering [start_s, end_s): a grid point t is in one chunk
    only. ``chunk_s`` is rounded down to whole steps and capped at 11,000 points."""
    if step_s <= 0:
        raise UsageError(f"--step must be at least 1 s, not {step_s} s")
    first = math.ceil(start_s / step_s) * step_s
    width = max(step_s, min(chunk_s - chunk_s % step_s, step_s * MAX_POINTS_PER_SERIES))
    return [(a, min(a + width, end_s)) for a in range(first, end_s, width)]


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
    deadline: CallDeadline = PROMETHEUS,
    retries: int = 3,
    backoff_s: float = 1.0,
    on_chunk: Callable[[int, int, BackfillStats], None] | None = None,
    compress: bool = False,
    processes: bool = True,
    headers: dict[str, str] | None = None,
) -> BackfillStats:
    """Pull DCGM samples in [start, end) (naive UTC) from the Prometheus at ``url`` into the
    warehouse; resumes after the last chunk an earlier run finished. ``on_chunk(end_s, total, stats)``
    is called after each chunk commits. Raises PrometheusError when the server keeps failing (rerun
    to continue). ``workers``: chunks fetched and decoded ahead of the writes, in that many worker
    processes (``processes=False``: threads of this process, which share one GIL); each holds one
    chunk in memory, ~300 MB for 1,024 GPUs x 1 h. ``compress``: ask for gzip (worth it only
    over a slow link; on the same host it costs Prometheus and the decoder ~2x CPU). ``headers``: the
    tenant / bearer token (auth.auth_headers), sent by this process and by every worker."""
    url = check_base_url(url)
    start_s, end_s = int(epoch_seconds(start)), int(epoch_seconds(end))
    if end_s <= start_s:
        raise UsageError(f"--end {_iso(end_s)} must be after --start {_iso(start_s)}")
    if step_s <= 0 or chunk_s <= 0:
        raise UsageError(f"--step and --chunk must be at least 1 s, not {step_s} s and {chunk_s} s")
    with chunk_pool(workers, processes) as pool:
        if isinstance(pool, ChunkPool):
            pool.start()  # the workers' imports overlap the checkpoint read and metric discovery
        scope = checkpoint_scope(url, start, end, step_s)
        with warehouse.open_writer(warehouse_path) as con:
            position = read_checkpoint(con, scope)
        done_s = int(epoch_seconds(datetime.fromisoformat(position.replace("Z", "+00:00")))) if position else None
        chunks = chunk_bounds(start_s, end_s, step_s, chunk_s)
        kw = {"deadline": deadline, "retries": retries, "backoff_s": backoff_s}
        session = new_session(compress, headers)
        chosen = list(metrics) if metrics else discover_metrics(session, url, **kw)
        if not chosen:  # recording the range as done would lose it for good once the series arrive
            raise NotPrometheusAnswer(
                f"{url} holds no DCGM series (none of the {len(BACKFILL_METRICS)} catalogued metrics, "
                "e.g. DCGM_FI_DEV_GPU_UTIL); nothing was recorded: check --url, or that this Prometheus "
                "scrapes dcgm-exporter")
        stats = BackfillStats(chunks_total=len(chunks), metrics=chosen)
        todo = [(a, b) for a, b in chunks if done_s is None or b > done_s]
        stats.chunks_skipped = len(chunks) - len(todo)

        # Chunks are fetched and decoded up to ``workers`` ahead (Prometheus evaluating, our decoding
        # and the DuckDB writes overlap) but committed strictly in order, so the checkpoint is always a
        # prefix. With ``processes`` (default) each chunk is fetched, decoded and reshaped in a worker
        # process (own GIL; the wide frame comes back as Arrow IPC bytes) and this process only writes.
        job = dict(url=url, metrics=chosen, step_s=step_s, kw=kw, compress=compress, headers=dict(headers or {}))
        gc_was_enabled = gc.isenabled()
        if not processes:
            gc.disable()  # see decode_chunk: the decode's millions of small lists hold no cycles
        with contextlib.ExitStack() as held:
            pending: deque = deque()
            queue = iter(todo)
            con = None
            per_metric = False  # set once the server turns out to drop __name__ from last_over_time

            def refill() -> None:
                while len(pending) < max(1, workers) and (nxt := next(queue, None)) is not None:
                    run = chunk_in_worker if processes else decode_chunk
                    pending.append((nxt[0], nxt[1], pool.submit(run, a=nxt[0], b=nxt[1], per_metric=per_metric, **job)))

            try:
                refill()
                while pending:
                    a, b, future = pending.popleft()
                    if con is not None:  # let go while the next chunk decodes: readers, other writers
                        held.close()
                        con = None
                    try:
                        wide, rejects, points, dropped_name = future.result()
                    except PrometheusError as exc:
                        exc.undone_from = _iso(max(a, start_s))  # every chunk before a is stored
                        raise
                    per_metric = per_metric or dropped_name
                    refill()  # the worker just freed starts on the next chunk while this one is written
                    if isinstance(wide, bytes):
                        wide = pl.read_ipc(io.BytesIO(wide))
                    if con is None:  # held only while this chunk is written (readers wait < 2 s)
                        con = held.enter_context(warehouse.open_writer(warehouse_path))
                    with warehouse.transaction(con):  # the chunk and its checkpoint, or neither
                        new = store_wide(con, wide, cluster=cluster, source=SOURCE, refused=rejects, location=url)
                        warehouse.quarantine(con, rejects)
                        warehouse.upsert(con, "ingest_checkpoints", pl.DataFrame({
                            "source": [SOURCE], "scope": [scope], "position": [_iso(b)],
                            "updated_at": [datetime.now(UTC).replace(tzinfo=None)]}))
                    del wide
                    stats.chunks_done += 1
                    stats.points += points
                    stats.samples_new += new
                    stats.quarantined += len(rejects)
                    if on_chunk:
                        on_chunk(b, len(chunks), stats)
            finally:
                for _, _, future in pending:
                    future.cancel()
                if gc_was_enabled:
                    gc.enable()
    return stats


__all__ = ["BACKFILL_METRICS", "BackfillStats", "NotPrometheusAnswer", "PrometheusError", "backfill",
           "checkpoint_scope", "chunk_bounds", "read_checkpoint"]
