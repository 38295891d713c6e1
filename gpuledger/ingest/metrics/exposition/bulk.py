"""The bulk exposition parser: ``parse_exposition`` without per-line Python work.

A dcgm-exporter page is ~276 bytes per sample, and per-line Python (split, find, float, a dict
lookup) costs ~7 us a line: 0.14 M samples/s. Here the text is read as byte arrays (an ASCII
``str`` in place, not encoded), in pieces of ~16 Mi characters cut before a newline (``pieces``:
the parse's own working set is about twice what it reads at once), each piece so:

1. One numpy scan (``scan``), in ~2 MB steps cut after a newline, finds every newline, ``{``, ``}`` and byte
   that sends a line the per-line way (non-ASCII, tab, ...); a line whose only marks are a ``{``
   and then a ``}`` and a space is a sample candidate. While the step is in cache, the candidates'
   name, label text and ``value [timestamp]`` tail become Arrow string views into the text (no
   byte copied), and each name is compared with the line before's: a family's lines are adjacent,
   so only the first of each run is looked up in the catalog.
2. The tail is checked by one regex and cast in bulk (polars' float parse is correctly rounded,
   like Python's ``float``; tests hold the two equal).
3. Each *distinct* label text (dcgm-exporter repeats a device's label set on every family, so
   distinct label texts ~ devices) is parsed with polars string expressions when it is simple (no
   escapes, no spaces, short), else by ``parse_labels`` / ``normalize_labels`` in Python. A piece
   whose every label text is a recent piece's (a scraper's next round: pieces are cut at the same
   lines) takes that numbering after one comparison; label texts seen before come from a cache.
4. Values are range-checked in numpy.

Then, over the compact rows every piece kept (page, line, metric, series, value, time), the series
of all pieces are numbered as one and the first copy of a (metric, series) in a page is kept (looked
for only when some pair repeats): a copy in another piece is refused as one in the same piece is.

Every line the bulk path does not accept as plainly good (a comment aside) goes through
``lines.line_verdict``, the per-line rules, so errors keep their wording and line numbers. The
result equals ``parse_exposition_lines`` (tests/ingest/test_exposition_bulk.py).
"""

from __future__ import annotations

import threading
from collections import Counter
from dataclasses import dataclass

import numpy as np
import polars as pl
import pyarrow as pa

from gpuledger.ingest.metrics import dcgm_fields as dcgm
from gpuledger.ingest.metrics.exposition import pieces
from gpuledger.ingest.metrics.exposition.lines import (
    DEFAULT_MAX_FUTURE_S,
    K8S_SPELLINGS,
    MAX_LABEL_LEN,
    SERIES_COLUMNS,
    SERIES_SCHEMA,
    SKIP,
    UNKNOWN,
    ParsedPage,
    Reject,
    line_verdict,
    normalize_labels,
    parse_exposition_lines,
    parse_labels,
)
from gpuledger.ingest.metrics.exposition.pieces import line_texts, piece_bytes, plan_pieces
from gpuledger.ingest.metrics.exposition.scan import Text, name_views, read_lines
from gpuledger.ingest.metrics.values import FIELD_CHECKS
from gpuledger.rules.hosts import canonical_host_series

METRICS = tuple(FIELD_CHECKS)  # metric code = position here
_METRIC_ENUM = pl.Enum(METRICS)
_LO = np.array([FIELD_CHECKS[m][0] for m in METRICS])
_HI = np.array([FIELD_CHECKS[m][1] for m in METRICS])
_FP64 = np.array([FIELD_CHECKS[m][2] == "fp64" for m in METRICS])
_INT32 = np.array([FIELD_CHECKS[m][2] == "int32" for m in METRICS])

# 'value' or 'value timestamp' after the '} ', in the forms Python's float / int read the same way
_TAIL = r"^[-+]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][-+]?[0-9]+)?(?: -?[0-9]{1,18})?$"
# a label set parse_labels reads verbatim: name="value" pairs, no escapes, no blanks around them;
# no '=' in a value, no trailing ',' (the pieces then split exactly on '",' and '="')
_SIMPLE_LABELS = r'^(?:[a-zA-Z_][a-zA-Z0-9_]*="[^"\\\n=]*"(?:,[a-zA-Z_][a-zA-Z0-9_]*="[^"\\\n=]*")*)?$'
_VALID_NAME = r"^[a-zA-Z_:][a-zA-Z0-9_:]*$"
_INT = r"^-?[0-9]{1,9}$"


_NEEDED = ("UUID", "uuid", "Hostname", "hostname", "GPU_I_ID", "gpu", "pci_bus_id", "modelName",
           "GPU_I_PROFILE", "hpc_job", *(k for ks in K8S_SPELLINGS.values() for k in ks))


