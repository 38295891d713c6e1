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
reshaped in one of ``workers`` worker processes (``gpuledger.ingest._prometheus_worker``: fresh
interpreters, own GIL, cyclic GC off) ahead of the writes, and comes back as Arrow IPC bytes; this
process only writes, in order. Responses are asked uncompressed by default and read in bulk
(``points_from_matrix_json``: label sets once each with orjson, all points as one CSV text for
polars' reader; any body not in Prometheus' plain matrix layout goes through orjson), and pivoted
on integer keys (``series_long_to_wide``); one writer connection serves several chunks (released
every ``WRITER_HOLD_S`` so other writers get in).

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
import os
import pickle
import struct
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from itertools import chain
from operator import itemgetter
from pathlib import Path

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


def _get_body(session: requests.Session, url: str, params: dict, *, timeout_s: float, retries: int,
              backoff_s: float) -> tuple[int, bytes]:
    """(HTTP status, body) of a GET that did not fail with a 5xx / timeout / connection error, retried
    with exponential backoff; PrometheusError when every attempt failed."""
    error = None
    for attempt in range(retries + 1):
        try:
            response = session.get(url, params=params, timeout=timeout_s)
            if response.status_code < 500:
                return response.status_code, response.content
            error = f"HTTP {response.status_code}: {response.text[:200]}"
        except (requests.Timeout, requests.ConnectionError) as exc:
            error = f"{type(exc).__name__}: {exc}"
        if attempt < retries:
            time.sleep(backoff_s * 2 ** attempt)
    raise PrometheusError(f"{url} {params}: {error} (after {retries + 1} attempts)")


def _parse_json(url: str, params: dict, status: int, content: bytes) -> dict:
    try:
        body = orjson.loads(content)  # several times faster than json / requests
    except orjson.JSONDecodeError:
        text = content[:200].decode("utf-8", "replace")
        raise PrometheusError(f"{url} {params}: HTTP {status}, not JSON: {text}") from None
    if body.get("status") != "success":
        raise PrometheusError(f"{url} {params}: {body.get('errorType')}: {body.get('error')}")
    return body["data"]


def _get_json(session: requests.Session, url: str, params: dict, **kw) -> dict:
    return _parse_json(url, params, *_get_body(session, url, params, **kw))


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


def query_chunk_all_raw(session, url: str, metrics: Sequence[str], a: int, b: int, step_s: int,
                        **kw) -> tuple[pl.DataFrame, pl.DataFrame, list] | None:
    """``points_from_results(query_chunk_all(...))`` without building the JSON's millions of small
    Python lists: Prometheus' matrix JSON is parsed in bulk (``points_from_matrix_json``). None when
    this server drops ``__name__`` (then ask per metric)."""
    if b <= a or not metrics:
        return points_from_results({m: [] for m in metrics}, url=url)
    query = f"{url.rstrip('/')}/api/v1/query_range"
    params = _range_params(f'{{__name__=~"{"|".join(metrics)}"}}', a, b, step_s)
    status, content = _get_body(session, query, params, **kw)
    try:
        return points_from_matrix_json(content, metrics, url=url)
    except _NotPlainMatrix:  # an error, or JSON we do not read in bulk: the generic path decides
        data = _parse_json(query, params, status, content)
    out: dict[str, list[dict]] = {m: [] for m in metrics}
    for series in data.get("result", []):
        name = series["metric"].get("__name__")
        if name not in out:
            return None
        out[name].append(series)
    return points_from_results(out, url=url)


class _NotPlainMatrix(ValueError):
    """The body is not a successful matrix in the exact layout ``points_from_matrix_json`` reads."""


_MATRIX_HEAD = b'{"status":"success","data":{"resultType":"matrix","result":['
_MATRIX_TAIL = b"]}}"
_SERIES_HEAD, _SERIES_SEP, _LABELS_END, _SERIES_TAIL = b'{"metric":', b']]},{"metric":', b'},"values":[[', b"]]}"


