"""Window aggregates from the fleet's TSDB (issues 20, 41): ``ingest prometheus --aggregate 5m``.

At fleet scale the raw DCGM series stay in the TSDB the site runs (Prometheus, Thanos Query,
Mimir / Cortex, VictoriaMetrics) and gpuledger pulls one row per GPU and window instead, as
OpenCost does (what each row holds and how it is asked: ``windows``). A row is stamped at its
window's start and says how far its raw samples reach (``covered_ms``), so "now" for the data is
the newest raw sample, and GPU-hours from the windows equal the raw samples' (README "Window
aggregates").

One TSDB may hold several clusters (``tsdb_clusters``): each is asked with its own label selector
and tenant, stored under its own name and checkpointed on its own.

Queries run per chunk of at most a day, the chunk's queries ``concurrency`` at a time; each chunk is
written with its checkpoint (resumable). The window still filling at the wall clock (less ``settle_s``)
is stored as far as it has come — its row stamped at the window's start like any other, its
``covered_ms`` saying how far its samples reach — so the data's "now" is the newest settled sample,
not the last whole window's end (issue 41: freshness with 5-minute windows). The warehouse records
that window per cluster (``ingest_checkpoints``, scope ``window still filling: cluster=NAME``), and
the next run starts there and stores it anew — the one place a stored sample row is replaced. Any answer with ``warnings`` (a Thanos store or a Mimir querier that
did not answer, a partial response) is an error naming them, and the chunk stays undone: never a
silent hole.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import polars as pl

from gpuledger import warehouse
from gpuledger.deadlines import PROMETHEUS, CallDeadline
from gpuledger.errors import UsageError
from gpuledger.ingest import DEFAULT_CLUSTER
from gpuledger.ingest.metrics.prometheus.auth import auth_headers
from gpuledger.ingest.metrics.prometheus.backfill import checkpoint_scope, epoch_seconds, read_checkpoint
from gpuledger.ingest.metrics.prometheus.client import (
    NotPrometheusAnswer,
    check_base_url,
    discover_metrics,
    new_session,
)
from gpuledger.ingest.metrics.prometheus.decode import SOURCE
from gpuledger.ingest.metrics.prometheus.tsdb_clusters import (
    TargetError,
    TsdbCluster,
    discover_clusters,
    select_targets,
    unlabelled_devices,
)
from gpuledger.ingest.metrics.prometheus.windows import (
    aggregate_chunk,
    count_series,
    coverage_metric,
    window_function,
)
from gpuledger.ingest.metrics.writes import forget_window, store_wide
from gpuledger.rules.clock import epoch_iso_z, utc_now
from gpuledger.rules.promql import check_label

MAX_CHUNK_S = 86_400  # at most a day per query, as OpenCost asks
# Memory: a chunk costs ~6.5 KiB per series and window while it is fetched, decoded and merged (128
# GPUs x a day of 5-min windows, 150 series: 532 MiB peak RSS with 1-day chunks, 290 MiB with 2-h ones,
# README "Window aggregates"), above ~300 MiB for the process. Chunks are sized from the series the
# TSDB's index holds for the day ahead (/api/v1/series) to this many series-windows: about 260 MiB
# a chunk (a shard: below) at any fleet size (138 series or fewer: a day).
SERIES_WINDOWS_PER_CHUNK = 40_000
# ... but a series costs ~15 KiB in a chunk however few windows it holds (each of the ~10 answers
# carries its labels; four answers in flight): measured in-process, one-window chunks, peak RSS 359
# MiB at 1,024 GPUs (2,568 series) and 477 MiB at 4,096 (10,235 series), so once one window of the
# fleet was over the cap the peak grew with the fleet (16,384 GPUs, 42,003 series: 775 MiB). A fleet
# of more series than this is asked in shards, a disjoint share of the series each (by the last
# character of their UUID label: every copy of a device in one shard), one shard at a time, each
# written as it comes; the window cap holds per shard (BENCHMARKS.md "Aggregate ingest memory").
SERIES_PER_SHARD = 4_000
_SHARD_CHARS = "0123456789abcdef"  # a UUID's last character (hex); anything else: the last shard
MIN_STEP_S, MAX_STEP_S = 60, 300  # MAX_STEP_S bounds covered_ms: warehouse/clock.LONGEST_COVERAGE


@dataclass
class AggregateStats:
    chunks_total: int = 0
    chunks_done: int = 0
    rows_new: int = 0
    quarantined: int = 0  # rows refused (quarantine, source prometheus): NaN, no UUID, duplicates, outside the range
    metrics: list[str] = field(default_factory=list)
    rows_by_cluster: dict[str, int] = field(default_factory=dict)  # new rows per cluster stored
    resumed: dict[str, str] = field(default_factory=dict)  # cluster -> where a rerun continued ("done": nothing left)
    chunk_windows: int = 0  # windows per chunk (sized from the series count: the largest used)
    shards: int = 1  # parts of the series each chunk was asked in (SERIES_PER_SHARD: the most used)
    series: int = 0  # series of the coverage family in the span last probed (what sized its chunks)
    unlabelled_series: int = 0  # with cluster_label: series of unlabelled_metric without the label
    unlabelled_metric: str = ""
    left_for_later: bool = False  # ``until`` came before every chunk was done: the next run continues
    filling: str = ""  # "[start, end)" of the window stored while still filling, as far as it had come
    rows_filling: int = 0  # of rows_new, that window's (stored anew at every run until it has ended)


def _iso(epoch_s: float) -> str:
    return epoch_iso_z(epoch_s)


def aggregate(
    url: str, start: datetime, end: datetime, *, step_s: int = 300, chunk_s: int = MAX_CHUNK_S,
    warehouse_path=None, cluster: str = DEFAULT_CLUSTER, clusters: Sequence[TsdbCluster] | None = None,
    cluster_label: str | None = None, concurrency: int = 4, tenant: str | None = None,
    deadline: CallDeadline = PROMETHEUS, retries: int = 3, backoff_s: float = 1.0,
    on_chunk: Callable[[int, int, AggregateStats], None] | None = None, headers: dict[str, str] | None = None,
    until: float | None = None, stats: AggregateStats | None = None, settle_s: int = 0,
    now: datetime | None = None,
) -> AggregateStats:
    """Pull ``step``-window aggregates of [start, end) (naive UTC) into the warehouse, the window
    still filling at the wall clock as far as it has settled (stored anew by the next run); resumes
    after the last chunk done.

    Which clusters: ``clusters`` (each its selector and tenant), else with ``cluster_label`` one per
    value that label takes on the DCGM series in the range, else every series under ``cluster``.
    ``headers``: tenant / bearer token (auth.auth_headers); ``tenant`` alone: Mimir / Cortex
    ``X-Scope-OrgID``; a cluster's own tenant replaces either for its queries. ``until``: a
    ``time.monotonic()`` after which no further chunk is started (the rest is left, checkpointed, for
    the next run); ``stats``: figures to add to (one run over several days); ``settle_s``: the TSDB
    is asked only up to this long before the wall clock (it may not answer for its last seconds yet:
    VictoriaMetrics' default -search.latencyOffset is 30 s, remote write lags), so a window ending
    later is stored as one still filling; ``now``: the wall clock (naive UTC; default the real one)."""
    url = check_base_url(url)
    if not MIN_STEP_S <= step_s <= MAX_STEP_S:
        raise UsageError(f"--aggregate {step_s}s: choose 1m to 5m (windows the dashboards and "
                         "squatting still resolve)")
    start_s, end_s = int(epoch_seconds(start)), int(epoch_seconds(end))
    if end_s <= start_s:
        raise UsageError(f"--end {_iso(end_s)} must be after --start {_iso(start_s)}")
    settled_s = int(epoch_seconds(now or utc_now())) - max(0, settle_s)
    cut_by_clock = end_s > settled_s  # the range reaches the window still filling
    end_s = min(end_s, settled_s)
    if end_s <= start_s:
        raise UsageError(f"--start {_iso(start_s)} is in the future: no window has begun yet")
    first = -(-start_s // step_s) * step_s
    whole_end = first + max(0, end_s - first) // step_s * step_s  # whole windows
    filling = (whole_end, end_s) if cut_by_clock and end_s > whole_end else None
    end_s = whole_end
    if end_s <= first and filling is None:
        raise UsageError(f"[{_iso(start_s)}, {_iso(end_s)}) holds no whole {step_s // 60}-minute window yet: "
                         "give an earlier --start or a later --end")
    cap_windows = max(1, min(chunk_s, MAX_CHUNK_S) // step_s)
    base_scope = checkpoint_scope(url, start, end, step_s) + " aggregate"
    kw = {"deadline": deadline, "retries": retries, "backoff_s": backoff_s}
    base = {**(headers or {}), **({"X-Scope-OrgID": tenant} if tenant else {})}
    sessions: dict[str | None, tuple] = {}

    def session_for(target: TsdbCluster):
        """(session, metrics) for the target's tenant: each tenant sees its own series."""
        key = target.tenant
        if key not in sessions:
            session = new_session(False, {**base, **({"X-Scope-OrgID": key} if key else {})})
            metrics = [m for m in discover_metrics(session, url, **kw) if window_function(m)]
            if not metrics:
                whose = f" for tenant {key}" if key else ""
                raise NotPrometheusAnswer(f"{url} holds no DCGM series to aggregate{whose}; nothing was recorded")
            sessions[key] = (session, metrics)
        return sessions[key]

    stats = stats if stats is not None else AggregateStats()
    targets = list(clusters or [])
    if not targets and cluster_label:
        label = check_label(cluster_label, "--cluster-label")
        session, metrics = session_for(TsdbCluster(cluster))
        targets = discover_clusters(session, url, label, metrics, start_s, end_s, kw)
        if not targets:
            raise NotPrometheusAnswer(f"{url}: no DCGM series carry the label {label!r} in [{_iso(start_s)}, "
                                      f"{_iso(end_s)}); nothing was recorded: check --cluster-label "
                                      "(or sources.prometheus.cluster_label)")
        stats.unlabelled_metric = coverage_metric(metrics) or metrics[0]
        stats.unlabelled_series = unlabelled_devices(session, url, label, stats.unlabelled_metric, start_s, end_s, kw)
    shared = bool(targets)
    targets = targets or [TsdbCluster(cluster)]
    if len(targets) > 1:
        for t in targets:
            if not t.selector and not t.tenant:
                raise UsageError(f"cluster {t.name}: give it a selector or a tenant; without either it "
                                 "would store every series of the TSDB, the other clusters' too")
    with ThreadPoolExecutor(max_workers=max(1, concurrency)) as pool:
        for target in targets:
            if stats.left_for_later:
                break
            session, metrics = session_for(target)
            stats.metrics = sorted({*stats.metrics, *metrics})
            scope = base_scope + (_cluster_scope(target) if shared else "")
            _aggregate_cluster(session, url, metrics, (first, end_s), step_s, cap_windows, target, scope, stats,
                               warehouse_path=warehouse_path, kw=kw, pool=pool, on_chunk=on_chunk,
                               concurrency=concurrency, until=until, filling=filling)
    return stats


def _cluster_scope(target: TsdbCluster) -> str:
    """The checkpoint scope's tail for one cluster of a shared TSDB: its name, selector, tenant."""
    return (f" cluster={target.name}" + (f" {{{target.selector}}}" if target.selector else "")
            + (f" tenant={target.tenant}" if target.tenant else ""))


def chunk_windows(series: int, cap_windows: int) -> int:
    """Windows per chunk for a TSDB holding ``series`` series of a family: SERIES_WINDOWS_PER_CHUNK
    series-windows, at least one window, at most ``cap_windows`` (--chunk, at most a day)."""
    return max(1, min(cap_windows, SERIES_WINDOWS_PER_CHUNK // max(series, 1)))


def shard_count(series: int) -> int:
    """Shards a chunk of ``series`` series is asked in: 1, 2, 4, 8 or 16, at most SERIES_PER_SHARD
    series each where 16 allow it."""
    shards = 1
    while shards < len(_SHARD_CHARS) and series > shards * SERIES_PER_SHARD:
        shards *= 2
    return shards


def shard_matchers(shards: int) -> list[str]:
    """PromQL label matchers that split the series into ``shards`` disjoint parts covering them all:
    part i holds the UUIDs ending in its share of the hex digits (either case); the last part also
    every other UUID and the series without one (which the decoder then quarantines, as unsharded)."""
    if shards <= 1:
        return [""]
    per = len(_SHARD_CHARS) // shards
    parts = ["".join(dict.fromkeys(part + part.upper()))
             for part in (_SHARD_CHARS[i * per:(i + 1) * per] for i in range(shards - 1))]
    return [f'UUID=~".*[{part}]"' for part in parts] + [f'UUID!~".*[{"".join(parts)}]"']


def filling_scope(cluster: str) -> str:
    """The ingest_checkpoints scope recording a cluster's window stored while still filling (its
    start): any run storing that cluster's windows starts there and stores it anew."""
    return f"window still filling: cluster={cluster}"


def _aggregate_cluster(session, url: str, metrics: Sequence[str], span: tuple[int, int], step_s: int,
                       cap_windows: int, target: TsdbCluster, scope: str, stats: AggregateStats, *,
                       warehouse_path, kw: dict, pool: ThreadPoolExecutor, on_chunk, concurrency: int,
                       until: float | None = None, filling: tuple[int, int] | None = None) -> None:
    """One cluster's windows in ``span`` (epoch s, on the window grid), chunk by chunk (shard by
    shard), each chunk's last write with its checkpoint; a rerun continues after the last one. Chunks are sized from the
    series the TSDB's index holds for each day (or --chunk) ahead, so memory stays flat as the
    fleet grows. ``filling``: [start, settled end) of the window still filling, stored after the
    whole windows and recorded as such (no checkpoint moves past it)."""
    with warehouse.open_writer(warehouse_path) as con:
        position = read_checkpoint(con, scope)
        stored_filling = read_checkpoint(con, filling_scope(target.name))
    first, end_s = span
    a = first
    if position:  # on the window grid (a position of an older run may not be: the next grid point)
        done_s = int(epoch_seconds(datetime.fromisoformat(position)))
        a = max(first, first + -(-(done_s - first) // step_s) * step_s)
    again_s = None  # the window stored while still filling, when this run's whole windows hold it
    if stored_filling:  # (by this run's range or another's): ask it again
        again_s = int(epoch_seconds(datetime.fromisoformat(stored_filling)))
        again_s = again_s if first <= again_s < end_s else None
        a = min(a, again_s) if again_s is not None else a
    if position or stored_filling:
        stats.resumed[target.name] = _iso(a) if a < end_s else "done"
    stats.rows_by_cluster.setdefault(target.name, 0)
    probed_until = a
    shards = [""]
    anew = True  # the run's first window may have been stored while filling (or by a run cut off between shards)
    while a < end_s:
        if until is not None and time.monotonic() >= until:
            stats.left_for_later = True
            return
        if a >= probed_until:  # the series of the next day (or --chunk): what its chunks may hold
            probed_until = min(end_s, a + cap_windows * step_s)
            stats.series = count_series(session, url, metrics, a, probed_until, kw, target.selector)
        shards = shard_matchers(shard_count(stats.series))
        windows = chunk_windows(-(-stats.series // len(shards)), cap_windows)  # the cap holds per shard
        stats.chunk_windows = max(stats.chunk_windows, windows)
        stats.shards = max(stats.shards, len(shards))
        b = min(a + windows * step_s, probed_until)
        stats.chunks_total = stats.chunks_done + 1 + -(-(end_s - b) // (windows * step_s))
        done = b >= end_s and filling is None and again_s is not None  # the window recorded filling is whole now
        _store_windows(session, url, metrics, (a, b), step_s, target, stats, shards, warehouse_path=warehouse_path,
                       kw=kw, pool=pool, concurrency=concurrency, anew=a if anew else None,
                       checkpoint=(scope, b), forget_filling=done)
        anew = False
        stats.chunks_done += 1
        if on_chunk:
            on_chunk(b, stats.chunks_total, stats)
        a = b
    if filling is None:
        return
    if until is not None and time.monotonic() >= until:
        stats.left_for_later = True
        return
    f_start, f_end = filling
    if anew:  # no whole window asked: the shards sized from the series of the filling window
        stats.series = count_series(session, url, metrics, f_start, f_end, kw, target.selector)
        shards = shard_matchers(shard_count(stats.series))
        stats.shards = max(stats.shards, len(shards))
    before = stats.rows_new
    _store_windows(session, url, metrics, filling, f_end - f_start, target, stats, shards,
                   warehouse_path=warehouse_path, kw=kw, pool=pool, concurrency=concurrency, anew=f_start,
                   record_filling=f_start)
    stats.rows_filling += stats.rows_new - before
    stats.filling = f"[{_iso(f_start)}, {_iso(f_end)})"


def _store_windows(session, url: str, metrics: Sequence[str], span: tuple[int, int], step_s: int,
                   target: TsdbCluster, stats: AggregateStats, shards: list[str], *, warehouse_path, kw: dict,
                   pool: ThreadPoolExecutor, concurrency: int, anew: int | None,
                   checkpoint: tuple[str, int] | None = None, forget_filling: bool = False,
                   record_filling: int | None = None) -> None:
    """The ``step_s`` windows of ``span`` asked one shard at a time, each written as it comes (its
    memory, not the chunk's); the checkpoint with the last shard: a rerun asks the whole chunk
    again and stores only what is new (samples: first value wins; quarantine: the same raw text
    once), except the window starting at ``anew``, whose stored rows the answer replaces. The
    window still filling is recorded with the first shard (``record_filling``, its start), so a run
    cut off between shards still asks it again."""
    a, b = span
    new = refused = 0
    for k, matcher in enumerate(shards):
        try:
            wide, rejects = aggregate_chunk(session, url, metrics, a, b, step_s, kw=kw, pool=pool,
                                            selector=",".join(x for x in (target.selector, matcher) if x),
                                            concurrency=concurrency)
        except Exception as exc:
            if hasattr(exc, "undone_from"):
                exc.undone_from = _iso(a)
                exc.partly_stored = k > 0  # earlier shards of the chunk were written
            raise
        with warehouse.open_writer(warehouse_path) as con, warehouse.transaction(con):
            if anew is not None:
                forget_window(con, wide, cluster=target.name, at=datetime.fromtimestamp(anew, UTC).replace(tzinfo=None))
            new += store_wide(con, wide, cluster=target.name, source=SOURCE, refused=rejects, location=url)
            warehouse.quarantine(con, rejects)
            if record_filling is not None and k == 0:
                _set_checkpoint(con, filling_scope(target.name), record_filling)
            if k == len(shards) - 1 and checkpoint is not None:
                _set_checkpoint(con, *checkpoint)
            if k == len(shards) - 1 and forget_filling:
                con.execute("DELETE FROM ingest_checkpoints WHERE source = ? AND scope = ?",
                            [SOURCE, filling_scope(target.name)]).fetchall()
        refused += len(rejects)
        del wide, rejects
    stats.rows_new += new
    stats.quarantined += refused
    stats.rows_by_cluster[target.name] += new


def _set_checkpoint(con, scope: str, position_s: int) -> None:
    warehouse.upsert(con, "ingest_checkpoints", pl.DataFrame({
        "source": [SOURCE], "scope": [scope], "position": [_iso(position_s)], "updated_at": [utc_now()]}))


def labelled_clusters(source, *, now: datetime | None = None, days: int = 2) -> list[str]:
    """The clusters a ``sources.prometheus`` told apart by ``cluster_label`` alone holds: every
    value of the label on its DCGM series over the last ``days`` (what :func:`aggregate_recent`
    asks for). The pipelines make them cluster partitions; a source that names its ``clusters``
    (or has no label) gives []. Raises NotPrometheusAnswer / the client's errors when the TSDB
    cannot say."""
    if source is None or source.clusters or not source.cluster_label:
        return []
    label = check_label(source.cluster_label, "sources.prometheus.cluster_label")
    end_s = int(epoch_seconds(now or utc_now()))
    kw = {"deadline": source.call_deadline(), "retries": 1, "backoff_s": 1.0}
    session = new_session(False, auth_headers(source))
    metrics = [m for m in discover_metrics(session, source.url, **kw) if window_function(m)]
    if not metrics:
        return []
    return [t.name for t in discover_clusters(session, source.url, label, metrics, end_s - days * 86_400, end_s, kw)]


def aggregate_recent(source, cluster: str, *, warehouse_path=None, now: datetime | None = None, days: int = 2,
                     until: float | None = None, concurrency: int = 4) -> AggregateStats:
    """One cluster of ``sources.prometheus`` (``source``, with ``aggregate_s``) as the pipelines'
    ``prometheus_aggregates`` runs it: the windows of the last ``days`` UTC days (today's included)
    that have ended at least ``settle_s`` ago and are not stored yet, and the window still filling
    as far as ``settle_s`` ago, each day asked as
    ``gpuledger ingest prometheus --url URL --aggregate <aggregate_s>s --start DAY --end DAY+1
    --cluster CLUSTER`` asks it (the same ``aggregate`` call, the same checkpoints: either continues
    where the other stopped). Raises TargetError when the source does not hold ``cluster``."""
    step_s = source.aggregate_s
    if step_s is None:
        raise UsageError("sources.prometheus.aggregate_s is not set: the pipelines backfill raw samples "
                         "(prometheus_samples) from this TSDB")
    if not source.clusters and not source.cluster_label and cluster != source.cluster:
        raise TargetError(f"{cluster!r}: sources.prometheus stores its series under {source.cluster!r} "
                          "(name more clusters under sources.prometheus.clusters)", "--cluster")
    targets, label = select_targets(source, cluster=cluster, label=None)
    now = now or utc_now()
    today = now.replace(hour=0, minute=0, second=0, microsecond=0)
    settled = int(epoch_seconds(now)) - source.settle_s  # the newest moment the TSDB answers for
    stats = AggregateStats()
    for back in range(max(1, days) - 1, -1, -1):
        day = today - timedelta(days=back)
        if int(epoch_seconds(day)) >= settled:  # nothing of the day is settled yet
            continue
        aggregate(source.url, day, day + timedelta(days=1), step_s=step_s, warehouse_path=warehouse_path,
                  cluster=cluster, clusters=targets, cluster_label=label, concurrency=concurrency,
                  deadline=source.call_deadline(), headers=auth_headers(source), until=until, stats=stats,
                  settle_s=source.settle_s, now=now)
        if stats.left_for_later:
            break
    return stats
