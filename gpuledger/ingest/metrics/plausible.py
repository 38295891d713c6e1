"""Sample times that cannot be true: before 2000-01-01 (a clock at the epoch, milliseconds read as
seconds) or further in the future than the allowed skew. Such a sample would register its GPU as
present since 1970 and bill decades of idle capacity, so it is refused (quarantined, one row per
device with the count and the first such time) by every DCGM source before anything is written."""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime

import polars as pl

from gpuledger import warehouse
from gpuledger.config_store import stored_config_in_force
from gpuledger.ingest.jobs.checks import EARLIEST
from gpuledger.ingest.metrics.dcgm_fields import canonical_host_expr
from gpuledger.ingest.metrics.exposition import DEFAULT_MAX_FUTURE_S


def split_implausible_times(wide: pl.DataFrame, *, source: str, location: str,
                            now_s: float | None = None,
                            max_future_s: float = DEFAULT_MAX_FUTURE_S) -> tuple[pl.DataFrame, list]:
    """(the rows of ``wide`` stamped within [2000-01-01, now + max_future_s], quarantine rows for
    the others). ``wide`` has gpu_uuid, mig_instance_id and ts (naive UTC)."""
    if wide.is_empty():
        return wide, []
    now_s = time.time() if now_s is None else now_s
    latest = datetime.utcfromtimestamp(now_s + max_future_s)  # noqa: DTZ004 - naive UTC, as ts is
    ts = pl.col("ts")
    bad = (ts < EARLIEST) | (ts > latest)
    if not wide.select(bad.any()).item():
        return wide, []
    refused = (wide.filter(bad)
               .group_by("gpu_uuid", "mig_instance_id", (ts < EARLIEST).alias("early"))
               .agg(n=pl.len(), first=ts.min(), last=ts.max())
               .sort("gpu_uuid", "mig_instance_id", "early"))
    rejects = []
    for r in refused.iter_rows(named=True):
        when = f"{r['first']:%Y-%m-%dT%H:%M:%S}Z" + (f"..{r['last']:%Y-%m-%dT%H:%M:%S}Z" if r["n"] > 1 else "")
        why = (f"sample time before {EARLIEST:%Y-%m-%d}: a clock at the epoch or a unit error (milliseconds "
               "read as seconds?); fix the exporter's clock" if r["early"] else
               f"sample time more than {max_future_s:g} s after now ({latest:%Y-%m-%dT%H:%M:%S}Z, the "
               "allowed clock skew); fix the exporter's or this host's clock")
        rejects.append(warehouse.QuarantineRow(
            source, f"{location} UUID={r['gpu_uuid']},GPU_I_ID={r['mig_instance_id']}@{when}",
            f"{r['n']} samples of {r['gpu_uuid']} stamped {when}", f"{r['n']} samples refused: {why}"))
    return wide.filter(~bad), rejects


# --- the cluster's own window (the stored config) ----------------------------------------------------
@dataclass(frozen=True)
class PlausibleWindow:
    earliest: datetime  # naive UTC: samples before it are refused
    earliest_from: str  # where that day comes from, for the reason
    max_future_s: float  # how far after now a sample may be stamped


def window_in_force(con, cluster: str) -> PlausibleWindow:
    """The window for ``cluster`` from the warehouse's stored config (``clusters.<name>.first_day``,
    ``policy.samples.clock_skew_seconds``), else 2000-01-01 and the default skew."""
    cfg = stored_config_in_force(con)
    if cfg is None:
        return PlausibleWindow(EARLIEST, "the earliest gpuledger accepts", DEFAULT_MAX_FUTURE_S)
    day, where = cfg.first_day(cluster)
    return PlausibleWindow(datetime.combine(day, datetime.min.time()), where, cfg.policy.samples.clock_skew_seconds)


