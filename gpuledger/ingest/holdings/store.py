"""Device holdings → ``job_allocations``, with precedence over labels and the disagreements counted.

A holding (``device_holdings``) says the scheduler gave a device to a job from ``first_seen`` to
``last_seen`` (once ``ended``). :func:`link_holdings` writes one ``job_allocations`` row per
holding whose device and job the warehouse knows, ``source`` = the holding's source, and removes
the label-derived rows of those jobs: where the scheduler side speaks, it decides. Label-derived
links are then never made for such jobs (``device_links.sql`` skips jobs with scheduler rows).

Samples whose labels contradict the scheduler side are not dropped or moved: they stay on the
device, attributed to whoever held it (or to no one: unallocated capacity), and every such run of
samples is kept once in ``attribution_disagreements`` and summed per device and hour into
``quarantine`` (source ``attribution``) by :func:`record_disagreements`, so
``gpuledger warehouse quarantine --source attribution`` shows them.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, fields
from datetime import datetime, timedelta

import duckdb
import polars as pl

from gpuledger.rules.clock import utc_now
from gpuledger.sql import load_sql
from gpuledger.warehouse import transaction, upsert

SOURCES = ("slurm-prolog", "slurm-scontrol", "pod-resources")
DISAGREEMENT_SOURCE = "attribution"

_LINKS = load_sql(__package__, "link_holdings.sql")
_DISAGREEMENTS = load_sql(__package__, "disagreements.sql")
_SUMMARY = load_sql(__package__, "disagreement_summary.sql")
_HOLDING_ALLOCATIONS = load_sql(__package__, "holding_allocations.sql")

HOLDING_COLUMNS = {
    "cluster": pl.String, "source": pl.String, "scheduler_job": pl.String, "host": pl.String,
    "device_id": pl.String, "first_seen": pl.Datetime("us"), "last_seen": pl.Datetime("us"),
    "ended": pl.Boolean, "gpu_uuid": pl.String, "mig_instance_id": pl.Int32, "gpu_index": pl.Int32,
    "share": pl.Float64, "pod_uid": pl.String, "namespace": pl.String, "pod": pl.String,
    "container": pl.String, "resource": pl.String,
}


def holdings_frame(rows: list[dict]) -> pl.DataFrame:
    """Rows (dicts with any of :data:`HOLDING_COLUMNS`) as a frame of the table's shape."""
    frame = pl.DataFrame(rows, schema=HOLDING_COLUMNS) if rows else pl.DataFrame(schema=HOLDING_COLUMNS)
    return frame.with_columns(pl.col("mig_instance_id").fill_null(-1), pl.col("ended").fill_null(False))


def write_holdings(con: duckdb.DuckDBPyConnection, holdings: pl.DataFrame) -> int:
    """Upsert holdings on their natural key; a later observation moves ``last_seen`` / ``ended``
    forward only (re-reading an older spool or poll never shortens a holding). Returns rows offered."""
    if holdings.is_empty():
        return 0
    keys = ["cluster", "source", "scheduler_job", "host", "device_id", "first_seen"]
    con.register("_holdings_in", holdings.to_arrow())
    try:
        stored = con.sql(
            "SELECT i.cluster, i.source, i.scheduler_job, i.host, i.device_id, i.first_seen, "
            "d.last_seen AS stored_last, d.ended AS stored_ended FROM _holdings_in i JOIN device_holdings d "
            f"USING ({', '.join(keys)})").pl()  # sql(): execute() results have no .pl() in duckdb 2.0
    finally:
        con.unregister("_holdings_in")
    merged = holdings.join(stored, on=keys, how="left").with_columns(
        last_seen=pl.max_horizontal("last_seen", "stored_last"),
        ended=pl.col("ended") | pl.col("stored_ended").fill_null(False),
    ).drop("stored_last", "stored_ended")
    return upsert(con, "device_holdings", merged)


