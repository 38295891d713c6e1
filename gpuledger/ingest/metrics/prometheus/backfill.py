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
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

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
    check_base_url,
    discover_metrics,
    new_session,
)
from gpuledger.ingest.metrics.prometheus.decode import SOURCE
from gpuledger.ingest.metrics.prometheus.pool import ChunkPool, chunk_pool
from gpuledger.ingest.metrics.writes import store_wide
from gpuledger.rules.clock import epoch_iso_z, utc_now

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

    def count_chunk(self, points: int, samples_new: int, quarantined: int) -> None:
        self.chunks_done += 1
        self.points += points
        self.samples_new += samples_new
        self.quarantined += quarantined


def _iso(epoch_s: float) -> str:
    return epoch_iso_z(epoch_s)


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
    start_s, end_s = backfill_range(start, end, step_s, chunk_s)
    with chunk_pool(workers, processes) as pool:
        if isinstance(pool, ChunkPool):
            pool.start()  # the workers' imports overlap the checkpoint read and metric discovery
        scope = checkpoint_scope(url, start, end, step_s)
        with warehouse.open_writer(warehouse_path) as con:
            done_s = checkpoint_epoch(read_checkpoint(con, scope))
        chunks = chunk_bounds(start_s, end_s, step_s, chunk_s)
        kw = {"deadline": deadline, "retries": retries, "backoff_s": backoff_s}
        session = new_session(compress, headers)
        chosen = chosen_metrics(session, url, metrics, kw)
        stats = BackfillStats(chunks_total=len(chunks), metrics=chosen)
        todo = chunks_to_do(chunks, done_s)
        stats.chunks_skipped = len(chunks) - len(todo)
        # With ``processes`` (default) each chunk is fetched, decoded and reshaped in a worker
        # process (own GIL; the wide frame comes back as Arrow IPC bytes) and this process only writes.
        job = dict(url=url, metrics=chosen, step_s=step_s, kw=kw, compress=compress, headers=dict(headers or {}))
        ahead = ChunksAhead(pool, iter(todo), workers, chunk_in_worker if processes else decode_chunk, job)
        sink = ChunkSink(warehouse_path=warehouse_path, cluster=cluster, url=url, scope=scope)
        with contextlib.ExitStack() as held, _decode_gc_off(not processes):
            write_in_order(ahead, sink, held, stats, start_s=start_s, on_chunk=on_chunk, total=len(chunks))
    return stats


def backfill_range(start: datetime, end: datetime, step_s: int, chunk_s: int) -> tuple[int, int]:
    """[start, end) as whole epoch seconds, refused unless it is a non-empty range with a step and
    a chunk width of at least 1 s."""
    start_s, end_s = int(epoch_seconds(start)), int(epoch_seconds(end))
    if end_s <= start_s:
        raise UsageError(f"--end {_iso(end_s)} must be after --start {_iso(start_s)}")
    if step_s <= 0 or chunk_s <= 0:
        raise UsageError(f"--step and --chunk must be at least 1 s, not {step_s} s and {chunk_s} s")
    return start_s, end_s


def checkpoint_epoch(position: str | None) -> int | None:
    """A stored checkpoint position (``2026-11-29T10:00:00Z``, the end of the last chunk written)
    as epoch seconds; None when no earlier run wrote one."""
    return int(epoch_seconds(datetime.fromisoformat(position.replace("Z", "+00:00")))) if position else None


def chosen_metrics(session, url: str, metrics: Sequence[str] | None, kw: dict) -> list[str]:
    """The metrics asked for, else those of the catalogue the server holds (refused when none)."""
    chosen = list(metrics) if metrics else discover_metrics(session, url, **kw)
    if not chosen:  # recording the range as done would lose it for good once the series arrive
        raise NotPrometheusAnswer(
            f"{url} holds no DCGM series (none of the {len(BACKFILL_METRICS)} catalogued metrics, "
            "e.g. DCGM_FI_DEV_GPU_UTIL); nothing was recorded: check --url, or that this Prometheus "
            "scrapes dcgm-exporter")
    return chosen


def chunks_to_do(chunks: list[tuple[int, int]], done_s: int | None) -> list[tuple[int, int]]:
    """The chunks an earlier run has not stored: those ending after its checkpoint."""
    return [(a, b) for a, b in chunks if done_s is None or b > done_s]