def refuse_before_first_day(con, wide: pl.DataFrame, *, cluster: str, source: str,
                            location: str) -> tuple[pl.DataFrame, list]:
    """``wide`` without the rows stamped before ``cluster``'s configured first day (one quarantine
    row per device, as :func:`split_implausible_times` does for 2000-01-01)."""
    if wide.is_empty():
        return wide, []
    window = window_in_force(con, cluster)
    if window.earliest <= EARLIEST:  # the floor itself is checked where the samples are parsed
        return wide, []
    early = pl.col("ts") < window.earliest
    if not wide.select(early.any()).item():
        return wide, []
    refused = (wide.filter(early).group_by("gpu_uuid", "mig_instance_id")
               .agg(n=pl.len(), first=pl.col("ts").min(), last=pl.col("ts").max())
               .sort("gpu_uuid", "mig_instance_id"))
    rows = []
    for r in refused.iter_rows(named=True):
        when = f"{r['first']:%Y-%m-%dT%H:%M:%S}Z" + (f"..{r['last']:%Y-%m-%dT%H:%M:%S}Z" if r["n"] > 1 else "")
        rows.append(warehouse.QuarantineRow(
            source, f"{location} UUID={r['gpu_uuid']},GPU_I_ID={r['mig_instance_id']}@{when}",
            f"{r['n']} samples of {r['gpu_uuid']} stamped {when}",
            f"{r['n']} samples refused: sample time before {window.earliest:%Y-%m-%d} ({window.earliest_from}, "
            f"cluster {cluster}'s first day); fix the exporter's clock, or the day in the config if it is wrong"))
    return wide.filter(~early), rows


# --- one GPU UUID on two hosts --------------------------------------------------------------------
_CONFLICT = ("GPU {uuid} is reported by {n} hosts ({hosts}); a UUID names one physical GPU, so "
             "{host}'s {points} samples are refused and {kept}'s kept (the first host, by name): fix the "
             "exporter whose labels are wrong (a copied config, a stale Hostname)")


def _conflicts(pairs: pl.DataFrame) -> pl.DataFrame:
    """(gpu_uuid, host, n) -> the pairs to refuse: every host of a UUID but its first by name, with
    that first host (``kept``) and all of the UUID's hosts (``hosts``)."""
    per_uuid = pairs.group_by("gpu_uuid").agg(kept=pl.col("host").min(), hosts=pl.col("host").unique().sort())
    return (pairs.join(per_uuid, on="gpu_uuid").filter(pl.col("host") != pl.col("kept"))
            .sort("gpu_uuid", "host"))


def _rows(conflicts: pl.DataFrame, source: str, location: str) -> list:
    return [warehouse.QuarantineRow(
        source, f"{location} UUID={r['gpu_uuid']} host={r['host']}",
        f"{r['n']} samples of {r['gpu_uuid']} from host {r['host']}",
        _CONFLICT.format(uuid=r["gpu_uuid"], n=len(r["hosts"]), hosts=", ".join(r["hosts"]), host=r["host"],
                         points=r["n"], kept=r["kept"]))
        for r in conflicts.iter_rows(named=True)]


def refuse_host_conflicts_wide(wide: pl.DataFrame, *, source: str, location: str) -> tuple[pl.DataFrame, list]:
    """``wide`` rows (host canonical) without those of a UUID's second, third... host."""
    if wide.is_empty() or "host" not in wide.columns:
        return wide, []
    pairs = wide.group_by("gpu_uuid", "host").agg(n=pl.len())
    if pairs.height == pairs["gpu_uuid"].n_unique():
        return wide, []
    conflicts = _conflicts(pairs)
    return wide.join(conflicts.select("gpu_uuid", "host"), on=["gpu_uuid", "host"], how="anti"), \
        _rows(conflicts, source, location)