def canonical_key(labels: dict[str, str]) -> str:
    """The key two label texts share when they hold the same labels: the sorted ``name="value``
    pieces joined by ``",`` (as ``_simple_label_sets`` builds it from the text). Values the simple
    form cannot hold get a key of their own (a NUL first, which no simple key starts with)."""
    if any(c in v for v in labels.values() for c in ('"', "\\", "\n", "=")):
        return "\x00" + repr(sorted(labels.items()))
    return '",'.join(sorted(f'{k}="{v}' for k, v in labels.items()))


def _nonempty(column: str) -> pl.Expr:
    return pl.when(pl.col(column) != "").then(pl.col(column))  # ``labels.get(x) or None``


def _simple_label_sets(texts: pl.Series) -> pl.DataFrame:
    """Distinct label texts -> ``ok`` (read here), ``key`` (canonical_key) and the SERIES_COLUMNS,
    the way ``normalize_labels`` reads them. Not ok: anything unusual; Python decides those.

    A simple text splits on ``",`` into ``name="value`` pieces (values hold no quote), each piece on
    its first ``="``; the pieces of the labels normalize_labels reads are pivoted into columns."""
    sets = pl.DataFrame({"labels": texts}).with_row_index("set").with_columns(
        simple=pl.col("labels").str.contains(_SIMPLE_LABELS)
        & (pl.col("labels").str.len_chars() <= MAX_LABEL_LEN),  # so no value is over the limit
        pieces=pl.col("labels").str.strip_suffix('"').str.split('",'))
    sets = sets.with_columns(pieces=pl.when(pl.col("labels") != "").then(pl.col("pieces"))
                             .otherwise(pl.lit([], dtype=pl.List(pl.String))))
    pairs = (sets.select("set", "pieces").explode("pieces")
             .with_columns(pl.col("pieces").str.split_exact('="', 1).struct.rename_fields(["name", "value"]))
             .unnest("pieces"))
    twice = np.zeros(sets.height, dtype=bool)  # a label named twice: parse_labels words the error
    twice[pairs.group_by("set").agg(twice=pl.col("name").n_unique() < pl.len()).filter("twice")["set"].to_numpy()] = True
    wanted = pairs.filter(pl.col("name").is_in(_NEEDED))
    wide = wanted.pivot(on="name", index="set", values="value", aggregate_function="first") \
        if wanted.height else pl.DataFrame({"set": pl.Series([], dtype=pl.UInt32)})
    wide = wide.with_columns([pl.lit(None, dtype=pl.String).alias(n) for n in _NEEDED if n not in wide.columns])
    wide = sets.select("set", "simple", "pieces").join(wide, on="set", how="left").sort("set")
    k8s = {column: pl.coalesce([_nonempty(s) for s in spellings]) for column, spellings in K8S_SPELLINGS.items()}
    frame = wide.with_columns(
        gpu_uuid=pl.coalesce(_nonempty("UUID"), _nonempty("uuid")),
        host_raw=pl.coalesce(_nonempty("Hostname"), _nonempty("hostname")),
        pci_bus_id=_nonempty("pci_bus_id"), model_name=_nonempty("modelName"),
        mig_profile=_nonempty("GPU_I_PROFILE"), hpc_job=_nonempty("hpc_job"), **k8s,
    )
    frame = frame.with_columns(host=canonical_host_series(frame["host_raw"]))
    mig_ok = pl.col("GPU_I_ID").fill_null("").is_in([""]) | pl.col("GPU_I_ID").str.contains(_INT)
    gpu_ok = pl.col("gpu").fill_null("").is_in([""]) | pl.col("gpu").str.contains(_INT)
    return frame.select(
        ok=(pl.col("simple") & ~pl.lit(pl.Series(twice))
            & pl.col("gpu_uuid").is_not_null() & (pl.col("host").fill_null("") != "")
            & mig_ok & gpu_ok).fill_null(False),
        key=pl.col("pieces").list.sort().list.join('",'),
        gpu_uuid="gpu_uuid",
        mig_instance_id=pl.when(pl.col("GPU_I_ID").fill_null("") == "").then(-1)
        .otherwise(pl.col("GPU_I_ID").cast(pl.Int32, strict=False)).cast(pl.Int32),
        host="host",
        gpu_index=pl.when(pl.col("gpu").fill_null("") == "").then(None)
        .otherwise(pl.col("gpu").cast(pl.Int32, strict=False)).cast(pl.Int32),
        **{c: c for c in ("pci_bus_id", "model_name", "mig_profile", "namespace", "pod", "container",
                          "hpc_job")},
    ).select("ok", "key", *SERIES_COLUMNS)


# Label texts already read, with what _simple_label_sets made of them: a scraper reads the same
# exporters every 30 s, so after the first round nearly every label text is a hit (~1/3 of a parse
# saved). A pure function of the text; cleared when it grows past _CACHE_ROWS (pods come and go).
_CACHE_ROWS = 100_000  # ~55 MB (~560 bytes a row); a 10,240-GPU cluster has ~12,000 label sets
_cache: pl.DataFrame | None = None
_cache_lock = threading.Lock()