def open_holdings(con: duckdb.DuckDBPyConnection, *, cluster: str, host: str, source: str) -> list[dict]:
    """The holdings of ``source`` on ``host`` not yet ended (for an agent that restarts)."""
    return con.sql("SELECT * FROM device_holdings WHERE cluster = $c AND host = $h AND source = $s AND NOT ended",
                   params={"c": cluster, "h": host, "s": source}).pl().to_dicts()


@dataclass(frozen=True)
class LinkResult:
    linked: int          # job x device intervals written from holdings
    no_device: int       # holdings whose device the inventory does not know (yet)
    no_job: int          # holdings whose job has no jobs row (yet)
    disagreements: int   # samples whose labels the scheduler side contradicts
    mig_unplaced: int = 0  # Slurm holdings of a MIG-partitioned GPU no instance is labelled with (yet)

    @classmethod
    def total(cls, results) -> LinkResult:
        return cls(*(sum(getattr(r, f.name) for r in results) for f in fields(cls)))

    def said(self) -> str:
        """What a pass did, as the commands' summary lines say it."""
        line = (f"{self.linked} job x device intervals linked, {self.no_device} waiting for their device, "
                f"{self.no_job} for their job record; {self.disagreements} label disagreements")
        if self.mig_unplaced:
            line += (f"; {self.mig_unplaced} Slurm holdings of a MIG-partitioned GPU not placed: no instance "
                     "of it is labelled with their job, so each job counts its own record's GPUs (sacct's MIG "
                     "type) until dcgm-exporter's HPC job mapping labels one")
        return line


def partitioned_gpus(con: duckdb.DuckDBPyConnection) -> frozenset[str]:
    """The GPUs the inventory knows as MIG-partitioned, keyed as checks.screen_holdings keys a
    whole GPU: ``cluster/uuid`` and ``cluster/host/index N``."""
    rows = con.execute("SELECT DISTINCT cluster, gpu_uuid, host, gpu_index FROM gpus WHERE mig_instance_id >= 0"
                       ).fetchall()
    return frozenset([f"{c}/{u}" for c, u, _, _ in rows]
                     + [f"{c}/{h}/index {i}" for c, _, h, i in rows if i is not None])


def link_holdings(con: duckdb.DuckDBPyConnection, *, since: datetime | None = None,
                  now: datetime | None = None, check: bool = True, cluster: str | None = None,
                  check_from: datetime | None = None) -> LinkResult:
    """Write the ``job_allocations`` of every holding seen since ``since`` (naive UTC; None: all),
    of ``cluster`` (None: every cluster).

    Holdings whose device or job is not known yet are left for a later run (counted); re-running
    changes nothing. Then (``check``) counts disagreements over the samples those holdings cover
    (from ``check_from`` on, when given: the samples before it were checked by an earlier pass).
    """
    with transaction(con):
        con.execute(_LINKS, {"since": since, "cluster": cluster}).fetchall()
        no_device, no_job, mig_unplaced = con.execute(
            "SELECT count(*) FILTER (WHERE gpu_id IS NULL AND NOT mig_unplaced), "
            "count(*) FILTER (WHERE gpu_id IS NOT NULL AND job_id IS NULL), "
            "count(*) FILTER (WHERE mig_unplaced) FROM _holding_links").fetchall()[0]
        if mig_unplaced:  # whole-GPU rows an earlier pass wrote for such a job go: its record's GPUs count
            con.execute(
                "DELETE FROM job_allocations a USING (SELECT cluster, job_id FROM _holding_links "
                "WHERE job_id IS NOT NULL GROUP BY ALL HAVING bool_and(mig_unplaced)) u "
                "WHERE a.cluster = u.cluster AND a.job_id = u.job_id AND a.source IN (SELECT unnest($sources))",
                {"sources": list(SOURCES)}).fetchall()
        con.execute("DELETE FROM _holding_links WHERE gpu_id IS NULL OR job_id IS NULL").fetchall()
        # One witness per job: the prolog saw the allocation itself, a poll only its running part.
        con.execute("DELETE FROM _holding_links p USING (SELECT DISTINCT cluster, job_id FROM _holding_links "
                    "WHERE source = 'slurm-prolog') w WHERE p.source = 'slurm-scontrol' "
                    "AND p.cluster = w.cluster AND p.job_id = w.job_id").fetchall()
        # A job the scheduler side speaks for: its label-derived rows go, and its own rows are
        # written again from the holdings (one row per device and start).
        con.execute(
            "DELETE FROM job_allocations a USING (SELECT DISTINCT cluster, job_id FROM _holding_links) l "
            "WHERE a.cluster = l.cluster AND a.job_id = l.job_id "
            "AND (a.source = 'labels' OR a.source IN (SELECT unnest($sources)))",
            {"sources": list(SOURCES)}).fetchall()
        con.execute(_HOLDING_ALLOCATIONS).fetchall()
        linked = con.execute("SELECT count(*) FROM (SELECT DISTINCT cluster, job_id, gpu_id, start_time "
                             "FROM _holding_links)").fetchall()[0][0]
        span = con.execute("SELECT min(start_time), max(coalesce(end_time, $now)) FROM _holding_links",
                           {"now": now or datetime(9999, 1, 1)}).fetchall()[0]
        con.execute("DROP TABLE _holding_links").fetchall()
        found = 0
        if check and linked and span[0] is not None:
            hi = span[1] if now is None or span[1] <= now else now
            newest = con.execute("SELECT max(ts) FROM gpu_samples").fetchall()[0][0]
            lo = span[0] if check_from is None else max(span[0], check_from)
            if newest is not None and lo <= min(hi, newest):
                found = record_disagreements(con, start=lo, end=min(hi, newest) + _TICK, cluster=cluster)
    return LinkResult(linked=linked, no_device=no_device, no_job=no_job, disagreements=found,
                      mig_unplaced=mig_unplaced)