def points_from_matrix_json(content: bytes, metrics: Sequence[str], *,
                            url: str) -> tuple[pl.DataFrame, pl.DataFrame, list] | None:
    """A query_range response body -> what ``points_from_results`` gives for it, read in bulk: each
    distinct label set once (orjson), every point at once (the ``[t,"v"]`` pairs become one CSV text
    for polars' reader). None when a series lacks a wanted ``__name__``; raises _NotPlainMatrix when
    the body is anything but a plain successful matrix in Prometheus' layout (an error, warnings,
    histograms, a label value holding the separators below...): the caller then decodes it whole."""
    if not (content.startswith(_MATRIX_HEAD) and content.endswith(_MATRIX_TAIL)):
        raise _NotPlainMatrix
    body = content[len(_MATRIX_HEAD):-len(_MATRIX_TAIL)]
    if not body:
        return points_from_results({m: [] for m in metrics}, url=url)
    if not (body.startswith(_SERIES_HEAD) and body.endswith(_SERIES_TAIL)):
        raise _NotPlainMatrix
    # {"metric":{L},"values":[[t,"v"],...,[t,"v"]]},{"metric":... -> per series: L}  and  t,"v"],...,[t,"v"
    pieces = body[len(_SERIES_HEAD):-len(_SERIES_TAIL)].split(_SERIES_SEP)
    wanted = {m: i for i, m in enumerate(metrics)}
    names = {f'"__name__":"{m}"'.encode(): i for i, m in enumerate(metrics)}
    parsed: dict[bytes, dict] = {}  # label text without __name__ (Prometheus sorts labels) -> labels
    labels: list[dict] = []
    series_metric: list[int] = []
    parts: list[bytes] = []
    lengths: list[int] = []
    try:
        for piece in pieces:
            end = piece.index(_LABELS_END)
            label_text = piece[:end + 1]
            name_at = label_text.find(b'"__name__":"')
            name_end = label_text.find(b'"', name_at + 12)
            metric_no = names.get(label_text[name_at:name_end + 1]) if name_at > 0 else None
            if metric_no is None:  # no or an unwanted __name__, or an unusual spelling: read it fully
                label_set = orjson.loads(label_text)
                if wanted.get(label_set.get("__name__")) is None:
                    return None
                raise _NotPlainMatrix
            key = label_text[:name_at] + label_text[name_end + 1:]
            label_set = parsed.get(key)
            if label_set is None:
                label_set = parsed[key] = orjson.loads(label_text)  # its __name__: the first series'
            labels.append(label_set)
            series_metric.append(metric_no)
            values = piece[end + len(_LABELS_END):]
            parts.append(values)
            lengths.append(values.count(b"],[") + 1)
        # t,"v"],[t,"v" ... -> t,v\nt,v : one CSV text, parsed in Rust
        text = b"],[".join(parts).replace(b"],[", b"\n").translate(None, b'"')
        pairs = pl.read_csv(io.BytesIO(text), has_header=False, new_columns=["t", "v"],
                            schema={"t": pl.Float64, "v": pl.Float64})
    except (ValueError, orjson.JSONDecodeError, pl.exceptions.PolarsError):
        raise _NotPlainMatrix from None
    if pairs.height != sum(lengths) or pairs.null_count().sum_horizontal().item():
        raise _NotPlainMatrix
    ts = (pairs["t"] * 1000).round().cast(pl.Int64)
    return _points_from_parts(list(metrics), series_metric, labels, lengths, ts, pairs["v"], url=url)


def long_from_results(results: dict[str, list[dict]], *, url: str) -> tuple[pl.DataFrame, list]:
    """{metric: query_range result} -> (long samples like ``parse_exposition``'s, quarantine rows)."""
    points, series, rejects = points_from_results(results, url=url)
    return points.join(series, on="series", how="left").drop("series"), rejects