def clear_label_cache() -> None:
    """Forget the label texts read so far (benchmarks: a cold parse)."""
    global _cache, _recent
    with _cache_lock:
        _cache = None
        _recent = ()


def _label_sets_cached(texts: pl.Series, hashes: pl.Series) -> pl.DataFrame:
    """``_simple_label_sets(texts)`` (same rows, same order) and ``labels``, the texts copied out of
    the page, from the cache where it can: looked up by the texts' ``hashes`` (an integer join), a
    hit only where the cached text is the same."""
    global _cache
    frame = pl.DataFrame({"hash": hashes, "labels": texts})
    cache = _cache  # one snapshot: another thread may replace the global meanwhile
    if cache is None:
        missing = _with_owned(frame.hstack(_simple_label_sets(texts)))
        sets = missing.drop("hash")
    else:
        found = frame.select("hash").join(cache, on="hash", how="left", maintain_order="left")
        if found.height == frame.height:
            hit = (found["labels"] == texts).fill_null(False)
        else:  # two cached texts share a hash: look up by text instead
            found = _with_owned(frame.join(cache.drop("hash"), on="labels", how="left", maintain_order="left"))
            hit = found["ok"].is_not_null()  # ok is never null in the cache
        if hit.all():
            return found.drop("hash")
        missing = _with_owned(frame.filter(~hit).hstack(_simple_label_sets(texts.filter(~hit))))
        where = np.concatenate((np.flatnonzero(hit.to_numpy()), np.flatnonzero(~hit.to_numpy())))
        sets = pl.concat([found.filter(hit).drop("hash"), missing.drop("hash")])[np.argsort(where)]
    with _cache_lock:
        base = _cache if _cache is not None and _cache.height + missing.height <= _CACHE_ROWS else None
        _cache = missing if base is None else pl.concat([base, missing])
    return sets


def _with_owned(frame: pl.DataFrame) -> pl.DataFrame:
    return frame.with_columns(labels=_owned(frame["labels"]))  # what is kept holds no page


class _Series:
    """Series numbering shared by the bulk path and the per-line slow path: canonical key -> number."""

    def __init__(self) -> None:
        self.frames: list[pl.DataFrame] = []  # SERIES_COLUMNS rows, in number order
        self.bulk_keys: list[pl.Series] = []
        self.number: dict[str, int] | None = None  # key -> number, built when the slow path needs it
        self.count = 0
        self.by_text: dict[str, int | str] = {}

    def add_frame(self, keys: pl.Series, rows: pl.DataFrame) -> np.ndarray:
        """Number the distinct ``keys`` (``rows``: their SERIES_COLUMNS); returns each key's number."""
        first = keys.is_first_distinct()
        if first.all():  # the usual: one label text per series
            uniq, numbers = keys, np.arange(self.count, self.count + len(keys))
        else:
            uniq = keys.filter(first)
            numbers = keys.replace_strict(uniq, pl.int_range(self.count, self.count + len(uniq), eager=True),
                                          return_dtype=pl.Int64).to_numpy()
        self.frames.append(rows.filter(first))
        self.bulk_keys.append(uniq)
        self.count += len(uniq)
        return numbers

    def restore(self, frames: tuple[pl.DataFrame, ...], keys: tuple[pl.Series, ...], count: int) -> None:
        """Take the bulk numbering an earlier parse made of the same label texts (``_Numbered``)."""
        self.frames, self.bulk_keys, self.count = list(frames), list(keys), count

    def key_of_text(self, label_text: str) -> int | str:
        """``line_verdict``'s series_key: a number, or the reason the label set is refused."""
        got = self.by_text.get(label_text)
        if got is not None:
            return got
        if self.number is None:
            self.number = {k: n for n, k in enumerate(k for keys in self.bulk_keys for k in keys.to_list())}
        try:
            labels = parse_labels(label_text)
            row = normalize_labels(labels)
        except ValueError as exc:
            got = str(exc)
        else:
            key = canonical_key(labels)
            got = self.number.get(key)
            if got is None:
                got = self.number[key] = self.count
                self.count += 1
                self.frames.append(pl.DataFrame([row], schema=SERIES_SCHEMA, orient="row"))
        self.by_text[label_text] = got
        return got

    def frame(self) -> pl.DataFrame:
        """The series_frame of every number handed out."""
        return _series_frame(self.frames)

    def keys(self) -> pl.Series:
        """The canonical key of every number handed out, in number order: the bulk path's first
        (numbered from 0 by ``add_frame`` or ``restore``), then the per-line path's."""
        bulk = pl.concat(self.bulk_keys) if self.bulk_keys else pl.Series([], dtype=pl.String)
        slow = sorted((n, k) for k, n in (self.number or {}).items() if n >= len(bulk))
        return pl.concat([bulk, pl.Series([k for _, k in slow], dtype=pl.String)]) if slow else bulk