_TICK = timedelta(microseconds=1)

# The holdings pass, incremental (the pipelines' `holdings_links`, `gpuledger ingest link-devices`
# without a range, the node-holdings service): each cluster's checkpoint in ingest_checkpoints is
# the newest `last_seen` its last pass saw; the next pass links again only the holdings seen since
# then, less LATE (a node observed before the checkpoint but written after it), and checks only the
# samples since then for disagreements. Open holdings are seen anew by every poll, so each pass
# costs the holdings open or ended lately, however long the history (BENCHMARKS.md "The holdings
# pass at fleet sizes"). What arrives later than LATE is linked by its own writer (every writer of
# holdings, jobs and samples links what it wrote), or by `link-devices --start --end`.
PASS_SOURCE = "holdings"
LATE = timedelta(minutes=15)
FIRST_LOOKBACK = timedelta(days=1)  # a cluster's first pass: the holdings seen in the day before its newest


def pass_scope(cluster: str) -> str:
    """The ingest_checkpoints scope of ``cluster``'s holdings pass."""
    return f"link cluster={cluster}"


@dataclass(frozen=True)
class PassResult:
    cluster: str
    since: datetime | None     # the holdings seen since then were linked (None: the cluster has none)
    position: datetime | None  # the checkpoint now stored: the newest last_seen the pass saw
    holdings: int              # holdings the pass read
    links: LinkResult


def holdings_pass(con: duckdb.DuckDBPyConnection, *, cluster: str, now: datetime | None = None) -> PassResult:
    """The incremental holdings pass of ``cluster``: :func:`link_holdings` over the holdings seen
    since the cluster's checkpoint (less LATE; a first pass: FIRST_LOOKBACK before the newest), the
    disagreement check over the samples since then, and the checkpoint moved to the newest
    ``last_seen`` — in one transaction. Re-running changes nothing but the work redone."""
    with transaction(con):
        stored = con.execute("SELECT position FROM ingest_checkpoints WHERE source = $s AND scope = $scope",
                             {"s": PASS_SOURCE, "scope": pass_scope(cluster)}).fetchall()
        newest = con.execute("SELECT max(last_seen) FROM device_holdings WHERE cluster = $c",
                             {"c": cluster}).fetchall()[0][0]
        before = datetime.fromisoformat(stored[0][0]) if stored else None
        if newest is None:
            return PassResult(cluster, None, before, 0, LinkResult(0, 0, 0, 0))
        since = before - LATE if before is not None else newest - FIRST_LOOKBACK
        holdings = con.execute("SELECT count(*) FROM device_holdings WHERE cluster = $c AND last_seen >= $since",
                               {"c": cluster, "since": since}).fetchall()[0][0]
        links = link_holdings(con, since=since, now=now, cluster=cluster, check_from=since)
        position = max(newest, before) if before is not None else newest
        upsert(con, "ingest_checkpoints", pl.DataFrame({
            "source": [PASS_SOURCE], "scope": [pass_scope(cluster)], "position": [position.isoformat()],
            "updated_at": [utc_now()]}))
    return PassResult(cluster, since, position, holdings, links)