def points_from_results(results: dict[str, list[dict]], *,
                        url: str) -> tuple[pl.DataFrame, pl.DataFrame, list]:
    """{metric: query_range result} -> (good samples: metric, series, ts, value; the ``series_frame``
    they point into; quarantine rows). The points are flattened and parsed in bulk (polars), not one
    Python float at a time."""
    metric_names = list(results)
    series_metric, labels, lengths, point_lists = [], [], [], []
    for metric_no, series in enumerate(results.values()):
        for s in series:
            values = s.get("values") or []
            series_metric.append(metric_no)
            labels.append(s["metric"])
            lengths.append(len(values))
            point_lists.append(values)
    points = list(chain.from_iterable(point_lists))  # [[t, "v"], ...]
    # Prometheus timestamps are seconds (int or float), values strings ("NaN", "+Inf" too)
    ts = _epoch_ms(list(map(itemgetter(0), points)))
    value = pl.Series(list(map(itemgetter(1), points)), dtype=pl.String).cast(pl.Float64)
    return _points_from_parts(metric_names, series_metric, labels, lengths, ts, value, url=url)


def _points_from_parts(metric_names: list[str], series_metric: list[int], labels: list[dict],
                       lengths: list[int], ts: pl.Series, value: pl.Series, *,
                       url: str) -> tuple[pl.DataFrame, pl.DataFrame, list]:
    """Series i is metric ``metric_names[series_metric[i]]`` with label set ``labels[i]`` and the
    next ``lengths[i]`` points of ``ts`` (epoch ms) / ``value``: -> ``points_from_results``' triple."""
    # targets whose plain k8s labels are the target's own (Prometheus renamed the exporter's)
    distinct = {id(label_set): label_set for label_set in labels}.values()  # shared dicts: once each
    renamed_targets = {(label_set.get("instance"), label_set.get("job")) for label_set in distinct
                       if any(k in label_set for k in _K8S_EXPORTED)}
    cache: dict[tuple, int | str] = {}
    by_id: dict[int, int | str] = {}  # the bulk decoder shares one dict per distinct label set
    rows: list[tuple] = []
    series_key = np.empty(len(labels), dtype=np.int64)
    keep = np.ones(len(labels), dtype=bool)
    rejects: list[warehouse.QuarantineRow] = []
    for i, label_set in enumerate(labels):
        key = by_id.get(id(label_set))
        if key is None:
            drop = (label_set.get("instance"), label_set.get("job")) in renamed_targets
            key_labels = (drop, tuple(sorted((k, v) for k, v in label_set.items() if k != "__name__")))
            key = cache.get(key_labels)
            if key is None:
                try:
                    key = len(rows)
                    rows.append(normalize_labels(label_set, drop_plain_k8s=drop))
                except ValueError as exc:
                    key = str(exc)
                cache[key_labels] = key
            by_id[id(label_set)] = key
        if isinstance(key, str):
            metric = metric_names[series_metric[i]]
            if "__name__" in label_set:  # a label set the bulk decoder shares between metrics
                label_set = {**label_set, "__name__": metric}
            rejects.append(warehouse.QuarantineRow(
                SOURCE, f"{url} {metric}", f"{metric}{label_set} ({lengths[i]} points)", key))
            keep[i] = False
            series_key[i] = -1
        else:
            series_key[i] = key
    per_point = np.arange(len(lengths)).repeat(lengths)
    frame = pl.DataFrame({
        "metric": pl.Series(metric_names, dtype=pl.String).gather(
            np.asarray(series_metric, dtype=np.int64)[per_point]),
        "series": pl.Series(series_key[per_point]),
        "ts": ts.cast(pl.Int64),
        "value": value.cast(pl.Float64),
    }, schema={"metric": pl.String, "series": pl.Int64, "ts": pl.Int64, "value": pl.Float64})
    if not keep.all():
        frame = frame.filter(pl.Series(keep[per_point]))
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


def _new_session(compress: bool) -> requests.Session:
    session = requests.Session()
    if not compress:
        # on the same host or a fast network, gzip costs Prometheus and us more CPU than it saves
        session.headers["Accept-Encoding"] = "identity"
    return session


_SESSIONS = threading.local()