def _series_frame(frames: list[pl.DataFrame]) -> pl.DataFrame:
    """A series_frame of SERIES_COLUMNS rows in number order, given in parts."""
    parts = [f.select(SERIES_COLUMNS).cast(SERIES_SCHEMA) for f in frames]
    series = pl.concat(parts) if parts else pl.DataFrame(schema=SERIES_SCHEMA)
    return series.with_row_index("series").with_columns(pl.col("series").cast(pl.Int64))


def _owned(texts: pl.Series) -> pl.Series:
    """``texts`` copied out of the page buffer (what a cache keeps must not hold a 40 MB page)."""
    return pl.from_arrow(texts.to_arrow().cast(pa.large_string())).rename(texts.name)


def _metric_column(codes: np.ndarray) -> pl.Series:
    """METRICS[codes] as a String column: views into one small buffer of the names."""
    array = pa.Array.from_buffers(pa.string_view(), len(codes),
                                  [None, pa.py_buffer(np.take(_METRIC_VIEWS, codes, axis=0)), _METRIC_BUFFER])
    return pl.Series(array)


_METRIC_BUFFER, _METRIC_VIEWS = name_views(METRICS)


@dataclass
class ParsedPages:
    """Several pages parsed in one go (``parse_pages_bulk``): ``points`` has a ``page`` column (the
    page's position) and each page's own line numbers; ``rejects`` are ``(page, Reject)``."""

    points: pl.DataFrame
    series: pl.DataFrame
    rejects: list[tuple[int, Reject]]
    unknown_dcgm: Counter
    lines: list[int]
    skipped_other: int


def parse_exposition_bulk(text: str, *, scrape_ms: int,
                          max_future_s: float = DEFAULT_MAX_FUTURE_S) -> ParsedPage:
    """``parse_exposition``, in bulk (module docstring). Same result as ``parse_exposition_lines``."""
    got = parse_pages_bulk([(text, scrape_ms)], max_future_s=max_future_s)
    if got is None:
        return parse_exposition_lines(text, scrape_ms=scrape_ms, max_future_s=max_future_s)
    return ParsedPage.from_points(got.points.drop("page"), got.series, [r for _, r in got.rejects],
                                  got.unknown_dcgm, got.lines[0], got.skipped_other)


def parse_pages_bulk(pages: list[tuple[str, int]], *,
                     max_future_s: float = DEFAULT_MAX_FUTURE_S) -> ParsedPages | None:
    """Pages ``(text, scrape_ms)`` parsed in bulk, each by its own rules (its line numbers, its
    scrape time and future limit, duplicates within the page), the series numbered across all. A
    scrape round of 1,280 node pages costs a few passes, not 1,280. None when the text cannot be read
    in bulk (lone surrogates, a 64-bit hash collision): parse each page line by line then.

    The text is read in pieces (``pieces``: ~16 Mi characters cut before a newline, small pages
    together, a large page in several), each by ``parse_piece``; what a piece keeps is compact rows
    with its series numbered into the pages' one numbering (``_SeriesMerge``). The repeated-series
    rule then runs over every piece's rows at once (``first_copies``), so a copy in another piece of
    the page is refused as one in the same piece is."""
    texts = [text for text, _ in pages]
    page_ms = np.array([ms for _, ms in pages], dtype=np.int64)
    merged = _SeriesMerge()
    rows = _Rows()  # page, line_no, metric code, series, value, ts of the samples kept
    rejects: list[tuple[int, Reject]] = []
    unknown: Counter = Counter()
    skipped = 0
    lines = np.zeros(len(pages), dtype=np.int64)  # each page's lines read so far
    for segments in plan_pieces(texts, pieces.PIECE_CHARS):
        got = piece_bytes(texts, segments)
        if got is None:
            return None
        seg_page = np.array([s.page for s in segments], dtype=np.int64)
        piece = parse_piece(*got, page_ms[seg_page], max_future_s=max_future_s)
        if piece is None:
            return None
        lines_before = lines[seg_page]  # each segment's page's lines in the pieces before
        seg = piece.layout.page_of_line[piece.line_no - 1]  # each sample's segment
        line_no = piece.line_no - np.take(piece.layout.page_first, seg) + np.take(lines_before, seg)
        rows.append((np.take(seg_page, seg), line_no, piece.m_code, piece.s_no + merged.add(piece.series),
                     piece.vals, piece.stamps))
        for sg, r in piece.rejects:
            before = int(lines_before[sg])
            rejects.append((int(seg_page[sg]), Reject(r.line_no + before, r.raw_text, r.reason) if before else r))
        np.add.at(lines, seg_page, piece.layout.page_lines)
        unknown.update(piece.unknown)
        skipped += piece.skipped
    page, line_no, m_code, s_no, vals, stamps = rows.columns()
    final, series = merged.numbering()
    if final is not None:
        s_no = np.take(final, s_no)
    keep = first_copies(page, s_no, m_code, series.height)
    if keep is not None:
        rejects += repeat_rejects(page[~keep], line_no[~keep], texts)
        page, line_no, m_code, s_no, vals, stamps = (a[keep] for a in (page, line_no, m_code, s_no, vals, stamps))
    rejects.sort(key=lambda r: (r[0], r[1].line_no))
    return ParsedPages(_points(page, line_no, m_code, s_no, vals, stamps), series, rejects, unknown,
                       lines.tolist(), skipped)


