"""A line-tolerant parser for dcgm-exporter's Prometheus text format, and the long -> wide step that
both DCGM sources (the ``/metrics`` scrape and the Prometheus backfill) share.

Why our own parser: ``prometheus_client.parser`` raises on the first bad line, so one truncated or
mis-quoted line would sink a whole scrape. This parser judges each line on its own, sends each bad
line to quarantine with a reason, and is also much faster (benchmarks/ingest_bench.py, BENCHMARKS.md
"Ingestion"): the rules are ``line_verdict``'s, applied line by line by ``parse_exposition_lines`` and,
for a large text, to whole columns by ``exposition_bulk`` (each distinct label set parsed once).

What is refused (one ``Reject`` per line, the rest of the page still lands):

* truncated lines, unbalanced quotes, malformed label sets, a value that is not a number;
* NaN / +-Inf values; negative or absurd values (a ratio above 1 after unit conversion, power above
  5 kW, ...). DCGM *blank* sentinels are not refused: they become NULL (``gpuledger.ingest.metrics.dcgm_fields``);
* label values longer than ``MAX_LABEL_LEN`` characters;
* a series repeated in one page (the first copy is kept);
* an explicit timestamp more than ``max_future_s`` after the scrape time;
* a DCGM series without a device identity (no ``UUID`` or no host label).

Unknown metrics are not refused: non-DCGM families (``go_*``, ``process_*``) are skipped silently,
DCGM fields the warehouse does not store (``DCGM_FI_DEV_XID_ERRORS``, PCIe counters, ...) are counted
in ``ParsedPage.unknown_dcgm`` so the caller can report them, since a default exporter sends ~25
families and quarantining the unstored ones on every scrape would drown the real problems.

Label spellings: ``Hostname`` / ``hostname``; Kubernetes ``namespace`` / ``pod_namespace``,
``pod`` / ``pod_name``, ``container`` / ``container_name``; Prometheus' ``exported_*`` renames win
over the plain label (the plain one then names the scrape target, not the GPU's workload).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np
import polars as pl
import pyarrow as pa

from gpuledger.ingest import mig
from gpuledger.ingest.metrics import dcgm_fields as dcgm
from gpuledger.ingest.metrics.values import FIELD_CHECKS, value_problem
from gpuledger.ingest.model_keys import gpu_model_key

MAX_LABEL_LEN = 1024  # characters; real DCGM labels are < 100, a 10 kB label is garbage
DEFAULT_MAX_FUTURE_S = 300.0
# below this many characters (~200 sample lines) parse_exposition reads line by line: faster there
BULK_FROM_CHARS = 50_000

# Series attributes, in the order of the tuples ``normalize_labels`` returns.
SERIES_COLUMNS = ("gpu_uuid", "mig_instance_id", "host", "gpu_index", "pci_bus_id", "model_name",
                  "mig_profile", "namespace", "pod", "container", "hpc_job")
SERIES_SCHEMA = {"gpu_uuid": pl.String, "mig_instance_id": pl.Int32, "host": pl.String,
                 "gpu_index": pl.Int32, "pci_bus_id": pl.String, "model_name": pl.String,
                 "mig_profile": pl.String, "namespace": pl.String, "pod": pl.String,
                 "container": pl.String, "hpc_job": pl.String}
JOB_COLUMNS = ("namespace", "pod", "container", "hpc_job")
JOB_ORDER = ("hpc_job", "pod", "namespace", "container")  # which job copy of a sample wins
DEVICE_ATTRS = ("host", "gpu_index", "pci_bus_id", "model_name", "mig_profile")

# Kubernetes label spellings, most trusted first.
_K8S_SPELLINGS = {
    "namespace": ("exported_namespace", "namespace", "pod_namespace", "exported_pod_namespace"),
    "pod": ("exported_pod", "pod", "pod_name", "exported_pod_name"),
    "container": ("exported_container", "container", "container_name", "exported_container_name"),
}

_METRIC_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*\Z")
_LABEL = re.compile(r'[ \t]*([a-zA-Z_][a-zA-Z0-9_]*)[ \t]*=[ \t]*"((?:[^"\\\n]|\\.)*)"[ \t]*(?:,|\Z)')
_ESCAPE = re.compile(r"\\(.)")
_ESCAPES = {"n": "\n", "\\": "\\", '"': '"'}


@dataclass(frozen=True)
class Reject:
    """One refused input line: its 1-based line number, raw text and why it was refused."""

    line_no: int
    raw_text: str
    reason: str


@dataclass
class ParsedPage:
    """A parsed page: ``samples`` in long form (one row per kept line), refused lines and counts.

    ``samples`` columns: line_no, metric, value (exported unit, blanks kept), ts (Datetime ms, UTC)
    and the SERIES_COLUMNS. The bulk parser also keeps the compact form it built ``samples`` from:
    ``points`` (line_no, metric, series, value, ts) and ``series`` (a ``series_frame``), which
    ``series_long_to_wide`` takes without the per-sample label columns; ``samples`` is then made
    on first use.
    """

    _samples: pl.DataFrame | None
    rejects: list[Reject] = field(default_factory=list)
    unknown_dcgm: Counter = field(default_factory=Counter)
    lines: int = 0
    skipped_other: int = 0
    points: pl.DataFrame | None = None
    series: pl.DataFrame | None = None

    @classmethod
    def from_points(cls, points: pl.DataFrame, series: pl.DataFrame, rejects: list[Reject],
                    unknown: Counter, lines: int, skipped: int) -> ParsedPage:
        return cls(None, rejects, unknown, lines, skipped, points, series)

    @property
    def samples(self) -> pl.DataFrame:
        if self._samples is None:
            self._samples = self.points.join(self.series, on="series", how="left", maintain_order="left").drop("series")
        return self._samples

    @property
    def sample_count(self) -> int:
        return (self.points if self._samples is None else self._samples).height


def _unescape(value: str) -> str:
    return _ESCAPE.sub(lambda m: _ESCAPES.get(m.group(1), "\\" + m.group(1)), value)


def parse_labels(text: str) -> dict[str, str]:
    """``gpu="0",UUID="GPU-.."`` -> dict. Raises ValueError naming the character where it fails."""
    out: dict[str, str] = {}
    pos, end = 0, len(text)
    while pos < end:
        if text[pos:].strip() == "":
            break
        m = _LABEL.match(text, pos)
        if m is None:
            raise ValueError(f"malformed label set at character {pos} (unbalanced quote, missing '=' "
                             "or ',')")
        name, value = m.group(1), m.group(2)
        if name in out:
            raise ValueError(f"label {name!r} appears twice")
        out[name] = _unescape(value) if "\\" in value else value
        pos = m.end()
    return out


def normalize_labels(labels: dict[str, str], *, drop_plain_k8s: bool = False) -> tuple:
    """Exporter labels -> a SERIES_COLUMNS tuple. Raises ValueError for a series that names no device
    or carries an oversize label. ``drop_plain_k8s``: the plain namespace/pod/container labels name the
    scrape target (Prometheus renamed the exporter's to exported_*), so only exported_* count."""
    for key, value in labels.items():
        if len(value) > MAX_LABEL_LEN:
            raise ValueError(f"label {key!r} is {len(value)} characters (limit {MAX_LABEL_LEN})")
    uuid = labels.get("UUID") or labels.get("uuid")
    host = dcgm.host_from_labels(labels)
    if not uuid or not host:
        raise ValueError("series names no device: needs a UUID and a Hostname/hostname label")
    mig_id = labels.get("GPU_I_ID")
    try:
        mig = int(mig_id) if mig_id not in (None, "") else -1
        gpu_index = int(labels["gpu"]) if labels.get("gpu", "") != "" else None
    except ValueError:
        raise ValueError(f"GPU_I_ID {mig_id!r} / gpu {labels.get('gpu')!r} is not an integer") from None
    k8s = {}
    for column, spellings in _K8S_SPELLINGS.items():
        k8s[column] = None
        for key in spellings:
            if drop_plain_k8s and not key.startswith("exported_"):
                continue
            if labels.get(key):
                k8s[column] = labels[key]
                break
    return (uuid, mig, host, gpu_index, labels.get("pci_bus_id") or None,
            labels.get("modelName") or None, labels.get("GPU_I_PROFILE") or None,
            k8s["namespace"], k8s["pod"], k8s["container"], labels.get("hpc_job") or None)


def parse_exposition(
    text: str,
    *,
    scrape_ms: int,
    max_future_s: float = DEFAULT_MAX_FUTURE_S,
) -> ParsedPage:
    """Parse a dcgm-exporter page. Samples without an explicit timestamp get ``scrape_ms``
    (epoch milliseconds). Every line is either kept, skipped (comment, non-DCGM family, unstored DCGM
    field) or refused with a reason; nothing raises on bad input.

    The bulk parser (``exposition_bulk``) handles the well-formed lines with whole-column polars
    operations and sends every other line through ``line_verdict``, the per-line rules of
    ``parse_exposition_lines``; both give the same page (tests/ingest/test_exposition_bulk.py). A
    small text (one 8-GPU node's page is ~25 kB) goes line by line, where that is quicker."""
    if len(text) < BULK_FROM_CHARS:  # one small page: the bulk path's fixed cost (~90 polars calls) is more
        return parse_exposition_lines(text, scrape_ms=scrape_ms, max_future_s=max_future_s)
    from gpuledger.ingest.metrics.exposition_bulk import parse_exposition_bulk

    return parse_exposition_bulk(text, scrape_ms=scrape_ms, max_future_s=max_future_s)


# line_verdict's answers (besides a sample tuple): a skipped line, or an unknown DCGM field's name
SKIP = "skip"
UNKNOWN = "unknown"


def line_verdict(no: int, line: str, scrape_ms: int, future_limit: int, max_future_s: float,
                 series_key) -> tuple | Reject | None:
    """What one raw line of a page is: None (comment or blank), ``(SKIP,)`` (non-DCGM family),
    ``(UNKNOWN, name)`` (DCGM field the warehouse does not store), a ``Reject``, or the sample
    ``(name, key, value, ts_ms)``. ``series_key(label_text)`` -> a series key, or a str: the reason
    the label set is refused. The duplicate check is the caller's (it needs the whole page)."""
    if not line or line[0] == "#":
        return None
    if line[-1] == "\r":
        line = line[:-1]
    if not line.strip():
        return None
    brace = line.find("{")
    name = line[:brace] if brace >= 0 else line.split(None, 1)[0]
    if not name.startswith("DCGM_FI_"):
        if _METRIC_NAME.match(name.strip()):
            return (SKIP,)
        return Reject(no, line, f"not a sample line: bad metric name {name[:80]!r}")
    if name not in FIELD_CHECKS:
        if _METRIC_NAME.match(name):
            return (UNKNOWN, name)
        return Reject(no, line, f"bad metric name {name[:80]!r}")
    if brace < 0:
        return Reject(no, line, "DCGM sample without labels: cannot tell which GPU")
    close = line.rfind("}")
    if close < brace:
        return Reject(no, line, "truncated line: label set never closed with '}'")
    rest = line[close + 1:].split()
    if not rest or len(rest) > 2:
        return Reject(no, line, "truncated line: expected 'value [timestamp]' after the labels")
    key = series_key(line[brace + 1:close])
    if key.__class__ is str:
        return Reject(no, line, key)
    try:
        value = float(rest[0])
    except ValueError:
        return Reject(no, line, f"value {rest[0][:40]!r} is not a number")
    if len(rest) == 2:
        try:
            ts = int(rest[1])
        except ValueError:
            return Reject(no, line, f"timestamp {rest[1][:40]!r} is not integer milliseconds")
        if ts > future_limit:
            return Reject(no, line, f"timestamp {ts} ms is {(ts - scrape_ms) / 3.6e6:.1f} h "
                                    f"after the scrape time (limit {max_future_s:g} s)")
    else:
        ts = scrape_ms
    problem = value_problem(name, value)
    if problem:
        return Reject(no, line, problem)
    return (name, key, value, ts)


def parse_exposition_lines(
    text: str,
    *,
    scrape_ms: int,
    max_future_s: float = DEFAULT_MAX_FUTURE_S,
) -> ParsedPage:
    """``parse_exposition`` one line at a time in Python: the reference the bulk parser is held to,
    ~8x slower. A GPU's label set is parsed once and reused by all of its metric lines."""
    series_index: dict[str, int | str] = {}  # label text -> series number, or the reason it is refused
    series_rows: list[tuple] = []
    canonical: dict[tuple, int] = {}  # normalized label tuple + sorted labels -> series number

    def series_key(label_text: str) -> int | str:
        key = series_index.get(label_text)
        if key is None:
            try:
                labels = parse_labels(label_text)
                row = normalize_labels(labels)
                full = (row, tuple(sorted(labels.items())))
                key = canonical.get(full)
                if key is None:
                    key = canonical[full] = len(series_rows)
                    series_rows.append(row)
            except ValueError as exc:
                key = str(exc)
            series_index[label_text] = key
        return key

    seen: set[tuple[str, int]] = set()
    rejects: list[Reject] = []
    unknown: Counter = Counter()
    out_line: list[int] = []
    out_metric: list[str] = []
    out_series: list[int] = []
    out_value: list[float] = []
    out_ts: list[int] = []
    future_limit = scrape_ms + int(max_future_s * 1000)
    skipped = 0
    lines = text.split("\n")
    for no, line in enumerate(lines, 1):
        verdict = line_verdict(no, line, scrape_ms, future_limit, max_future_s, series_key)
        if verdict is None:
            continue
        if verdict.__class__ is Reject:
            rejects.append(verdict)
            continue
        if verdict[0] is SKIP:
            skipped += 1
            continue
        if verdict[0] is UNKNOWN:
            unknown[verdict[1]] += 1
            continue
        name, key, value, ts = verdict
        if (name, key) in seen:
            rejects.append(Reject(no, lines[no - 1].removesuffix("\r"),
                                  "duplicate series in one scrape (the first copy is kept)"))
            continue
        seen.add((name, key))
        out_line.append(no)
        out_metric.append(name)
        out_series.append(key)
        out_value.append(value)
        out_ts.append(ts)
    points = _points_frame(out_line, out_metric, out_series, out_value, out_ts)
    return ParsedPage.from_points(points, series_frame(series_rows), rejects, unknown, len(lines), skipped)


def series_frame(rows: Iterable[tuple]) -> pl.DataFrame:
    """SERIES_COLUMNS tuples -> a frame with a ``series`` number column."""
    rows = list(rows)
    frame = pl.DataFrame(rows, schema=SERIES_SCHEMA, orient="row") if rows else pl.DataFrame(
        schema=SERIES_SCHEMA)
    return frame.with_row_index("series").with_columns(pl.col("series").cast(pl.Int64))


def _points_frame(line_no, metric, series, value, ts_ms) -> pl.DataFrame:
    return pl.DataFrame(
        {"line_no": line_no, "metric": metric, "series": series, "value": value, "ts": ts_ms},
        schema={"line_no": pl.Int64, "metric": pl.String, "series": pl.Int64, "value": pl.Float64,
                "ts": pl.Int64},
    ).with_columns(pl.col("ts").cast(pl.Datetime("ms")))


def long_to_wide(long: pl.DataFrame | pl.LazyFrame) -> pl.DataFrame:
    """Long samples (metric, value, ts, SERIES_COLUMNS) -> one cleaned row per (GPU device, ts).

    * ``hpc_job`` copies (one copy of every series per job on the GPU) collapse to one sample per
      (device, ts), the warehouse's natural key; the row keeps the smallest job id (and its pod
      labels), so the choice does not depend on line order.
    * Units, sentinels, fb_total and host spellings go through ``gpuledger.ingest.metrics.dcgm_fields.clean_wide``.
    * MIG: power and energy are device-level; every instance repeats its GPU's value. Only the
      instance with the lowest GPU_I_ID present at that ts keeps them, the others get NULL, so a sum
      over rows counts each physical GPU once (see ``device_level_once``).

    Returns gpu_uuid, mig_instance_id, ts (Datetime us), the device attributes, the job labels and the
    gpu_samples metric columns.
    """
    lf = long.lazy().with_columns(pl.col("ts").cast(pl.Datetime("us")))
    key = ["gpu_uuid", "mig_instance_id", "ts"]
    order = [*key, *JOB_ORDER]
    lf = lf.sort(order, nulls_last=True)
    labels = lf.group_by(key).agg([pl.col(c).first() for c in (*DEVICE_ATTRS, *JOB_COLUMNS)])
    values = lf.group_by([*key, "metric"]).agg(pl.col("value").first()).collect()
    if values.is_empty():
        return pl.DataFrame(schema={**{k: SERIES_SCHEMA[k] for k in key[:2]}, "ts": pl.Datetime("us")})
    wide = values.pivot(on="metric", index=key, values="value", aggregate_function="first")
    wide = wide.lazy().join(labels, on=key, how="left")
    cleaned = dcgm.clean_wide(wide, host_column="host")
    return device_level_once(cleaned).sort(key).collect()


def series_long_to_wide(points: pl.DataFrame, series: pl.DataFrame) -> pl.DataFrame:
    """``long_to_wide`` for long samples that name their series by number instead of carrying the
    label columns: ``points`` has metric, series, ts, value (finite: non-finite values are refused
    before this step); ``series`` is a ``series_frame``.

    Same rules and result (ties between copies that agree on hpc_job/pod/namespace/container aside),
    but the dedup and the pivot are integer scatters in numpy into a (metric x row) array, and the
    label strings are attached once per (device, ts) row, not per sample: ~20x faster on a
    Prometheus backfill chunk.
    """
    if points.is_empty():
        return long_to_wide(pl.DataFrame(schema={"metric": pl.String, "value": pl.Float64,
                                                 "ts": pl.Datetime("ms"), **SERIES_SCHEMA}))
    ranked, prio_of, dev_of, gpu_of_dev, mig_of_dev = _ranked_series(series)
    metric_names, m_code = _metric_codes(points["metric"])
    s_no = points["series"].to_numpy()
    ts_ms = points["ts"].cast(pl.Int64).to_numpy()
    stamps = pl.Series(ts_ms).unique().sort().to_numpy()
    n_m, n_t = len(metric_names), len(stamps)
    t_idx = np.searchsorted(stamps, ts_ms) if n_t > 1 else np.zeros(len(ts_ms), dtype=np.int64)
    cell = (np.take(dev_of, s_no) * n_t + t_idx) * n_m + m_code  # (device, ts, metric)
    prio = np.take(prio_of, s_no)
    kept, cell_kept = _first_per_cell(cell, prio)  # ascending cells
    row_of_cell, metric_of_cell = np.divmod(cell_kept, n_m)
    new_row = np.ones(len(kept), dtype=bool)
    new_row[1:] = row_of_cell[1:] != row_of_cell[:-1]
    starts = np.flatnonzero(new_row)
    rows = row_of_cell[starts]  # (device, ts) rows, ascending = sorted by gpu_uuid, GPU_I_ID, ts
    position = np.cumsum(new_row) - 1
    label_prio = np.minimum.reduceat(prio[kept], starts)  # the row's labels: its best copy
    row_dev, row_t = np.divmod(rows, n_t)
    flat = metric_of_cell * len(rows) + position  # into (metric, row) arrays, metric-major
    values = np.zeros((n_m, len(rows)))
    values.ravel()[flat] = points["value"].to_numpy()[kept]
    present = np.zeros((n_m, len(rows)), dtype=bool)
    present.ravel()[flat] = True
    # MIG: power and energy are device-level, every instance repeats its GPU's; only the lowest
    # GPU_I_ID at each (GPU, ts) keeps them (device_level_once; rows are in GPU, GPU_I_ID, ts order)
    device_level = [j for j, m in enumerate(metric_names)
                    if getattr(dcgm.FIELDS_BY_METRIC.get(m), "column", None) in _DEVICE_LEVEL_COLUMNS]
    if device_level and (mig_of_dev[row_dev] >= 0).any():
        holder = np.zeros(len(rows), dtype=bool)
        holder[np.unique(gpu_of_dev[row_dev] * n_t + row_t, return_index=True)[1]] = True
        present[np.ix_(device_level, np.flatnonzero(~holder))] = False
    valid = np.packbits(present, axis=1, bitorder="little")
    columns = [pl.Series(name, pa.Array.from_buffers(pa.float64(), len(rows), [
        pa.py_buffer(valid[j]), pa.py_buffer(values[j])])) for j, name in enumerate(metric_names)]
    if len(label_prio) != ranked.height or (label_prio != np.arange(ranked.height)).any():
        ranked = ranked[label_prio]  # (else every series is one row, in rank order: as it is)
    wide = pl.concat([ranked, pl.DataFrame(columns).with_columns(
        pl.Series("ts", stamps[row_t] * 1000).cast(pl.Datetime("us")))], how="horizontal")
    # rows are already in key order; hosts were made canonical per distinct host in _ranked_series
    return dcgm.clean_wide(wide, host_column=None).collect()


_DEVICE_LEVEL_COLUMNS = ("power_w", "energy_total_j")  # device_level_once's


# The last few series frames ranked, with their rankings: a scraper's rounds read the same series
# (only the values change; a large cluster's round in a few batches), so the sort and the host
# spellings are done once; an equal frame (compared whole, ~0.2 ms for 12,000 series) takes them.
_RECENT_RANKED = 4
_recent_ranked: tuple[tuple[pl.DataFrame, tuple], ...] = ()


def _ranked_series(series: pl.DataFrame) -> tuple[pl.DataFrame, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The series in device order (gpu_uuid, mig_instance_id), each device's copies best first
    (smallest hpc_job, pod, namespace, container): their attribute rows (host canonical, as
    ``clean_wide`` makes it) and, by series number, the priority (row) and device number; by device
    number, the GPU number and the GPU_I_ID."""
    global _recent_ranked
    for frame, ranking in _recent_ranked:  # one snapshot: another thread may replace the tuple meanwhile
        if frame.height == series.height and frame.schema == series.schema and frame.equals(series):
            return ranking
    ranked = series.sort(["gpu_uuid", "mig_instance_id", *JOB_ORDER], nulls_last=True, maintain_order=True)
    new_gpu = (ranked["gpu_uuid"] != ranked["gpu_uuid"].shift()).fill_null(True).to_numpy()
    new_dev = new_gpu | (ranked["mig_instance_id"] != ranked["mig_instance_id"].shift()).fill_null(True).to_numpy()
    dev = np.cumsum(new_dev) - 1
    n_series = int(series["series"].max()) + 1
    prio_of = np.zeros(n_series, dtype=np.int64)
    dev_of = np.zeros(n_series, dtype=np.int64)
    numbers = ranked["series"].to_numpy()
    prio_of[numbers] = np.arange(ranked.height)
    dev_of[numbers] = dev
    first = np.flatnonzero(new_dev)
    gpu_of_dev = (np.cumsum(new_gpu) - 1)[first]
    mig_of_dev = ranked["mig_instance_id"].to_numpy()[first]
    hosts = ranked["host"].unique()
    canonical = hosts.to_frame().select(dcgm.canonical_host_expr("host"))["host"]
    attrs = ranked.select("gpu_uuid", "mig_instance_id", *DEVICE_ATTRS, *JOB_COLUMNS).with_columns(
        pl.col("host").replace_strict(hosts, canonical, return_dtype=pl.String))
    for array in (prio_of, dev_of, gpu_of_dev, mig_of_dev):
        array.setflags(write=False)  # shared with later calls
    ranking = (attrs, prio_of, dev_of, gpu_of_dev, mig_of_dev)
    _recent_ranked = ((series.clone(), ranking), *_recent_ranked[:_RECENT_RANKED - 1])  # (a caller may mutate its own)
    return ranking


def _metric_codes(metric: pl.Series) -> tuple[list[str], np.ndarray]:
    """The distinct metric names, sorted, and each sample's position among them. A family's samples
    are adjacent, so only the first of each run of equal names is looked up."""
    head = (metric != metric.shift(1)).fill_null(True).to_numpy()
    heads = metric.filter(pl.Series(head))
    names = heads.unique().sort()
    code = heads.replace_strict(names, pl.int_range(len(names), eager=True), return_dtype=pl.Int64).to_numpy()
    return names.to_list(), code[np.cumsum(head) - 1]


def _first_per_cell(cell: np.ndarray, prio: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For each distinct cell, ascending: the sample that fills it (the smallest priority, then the
    first) and the cell. Usually every cell has one sample: a count says so, and no sort is needed."""
    n_cells = int(cell.max()) + 1
    if n_cells <= 4 * len(cell) + (1 << 20):
        count = np.bincount(cell, minlength=n_cells)
        if count.max() == 1:
            cells = np.flatnonzero(count)
            sample_of = np.empty(n_cells, dtype=np.int64)
            sample_of[cell] = np.arange(len(cell))
            return sample_of[cells], cells
    order = np.lexsort((prio, cell))  # by cell, then priority: the first of each cell wins
    cell_sorted = cell[order]
    firsts = np.ones(len(order), dtype=bool)
    firsts[1:] = cell_sorted[1:] != cell_sorted[:-1]
    return order[firsts], cell_sorted[firsts]


def wide_rows(parsed: ParsedPage) -> pl.DataFrame:
    """A parsed page's cleaned (device, ts) rows: from its series numbers when the bulk parser kept
    them (integer dedup and pivot, no per-sample label columns), else ``long_to_wide``. The two agree
    (tests/ingest/test_exposition_bulk.py)."""
    if parsed.points is not None and parsed.series is not None:
        return series_long_to_wide(parsed.points, parsed.series)
    return long_to_wide(parsed.samples)


def device_level_once(samples: pl.LazyFrame) -> pl.LazyFrame:
    """NULL the device-level columns (power_w, energy_total_j) on every MIG instance except the one
    with the lowest GPU_I_ID at each (gpu_uuid, ts); whole GPUs (mig_instance_id -1) keep theirs."""
    names = samples.collect_schema().names()
    cols = [c for c in ("power_w", "energy_total_j") if c in names]
    if not cols:
        return samples
    holder = pl.col("mig_instance_id") == pl.col("mig_instance_id").min().over(["gpu_uuid", "ts"])
    return samples.with_columns([pl.when(holder).then(pl.col(c)).otherwise(None).alias(c) for c in cols])


def mig_fraction(profile: str | None, model: str | None) -> float:
    """Compute share of a device: its MIG profile's (gpuledger.ingest.mig: ``3g.40gb`` = 3/7, an
    A30's ``2g.12gb`` = 2/4); 1.0 for a whole GPU or a profile no rule knows."""
    return mig.mig_fraction(profile, model) or 1.0 if profile else 1.0


def inventory_from_wide(wide: pl.DataFrame, cluster: str) -> pl.DataFrame:
    """gpus rows (for warehouse.register_gpus) from the newest attributes of each device in ``wide``,
    with first_seen / last_seen of this batch."""
    last = (wide.sort("ts").group_by(["gpu_uuid", "mig_instance_id"])
            .agg([pl.col(c).drop_nulls().last() for c in DEVICE_ATTRS]
                 + [pl.col("ts").min().alias("first_seen"), pl.col("ts").max().alias("last_seen")]))
    # a few distinct models and profiles among thousands of devices: map each distinct value once
    names = last["model_name"].unique()
    model_of = pl.Series([gpu_model_key(n) or "unknown" for n in names.to_list()], dtype=pl.String)
    models = last["model_name"].replace_strict(names, model_of, return_dtype=pl.String)
    pairs = pl.DataFrame({"mig_profile": last["mig_profile"], "model": models}).unique()
    pairs = pairs.with_columns(pl.Series("gpu_fraction", [
        mig_fraction(p, m) for p, m in pairs.select("mig_profile", "model").iter_rows()], dtype=pl.Float64))
    return last.with_columns(pl.lit(cluster).alias("cluster"), models.alias("model")).join(
        pairs, on=["mig_profile", "model"], how="left", nulls_equal=True, maintain_order="left")