def _decode_chunk(*, url: str, metrics: Sequence[str], a: int, b: int, step_s: int, kw: dict,
                  compress: bool, per_metric: bool) -> tuple[pl.DataFrame, list, int, bool]:
    """Query, decode and reshape one chunk: (wide frame, quarantine rows, points, whether the server
    drops ``__name__`` so the chunk was asked per metric). Runs ahead of the writes, on a worker."""
    session = getattr(_SESSIONS, "session", None)
    if session is None or _SESSIONS.compress != compress:  # one session per worker thread / process
        session = _SESSIONS.session = _new_session(compress)
        _SESSIONS.compress = compress
    decoded = None if per_metric else query_chunk_all_raw(session, url, metrics, a, b, step_s, **kw)
    if decoded is None:
        per_metric = True
        fetched = {m: query_chunk(session, url, m, a, b, step_s, **kw) for m in metrics}
        decoded = points_from_results(fetched, url=url)
        del fetched
    points, series, rejects = decoded
    return series_long_to_wide(points, series), rejects, points.height, per_metric


def _chunk_in_worker(**job) -> tuple[bytes, list, int, bool]:
    """``_decode_chunk`` in a worker process; the wide frame travels back as Arrow IPC bytes."""
    wide, rejects, points, per_metric = _decode_chunk(**job)
    buffer = io.BytesIO()
    wide.write_ipc(buffer)
    return buffer.getvalue(), rejects, points, per_metric


class _ChunkWorker:
    """One worker process (``gpuledger.ingest._prometheus_worker``) with at most one job at a time."""

    def __init__(self) -> None:
        roots = {str(Path(m.__file__).resolve().parents[1]) for m in (warehouse,)}
        roots.add(str(Path(__file__).resolve().parents[2]))  # where gpuledger is imported from
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([*sorted(roots), *filter(None, [env.get("PYTHONPATH")])])
        self.process = subprocess.Popen([sys.executable, "-m", "gpuledger.ingest._prometheus_worker"],
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)

    def submit(self, job: dict) -> _ChunkWorker:
        blob = pickle.dumps(job, protocol=pickle.HIGHEST_PROTOCOL)
        self.process.stdin.write(struct.pack("<Q", len(blob)) + blob)
        self.process.stdin.flush()
        return self

    def result(self):
        out = self.process.stdout
        head = out.read(8)
        blob = out.read(struct.unpack("<Q", head)[0]) if len(head) == 8 else b""
        if not blob:
            raise PrometheusError(f"backfill worker process exited ({self.process.poll()}); see its "
                                  "messages above. Rerun to continue.")
        ok, value = pickle.loads(blob)
        if not ok:
            raise value
        return value

    def close(self) -> None:
        # an idle worker leaves on EOF; a busy one on its next write (or is killed: it holds nothing
        # of the warehouse, only a chunk nobody will read)
        for pipe in (self.process.stdin, self.process.stdout):
            with contextlib.suppress(OSError):
                pipe.close()
        try:
            self.process.wait(timeout=2)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


class _ChunkPool:
    """``workers`` worker processes, each holding at most one chunk; ``submit`` returns something
    with ``.result()``. Processes start on first use and are stopped on exit."""

    def __init__(self, workers: int) -> None:
        self.size, self.idle, self.all = workers, deque(), []

    def start(self) -> None:
        """Start every worker now (their imports then overlap the caller's set-up)."""
        while len(self.all) < self.size:
            self.all.append(_ChunkWorker())
            self.idle.append(self.all[-1])

    def submit(self, fn, **job):
        if not self.idle:
            if len(self.all) >= self.size:
                raise RuntimeError("every backfill worker is busy")
            self.all.append(_ChunkWorker())
            self.idle.append(self.all[-1])
        worker = self.idle.popleft()
        pool = self

        class Pending:
            def result(self):
                try:
                    return worker.result()
                finally:
                    pool.idle.append(worker)

            def cancel(self):
                return False

        worker.submit(job)
        return Pending()

    def __enter__(self) -> _ChunkPool:
        return self

    def __exit__(self, *exc) -> None:
        for worker in self.all:
            worker.close()