def refuse_host_conflicts(points: pl.DataFrame, series: pl.DataFrame, *, source: str,
                          location: str) -> tuple[pl.DataFrame, list]:
    """The same rule on numbered series (``points`` metric, series, ts, value; ``series`` a
    ``series_frame`` whose hosts are not yet canonical), before copies are collapsed by device."""
    if points.is_empty() or series.is_empty():
        return points, []
    hosts = series.select("series", "gpu_uuid", canonical_host_expr("host"))
    if hosts.select(pl.struct("gpu_uuid", "host").n_unique()).item() == hosts["gpu_uuid"].n_unique():
        return points, []
    counted = points.group_by("series").agg(n=pl.len()).join(hosts, on="series")
    conflicts = _conflicts(counted.group_by("gpu_uuid", "host").agg(pl.col("n").sum()))
    refused = hosts.join(conflicts.select("gpu_uuid", "host"), on=["gpu_uuid", "host"])["series"]
    return points.filter(~pl.col("series").is_in(refused.implode())), _rows(conflicts, source, location)


def refuse_host_conflicts_long(samples: pl.DataFrame, *, source: str,
                               location: str) -> tuple[pl.DataFrame, list]:
    """The same rule on one page's long samples (gpu_uuid, host as the exporter spelled it), before
    the wide pivot keeps one row per device and time and would drop a second host's without a word."""
    if samples.is_empty() or "host" not in samples.columns:
        return samples, []
    hosts = samples.select("gpu_uuid", canonical_host_expr("host").alias("_host"))
    pairs = hosts.group_by("gpu_uuid", "_host").agg(n=pl.len()).rename({"_host": "host"})
    if pairs.height == pairs["gpu_uuid"].n_unique():
        return samples, []
    conflicts = _conflicts(pairs)
    refused = hosts.with_row_index("_row").join(conflicts.select("gpu_uuid", pl.col("host").alias("_host")),
                                               on=["gpu_uuid", "_host"])["_row"]
    keep = ~pl.int_range(pl.len()).is_in(refused.implode())
    return samples.filter(keep), _rows(conflicts, source, location)


_STORED_CONFLICT = ("GPU {uuid} is already stored on host {stored} (cluster {cluster}); a UUID names one "
                    "physical GPU, so host {host}'s {points} samples are refused: fix the exporter whose "
                    "labels are wrong (a copied config, a stale Hostname)")


def refuse_stored_host_conflicts(con, wide: pl.DataFrame, *, cluster: str, source: str,
                                 location: str) -> tuple[pl.DataFrame, list]:
    """``wide`` rows (host canonical) without those of a UUID the warehouse already holds on another
    host of ``cluster``: the across-batches form of :func:`refuse_host_conflicts_wide` (one batch
    brought host A, a later one brings host B). The stored host is kept, being first."""
    if wide.is_empty() or "host" not in wide.columns:
        return wide, []
    pairs = wide.group_by("gpu_uuid", "host").agg(n=pl.len())
    con.register("_uuid_hosts", pairs.to_arrow())
    try:
        clashes = con.execute(
            "SELECT b.gpu_uuid, b.host, b.n, min(g.host) AS stored FROM _uuid_hosts b JOIN gpus g "
            "ON g.cluster = ? AND g.gpu_uuid = b.gpu_uuid AND g.host <> b.host "
            "GROUP BY ALL ORDER BY b.gpu_uuid, b.host", [cluster]).fetchall()
    finally:
        con.unregister("_uuid_hosts")
    if not clashes:
        return wide, []
    refused = pl.DataFrame([(u, h) for u, h, _, _ in clashes], schema=["gpu_uuid", "host"], orient="row")
    rows = [warehouse.QuarantineRow(
        source, f"{location} UUID={uuid} host={host}", f"{n} samples of {uuid} from host {host}",
        _STORED_CONFLICT.format(uuid=uuid, stored=stored, cluster=cluster, host=host, points=n))
        for uuid, host, n, stored in clashes]
    return wide.join(refused, on=["gpu_uuid", "host"], how="anti"), rows