@dataclass
class _Piece:
    """What ``parse_piece`` read: the kept samples (line_no 1-based over the piece's lines, metric
    code, series number in ``series``, value, ts in ms) before the repeated-series rule, the refused
    lines ``(segment, Reject)`` numbered within their segment, and the segments' layout."""

    line_no: np.ndarray
    m_code: np.ndarray
    s_no: np.ndarray
    vals: np.ndarray
    stamps: np.ndarray
    series: _Series
    layout: PageLayout
    rejects: list[tuple[int, Reject]]
    unknown: Counter
    skipped: int


def parse_piece(data: np.ndarray, seg_start: np.ndarray, seg_ms: np.ndarray, *,
                max_future_s: float) -> _Piece | None:
    """One piece of text (``data``: its bytes, segments joined by newlines; ``seg_start``: the byte
    each segment starts at; ``seg_ms``: each segment's page's scrape time) read in bulk; None on a
    64-bit hash collision or a piece of 2 GB.

    The stages, in order: scan the text (``scan.read_lines``), place each line in its segment
    (``page_layout``), read the tails (``tail_values``), settle the lines of other families
    (``other_families``), number the label texts (``_number_label_texts``), pick the lines the bulk
    path keeps (``fast_lines``), judge the rest by the per-line rules (``slow_verdicts``) and merge
    the two (``merge_slow``)."""
    text = Text(data)
    buf = text.buf
    size = len(buf)
    if size >= 2**31:  # string views address the text with 32-bit offsets
        return None
    future_ms = int(max_future_s * 1000)
    lines = read_lines(text, int(seg_start[0]))
    starts, cand_idx = lines.starts, lines.cand
    n_lines = len(starts)

    def line_text(i: int) -> str:  # up to its newline (or the text's end)
        return buf[starts[i]:starts[i + 1] - 1 if i + 1 < n_lines else size].tobytes().decode("utf-8")

    layout = page_layout(seg_start, starts)
    names, tails = text.column(lines.name_views), text.column(lines.tail_views)
    code, run = _metric_codes(names, lines.name_head)
    cand_seg = layout.page_of_line[cand_idx]
    tail_ok, value, ts, has_ts = tail_values(tails, seg_ms[cand_seg])
    unknown, skipped, settled_other = other_families(names, code, run, lines.name_head)

    series = _Series()
    good = (code >= 0) & tail_ok
    series_no = series_numbers(text, lines.label_views, good, series)
    if series_no is None:
        return None
    codes = np.maximum(code, 0)
    fast = fast_lines(good, series_no, codes, value, has_ts, ts, seg_ms[cand_seg] + future_ms)

    # the per-line rules for every other line that is not a comment or an empty line
    slow_idx = np.sort(np.concatenate((lines.other, cand_idx[~(fast | settled_other)])))
    rejects, slow_samples, slow_skipped, slow_unknown = slow_verdicts(
        slow_idx, line_text, layout, seg_ms, future_ms, max_future_s, series.key_of_text)
    unknown.update(slow_unknown)

    if fast.all():  # the usual page: no copies
        kept = (cand_idx[fast] + 1, codes, series_no, value, ts)
    else:
        kept = (cand_idx[fast] + 1, codes[fast], series_no[fast], value[fast], ts[fast])
    line_no, m_code, s_no, vals, stamps = merge_slow(*kept, slow_samples)  # line_no: over the piece, 1-based
    return _Piece(line_no, m_code, s_no, vals, stamps, series, layout, rejects, unknown, skipped + slow_skipped)


class _SeriesMerge:
    """The series of all pieces numbered as one: each piece's series are numbered on from the
    pieces' before (``add``), then a label set met in several pieces takes the number of its first
    (by canonical key, ``numbering``), in first-seen order. One pass at the end, not one per piece."""

    def __init__(self) -> None:
        self.keys: list[pl.Series] = []
        self.frames: list[pl.DataFrame] = []
        self.count = 0

    def add(self, series: _Series) -> int:
        """Take ``series``' numbers; returns the offset that makes them numbers of the merge."""
        offset = self.count
        self.keys.append(series.keys())
        self.frames += series.frames
        self.count += series.count
        return offset

    def numbering(self) -> tuple[np.ndarray | None, pl.DataFrame]:
        """(each merged number's final number, None when every label set is in one piece only: the
        numbers stand; the series_frame of the final numbers)."""
        frame = _series_frame(self.frames)
        if len(self.keys) < 2:
            return None, frame
        keys = pl.concat(self.keys)
        first = (pl.DataFrame({"key": keys, "at": np.arange(len(keys))})
                 .select(pl.col("at").first().over("key"))["at"].to_numpy())
        is_first = first == np.arange(len(keys))
        if is_first.all():
            return None, frame
        final = np.take(np.cumsum(is_first) - 1, first)
        kept = frame.filter(pl.Series(is_first)).drop("series")
        return final, kept.with_row_index("series").with_columns(pl.col("series").cast(pl.Int64))