def _chunk_pool(workers: int, processes: bool):
    """Worker processes (fresh interpreters: fork is unsafe with DuckDB / polars threads, and
    multiprocessing's spawn would re-run the caller's main script), or threads of this process
    with ``processes=False``."""
    if not processes:
        return ThreadPoolExecutor(max_workers=max(1, workers))
    return _ChunkPool(max(1, workers))


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
    processes: bool = True,
) -> BackfillStats:
    """Pull DCGM samples in [start, end) (naive UTC) from the Prometheus at ``url`` into the
    warehouse; resumes after the last chunk an earlier run finished. ``on_chunk(end_s, total, stats)``
    is called after each chunk commits. Raises PrometheusError when the server keeps failing (rerun
    to continue). ``workers``: chunks fetched and decoded ahead of the writes, in that many worker
    processes (``processes=False``: threads of this process, which share one GIL); each holds one
    chunk in memory, ~300 MB for 1,024 GPUs x 1 h. ``compress``: ask for gzip (worth it only
    over a slow link; on the same host it costs Prometheus and the decoder ~2x CPU)."""
    start_s, end_s = int(_epoch_s(start)), int(_epoch_s(end))
    if end_s <= start_s:
        raise ValueError(f"--end {_iso(end_s)} must be after --start {_iso(start_s)}")
    with _chunk_pool(workers, processes) as pool:
        if isinstance(pool, _ChunkPool):
            pool.start()  # the workers' imports overlap the checkpoint read and metric discovery
        scope = checkpoint_scope(url, start, end, step_s)
        with warehouse.open_writer(warehouse_path, publish=False) as con:
            position = read_checkpoint(con, scope)
        done_s = int(_epoch_s(datetime.fromisoformat(position.replace("Z", "+00:00")))) if position else None
        chunks = chunk_bounds(start_s, end_s, step_s, chunk_s)
        kw = {"timeout_s": timeout_s, "retries": retries, "backoff_s": backoff_s}
        session = _new_session(compress)
        chosen = list(metrics) if metrics else discover_metrics(session, url, **kw)
        stats = BackfillStats(chunks_total=len(chunks), metrics=chosen)
        todo = [(a, b) for a, b in chunks if done_s is None or b > done_s]
        stats.chunks_skipped = len(chunks) - len(todo)

        # Chunks are fetched and decoded up to ``workers`` ahead (Prometheus evaluating, our decoding
        # and the DuckDB writes overlap) but committed strictly in order, so the checkpoint is always a
        # prefix. With ``processes`` (default) each chunk is fetched, decoded and reshaped in a worker
        # process (own GIL; the wide frame comes back as Arrow IPC bytes) and this process only writes.
        job = dict(url=url, metrics=chosen, step_s=step_s, kw=kw, compress=compress)
        gc_was_enabled = gc.isenabled()
        if not processes:
            gc.disable()  # see _decode_chunk: the decode's millions of small lists hold no cycles
        with contextlib.ExitStack() as held:
            pending: deque = deque()
            queue = iter(todo)
            con, opened_at = None, 0.0
            per_metric = False  # set once the server turns out to drop __name__ from last_over_time

            def refill() -> None:
                while len(pending) < max(1, workers) and (nxt := next(queue, None)) is not None:
                    run = _chunk_in_worker if processes else _decode_chunk
                    pending.append((nxt[1], pool.submit(run, a=nxt[0], b=nxt[1], per_metric=per_metric, **job)))

            try:
                refill()
                while pending:
                    b, future = pending.popleft()
                    wide, rejects, points, dropped_name = future.result()
                    per_metric = per_metric or dropped_name
                    refill()  # the worker just freed starts on the next chunk while this one is written
                    if isinstance(wide, bytes):
                        wide = pl.read_ipc(io.BytesIO(wide))
                    if con is None:  # one writer connection for several chunks, each its own transaction
                        con, opened_at = held.enter_context(
                            warehouse.open_writer(warehouse_path, publish=False)), time.monotonic()
                    with warehouse.transaction(con):  # the chunk and its checkpoint, or neither
                        new = store_wide(con, wide, cluster=cluster, source=SOURCE)
                        warehouse.quarantine(con, rejects)
                        warehouse.upsert(con, "ingest_checkpoints", pl.DataFrame({
                            "source": [SOURCE], "scope": [scope], "position": [_iso(b)],
                            "updated_at": [datetime.now(UTC).replace(tzinfo=None)]}))
                    del wide
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
           "chunk_bounds", "discover_metrics", "long_from_results", "points_from_matrix_json",
           "points_from_results", "query_chunk", "query_chunk_all", "query_chunk_all_raw", "split_invalid"]
