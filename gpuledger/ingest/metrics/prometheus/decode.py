"""Prometheus ``query_range`` matrices -> long DCGM samples (metric, series, ts, value) and the
quarantine rows for what cannot be read. Pure: bytes or parsed JSON in, frames out.

The bulk path (``points_from_matrix_json``) reads each distinct label set once with orjson and all
points as one CSV text for polars' reader; any body not in Prometheus' plain matrix layout goes
through the generic path (``points_from_results``).

Labels: Prometheus renames a series' labels that collide with target labels to ``exported_*``
(``exported_pod``, ``exported_namespace``...). When any series of a scrape target (``instance``,
``job``) carries an ``exported_*`` Kubernetes label, that target's plain ``pod`` / ``namespace`` /
``container`` labels name the exporter's own pod, not the GPU's workload, and are ignored for it.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from itertools import chain
from operator import itemgetter

import numpy as np
import orjson
import polars as pl

from gpuledger import warehouse
from gpuledger.errors import printable
from gpuledger.ingest.metrics.exposition import normalize_labels, series_frame
from gpuledger.ingest.metrics.values import split_invalid
from gpuledger.rules.clock import epoch_iso_z, iso_z, iso_z_us

SOURCE = "prometheus"
_K8S_EXPORTED = ("exported_namespace", "exported_pod", "exported_container", "exported_pod_name",
                 "exported_pod_namespace", "exported_container_name")

# Metrics worth asking for: those that feed a gpu_samples column (fb free/reserved feed fb_total).


class NotPlainMatrix(ValueError):
    """The body is not a successful matrix in the exact layout ``points_from_matrix_json`` reads."""


_MATRIX_HEAD = b'{"status":"success","data":{"resultType":"matrix","result":['
_MATRIX_TAIL = b"]}}"
_SERIES_HEAD, _SERIES_SEP, _LABELS_END, _SERIES_TAIL = b'{"metric":', b']]},{"metric":', b'},"values":[[', b"]]}"


def points_from_matrix_json(content: bytes, metrics: Sequence[str], *,
                            url: str) -> tuple[pl.DataFrame, pl.DataFrame, list] | None:
    """A query_range response body -> what ``points_from_results`` gives for it, read in bulk: each
    distinct label set once (orjson), every point at once (the ``[t,"v"]`` pairs become one CSV text
    for polars' reader). None when a series lacks a wanted ``__name__``; raises NotPlainMatrix when
    the body is anything but a plain successful matrix in Prometheus' layout (an error, warnings,
    histograms, a label value holding the separators below...): the caller then decodes it whole."""
    if not (content.startswith(_MATRIX_HEAD) and content.endswith(_MATRIX_TAIL)):
        raise NotPlainMatrix
    body = content[len(_MATRIX_HEAD):-len(_MATRIX_TAIL)]
    if not body:
        return points_from_results({m: [] for m in metrics}, url=url)
    if not (body.startswith(_SERIES_HEAD) and body.endswith(_SERIES_TAIL)):
        raise NotPlainMatrix
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
                raise NotPlainMatrix
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
        raise NotPlainMatrix from None
    if pairs.height != sum(lengths) or pairs.null_count().sum_horizontal().item():
        raise NotPlainMatrix
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
    # Two label sets that name one series (the same GPU and job labels, scraped by two Prometheus
    # jobs, or under two host-label spellings): the scrape path's duplicate rule, per series.
    canonical: dict[tuple, int] = {}
    canon_of = np.fromiter((canonical.setdefault(row, k) for k, row in enumerate(rows)), dtype=np.int64,
                           count=len(rows))
    # The same series listed twice (identical labels), or one series with two points at one time,
    # are the same rule's cases: one cell (metric, series, time) given twice.
    copy = per_point[keep[per_point]]  # each point's series in the answer
    if len(canonical) < len(rows) or _repeats_a_cell(frame, copy, series_metric, series_key, keep):
        frame, copy_rejects = _refuse_copies(frame.with_columns(
            series=pl.Series(canon_of[frame["series"].to_numpy()]), copy=pl.Series(copy, dtype=pl.Int64)),
            rows, labels, url)
        rejects.extend(copy_rejects)
    frame = frame.with_columns(pl.col("ts").cast(pl.Datetime("ms")))
    series = series_frame(rows)
    good, bad = split_invalid(frame)
    if bad.height:
        bad = bad.join(series, on="series", how="left")
    for r in bad.iter_rows(named=True):
        where = f"{url} {r['metric']}{{UUID={r['gpu_uuid']},GPU_I_ID={r['mig_instance_id']}}}@{iso_z_us(r['ts'])}"
        rejects.append(warehouse.QuarantineRow(
            SOURCE, where, f"{r['metric']} {r['value']!r} {iso_z_us(r['ts'])}", r["reason"]))
    return good, series, rejects


def _refuse_copies(frame: pl.DataFrame, rows: list[tuple], labels: list[dict],
                   url: str) -> tuple[pl.DataFrame, list]:
    """``frame`` (metric, series, ts, value, copy: the answer's series number) where several copies
    name one series: a point the copies agree on is kept once (the first copy's); a timestamp where
    they disagree keeps no value at all (which one is true is a guess). One quarantine row per extra
    copy says what was refused and why."""
    cell = ["metric", "series", "ts"]
    frame, rejects = _refuse_repeats_within(frame, rows, url)
    cells = (frame.group_by(cell).agg(n=pl.len(), values=pl.col("value").n_unique(),
                                      first=pl.col("copy").min())
             .filter(pl.col("n") > 1))
    if cells.is_empty():
        return frame.drop("copy"), rejects
    tagged = frame.join(cells, on=cell, how="left")
    conflict = pl.col("values").fill_null(1) > 1
    extra = pl.col("first").is_not_null() & (pl.col("copy") != pl.col("first"))
    summary = (tagged.filter(extra).group_by("metric", "series", "copy", "first")
               .agg(agree=(~conflict).sum(), disagree=conflict.sum(),
                    at=pl.col("ts").filter(conflict).min(), since=pl.col("ts").min())
               .sort("series", "metric", "copy"))
    for r in summary.iter_rows(named=True):
        mine, theirs = labels[r["copy"]], labels[r["first"]]
        differs = ", ".join(f"{k}={mine.get(k)!r} vs {theirs.get(k)!r}"
                            for k in sorted((set(mine) | set(theirs)) - {"__name__"}) if mine.get(k) != theirs.get(k))
        differs = differs or "listed twice with identical labels"
        what = f"{r['agree']} points equal to the first copy's (stored once)"
        if r["disagree"]:
            at = epoch_iso_z(r["at"] / 1000)
            what += f", {r['disagree']} with another value at the same time (none stored; first at {at})"
        uuid, mig = rows[r["series"]][0], rows[r["series"]][1]
        rejects.append(warehouse.QuarantineRow(
            SOURCE, f"{url} {r['metric']}{{UUID={uuid},GPU_I_ID={mig}}}@{_iso(r['since'] // 1000)}",
            printable(f"{r['metric']}{ {**mine, '__name__': r['metric']} }", limit=2000),
            f"duplicate series: the same GPU, metric and job labels as another series ({differs}): {what}"))
    good = tagged.filter(~conflict & ~extra).drop("copy", "n", "values", "first")
    return good, rejects


def _repeats_a_cell(frame: pl.DataFrame, copy: np.ndarray, series_metric: list[int], series_key: np.ndarray,
                    keep: np.ndarray) -> bool:
    """Whether a (metric, series, time) may hold two points: a series listed twice (two answer
    series with one metric and key), or a time that does not increase within one answer series
    (its points are contiguous). Cheap: a pass over the series, one vectorised diff over the points."""
    pairs = [(series_metric[i], int(series_key[i])) for i in np.flatnonzero(keep)]
    if len(set(pairs)) < len(pairs):
        return True
    if len(copy) < 2:
        return False
    ts = frame["ts"].to_numpy()
    return bool(np.any((np.diff(ts) <= 0) & (np.diff(copy) == 0)))


def _refuse_repeats_within(frame: pl.DataFrame, rows: list[tuple], url: str) -> tuple[pl.DataFrame, list]:
    """``frame`` (with ``copy``) where one series of the answer gives one time twice: the same value
    again is kept once, two values keep none (which one is true is a guess); one quarantine row
    per series says how many times were repeated and refused."""
    key = ["metric", "series", "ts", "copy"]
    repeated = (frame.group_by(key).agg(n=pl.len(), values=pl.col("value").n_unique())
                .filter(pl.col("n") > 1))
    if repeated.is_empty():
        return frame, []
    rejects = []
    summary = (repeated.group_by("metric", "series", "copy")
               .agg(times=pl.len(), conflicting=(pl.col("values") > 1).sum(), since=pl.col("ts").min())
               .sort("series", "metric", "copy"))
    for r in summary.iter_rows(named=True):
        uuid, mig = rows[r["series"]][0], rows[r["series"]][1]
        rejects.append(warehouse.QuarantineRow(
            SOURCE, f"{url} {r['metric']}{{UUID={uuid},GPU_I_ID={mig}}}@{_iso(r['since'] // 1000)}",
            f"{r['metric']} of {uuid}: {r['times']} times given more than once",
            f"one series gives {r['times']} time{'s' if r['times'] != 1 else ''} more than once: {r['conflicting']} with two values "
            f"(none stored), {r['times'] - r['conflicting']} repeating one value (stored once)"))
    tagged = frame.join(repeated.select(*key, "values"), on=key, how="left")
    kept = (tagged.filter(pl.col("values").fill_null(1) == 1).drop("values")
            .unique(subset=key, keep="first", maintain_order=True))
    return kept, rejects


def refuse_outside_range(points: pl.DataFrame, series: pl.DataFrame, start_s: int, end_s: int,
                         *, url: str) -> tuple[pl.DataFrame, list]:
    """(the points within [start_s, end_s), one quarantine row per series for those outside it): a
    server (or a proxy) that answers beyond the asked range must not write outside the checkpointed
    chunk."""
    ts = pl.col("ts").cast(pl.Int64)
    inside = (ts >= start_s * 1000) & (ts < end_s * 1000)
    outside = points.filter(~inside)
    if outside.is_empty():
        return points, []
    asked = f"[{_iso(start_s)}, {_iso(end_s)})"
    rejects = []
    per_series = (outside.group_by("metric", "series").agg(n=pl.len(), first=pl.col("ts").min())
                  .join(series.select("series", "gpu_uuid", "mig_instance_id"), on="series", how="left")
                  .sort("series", "metric"))
    for r in per_series.iter_rows(named=True):
        rejects.append(warehouse.QuarantineRow(
            SOURCE, f"{url} {r['metric']}{{UUID={r['gpu_uuid']},GPU_I_ID={r['mig_instance_id']}}}@{asked}",
            f"{r['metric']} {r['n']} points from {iso_z(r['first'])}",
            f"{r['n']} points outside the asked range {asked}: not stored"))
    return points.filter(inside), rejects


def _iso(epoch_s: int) -> str:
    return epoch_iso_z(epoch_s)


def _epoch_ms(seconds: list) -> pl.Series:
    """Prometheus timestamps (whole seconds come as ints, others as floats) -> epoch ms."""
    try:
        return pl.Series(seconds, dtype=pl.Int64) * 1000
    except (TypeError, pl.exceptions.PolarsError):
        return (pl.Series(seconds, dtype=pl.Float64, strict=False) * 1000).round().cast(pl.Int64)