def series_numbers(text: Text, label_views: np.ndarray, good: np.ndarray, series: _Series) -> np.ndarray | None:
    """Each candidate's series number (-1: not a ``good`` line, or the per-line rules decide), the
    ``good`` lines' label texts numbered into ``series``; None on a 64-bit hash collision."""
    good_idx = np.flatnonzero(good)
    series_no = np.full(len(good), -1, dtype=np.int64)
    if len(good_idx):
        labels = text.column(np.take(label_views, good_idx, axis=0))  # (2-D fancy indexing: ~15x slower)
        numbers = _number_label_texts(labels, series)
        if numbers is None:
            return None
        series_no[good_idx] = numbers
    return series_no


def repeat_rejects(page: np.ndarray, line_no: np.ndarray, texts: list[str]) -> list[tuple[int, Reject]]:
    """(page, Reject) for each repeated sample: its page and line there (1-based), the line's text
    read back from the page (``pieces.line_texts``: its piece is gone by now)."""
    out = []
    for pg in np.unique(page).tolist():
        numbers = line_no[page == pg].tolist()
        out += [(pg, Reject(no, raw, "duplicate series in one scrape (the first copy is kept)"))
                for no, raw in zip(numbers, line_texts(texts[pg], numbers), strict=True)]
    return out


class _Rows:
    """The samples every piece kept (page, line_no, metric code, series, value, ts), appended piece
    after piece into arrays that grow by doubling: a few large blocks, so the pieces' short-lived
    arrays are not left scattered between small kept ones (which kept ~30 MiB more of a 125 MiB
    page's parse resident)."""

    _DTYPES = (np.int64, np.int64, np.int64, np.int64, np.float64, np.int64)

    def __init__(self) -> None:
        self.n = 0
        self.arrays = [np.empty(0, dtype=dtype) for dtype in self._DTYPES]

    def append(self, columns: tuple[np.ndarray, ...]) -> None:
        end = self.n + len(columns[0])
        if end > len(self.arrays[0]):
            room = max(end, 2 * len(self.arrays[0]), 1 << 16)
            grown = [np.empty(room, dtype=a.dtype) for a in self.arrays]
            for new, old in zip(grown, self.arrays, strict=True):
                new[:self.n] = old[:self.n]
            self.arrays = grown
        for array, column in zip(self.arrays, columns, strict=True):
            array[self.n:end] = column
        self.n = end

    def columns(self) -> tuple[np.ndarray, ...]:
        return tuple(a[:self.n] for a in self.arrays)


@dataclass(frozen=True)
class PageLayout:
    """Where the pages lie among the text's lines: each line's page, the (global, 0-based) index of
    each page's line 1, and each page's line count."""

    page_of_line: np.ndarray
    page_first: np.ndarray
    page_lines: np.ndarray


def page_layout(page_start: np.ndarray, starts: np.ndarray) -> PageLayout:
    """``page_start``: each page's first byte in the text; ``starts``: each line's first byte."""
    n_lines = len(starts)
    if len(page_start) == 1:
        page_of_line = np.zeros(n_lines, dtype=np.int64)
        page_first = np.zeros(1, dtype=np.int64)
    else:
        page_of_line = np.searchsorted(page_start, starts, side="right") - 1
        page_first = np.searchsorted(starts, page_start)
    return PageLayout(page_of_line, page_first, np.diff(np.concatenate((page_first, [n_lines]))))


