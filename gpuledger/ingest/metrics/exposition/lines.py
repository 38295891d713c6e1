"""The per-line rules of the exposition parser (the package docstring says what is refused and
why): a label set parsed and normalized, one line's verdict, and ``parse_exposition_lines``, the
reference the bulk parser (``bulk``) is held equal to."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

import polars as pl

from gpuledger.ingest.metrics import dcgm_fields as dcgm
from gpuledger.ingest.metrics.values import FIELD_CHECKS, value_problem

MAX_LABEL_LEN = 1024  # characters; real DCGM labels are < 100, a 10 kB label is garbage
DEFAULT_MAX_FUTURE_S = 300.0

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
K8S_SPELLINGS = {
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
    for column, spellings in K8S_SPELLINGS.items():
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


class LabelSetNumbers:
    """The series of a line-by-line parse: each distinct label text parsed once, and label texts
    that hold the same labels (another order, other spacing) one series."""

    def __init__(self) -> None:
        self.by_text: dict[str, int | str] = {}  # label text -> series number, or why it is refused
        self.rows: list[tuple] = []  # SERIES_COLUMNS tuples, in number order
        self._number: dict[tuple, int] = {}  # normalized label tuple + sorted labels -> series number

    def key(self, label_text: str) -> int | str:
        """``line_verdict``'s series_key: the text's series number, or the reason it is refused."""
        key = self.by_text.get(label_text)
        if key is None:
            try:
                labels = parse_labels(label_text)
                row = normalize_labels(labels)
                full = (row, tuple(sorted(labels.items())))
                key = self._number.get(full)
                if key is None:
                    key = self._number[full] = len(self.rows)
                    self.rows.append(row)
            except ValueError as exc:
                key = str(exc)
            self.by_text[label_text] = key
        return key


def parse_exposition_lines(
    text: str,
    *,
    scrape_ms: int,
    max_future_s: float = DEFAULT_MAX_FUTURE_S,
) -> ParsedPage:
    """``parse_exposition`` one line at a time in Python: the reference the bulk parser is held to,
    ~8x slower. A GPU's label set is parsed once and reused by all of its metric lines."""
    series = LabelSetNumbers()
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
        verdict = line_verdict(no, line, scrape_ms, future_limit, max_future_s, series.key)
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
    return ParsedPage.from_points(points, series_frame(series.rows), rejects, unknown, len(lines), skipped)


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