def holding_clusters(con: duckdb.DuckDBPyConnection) -> list[str]:
    """The clusters device_holdings holds rows of."""
    return [r[0] for r in con.execute("SELECT DISTINCT cluster FROM device_holdings ORDER BY 1").fetchall()]


def find_disagreements(con: duckdb.DuckDBPyConnection, *, start: datetime, end: datetime,
                       cluster: str | None = None) -> pl.DataFrame:
    """Labelled samples in [start, end) (of ``cluster``'s devices; None: all) that the scheduler
    side contradicts: gpu_id, ts, label_job, holder_jobs ('(nobody)' when no one held the device then)."""
    return con.sql(_DISAGREEMENTS, params={"lo": start, "hi": end, "cluster": cluster}).pl()


def disagreement_summary(con: duckdb.DuckDBPyConnection, *, start: datetime, end: datetime) -> pl.DataFrame:
    """The stored disagreements of the UTC hours [start, end) touches, one row per (device, hour,
    label, holder): cluster, host, gpu_uuid, mig_instance_id, hour, label_job, holder_jobs,
    samples, first_ts, last_ts."""
    return con.sql(_SUMMARY, params={"lo": start, "hi": end}).pl()


def record_disagreements(con: duckdb.DuckDBPyConnection, *, start: datetime, end: datetime,
                         cluster: str | None = None) -> int:
    """Store every disagreeing sample of [start, end) once (``attribution_disagreements``) and
    show each (device, hour, label, holder) as one quarantine line whose count covers all the
    hour's samples seen so far. Re-running adds nothing. Returns the samples found in the window."""
    if not con.execute("SELECT count(*) FROM job_allocations WHERE source IN (SELECT unnest($s))",
                       {"s": list(SOURCES)}).fetchall()[0][0]:
        return 0
    found = find_disagreements(con, start=start, end=end, cluster=cluster)
    if found.is_empty():
        return 0
    upsert(con, "attribution_disagreements", found, on_conflict="ignore")
    lo, hi = found["ts"].min(), found["ts"].max()
    rows = []
    for r in disagreement_summary(con, start=lo, end=hi).iter_rows(named=True):
        device = r["gpu_uuid"] + (f" GI {r['mig_instance_id']}" if r["mig_instance_id"] >= 0 else "")
        holder = r["holder_jobs"]
        raw = f"labels: {r['label_job']}; scheduler: {holder}"
        rows.append({
            "source": DISAGREEMENT_SOURCE,
            "location": f"{r['cluster']}/{r['host']} {device} hour {r['hour']:%Y-%m-%dT%H:00}Z",
            "raw_text": raw, "raw_md5": hashlib.md5(raw.encode()).hexdigest(),
            "reason": (f"{r['samples']} samples {r['first_ts']:%H:%M}-{r['last_ts']:%H:%M}Z labelled "
                       f"{r['label_job']}, "
                       + ("held by no one: unallocated capacity" if holder == "(nobody)"
                          else f"held by {holder}: attributed to the holder")),
            "quarantined_at": utc_now(),
        })
    upsert(con, "quarantine", pl.DataFrame(rows, schema_overrides={"quarantined_at": pl.Datetime("us")}))
    return found.height