def tail_values(tails: pl.Series, scrape_ms: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Each candidate's ``value [timestamp]`` tail -> (well formed, value, ts in ms, has its own
    timestamp). A tail without a timestamp takes its page's ``scrape_ms``; a malformed one's value
    and ts mean nothing (the per-line rules word why)."""
    tail_ok = tails.str.contains(_TAIL).to_numpy()
    value_s = tails.cast(pl.Float64, strict=False)  # null where a timestamp follows
    stamped = value_s.is_null().to_numpy() & tail_ok
    value = value_s.to_numpy()
    has_ts = np.zeros(len(tails), dtype=bool)
    ts = scrape_ms.copy()
    if stamped.any():
        parts = tails.filter(pl.Series(stamped)).str.split_exact(" ", 1).struct.unnest()
        value[stamped] = parts["field_0"].cast(pl.Float64, strict=False).to_numpy()
        ts[stamped] = parts["field_1"].cast(pl.Int64, strict=False).fill_null(0).to_numpy()
        has_ts = stamped
    return tail_ok, value, ts, has_ts


def other_families(names: pl.Series, code: np.ndarray, run: np.ndarray,
                   head: np.ndarray) -> tuple[Counter, int, np.ndarray]:
    """The candidate lines of families the warehouse does not store, settled by their (plain) name:
    (lines per unknown DCGM field, lines of non-DCGM families skipped, which lines are settled). The
    lines of a run share their name, so each run is judged once; a name that is not a valid metric
    name is left to the per-line rules, which word the reason."""
    unknown: Counter = Counter()
    settled = np.zeros(len(code), dtype=bool)
    if not (code < 0).any():
        return unknown, 0, settled
    heads = np.flatnonzero(head)
    other_run = np.flatnonzero(code[heads] < 0)
    oname = names.gather(heads[other_run])
    run_lines = np.diff(np.append(heads, len(code)))[other_run]
    valid = oname.str.contains(_VALID_NAME).to_numpy()
    dcgm_name = oname.str.starts_with("DCGM_FI_").to_numpy()
    counted = valid & dcgm_name
    if counted.any():
        per_name = (pl.DataFrame({"name": oname.filter(pl.Series(counted)), "lines": run_lines[counted]})
                    .group_by("name").agg(pl.col("lines").sum()))
        unknown.update(dict(per_name.iter_rows()))
    valid_run = np.zeros(len(heads), dtype=bool)
    valid_run[other_run[valid]] = True
    return unknown, int(run_lines[valid & ~dcgm_name].sum()), valid_run[run]


def fast_lines(good: np.ndarray, series_no: np.ndarray, codes: np.ndarray, value: np.ndarray,
               has_ts: np.ndarray, ts: np.ndarray, future_limit: np.ndarray) -> np.ndarray:
    """The candidates the bulk path keeps as they are: a stored field with a good tail, a numbered
    series, a finite value in range (or a DCGM blank), no timestamp past its page's limit."""
    v_ok = np.isfinite(value) & _value_ok(codes, value)
    return good & (series_no >= 0) & v_ok & (~has_ts | (ts <= future_limit))


def slow_verdicts(slow_idx: np.ndarray, line_text, layout: PageLayout, page_ms: np.ndarray, future_ms: int,
                  max_future_s: float, series_key) -> tuple[list[tuple[int, Reject]], list[tuple], int, Counter]:
    """``line_verdict`` for each line of ``slow_idx`` (global, 0-based): (rejects as (page,
    Reject), samples as (global 1-based line, metric code, series, value, ts), lines skipped,
    unknown DCGM fields)."""
    rejects: list[tuple[int, Reject]] = []
    samples: list[tuple] = []
    skipped = 0
    unknown: Counter = Counter()
    for i in slow_idx.tolist():
        pg = int(layout.page_of_line[i])
        ms = int(page_ms[pg])
        verdict = line_verdict(i + 1 - int(layout.page_first[pg]), line_text(i), ms, ms + future_ms, max_future_s,
                               series_key)
        if verdict is None:
            continue
        if verdict.__class__ is Reject:
            rejects.append((pg, verdict))
        elif verdict[0] is SKIP:
            skipped += 1
        elif verdict[0] is UNKNOWN:
            unknown[verdict[1]] += 1
        else:
            samples.append((i + 1, METRICS.index(verdict[0]), *verdict[1:]))
    return rejects, samples, skipped, unknown


def merge_slow(line_no: np.ndarray, m_code: np.ndarray, s_no: np.ndarray, vals: np.ndarray, stamps: np.ndarray,
               slow_samples: list[tuple]) -> tuple[np.ndarray, ...]:
    """The bulk path's samples and the per-line rules' (``slow_verdicts``), in line order."""
    if not slow_samples:
        return line_no, m_code, s_no, vals, stamps
    extra = np.array([s[0] for s in slow_samples], dtype=np.int64)
    order = np.argsort(np.concatenate((line_no, extra)), kind="stable")
    return (np.concatenate((line_no, extra))[order],
            *(np.concatenate((a, [s[k] for s in slow_samples]))[order]
              for k, a in enumerate((m_code, s_no, vals, stamps), 1)))


def first_copies(page: np.ndarray, s_no: np.ndarray, m_code: np.ndarray, n_series: int) -> np.ndarray | None:
    """Which samples to keep when a (series, metric) repeats within a page: the first copy of each.
    None when nothing repeats at all (the usual page): one count over (series, metric) says so, and
    the exact per-page check runs only then."""
    if not len(s_no) or np.bincount(s_no * len(METRICS) + m_code).max() <= 1:
        return None
    cell = pl.Series((page * (n_series + 1) + s_no) * len(METRICS) + m_code)
    return cell.is_first_distinct().to_numpy()