@contextlib.contextmanager
def _decode_gc_off(off: bool):
    # see decode_chunk: the decode's millions of small lists hold no cycles
    gc_was_enabled = gc.isenabled()
    if off:
        gc.disable()
    try:
        yield
    finally:
        if gc_was_enabled:
            gc.enable()


@dataclass
class ChunksAhead:
    """Chunks fetched and decoded up to ``depth`` ahead of the writes (Prometheus evaluating, our
    decoding and the DuckDB writes overlap), handed back strictly in order so that the checkpoint
    is always a prefix. ``run(a=, b=, per_metric=, **job)`` is what a worker does with one chunk."""

    pool: Any
    todo: Iterator[tuple[int, int]]
    depth: int
    run: Callable
    job: dict
    per_metric: bool = False  # set once the server turns out to drop __name__ from last_over_time
    pending: deque = field(default_factory=deque)

    def refill(self) -> None:
        while len(self.pending) < max(1, self.depth) and (nxt := next(self.todo, None)) is not None:
            future = self.pool.submit(self.run, a=nxt[0], b=nxt[1], per_metric=self.per_metric, **self.job)
            self.pending.append((nxt[0], nxt[1], future))

    def outcome(self, a: int, future, start_s: int) -> tuple[pl.DataFrame, list, int]:
        """(wide frame, rejects, points) of the chunk starting at ``a``; the worker it frees starts
        on the next chunk. A PrometheusError says where the stored prefix ends (``undone_from``)."""
        try:
            wide, rejects, points, dropped_name = future.result()
        except PrometheusError as exc:
            exc.undone_from = _iso(max(a, start_s))  # every chunk before a is stored
            raise
        self.per_metric = self.per_metric or dropped_name
        self.refill()  # the worker just freed starts on the next chunk while this one is written
        if isinstance(wide, bytes):
            wide = pl.read_ipc(io.BytesIO(wide))
        return wide, rejects, points

    def cancel(self) -> None:
        for _, _, future in self.pending:
            future.cancel()


@dataclass(frozen=True)
class ChunkSink:
    """Where the chunks go: the warehouse, the cluster they are stored under, and the checkpoint."""

    warehouse_path: Any
    cluster: str
    url: str
    scope: str


def store_chunk(con, sink: ChunkSink, wide: pl.DataFrame, rejects: list, b: int) -> int:
    """Write one chunk (ending at ``b``) and its checkpoint in one transaction, or neither; returns
    the new samples. ``rejects`` gains the rows store_wide refuses, and all of them are quarantined."""
    with warehouse.transaction(con):
        new = store_wide(con, wide, cluster=sink.cluster, source=SOURCE, refused=rejects, location=sink.url)
        warehouse.quarantine(con, rejects)
        warehouse.upsert(con, "ingest_checkpoints", pl.DataFrame({
            "source": [SOURCE], "scope": [sink.scope], "position": [_iso(b)],
            "updated_at": [utc_now()]}))
    return new


def write_in_order(ahead: ChunksAhead, sink: ChunkSink, held: contextlib.ExitStack, stats: BackfillStats, *,
                   start_s: int, on_chunk, total: int) -> None:
    """Write the chunks as they come back, in order. The warehouse is held (in ``held``) only while
    a chunk is written, so readers and other writers get in between; unstarted chunks are cancelled
    when this stops, however it stops."""
    con = None
    try:
        ahead.refill()
        while ahead.pending:
            a, b, future = ahead.pending.popleft()
            if con is not None:  # let go while the next chunk decodes: readers, other writers
                held.close()
                con = None
            wide, rejects, points = ahead.outcome(a, future, start_s)
            if con is None:  # held only while this chunk is written (readers wait < 2 s)
                con = held.enter_context(warehouse.open_writer(sink.warehouse_path))
            new = store_chunk(con, sink, wide, rejects, b)
            del wide
            stats.count_chunk(points, new, len(rejects))
            if on_chunk:
                on_chunk(b, total, stats)
    finally:
        ahead.cancel()


__all__ = ["BACKFILL_METRICS", "BackfillStats", "NotPrometheusAnswer", "PrometheusError", "backfill",
           "checkpoint_scope", "chunk_bounds", "read_checkpoint"]
