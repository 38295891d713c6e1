"""Ingesting dcgm-exporter ``/metrics`` pages: fetch targets concurrently, parse line-tolerantly,
clean through the shared DCGM catalog and write idempotently.

* Fetch: one thread per target; a timeout, a refused connection or an HTTP 5xx is retried with
  exponential backoff; a target that still fails is reported (stderr via the CLI, and a quarantine
  row with source ``scrape``, location = URL) while the other targets are ingested.
* Samples carry the exposition's own timestamp when the line has one, else the scrape time (the
  moment the response arrived, UTC, milliseconds).
* Every refused line becomes a quarantine row (source ``scrape``, location ``URL:line``, raw text,
  reason). The same page ingested twice changes no row counts: samples are keyed (gpu_id, ts) with
  the first value kept, quarantine rows (source, location, raw text).
"""

from __future__ import annotations

import itertools
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

import polars as pl
import requests
import urllib3

from gpuledger import warehouse
from gpuledger.deadlines import CallDeadline, why_unreachable
from gpuledger.ingest.http_get import OutOfTime, TooLarge, get_within
from gpuledger.ingest.metrics.exposition import (
    BULK_FROM_CHARS,
    long_to_wide,
    parse_exposition,
    series_long_to_wide,
    wide_rows,
)
from gpuledger.ingest.metrics.exposition.bulk import parse_pages_bulk
from gpuledger.ingest.metrics.plausible import (
    refuse_host_conflicts,
    refuse_host_conflicts_long,
    refuse_host_conflicts_wide,
    split_implausible_times,
    window_in_force,
)
from gpuledger.ingest.metrics.pod_activity import per_pod_rows, shared_device_points, store_pod_rows
from gpuledger.ingest.metrics.writes import store_wide

SOURCE = "scrape"
from gpuledger.ingest import DEFAULT_CLUSTER
from gpuledger.rules.clock import epoch_iso_z

RETRYABLE_STATUS = range(500, 600)


@dataclass
class FetchResult:
    """One target's fetch: the page text and when it arrived, or the error after all attempts."""

    url: str
    text: str | None
    scrape_ms: int
    attempts: int
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