def _points(page, line_no, m_code, s_no, vals, stamps) -> pl.DataFrame:
    """ParsedPages.points from its columns (metric as codes into METRICS, ts in epoch ms)."""
    return pl.DataFrame([
        pl.Series("page", page, dtype=pl.Int64),
        pl.Series("line_no", line_no, dtype=pl.Int64),
        _metric_column(m_code).alias("metric"), pl.Series("series", s_no, dtype=pl.Int64),
        pl.Series("value", vals, dtype=pl.Float64),
        pl.Series("ts", stamps, dtype=pl.Int64).cast(pl.Datetime("ms")),  # (numpy's would read int64 min as NaT)
    ])


def _metric_codes(names: pl.Series, head: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each name's position in METRICS (-1 for any other name) and its run's number. A family's lines
    are adjacent, so only the first line of each run of equal names (``head``) is looked up."""
    run = np.cumsum(head) - 1
    if names.is_empty():
        return np.zeros(0, dtype=np.int64), run
    run_code = (names.filter(pl.Series(head)).cast(_METRIC_ENUM, strict=False).to_physical()
                .cast(pl.Int64).fill_null(-1).to_numpy())
    return np.take(run_code, run), run


@dataclass(frozen=True)
class _Numbered:
    """One parse's label numbering: each good line's label text (views into a copy of the distinct
    texts, not into the page), its series number (-1: the per-line rules decide) and the series
    state it left."""

    texts: pl.Series
    numbers: np.ndarray
    frames: tuple[pl.DataFrame, ...]
    keys: tuple[pl.Series, ...]
    count: int


# The last few parses' numberings: a scraper reads the same exporters every round, and their pages
# hold the same label texts in the same order (only the values change). When every line's label
# text is one of these parses', one comparison replaces the hashing, the distinct texts and their
# numbering; otherwise the per-text cache above serves the texts seen before. Several, not one: a
# round is parsed in pieces (``pieces``), and a large cluster's round written in several batches
# (scrape.BATCH_CHARS). Kept while they hold at most _RECENT_LINES lines together (~48 bytes a
# line: ~28 MB, four 10,240-GPU rounds of ~145,000 lines).
_RECENT_LINES = 600_000
_recent: tuple[_Numbered, ...] = ()


def _recalled(labels: pl.Series) -> _Numbered | None:
    """The recent numbering whose label texts are exactly ``labels``, if any (first and last text
    compared before the whole column)."""
    for entry in _recent:  # one snapshot: another thread may replace the tuple meanwhile
        if (len(entry.texts) == len(labels) > 0 and entry.texts[0] == labels[0]
                and entry.texts[-1] == labels[-1] and (labels == entry.texts).all()):
            return entry
    return None


def _number_label_texts(labels: pl.Series, series: _Series) -> np.ndarray | None:
    """Each line's series number from its label text (-1: the per-line rules decide), the distinct
    texts read once and numbered into ``series`` (still empty) in first-seen order. None on a 64-bit
    hash collision."""
    global _recent
    last = _recalled(labels)
    if last is not None:
        series.restore(last.frames, last.keys, last.count)
        return last.numbers
    line = np.arange(len(labels))
    hashes = labels.hash()
    first = (pl.DataFrame({"hash": hashes, "line": line})  # the first line of each hash
             .select(pl.col("line").first().over("hash"))["line"].to_numpy())
    is_first = first == line
    first_at = np.flatnonzero(is_first)
    text_no = np.take(np.cumsum(is_first) - 1, first)  # each line's: its hash's first-seen position
    uniq_text = labels.gather(first_at)
    if not (labels == uniq_text.gather(text_no)).all():  # a 64-bit hash collision: be exact instead
        return None
    sets = _label_sets_cached(uniq_text, hashes.gather(first_at))
    ok = sets["ok"].to_numpy()
    number_of_text = np.full(len(uniq_text), -1, dtype=np.int64)
    if ok.any():
        simple = sets.filter(pl.Series(ok))
        number_of_text[ok] = series.add_frame(simple["key"], simple.select(SERIES_COLUMNS))
    numbers = number_of_text[text_no]
    numbers.setflags(write=False)  # shared with later parses through _recent
    entry = _Numbered(sets["labels"].gather(text_no), numbers, tuple(series.frames),
                      tuple(series.bulk_keys), series.count)
    kept, lines = [entry], len(numbers)
    for older in _recent:
        lines += len(older.numbers)
        if lines > _RECENT_LINES:
            break
        kept.append(older)
    _recent = tuple(kept)
    return numbers


def _value_ok(codes: np.ndarray, value: np.ndarray) -> np.ndarray:
    """``value_problem(...) is None`` for finite values, in bulk: a DCGM blank or inside the range."""
    with np.errstate(invalid="ignore"):
        blank = ((value >= dcgm.SENTINEL_FLOOR) | (_FP64[codes] & (value >= dcgm.DCGM_FP64_BLANK))
                 | (_INT32[codes] & (value >= dcgm.DCGM_INT32_BLANK) & (value <= 0x7FFFFFFF)))
        return blank | ((value >= _LO[codes]) & (value <= _HI[codes]))