@dataclass
class IngestStats:
    """What one page (or a batch of pages) did to the warehouse."""

    pages: int = 0
    failed_targets: int = 0
    lines: int = 0
    samples_parsed: int = 0
    samples_new: int = 0
    quarantined: int = 0
    unknown_dcgm: Counter = field(default_factory=Counter)
    errors: list[str] = field(default_factory=list)

    def add(self, other: IngestStats) -> None:
        for name in ("pages", "failed_targets", "lines", "samples_parsed", "samples_new", "quarantined"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.unknown_dcgm.update(other.unknown_dcgm)
        self.errors.extend(other.errors)


def _now_ms() -> int:
    return int(time.time() * 1000)


_EXPOSITION_TYPES = ("text/plain", "application/openmetrics-text")


def exposition_text(content_type: str | None, body: bytes) -> tuple[str | None, str | None]:
    """A 200 answer's text, or why it cannot be an exporter's page: ``(text, None)`` or ``(None, why)``
    — a Content-Type other than text/plain or OpenMetrics, bytes that are not UTF-8 text, or text
    starting like HTML or JSON. Such a page is a failed target, never hundreds of quarantined
    "lines". (One decode: a 10,240-GPU round is ~40 MB of text.)"""
    kind = (content_type or "").split(";")[0].strip().lower()
    if kind and kind not in _EXPOSITION_TYPES:
        return None, f"Content-Type {kind}"
    if b"\x00" in body:
        return None, "binary data: NUL bytes"
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        return None, f"binary data: byte {exc.start} is not UTF-8"
    first = text.lstrip()[:1]
    if first in ("<", "{", "["):
        return None, "an HTML page" if first == "<" else "JSON"
    return text, None


def fetch_target(
    url: str,
    *,
    timeout_s: float = 10.0,
    retries: int = 3,
    backoff_s: float = 0.5,
    session: requests.Session | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> FetchResult:
    """GET ``url``; retry a timeout, refused connection or 5xx up to ``retries`` more times, waiting
    ``backoff_s``, 2x, 4x ... between attempts. Never raises for network trouble: the result says."""
    error = None
    attempt = 0
    # one attempt: at most timeout_s in all, connecting and the whole page included
    limits = CallDeadline(connect_s=timeout_s, read_s=timeout_s, total_s=timeout_s)
    for attempt in range(1, retries + 2):
        try:
            status, headers, body = get_within(session, url, deadline=limits,
                                               give_up=time.monotonic() + timeout_s, max_bytes=MAX_PAGE_BYTES)
            if status in RETRYABLE_STATUS:
                error = f"HTTP {status} from {url}"
            elif status != 200:
                return FetchResult(url, None, _now_ms(), attempt, f"HTTP {status} from {url} (not retried)")
            else:
                text, problem = exposition_text(headers.get("Content-Type"), body)
                if problem:  # an HTML login page, a JSON API, a binary blob: not this target's samples
                    return FetchResult(url, None, _now_ms(), attempt,
                                       f"{url} did not answer with Prometheus exposition text ({problem}); "
                                       "point at the exporter's /metrics (not retried)")
                if not text.strip():  # an exporter always has samples: an empty page is a failure
                    return FetchResult(url, None, _now_ms(), attempt,
                                       f"{url} answered an empty page (no samples); check that the exporter "
                                       "is the one at this URL and that its collectors run (not retried)")
                return FetchResult(url, text, _now_ms(), attempt)
        except TooLarge as exc:
            return FetchResult(url, None, _now_ms(), attempt, f"{url}: {exc} (not retried)")
        except OutOfTime as exc:
            error = f"{exc}: {url}"
        except (requests.exceptions.InvalidSchema, requests.exceptions.MissingSchema,
                requests.exceptions.InvalidURL, requests.exceptions.TooManyRedirects) as exc:
            return FetchResult(url, None, _now_ms(), attempt, f"{url}: {_request_problem(exc)} (not retried)")
        except requests.Timeout:
            error = f"timed out after {timeout_s:g} s: {url}"
        except (requests.RequestException, urllib3.exceptions.HTTPError, OSError) as exc:
            error = f"{why_unreachable(exc, limits)}: {url}"
        if attempt <= retries:
            sleep(backoff_s * 2 ** (attempt - 1))
    return FetchResult(url, None, _now_ms(), attempt, f"{error} (gave up after {attempt} attempts)")


# One exporter's page: ~25 kB per 8-GPU node (8,192 GPUs in one page: 33 MiB). A page is held whole
# while it is fetched, decoded and ingested (briefly twice while its bytes are decoded), and parsed
# in pieces of 16 Mi characters (exposition.pieces; issue 36): a 125.6 MiB page's parse adds ~165 MiB
# to the process (~240 MiB parsed whole), its whole ingest ~300 MiB (BENCHMARKS "Exposition pages in
# pieces"). The cap keeps one target's share of a round bounded: a larger answer is a failed target,
# read no further than the cap.
MAX_PAGE_BYTES = 128 * 2**20


def _request_problem(exc: requests.RequestException) -> str:
    """What is wrong with a URL requests refused, in our words (never "No connection adapters")."""
    if isinstance(exc, requests.exceptions.TooManyRedirects):
        return "redirects in a loop (more than 30); point at the exporter's /metrics itself"
    return "not an http:// or https:// URL with a host; write it as http://HOST:9400/metrics"


def fetch_targets(urls: Sequence[str], *, max_workers: int = 32, stop: threading.Event | None = None,
                  **kwargs) -> list[FetchResult] | None:
    """Fetch every target concurrently (daemon threads); results in the order of ``urls``. None when
    ``stop`` is set first: the round is abandoned at once (a fetch in flight holds nothing of the
    warehouse, and daemon threads never keep the program from ending)."""
    if not urls:
        return []
    results: list[FetchResult | None] = [None] * len(urls)
    todo = iter(enumerate(urls))
    lock = threading.Lock()

    def work() -> None:
        while not (stop is not None and stop.is_set()):
            with lock:
                nxt = next(todo, None)
            if nxt is None:
                return
            results[nxt[0]] = fetch_target(nxt[1], **kwargs)

    threads = [threading.Thread(target=work, name="scrape", daemon=True)
               for _ in range(min(max_workers, len(urls)))]
    for thread in threads:
        thread.start()
    for thread in threads:
        while thread.is_alive():
            thread.join(0.1)
            if stop is not None and stop.is_set():
                return None
    return results  # type: ignore[return-value] - every slot is filled once all threads ended


def ingest_page(
    con,
    text: str,
    *,
    location: str,
    scrape_ms: int,
    cluster: str = DEFAULT_CLUSTER,
    max_future_s: float | None = None,  # None: policy.samples.clock_skew_seconds of the stored config
    source: str = SOURCE,
) -> IngestStats:
    """Parse one page, write its good samples and quarantine its bad lines, in one transaction."""
    return ingest_pages(con, [(text, location, scrape_ms)], cluster=cluster, max_future_s=max_future_s,
                        source=source)


def ingest_pages(
    con,
    pages: Sequence[tuple[str, str, int]],
    *,
    cluster: str = DEFAULT_CLUSTER,
    max_future_s: float | None = None,  # None: policy.samples.clock_skew_seconds of the stored config
    source: str = SOURCE,
) -> IngestStats:
    """Ingest several pages ``(text, location, scrape_ms)`` in one transaction: each page parsed on
    its own (line numbers, duplicates and the future limit are per page), their rows written with
    one device registration, one sample insert and one rollup refresh. A write costs ~0.1 s however
    few rows it holds, so one per page would cap a round at ~10 pages/s. Same rows as ingesting the
    pages one after another: a (device, ts) in two pages keeps the first page's row."""
    if max_future_s is None:
        max_future_s = window_in_force(con, cluster).max_future_s
    if sum(len(t) for t, _, _ in pages) >= BULK_FROM_CHARS:
        return _ingest_pages_bulk(con, pages, cluster=cluster, max_future_s=max_future_s, source=source)
    stats = IngestStats()
    wides, rows, pods = [], [], []
    for text, location, scrape_ms in pages:
        parsed = parse_exposition(text, scrape_ms=scrape_ms, max_future_s=max_future_s)
        pods.append(per_pod_rows(parsed.samples)[0])
        wide, on_two_hosts = _page_wide(parsed, source=source, location=location)
        if not wide.is_empty():
            wides.append(wide)
        rows += [warehouse.QuarantineRow(source, f"{location}:{r.line_no}", r.raw_text, r.reason)
                 for r in parsed.rejects] + on_two_hosts
        stats.add(IngestStats(pages=1, lines=parsed.lines, samples_parsed=parsed.sample_count,
                              quarantined=len(parsed.rejects) + len(on_two_hosts), unknown_dcgm=parsed.unknown_dcgm))
    wide = wides[0] if len(wides) == 1 else pl.concat(wides, how="diagonal_relaxed") if wides else pl.DataFrame()
    wide, conflicts = refuse_host_conflicts_wide(wide, source=source, location=_where(pages))
    if len(wides) > 1:
        wide = wide.unique(subset=["gpu_uuid", "mig_instance_id", "ts"], keep="first", maintain_order=True)
    rows += conflicts
    stats.quarantined += len(conflicts)
    wide, implausible = split_implausible_times(wide, source=source, location=_where(pages),
                                                max_future_s=max_future_s)
    stats.quarantined += len(implausible)
    rows += implausible
    before = len(rows)
    with warehouse.transaction(con):
        stats.samples_new = store_wide(con, wide, cluster=cluster, source=source, refused=rows,
                                       location=_where(pages))
        if pods:  # pods' own activity on shared GPUs
            store_pod_rows(con, pl.concat(pods, how="vertical_relaxed"), cluster=cluster)
        warehouse.quarantine(con, rows)
    stats.quarantined += len(rows) - before  # UUIDs the warehouse holds on another host
    return stats


def _page_wide(parsed, *, source: str, location: str) -> tuple[pl.DataFrame, list]:
    """One page's wide rows, a UUID's second host refused first (one page can name one GPU under
    two hosts: the wide pivot would keep one row per device and time and drop the other silently)."""
    if parsed.points is not None and parsed.series is not None:
        points, conflicts = refuse_host_conflicts(parsed.points, parsed.series, source=source, location=location)
        return (series_long_to_wide(points, parsed.series) if conflicts else wide_rows(parsed)), conflicts
    samples, conflicts = refuse_host_conflicts_long(parsed.samples, source=source, location=location)
    return (long_to_wide(samples) if conflicts else wide_rows(parsed)), conflicts


def _where(pages) -> str:
    return pages[0][1] if len(pages) == 1 else f"{pages[0][1]} (+{len(pages) - 1} pages)"


def _ingest_pages_bulk(con, pages, *, cluster: str, max_future_s: float, source: str) -> IngestStats:
    """``ingest_pages`` with all pages parsed in one bulk pass (``parse_pages_bulk``) and one wide
    step; falls back to page by page where the bulk parser cannot read the text."""
    parsed = parse_pages_bulk([(t, ms) for t, _, ms in pages], max_future_s=max_future_s)
    if parsed is None:
        return sum_stats(ingest_pages(con, [p], cluster=cluster, max_future_s=max_future_s, source=source)
                         for p in pages)
    points, conflicts = refuse_host_conflicts(parsed.points, parsed.series, source=source, location=_where(pages))
    points = first_page_wins(points, parsed.series)
    wide = series_long_to_wide(points.drop("page"), parsed.series)
    rows = [warehouse.QuarantineRow(source, f"{pages[pg][1]}:{r.line_no}", r.raw_text, r.reason)
            for pg, r in parsed.rejects] + conflicts
    wide, implausible = split_implausible_times(wide, source=source, location=_where(pages),
                                                max_future_s=max_future_s)
    rows += implausible
    pods, _ = per_pod_rows(shared_device_points(points, parsed.series))
    with warehouse.transaction(con):
        new = store_wide(con, wide, cluster=cluster, source=source, refused=rows, location=_where(pages))
        store_pod_rows(con, pods, cluster=cluster)  # pods' own activity on shared GPUs
        warehouse.quarantine(con, rows)
    return IngestStats(pages=len(pages), lines=sum(parsed.lines), samples_parsed=parsed.points.height,
                       samples_new=new, quarantined=len(rows), unknown_dcgm=parsed.unknown_dcgm)


def first_page_wins(points: pl.DataFrame, series: pl.DataFrame) -> pl.DataFrame:
    """Drop the points of a (device, ts) that an earlier page already holds: ingested one page after
    another, the first page's row would be kept whole (samples are keyed (gpu_id, ts))."""
    if points.is_empty() or points["page"].n_unique() == 1:
        return points
    device = series.select(pl.struct("gpu_uuid", "mig_instance_id").rank("dense").alias("device"))["device"]
    dev = device.to_numpy()[points["series"].to_numpy()]
    tagged = points.with_columns(_dev=pl.Series(dev))
    return tagged.filter(pl.col("page") == pl.col("page").min().over("_dev", "ts")).drop("_dev")


def sum_stats(parts) -> IngestStats:
    total = IngestStats()
    for part in parts:
        total.add(part)
    return total


# a round's pages are written in batches of about this many characters (64 MB: a 10,240-GPU round of
# dcgm-exporter pages, ~40 MB and ~145k samples, in one write of ~0.3 s on one core), so readers still
# get turns between batches (yield_to_readers) while each write carries many pages: a write costs
# ~0.05 s however few rows it holds (a 10,240-GPU round in 10 MB batches: 0.27 M samples/s, in one: 0.44)
BATCH_CHARS = 64_000_000


def record_failure(con, result: FetchResult, *, source: str = SOURCE) -> None:
    """A target that could not be scraped: one quarantine row (location = URL) naming the error."""
    when = epoch_iso_z(result.scrape_ms / 1000)
    warehouse.quarantine(con, [warehouse.QuarantineRow(
        source, result.url, f"GET {result.url} at {when}", result.error or "unknown error")])


def ingest_results(con, results: Iterable[FetchResult], *, cluster: str = DEFAULT_CLUSTER,
                   max_future_s: float | None = None) -> IngestStats:
    """Ingest fetched pages; failed fetches are recorded and counted, never raised."""
    total = IngestStats()
    batch: list[tuple[str, str, int]] = []
    size = 0

    def flush() -> None:
        nonlocal size
        if batch:
            total.add(ingest_pages(con, batch, cluster=cluster, max_future_s=max_future_s))
            batch.clear()
            size = 0
            warehouse.yield_to_readers(con)  # a round of many pages takes seconds: readers get turns

    for result in results:
        if not result.ok:
            record_failure(con, result)
            total.add(IngestStats(failed_targets=1, errors=[result.error]))
            continue
        batch.append((result.text, result.url, result.scrape_ms))
        size += len(result.text)
        if size >= BATCH_CHARS:
            flush()
    flush()
    return total


def scrape(
    urls: Sequence[str],
    *,
    warehouse_path=None,
    cluster: str = DEFAULT_CLUSTER,
    interval_s: float = 30.0,
    count: int | None = 1,
    timeout_s: float = 10.0,
    retries: int = 3,
    backoff_s: float = 0.5,
    on_round: Callable[[int, IngestStats], None] | None = None,
    stop: threading.Event | None = None,
) -> IngestStats:
    """Scrape ``urls`` ``count`` times (>= 1; None: until interrupted), one round every
    ``interval_s`` seconds.

    Each round fetches concurrently, then takes the writer briefly (letting waiting readers in
    between pages); readers see each round as soon as it is written. ``stop`` (set by SIGINT /
    SIGTERM, see gpuledger.stopping) ends the run within a second: a round being fetched is
    abandoned, one being written is finished first.
    """
    if count is not None and count < 1:
        raise ValueError(f"count must be at least 1, not {count}")
    total = IngestStats()
    next_at = time.monotonic()
    session = requests.Session()
    rounds = itertools.count(1) if count is None else range(1, count + 1)  # None: until interrupted
    for round_no in rounds:
        results = fetch_targets(urls, timeout_s=timeout_s, retries=retries, backoff_s=backoff_s,
                                session=session, stop=stop)
        if results is None:
            break
        with warehouse.open_writer(warehouse_path) as con:
            stats = ingest_results(con, results, cluster=cluster)
        total.add(stats)
        if on_round:
            on_round(round_no, stats)
        if count is None or round_no < count:
            next_at += interval_s
            # a round that overran its slot starts the next one at once, not a burst to catch up
            next_at = max(next_at, time.monotonic())
            delay = max(0.0, next_at - time.monotonic())
            if stop is not None and stop.wait(delay):
                break
            if stop is None:
                time.sleep(delay)
    return total
